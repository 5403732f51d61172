"""Helpers of the device tests (``@pytest.mark.cuda``; tests/README.md); their fixtures are in tests/conftest.py."""

from __future__ import annotations

import contextlib
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
