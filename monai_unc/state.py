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
ever imported or executed by the name a file holds.

:class:`StateGroup` is a mapping of named states of one kind (e.g. one histogram per BraTS region) that is itself a
mergeable state.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
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


def pack_states(states: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Named states as one flat dict of numpy arrays: ``<name>/<key>`` and ``<name>/__type__``.

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
        for key, value in state.state_dict().items():
            if key == TYPE_KEY:
                raise ValueError(f"state {name!r}: the key {TYPE_KEY!r} is reserved")
            out[f"{name}{_SEP}{key}"] = as_array(value, f"state {name!r}, key {key!r}")
    return out


def as_array(value: Any, what: str = "value") -> np.ndarray:
    """A state entry as a new numpy array of its own memory.

    A torch tensor (any device) is copied to the host, other values go through ``numpy.array``. Object arrays are
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
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch here
        value = value.detach().cpu().numpy()
    arr = np.array(value, copy=True)
    if arr.dtype == object:
        raise ValueError(f"{what}: a state holds plain numbers and strings, not Python objects (an object array)")
    return arr


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
            ``self``. A name only in ``other`` is added as it is (the same object).

        Raises:
            TypeError: ``other`` is not a mapping.
        """
        if not isinstance(other, Mapping):
            raise TypeError(f"other must be a StateGroup, got {type(other).__name__}")
        for name, state in other.items():
            if name in self._states:
                self._states[name].merge(state)
            else:
                self[name] = state
        return self

    def state_dict(self) -> dict[str, np.ndarray]:
        """The states as flat arrays: the names under ``__names__``, state ``i`` under ``<i>.<key>`` with its type.

        Returns:
            The arrays.

        Example:
            >>> sorted(StateGroup().state_dict())
            ['__names__']
        """
        out: dict[str, np.ndarray] = {"__names__": np.array(list(self._states), dtype=np.str_)}
        for i, state in enumerate(self._states.values()):
            out[f"{i}.{TYPE_KEY}"] = np.array(state_type_name(state))
            out.update({f"{i}.{k}": as_array(v, f"member {i}, key {k!r}") for k, v in state.state_dict().items()})
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
