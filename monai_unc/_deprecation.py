"""Renamed keyword arguments kept as deprecated aliases for one release.

>>> @deprecated_arg_names({"labels": "target"})
... def ece(probs, target=None): ...
>>> ece(p, labels=y)  # works, with a DeprecationWarning naming ``labels`` and ``target``  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["deprecated_arg_names"]

F = TypeVar("F", bound=Callable[..., Any])


def deprecated_arg_names(mapping: dict[str, str]) -> Callable:
    """Decorator accepting the old keyword names of ``mapping`` (``{"old": "new"}``) as aliases of the new ones.

    Passing an old name emits a ``DeprecationWarning`` naming both and forwards the value under the new name;
    passing both (the new one by keyword or by position) raises ``TypeError`` naming both.
    """
    if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise TypeError("mapping must be a dict of old keyword name -> new keyword name (strings)")

    def decorate(fn: F) -> F:
        params = list(inspect.signature(fn).parameters)
        for new in mapping.values():
            if new not in params:
                raise ValueError(f"{fn.__qualname__} has no argument {new!r} to forward a deprecated name to")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in mapping.items():
                if old not in kwargs:
                    continue
                positional = params[: len(args)]
                if new in kwargs or new in positional:
                    raise TypeError(
                        f"{fn.__qualname__}() got both {old!r} (deprecated) and {new!r}; pass only {new!r}"
                    )
                warnings.warn(
                    f"{fn.__qualname__}(): the argument {old!r} is deprecated and will be removed in the next "
                    f"release; use {new!r}",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
