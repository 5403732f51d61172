"""One protocol for every streaming state: merge, ``state_dict``, ``from_state_dict``.

Whatever grows with voxels, cases or ranks in this package is kept as a state that adds up: the confidence
histogram of the ECE family (:class:`~monai_unc.metrics.calibration.ConfidenceHistogram`), the per-case loss
histograms of the masks with a guarantee (:mod:`monai_unc.metrics`), the per-voxel sums of
:class:`~monai_unc.stats.SampleStats`, and the per-case state of every cohort product
(:mod:`monai_unc.evaluation.products`). They all follow :class:`MergeableState`, the idea of torchmetrics'
``add_state(..., dist_reduce_fx=...)`` in this package's terms:

- ``merge(other)`` adds another state into this one (in place) and returns ``self``; merging is associative, so
  shards, ranks and batches give the numbers of one pass when merged in a fixed order;
- ``state_dict()`` returns the state as numpy arrays (no object arrays, so ``numpy.savez`` and pickle both work);
- ``from_state_dict(state)`` (a classmethod) builds a new state from such a dict.

Because the protocol is the same for every state, the cohort engine's resume cache and the ``torchrun`` gather
serialise any state without knowing its type: :func:`pack_states` flattens named states into one dict of arrays
(``<name>/<key>`` plus ``<name>/__type__``), :func:`unpack_states` reads them back. The type is looked up in a
registry of state classes (:func:`register_state_type`); a name that is not registered is refused, and nothing is
ever imported or executed by the name a file holds. A state whose dense arrays are mostly zeros may also give
``packed_state_dict()``, arrays in a compact layout that its ``from_state_dict`` reads as well as those of
``state_dict()`` (a per-case confidence histogram: each case's non-empty bins); :func:`pack_states` and
:meth:`StateGroup.packed_state_dict` use it where a state has it (:func:`record_arrays`), so that a record or a
gather holds the compact arrays.

:class:`StateGroup` is a mapping of named states of one kind (e.g. one histogram per BraTS region) that is itself a
mergeable state.

:class:`ArrayBlocks` is an array given block by block along its first axis (one case at a time): a state too large
to hold whole as dense tables is written from such blocks (``state_dict_blocks()``, which
:func:`monai_unc.io.save_state` uses where a state has it) and read back the same way (:func:`read_npz`).
"""

from __future__ import annotations

import copy
import math
import os
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

__all__ = [
    "MergeableState",
    "StateGroup",
    "UnknownStateTypeError",
    "register_state_type",
    "state_type_name",
    "state_type",
    "pack_states",
    "unpack_states",
    "as_array",
    "host_array",
    "record_arrays",
    "ArrayBlocks",
    "read_npz",
]

T = TypeVar("T")

#: the key of a packed state's type name (:func:`pack_states`)
TYPE_KEY = "__type__"
_SEP = "/"
_REGISTRY: dict[str, type] = {}


class UnknownStateTypeError(ValueError):
    """A packed state names a type that no class registered (:func:`state_type`).

    A state of a module this process has not imported, or a file that is not one of this package's. It is a
    ``ValueError``; the damage of a file of known types (a missing entry, a repeated name) is a plain ``ValueError``,
    so that a reader may skip the one and refuse the other.
    """


@runtime_checkable
class MergeableState(Protocol):
    """A state that adds up: ``merge``, ``state_dict`` and ``from_state_dict`` (module docstring).

    Example:
        >>> import numpy as np
        >>> class Count:
        ...     def __init__(self, n=0): self.n = n
        ...     def merge(self, other): self.n += other.n; return self
        ...     def state_dict(self): return {"n": np.int64(self.n)}
        ...     @classmethod
        ...     def from_state_dict(cls, state): return cls(int(state["n"]))
        >>> isinstance(Count(), MergeableState)
        True
    """

    def merge(self, other: Any) -> Any:
        """Add ``other`` into this state (in place) and return ``self``.

        Args:
            other: a state of the same class covering other data (other cases, voxels or samples).

        Returns:
            ``self``, now the state of both.
        """
        ...

    def state_dict(self) -> dict[str, Any]:
        """The state as a dict of numpy arrays.

        Returns:
            ``{key: array}``, enough for :meth:`from_state_dict` to rebuild the state (what ``.npz`` files store).
        """
        ...

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> Any:
        """A new state from a dict of :meth:`state_dict`.

        Args:
            state: the arrays of :meth:`state_dict` (or of ``numpy.load`` of a file that saved them).

        Returns:
            The rebuilt state.
        """
        ...


