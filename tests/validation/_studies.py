"""Loading the validation study scripts of ``docs/validation/`` in the tests (they are scripts, not a package)."""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from types import ModuleType

from tests._paths import ROOT

VALIDATION = ROOT / "docs" / "validation"


def load_study(name: str) -> ModuleType:
    """Import ``docs/validation/<name>.py`` as ``_validation_<name>``; the folder goes on ``sys.path`` first, since
    the scripts import their shared helpers (``_toy``) from it. ``_toy`` itself is imported under its own name."""
    if str(VALIDATION) not in sys.path:
        sys.path.insert(0, str(VALIDATION))
    if name == "_toy":
        return importlib.import_module("_toy")
    spec = importlib.util.spec_from_file_location(f"_validation_{name}", VALIDATION / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def finite_number(x) -> bool:
    """``x`` is a Python int or float (not None, not a string) and finite."""
    return isinstance(x, (int, float)) and math.isfinite(x)
