"""Deprecation helpers shared by the package: renamed keyword arguments keep working for one release.

:func:`deprecated_arg_names` wraps a function whose parameters were renamed: a call with an old keyword is
forwarded to the new one with a ``DeprecationWarning`` naming both; passing the old and the new name together is
a ``TypeError``. The wrapped function's signature (``inspect.signature``, the docs) shows the new names only.

Example::

    @deprecated_arg_names({"scores": "uncertainty"})
    def aurc(uncertainty, risk): ...

    aurc(scores=u, risk=r)   # works, warns "aurc: argument 'scores' is deprecated, use 'uncertainty' ..."
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["deprecated_arg_names", "REMOVAL"]

F = TypeVar("F", bound=Callable[..., Any])

#: when deprecated aliases are removed
REMOVAL = "the next release"


def deprecated_arg_names(renamed: Mapping[str, str], removal: str = REMOVAL) -> Callable[[F], F]:
    """Decorator: accept the old keyword names in ``renamed`` (``{"old": "new"}``) with a ``DeprecationWarning``.

    Args:
        renamed: old keyword name -> new parameter name. Every new name must be a parameter of the decorated
            function and no old name may be one (checked when the decorator is applied).
        removal: when the old names stop working, quoted in the warning.

    Works on functions and methods (``__init__`` included); positional calls are unaffected.
    """
    renamed = dict(renamed)

    def decorate(fn: F) -> F:
        params = inspect.signature(fn).parameters
        for old, new in renamed.items():
            if new not in params:
                raise TypeError(f"deprecated_arg_names: {fn.__qualname__} has no parameter {new!r} (for {old!r})")
            if old in params:
                raise TypeError(f"deprecated_arg_names: {old!r} is still a parameter of {fn.__qualname__}")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old in renamed.keys() & kwargs.keys():
                new = renamed[old]
                if new in kwargs:
                    raise TypeError(
                        f"{fn.__qualname__}() got both {old!r} (deprecated) and {new!r}; pass only {new!r}"
                    )
                warnings.warn(
                    f"{fn.__qualname__}: argument {old!r} is deprecated, use {new!r} (the old name will be removed "
                    f"in {removal})",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