def register_state_type(name: str) -> Any:
    """Class decorator: register a :class:`MergeableState` class under ``name`` for :func:`unpack_states`.

    Args:
        name: the type name written into packed states (letters, digits, ``_``, ``.`` and ``-``); a name can be
            registered once, by one class (registering the same class again is allowed, e.g. on a module reload).

    Returns:
        The decorator; it returns the class unchanged.

    Raises:
        ValueError: for a malformed name or one registered by another class.
        TypeError: for a class without ``merge``, ``state_dict`` and ``from_state_dict``.

    Example:
        >>> import numpy as np
        >>> @register_state_type("doc.count")
        ... class Count:
        ...     def __init__(self, n=0): self.n = n
        ...     def merge(self, other): self.n += other.n; return self
        ...     def state_dict(self): return {"n": np.int64(self.n)}
        ...     @classmethod
        ...     def from_state_dict(cls, state): return cls(int(state["n"]))
        >>> state_type("doc.count") is Count
        True
    """
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_.-" for c in name):
        raise ValueError(f"name must be a non-empty string of letters, digits, '_', '.' and '-', got {name!r}")

    def decorate(cls: type) -> type:
        missing = [m for m in ("merge", "state_dict", "from_state_dict") if not callable(getattr(cls, m, None))]
        if missing:
            raise TypeError(f"{cls.__name__} is not a mergeable state: it lacks {missing}")
        old = _REGISTRY.get(name)
        if old is not None and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(f"state type {name!r} is registered by {old.__module__}.{old.__qualname__} already")
        _REGISTRY[name] = cls
        cls.__state_type__ = name  # type: ignore[attr-defined]
        return cls

    return decorate


def state_type_name(state: Any) -> str:
    """The registered type name of a state.

    Args:
        state: a state whose class was decorated with :func:`register_state_type`.

    Returns:
        Its type name.

    Raises:
        ValueError: the state's class is not registered.

    Example:
        >>> state_type_name(StateGroup())
        'group'
    """
    name = getattr(type(state), "__state_type__", None)
    if name is None or _REGISTRY.get(name) is not type(state):
        raise ValueError(f"state of type {type(state).__name__} is not registered (register_state_type)")
    return str(name)


def state_type(name: str) -> type:
    """The class registered under ``name``.

    Args:
        name: a type name of :func:`register_state_type`.

    Returns:
        The class.

    Raises:
        UnknownStateTypeError: no class is registered under ``name`` (the message names the registered types).

    Example:
        >>> state_type("group").__name__
        'StateGroup'
    """
    cls = _REGISTRY.get(str(name))
    if cls is None:
        raise UnknownStateTypeError(f"unknown state type {name!r} (registered: {sorted(_REGISTRY)})")
    return cls


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name or _SEP in name:
        raise ValueError(f"state names must be non-empty strings without {_SEP!r}, got {name!r}")
    return name


def record_arrays(state: Any) -> dict[str, Any]:
    """The arrays a state travels as: its ``packed_state_dict()`` where it has one, else its ``state_dict()``.

    What :func:`pack_states` (records, the resume cache, the ``torchrun`` gather) and
    :func:`monai_unc.engine.reduce_state` send; the state's ``from_state_dict`` reads either.

    Args:
        state: a mergeable state.

    Returns:
        ``{key: array}``.

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics.calibration import ConfidenceHistogram
        >>> h = ConfidenceHistogram(2, n_fine_bins=4).update(np.array([[[0.2], [0.8]]]), np.array([[1]]))
        >>> "counts" in record_arrays(h), record_arrays(h)["bin_offsets"].tolist()
        (False, [0, 4])
    """
    packed = getattr(state, "packed_state_dict", None)
    return packed() if callable(packed) else state.state_dict()


