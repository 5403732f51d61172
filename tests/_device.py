"""Helpers of the device tests (``@pytest.mark.cuda``; tests/README.md); their fixtures are in tests/conftest.py."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def no_tf32() -> Iterator[None]:
    """Full float32 matrix products and convolutions on CUDA (TF32 off), restored afterwards.

    cuDNN's default on Ampere and newer GPUs rounds float32 inputs to 10-bit mantissas (TF32), so a device run
    compared with the CPU run to float32 rounding needs it off.
    """
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


@contextlib.contextmanager
def count_synchronisations() -> Iterator[list[str]]:
    """The CUDA synchronisations of the block, as the messages of torch's sync debug mode (set to warn, restored).

    The list yielded is filled when the block ends: ``with count_synchronisations() as syncs: ...``, then
    ``len(syncs)``.
    """
    torch.cuda.synchronize()
    old = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("warn")
    syncs: list[str] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield syncs
    finally:
        torch.cuda.set_sync_debug_mode(old)
    syncs.extend(str(w.message) for w in caught if "synchroniz" in str(w.message).lower())
