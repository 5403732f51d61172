"""The process-group lifecycle of a cohort run, in one place: :func:`cohort_session`.

A cohort command (``infer``, ``evaluate``, ``triage``, a product's command) runs on one process or on every rank of a
``torchrun`` job. It joins the process group that already exists (MONAI / ignite's ``idist``, a caller's own
``init_process_group``) or creates one from torchrun's environment, runs its cases through the engine, and ends the
group only when it created it. :func:`cohort_session` is that pattern as a context manager, so no caller pairs
:func:`~monai_unc.engine.get_dist_context` with :func:`~monai_unc.engine.destroy_dist_context` by hand.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import torch

from .collectives import DistContext, destroy_dist_context, get_dist_context

__all__ = ["cohort_session"]


@contextmanager
def cohort_session(
    dist: DistContext | None = None,
    *,
    device: str | torch.device | None = None,
    backend: str | None = None,
    timeout: timedelta | float | None = None,
) -> Iterator[DistContext]:
    """The rank context of a cohort run, for the duration of a ``with`` block.

    Without ``dist`` the context comes from :func:`~monai_unc.engine.get_dist_context`: it joins an initialised
    process group, or creates one when torchrun's environment says ``WORLD_SIZE > 1`` (a single process gets the
    trivial context and no group). On exit, normally or by an exception, a group created here is destroyed
    (:func:`~monai_unc.engine.destroy_dist_context`); a group that existed before is left alone. With ``dist`` that
    context is yielded as it is and nothing is destroyed: its owner ends it. Enter it on every rank at the same
    point (creating a group is collective).

    Args:
        dist: a rank context the caller already holds (its lifecycle stays the caller's), or None.
        device: the compute device of a group created here (a CUDA device selects ``cpu:gloo,cuda:nccl`` and is
            made current); ignored with ``dist``.
        backend: override the backend of a group created here; ignored with ``dist``.
        timeout: collective timeout of a group created here (``timedelta`` or seconds); ignored with ``dist``.

    Returns:
        A context manager yielding the :class:`~monai_unc.engine.DistContext`.

    Example:
        >>> with cohort_session() as ctx:  # one process: no group is created or destroyed
        ...     ctx.rank, ctx.world_size, ctx.owns_group
        (0, 1, False)
    """
    if dist is not None:
        yield dist
        return
    ctx = get_dist_context(device, backend=backend, timeout=timeout)
    try:
        yield ctx
    finally:
        destroy_dist_context(ctx)  # only a group that get_dist_context created here (ctx.owns_group)
