"""Writing files so that an interrupted run never leaves a half-written one, and JSON that strict parsers read.

Every writer of the package goes through :func:`atomic_path`: the file is written under a temporary name
(``.<stem>.partial<ext>``, the extension kept so that NIfTI / NumPy / torch writers pick the right format) in a
private hidden folder beside it (``.<name>.partial.dir``, mode 0700: no one else can plant a link under the name a
writer opens) and renamed into place with :func:`os.replace`, which is atomic on one file system. A run killed
mid-write leaves only a ``.*.partial*`` folder, which the next write of the file and :func:`clean_partial_files`
remove.

Before any work, commands check where they will write: :func:`check_output_folder` (not inside an input folder,
writable or creatable), :func:`check_output_file` (not an input file, not even through a symbolic or hard link) and
:func:`check_writable_folder`. JSON for other readers is strict (:func:`atomic_write_json`: NaN -> ``null``).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import errno
import fnmatch
import hashlib
import io
import json
import math
import operator
import os
import shutil
import socket
import stat
import struct
import tempfile
import threading
import time
import zipfile
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import torch

from .._utils import label_map_dtype, link_target, load_nifti, num_threads, parameter_error
from ..state import ArrayBlocks, host_array

try:  # a write's lock on its private folder (POSIX)
    import fcntl
except ImportError:  # Windows: no lock, an existing private folder is left alone
    fcntl = None

#: how a folder is opened to hold its lock: read-only, a folder, never through a symbolic link
_FOLDER_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)

try:  # Intel ISA-L's deflate (python-isal, the ``fast`` extra): level 1 about 10x zlib's speed at the same ratio
    from isal import isal_zlib as _isal_zlib
except ImportError:  # zlib alone
    _isal_zlib = None

__all__ = [
    "KNOWN_EXTENSIONS",
    "partial_path",
    "atomic_path",
    "atomic_write",
    "atomic_write_files",
    "atomic_write_text",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_save_npz",
    "MappedArrays",
    "smallest_int_dtype",
    "scratch_folder",
    "remove_dead_scratch",
    "private_folder",
    "save_state",
    "atomic_torch_save",
    "atomic_savefig",
    "atomic_copy",
    "atomic_gzip",
    "GZIP_BLOCK_BYTES",
    "GZIP_ENGINES",
    "GzipBlockWriter",
    "save_nifti",
    "save_nifti_image",
    "save_probabilities",
    "save_region_maps",
    "plain_file_name",
    "read_json_or_none",
    "read_json_cached",
    "file_sha256",
    "weight_digests",
    "json_safe",
    "json_default",
    "check_writable_folder",
    "check_output_folder",
    "check_entry_kind",
    "input_folder",
    "check_output_file",
    "clean_partial_files",
    "owned_folder",
    "DISK_FULL_ERRNOS",
    "is_disk_full",
    "OUTPUT_LOCK_FILE",
    "output_lock",
    "output_lock_holder",
    "check_not_being_written",
    "atomic_folder",
    "OUTPUT_MARKERS",
    "check_output_kind",
]

#: multi-part extensions kept whole in temporary names (longest first)
KNOWN_EXTENSIONS = (
    ".nii.gz", ".nii", ".nrrd", ".nhdr", ".mha", ".mhd", ".tif", ".tiff", ".npz", ".npy", ".pt", ".pth", ".json",
    ".csv", ".html", ".png", ".pkl", ".txt",
)


def partial_path(path: str | os.PathLike, ending: str | None = None) -> Path:
    """The temporary name :func:`atomic_path` writes ``path`` under: ``.<stem>.partial<ext>`` (in its private folder).

    ``ext`` is ``ending`` when given and ``path`` ends with it (e.g. a data set's own file ending), else the file's
    known extension (:data:`KNOWN_EXTENSIONS`, e.g. ``.nii.gz``), so that writers which pick the format from the
    name (nibabel, SimpleITK, ``numpy.savez``) write the right one; other names get ``.<name>.partial``.

    Args:
        path: the file that will be written.
        ending: a file ending to keep last in the temporary name (used when ``path`` ends with it).

    Returns:
        The temporary name as a sibling of ``path`` (:func:`atomic_path` writes a file of this name in a private
        folder beside ``path``); nothing is created.

    Example:
        >>> partial_path("out/case1_probs.nii.gz").as_posix()
        'out/.case1_probs.partial.nii.gz'
        >>> partial_path("out/notes").as_posix()
        'out/.notes.partial'
    """
    path = Path(path)
    name = path.name
    if ending and name.endswith(ending) and len(name) > len(ending):
        return path.with_name(f".{name[: -len(ending)]}.partial{ending}")
    for ext in KNOWN_EXTENSIONS:
        if name.endswith(ext) and len(name) > len(ext):
            return path.with_name(f".{name[: -len(ext)]}.partial{ext}")
    return path.with_name(f".{name}.partial")


#: the error numbers of a full disk (``ENOSPC``), an exhausted quota (``EDQUOT`` where the platform has it) or a file
#: size limit (``EFBIG``: ``ulimit -f`` / ``RLIMIT_FSIZE`` of a job, or the largest file of the file system)
DISK_FULL_ERRNOS = frozenset(n for n in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EFBIG) if n is not None)


def is_disk_full(error: BaseException) -> bool:
    """Whether an error is a full disk, an exhausted quota or a file size limit (:data:`DISK_FULL_ERRNOS`).

    Such an error is the environment's, not the data's: every further write fails alike until space is freed (or the
    limit raised). Found by hostile testing: under ``ulimit -f`` (``EFBIG``, "File too large") ``infer`` computed
    every case of the cohort, failed each at its first large file and blamed every case in ``failures.json``.

    Args:
        error: the exception.

    Returns:
        True for an ``OSError`` whose ``errno`` is one of :data:`DISK_FULL_ERRNOS`.

    Example:
        >>> is_disk_full(OSError(errno.ENOSPC, "No space left on device")), is_disk_full(OSError(errno.ENOENT, "x"))
        (True, False)
        >>> is_disk_full(OSError(errno.EFBIG, "File too large"))
        True
    """
    return isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS


def _name_written_file(error: OSError, path: Path, *temporary: Path) -> None:
    """Make an ``OSError`` of writing ``path`` name it, in place (its type, ``errno`` and traceback kept).

    A failed ``write`` (a full disk: ``[Errno 28] No space left on device``) names no file; a writer given a
    temporary name names that one, and a copy (:func:`shutil.copy2`) names its source first. The error then names
    ``path``: as ``filename`` when it had none, in place of a ``temporary`` name where it had one. Found by hostile
    testing: a full output disk printed ``OSError: [Errno 28] No space left on device`` without a folder or file.
    """
    if error.errno is None:  # our own messages
        return
    hidden = {str(t) for t in temporary}
    if error.filename is None or str(error.filename) in hidden:
        error.filename = str(path)
    if error.filename2 is not None and str(error.filename2) in hidden:
        error.filename2 = str(path)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, ending: str | None = None) -> Iterator[Path]:
    """Context manager yielding a temporary path to write ``path`` under, renamed to ``path`` on a clean exit.

    The parent folder is created first. The temporary file (named as :func:`partial_path` names it, so that writers
    which pick the format from the name write the right one) lies in a private folder this call makes beside
    ``path`` (``.<name>.partial.dir``, mode 0700; a random name where that one is taken by someone else):
    whoever else can write into a shared output folder cannot plant a symbolic link under the name a third-party
    writer (nibabel, numpy, torch) opens, which would make it overwrite a file the link points to (found by a
    review of shared output folders). On an exception inside the block nothing is renamed and an older ``path`` is
    kept; an ``OSError`` then names ``path`` when it named no file, the temporary one or the private folder (a full
    disk: ``No space left on device: <path>``; a folder the user may not write: ``Permission denied: <path>``).
    The private folder is removed either way; one a killed run left is removed by the next write of ``path`` and by
    :func:`clean_partial_files`.

    Args:
        path: the file to write.
        ending: keep this file ending last in the temporary name (see :func:`partial_path`).

    Yields:
        The temporary path to write to (a file named :func:`partial_path` ``(path).name`` in the private folder).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with atomic_path(Path(d) / "x.npz") as tmp:
        ...         np.savez(tmp, a=np.arange(3))
        ...     sorted(p.name for p in Path(d).iterdir())
        ['x.npz']
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    left = partial_path(path, ending)  # a killed run's of versions that wrote beside path (unlink follows no link)
    with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
        left.unlink()
    with _private_folder(path) as folder:
        tmp = folder / left.name
        try:
            yield tmp
            os.replace(tmp, path)
        except BaseException as e:
            if isinstance(e, OSError):
                _name_written_file(e, path, tmp)
            raise


@contextlib.contextmanager
def _private_folder(path: Path) -> Iterator[Path]:
    """A new folder (mode 0700) beside ``path`` to write it in: ``.<name>.partial.dir``, else a random name.

    Only its owner may create or replace entries in it, so no one else can plant a symbolic link under the name a
    writer opens there. The name is fixed per file, so that the folder a killed run (``SIGTERM`` at a batch system's
    time limit, the OOM killer) left with its partial file is removed by the next write of the same file, as the
    fixed temporary file of earlier versions was: a random name each time left one more folder per killed write in
    every folder that :func:`clean_partial_files` does not cover (found by the review of private folders). A write
    holds a lock on its folder (``flock``, released by the system when a process dies), so the folder of a write
    still running (another process or thread writing the same file) is never taken for a killed one's: removing
    it made that write fail and could rename the other's half-written file into place (found by the review of the
    fixed name). A folder that someone else made (or a link), one another write holds, a name near the file
    system's 255-byte limit (shortened, it could be another file's) and a system without ``flock`` (Windows: an
    existing folder is left alone) give a new folder with a random name ``.<name>.partial-XXXXXXXX.dir``
    instead. The folder is removed when the block ends, before its lock is released.
    """
    stem = path.name  # shortened so that a name near the file system's 255-byte limit still gets its folder
    while len(f".{stem}.partial-".encode("utf-8", "surrogateescape")) > 200:
        stem = stem[:-1]
    folder, fd = None, None
    try:
        try:
            if stem == path.name:
                folder, fd = _fixed_folder(path.parent / f".{stem}.partial.dir")
            if folder is None:
                folder = Path(tempfile.mkdtemp(prefix=f".{stem}.partial-", suffix=".dir", dir=path.parent))
        except OSError as e:  # a folder the user may not write: the error names the file, not the private folder
            # (found by review 63 running the commands as a non-root user: "Permission denied: <out>/.x.partial.dir")
            made = Path(str(e.filename)) if e.filename is not None else None
            ours = made is not None and made.parent == path.parent and made.name.startswith(f".{stem}.partial")
            _name_written_file(e, path, *([made] if ours else []))
            raise
        yield folder
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        if fd is not None:
            os.close(fd)  # the lock released once the folder is gone


def _fixed_folder(fixed: Path) -> tuple[Path | None, int | None]:
    """``fixed`` made or taken over (a killed write's: emptied) and locked: ``(fixed, its locked descriptor)``.

    ``(None, None)`` when it cannot be this write's: a link or no folder, another user's, a folder another write
    holds locked, or, without ``flock``, any folder already there.
    """
    if fcntl is None:
        try:
            os.mkdir(fixed, 0o700)
        except FileExistsError:
            return None, None
        return fixed, None
    for _ in range(3):
        try:
            os.mkdir(fixed, 0o700)
            made = True
        except FileExistsError:
            made = False
        try:
            fd = os.open(fixed, _FOLDER_FLAGS)
        except FileNotFoundError:  # removed in between by the write that held it: try again
            continue
        except OSError:  # a link (ELOOP), not a folder (ENOTDIR), no access
            return None, None
        try:
            st = os.fstat(fd)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                os.close(fd)
                return None, None
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: another write of the file holds it
            now = os.lstat(fixed)
        except OSError as e:
            os.close(fd)
            if made and not isinstance(e, BlockingIOError):  # no lock on this file system (NFS mounted nolock):
                with contextlib.suppress(OSError):  # the folder just made is not left behind empty
                    os.rmdir(fixed)
            return None, None
        if (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):  # removed and made again in between: try again
            os.close(fd)
            continue
        if not made:  # a killed write's: its entries removed (rmtree follows no link inside), the folder reused
            for entry in os.listdir(fixed):
                inner = fixed / entry
                if inner.is_dir() and not inner.is_symlink():
                    shutil.rmtree(inner, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        inner.unlink()
            os.chmod(fixed, 0o700)
        return fixed, fd
    return None, None


def atomic_write(path: str | os.PathLike, write: Callable[[Path], Any]) -> Path:
    """Call ``write(tmp)`` to write the file under a temporary name, then rename it to ``path``.

    Args:
        path: the file to write.
        write: a function that writes the file to the path it is given.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     atomic_write(Path(d) / "a.txt", lambda tmp: tmp.write_text("hi")).read_text()
        'hi'
    """
    with atomic_path(path) as tmp:
        write(tmp)
    return Path(path)


def atomic_write_files(path: str | os.PathLike, write: Callable[[Path], Any]) -> Path:
    """Call ``write(tmp)``, ``tmp`` named as ``path`` in a private folder beside it; rename what it wrote into place.

    For writers that put sidecar files next to the file they write, named after it (nnU-Net's ``Tiff3DIO`` writes
    the spacing into ``<name>.json``): under :func:`atomic_write`'s temporary name such a sidecar would keep that
    name. Every other file the writer made is renamed into ``path``'s folder first, ``path`` itself last, so a
    reader that waits for ``path`` finds its sidecars. The private folder (``.<name>.partial.dir``, as
    :func:`atomic_path` makes it) is removed afterwards, and by the next write of ``path`` or
    :func:`clean_partial_files` when a run was killed in between. An ``OSError`` names ``path`` as
    :func:`atomic_path`'s does.

    Args:
        path: the file to write.
        write: a function that writes the file (and any sidecars) to the path it is given.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> def with_sidecar(tmp):
        ...     tmp.write_text("image")
        ...     tmp.with_suffix(".json").write_text("{}")
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = atomic_write_files(Path(d) / "case.tif", with_sidecar)
        ...     sorted(p.name for p in Path(d).iterdir())
        ['case.json', 'case.tif']
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _private_folder(path) as folder:
        tmp = folder / path.name
        try:
            write(tmp)
            for f in sorted(folder.iterdir()):
                if f.name != path.name:
                    os.replace(f, path.parent / f.name)
            os.replace(tmp, path)
        except OSError as e:
            _name_written_file(e, path, tmp)
            raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and a rename.

    Args:
        path: the file to write.
        text: its contents.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     atomic_write_text(Path(d) / "a.txt", "héllo").read_text(encoding="utf-8")
        'héllo'
    """
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    r"""Write ``data`` to ``path`` through a temporary file and a rename.

    Args:
        path: the file to write.
        data: its contents.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     atomic_write_bytes(Path(d) / "a.bin", b"\x00\x01").read_bytes()
        b'\x00\x01'
    """
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2, digits: int | None = None) -> Path:
    r"""Write ``json_safe(obj)`` as strict JSON (no bare NaN / Infinity: they become ``null``) with a final newline.

    Args:
        path: the ``.json`` file to write.
        obj: the document (dicts, lists, numbers, strings; NumPy and torch values, tuples and paths are converted
            by :func:`json_safe`).
        indent: ``json.dumps`` indentation (None: one line).
        digits: round floats to this many significant digits (None: full precision).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        TypeError: ``obj`` holds a value ``json.dumps`` cannot write.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     atomic_write_json(Path(d) / "a.json", {"ece": float("nan"), "n": np.int64(3)}, indent=None).read_text()
        '{"ece": null, "n": 3}\n'
    """
    text = json.dumps(json_safe(obj, digits), indent=indent, allow_nan=False)
    return atomic_write_text(path, text + "\n")


def _savez_blocks(path: Path, arrays: Mapping[str, Any], compressed: bool) -> None:
    """``numpy.savez`` (``savez_compressed``) of arrays some of which are :class:`~monai_unc.state.ArrayBlocks`.

    The same zip file of ``.npy`` members as numpy's (``numpy.load`` reads the same arrays); an
    :class:`~monai_unc.state.ArrayBlocks` is written block by block, never held whole.
    """
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, mode="w", compression=method, allowZip64=True) as zf:
        for key, value in arrays.items():
            with zf.open(f"{key}.npy", "w", force_zip64=True) as fid:
                if not isinstance(value, ArrayBlocks):
                    np.lib.format.write_array(fid, np.asanyarray(value), allow_pickle=False)
                    continue
                header = {"descr": np.lib.format.dtype_to_descr(value.dtype), "fortran_order": False,
                          "shape": value.shape}
                try:  # the header numpy writes: version 1.0 unless it does not fit
                    np.lib.format.write_array_header_1_0(fid, header)
                except ValueError:
                    np.lib.format.write_array_header_2_0(fid, header)
                for block in value.blocks():
                    fid.write(memoryview(np.ascontiguousarray(block)).cast("B"))


