"""Compiled kernels cached on disk that several processes may compile at the same time.

numba's disk cache (``cache=True``) keeps one index file per function (``<module>.<function>-<line>.pyXY.nbi``) that
maps each compiled specialisation (argument types, and the values a closure captured) to a data file
``...<n>.nbc``. Saving a new specialisation reads the index, takes the first free ``n``, writes the index, then the
data: two processes that compile *different* specialisations of one function at the same time can both take ``n =
1``, and the index can end up naming one process's key for the other's data. A later process then loads, for its
argument types, the machine code compiled for other types: out-of-bounds reads and writes, wrong sums or a crash.
Two ``torch.distributed`` ranks or two jobs on one machine that use a kernel for the first time with different
dtypes are enough (or, for the calibration kernels, different numbers of classes: a cache the test suite's parallel
workers filled without the lock was run with "double free or corruption").

:func:`cached_kernel` wraps a dispatcher so that the first call of each argument signature in a process, the only
call that may load, compile or save, holds an exclusive lock on a file in the cache's own folder (a POSIX record
lock, ``fcntl.lockf``, which also works on NFS; ``msvcrt.locking`` on Windows): the loads, compilations and saves of
all processes sharing that cache happen one at a time. Later calls with seen signatures go straight to the
dispatcher.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["LOCK_FILE", "KernelUnavailable", "cached_kernel", "device_guard", "njit", "run_triton", "signature_key",
           "triton_failure"]

#: the lock file's name in a numba cache folder
LOCK_FILE = "monai_unc.lock"

logger = logging.getLogger(__name__)

# whether the "no disk cache" line was logged in this process (once, for every kernel)
_NO_CACHE_TOLD = False

# one first call at a time in this process (the kernels run in several Python threads); reentrant, so that a first
# call that led to another kernel's first call in the same thread would not wait for itself
_THREADS = threading.RLock()


def signature_key(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What numba's specialisation of a call depends on, per argument, as a hashable key.

    Arrays: dtype, dimensions, memory layout, whether they are writable and whether aligned (numba types a read-only
    or an unaligned array apart: an unaligned one, e.g. a view into a packed record or bytes buffer, was keyed as an
    aligned one already seen, and compiled outside the lock);
    tuples: the key of their items (numba types a tuple by its length and its items' types: the calibration kernels
    take the number of classes as a tuple's length); other values: their Python type (numba types every ``int`` as
    int64, every ``float`` as float64). A key that differs where numba's types do not only costs an extra lock.

    Args:
        args: the call's arguments.

    Returns:
        One entry per argument.

    Example:
        >>> import numpy as np
        >>> a = np.zeros((2, 3), np.float32)
        >>> signature_key((a, 1, None)) == signature_key((np.ones((5, 4), np.float32), 7, None))
        True
        >>> signature_key((a,)) == signature_key((a.T,))  # another memory layout
        False
        >>> odd = np.frombuffer(bytes(25), np.float64, count=3, offset=1)  # unaligned: numba compiles it apart
        >>> signature_key((odd,)) == signature_key((np.zeros(3),))
        False
        >>> signature_key(((0, 1, 2),)) == signature_key(((0, 1),))  # another tuple length: another specialisation
        False
    """
    key = []
    for a in args:
        if isinstance(a, np.ndarray):
            layout = "C" if a.flags.c_contiguous else ("F" if a.flags.f_contiguous else "A")
            key.append((a.dtype.str, a.ndim, layout, bool(a.flags.writeable), bool(a.flags.aligned)))
        elif isinstance(a, tuple):
            key.append((tuple, signature_key(a)))
        else:
            key.append(type(a))
    return tuple(key)


def _lock_folder(dispatcher: Any) -> Path:
    """The folder of the dispatcher's cache files (numba's own choice), else the temporary folder."""
    cache = getattr(dispatcher, "_cache", None)
    path = getattr(cache, "_cache_path", None)
    if path:
        return Path(path)
    return Path(tempfile.gettempdir())


