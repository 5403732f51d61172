"""Package attributes loaded on first access (PEP 562), for a package whose names live in heavy submodules.

``monai_unc.workflows`` and ``monai_unc.nnunet`` use it so that importing the package (e.g. for the light module of
the command-line options) imports neither torch nor nnU-Net. :func:`lazy_optional` does the same for one object
that needs an optional dependency (the compiled calibration kernels: numba, Triton).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_attributes", "lazy_optional"]


def lazy_attributes(package: str, names: Mapping[str, str], submodules: Sequence[str], namespace: dict[str, Any],
                    owner: str | None = None) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of a package with lazily loaded names.

    Args:
        package: the package's ``__name__``.
        names: ``{public name: submodule that defines it}``.
        submodules: the submodules reachable as attributes (imported on first access).
        namespace: the package's ``globals()`` (a loaded name is cached there).
        owner: the module whose attributes these are, when it is not ``package`` itself (a module of ``package``
            whose names live in a sibling module); named in the ``AttributeError``.

    Returns:
        ``(__getattr__, __dir__)`` to assign in the package.

    Example:
        >>> ns = {}
        >>> getattr_, dir_ = lazy_attributes("json", {"JSONEncoder": "encoder"}, ["decoder"], ns)
        >>> getattr_("JSONEncoder")().encode({"a": 1}), "JSONEncoder" in ns, "decoder" in dir_()
        ('{"a": 1}', True, True)
    """

    def __getattr__(name: str) -> Any:
        """The names of ``names`` and the submodules, imported on first access."""
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        sub = names.get(name)
        if sub is None:
            raise AttributeError(f"module {owner or package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{sub}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names) | set(submodules))

    return __getattr__, __dir__


def lazy_optional(build: Callable[[], Any]) -> Callable[[], Any]:
    """A getter that builds an object on its first call and returns the same object from then on.

    For objects that need an optional dependency (numba, Triton): ``build`` imports it, so importing the module that
    defines the getter imports neither. An ``ImportError`` of ``build`` means "not installed": the getter returns
    ``None`` then and from then on, without trying again; any other error propagates and the next call tries again.

    Args:
        build: makes the object; raises ``ImportError`` where its dependency is missing.

    Returns:
        A function of no arguments: the built object, or ``None`` where ``build`` raised ``ImportError``.

    Example:
        >>> get = lazy_optional(lambda: __import__("json").dumps)
        >>> get() is get(), lazy_optional(lambda: __import__("no_such_module_here"))()
        (True, None)
    """
    state: dict[str, Any] = {}

    def get() -> Any:
        if "value" not in state:
            try:
                state["value"] = build()
            except ImportError:
                state["value"] = None
        return state["value"]

    return get