def atomic_save_npz(path: str | os.PathLike, arrays: Mapping[str, Any], compressed: bool = False) -> Path:
    """``numpy.savez`` (or ``savez_compressed``) through a temporary file and a rename.

    An array given as :class:`~monai_unc.state.ArrayBlocks` (a state's tables made one case at a time) is written
    block by block: the file holds the same arrays, and the whole array is never in memory.

    Args:
        path: the file to write; must end in ``.npz``.
        arrays: ``{key: array}`` to store (arrays or :class:`~monai_unc.state.ArrayBlocks`).
        compressed: use ``numpy.savez_compressed``.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: ``path`` does not end in ``.npz``.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with np.load(atomic_save_npz(Path(d) / "a.npz", {"x": np.arange(3)})) as f:
        ...         f["x"].tolist()
        [0, 1, 2]
    """
    if not str(path).endswith(".npz"):
        raise ValueError(f"path must end in .npz, got {path}")
    if any(isinstance(v, ArrayBlocks) for v in arrays.values()):
        return atomic_write(path, lambda tmp: _savez_blocks(tmp, arrays, compressed))
    save = np.savez_compressed if compressed else np.savez
    return atomic_write(path, lambda tmp: save(tmp, **arrays))


class MappedArrays(Sequence[torch.Tensor]):
    """Arrays written to a folder one file each and read back memory-mapped, one at a time.

    A list of many large arrays that need not all be in memory: :meth:`append` writes each array to
    ``folder/000000.npy``, ``000001.npy``, ... (atomically, :func:`atomic_write`), and ``store[i]`` maps the file
    back as a CPU tensor (copy-on-write: writing to it changes the tensor, never the file), so only the parts a reader
    touches are in memory, and only while the tensor lives. It is a re-iterable sequence: iterating it maps one array
    after another (``monai-unc calibrate`` keeps its validation logits in one,
    :func:`monai_unc.workflows.collect_logits`, and :class:`~monai_unc.temperature.TemperatureScaler` streams them
    from it at every step).

    The folder is the caller's (a temporary one, e.g. :class:`tempfile.TemporaryDirectory`): it is created when
    missing and never removed here; files already in it are left alone and not part of the sequence.

    Args:
        folder: where the files go.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     store = MappedArrays(d)
        ...     store.append(torch.arange(6.0).reshape(2, 3))
        ...     store.append(np.array([[1, 2]]), dtype=np.uint8)
        ...     len(store), store[0][1].tolist(), store[-1].dtype, [tuple(a.shape) for a in store]
        (2, [3.0, 4.0, 5.0], torch.uint8, [(2, 3), (1, 2)])
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        """Use ``folder`` (created when missing); arguments in the class docstring."""
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._files: list[tuple[Path, tuple[int, ...]]] = []  # each array's file and shape

    def append(self, array: np.ndarray | torch.Tensor, dtype: Any = None) -> None:
        """Write one more array (a tensor is moved to the CPU first).

        The file holds the array in the machine's byte order (a ``'>f4'`` array is converted: torch maps no other
        back), a bfloat16 tensor as float32 (exactly; numpy has no bfloat16).

        Args:
            array: the array; it is not kept.
            dtype: convert to this numpy dtype first (None: keep the array's).

        Raises:
            TypeError: naming ``array`` when it is neither a numpy array nor a tensor.
            OSError: the write failed (a full disk names the file, :func:`atomic_path`).
        """
        if isinstance(array, torch.Tensor):
            array = _to_numpy(array)  # bfloat16 as float32
        if not isinstance(array, np.ndarray):
            raise TypeError(f"array must be a numpy array or a torch tensor, got {type(array).__name__}")
        if dtype is not None and array.dtype != np.dtype(dtype):
            array = array.astype(dtype)
        if not array.dtype.isnative:  # '>f4' (a big-endian NIfTI file): torch maps no other byte order back
            array = array.astype(array.dtype.newbyteorder("="))
        path = self.folder / f"{len(self._files):06d}.npy"

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                np.save(f, array, allow_pickle=False)

        atomic_write(path, write)
        self._files.append((path, tuple(array.shape)))

    def __len__(self) -> int:
        """The number of arrays appended."""
        return len(self._files)

    def _load(self, index: int) -> torch.Tensor:
        path, shape = self._files[index]
        mode = "c" if math.prod(shape) > 0 else None  # an empty array has nothing to map
        return torch.from_numpy(np.load(path, mmap_mode=mode, allow_pickle=False))

    def __getitem__(self, index: Any) -> Any:
        """``store[i]``: the ``i``-th array as a CPU tensor mapped from its file; a slice gives a list of them."""
        if isinstance(index, slice):
            return [self._load(i) for i in range(len(self._files))[index]]
        return self._load(operator.index(index))

    def __repr__(self) -> str:
        """The folder and the number of arrays."""
        return f"MappedArrays({str(self.folder)!r}, {len(self._files)} arrays)"


def smallest_int_dtype(low: int, high: int) -> np.dtype:
    """The smallest integer dtype that torch fully supports holding every value from ``low`` to ``high``.

    uint8, int8, int16, int32 or int64 (never uint16 / uint32, which torch tensors barely support): how
    :class:`MappedArrays` stores label maps (``0 .. C - 1``: uint8 up to 256 classes; with -1 for voxels left out:
    int8 up to 128 classes), so that a stored label is never wrapped by numpy's cast.

    Args:
        low: the smallest value to hold.
        high: the largest value to hold.

    Returns:
        The numpy dtype.

    Raises:
        ValueError: ``low`` is above ``high``, or the values do not fit int64.

    Example:
        >>> [smallest_int_dtype(lo, hi).name for lo, hi in ((0, 104), (0, 299), (-1, 104), (-1, 200), (-1, 1))]
        ['uint8', 'int16', 'int8', 'int16', 'int8']
    """
    low, high = int(low), int(high)
    if low > high:
        raise ValueError(f"low ({low}) must not be above high ({high})")
    for dtype in (np.uint8, np.int8, np.int16, np.int32, np.int64):
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return np.dtype(dtype)
    raise ValueError(f"values {low} .. {high} do not fit int64")


@contextlib.contextmanager
def scratch_folder(output: str | os.PathLike, what: str) -> Iterator[Path]:
    """A temporary folder beside an output, for data of a run too large for memory; removed at the end of the block.

    The folder is ``.<name>.partial-<what>-<random>.dir`` in the folder of ``output`` (``<name>`` its whole name, so
    that a file ``cal.pt`` and a folder ``cal`` never share a prefix; shortened when the folder's name would near the
    file system's 255-byte limit): beside the output, never in an input folder, on the file system the output goes
    to. It is removed when the block ends, also on an error; one that a killed run left is removed by the next scratch
    folder of the same output and ``what`` (a live run's is locked while it runs and left alone), by
    :func:`clean_partial_files` of that folder, and by :func:`atomic_folder` of ``output`` (its stale
    ``.<name>.partial-*.dir`` folders). ``monai-unc calibrate`` and ``monai-unc nnunet-calibrate`` keep their
    validation cases' logits there (:class:`MappedArrays`); ``monai-unc nnunet-predict`` its staged DICOM input and,
    with ``--output-format dicom``, nnU-Net's predictions (both inside ``-o``; every run into ``-o`` removes what a
    killed run of either kind left: :func:`remove_dead_scratch`). Neither is in the system's temporary folder, which
    a killed run's files (a patient's scans) would stay in for good (in earlier versions).

    Args:
        output: the output file or folder the run writes (its folder must exist).
        what: what the folder holds, a word in its name (letters, digits, ``-``, ``_``).

    Yields:
        The new, empty folder.

    Raises:
        ValueError: naming ``what`` when it is not such a word.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with scratch_folder(Path(d) / "cal.pt", "logits") as scratch:
        ...         _ = (scratch / "0.npy").write_bytes(b"")
        ...         print(scratch.name.startswith(".cal.pt.partial-logits-"), scratch.name.endswith(".dir"))
        ...     print(list(Path(d).iterdir()))
        True True
        []
    """
    output = Path(output)
    prefix = _scratch_prefix(output, what)
    _remove_dead_scratch(output.parent, prefix)
    folder, fd = _held_scratch(output.parent, prefix)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if fd is not None:
            os.close(fd)  # the lock released once the folder is gone


def _scratch_prefix(output: Path, what: str) -> str:
    """The name prefix of the scratch folders of ``output`` and ``what``: ``.<name>.partial-<what>-``.

    ``<name>`` is shortened so that a name near the file system's 255-byte limit still gets its folder.
    """
    if not isinstance(what, str) or not what or not all(c.isascii() and (c.isalnum() or c in "-_") for c in what):
        raise ValueError(f"what must be a word of letters, digits, '-' and '_', got {what!r}")
    name = output.name
    while name and len(f".{name}.partial-{what}-".encode("utf-8", "surrogateescape")) > 200:
        name = name[:-1]
    return f".{name}.partial-{what}-"


def remove_dead_scratch(output: str | os.PathLike, what: str) -> None:
    """Remove the scratch folders of ``output`` and ``what`` (:func:`scratch_folder`) that killed runs left.

    :func:`scratch_folder` does it for its own ``output`` and ``what``; a command whose runs make scratch folders of
    several kinds in one folder (``nnunet-predict``: a DICOM input's staging, the predictions of
    ``--output-format dicom``) calls it for the kinds it does not make itself, so that any later run into the
    folder removes a killed run's data. A live run's folder (locked) is left alone.

    Args:
        output: the output file or folder the scratch folders were made beside.
        what: their word (see :func:`scratch_folder`).

    Raises:
        ValueError: naming ``what`` when it is not such a word.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     (Path(d) / ".cal.pt.partial-logits-x1y2.dir").mkdir()  # left by a killed run
        ...     remove_dead_scratch(Path(d) / "cal.pt", "logits")
        ...     print(list(Path(d).iterdir()))
        []
    """
    output = Path(output)
    _remove_dead_scratch(output.parent, _scratch_prefix(output, what))


def private_folder(path: str | os.PathLike) -> contextlib.AbstractContextManager[Path]:
    """A private folder beside ``path`` for the parts a writer makes of it: ``.<name>.partial.dir`` (mode 0700).

    The folder :func:`atomic_path` writes in (its name fixed per file, so that a killed run's is removed by the next
    write of ``path`` and by :func:`clean_partial_files`, whatever else the folder holds: no listing of the folder;
    locked while its write lives; a random ``.<name>.partial-XXXXXXXX.dir`` where another write holds it). Removed
    when the block ends.

    Args:
        path: the file whose parts the folder holds (its folder must exist).

    Returns:
        A context manager yielding the new, empty folder.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with private_folder(Path(d) / "map.nii.gz") as folder:
        ...         print(folder.name)
        ...     print(list(Path(d).iterdir()))
        .map.nii.gz.partial.dir
        []
    """
    return _private_folder(Path(path))


def _held_scratch(parent: Path, prefix: str) -> tuple[Path, int | None]:
    """A new scratch folder ``<prefix><random>.dir`` in ``parent``, locked (``flock``) while its run lives.

    The lock tells a live run's folder from a killed one's (:func:`_remove_dead_scratch`); a folder removed by another
    run's sweep between its creation and its lock is made again. Without ``flock`` (Windows, some network file
    systems): ``(folder, None)``.
    """
    for _ in range(10):
        folder = Path(tempfile.mkdtemp(prefix=prefix, suffix=".dir", dir=parent))
        if fcntl is None:
            return folder, None
        try:
            fd = os.open(folder, _FOLDER_FLAGS)
        except FileNotFoundError:  # swept in between by another run: make another
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            same = (os.fstat(fd).st_ino, os.fstat(fd).st_dev) == (os.lstat(folder).st_ino, os.lstat(folder).st_dev)
        except (FileNotFoundError, BlockingIOError):  # swept in between, or held by another run's sweep
            # (_remove_dead_scratch), which removes it: make another (found by review48: a held one was returned
            # unlocked while is_dir() still held, then removed under the run)
            os.close(fd)
            continue
        except OSError:  # no flock on this file system
            os.close(fd)
            if folder.is_dir():
                return folder, None
            continue
        if same:
            return folder, fd
        os.close(fd)
    raise OSError(errno.EAGAIN, f"could not make a scratch folder {prefix}*.dir in {parent}")


def _remove_dead_scratch(parent: Path, prefix: str) -> None:
    """Remove the scratch folders ``<prefix>*.dir`` in ``parent`` that killed runs left: those no live run holds.

    A live run's folder is locked (:func:`_held_scratch`), so it is left alone; a folder of another user, a link and,
    without ``flock``, every folder are left alone too. Found by hostile testing of crash consistency: each
    ``monai-unc calibrate`` killed while collecting the validation logits left a ``.cal.pt.partial-logits-*.dir``
    with the logits of every case collected so far (``4 C + 1`` bytes per voxel) beside the output, which no later
    run removed.
    """
    if fcntl is None or not parent.is_dir():
        return
    # the names first (os.scandir, no path made per entry): the folder may hold thousands of outputs
    with os.scandir(parent) as entries:
        names = [e.name for e in entries if e.name.startswith(prefix) and e.name.endswith(".dir")]
    for name in names:
        stale = parent / name
        if stale.is_symlink() or not stale.is_dir():
            continue
        try:
            fd = os.open(stale, _FOLDER_FLAGS)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_uid != os.getuid():  # another user's: left alone
                raise PermissionError
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a live run's: BlockingIOError, left alone
        except OSError:
            os.close(fd)
            continue
        try:
            shutil.rmtree(stale, ignore_errors=True)
        finally:
            os.close(fd)


def save_state(path: str | os.PathLike, state: Any, compressed: bool = True) -> Path:
    """Write a mergeable state (its ``state_dict()``) to an ``.npz`` file atomically.

    The state follows :class:`monai_unc.state.MergeableState`; ``.npz`` is appended to other names, as numpy does.
    The state's class reads it back with ``cls.from_state_dict(dict(numpy.load(path)))`` (or its own ``load``).
    A state with a ``state_dict_blocks()`` method (the same arrays, its large tables as
    :class:`~monai_unc.state.ArrayBlocks`, e.g. a per-case
    :class:`~monai_unc.metrics.calibration.ConfidenceHistogram`) is written from those, one block at a time.

    Args:
        path: the file.
        state: the state, e.g. a :class:`~monai_unc.metrics.calibration.ConfidenceHistogram`.
        compressed: ``numpy.savez_compressed`` (default) or ``numpy.savez``.

    Returns:
        The path written.

    Example:
        >>> import tempfile, numpy as np
        >>> from monai_unc.metrics.calibration import ConfidenceHistogram
        >>> h = ConfidenceHistogram(2)
        >>> _ = h.update(np.array([[[0.2], [0.8]]]), np.array([[1]]))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = save_state(folder + "/hist", h)
        ...     path.name, int(ConfidenceHistogram.load(path).scalars[:, 0].sum())
        ('hist.npz', 1)
    """
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    blocks = getattr(state, "state_dict_blocks", None)
    arrays = blocks() if callable(blocks) else state.state_dict()
    # found by hostile testing (review 60): numpy.savez took a state's tensors as they were, and a SampleStats of
    # bfloat16 sums (or on a GPU) could not be saved ("Got unsupported ScalarType BFloat16")
    arrays = {k: v if isinstance(v, ArrayBlocks) else host_array(v) for k, v in arrays.items()}
    return atomic_save_npz(path, arrays, compressed=compressed)


class _RecordedWrites:
    """A binary file's ``write`` and ``flush`` for a writer that replaces their errors by its own (``torch.save``).

    The first ``OSError`` they raised is kept in ``error``.
    """

    def __init__(self, file: io.BufferedIOBase) -> None:
        self.file = file
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self.file.write(data)
        except OSError as e:
            self.error = self.error or e
            raise

    def flush(self) -> None:
        try:
            self.file.flush()
        except OSError as e:
            self.error = self.error or e
            raise


def _torch_save_file(obj: Any, path: Path) -> None:
    """``torch.save(obj, path)`` whose failed write raises its ``OSError`` (a full disk: ``ENOSPC``).

    Given a path, ``torch.save`` writes through its own C++ stream, and a failed write is a ``RuntimeError`` without
    an error number or a file (``unexpected pos 704 vs 598``, ``basic_ios::clear: iostream error``); given a file,
    the writes go through the file's ``write``, whose ``OSError`` torch then covers with such a ``RuntimeError``.
    The file is written here and that ``OSError`` raised in place of torch's error; other errors are torch's.
    """
    with open(path, "wb") as f:
        out = _RecordedWrites(f)
        try:
            torch.save(obj, out)
        except RuntimeError as e:
            if out.error is None:
                raise
            raise out.error from e


def atomic_torch_save(path: str | os.PathLike, obj: Any) -> Path:
    """``torch.save`` through a temporary file and a rename.

    A failed write raises its ``OSError`` naming ``path`` (a full disk: ``No space left on device: <path>``,
    :func:`is_disk_full`), not torch's ``RuntimeError`` without a file (found by hostile testing: ``calibrate`` on a
    full disk printed ``RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos ...``).

    Args:
        path: the file to write (e.g. ``.pt``).
        obj: what to save (a state dict, a tensor, ...).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     torch.load(atomic_torch_save(Path(d) / "t.pt", {"w": torch.ones(2)}))["w"].tolist()
        [1.0, 1.0]
    """
    return atomic_write(path, lambda tmp: _torch_save_file(obj, tmp))


def atomic_savefig(fig: Any, path: str | os.PathLike, **kwargs: Any) -> Path:
    """``fig.savefig`` of a Matplotlib figure through a temporary file and a rename.

    The temporary name keeps the file's extension last (``.<stem>.partial.png``), so Matplotlib picks the format
    from it as it would from ``path``.

    Args:
        fig: a :class:`matplotlib.figure.Figure` (anything with a ``savefig(fname, **kwargs)`` method).
        path: the image file; its extension (``.png``, ``.pdf``, ``.svg``, ...) selects the format unless
            ``format=`` is given.
        kwargs: passed to ``fig.savefig`` (``dpi``, ``bbox_inches``, ...).

    Returns:
        ``path``.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from matplotlib.figure import Figure
        >>> with tempfile.TemporaryDirectory() as d:
        ...     atomic_savefig(Figure(figsize=(1, 1)), Path(d) / "reliability.png", dpi=20).read_bytes()[1:4]
        b'PNG'
    """
    path = Path(path)
    with atomic_path(path, path.suffix or None) as tmp:
        fig.savefig(tmp, **kwargs)
    return path


def atomic_copy(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Copy the file ``src`` to ``dst`` through a temporary file and a rename, so ``dst`` is never a partial copy.

    The contents and the modification time are copied; the mode is the umask's, as for every file the package
    writes: :func:`shutil.copy2` gave the copy the source's mode, so under ``umask 077`` the report's assets (and
    the nnU-Net plans a calibration copies) came out world-readable, and a source of a read-only installation
    (0444) gave a read-only copy (found by hostile testing of real-world folders).

    Args:
        src: the file to copy.
        dst: the copy (a file path, not a folder).

    Returns:
        ``dst``.

    Raises:
        ValueError: ``src`` is not a file, or ``dst`` is ``src`` or an existing folder.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "plans.json").write_text("{}")
        ...     atomic_copy(Path(d) / "plans.json", Path(d) / "copy" / "plans.json").read_text()
        '{}'
    """
    src, dst = Path(src), Path(dst)
    if not src.is_file():
        raise ValueError(f"src must be a file, got {src}")
    if dst.is_dir():
        raise ValueError(f"dst must be a file path, got the folder {dst}")
    if _same_file(dst, src):
        raise ValueError(f"dst {dst} is the source file {src}")

    def write(tmp: Path) -> None:
        shutil.copyfile(src, tmp)  # a new file: the umask's mode
        st = os.stat(src)
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))

    return atomic_write(dst, write)


