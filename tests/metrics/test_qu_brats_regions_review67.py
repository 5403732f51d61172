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
