"""Old module paths that still import: each is one entry of :data:`MOVED_MODULES`, not a file of its own.

A module that moved leaves no file behind. Its old path keeps working until the release that removes it
(``CHANGELOG.md``, "Deprecated"): the package root installs :data:`FINDER` on ``sys.meta_path``, which answers
exactly the old paths of :data:`MOVED_MODULES`. Importing one (``import monai_unc.predict``,
``from monai_unc.report.cohort import summarize``, ``python -c "import monai_unc.quality"``) imports its new homes,
binds the very same objects under the old names, and warns with a ``DeprecationWarning``
"``<old path> is deprecated and will be removed in the next release; <what to import instead>``" that points at
the importing line; a reload warns again. Nothing is imported before an old path is: this module imports no other
module of the package.

To deprecate one more path, add its entry: the old path, the new modules with the names taken from each (``None``:
the new module's ``__all__``, as ``from new import *`` would) and the end of the warning. An old path that other
entries sit below (``monai_unc.old`` with ``monai_unc.old.part``) becomes a package, so that those import too.

Example:
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", DeprecationWarning)
    ...     from monai_unc.calibration import TemperatureScaler
    >>> from monai_unc.temperature import TemperatureScaler as new_home
    >>> TemperatureScaler is new_home
    True
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType

__all__ = ["MovedModule", "MOVED_MODULES", "MovedModuleFinder", "FINDER", "install"]


@dataclass(frozen=True)
class MovedModule:
    """Where the names of a deprecated module path live now.

    Args:
        exports: new module -> the names the old path takes from it, or ``None`` for all of the new module's
            ``__all__``. The old path's ``__all__`` lists them in this order.
        advice: what to import instead: the end of the warning.
    """

    exports: Mapping[str, Sequence[str] | None]
    advice: str

    def message(self, old: str) -> str:
        """The warning of an import of ``old``.

        Args:
            old: the deprecated module path.

        Returns:
            ``"<old> is deprecated and will be removed in the next release; <advice>"``.
        """
        return f"{old} is deprecated and will be removed in the next release; {self.advice}"


#: deprecated module path -> where its names live now (CHANGELOG.md, "Deprecated": removed in 0.3.0)
MOVED_MODULES: dict[str, MovedModule] = {
    "monai_unc.predict": MovedModule(
        {
            "monai_unc.workflows.factory": ("METHOD_TOKENS", "build_inferer"),
            "monai_unc.keys": ("DEFAULT_MEASURES",),
            "monai_unc.workflows.infer": (
                "INTENSITY_MODES", "FAILURES_FILE", "InferSettings", "normalize_intensity", "case_outputs",
                "is_finished", "load_image_case", "predict_case", "predict_cases", "check_run_settings", "run_infer",
            ),
            "monai_unc.workflows.models": ("LoadedModel", "load_network", "load_checkpoint"),
            "monai_unc.temperature": ("TemperatureScaled", "calibrate_network"),
            "monai_unc.workflows.calibrate": ("collect_logits",),
        },
        "import from monai_unc.workflows",
    ),
    "monai_unc.calibration": MovedModule(
        {"monai_unc.temperature": ("TemperatureScaler",)},
        "import TemperatureScaler from monai_unc.temperature",
    ),
    "monai_unc.quality": MovedModule({"monai_unc.metrics.quality": None}, "import from monai_unc.metrics.quality"),
    "monai_unc.report.cohort": MovedModule({"monai_unc.evaluation": None}, "import from monai_unc.evaluation"),
    "monai_unc.report.demo": MovedModule(
        {"monai_unc.data.cohorts": ("DEMO_SHIFTS", "make_demo_cohort", "write_toy_cohort"),
         "monai_unc.workflows.demo": ("run_demo",)},
        "import run_demo from monai_unc.workflows.demo and the cohort writers from monai_unc.data.cohorts",
    ),
    "monai_unc.report.nifti": MovedModule(
        {"monai_unc.io.files": ("save_nifti", "atomic_write_text", "json_safe")},
        "import save_nifti, atomic_write_text and json_safe from monai_unc.io",
    ),
    "monai_unc.data.export": MovedModule(
        {"monai_unc.data.cohorts": ("MANIFEST", "export_mni152_cases", "export_toy_cases", "load_datalist",
                                    "left_hemisphere_sample")},
        "import from monai_unc.data.cohorts",
    ),
    "monai_unc.evaluation.triage.fingerprint": MovedModule(
        {"monai_unc.io.provenance": ("FingerprintMismatch", "recorded_temperature", "prediction_fingerprint",
                                     "prediction_regions", "region_differences", "has_weight_digests",
                                     "normalize_fingerprint", "compare_fingerprints", "check_prediction_fingerprint")},
        "import from monai_unc.io.provenance (or monai_unc.evaluation.triage)",
    ),
    # the cohort engine was monai_unc.distributed (issue #35); its two modules are entries below it
    "monai_unc.distributed": MovedModule(
        {"monai_unc.engine": (
            "DEFAULT_TIMEOUT_S", "error_line", "check_same_cases", "check_each_case_once", "failure_reporter",
            "DistContext", "RankFailed", "CaseFailure", "CasesFailed", "read_dist_env", "get_dist_context",
            "destroy_dist_context", "shard", "all_gather_objects", "gather_objects", "broadcast_object", "barrier",
            "all_reduce_sum", "reduce_histogram", "sync_errors", "check_same", "write_failures", "print_failure",
            "CaseCache", "CohortRun", "process_cases", "run_cases", "settings_changes",
        )},
        "import from monai_unc.engine",
    ),
    "monai_unc.distributed.cases": MovedModule(
        {"monai_unc.engine.cache": ("CaseCache",),
         "monai_unc.engine.run": ("CohortRun", "process_cases", "run_cases", "settings_changes")},
        "import from monai_unc.engine",
    ),
    "monai_unc.distributed.collectives": MovedModule(
        {"monai_unc.engine.collectives": (
            "DEFAULT_TIMEOUT_S", "RankFailed", "CaseFailure", "CasesFailed", "DistContext", "read_dist_env",
            "get_dist_context", "destroy_dist_context", "shard", "all_gather_objects", "gather_objects",
            "broadcast_object", "barrier", "all_reduce_sum", "reduce_histogram", "sync_errors", "check_same",
            "check_same_cases", "check_each_case_once", "failure_reporter", "error_line", "write_failures",
            "print_failure",
        )},
        "import from monai_unc.engine",
    ),
    # modules named like a function of their package: the function hid the module from attribute lookups, so that
    # dotted paths through them (a bundle's "_target_", pydoc.locate) did not resolve; the package-level names stay
    "monai_unc.metrics.qu_brats": MovedModule(
        {"monai_unc.metrics.qu_brats_score": None},
        "import from monai_unc.metrics (or monai_unc.metrics.qu_brats_score)",
    ),
    "monai_unc.data.perturb": MovedModule(
        {"monai_unc.data.perturbations": None},
        "import from monai_unc.data (or monai_unc.data.perturbations)",
    ),
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import hook of the paths of a table like :data:`MOVED_MODULES` (finder and loader in one).

    Args:
        moved: deprecated module path -> :class:`MovedModule`.
    """

    def __init__(self, moved: Mapping[str, MovedModule]) -> None:
        self.moved = moved

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        """The spec of a deprecated path (a package when other entries sit below it); ``None`` for any other name.

        Args:
            fullname: the module being imported.
            path: the parent package's ``__path__`` (unused).
            target: the module being reloaded (unused).

        Returns:
            The spec, or ``None``.
        """
        if fullname not in self.moved:
            return None
        is_package = any(name.startswith(fullname + ".") for name in self.moved)
        return importlib.util.spec_from_loader(fullname, self, is_package=is_package)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        """Python's default module object.

        Args:
            spec: the spec of :meth:`find_spec`.
        """
        return None

    def exec_module(self, module: ModuleType) -> None:
        """Bind the names of the new homes in ``module`` (the same objects), then warn.

        Args:
            module: the module object of the deprecated path (a first import or a reload).
        """
        old = module.__name__
        moved = self.moved[old]
        names: list[str] = []
        for home_name, taken in moved.exports.items():
            home = importlib.import_module(home_name)
            for name in home.__all__ if taken is None else taken:
                setattr(module, name, getattr(home, name))
                names.append(name)
        module.__all__ = names
        module.__doc__ = f"Deprecated module path: {moved.message(old)}."
        _keep_package_name(old)
        # stacklevel 2 skips the import machinery's frames: the warning points at the importing line
        warnings.warn(moved.message(old), DeprecationWarning, stacklevel=2)