#: uncompressed bytes per independently deflated block of :class:`GzipBlockWriter` (fixed, so that the bytes written do
#: not depend on the number of threads)
GZIP_BLOCK_BYTES = 1 << 20
#: the window a block's deflate stream may refer back to: the last 32 KiB of the previous block
_DEFLATE_WINDOW = 1 << 15


#: :class:`GzipBlockWriter`'s deflate engines ("auto": ISA-L at level 1 where python-isal is installed, else zlib)
GZIP_ENGINES = ("auto", "zlib", "isal")


def _deflate_block(engine: Any, data: bytes, zdict: bytes, level: int, last: bool) -> bytes:
    """One raw deflate block of a :class:`GzipBlockWriter` stream, primed with the previous block's window.

    ``engine``: the ``zlib`` module or ``isal.isal_zlib`` (the same ``compressobj`` interface; ISA-L's levels 0-3).
    """
    if zdict:
        c = engine.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, zlib.DEF_MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY,
                               zdict)
    else:
        c = engine.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(data) + c.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def _gzip_engine(engine: str, compresslevel: int) -> tuple[Any, int]:
    """The deflate module and its level for :class:`GzipBlockWriter`'s ``engine`` and zlib ``compresslevel``."""
    if not isinstance(engine, str) or engine not in GZIP_ENGINES:
        raise ValueError(f"engine must be one of {GZIP_ENGINES}, got {engine!r}")
    if engine == "isal":
        if _isal_zlib is None:
            raise ValueError("engine 'isal' needs python-isal (pip install 'monai-unc[fast]' or 'isal')")
        if compresslevel != 1:
            raise ValueError(f"engine 'isal' writes at compresslevel 1 only, got {compresslevel!r}")
    if compresslevel == 1 and engine != "zlib" and _isal_zlib is not None:
        return _isal_zlib, 1
    return zlib, compresslevel


class GzipBlockWriter(io.RawIOBase):
    """A write-only file object that gzips what is written to it, compressing blocks of it on several threads.

    The data is cut into blocks of :data:`GZIP_BLOCK_BYTES` uncompressed bytes; each is deflated on its own, primed
    with the last 32 KiB of the block before it, and ended with a sync flush (the last block: the end of the stream),
    so the blocks join into one ordinary deflate stream. The file is one standard gzip member (RFC 1952), read by
    any gzip reader (``gzip``, zlib, nibabel, ITK, FSL); this is the method of Mark Adler's ``pigz``. The deflate
    engines release the GIL while they compress, so ``threads`` blocks are compressed at once. The block size is
    fixed and the header holds no name and no time: the bytes written do not depend on ``threads`` or on how the
    data was split into ``write`` calls. Sync flushes cost about 5 bytes per block, and each block loses the matches
    it could have found before the previous block's window (negligible for volumes).

    At level 1 (the default) the blocks are deflated by Intel's ISA-L (the ``isal`` package, in the ``fast`` extra)
    where it is installed: on the probability and uncertainty maps of segmentation networks about 10 times zlib's
    level-1 speed (zlib takes them at about 30 MB/s) for the same file size; on smooth synthetic data ISA-L's level
    1 finds fewer repeats than zlib's (larger files). The decompressed bytes are the same with either engine; the
    compressed bytes differ, so ``engine="zlib"`` gives files whose bytes do not depend on whether ISA-L is
    installed.

    At most ``2 * threads`` compressed blocks wait in memory before they are written in order.

    Args:
        fileobj: the binary file to write the gzip stream to (opened ``"wb"``); not closed by :meth:`close`.
        compresslevel: zlib level 0-9 (1: fastest).
        threads: compression threads; default: torch's intra-op thread count (``torch.get_num_threads()``).
        engine: ``"auto"`` (ISA-L at level 1 when installed, else zlib), ``"zlib"`` or ``"isal"`` (level 1 only;
            python-isal must be installed).

    Raises:
        ValueError: ``compresslevel`` is not an integer in 0-9, ``threads`` is not a positive integer, or
            ``engine`` is not one of :data:`GZIP_ENGINES` or is ``"isal"`` without python-isal or at another
            level than 1.

    Example:
        >>> import gzip, io
        >>> buf = io.BytesIO()
        >>> with GzipBlockWriter(buf, threads=2) as out:
        ...     _ = out.write(b"abc" * 1_000_000)
        >>> gzip.decompress(buf.getvalue()) == b"abc" * 1_000_000
        True
    """

    def __init__(self, fileobj: Any, compresslevel: int = 1, threads: int | None = None,
                 engine: str = "auto") -> None:
        self._pool: ThreadPoolExecutor | None = None
        try:
            if isinstance(compresslevel, bool) or not isinstance(compresslevel, int) or not 0 <= compresslevel <= 9:
                raise ValueError(f"compresslevel must be an integer in 0-9, got {compresslevel!r}")
            if threads is None:
                threads = num_threads()
            if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
                raise ValueError(f"threads must be a positive integer, got {threads!r}")
            self._engine, self._engine_level = _gzip_engine(engine, compresslevel)
            xfl = b"\x02" if compresslevel == 9 else b"\x04" if compresslevel == 1 else b"\x00"
            fileobj.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00" + xfl + b"\xff")  # no name, mtime 0, OS unknown
        except BaseException:  # closed as it is: the finalizer's close() must not write a stream's end to fileobj
            super().close()
            raise
        self._raw = fileobj
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="gzip") if threads > 1 else None
        self._limit = 2 * threads
        self._pending: deque[Future[bytes]] = deque()
        self._buf = bytearray()
        self._window = b""
        self._pos = 0
        self._crc = 0

    def writable(self) -> bool:
        """True: the object is written to."""
        return True

    def readable(self) -> bool:
        """False: the object is not read from."""
        return False

    def seekable(self) -> bool:
        """False: only :meth:`seek` to the current position works."""
        return False

    def tell(self) -> int:
        """The number of uncompressed bytes written so far."""
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        """Stay where the stream is (``seek(tell())``, ``seek(0, 1)``); any other move raises :class:`OSError`."""
        target = offset if whence == 0 else self._pos + offset if whence == 1 else None
        if target != self._pos:
            raise OSError("a gzip stream being written cannot seek")
        return self._pos

    def write(self, data: Any) -> int:
        """Add ``data`` (bytes-like) to the stream.

        Args:
            data: the bytes to compress.

        Returns:
            The number of bytes taken (all of them).
        """
        if self.closed:
            raise ValueError("write to a closed GzipBlockWriter")
        view = memoryview(data).cast("B")
        n = len(view)
        self._pos += n
        start = 0
        if self._buf:  # fill the block begun by earlier writes
            start = min(n, GZIP_BLOCK_BYTES - len(self._buf))
            self._buf += view[:start]
            if len(self._buf) < GZIP_BLOCK_BYTES:
                return n
            self._submit(bytes(self._buf), last=False)
            self._buf = bytearray()
        while n - start >= GZIP_BLOCK_BYTES:  # whole blocks straight from the caller's buffer
            self._submit(bytes(view[start:start + GZIP_BLOCK_BYTES]), last=False)
            start += GZIP_BLOCK_BYTES
        self._buf += view[start:]
        return n

    def flush(self) -> None:
        """Nothing to do: blocks are written once they are whole (and at :meth:`close`)."""

    def _submit(self, block: bytes, last: bool) -> None:
        self._crc = self._engine.crc32(block, self._crc)  # the same CRC-32 with either engine
        window = self._window
        self._window = block[-_DEFLATE_WINDOW:]
        args = (self._engine, block, window, self._engine_level, last)
        if self._pool is None:
            self._raw.write(_deflate_block(*args))
            return
        self._pending.append(self._pool.submit(_deflate_block, *args))
        while len(self._pending) > (0 if last else self._limit):
            self._raw.write(self._pending.popleft().result())

    def close(self) -> None:
        """Compress what is left, write the gzip trailer (CRC-32, length) and stop the threads.

        ``fileobj`` stays open. A second call does nothing.
        """
        if self.closed:
            return
        try:
            self._submit(bytes(self._buf), last=True)
            self._raw.write(struct.pack("<II", self._crc, self._pos & 0xFFFFFFFF))
        finally:
            self._buf = bytearray()
            self._shutdown()
            super().close()

    def _shutdown(self) -> None:
        if self._pool is not None:
            for f in self._pending:
                f.cancel()
            self._pending.clear()
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> GzipBlockWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:  # an error while writing: no trailer (the caller's temporary file is removed), just the threads
            self._shutdown()
            super().close()


