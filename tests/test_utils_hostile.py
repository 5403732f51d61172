"""Hostile input to the helpers of ``monai_unc._utils``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc._utils import to_tensor


@pytest.mark.parametrize("dtype", [">f8", ">f4", ">f2", ">i8", ">i4", ">u2", ">c16", "<f8", "=i4", "|u1", "|b1"])
def test_to_tensor_reads_any_byte_order(dtype):
    """Found by hostile testing: a big-endian numpy array (``'>f4'``, e.g. from a NIfTI or ``.npy`` written on
    another machine) raised torch's byte-order ``ValueError``, which names no argument. It is copied to native
    byte order: the same values and shape, for arrays, transposed views and lists of arrays."""
    a = (np.arange(12).reshape(3, 4) % 2 if dtype == "|b1" else np.arange(12).reshape(3, 4)).astype(dtype)
    expected = torch.from_numpy(a.astype(a.dtype.newbyteorder("=")))
    for x, ref in ((a, expected), (a.T, expected.T), ([a, a], torch.stack([expected, expected]))):
        t = to_tensor(x, "x")
        assert t.dtype == ref.dtype and torch.equal(t, ref)
    native = np.arange(4.0)
    assert to_tensor(native, "x").data_ptr() == native.ctypes.data  # native arrays still share their memory
