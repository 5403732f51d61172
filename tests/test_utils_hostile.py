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
    if a.dtype.kind == "c":  # complex is refused by name, in any byte order (review 63: the shared dtype check)
        with pytest.raises(TypeError, match="^x must hold real numbers"):
            to_tensor(a, "x")
        return
    expected = torch.from_numpy(a.astype(a.dtype.newbyteorder("=")))
    for x, ref in ((a, expected), (a.T, expected.T), ([a, a], torch.stack([expected, expected]))):
        t = to_tensor(x, "x")
        assert t.dtype == ref.dtype and torch.equal(t, ref)
    native = np.arange(4.0)
    assert to_tensor(native, "x").data_ptr() == native.ctypes.data  # native arrays still share their memory


def test_share_count_is_exact_ceil_up_to_float_rounding():
    """``share_count`` (referral budgets, the lesion curve, the referral curve) against exact fractions: the share
    as the decimal it names, the product rounded only by float arithmetic."""
    from fractions import Fraction

    import numpy as np

    from monai_unc._utils import share_count
    from monai_unc.metrics.selective import referral_curve

    for n in range(1, 60):
        for k in range(n + 1):
            for text in (f"{k / n:.12f}", f"{k / n + 1e-11:.12f}", f"{max(k / n - 1e-11, 0):.12f}", str(k / n)):
                exact = Fraction(text) * n
                want = -(-exact.numerator // exact.denominator)
                got = int(share_count(float(text), n))
                # a share within float rounding of k / n names k / n (0.3 * 10 is 3.0000000000000004)
                assert got == want or (abs(exact - round(exact)) < Fraction(1, 10**14) and got == round(exact)), (
                    n, text, got, want)
    # rounding to 9 decimals took the 4th of 10 cases for 0.30000000001 as 3
    assert int(share_count(0.30000000001, 10)) == 4
    curve = referral_curve(np.linspace(0, 1, 10), np.ones(10), taus=[0.3, 0.30000000001])
    assert curve.n_retained.tolist() == [7, 6]