def _write_nifti(image: Any, path: Path) -> None:
    """``nib.save(image, path)``, a NIfTI-1 / NIfTI-2 single file ending in ``.gz`` gzipped on several threads.

    The file holds the same uncompressed bytes as ``nib.save`` writes, compressed by :class:`GzipBlockWriter`.
    """
    if not path.name.endswith(".gz") or type(image) not in (nib.Nifti1Image, nib.Nifti2Image):
        nib.save(image, str(path))
        return
    with open(path, "wb") as raw, GzipBlockWriter(raw) as out:
        image.to_file_map({"image": nib.fileholders.FileHolder(fileobj=out)})


def atomic_gzip(src: str | os.PathLike, dst: str | os.PathLike, compresslevel: int = 1) -> Path:
    """Write the gzip of the file ``src`` to ``dst`` (e.g. a ``.nii`` as ``.nii.gz``) through a temporary file.

    The file is renamed into place once written. The gzip header holds no name and no time, so the same input
    gives the same bytes.

    Args:
        src: the file to compress.
        dst: the compressed file to write.
        compresslevel: zlib level 0-9 (1: fastest; float maps shrink little at any level).

    Returns:
        ``dst``.

    Raises:
        ValueError: ``src`` is not a file, ``dst`` is ``src``, or ``compresslevel`` is not in 0-9.

    Example:
        >>> import gzip, tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "a.txt").write_bytes(b"abc" * 100)
        ...     gzip.decompress(atomic_gzip(Path(d) / "a.txt", Path(d) / "a.txt.gz").read_bytes()) == b"abc" * 100
        True
    """
    src, dst = Path(src), Path(dst)
    if not src.is_file():
        raise ValueError(f"src must be a file, got {src}")
    if _same_file(dst, src):
        raise ValueError(f"dst {dst} is the source file {src}")
    if isinstance(compresslevel, bool) or not isinstance(compresslevel, int) or not 0 <= compresslevel <= 9:
        raise ValueError(f"compresslevel must be an integer in 0-9, got {compresslevel!r}")

    def write(tmp: Path) -> None:
        with open(src, "rb") as fin, open(tmp, "wb") as raw, GzipBlockWriter(raw, compresslevel) as fout:
            shutil.copyfileobj(fin, fout, GZIP_BLOCK_BYTES)

    return atomic_write(dst, write)


def save_nifti_image(image: nib.Nifti1Image, path: str | os.PathLike) -> Path:
    """Write a nibabel image as it is (data type, affine and header kept) through a temporary file and a rename.

    :func:`save_nifti` builds the image from an array and an affine with the package's data types; this writes an
    image built elsewhere (e.g. with a header copied from a reference image).

    Args:
        image: the image (a ``nibabel`` NIfTI-1 or NIfTI-2 image).
        path: the file, ending in ``.nii`` or ``.nii.gz``.

    Returns:
        ``path``.

    Raises:
        ValueError: ``path`` does not end in ``.nii`` or ``.nii.gz``.
        TypeError: ``image`` is not a nibabel image.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     image = nib.Nifti1Image(np.zeros((2, 2, 2), np.uint8), np.eye(4))
        ...     nib.load(save_nifti_image(image, Path(d) / "label.nii.gz")).get_data_dtype().name
        'uint8'
    """
    if not isinstance(image, nib.spatialimages.SpatialImage):
        raise TypeError(f"image must be a nibabel image, got {type(image).__name__}")
    path = Path(path)
    _check_nifti_name(path)
    return atomic_write(path, lambda tmp: _write_nifti(image, tmp))


