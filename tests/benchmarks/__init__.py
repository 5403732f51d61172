"""Tests of the benchmark scripts (``benchmarks/*.py``, which are scripts, not a package)."""

import importlib.util
from types import ModuleType

from tests._paths import ROOT


def load_benchmark(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` imported as a module (a fresh one on every call)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
