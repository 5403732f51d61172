"""monai_unc.report.notebook.view: an ipyniivue widget of a case's files (the viewer extra)."""

import nibabel as nib
import numpy as np
import pytest

from monai_unc.report.notebook import view


def _case(tmp_path):
    paths = {}
    rng = np.random.default_rng(0)
    for name, arr in (("image", rng.random((6, 7, 8)).astype(np.float32)),
                      ("seg", (rng.random((6, 7, 8)) > 0.5).astype(np.uint8)),
                      ("mutual_information", rng.random((6, 7, 8)).astype(np.float32))):
        paths[name] = tmp_path / f"c1_{name}.nii.gz"
        nib.save(nib.Nifti1Image(arr, np.diag([1.5, 1.0, 2.0, 1.0])), paths[name])
    return paths


def test_view_loads_the_three_volumes_in_order(tmp_path):
    pytest.importorskip("ipyniivue")
    p = _case(tmp_path)
    w = view(p["image"], p["seg"], p["mutual_information"], uncertainty_colormap="plasma", height=300)
    assert w.height == 300
    assert [v.name for v in w.volumes] == ["c1_image.nii.gz", "c1_seg.nii.gz", "c1_mutual_information.nii.gz"]
    assert [v.colormap for v in w.volumes] == ["gray", "winter", "plasma"]
    assert [v.opacity for v in w.volumes] == [1.0, 0.35, 0.6]
    only = view(uncertainty=p["mutual_information"])
    assert [v.name for v in only.volumes] == ["c1_mutual_information.nii.gz"]


def test_view_refuses_bad_input_before_importing_the_widget(tmp_path):
    p = _case(tmp_path)
    with pytest.raises(ValueError, match="at least one"):
        view()
    with pytest.raises(ValueError, match="prediction: no such file"):
        view(prediction=tmp_path / "missing.nii.gz")
    (tmp_path / "x.png").write_bytes(b"png")
    with pytest.raises(ValueError, match="image must be a NIfTI"):
        view(tmp_path / "x.png")
    with pytest.raises(TypeError, match="uncertainty must be a file path"):
        view(uncertainty=3)
    for bad in (-0.1, 1.5, True):
        with pytest.raises(ValueError, match="uncertainty_opacity"):
            view(p["image"], uncertainty_opacity=bad)
    with pytest.raises(ValueError, match="height"):
        view(p["image"], height=0)