def _spacing_agrees(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether the voxel sizes (column norms) of two affines agree as MONAI's header correction compares them."""
    return bool(np.allclose(np.linalg.norm(a[:3, :3], axis=0), np.linalg.norm(b[:3, :3], axis=0)))


def _reference_header(like: str | os.PathLike | None,
                      affine: np.ndarray) -> tuple[int, np.ndarray | None, int, str] | None:
    """What a NIfTI file written with ``affine`` copies from the header of ``like``, or None.

    ``(sform_code, qform, qform_code, spatial unit)``; None copies nothing (nibabel's defaults: sform code 2, no
    qform, no unit).

    The file the output belongs to (the input image, the label map) is copied only when the output is on its grid:
    its affine as nibabel reads it (the sform, or the qform without one) is ``affine``, or its qform is (the qform
    that MONAI's header correction puts in place of a sform that disagrees with ``pixdim``). Then the output holds
    ``affine`` as its sform under the reference's code, the reference's qform under its code, and the reference's
    spatial unit, so that every reader (nibabel and FSL read the sform; ITK, hence ITK-SNAP, 3D Slicer and
    nnU-Net's SimpleITKIO, prefers the qform of an SPM-coregistered file and converts microns to mm) places the
    output where it places the reference. A qform whose voxel sizes disagree with ``affine``'s is not copied (it
    would make ``pixdim`` disagree with the sform, and MONAI's correction would read the output another way).
    Anything that is not a readable NIfTI-1 / NIfTI-2 file gives None.
    """
    if like is None or not str(like).lower().endswith((".nii", ".nii.gz")):
        return None
    try:
        ref = load_nifti(like)
        if type(ref) not in (nib.Nifti1Image, nib.Nifti2Image):
            return None
        header = ref.header
        sform_code, qform_code = int(header["sform_code"]), int(header["qform_code"])
        qform = np.asarray(header.get_qform(), dtype=np.float64)
        unit = header.get_xyzt_units()[0]
        read = np.asarray(ref.affine, dtype=np.float64)
    except Exception:  # noqa: BLE001 - a reference nibabel does not read: the defaults
        return None

    def same(a: np.ndarray) -> bool:
        return a.shape == np.shape(affine) == (4, 4) and bool(np.allclose(a, affine, rtol=0.0, atol=1e-6))

    if not (same(read) or (qform_code > 0 and same(qform))):
        return None
    keep_qform = qform_code > 0 and bool(np.all(np.isfinite(qform))) and _spacing_agrees(qform, affine)
    return sform_code or qform_code or 2, qform if keep_qform else None, qform_code if keep_qform else 0, unit


def _nifti_image(arr: np.ndarray, affine: np.ndarray, like: str | os.PathLike | None) -> nib.Nifti1Image:
    """``nib.Nifti1Image(arr, affine)``, with the sform / qform codes, qform and unit of ``like`` where it applies.

    :func:`_reference_header` says what is copied.
    """
    image = nib.Nifti1Image(arr, affine)
    copied = _reference_header(like, affine)
    if copied is not None:
        sform_code, qform, qform_code, unit = copied
        image.header.set_sform(affine, code=sform_code)
        if qform is not None:
            image.header.set_qform(qform, code=qform_code)
        if unit != "unknown":
            image.header.set_xyzt_units(xyz=unit)
    return image


def _check_nifti_name(path: Path) -> None:
    if not path.name.endswith((".nii", ".nii.gz")):
        raise ValueError(f"path must end in .nii or .nii.gz, got {path}")


def _to_numpy(data: np.ndarray | torch.Tensor) -> np.ndarray:
    """``data`` as a numpy array; a bfloat16 tensor as float32, exactly.

    numpy has no bfloat16: an autocast output raised torch's "Got unsupported ScalarType BFloat16" from every NIfTI
    writer (found by hostile testing).
    """
    if isinstance(data, torch.Tensor):
        data = (data.as_tensor() if hasattr(data, "as_tensor") else data).detach().cpu()
        data = (data.float() if data.dtype == torch.bfloat16 else data).numpy()
    return np.asarray(data)


def _label_dtype(arr: np.ndarray) -> type:
    """int16 when every value of the integer or bool ``arr`` fits it, else int32; ``ValueError`` beyond int32."""
    if arr.size == 0 or arr.dtype == bool:
        return np.int16
    lo, hi = int(arr.min()), int(arr.max())
    for dtype in (np.int16, np.int32):
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
            return dtype
    raise ValueError(f"data holds integers in [{lo}, {hi}], beyond the int32 range a NIfTI map is written in")


def save_nifti(data: np.ndarray | torch.Tensor, affine: np.ndarray, path: str | os.PathLike,
               like: str | os.PathLike | None = None, dtype: str | None = None) -> Path:
    """Write a 3D map (or ``(1, X, Y, Z)`` / ``(1, 1, X, Y, Z)``) with ``affine`` as a NIfTI file, atomically.

    The file is written under a temporary name (:func:`atomic_path`) and renamed into place. Integer and bool arrays
    are stored as int16 (int32 when a value needs it), floating arrays as float32, unless ``dtype`` says otherwise.

    Args:
        data: the volume ``(X, Y, Z)``; leading singleton axes are dropped. NumPy array or torch tensor (a MONAI
            ``MetaTensor`` too).
        affine: ``(4, 4)`` voxel -> world matrix (mm).
        path: the file, ending in ``.nii`` or ``.nii.gz``.
        like: the NIfTI file the map belongs to (the input image, the label map), or None. When ``affine`` is that
            file's affine (its sform, or the qform read in its place), the map gets its sform and qform codes, its
            qform and its spatial unit, so that ITK-based tools (ITK-SNAP, 3D Slicer, nnU-Net's SimpleITKIO), which
            prefer the qform of an SPM-coregistered file and convert microns to mm, place the map where they place
            that file; otherwise (and for other formats) sform code 2, no qform, no unit.
        dtype: None (the types above), ``"float32"``, or ``"uint8"`` for a 0/1 mask (as :func:`save_region_maps`
            writes one per region).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: ``data`` is not 3D once leading singleton axes are dropped, holds integers beyond int32,
            ``affine`` is not 4x4, ``path`` does not end in ``.nii`` / ``.nii.gz``, an unknown ``dtype``, or
            ``dtype="uint8"`` with values other than 0 and 1.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     img = nib.load(save_nifti(np.ones((1, 4, 5, 6)), np.diag([2.0, 2.0, 2.0, 1.0]), Path(d) / "u.nii.gz"))
        ...     img.shape, img.get_data_dtype().name, [float(z) for z in img.header.get_zooms()]
        ((4, 5, 6), 'float32', [2.0, 2.0, 2.0])
    """
    arr = _to_numpy(data)
    while arr.ndim > 3 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 3:
        raise ValueError(f"data must be a 3D volume (after dropping leading singleton axes), got shape {arr.shape}")
    affine = np.asarray(affine, dtype=np.float64)
    if affine.shape != (4, 4):
        raise ValueError(f"affine must be 4x4, got {affine.shape}")
    if dtype not in (None, "float32", "uint8"):
        raise ValueError(f"dtype must be None, 'float32' or 'uint8', got {dtype!r}")
    if dtype == "uint8":
        if arr.size and not ((arr == 0) | (arr == 1)).all():  # 0.5, NaN, 2: no mask (a cast would change them)
            raise ValueError("data must hold a 0/1 mask for dtype='uint8'")
        arr = arr.astype(np.uint8, copy=False)
    elif dtype is None and (np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool):
        arr = arr.astype(_label_dtype(arr), copy=False)
    else:
        arr = arr.astype(np.float32, copy=False)
    path = Path(path)
    _check_nifti_name(path)
    image = _nifti_image(arr, affine, like)
    return atomic_write(path, lambda tmp: _write_nifti(image, tmp))


def _save_channels(arr: np.ndarray, affine: np.ndarray, path: str | os.PathLike, dtype: str, what: str,
                   like: str | os.PathLike | None = None) -> Path:
    """``(C, X, Y, Z)`` (leading singleton axes dropped) as a 4D NIfTI ``(X, Y, Z, C)`` of ``dtype``, atomically."""
    while arr.ndim > 4 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 4:
        raise ValueError(f"{what}, got shape {arr.shape}")
    path = Path(path)
    _check_nifti_name(path)
    image = _nifti_image(np.moveaxis(arr.astype(dtype, copy=False), 0, -1), np.asarray(affine, dtype=np.float64), like)
    return atomic_write(path, lambda tmp: _write_nifti(image, tmp))


def save_probabilities(probs: np.ndarray | torch.Tensor, affine: np.ndarray, path: str | os.PathLike,
                       like: str | os.PathLike | None = None) -> Path:
    """Write probabilities ``(C, X, Y, Z)`` as a 4D float32 NIfTI ``(X, Y, Z, C)``, atomically.

    The file is written through a temporary file and a rename, as :func:`save_nifti` does for 3D maps.

    Args:
        probs: ``(C, X, Y, Z)`` probabilities (leading singleton axes dropped), NumPy array or torch tensor.
        affine: ``(4, 4)`` voxel -> world matrix (mm).
        path: the file, ending in ``.nii`` or ``.nii.gz``.
        like: the NIfTI file the volumes belong to, whose sform / qform codes, qform and spatial unit the file copies
            when ``affine`` is its affine (:func:`save_nifti`).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: ``probs`` is not 4D once leading singleton axes are dropped, or ``path`` is not a NIfTI name.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     nib.load(save_probabilities(np.full((3, 4, 5, 6), 1 / 3), np.eye(4), Path(d) / "p.nii.gz")).shape
        (4, 5, 6, 3)
    """
    return _save_channels(_to_numpy(probs), affine, path, "float32", "probs must be (C, X, Y, Z)", like)


def save_region_maps(
    data: np.ndarray | torch.Tensor, affine: np.ndarray, path: str | os.PathLike, dtype: str = "float32",
    like: str | os.PathLike | None = None,
) -> Path:
    """Write one volume per region ``(R, X, Y, Z)`` as a 4D NIfTI ``(X, Y, Z, R)`` of ``dtype``, atomically.

    The volumes are region masks, mean probabilities or uncertainty maps of a region-based network; the file is
    written through a temporary file and a rename as :func:`save_nifti`.

    Args:
        data: ``(R, X, Y, Z)`` (leading singleton axes dropped), NumPy array or torch tensor.
        affine: ``(4, 4)`` voxel -> world matrix (mm).
        path: the file, ending in ``.nii`` or ``.nii.gz``.
        dtype: ``"float32"``, or ``"uint8"`` for 0/1 masks.
        like: the NIfTI file the volumes belong to, whose sform / qform codes, qform and spatial unit the file copies
            when ``affine`` is its affine (:func:`save_nifti`).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: ``dtype`` is neither, ``dtype="uint8"`` with values outside 0/1, ``data`` is not 4D, or ``path``
            is not a NIfTI name.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     img = nib.load(save_region_maps(np.ones((3, 4, 4, 4)), np.eye(4), Path(d) / "m.nii.gz", dtype="uint8"))
        ...     img.shape, img.get_data_dtype().name
        ((4, 4, 4, 3), 'uint8')
    """
    if dtype not in ("float32", "uint8"):
        raise ValueError(f"dtype must be 'float32' or 'uint8', got {dtype!r}")
    arr = _to_numpy(data)
    if dtype == "uint8" and arr.size and not ((arr == 0) | (arr == 1)).all():  # 0.5, NaN: no mask (cast to 0)
        raise ValueError("data must hold 0/1 region masks for dtype='uint8'")
    return _save_channels(arr, affine, path, dtype, "data must be (R, X, Y, Z)", like)


def save_label_maps(labels: np.ndarray | torch.Tensor, affine: np.ndarray, path: str | os.PathLike,
                    like: str | os.PathLike | None = None) -> Path:
    """Write integer label maps ``(S, X, Y, Z)`` as a 4D NIfTI ``(X, Y, Z, S)`` of the smallest dtype, atomically.

    uint8 up to label 255, uint16 up to 65535, int32 above (the labels of a region spec reach ``2**31 - 1``): every
    label is written as it is, never wrapped.

    One hard segmentation per volume, e.g. the label map of each stochastic pass of ``monai-unc infer
    --save-samples`` (``<case>_samples.nii.gz``, read back by
    :func:`~monai_unc.evaluation.lesions.read_lesion_samples`).

    Args:
        labels: ``(S, X, Y, Z)`` non-negative integer labels (leading singleton axes dropped), NumPy or torch.
        affine: ``(4, 4)`` voxel -> world matrix (mm).
        path: the file, ending in ``.nii`` or ``.nii.gz``.
        like: the NIfTI file the volumes belong to, whose sform / qform codes, qform and spatial unit the file copies
            when ``affine`` is its affine (:func:`save_nifti`).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: labels that are not integers in ``[0, 2**31 - 1]``, not 4D, or ``path`` not a NIfTI name.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     img = nib.load(save_label_maps(np.full((3, 4, 4, 4), 2), np.eye(4), Path(d) / "s.nii.gz"))
        ...     img.shape, img.get_data_dtype().name
        ((4, 4, 4, 3), 'uint8')
    """
    arr = _to_numpy(labels)
    if arr.dtype.kind not in "biu" and not (np.isfinite(arr).all() and (arr == np.round(arr)).all()):
        raise ValueError("labels must hold integer label maps")
    top = np.iinfo(np.int32).max
    if arr.size and (arr.min() < 0 or arr.max() > top):
        raise ValueError(f"labels must lie in [0, {top}], got [{arr.min()}, {arr.max()}]")
    dtype = label_map_dtype(arr.max() if arr.size else 0, "labels")
    return _save_channels(arr, affine, path, dtype, "labels must be (S, X, Y, Z)", like)


def plain_file_name(name: Any) -> bool:
    r"""Whether ``name`` is a plain file name: one entry of a folder, never a path that leaves it.

    The one test of a file name read from untrusted input (a case record's ``files`` or ``maps``, a case id in a
    state file users may edit) before it is joined to a folder: ``folder / "../x"`` lies beside the folder and
    ``folder / "/etc/passwd"`` is ``/etc/passwd``. A plain name is a non-empty ``str``, not ``"."`` or ``".."``,
    without a path separator of the platform (``/``, and a backslash on Windows) or NUL (which the operating system
    refuses), and equal to its own last path component (``Path(name).name == name``). A backslash is a plain
    character of a POSIX file name (``infer`` predicts a case ``a\b`` into ``a\b_seg.nii.gz``, an entry of its
    folder), as for :meth:`monai_unc.engine.CaseCache.path` (in earlier versions such a case was
    predicted again on every resume).

    Args:
        name: the name to test (any value: what is not a ``str`` is no file name).

    Returns:
        True for a plain file name, else False.

    Example:
        >>> plain_file_name("case01_probs.nii.gz")
        True
        >>> [plain_file_name(n) for n in ("", "..", "../x", "/etc/passwd", "sub/x", "a\x00b", 7)]
        [False, False, False, False, False, False, False]
    """
    separators = {"/", "\x00", os.sep, os.altsep or "/"}  # a backslash where it separates (Windows) only
    return (isinstance(name, str) and name not in ("", ".", "..") and not any(c in name for c in separators)
            and Path(name).name == name)


def read_json_or_none(path: str | os.PathLike) -> Any:
    """The JSON document at ``path``, or None when the file is missing, unreadable, no regular file or not JSON.

    For records that are optional, e.g. a run's ``infer.json`` or a case record.

    Args:
        path: the JSON file.

    Returns:
        The parsed document (any JSON value), or None.

    Example:
        >>> read_json_or_none("no/such/file.json") is None
        True
    """
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or device (planted) is never read: its read blocked
            return None  # forever or never ended (found by hostile testing: a FIFO as dicom_export.json)
        return json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError):  # RecursionError: deeply nested (found by hostile testing)
        return None


#: parsed JSON records by version of their file (:func:`read_json_cached`), most recently used last
_JSON_CACHE: dict[tuple[Any, ...], Any] = {}
_JSON_CACHE_LOCK = threading.Lock()
_JSON_CACHE_SIZE = 64
#: seconds since a file's or folder's last change before a cache keeps what it read of it (coarser than any file
#: system's timestamps: FAT's 2)
SETTLE_S = 3


def file_version(path: str, st: os.stat_result) -> tuple[Any, ...]:
    """What identifies one version of a file: its path and its ``(device, inode, size, mtime_ns, ctime_ns)``."""
    return (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def settled(st: os.stat_result, now_ns: int | None = None) -> bool:
    """Whether a file or folder (its ``os.stat``) last changed more than :data:`SETTLE_S` seconds ago.

    A cache keyed by the times of a file keeps what it read only of a settled one: with coarse timestamps (1 s on
    ext3 or NFS, 2 s on FAT, a few ms on Linux without fine-grained ones) a change within the same tick as the one
    before gives the same times, and would be answered from the cache.

    Args:
        st: the file's or folder's status.
        now_ns: the time to measure from (``time.time_ns()``); one clock reading for the several files of one scan.
            None (default): read the clock now.

    Returns:
        True when its modification and change times lie more than :data:`SETTLE_S` seconds back.

    Example:
        >>> import os, tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     settled(os.stat(folder))  # made just now
        False
    """
    if now_ns is None:
        now_ns = time.time_ns()
    elif isinstance(now_ns, bool) or not isinstance(now_ns, int):
        raise TypeError(f"now_ns must be an integer (nanoseconds, as time.time_ns() gives), got {now_ns!r}")
    return now_ns - max(st.st_mtime_ns, st.st_ctime_ns) > SETTLE_S * 1_000_000_000


def read_json_cached(path: str | os.PathLike) -> Any:
    """:func:`read_json_or_none`, parsed once per version of the file: for a folder's record read once per case.

    The parsed document is kept under the file's path and its ``(device, inode, size, mtime_ns, ctime_ns)``
    (``os.stat``, links followed): a loop over a prediction folder's cases reads its ``infer.json`` once, and a file
    replaced or rewritten since (another inode, size or time) is read again, never answered from the copy of the
    earlier version. A version is kept only when the file's status was the same before and after it was read (a
    write during the read is not kept) and its last change lies more than 3 seconds back: a file system with coarse
    timestamps gives a rewrite of the same size within the same tick the same times (earlier versions answered such
    a rewrite with the document read before it). The last 64 versions are kept; each call returns its own copy.

    Args:
        path: the JSON file.

    Returns:
        The parsed document (any JSON value), or None when the file is missing, unreadable, no regular file or not
        JSON (nothing is kept then).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     p = Path(d) / "infer.json"
        ...     _ = p.write_text('{"settings": {"samples": 8}}')
        ...     first = read_json_cached(p)
        ...     _ = p.write_text('{"settings": {"samples": 16}}')
        ...     first["settings"]["samples"], read_json_cached(p)["settings"]["samples"]
        (8, 16)
    """
    where = os.path.abspath(os.fspath(path))
    try:
        st = os.stat(where)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):  # a FIFO or device is never read (read_json_or_none)
        return None
    key = file_version(where, st)
    with _JSON_CACHE_LOCK:
        if key in _JSON_CACHE:
            doc = _JSON_CACHE.pop(key)
            _JSON_CACHE[key] = doc  # most recently used last
            return copy.deepcopy(doc)
    try:
        with open(where, "rb") as f:
            before = os.fstat(f.fileno())
            raw = f.read()
            after = os.fstat(f.fileno())
        doc = json.loads(raw)
    except (OSError, ValueError, RecursionError):
        return None
    version = file_version(where, before)
    # a file changed in the last SETTLE_S seconds is not kept: a rewrite of the same size within the same tick has
    # the same version, and was answered with the earlier document
    if stat.S_ISREG(before.st_mode) and settled(before) and version == file_version(where, after):
        with _JSON_CACHE_LOCK:
            _JSON_CACHE[version] = doc
            while len(_JSON_CACHE) > _JSON_CACHE_SIZE:
                del _JSON_CACHE[next(iter(_JSON_CACHE))]
    return copy.deepcopy(doc)


