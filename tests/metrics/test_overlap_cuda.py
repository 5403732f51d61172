"""Dice, IoU, the per-class counts and the Gram matrices of device tensors: exact, on the input's device.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``. Everything is integer counting
(bincount, matrix products of 0/1 masks in an exact type) and ratios of the counts, so device results equal the
CPU's bit for bit.
"""

import numpy as np
import pytest
import torch

from monai_unc.metrics.overlap import dice, dice_matrix, iou, iou_matrix, label_gram, mask_gram, overlap_counts

pytestmark = pytest.mark.cuda


def test_overlap_on_the_device_is_exact(cuda_device):
    g = torch.Generator().manual_seed(7)
    p, t = torch.randint(0, 4, (2, 3, 9, 8, 7), generator=g)
    pd, td = p.to(cuda_device), t.to(cuda_device)
    counts, ref = overlap_counts(pd.flatten(1), td.flatten(1), num_classes=4), overlap_counts(
        p.flatten(1), t.flatten(1), num_classes=4)
    for name in ref._fields:
        assert getattr(counts, name).device.type == cuda_device.type, name
        np.testing.assert_array_equal(getattr(counts, name).cpu().numpy(), getattr(ref, name).numpy(), err_msg=name)
    for fn in (dice, iou):
        got = fn(pd, td, num_classes=4, include_background=True)
        assert got.device.type == cuda_device.type
        np.testing.assert_array_equal(got.cpu().numpy(), fn(p, t, num_classes=4, include_background=True).numpy())
    gram = label_gram(pd.flatten(1), 2)
    assert gram.device.type == cuda_device.type
    np.testing.assert_array_equal(gram.cpu().numpy(), label_gram(p.flatten(1), 2).numpy())
    masks = (p.flatten(1) == 1)
    gm = mask_gram(masks.to(cuda_device))
    for fn in (dice_matrix, iou_matrix):
        got = fn(gm)
        assert got.device.type == cuda_device.type
        np.testing.assert_array_equal(got.cpu().numpy(), fn(mask_gram(masks)).numpy())
