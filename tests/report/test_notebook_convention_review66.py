"""``notebook.view(convention=...)``: the notebook viewer draws a case in the convention the pages' viewers offer.

Review 66 gave the pages' case figures and NiiVue viewers ``convention="neurological" | "radiological"``; the
notebook viewer (``ipyniivue``) drew every case in NiiVue's default, neurological, with no way to ask otherwise.
"""

import nibabel as nib
import numpy as np
import pytest

from monai_unc.report.notebook import view


def _image(tmp_path):
    path = tmp_path / "c1_image.nii.gz"
    nib.save(nib.Nifti1Image(np.random.default_rng(0).random((4, 5, 6)).astype(np.float32), np.eye(4)), path)
    return path


def test_view_draws_the_radiological_convention_when_asked(tmp_path):
    pytest.importorskip("ipyniivue")
    path = _image(tmp_path)
    assert view(path, convention="radiological").opts.is_radiological_convention is True
    assert view(path).opts.is_radiological_convention is False  # the default, as on the pages
    assert view(path, convention="neurological").opts.is_radiological_convention is False


def test_view_refuses_a_bad_convention_before_importing_the_widget(tmp_path):
    path = _image(tmp_path)
    with pytest.raises(ValueError, match="convention must be 'neurological' or 'radiological', got 'left'"):
        view(path, convention="left")
    with pytest.raises(TypeError, match="convention must be"):
        view(path, convention=True)