def file_sha256(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    """The sha256 content digest of a file (hex), read in chunks so that a weight file of gigabytes is never in memory.

    Args:
        path: the file.
        chunk_size: bytes read at a time.

    Returns:
        The 64-character hex digest.

    Raises:
        ValueError: naming the file when it is missing or unreadable.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "w.pt").write_bytes(b"abc")
        ...     file_sha256(Path(d) / "w.pt")[:16]
        'ba7816bf8f01cfea'
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"cannot hash {p}: file not found")
    h = hashlib.sha256()
    try:
        with p.open("rb") as f:
            for block in iter(lambda: f.read(chunk_size), b""):
                h.update(block)
    except OSError as e:
        raise ValueError(f"cannot hash {p}: {e}") from None
    return h.hexdigest()


def weight_digests(paths: Sequence[str | os.PathLike], names: Sequence[str] | None = None) -> list[dict[str, str]]:
    """The content digests of the files that made a model's predictions (checkpoints, ensemble members, configs).

    In order, each file hashed once: ``[{"file": name, "sha256": hex}, ...]``, the record that a prediction
    fingerprint compares (the names are for display only).

    Args:
        paths: the files.
        names: what to call them in the record (default: the paths as given).

    Returns:
        One entry per file.

    Raises:
        ValueError: ``names`` and ``paths`` differ in length, or a file is missing or unreadable.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "w.pt").write_bytes(b"abc")
        ...     [(e["file"], e["sha256"][:8]) for e in weight_digests([Path(d) / "w.pt"] * 2, names=["a", "b"])]
        [('a', 'ba7816bf'), ('b', 'ba7816bf')]
    """
    names = [os.fspath(p) for p in paths] if names is None else [str(n) for n in names]
    if len(names) != len(paths):
        raise ValueError(f"names has {len(names)} entries for {len(paths)} paths")
    cache: dict[str, str] = {}
    out = []
    for p, n in zip(paths, names):
        key = os.path.realpath(p)
        if key not in cache:
            cache[key] = file_sha256(p)
        out.append({"file": n, "sha256": cache[key]})
    return out


def json_safe(x: Any, digits: int | None = None) -> Any:
    """``x`` with plain Python types only, for ``json.dumps`` with ``allow_nan=False``.

    NaN / inf become None, NumPy scalars and arrays and torch tensors Python numbers and lists, tuples lists, paths
    strings; NumPy scalar dict keys become Python scalars. Applied recursively to dicts, lists and tuples.

    Args:
        x: the value.
        digits: round floats to this many significant digits (None: full precision).

    Returns:
        The converted value.

    Example:
        >>> json_safe({"a": np.float32(0.5), "b": (float("inf"), np.arange(2)), "c": 1 / 3}, digits=3)
        {'a': 0.5, 'b': [None, [0, 1]], 'c': 0.333}
    """
    if isinstance(x, dict):
        return {(k.item() if isinstance(k, np.generic) else k): json_safe(v, digits) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v, digits) for v in x]
    if isinstance(x, np.ndarray):
        return json_safe(x.tolist(), digits)
    if isinstance(x, torch.Tensor):
        return json_safe(x.detach().cpu().tolist(), digits)
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (np.floating, float)):
        f = float(x)
        if not math.isfinite(f):
            return None
        return float(f"{f:.{digits}g}") if digits is not None else f
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, os.PathLike):
        return os.fspath(x)
    return x


def json_default(o: Any) -> Any:
    """``default=`` for ``json.dumps`` that turns NumPy scalars and arrays into Python numbers and lists.

    NaN is kept as is (Python's ``NaN`` literal): for the package's own state files, which must round-trip NaN
    exactly. Files meant for other readers use :func:`json_safe` / :func:`atomic_write_json` instead (strict JSON).

    Args:
        o: a value ``json.dumps`` cannot write by itself.

    Returns:
        ``o.item()`` for a NumPy scalar, ``o.tolist()`` for an array.

    Raises:
        TypeError: ``o`` is of another type.

    Example:
        >>> json.dumps({"x": np.float64("nan"), "y": np.arange(2)}, default=json_default)
        '{"x": NaN, "y": [0, 1]}'
    """
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def check_entry_kind(path: str | os.PathLike, what: str, folder: bool) -> None:
    """Refuse an input path that is there but of the wrong kind: a file given for a folder, a folder for a file.

    Called before a command's "not found" error, so that a path that exists is never reported as missing (found by
    hostile testing: ``infer -i scan.nii.gz`` said ``--input folder not found: scan.nii.gz``, ``--checkpoint
    models/`` said ``checkpoint file not found``). A symbolic link to nothing is named as such. A path that is
    missing, or of the right kind, passes: the caller goes on with its own check.

    Args:
        path: the input path.
        what: what the path is, for the message (``"--input folder"``, ``"checkpoint"``).
        folder: True when a folder is expected, False when a file is.

    Raises:
        NotADirectoryError: a file (or other non-folder) where a folder is expected.
        IsADirectoryError: a folder where a file is expected.
        FileNotFoundError: a symbolic link to nothing, naming its target.
        ValueError: a device, pipe or socket where a file is expected.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     try:
        ...         check_entry_kind(d, "checkpoint", folder=False)
        ...     except IsADirectoryError as e:
        ...         print(str(e).replace(d, "DIR"))
        checkpoint DIR is a folder, not a file
    """
    path = Path(path)
    if path.is_symlink() and not path.exists():
        target = link_target(path)
        raise FileNotFoundError(f"{what} {path} is a symbolic link to {target}, which does not exist")
    if not path.exists():
        return
    if folder and not path.is_dir():
        raise NotADirectoryError(f"{what} {path} is a file, not a folder")
    if not folder and path.is_dir():
        raise IsADirectoryError(f"{what} {path} is a folder, not a file")
    if not folder and not path.is_file():  # found by hostile review 59: /dev/null (a device) was "file not found"
        raise ValueError(f"{what} {path} is not a regular file (a device, pipe or socket)")


def input_folder(path: str | os.PathLike, parameter: str | None, what: str | None = None) -> Path:
    """``path`` as a :class:`~pathlib.Path` when it is an existing folder; refused, naming ``parameter``, otherwise.

    The one check of an input folder (labels, predictions, images, an evaluation, ...) before it is read: a missing
    path is ``"<what> not found: <path>"``, a file is ``"<what> <path> is a file, not a folder"`` and a symbolic
    link to nothing names its target (:func:`check_entry_kind`). The error is marked as refusing ``parameter``
    (:func:`monai_unc._utils.parameter_error`), so that the command line names the option the user typed
    (``--images folder not found: x``) while the Python API names the parameter (``images folder not found: x``).

    Args:
        path: the folder; an empty string (an unset shell variable) is refused, not read as the current directory.
        parameter: the parameter (the command line's destination, e.g. ``"images"``) whose value ``path`` is; None
            for a helper that does not know it (the error is then not marked: its caller marks it).
        what: how messages name the folder (default ``"<parameter> folder"``, or ``"folder"`` without a
            parameter); a workflow whose messages name options says ``"--input folder"``.

    Returns:
        ``Path(path)``.

    Raises:
        FileNotFoundError: nothing at ``path``, or a symbolic link to nothing.
        NotADirectoryError: a file (or another entry that is no folder) at ``path``.
        ValueError: ``path`` is the empty string.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     input_folder(d, "labels") == Path(d)
        ...     try:
        ...         input_folder(Path(d) / "missing", "labels")
        ...     except FileNotFoundError as e:
        ...         print(e.parameter, "|", str(e).replace(d, "DIR"))
        True
        labels | labels folder not found: DIR/missing
    """
    what = what if what is not None else (f"{parameter} folder" if parameter else "folder")
    try:
        if isinstance(path, str) and not path:
            raise ValueError(f"{what} must be a path, got an empty one ('')")
        folder = Path(path)
        if not folder.is_dir():
            check_entry_kind(folder, what, folder=True)
            raise FileNotFoundError(f"{what} not found: {folder}")
    except (ValueError, OSError) as e:
        if parameter:
            raise parameter_error(e, parameter) from None
        raise
    return folder


def _nearest_existing(path: Path, what: str) -> Path:
    """``path`` or its nearest ancestor that exists; ``ValueError`` when an ancestor cannot be examined."""
    probe = path
    try:
        while not probe.exists():
            if probe.is_symlink():
                raise ValueError(f"{what} {path}: {probe} is a broken symbolic link")
            if probe.parent == probe:
                break
            probe = probe.parent
    except OSError as e:  # e.g. an ancestor without search permission
        raise ValueError(f"{what} {path} cannot be examined: {e.strerror or e} ({probe})") from None
    return probe


def check_writable_folder(folder: str | os.PathLike, what: str = "output folder") -> Path:
    """Check, before any work, that ``folder`` is a folder this process can write to, or can be created.

    The folder itself when it exists, else its nearest existing ancestor, must be a folder with write and search
    permission (``os.access``; a read-only file system counts as not writable). Nothing is created. (Run as root,
    ``os.access`` grants write permission on any folder of a writable file system, as the kernel does.)

    Args:
        folder: the folder to check.
        what: how error messages name it.

    Returns:
        The absolute path of ``folder``.

    Raises:
        ValueError: naming ``what`` and the path when a component of the path is a file (the folder cannot be
            created) or when permission is missing.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     check_writable_folder(Path(d) / "new" / "out") == Path(d).resolve() / "new" / "out"
        True
    """
    path = Path(os.path.abspath(os.fspath(folder)))
    probe = _nearest_existing(path, what)
    if probe == path and not path.is_dir():
        raise ValueError(f"{what} {folder} is a file, not a folder")
    if not probe.is_dir():
        raise ValueError(f"{what} {folder} cannot be created: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        where = "" if probe == path else f" (cannot create folders in {probe})"
        raise ValueError(f"{what} {folder} is not writable: permission denied{where}")
    return path


def check_output_folder(
    output: str | os.PathLike, *inputs: str | os.PathLike | None, writable: bool = True, what: str = "output folder"
) -> Path:
    """Refuse an output folder that is, or lies inside, an input folder, or that cannot be written.

    Inputs are never written; with ``writable=True`` the folder must also be writable or creatable
    (:func:`check_writable_folder`). Call it before any work: a bad output is then one error line, not a failure
    after hours of inference.

    Args:
        output: the output folder.
        *inputs: the input folders (None is skipped).
        writable: also check that ``output`` can be written or created.
        what: how messages name ``output`` (a command line whose options are not ``--output`` names its own:
            ``nnunet-predict``'s ``"-o folder"``).

    Returns:
        The resolved path of ``output``.

    Raises:
        ValueError: ``output`` is or lies inside an input folder, or cannot be written.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     check_output_folder(Path(d) / "images" / "out", Path(d) / "images")
        Traceback (most recent call last):
            ...
        ValueError: output folder ... lies inside the input folder ...; choose an output outside it (...)
    """
    out = Path(output).resolve()
    for inp in inputs:
        if inp is None:
            continue
        src = Path(inp).resolve()
        if out == src or src in out.parents:
            raise ValueError(
                f"{what} {output} lies inside the input folder {inp}; choose an output outside it "
                "(inputs are never written to)"
            )
        for linked, whole in _linked_folders(src):
            if out == linked or (whole and linked in out.parents):
                raise ValueError(
                    f"{what} {output} {'is' if out == linked else 'lies inside'} {linked}, which holds inputs "
                    f"that {inp} links to; choose an output elsewhere (inputs are never written to)"
                )
    if writable:
        check_writable_folder(output, what)
    return out


def _linked_folders(folder: Path) -> set[tuple[Path, bool]]:
    """The folders the symbolic links directly in ``folder`` lead into, each with whether its sub-folders count.

    ``(a linked file's folder, False)``, ``(a linked folder, True)``: the whole linked folder is an input.

    A folder of links (a data set linked from the archive instead of copied) keeps its inputs elsewhere: an output
    folder there wrote beside the original scans (found by hostile testing of real-world folders).
    """
    found: set[tuple[Path, bool]] = set()
    try:
        entries = list(os.scandir(folder))
    except OSError:  # not a folder (an input file), no access: nothing linked to follow
        return found
    for entry in entries:
        if not entry.is_symlink():
            continue
        try:
            target = Path(entry.path).resolve(strict=True)
        except (OSError, RuntimeError):  # a link to nothing, a loop: the case reports it
            continue
        found.add((target, True) if target.is_dir() else (target.parent, False))
    return found


def _same_file(a: Path, b: Path) -> str | None:
    """How ``a`` names the file ``b``.

    ``"is"`` (the same path), ``"is a link to"`` (the same path once symbolic links are followed), ``"is a hard
    link of"`` (the same inode), or None (different files).
    """
    if os.path.abspath(a) == os.path.abspath(b):
        return "is"
    if a.resolve() == b.resolve():
        return "is a link to"
    try:
        if a.exists() and b.exists() and os.path.samefile(a, b):
            return "is a hard link of"
    except OSError:
        pass
    return None


def check_output_file(
    output: str | os.PathLike, *inputs: str | os.PathLike | None, what: str = "output file"
) -> Path:
    """Check, before any work, a file a command is about to write.

    Refused: ``output`` is one of the input files ``inputs`` -- the same path, a symbolic link to it or a hard
    link of it (an input is never overwritten, e.g. ``calibrate --checkpoint w.pt -o w.pt``) --, lies inside an
    input given as a folder, is an existing folder, or its folder cannot be written or created
    (:func:`check_writable_folder`).

    Args:
        output: the file to write.
        *inputs: the command's input files and folders (None is skipped).
        what: how error messages name ``output``.

    Returns:
        The absolute path of ``output``.

    Raises:
        ValueError: naming ``what`` for each refusal above.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "w.pt").write_bytes(b"")
        ...     check_output_file(Path(d) / "w.pt", Path(d) / "w.pt")
        Traceback (most recent call last):
            ...
        ValueError: output file ... is the input file ...; choose another name (inputs are never overwritten)
    """
    out = Path(os.path.abspath(os.fspath(output)))
    for inp in inputs:
        if inp is None:
            continue
        src = Path(inp)
        if src.is_dir():
            root = src.resolve()
            if root == out.resolve() or root in out.resolve().parents:
                raise ValueError(f"{what} {output} lies inside the input folder {inp}; choose an output outside "
                                 "it (inputs are never written to)")
        elif (how := _same_file(out, src)) is not None:
            raise ValueError(f"{what} {output} {how} the input file {inp}; choose another name (inputs are never "
                             "overwritten)")
    if out.is_dir():
        raise ValueError(f"{what} {output} is a folder; give a file name")
    try:
        check_writable_folder(out.parent, "its folder")
    except ValueError as e:
        raise ValueError(f"{what} {output} cannot be written: {e}") from None
    return out


def check_inputs_not_written(
    output: str | os.PathLike, written: Iterable[str], *inputs: str | os.PathLike | None, what: str = "output folder"
) -> None:
    """Check, before any work, that a command's outputs would replace no input file and fill no input folder.

    The command writes (or removes) the files ``written`` in the folder ``output``; none may be one of its input
    files, and it may not write into one of its input folders.

    Args:
        output: the command's output folder.
        written: what the command writes or removes there: paths relative to ``output`` with ``/`` between
            folders, glob patterns allowed (``"triage.json"``, ``"state/*"``, ``"case1_*"``); a folder the command
            writes into is given as its name and ``"<name>/*"``.
        *inputs: the input files and folders (None is skipped). A symbolic link counts as the file it points to.
        what: how the message names ``output``.

    Raises:
        ValueError: naming the input and the output, e.g. for ``triage --rule OUT/triage.json -o OUT``.

    Example:
        >>> check_inputs_not_written("out", ["triage.json", "state/*"], "rule.json")  # elsewhere: fine
        >>> check_inputs_not_written("out", ["triage.json"], "out/triage.json")
        Traceback (most recent call last):
            ...
        ValueError: output folder out: the command writes triage.json there, which is the input file ...
    """
    out = Path(os.path.abspath(os.fspath(output))).resolve()
    patterns = [str(p).strip("/") for p in written]
    for inp in inputs:
        if inp is None:
            continue
        src = Path(os.path.abspath(os.fspath(inp))).resolve()
        if out not in src.parents:
            continue
        rel = src.relative_to(out).as_posix()
        if src.is_dir():
            hit = any(fnmatch.fnmatchcase(rel, p) or p.startswith(rel + "/") for p in patterns)
            if hit:
                raise ValueError(f"{what} {output}: the command writes into {rel}/, the input folder {inp}; choose "
                                 "another output folder (inputs are never written to)")
        elif any(fnmatch.fnmatchcase(rel, p) for p in patterns):
            raise ValueError(f"{what} {output}: the command writes {rel} there, which is the input file {inp}; choose "
                             "another output folder or move the input (inputs are never overwritten)")


def clean_partial_files(folder: str | os.PathLike) -> int:
    """Remove the ``.*.partial*`` files (and :func:`atomic_write_files`' folders) an interrupted run left in ``folder``.

    Not recursive: only the entries of ``folder`` itself.

    Args:
        folder: the folder; a missing folder holds nothing to remove.

    Returns:
        How many files (and folders) were removed.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / ".case1_probs.partial.nii.gz").write_bytes(b"")
        ...     clean_partial_files(d), clean_partial_files(d)
        (1, 0)
    """
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    n = 0
    for p in folder.iterdir():
        if p.is_file() and p.name.startswith(".") and ".partial" in p.name:
            p.unlink()
            n += 1
        elif p.is_dir() and not p.is_symlink() and p.name.startswith(".") and ".partial" in p.name \
                and p.name.endswith(".dir"):
            shutil.rmtree(p, ignore_errors=True)
            n += 1
    return n


def owned_folder(output: str | os.PathLike, relative: str | os.PathLike, what: str = "output folder") -> Path:
    """A sub-folder of an output folder that a command writes and removes files in, refused when it is a link.

    A command cleans the sub-folders it owns (``maps/``, ``figures/``, ``products/<name>/``, ``dicom-export``'s
    ``<case>/``) of an earlier run's files. A symbolic link planted there (by anyone who can write into a shared
    output folder) would make it remove and replace files of the folder the link points to: each folder of
    ``relative`` below ``output`` must not be a symbolic link. Found by hostile testing: ``dicom-export`` removed
    every ``*.dcm`` of another folder that ``<output>/<case>`` linked to. ``output`` itself, which the user names, may
    be a link. Nothing is created.

    Args:
        output: the command's output folder.
        relative: the sub-folder, relative to ``output`` (e.g. ``"maps"``, ``"products/lesions"``).
        what: how the message names ``output``.

    Returns:
        ``output / relative``.

    Raises:
        ValueError: a folder of ``relative`` is a symbolic link (one line naming it, where it points and the remedy).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     os.symlink(tempfile.gettempdir(), Path(d) / "maps")
        ...     owned_folder(d, "figures") == Path(d) / "figures"
        ...     try:
        ...         owned_folder(d, "maps")
        ...     except ValueError as e:
        ...         "maps is a symbolic link" in str(e)
        True
        True
    """
    base = Path(output)
    path = base
    for part in Path(relative).parts:
        path = path / part
        if path.is_symlink():
            target = link_target(path)
            raise ValueError(f"{what} {base}: {path} is a symbolic link (to {target}), where the command writes and "
                             "removes files: it must be a folder of its own; remove the link")
    return path


#: the file of :func:`output_lock` in an output folder while a run writes there
OUTPUT_LOCK_FILE = ".monai-unc.lock"


def _lock_holder(path: Path) -> str:
    """What the lock file says about the run that holds it (empty when unreadable).

    Its start only, opened without blocking or following a link: a FIFO or a file of gigabytes held by a planted
    process blocked or filled the probe (found by hostile testing).
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return ""
    try:
        return os.read(fd, 1024).decode(errors="replace").strip()[:200]
    except OSError:
        return ""
    finally:
        os.close(fd)


def _take_lock(path: Path, wait: float) -> int | None:
    """An exclusive :func:`fcntl.flock` on the lock file at ``path``: its descriptor (None without ``flock``).

    Another process's hold is waited for up to ``wait`` seconds (a short step), then ``BlockingIOError``. The file
    locked is the one at ``path``: a holder that ended removes its file while it still holds it, so a descriptor of
    that removed file is dropped and the file now at the path locked instead (which another run may find held).
    """
    deadline = time.monotonic() + max(float(wait), 0.0)
    while True:
        try:
            fd = _flock(path, exclusive=True)
        except BlockingIOError:
            if time.monotonic() < deadline:  # a short step of another process: try again once it is done
                time.sleep(0.02)
                continue
            raise
        if fd is None:
            return None
        try:  # the holder that just ended removed the file we opened: lock the one at the path
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _write_holder(fd: int, path: Path, command: str, tag: str = "") -> None:
    """Write the holder's line into its locked lock file: ``<tag>pid ..., <command>, since ..., host ...``.

    The host too: on a shared (network) file system the holder may run on another node, where its pid means nothing
    here (found by the hostile review of concurrency: a cluster's array job). An ``OSError`` (a full disk) names the
    lock file.
    """
    started = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{tag}pid {os.getpid()}, {command}, since {started}, host {socket.gethostname()}\n".encode())
    except OSError as e:
        _name_written_file(e, path)
        raise


#: the output folders this process holds (:func:`output_lock`), resolved path -> depth
_HELD_FOLDERS: dict[str, int] = {}


def _flock(path: Path, exclusive: bool) -> int | None:
    """Open a lock file and lock it without waiting: :func:`output_lock`'s hold and :func:`output_lock_holder`'s probe.

    Exclusive (a writer's hold): the file is opened for writing, created when missing. Shared (a reader's probe):
    the file is opened for reading only, nothing is created.

    The file is never opened through a symbolic link (``O_NOFOLLOW``), and an exclusive hold refuses a file that is
    not a plain file of its own (a link planted in a shared output folder, or a hard link, named ``.monai-unc.lock``):
    the hold truncates the file and writes its line into it. Found by hostile testing: such a link made every run into
    the folder overwrite the file it pointed to.

    Args:
        path: the lock file.
        exclusive: an exclusive lock (else a shared one).

    Returns:
        The open descriptor, which holds the lock until it is closed (by the caller); None where nothing is locked:
        without ``fcntl`` (Windows), on a file system without ``flock`` (``ENOLCK`` / ``EOPNOTSUPP`` on some network or
        parallel file systems; an exclusive hold's file is then removed) or, shared, without a lock file.

    Raises:
        BlockingIOError: another open file holds the lock (another run; the descriptor is closed).
        OSError: an exclusive hold's file cannot be opened (an unwritable folder).
        ValueError: an exclusive hold's file is a symbolic link, a hard link or no regular file (one line naming it).
    """
    try:
        import fcntl
    except ImportError:  # no flock (Windows): nothing is locked
        return None
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    try:
        # a shared probe opens without blocking: a FIFO planted as a lock file blocked its open until a writer came,
        # hanging every command into the folder and every reader's probe (found by hostile testing)
        fd = os.open(path, (os.O_RDWR | os.O_CREAT if exclusive else os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
                     | nofollow, 0o644)
    except OSError as e:
        if exclusive and (e.errno == errno.ELOOP or path.is_symlink()):
            raise ValueError(f"{path} is a symbolic link, not the lock file of a run: a run would overwrite the file "
                             "it points to; remove the link") from None
        if exclusive:
            raise
        return None  # no lock file (or a link, which no run holds): no run holds the folder
    if exclusive:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            os.close(fd)
            kind = "a hard link of another file" if stat.S_ISREG(info.st_mode) else "not a regular file"
            raise ValueError(f"{path} is {kind}, not the lock file of a run: a run would overwrite it; remove it")
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise
    except OSError:  # a file system without flock (some network or parallel file systems): not locked
        os.close(fd)
        if exclusive:
            with contextlib.suppress(OSError):
                path.unlink()
        return None
    return fd


@contextlib.contextmanager
def output_lock(folder: str | os.PathLike, command: str = "monai-unc", wait: float = 0.0) -> Iterator[Path]:
    """Hold an output folder for one run: another process's run into the same folder is refused meanwhile.

    A folder that the parts of a run hold together (:func:`part_lock`, ``nnunet-predict -part_id``) is refused too.

    Two runs writing into one folder at the same time would corrupt each other's files: both write the same
    temporary names (:func:`partial_path`) and each removes the other's at start (:func:`clean_partial_files`).
    The lock is an exclusive :func:`fcntl.flock` on ``<folder>/.monai-unc.lock`` (which names the holder: pid,
    command, start time, host); the operating system releases it when the process ends, however it ends (a run killed
    with SIGKILL leaves the file, not the lock, and the next run takes it). The file is removed when the block ends.
    It is reentrant within a process (a command that holds its folder calls the engine, which holds it again).
    Without ``fcntl`` (Windows) or on a file system without ``flock`` nothing is locked. The folder is created when
    missing, and removed again at the end when the run left it empty (a run refused before it wrote anything).
    With ``wait``, a folder another process holds is tried again until it is free or ``wait`` seconds have passed (for
    a short step that the second process should follow rather than refuse: creating a key pair).

    Args:
        folder: the output folder.
        command: the command's name, recorded in the lock file for the message of a refused run.
        wait: seconds to wait for another process's hold to end before refusing (0: refuse at once).

    Yields:
        The lock file.

    Raises:
        ValueError: another process holds the folder (after ``wait`` seconds; one line naming the folder and the
            holder), a part of a run holds it (:func:`part_lock`), or its lock file is a symbolic link, a hard link or
            no regular file (planted: a run would overwrite the file it points to).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with output_lock(d, "toy") as lock:
        ...         with output_lock(d, "toy"):  # the same process: reentrant
        ...             held = lock.read_text().split(",")[1].strip()
        ...     held, lock.exists()
        ('toy', False)
    """
    with _output_lock(folder, command, wait, parts=True) as path:
        yield path


@contextlib.contextmanager
def _output_lock(folder: str | os.PathLike, command: str, wait: float, parts: bool) -> Iterator[Path]:
    """:func:`output_lock`; with ``parts`` False a folder that parts hold is not refused (:func:`part_lock`'s steps)."""
    folder = Path(folder)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / OUTPUT_LOCK_FILE
    key = str(folder.resolve())
    if key in _HELD_FOLDERS:  # this process holds it already
        _HELD_FOLDERS[key] += 1
        try:
            yield path
        finally:
            _HELD_FOLDERS[key] -= 1
        return
    try:
        fd = _take_lock(path, wait)
    except BlockingIOError:
        holder = _lock_holder(path)
        raise ValueError(f"{folder} is being written by another run ({holder or 'holder unknown'}; lock "
                         f"{path}): wait until it ends, or choose another output folder") from None
    if fd is None:  # no flock here: not locked
        yield path
        return
    _HELD_FOLDERS[key] = 1
    try:
        _write_holder(fd, path, command)
        held_by_part = _parts_holder(folder) if parts and key not in _HELD_PARTS else None
        if held_by_part is not None:  # the parts of a run write the folder together: no other run meanwhile
            raise ValueError(f"{folder} is being written by another run ({held_by_part}; lock "
                             f"{folder / (_PART_LOCK_PREFIX + '*' + _PART_LOCK_SUFFIX)}): wait until it ends, or "
                             "choose another output folder")
        yield path
    finally:
        del _HELD_FOLDERS[key]
        with contextlib.suppress(OSError):
            path.unlink()  # while still held: a run waiting on this file locks the next one (the inode check)
        os.close(fd)
        if created:  # a folder made here for a run refused before it wrote anything is not left behind
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty


def output_lock_holder(folder: str | os.PathLike) -> str | None:
    """The run that holds a folder with :func:`output_lock` now, when it is another process: for a reader.

    A command that reads another command's output folder (``evaluate`` reading the predictions of ``infer``) asks
    first: a run that holds the folder is still writing it. The lock file a run left when it ended, however it ended
    (even by SIGKILL), is not held (the operating system released its lock), nor is a folder this process holds; and
    nothing is held without ``fcntl`` or on a file system without ``flock`` (as for :func:`output_lock`). Nothing is
    created or written (the folder may be read-only): the lock file is opened for reading and a shared lock tried
    and released at once.

    Args:
        folder: the folder to read.

    Returns:
        What the lock file says of its holder (``"pid 123, monai-unc infer, since ..., host node7"``, or
        ``"holder unknown"``), or None when no other process holds the folder.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with output_lock(d, "toy"):
        ...         mine = output_lock_holder(d)  # this process's own hold does not count
        ...     mine, output_lock_holder(d)
        (None, None)
    """
    folder = Path(folder)
    key = str(folder.resolve())
    if key in _HELD_FOLDERS or key in _HELD_PARTS:  # this process holds it
        return None
    line = _held_line(folder / OUTPUT_LOCK_FILE)
    if line is not None:
        return line or "holder unknown"
    return _parts_holder(folder)


def _held_line(path: Path) -> str | None:
    """What a lock file held by another open file now says (``""`` when unreadable); None when it is not held.

    A shared lock is tried and released at once: a holder's exclusive lock refuses it.
    """
    try:
        fd = _flock(path, exclusive=False)
    except BlockingIOError:
        return _lock_holder(path)
    if fd is not None:
        os.close(fd)  # releases the shared lock
    return None


#: the lock file of one part of a run in a folder that the run's parts write together (:func:`part_lock`):
#: ``.monai-unc.part-<part>.lock``
_PART_LOCK_PREFIX, _PART_LOCK_SUFFIX = ".monai-unc.part-", ".lock"
#: the folders this process holds as a part of a run (:func:`part_lock`), resolved path -> (run, part, depth)
_HELD_PARTS: dict[str, list[Any]] = {}


def _part_locks(folder: Path) -> list[Path]:
    """The lock files of the parts of runs in ``folder`` (:func:`part_lock`), held or left by a killed part."""
    try:
        names = sorted(e.name for e in os.scandir(folder))
    except OSError:
        return []
    return [folder / n for n in names if n.startswith(_PART_LOCK_PREFIX) and n.endswith(_PART_LOCK_SUFFIX)]


def _parts_holder(folder: Path) -> str | None:
    """What the lock file of a part that holds ``folder`` now (:func:`part_lock`) says, or None when none does."""
    held = _held_parts(folder)
    return (held[0][1] or "holder unknown") if held else None


def _held_parts(folder: Path) -> list[tuple[Path, str]]:
    """The lock files of the parts that hold ``folder`` now (another open file), with their lines (:func:`part_lock`).

    Each file is probed as :func:`output_lock_holder` probes (:func:`_held_line`): a part's exclusive hold refuses a
    shared lock.
    """
    lines = ((path, _held_line(path)) for path in _part_locks(folder))
    return [(path, line) for path, line in lines if line is not None]


@contextlib.contextmanager
def part_lock(folder: str | os.PathLike, run: str, part: int, command: str = "monai-unc",
              wait: float = 10.0) -> Iterator[Path]:
    """Hold a folder for one part of a run whose parts write into it at the same time (``nnunet-predict -part_id``).

    The parts of one run (the same ``run``: ``nnunet-predict`` with the same arguments but ``-part_id``, each on its
    own GPU) write disjoint files of one folder, so they may hold it together; any other run is refused meanwhile:
    :func:`output_lock` (a run of one part, ``dicom-export``, ``infer``...) refuses the folder while a part holds it,
    a part refuses a folder that :func:`output_lock` holds (after ``wait`` seconds), and a part of another ``run``,
    or the same part of this run in another process, is refused. :func:`output_lock_holder` (a reader's probe) sees
    the parts' holds as it sees :func:`output_lock`'s. Each part holds its own lock file,
    ``.monai-unc.part-<part>.lock`` (an exclusive :func:`fcntl.flock` naming the run, the part and the process;
    released by the operating system however the process ends, removed at the end of the block), taken under a short
    :func:`output_lock` of the folder: a step that must be one part's at a time (a shared file's read-modify-write)
    takes that short hold itself (``output_lock(folder, wait=...)``). Reentrant within a process for the same run and
    part. Without ``fcntl`` (Windows) or on a file system without ``flock`` nothing is locked.

    Args:
        folder: the output folder (created when missing).
        run: what identifies the run (e.g. a digest of its arguments but the part): one line, no comma.
        part: this part's number (0-based).
        command: the command's name, recorded in the lock file for the message of a refused run.
        wait: seconds to wait for another process's :func:`output_lock` of the folder (a part's short step).

    Yields:
        This part's lock file.

    Raises:
        ValueError: a bad ``run`` or ``part`` (naming it), another run holds the folder (:func:`output_lock`, or parts
            of another ``run``), this part of the run is being written by another process (one line naming the
            folder and the holder), or the lock file is a link or no regular file.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with part_lock(d, "run1", 0, "toy") as lock:
        ...         with part_lock(d, "run1", 0, "toy"):  # the same process: reentrant
        ...             held = lock.read_text().split(",")[:2]
        ...     held, lock.exists()
        (['run run1', ' part 0'], False)
    """
    if not isinstance(run, str) or not run.strip() or any(c in run for c in ",\n\r"):
        raise parameter_error(ValueError(f"run must be a text of one line without a comma, got {run!r:.80}"), "run")
    if isinstance(part, bool) or not isinstance(part, int) or part < 0:
        raise parameter_error(ValueError(f"part must be an integer of at least 0, got {part!r:.40}"), "part")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = str(folder.resolve())
    held = _HELD_PARTS.get(key)
    if held is not None:  # this process holds it already
        if held[:2] != [run, part]:
            raise ValueError(f"{folder} is held by this process as part {held[1]} of run {held[0]}, not as part "
                             f"{part} of run {run}")
        held[2] += 1
        try:
            yield folder / f"{_PART_LOCK_PREFIX}{part}{_PART_LOCK_SUFFIX}"
        finally:
            held[2] -= 1
        return
    path = folder / f"{_PART_LOCK_PREFIX}{part}{_PART_LOCK_SUFFIX}"
    with _output_lock(folder, f"{command} (part {part})", wait, parts=False):  # every part's hold is taken under it
        for other, line in _held_parts(folder):
            if not line.startswith(f"run {run},"):
                raise ValueError(f"{folder} is being written by another run ({line or 'holder unknown'}; lock "
                                 f"{other}): wait until it ends, or choose another output folder")
            if other == path:
                raise ValueError(f"{folder}: part {part} of this run is being written by another process ({line}; "
                                 f"lock {other}): each part runs once at a time")
        try:  # a reader's probe (a shared lock tried and released at once) may hold it for a moment
            fd = _take_lock(path, 1.0)
        except BlockingIOError:
            raise ValueError(f"{folder}: part {part} of this run is being written by another process "
                             f"({_lock_holder(path) or 'holder unknown'}; lock {path})") from None
        if fd is not None:
            try:
                _write_holder(fd, path, command, f"run {run}, part {part}, ")
            except OSError:
                os.close(fd)
                raise
    _HELD_PARTS[key] = [run, part, 1]
    try:
        yield path
    finally:
        del _HELD_PARTS[key]
        if fd is not None:
            with contextlib.suppress(OSError):
                path.unlink()  # while still held: a part that ends leaves no file behind
            os.close(fd)


def check_not_being_written(folder: str | os.PathLike, *, what: str | None = None, then: str = "") -> None:
    """Refuse to read a folder that another run holds (:func:`output_lock_holder`): it is still being written.

    A command that reads another command's output folder (``evaluate``, ``report`` or ``dicom-export`` reading what
    ``infer`` or ``evaluate`` writes) would otherwise read files of two runs. One line names the folder, the holder
    and what to do.

    Args:
        folder: the folder to read.
        what: how the message names the folder (e.g. ``"the predictions in PATH"``; default the folder's path).
        then: the end of the message's remedy, after ``"wait until it ends"`` (e.g. ``", then export"``).

    Raises:
        ValueError: another process holds the folder.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     check_not_being_written(d, then=", then export")  # nobody holds it: no error
    """
    holder = output_lock_holder(folder)
    if holder is not None:
        raise ValueError(f"{folder if what is None else what} is being written by another run ({holder}): "
                         f"wait until it ends{then}")


@contextlib.contextmanager
def atomic_folder(folder: str | os.PathLike, command: str = "monai-unc") -> Iterator[Path]:
    """Build a folder's new content in a staging folder beside it; a clean exit replaces the folder with it, whole.

    For outputs that are one whole (a calibrated copy of a model folder): a run that fails half-way leaves the
    folder as it was (nothing half-made), and a run that succeeds leaves only its own files (nothing of an earlier
    run with other settings). The folder is held with :func:`output_lock` for the whole block (another run into it
    is refused; the caller checks what the folder holds, under the lock, at the start of the block). The staging
    folder ``.<name>.partial-<random>.dir`` lies in the folder's parent (the same file system: the final step is two
    renames); a killed run's staging folders are removed by the next run into the folder, and the folder's content
    that a run killed between the two renames moved aside is put back first. A symbolic link is
    followed: the folder it points to is replaced. The new folder keeps the folder's mode (a new folder: the one the
    umask gives).

    Args:
        folder: the output folder (created, empty, while the block runs when it is missing; removed again when the
            block fails).
        command: the command's name, for :func:`output_lock`.

    Yields:
        The empty staging folder to write the new content into.

    Raises:
        ValueError: another process holds the folder (:func:`output_lock`).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     out = Path(d) / "copy"
        ...     with atomic_folder(out) as staging:
        ...         _ = atomic_write_text(staging / "a.txt", "new")
        ...     try:
        ...         with atomic_folder(out) as staging:
        ...             _ = atomic_write_text(staging / "b.txt", "half")
        ...             raise RuntimeError("failed half-way")
        ...     except RuntimeError:
        ...         pass
        ...     sorted(p.name for p in Path(d).iterdir()), sorted(p.name for p in out.iterdir())
        (['copy'], ['a.txt'])
    """
    folder = Path(os.path.abspath(os.fspath(folder))).resolve()
    with output_lock(folder, command):
        parent, prefix = folder.parent, f".{folder.name}.partial-"
        _restore_moved_aside(folder, prefix)
        for stale in parent.iterdir():  # a killed run's (this run holds the folder: no other run is building one)
            if stale.name.startswith(prefix) and stale.name.endswith(".dir") and stale.is_dir() \
                    and not stale.is_symlink():
                shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=prefix, suffix=".dir", dir=parent))
        # mkdtemp makes it 0700 and it becomes the folder: it takes the folder's mode (made by output_lock under the
        # umask when missing), so a shared model folder stays readable by those it was (found by hostile testing)
        with contextlib.suppress(OSError):
            os.chmod(staging, stat.S_IMODE(folder.stat().st_mode))
        try:
            yield staging
            # the held lock file moves with the content: the new folder is held until output_lock releases it
            with contextlib.suppress(FileNotFoundError):
                os.replace(folder / OUTPUT_LOCK_FILE, staging / OUTPUT_LOCK_FILE)
            old = staging.with_name(f"{prefix}old-{staging.name[len(prefix):]}")
            os.replace(folder, old)
            try:
                os.replace(staging, folder)
            except BaseException:
                os.replace(old, folder)
                raise
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # a failed block's (after a clean one: gone already)


