"""Review 61 of the report pages and the notebook viewer."""

from __future__ import annotations

import gzip

import nibabel as nib
import numpy as np
import pytest

from monai_unc.report.palette import class_colors
from monai_unc.report.viewer import case_viewer


# ------------------------------------------------------- notebook colours of labels above 65535 (and below)
def _sampled_labels(top: int, n: int, seed: int) -> np.ndarray:
    """A 3-D label map of ``n`` label values sampled from 1 .. ``top`` (``top`` and 1 among them), background 0."""
    rng = np.random.default_rng(seed)
    values = np.unique(np.r_[1, top, rng.choice(np.arange(1, top + 1), n - 2, replace=False)])
    seg = np.zeros((10, 10, 10), np.int32)
    seg.reshape(-1)[rng.choice(seg.size, values.size, replace=False)] = values
    return seg


def _hex(rgba) -> str:
    return "#{:02x}{:02x}{:02x}".format(*(int(c) for c in rgba[:3]))


@pytest.mark.parametrize(("top", "seed"), [(70000, 0), (65536, 1), (65535, 2), (4097, 3), (300, 4)])
def test_notebook_colours_each_label_as_the_pages_viewer_does(tmp_path, top, seed):
    """Found by review 61: a prediction holding a label above 65535 had no label table in ``notebook.view`` (the
    continuous ``winter`` ramp), so label 70000 and every other label of it were not in their colour of the pages'
    viewer. Every label value of the file, sampled from 0 .. ``top``, now has the pages' colour in the widget."""
    pytest.importorskip("ipyniivue")
    from monai_unc.report.notebook import view

    seg = _sampled_labels(top, 120, seed)
    path = tmp_path / "c1_seg.nii.gz"
    nib.save(nib.Nifti1Image(seg, np.diag([1.0, 1.5, 2.0, 1.0])), path)
    volume = view(prediction=path).volumes[0]
    lut = volume.colormap_label
    assert lut is not None and lut.min == 0
    rgba = np.asarray(lut.lut).reshape(-1, 4)
    if volume.data is not None:  # shown by rank, as the pages' viewer: the data's voxels are display indices
        shown = nib.Nifti1Image.from_bytes(gzip.decompress(volume.data))
        index = np.asarray(shown.dataobj)
        np.testing.assert_allclose(shown.affine, np.diag([1.0, 1.5, 2.0, 1.0]))
        assert volume.name == "c1_seg.nii.gz" and not volume.path
    else:
        index = seg
    assert top <= 65535 or volume.data is not None
    values = np.unique(seg[seg > 0])
    # the pages' viewer: its legend's colour of each label value, and its own label table
    page = case_viewer("c1", seg, np.random.default_rng(seed).random(seg.shape))
    page_colour = {lab["value"]: lab["color"] for lab in page["labels"]}
    pred = next(v for v in page["volumes"] if v["role"] == "prediction")
    table = pred["colormap_label"]
    page_table = {lab["value"]: "#{:02x}{:02x}{:02x}".format(table["R"][i], table["G"][i], table["B"][i])
                  for i, lab in enumerate(page["labels"], start=1)}
    expected = class_colors(values)
    for v in values:
        voxel = index[seg == v]
        assert np.unique(voxel).size == 1 and 0 < voxel[0] < rgba.shape[0]
        colour = rgba[int(voxel[0])]
        assert colour[3] == 255
        assert _hex(colour) == page_colour[int(v)] == page_table[int(v)] == expected[int(v)], v
    assert (index[seg == 0] == 0).all() and rgba[0, 3] == 0  # the background transparent
    drawn = {int(i) for i in np.unique(index)}
    assert all(rgba[i, 3] == 0 for i in range(rgba.shape[0]) if i not in drawn)  # absent values too
    if volume.data is not None:  # hovering names the true label value
        assert lut.labels == [""] + [str(int(v)) for v in values]
