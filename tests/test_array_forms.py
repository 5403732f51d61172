"""Array forms entering the public metrics and statistics (review 64).

Users pass numpy arrays straight from nibabel (read-only memmaps, big-endian ``>f4``, Fortran order) and torch tensors
in every memory layout (non-contiguous views, ``permute``, channels_last_3d, ``expand``'s zero strides, MetaTensor,
``requires_grad``, float16 / bfloat16, narrow integer and bool labels). Each public function and metric class must
give on every form the result it gives on the plain C-contiguous float64 (int64 for labels) numpy copy: exactly for
counts, within the input precision's rounding for sums; or refuse the form with a ``TypeError`` / ``ValueError`` naming
the argument. The values are multiples of 1/64 (exact in bfloat16) so that every form holds the same numbers.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from monai_unc._utils import to_tensor


def test_to_tensor_copies_a_read_only_array():
    """Found by hostile testing (review 64): a read-only numpy array (``np.broadcast_to``, a memmap opened ``'r'``, an
    array a caller froze) became a tensor sharing its buffer, which torch does not support (its "not writable ...
    undefined behavior" ``UserWarning``, then silence): an in-place operation on the tensor wrote through the frozen
    array, and on a read-only memmap it would crash the process. The tensor now holds a copy; writable arrays still
    share their memory."""
    a = np.arange(6.0).reshape(2, 3)
    a.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = to_tensor(a, "x")
    assert torch.equal(t, torch.arange(6.0, dtype=torch.float64).reshape(2, 3))
    assert not np.shares_memory(t.numpy(), a)
    t.add_(1.0)
    assert a[0, 0] == 0.0  # the frozen array is unchanged
    writable = np.arange(4.0)
    assert np.shares_memory(to_tensor(writable, "x").numpy(), writable)