def _restore_moved_aside(folder: Path, prefix: str) -> None:
    """Put back what a run of :func:`atomic_folder`, killed between its two renames, moved aside of ``folder``.

    Such a run left ``folder`` missing (made again, holding only the lock file, by this run's :func:`output_lock`) and
    its earlier content in ``.<name>.partial-old-<random>.dir``, which the removal of stale staging folders would
    delete: the earlier content is renamed back (the held lock file moved into it first), so that a run that then
    fails leaves the folder as it was before the killed run. Found by hostile testing of crash consistency: a
    ``nnunet-calibrate`` killed there, then a rerun that failed, left no calibrated model at all.
    """
    if any(p.name != OUTPUT_LOCK_FILE for p in folder.iterdir()):  # the folder has content: nothing was moved aside
        return
    moved = [p for p in folder.parent.iterdir() if p.name.startswith(f"{prefix}old-") and p.name.endswith(".dir")
             and p.is_dir() and not p.is_symlink()]
    if not moved:
        return
    latest = max(moved, key=lambda p: p.stat().st_mtime_ns)
    with contextlib.suppress(FileNotFoundError):
        os.replace(folder / OUTPUT_LOCK_FILE, latest / OUTPUT_LOCK_FILE)  # the held lock file goes with the content
    os.replace(latest, folder)  # onto the empty folder (POSIX rename replaces an empty directory)