@contextlib.contextmanager
def _file_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder / LOCK_FILE`` for the block (no lock where the folder cannot hold the file)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:  # a read-only cache folder: numba does not write there either
        yield
        return
    try:
        if os.name == "nt":  # pragma: no cover - Windows
            import msvcrt

            msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
        else:
            import fcntl

            # a POSIX record lock, not flock: a process forked while it is held (a DataLoader worker) does not
            # inherit it, where it would share a flock and keep it after this process lets go
            fcntl.lockf(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


class _CachedKernel:
    """A numba dispatcher whose first call of each signature holds the cache folder's lock (module docstring)."""

    __slots__ = ("dispatcher", "folder", "_seen")

    def __init__(self, dispatcher: Any, folder: Path | None) -> None:
        self.dispatcher = dispatcher
        self.folder = _lock_folder(dispatcher) if folder is None else Path(folder)
        self._seen: set[tuple[Any, ...]] = set()

    def __call__(self, *args: Any) -> Any:
        key = signature_key(args)
        if key in self._seen:
            return self.dispatcher(*args)
        with _THREADS:
            if key not in self._seen:
                with _file_lock(self.folder):
                    out = self.dispatcher(*args)
                self._seen.add(key)
                return out
        return self.dispatcher(*args)


def cached_kernel(dispatcher: Callable[..., Any], folder: str | os.PathLike | None = None) -> Callable[..., Any]:
    """Wrap a numba dispatcher (``cache=True``) so that processes never save into its disk cache at the same time.

    Args:
        dispatcher: the compiled function (any callable: the tests wrap plain functions).
        folder: where the lock file lies; default the dispatcher's cache folder (numba's ``__pycache__`` next to the
            source, ``$NUMBA_CACHE_DIR`` or the user's cache), the temporary folder for a callable without one.

    Returns:
        A callable with the dispatcher's arguments and result.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     add = cached_kernel(lambda a, b: a + b, folder=d)
        ...     add(1, 2), add(3, 4)
        (3, 7)
    """
    return _CachedKernel(dispatcher, None if folder is None else Path(folder))


def njit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(cache=True, **options)`` where numba can keep compiled code on disk, else ``numba.njit(**options)``.

    numba looks for a writable cache folder when a function is decorated: ``$NUMBA_CACHE_DIR``, the ``__pycache__``
    beside the source, the user's cache folder. Where there is none (a read-only installation run by a user without
    a writable home: a container with a read-only root file system, run under an arbitrary user id), ``cache=True``
    raises ``RuntimeError: cannot cache function ...: no locator available`` on import, and every command that
    uses a kernel would fail. The kernel is then compiled in each process instead (seconds at its first call), and one
    log line per process says so and how to keep the compiled code (``NUMBA_CACHE_DIR``, a folder only this user
    writes to: numba loads machine code from it).

    Args:
        **options: numba's ``njit`` options (``nogil``, ``boundscheck``, ``fastmath``, ...), without ``cache``.

    Returns:
        A decorator that compiles a function.

    Raises:
        ImportError: numba is not installed.
        TypeError: ``cache`` among ``options``.

    Example:
        >>> @njit(nogil=True)
        ... def twice(x):
        ...     return 2 * x
        >>> twice(21)
        42
    """
    import numba

    if "cache" in options:
        raise TypeError("njit() decides cache itself: leave it out of options")

    def decorate(func: Callable[..., Any]) -> Any:
        global _NO_CACHE_TOLD
        try:
            return _saved_if_possible(numba.njit(cache=True, **options)(func))
        except RuntimeError as e:
            if "no locator available" not in str(e):
                raise
        if not _NO_CACHE_TOLD:
            _NO_CACHE_TOLD = True
            logger.warning("numba finds no writable folder to keep compiled kernels in (%s is read-only and so is the "
                           "user's cache folder): they are compiled in each process, seconds at their first use; set "
                           "NUMBA_CACHE_DIR to a folder only this user can write to, to keep them",
                           Path(func.__code__.co_filename).parent)
        return numba.njit(**options)(func)

    return decorate


def _saved_if_possible(dispatcher: Any) -> Any:
    """Make a numba dispatcher's disk cache skip, rather than raise, a compiled kernel it cannot write.

    numba saves each newly compiled specialisation into the cache folder inside the call that compiled it (and a
    kernel's first call compiles the jitted functions it calls, saving each): a full disk, an exhausted quota or a
    file size limit there (the installation's ``__pycache__``, the user's cache folder, ``NUMBA_CACHE_DIR``: none of
    them a command's output) raised its ``OSError`` out of the kernel, which stopped the command (found by hostile
    testing: ``infer`` refused to start with ``No space left on device``, naming no file, while its output's disk
    had room). The kernel is compiled and kept in memory before it is saved, so it runs; the save is skipped and one
    log line per process says why.

    Args:
        dispatcher: a numba dispatcher made with ``cache=True``.

    Returns:
        The dispatcher, its cache's ``save_overload`` wrapped.
    """
    cache = getattr(dispatcher, "_cache", None)
    save = getattr(cache, "save_overload", None)
    if save is None:
        return dispatcher
    folder = getattr(cache, "_cache_path", None)

    def save_overload(sig: Any, data: Any) -> None:
        global _NO_CACHE_TOLD
        try:
            save(sig, data)
        except OSError as e:
            if not _NO_CACHE_TOLD:
                _NO_CACHE_TOLD = True
                logger.warning("numba could not keep compiled kernels in %s (%s): they are compiled in each process, "
                               "seconds at their first use; free space there or set NUMBA_CACHE_DIR to a folder only "
                               "this user can write to, to keep them", folder, e.strerror or e)

    cache.save_overload = save_overload
    return dispatcher


class KernelUnavailable(RuntimeError):
    """A fused GPU kernel (Triton) cannot run on this machine: its caller takes the torch path instead."""


#: the first line of the error that stopped the Triton kernels in this process (empty while none did)
_TRITON_FAILURE: list[str] = []


def triton_failure() -> str | None:
    """Why the Triton kernels are off in this process (:func:`run_triton`), or None while none failed.

    Returns:
        The first line of the error of the first kernel that could not be built, or None.

    Example:
        >>> triton_failure() is None  # nothing failed in this doctest's process
        True
    """
    return _TRITON_FAILURE[0] if _TRITON_FAILURE else None


def _device_error(error: BaseException) -> bool:
    """Whether ``error`` is the device's (out of memory, a CUDA error), which no other path would escape."""
    import torch

    accelerator = getattr(torch, "AcceleratorError", None)  # torch >= 2.8: CUDA errors
    if isinstance(error, (MemoryError, torch.cuda.OutOfMemoryError)) or (
            accelerator is not None and isinstance(error, accelerator)):
        return True
    text = str(error)
    return "CUDA error" in text or "out of memory" in text


def device_guard(device: Any) -> contextlib.AbstractContextManager:
    """A context in which ``device`` is CUDA's current device, when it is a CUDA device other than the current one.

    Triton launches a kernel on the current CUDA device and its current stream, whatever device its tensors are on
    (found by a review of the GPU paths: on a machine with two GPUs, tensors on ``cuda:1`` while the current device
    is 0, as with ``--device cuda:1``, would be read by a kernel on the other device, unordered with the network's
    work on theirs). Elsewhere, and on the current device, nothing is switched.

    Args:
        device: a ``torch.device`` (or None).

    Returns:
        ``torch.cuda.device(device)``, or a context that does nothing.

    Example:
        >>> import torch
        >>> with device_guard(torch.device("cpu")):
        ...     pass
    """
    if device is None or getattr(device, "type", None) != "cuda" or device.index is None:
        return contextlib.nullcontext()
    import torch

    if device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device)