def pack_states(states: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Named states as one flat dict of numpy arrays: ``<name>/<key>`` and ``<name>/__type__``.

    Each state gives its arrays through :func:`record_arrays` (the compact layout where it has one).

    Args:
        states: ``{name: state}``; each state of a registered class (:func:`register_state_type`); names without
            ``/``. None values are left out.

    Returns:
        The arrays (for one ``.npz`` file or a pickle); :func:`unpack_states` reads them back.

    Example:
        >>> import numpy as np
        >>> g = StateGroup()
        >>> packed = pack_states({"empty": g})
        >>> sorted(packed), type(unpack_states(packed)["empty"]).__name__
        (['empty/__names__', 'empty/__type__'], 'StateGroup')
    """
    out: dict[str, np.ndarray] = {}
    for name, state in states.items():
        if state is None:
            continue
        _check_name(name)
        out[f"{name}{_SEP}{TYPE_KEY}"] = np.array(state_type_name(state))
        for key, value in record_arrays(state).items():
            if key == TYPE_KEY:
                raise ValueError(f"state {name!r}: the key {TYPE_KEY!r} is reserved")
            out[f"{name}{_SEP}{key}"] = as_array(value, f"state {name!r}, key {key!r}")
    return out


def as_array(value: Any, what: str = "value") -> np.ndarray:
    """A state entry as a new numpy array of its own memory.

    A torch tensor (any device) is copied to the host, other values go through ``numpy.array``; a bfloat16 (or
    float8) tensor, of a dtype numpy lacks, becomes float32, which holds its values exactly. Object arrays are
    refused: states are plain numbers and strings.

    Args:
        value: the entry.
        what: the entry's name for the error message.

    Returns:
        The array (never a view of ``value``).

    Example:
        >>> as_array([1, 2]).tolist()
        [1, 2]
    """
    arr = np.array(host_array(value), copy=True)
    if arr.dtype == object:
        raise ValueError(f"{what}: a state holds plain numbers and strings, not Python objects (an object array)")
    return arr


def host_array(value: Any) -> Any:
    """A torch tensor (any device) as a numpy array on the host, without a copy where it is on the CPU already.

    A bfloat16 (or float8) tensor, of a dtype numpy lacks, becomes float32, which holds its values exactly. Other
    values are returned as they are.

    Args:
        value: a tensor, an array or another value.

    Returns:
        The numpy array, or ``value``.

    Example:
        >>> import torch
        >>> host_array(torch.tensor([0.5], dtype=torch.bfloat16)).dtype
        dtype('float32')
    """
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch here
        value = value.detach().cpu()
        if value.is_floating_point() and value.element_size() < 4 and str(value.dtype) != "torch.float16":
            # found by hostile testing (review 60): bfloat16 (and float8) have no numpy dtype, and a SampleStats of
            # bfloat16 sums could not be packed, saved or reduced over ranks ("Got unsupported ScalarType
            # BFloat16", naming nothing); float32 holds each of their values exactly
            value = value.float()
        value = value.numpy()
    return value


def unpack_states(arrays: Mapping[str, Any]) -> dict[str, Any]:
    """The named states of :func:`pack_states` (or of ``numpy.load`` of its ``.npz`` file), in name order.

    Args:
        arrays: the flat arrays; keys without ``/`` are ignored.

    Returns:
        ``{name: state}``. ``ValueError`` for a state without its type, :class:`UnknownStateTypeError` (a
        ``ValueError``) for one of an unregistered type.
    """
    parts: dict[str, dict[str, Any]] = {}
    for key in arrays.keys():
        if _SEP not in key:
            continue
        name, sub = key.split(_SEP, 1)
        parts.setdefault(name, {})[sub] = arrays[key]
    out: dict[str, Any] = {}
    for name in sorted(parts):
        part = parts[name]
        if TYPE_KEY not in part:
            raise ValueError(f"state {name!r} has no {TYPE_KEY!r} entry")
        cls = state_type(str(np.asarray(part.pop(TYPE_KEY))))
        out[name] = cls.from_state_dict(part)
    return out


@register_state_type("group")
class StateGroup(MutableMapping[str, Any]):
    """Named states that merge name by name (e.g. one confidence histogram per region, or one mask state per side).

    A name missing on one side is taken from the other. Insertion order is kept (the channel order of regions).

    Args:
        states: the initial ``{name: state}``.

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics.calibration import ConfidenceHistogram
        >>> def hist(p):
        ...     h = ConfidenceHistogram(2)
        ...     _ = h.update(np.array([[[1 - p], [p]]]), np.array([[1]]))
        ...     return h
        >>> a, b = StateGroup({"WT": hist(0.9)}), StateGroup({"WT": hist(0.6), "TC": hist(0.7)})
        >>> merged = a.merge(b)
        >>> list(merged), int(merged["WT"].scalars[:, 0].sum())
        (['WT', 'TC'], 2)
    """

    def __init__(self, states: Mapping[str, Any] | None = None) -> None:
        self._states: dict[str, Any] = {}
        for name, state in (states or {}).items():
            self[name] = state

    def __getitem__(self, name: str) -> Any:
        return self._states[name]

    def __setitem__(self, name: str, state: Any) -> None:
        if not isinstance(state, MergeableState):
            raise TypeError(f"state {name!r} must be a mergeable state, got {type(state).__name__}")
        self._states[str(name)] = state

    def __delitem__(self, name: str) -> None:
        del self._states[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._states)

    def __len__(self) -> int:
        return len(self._states)

    def __repr__(self) -> str:
        return f"StateGroup({self._states!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StateGroup):
            return NotImplemented
        return list(self._states) == list(other._states) and all(
            self._states[k] == other._states[k] for k in self._states)

    __hash__ = None  # type: ignore[assignment]

    def merge(self, other: Mapping[str, Any]) -> StateGroup:
        """Add the states of ``other`` name by name (in place); returns ``self``.

        Args:
            other: a :class:`StateGroup` or a mapping of states.

        Returns:
            ``self``. A name only in ``other`` is added as a copy (``copy.deepcopy``), so that a later merge into
            ``self`` leaves ``other`` as it was (in earlier versions pooling cases
            into an empty group shared the first case's states, and the next case's merge changed that case's counts).

        Raises:
            TypeError: ``other`` is not a mapping.
        """
        if not isinstance(other, Mapping):
            raise TypeError(f"other must be a StateGroup, got {type(other).__name__}")
        for name, state in other.items():
            if name in self._states:
                self._states[name].merge(state)
            else:
                self[name] = copy.deepcopy(state)
        return self

    def state_dict(self) -> dict[str, np.ndarray]:
        """The states as flat arrays: the names under ``__names__``, state ``i`` under ``<i>.<key>`` with its type.

        Returns:
            The arrays.

        Example:
            >>> sorted(StateGroup().state_dict())
            ['__names__']
        """
        return self._member_arrays(lambda state: state.state_dict())

    def packed_state_dict(self) -> dict[str, np.ndarray]:
        """:meth:`state_dict` with each member's arrays of :func:`record_arrays` (its compact layout where it has one).

        Returns:
            The arrays; :meth:`from_state_dict` reads them.

        Example:
            >>> sorted(StateGroup().packed_state_dict())
            ['__names__']
        """
        return self._member_arrays(record_arrays)

    def state_dict_blocks(self) -> dict[str, Any]:
        """:meth:`state_dict`, the large tables of a member that gives them as :class:`ArrayBlocks` left so.

        A member with a ``state_dict_blocks()`` method (a per-case confidence histogram) gives its arrays from it:
        :func:`monai_unc.io.save_state` writes the group one block of cases at a time.

        Returns:
            The arrays of :meth:`state_dict` (some as :class:`ArrayBlocks`).

        Example:
            >>> sorted(StateGroup().state_dict_blocks())
            ['__names__']
        """
        def arrays(state: Any) -> Mapping[str, Any]:
            blocks = getattr(state, "state_dict_blocks", None)
            return blocks() if callable(blocks) else state.state_dict()

        return self._member_arrays(arrays)

    def _member_arrays(self, arrays_of: Callable[[Any], Mapping[str, Any]]) -> dict[str, Any]:
        """The layout of :meth:`state_dict` and its variants, each member's arrays given by ``arrays_of``.

        The names under ``__names__``, member ``i``'s type and its arrays under ``<i>.<key>`` (an :class:`ArrayBlocks`
        kept as it is).
        """
        out: dict[str, Any] = {"__names__": np.array(list(self._states), dtype=np.str_)}
        for i, state in enumerate(self._states.values()):
            out[f"{i}.{TYPE_KEY}"] = np.array(state_type_name(state))
            out.update({f"{i}.{k}": v if isinstance(v, ArrayBlocks) else as_array(v, f"member {i}, key {k!r}")
                        for k, v in arrays_of(state).items()})
        return out

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> StateGroup:
        """The group of :meth:`state_dict`.

        Args:
            state: the arrays.

        Returns:
            The new group.

        Raises:
            UnknownStateTypeError: a member's type is not registered.
            ValueError: a damaged state: no ``__names__``, a name given twice, a member without its type, or the
                arrays of a member that no name has.

        Example:
            >>> StateGroup.from_state_dict(StateGroup().state_dict()) == StateGroup()
            True
        """
        if "__names__" not in state:
            raise ValueError(f"a state group needs its '__names__' entry, got the keys {sorted(state)[:5]}")
        names = [str(n) for n in np.asarray(state["__names__"]).reshape(-1).tolist()]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:  # the last member of a name would replace the others silently
            raise ValueError(f"a state group names {repeated} more than once: a damaged state")
        parts: dict[int, dict[str, Any]] = {}
        for key, value in state.items():
            head, dot, sub = key.partition(".")
            if key != "__names__" and dot and head.isdigit():
                parts.setdefault(int(head), {})[sub] = value
        stray = sorted(set(parts) - set(range(len(names))))
        if stray:  # members that no name has would be dropped silently
            raise ValueError(f"a state group holds member(s) {stray[:5]} but names only {len(names)}: a damaged state")
        out = cls()
        for i, name in enumerate(names):
            part = parts.get(i, {})
            if TYPE_KEY not in part:
                raise ValueError(f"member {i} ({name!r}) of a state group has no {TYPE_KEY!r} entry: a damaged state")
            member = state_type(str(np.asarray(part.pop(TYPE_KEY))))
            out[name] = member.from_state_dict(part)
        return out


class ArrayBlocks:
    """An array given as consecutive blocks along its first axis, made one block at a time.

    A state whose dense tables would not fit in memory at once (the per-case confidence histograms of a large
    cohort) gives its tables as such arrays: :func:`monai_unc.io.atomic_save_npz` writes them block by block, and
    :func:`read_npz` reads a large array of a file back as one. ``numpy.asarray`` builds the whole array.

    Args:
        shape: the array's shape (at least one axis).
        dtype: its dtype.
        make: ``make(rows)`` returns a new iterable of the consecutive blocks of ``rows`` rows each (the last one
            shorter): arrays of ``dtype`` and shape ``(rows, *shape[1:])``. A block may be a view of a buffer that
            the next block overwrites, so that the blocks cost one buffer.

    Example:
        >>> import numpy as np
        >>> whole = np.arange(10).reshape(5, 2)
        >>> a = ArrayBlocks(whole.shape, whole.dtype, lambda rows: (whole[i : i + rows] for i in range(0, 5, rows)))
        >>> [b.shape[0] for b in a.blocks(2)], bool((np.asarray(a) == whole).all())
        ([2, 2, 1], True)
    """

    #: rows of a block when the reader does not ask for a number: about this many bytes (at least one row)
    BLOCK_BYTES = 1 << 23

    def __init__(self, shape: Iterable[int], dtype: Any, make: Callable[[int], Iterable[Any]]) -> None:
        self.shape = tuple(int(n) for n in shape)
        if not self.shape or min(self.shape) < 0:
            raise ValueError(f"shape must have at least one axis and no negative size, got {self.shape}")
        self.dtype = np.dtype(dtype)
        self._make = make

    @property
    def ndim(self) -> int:
        """The number of axes."""
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        """The bytes of the whole array."""
        return math.prod(self.shape) * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"ArrayBlocks(shape={self.shape}, dtype={self.dtype})"

    def blocks(self, rows: int | None = None) -> Iterator[np.ndarray]:
        """The blocks of ``rows`` rows (the last one shorter), each valid until the next is asked for.

        Args:
            rows: rows per block (None: about :attr:`BLOCK_BYTES` bytes per block).

        Returns:
            An iterator over the blocks, each checked against the array's shape and dtype.

        Raises:
            ValueError: a block of another dtype, shape or number of rows, or blocks that do not add up to
                ``shape[0]`` rows.
        """
        if rows is None:
            rows = max(1, self.BLOCK_BYTES // max(1, self.nbytes // max(1, self.shape[0])))
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise ValueError(f"rows must be a positive integer or None, got {rows!r}")
        seen = 0
        for block in self._make(rows):
            b = np.asarray(block)
            want = min(rows, self.shape[0] - seen)
            if b.dtype != self.dtype or b.ndim != self.ndim or b.shape != (want, *self.shape[1:]):
                raise ValueError(f"a block of {b.dtype} {b.shape} where {want} rows of an array of {self.dtype} "
                                 f"{self.shape} were due")
            seen += want
            yield b
        if seen != self.shape[0]:
            raise ValueError(f"the blocks hold {seen} of the array's {self.shape[0]} rows")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.empty(self.shape, dtype=self.dtype)
        start = 0
        for b in self.blocks():
            out[start : start + b.shape[0]] = b
            start += b.shape[0]
        return out if dtype is None else out.astype(dtype, copy=False)


#: arrays of :func:`read_npz` of at least this many bytes are read block by block
_STREAM_BYTES = 1 << 24


def _npy_header(fp: Any) -> tuple[tuple[int, ...], bool, np.dtype] | None:
    """The shape, Fortran order and dtype of a ``.npy`` stream (version 1.0 or 2.0; None for another version)."""
    version = np.lib.format.read_magic(fp)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(fp)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(fp)
    return None


def _member_rows(
    path: str, member: str, shape: tuple[int, ...], dtype: np.dtype, rows: int
) -> Iterator[np.ndarray]:
    """Blocks of ``rows`` rows of one ``.npy`` member of a zip file, read into one reused buffer (opened again).

    A damaged or changed member raises ``OSError`` naming the file and the array.
    """
    row = math.prod(shape[1:]) * dtype.itemsize
    try:
        with zipfile.ZipFile(path) as zf, zf.open(member, mode="r") as fp:
            if _npy_header(fp) != (shape, False, dtype):
                raise ValueError(f"the header is no longer that of {dtype} {shape}")
            buffer = np.empty((min(rows, shape[0]), *shape[1:]), dtype=dtype)
            for start in range(0, shape[0], rows):
                block = buffer[: min(rows, shape[0] - start)]
                view = memoryview(block.reshape(-1).view(np.uint8))
                got = 0
                while got < view.nbytes:
                    n = fp.readinto(view[got:])
                    if not n:
                        raise EOFError(f"it ends after {start * row + got} of {shape[0] * row} bytes")
                    got += n
                yield block
            if fp.read(1):  # reading to the end checks the member's CRC too
                raise ValueError(f"it holds more bytes than its shape {shape}")
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, KeyError, OSError) as err:
        raise OSError(f"{path}: the array {member!r} cannot be read (a damaged or changed file?): "
                      f"{type(err).__name__}: {err}") from err


def read_npz(path: str | os.PathLike, stream_bytes: int | None = None) -> dict[str, np.ndarray | ArrayBlocks]:
    """The arrays of an ``.npz`` file; those of at least ``stream_bytes`` as :class:`ArrayBlocks` read from the file.

    What ``dict(numpy.load(path, allow_pickle=False))`` gives, except that a large array is read block by block
    along its first axis when its consumer iterates it (into one buffer), so that a state of many cases is never
    held whole: the file must stay in place until then, and a damaged member raises ``OSError`` (naming the file
    and the array) when it is read.

    Args:
        path: the ``.npz`` file.
        stream_bytes: arrays of at least this many bytes (with at least one axis, C order, no objects) are streamed
            (default 16 MiB).

    Returns:
        ``{key: array}`` in the file's order.

    Raises:
        zipfile.BadZipFile, ValueError, EOFError, OSError: the file is not a readable ``.npz``.

    Example:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     np.savez(Path(d) / "a.npz", x=np.arange(6).reshape(3, 2), n=np.int64(3))
        ...     arrays = read_npz(Path(d) / "a.npz", stream_bytes=16)
        ...     type(arrays["x"]).__name__, np.asarray(arrays["x"]).tolist(), int(arrays["n"])
        ('ArrayBlocks', [[0, 1], [2, 3], [4, 5]], 3)
    """
    path = os.fspath(path)
    limit = _STREAM_BYTES if stream_bytes is None else stream_bytes
    out: dict[str, np.ndarray | ArrayBlocks] = {}
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            name = info.filename
            key = name[:-4] if name.endswith(".npy") else name
            with zf.open(info, mode="r") as fp:
                header = _npy_header(fp) if name.endswith(".npy") else None
            if header is not None:
                shape, fortran, dtype = header
                if (shape and not fortran and not dtype.hasobject
                        and math.prod(shape) * dtype.itemsize >= limit):
                    out[key] = ArrayBlocks(
                        shape, dtype, lambda rows, n=name, s=shape, t=dtype: _member_rows(path, n, s, t, rows)
                    )
                    continue
            with zf.open(info, mode="r") as fp:
                out[key] = np.lib.format.read_array(fp, allow_pickle=False) if name.endswith(".npy") else fp.read()
    return out