#: the files that mark a folder as the output folder of a cohort command (:func:`check_output_kind`)
OUTPUT_MARKERS: dict[str, tuple[str, ...]] = {
    "infer": ("infer.json",),
    "evaluate": ("metrics.csv", "summary.json"),
    "triage": ("triage.json", "triage.csv"),
}


#: the sub-folders a command's output folder holds and the command rewrites (``evaluate``'s ``products/<name>/`` case
#: files, the per-case ``state/`` and derived ``maps/`` of ``evaluate`` and ``triage``): another command's output
#: inside one would be overwritten by that command's next run, or overwrite its files
_OWNED_SUBFOLDERS = ("maps", "products", "state")


def check_output_kind(folder: str | os.PathLike, command: str,
                      markers: Mapping[str, Sequence[str]] | None = None) -> None:
    """Refuse an output folder that holds the outputs of another cohort command.

    ``evaluate``, ``triage`` and a product's command keep their per-case state in the same place (``state/cases/``)
    and ``evaluate`` and ``triage`` their derived maps too (``maps/``): a triage into an evaluation's folder would
    replace the maps that the evaluation's report draws with those of other predictions. Each command's folder holds
    that command's outputs only (``markers``); a folder without them (new, empty, or holding anything else) is
    accepted. Nor may the folder lie in a sub-folder that a command's output folder owns (``maps/``, ``products/``,
    ``state/``, e.g. a product's command writing into ``EVAL/products/<name>``, which would replace the evaluation's
    case files there), and those sub-folders (and ``products/<name>/``) must not be symbolic links
    (:func:`owned_folder`: the commands remove files there).

    Args:
        folder: the output folder (a missing one is accepted).
        command: the command about to write there: a key of ``markers``.
        markers: ``{command: marker file names}``; default :data:`OUTPUT_MARKERS` (the commands of the package's
            core; :func:`monai_unc.evaluation.command_output_markers` adds the products' commands).

    Raises:
        ValueError: ``folder`` holds another command's marker files, or lies in a ``maps/``, ``products/`` or
            ``state/`` sub-folder of a folder holding a command's marker files (one line naming them and the
            command), or such a sub-folder of ``folder`` is a symbolic link.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "summary.json").write_text("{}")
        ...     check_output_kind(d, "evaluate")
        ...     try:
        ...         check_output_kind(d, "triage")
        ...     except ValueError as e:
        ...         print(str(e).split(":")[0])
        --output
    """
    markers = OUTPUT_MARKERS if markers is None else markers
    if command not in markers:
        raise ValueError(f"unknown command {command!r}: one of {sorted(markers)}")
    folder = Path(folder)
    resolved = Path(os.path.abspath(os.fspath(folder))).resolve()
    for above, below in zip(resolved.parents, [resolved, *resolved.parents]):
        if below.name not in _OWNED_SUBFOLDERS:
            continue
        for other, names in markers.items():
            found = [n for n in names if (above / n).is_file()]
            if found:
                raise ValueError(f"--output: {folder} lies in {below.name}/ of the output folder of monai-unc {other} "
                                 f"{above} ({', '.join(found)}), which that command writes: choose a folder outside "
                                 f"{above / below.name}")
    if not folder.is_dir():
        return
    for sub in _OWNED_SUBFOLDERS:  # before any work: the commands write and remove files there (owned_folder)
        owned_folder(folder, sub, "--output")
    products = folder / "products"
    if products.is_dir():
        for entry in sorted(products.iterdir()):
            if entry.is_dir():
                owned_folder(folder, f"products/{entry.name}", "--output")
    for other, names in markers.items():
        found = [n for n in names if other != command and (folder / n).is_file()]
        if found:
            raise ValueError(f"--output: {folder} holds the outputs of monai-unc {other} ({', '.join(found)}); "
                             f"monai-unc {command} would mix its files with them (state/, maps/): choose another "
                             f"folder, e.g. {folder / command}")