def _first_device(args: tuple) -> Any:
    """The device of the first tensor among ``args`` (the kernels' launches take their tensors first), or None."""
    for a in args:
        device = getattr(a, "device", None)
        if device is not None and hasattr(a, "data_ptr"):
            return device
    return None


def run_triton(launch: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``launch(*args, **kwargs)``, a call that compiles (on first use) and launches a Triton kernel.

    Triton builds each kernel on this machine the first time it is launched, with a C compiler and the Python
    headers for its launcher (found by a review of the GPU paths: a machine with torch's CUDA wheels but without
    ``gcc`` or ``Python.h``, e.g. a slim container, fails there). Such a failure must not stop a run whose numbers
    the torch path computes as well: the first one turns the Triton kernels off for the process, warns once
    (``RuntimeWarning``: what failed and what to install) and raises :class:`KernelUnavailable`, on which the caller
    takes the torch path (the same results, slower); every later call raises it at once. Errors of the device (out
    of memory, CUDA errors) propagate unchanged: the torch path would meet them too. The kernels' launches write
    their outputs only once the kernel runs, so a launch that failed to build changed nothing.

    Args:
        launch: the function that launches the kernel.
        *args: its positional arguments.
        **kwargs: its keyword arguments.

    Returns:
        What ``launch`` returns.

    Raises:
        KernelUnavailable: the kernels are off in this process (this call's failure or an earlier one's).

    Example:
        >>> run_triton(lambda x: x + 1, 1)
        2
    """
    if _TRITON_FAILURE:
        raise KernelUnavailable(_TRITON_FAILURE[0])
    try:
        with device_guard(_first_device(args)):  # on the tensors' device (see device_guard)
            return launch(*args, **kwargs)
    except Exception as e:
        if isinstance(e, KernelUnavailable):
            raise
        if _device_error(e):
            raise
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), "") or type(e).__name__
        first = f"{type(e).__name__}: {first[:300]}"
        if not _TRITON_FAILURE:
            _TRITON_FAILURE.append(first)
            warnings.warn(
                f"monai-unc: the fused CUDA kernels (Triton) cannot run on this machine ({first}); the torch path is "
                "used instead (the same results, slower). Triton builds its kernels with a C compiler and the Python "
                "headers (e.g. the gcc and python3-dev packages).",
                RuntimeWarning,
                stacklevel=3,
            )
        raise KernelUnavailable(first) from e
