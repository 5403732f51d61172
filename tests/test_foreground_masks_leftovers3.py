"""One foreground decision for region (sigmoid) probabilities: ``p > 0.5`` everywhere, p = 0.5 is background."""

import numpy as np
import pytest
import torch

from monai_unc.activation import BERNOULLI, foreground_masks
from monai_unc.metrics.calibration import top_label
from monai_unc.workflows.infer import sample_label_maps

P = [0.0, 0.25, 0.5, np.nextafter(0.5, 1.0), 0.75, 1.0]


def test_foreground_masks_rule():
    assert foreground_masks(np.array(P)).tolist() == [False, False, False, True, True, True]
    t = torch.tensor(P, dtype=torch.float64)
    assert foreground_masks(t).tolist() == [False, False, False, True, True, True]
    with pytest.raises(TypeError, match="p must be"):
        foreground_masks([0.5])


def test_same_decision_everywhere_at_one_half():
    p = torch.tensor(P, dtype=torch.float32)
    masks = foreground_masks(p)
    # the prediction of calibration / conformal (activation) and the top label of (1 - p, p)
    assert torch.equal(BERNOULLI.confidence(p)[1], masks)
    assert torch.equal(top_label(torch.stack([1 - p, p]))[1].bool(), masks)
    # the sample label maps infer --save-samples writes for a region-based network
    samples = p.reshape(1, 1, -1).expand(1, 1, len(P)).clone()
    labels, _ = sample_label_maps(samples, multilabel=True, regions={"a": [1]})
    assert (labels[0] == 1).tolist() == masks.tolist()


def test_evaluate_default_segmentation_of_probabilities(tmp_path):
    """``load_case`` of a region prediction without ``<case>_seg``: the masks of the probabilities (was ``>=``)."""
    import nibabel as nib

    from monai_unc.io import CaseFiles, load_case, save_region_maps

    lab = np.zeros((4, 4, 4), np.uint8)
    nib.save(nib.Nifti1Image(lab, np.eye(4)), tmp_path / "c.nii.gz")
    probs = np.full((1, 4, 4, 4), 0.25, np.float32)
    probs[0, 0, 0, 0], probs[0, 1, 0, 0] = 0.5, 0.75
    save_region_maps(probs, np.eye(4), tmp_path / "c_probs.nii.gz")
    case = load_case(CaseFiles("c", tmp_path / "c.nii.gz", probs=tmp_path / "c_probs.nii.gz"), 1, multilabel=True)
    assert np.array_equal(case.seg.astype(bool), foreground_masks(probs))
    assert case.seg[0, 0, 0, 0] == 0 and case.seg[0, 1, 0, 0] == 1