class _KeepsItsNames(ModuleType):
    """The class of a package whose name (a function) is also the old path of a moved module below it.

    Python binds a submodule on its package as it imports it (``setattr(package, "qu_brats", module)``): the first
    import of ``monai_unc.metrics.qu_brats`` would replace the function ``monai_unc.metrics.qu_brats`` with the
    deprecated module. This class skips that one binding (the name keeps its object; the module stays importable
    through ``sys.modules``); every other attribute is set as usual.
    """

    def __setattr__(self, name: str, value: object) -> None:
        spec = getattr(value, "__spec__", None)
        if (isinstance(value, ModuleType) and spec is not None and isinstance(spec.loader, MovedModuleFinder)
                and not isinstance(self.__dict__.get(name, value), ModuleType)):
            return
        super().__setattr__(name, value)


def _keep_package_name(old: str) -> None:
    """Keep the package's own object of the name ``old`` ends with (a function) when ``old`` is imported."""
    package, _, name = old.rpartition(".")
    module = sys.modules.get(package)
    if module is not None and type(module) is ModuleType and not isinstance(module.__dict__.get(name, module),
                                                                            ModuleType):
        module.__class__ = _KeepsItsNames


#: the finder of :data:`MOVED_MODULES` that the package root installs
FINDER = MovedModuleFinder(MOVED_MODULES)


def install() -> None:
    """Put :data:`FINDER` first on ``sys.meta_path`` (once; the package root calls this).

    First, not last: a folder left behind by a moved package (a ``__pycache__`` only) would otherwise be imported
    as an empty namespace package before the finder is asked.
    """
    if FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)
