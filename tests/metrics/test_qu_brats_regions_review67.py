"""Region probabilities at exactly 0.5 in QU-BraTS: the one foreground decision ``p > 0.5`` (review 67).

``QUBraTSMetric`` (and the ignite handler ``QUBraTS``, which reads the engine's ``pred`` probabilities through it)
binarised probabilities with ``p >= 0.5``, while nnU-Net's region conversion
(``LabelManager.convert_probabilities_to_segmentation``: ``probabilities > 0.5``), ``monai-unc infer``'s
``<case>_seg``, ``monai-unc evaluate`` and :func:`monai_unc.activation.foreground_masks` take ``p > 0.5``: a voxel at
exactly 0.5 (``sigmoid(0)``, a float16 output) was foreground in the metric and background everywhere else, so the
handler's QU-BraTS of a validation run differed from ``evaluate``'s of the same probabilities.
"""

from __future__ import annotations

import numpy as np
import torch

from monai_unc.activation import foreground_masks
from monai_unc.metrics import QUBraTSMetric, qu_brats


def _case():
    y = np.zeros((1, 2, 4, 4), dtype=bool)  # two regions, nested (WT-like, ET-like)
    y[0, 0, :2] = True
    y[0, 1, :1] = True
    probs = np.where(y, 0.9, 0.1).astype(np.float32)
    probs[0, :, 3, :] = 0.5  # a row at exactly 0.5 in both regions, outside the reference
    u = np.zeros(y.shape, np.float32)
    u[0, :, 3, :] = 60.0
    return probs, y, u


def test_probabilities_at_one_half_are_background_as_in_nnunet():
    probs, y, u = _case()
    masks = foreground_masks(probs)
    assert not masks[0, :, 3].any()  # the package's (and nnU-Net's) decision
    m = QUBraTSMetric(component="score", reduction="none")
    got = m(torch.from_numpy(probs), torch.from_numpy(y), uncertainty=torch.from_numpy(u)).numpy()
    expected = [qu_brats(u[0, r], masks[0, r], y[0, r]).score for r in range(2)]
    np.testing.assert_allclose(got[0], expected, atol=1e-12)
    # the masks given as masks score the same as the probabilities they come from
    m2 = QUBraTSMetric(component="score", reduction="none")
    np.testing.assert_allclose(m2(torch.from_numpy(masks), torch.from_numpy(y),
                                  uncertainty=torch.from_numpy(u)).numpy(), got, atol=0)


def test_nnunet_region_conversion_agrees_on_one_half():
    from nnunetv2.utilities.label_handling.label_handling import LabelManager

    probs, _, _ = _case()
    lm = LabelManager({"background": 0, "whole": (1, 2), "enhancing": 2}, regions_class_order=(1, 2))
    seg = np.asarray(lm.convert_probabilities_to_segmentation(probs[0]))
    assert (seg[3] == 0).all()  # nnU-Net: background at exactly 0.5
    np.testing.assert_array_equal(np.isin(seg, (1, 2)), foreground_masks(probs[0, 0]))


def test_regions_to_labels_is_nnunets_conversion_where_a_label_has_the_masks():
    """``regions_to_labels`` of the masks ``p > 0.5`` against nnU-Net's ``regions_class_order`` conversion of ``p``
    (regions listed from the outside in, as nnU-Net needs them): the same label wherever a label of the spec has the
    voxel's set of regions exactly; elsewhere (counted in ``n_unrepresented``) nnU-Net gives the last region's label,
    which adds regions, and ``regions_to_labels`` the largest subset, which drops them (docs/regions.md)."""
    from nnunetv2.utilities.label_handling.label_handling import LabelManager

    from monai_unc.regions import label_to_regions, regions_to_labels

    rng = np.random.default_rng(0)
    spec = {"whole": (1, 2, 3), "core": (2, 3), "enhancing": (3,)}  # nnU-Net's BraTS regions and order
    lm = LabelManager({"background": 0, **spec}, regions_class_order=(1, 2, 3))
    for shape in ((5, 6), (3, 4, 5)):  # 2D and 3D
        p = rng.choice(np.array([0.1, 0.5, 0.9], np.float32), size=(3, *shape))
        nn = np.asarray(lm.convert_probabilities_to_segmentation(p))
        ours, missed = regions_to_labels(foreground_masks(p), spec)
        exact = (label_to_regions(ours, spec) == foreground_masks(p)).all(0)
        assert missed == int((~exact).sum()) > 0
        np.testing.assert_array_equal(ours[exact], nn[exact])
        # where no label has the set: nnU-Net's label holds every region of the voxel, ours only regions it holds
        back_nn, back_ours = label_to_regions(nn, spec), label_to_regions(ours, spec)
        assert (back_nn | ~foreground_masks(p)).all() and (~back_ours | foreground_masks(p)).all()


def test_calibration_of_region_probabilities_is_pointed_to_per_region():
    """Sigmoid region probabilities given to a calibration metric, which has no ``multilabel`` option: the refusal
    told the user to pass ``multilabel=True`` (a ``TypeError`` there); it now names ``per_region`` too, the binary
    calibration of each region."""
    import pytest

    from monai_unc.metrics import ece
    from monai_unc.regions import per_region

    probs = np.array([[[0.9, 0.8], [0.7, 0.2], [0.6, 0.1]]], np.float32)  # (B=1, R=3, 2 voxels): overlapping regions
    target = np.array([[[1, 1], [1, 0], [1, 0]]], np.uint8)
    with pytest.raises(ValueError, match=r"sigmoid probabilities .*monai_unc\.regions\.per_region"):
        ece(probs, target[:, :1])
    res = per_region(ece, {"probs": probs, "target": target}, names=["WT", "TC", "ET"], n_bins=5)
    assert set(res) == {"WT", "TC", "ET"}


def test_label_to_regions_of_a_channel_first_label_is_monais_with_channel_dim_0():
    """MONAI's ``ConvertToMultiChannelBasedOnBratsClasses`` squeezes the channel of a ``(1, X, Y, Z)`` label map: the
    same masks are ``label_to_regions(label, channel_dim=0)`` (``label_to_regions(label)`` keeps the axis), as
    docs/regions.md states."""
    from monai.transforms import ConvertToMultiChannelBasedOnBratsClasses

    from monai_unc.regions import label_to_regions

    label = np.random.default_rng(0).choice([0, 1, 2, 4], size=(1, 4, 3, 2))
    monai = np.asarray(ConvertToMultiChannelBasedOnBratsClasses()(label))
    np.testing.assert_array_equal(label_to_regions(label, channel_dim=0), monai)
    np.testing.assert_array_equal(label_to_regions(label[0]), monai)
    assert label_to_regions(label).shape == (3, 1, 4, 3, 2)
