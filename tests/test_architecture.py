"""The package's layering, checked on the source with ``ast`` (docs/design.md, "Packages and what may import what").

- Every module belongs to a component (the first name under ``monai_unc``: ``metrics``, ``io``, ``cli``, ...; the
  package root ``monai_unc/__init__.py`` is the component ``monai_unc``). Components sit in layers
  (:data:`LAYERS`); a module may import its own component and the components of *lower* layers only. So the
  functional core (measures, statistics, aggregation, metrics, temperature scaling, file I/O) never imports an
  adapter (MONAI transforms / handlers / engines, nnU-Net, evaluation, report, workflows, command line, data).
- No private name (leading underscore) is imported from another module of the package, and none is reached through
  an imported module (``module._name``); private modules are imported only inside their own package, except
  :data:`SHARED_PRIVATE_MODULES`.
- Package modules are imported at module level; an import inside a function needs an entry in :data:`LAZY_IMPORTS`
  saying why (an optional dependency).
- Optional third-party packages are imported at module level only where they belong (:data:`OPTIONAL_DEPENDENCIES`);
  MONAI, in the functional core, only by its adapter modules (:data:`MONAI_IN_CORE`).
- The deprecated modules of old paths (:data:`DEPRECATED_MODULES`) have no file: each is an entry of
  ``MOVED_MODULES`` in ``monai_unc/_compat.py`` naming modules of the package, and nothing in the package imports it.
- Some components may not import a lower one all the same (:data:`FORBIDDEN_IMPORTS`): the command line imports
  nothing from the cohort engine (``monai_unc.engine``, or its old path ``monai_unc.distributed``); it goes through
  ``monai_unc.workflows``.
- Every file write goes through :mod:`monai_unc.io` (temporary name and rename): outside ``monai_unc/io/`` no
  ``open(...)`` with a write, append or create mode, no ``os.replace`` / ``os.rename`` / ``shutil.move`` /
  ``shutil.copy*``, no ``.write_text(`` / ``.write_bytes(``, and no ``savefig`` / ``numpy.save*`` /
  ``torch.save`` / ``nibabel.save`` / ``.to_filename`` / ``json.dump`` / ``pickle.dump`` to a file (an in-memory
  ``io.BytesIO`` / ``io.StringIO`` buffer is fine). :data:`WRITE_ALLOWED` lists the exceptions a third-party API
  forces (today one lock file, see there).

:data:`PENDING` lists the violations that exist today and are being removed; an entry that no longer matches a
violation fails the test, so the list only shrinks.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = ROOT / "monai_unc"
PACKAGE = "monai_unc"

#: layer -> components; a component may import itself and the components of lower layers only
LAYERS: dict[int, tuple[str, ...]] = {
    0: ("_frames",),
    1: ("_utils", "_deprecation", "_compat", "_lazy", "_jit", "_digest", "keys", "state", "_stats_triton"),
    2: ("monai_unc", "measures", "aggregation", "io", "regions", "activation", "product", "_stats_kernels"),
    3: ("stats", "metrics", "scores"),
    4: ("temperature", "networks", "losses"),
    5: ("inferers",),
    6: ("transforms", "handlers", "engines", "engine", "data"),
    7: ("evaluation", "nnunet"),
    8: ("products", "monitoring"),
    9: ("report",),
    10: ("workflows",),
    11: ("cli",),
    12: ("__main__",),
}
LAYER_OF = {c: layer for layer, comps in LAYERS.items() for c in comps}

#: the functional core and the adapters named by the architecture contract (checked on their own, whatever LAYERS says)
CORE = ("_utils", "_deprecation", "keys", "measures", "stats", "aggregation", "metrics", "temperature", "io",
        "activation", "losses")
ADAPTERS = ("transforms", "handlers", "engines", "nnunet", "evaluation", "report", "workflows", "cli", "data",
            "engine")

#: old module paths kept until their removal (CHANGELOG.md): entries of monai_unc/_compat.py's MOVED_MODULES, not
#: files; importing one gives the objects of the new homes and warns (tests/test_deprecations.py)
DEPRECATED_MODULES = (
    "monai_unc.predict",
    "monai_unc.calibration",
    "monai_unc.quality",
    "monai_unc.report.cohort",
    "monai_unc.report.demo",
    "monai_unc.report.nifti",
    "monai_unc.data.export",
    "monai_unc.evaluation.triage.fingerprint",
    "monai_unc.distributed",
    "monai_unc.distributed.cases",
    "monai_unc.distributed.collectives",
    "monai_unc.metrics.qu_brats",
    "monai_unc.data.perturb",
)

#: component -> components it may not import although the layers would allow it (the deprecated modules of the old
#: paths of those components included)
FORBIDDEN_IMPORTS: dict[str, tuple[str, ...]] = {
    # the command line parses and prints; the process group, the engine and failed cases are the workflows' concern
    "cli": ("engine", "distributed"),
}

#: private modules every part of the package may import (their names are public within the package)
SHARED_PRIVATE_MODULES = ("monai_unc._utils", "monai_unc._deprecation", "monai_unc._lazy", "monai_unc._digest")

#: (importing module, imported module) -> why the import sits inside a function
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    ("monai_unc.metrics.calibration._cuda_kernel", "monai_unc.metrics.calibration._triton_histogram"):
        "Triton is optional and slow to import: the histogram's GPU kernel loads it on its first CUDA update",
    ("monai_unc.metrics.calibration._cpu_kernel", "monai_unc.metrics.calibration._numba_histogram"):
        "numba is optional and slow to import: the histogram's CPU kernels load it on their first update",
    ("monai_unc._stats_kernels", "monai_unc._stats_triton"):
        "Triton is optional and slow to import: SampleStats loads its GPU kernel on its first CUDA update",
    ("monai_unc.cli", "monai_unc.nnunet.cli"): "nnunetv2 is optional: the nnU-Net sub-commands load it only when run",
    ("monai_unc.inferers.dropout", "monai_unc.inferers.rate_in"):
        "rate_in builds on dropout (its hooks and dropout sites): MCDropoutSource.activate takes off kept Rate-In "
        "layers with rate_in's release_kept_layers, imported when it runs",
    ("monai_unc.nnunet.dropout", "monai_unc.nnunet.predictor"):
        "write_dropout_plans reads the source plans as a model folder's (read_model_json) when run; dropout_plans and "
        "the module stay importable without nnU-Net's predictor",
    # parse first: `monai-unc --help` and argument errors answer at once, without torch, MONAI or nnU-Net's predictor
    **dict.fromkeys(
        [("monai_unc.cli", m) for m in ("monai_unc.workflows.calibrate", "monai_unc.workflows.apply",
                                        "monai_unc.workflows.demo", "monai_unc.workflows.evaluate",
                                        "monai_unc.workflows.monitor",
                                        "monai_unc.workflows.keys",
                                        "monai_unc.workflows.prepare", "monai_unc.workflows.infer_plan",
                                        "monai_unc.workflows.report",
                                        "monai_unc.workflows.session", "monai_unc.workflows.triage",
                                        "monai_unc.workflows.dicom", "monai_unc._utils")]
        + [("monai_unc.nnunet.cli", m) for m in ("monai_unc.io", "monai_unc.nnunet.predictor",
                                                 "monai_unc.nnunet.dropout", "monai_unc.nnunet.calibrate",
                                                 "monai_unc.temperature", "monai_unc.io.dicom")],
        "the command line parses its arguments before importing what the chosen command runs on (torch, MONAI)",
    ),
    # a product module is light (the command line reads its options before torch): its computations load when run
    **dict.fromkeys(
        [("monai_unc.products.conformal", m) for m in ("monai_unc.metrics.conformal", "monai_unc.evaluation.config",
                                                       "monai_unc.evaluation.conformal", "monai_unc.evaluation.rows",
                                                       "monai_unc.io", "monai_unc._utils",
                                                       "monai_unc.evaluation.triage.rule",
                                                       "monai_unc.evaluation.triage.runner",
                                                       "monai_unc.io.provenance")]
        + [("monai_unc.products.lesions", m) for m in ("monai_unc._utils", "monai_unc.io",
                                                       "monai_unc.evaluation.config", "monai_unc.scores")]
        + [("monai_unc.products.risk_control", m) for m in ("monai_unc.evaluation.cohort",
                                                            "monai_unc.metrics.risk_control",
                                                            "monai_unc.evaluation.triage.certify",
                                                            "monai_unc.evaluation.triage",
                                                            "monai_unc.evaluation.triage.runner",
                                                            "monai_unc.io.provenance")],
        "the product's options are read by the command line before torch; its computations are imported when run",
    ),
    **dict.fromkeys(
        [("monai_unc.evaluation.conformal", m) for m in ("monai_unc.evaluation.triage.rule",
                                                         "monai_unc.evaluation.triage.runner")],
        "the triage package imports the evaluation's modules: its wording of a mismatch is read when a statement is "
        "written (hostile review 60), not at import, which would make a cycle",
    ),
    ("monai_unc.workflows.evaluate", "monai_unc.report.html"): "evaluate checks an earlier report page only where "
    "<output>/report exists: the report's modules (matplotlib) load then, not on every evaluation",
    ("monai_unc.workflows.infer_plan", "monai_unc.workflows.dicom"): "infer --output-format both: the DICOM writers "
    "(the dicom extra) load only when asked for",
    ("monai_unc.workflows.prepare", "monai_unc.io.dicom"): "infer --output-format both: the DICOM writers "
    "(the dicom extra) load only when asked for",
    # DICOM input: a series folder is read only when one is given (pydicom and highdicom are the dicom extra)
    ("monai_unc.workflows.infer", "monai_unc.io.dicom"): "the dicom extra is optional: load_image_case reads the "
    "series of a case's channels when its input is one DICOM series folder per channel",
    ("monai_unc.io.cases", "monai_unc.io.dicom"): "the dicom extra is optional: read_volume loads the series "
    "reader only for a DICOM series folder",
    ("monai_unc.monitoring.store", "monai_unc._utils"):
        "_utils imports torch: the store's writers (a second triage host, a cron job) start without it; only a wrong "
        "--expect-head loads it, to mark the error as that option's",
    ("monai_unc.monitoring.records", "monai_unc.io.dicom"): "the dicom extra is optional: the site of a case whose "
    "image is a DICOM series folder is read from its header only then",
    ("monai_unc.evaluation.case", "monai_unc.io.dicom"): "the dicom extra is optional: a case's segment names are "
    "compared with the class names only when its labels are a DICOM SEG",
    ("monai_unc.evaluation.triage.images", "monai_unc.io.dicom"): "the dicom extra is optional: the image statistics "
    "read a case's channel series on channel 0's grid only when its image is one DICOM series folder per channel",
    **dict.fromkeys(
        [("monai_unc.products.lesions", "monai_unc.evaluation.lesions")],
        "the product's options are read by the command line before torch; its computations are imported when run",
    ),
    # deprecated methods kept for one release (CHANGELOG): the formula itself writes no file
    ("monai_unc.metrics.calibration.histogram", "monai_unc.io"): "ConfidenceHistogram.save is deprecated "
    "(monai_unc.io.save_state writes a state); its body loads the writer only when the old method is called",
    ("monai_unc.report.html", "monai_unc.evaluation"): "build_report(budget=..., target_risk=...) is deprecated "
    "(the report renders a summary; monai_unc.evaluation.resummarize computes another); the old arguments load it",
    # nnunet-predict and its export workers run without MONAI (issue #29: end to end as fast as stock)
    **dict.fromkeys(
        [("monai_unc.nnunet.predictor", m) for m in ("monai_unc.inferers.rate_in", "monai_unc.nnunet.calibrate")],
        "MONAI is loaded only for what needs it: the Rate-In source, temperature scaling",
    ),
}

#: third-party package -> the package prefixes that may import it at module level (empty: none, import it lazily)
OPTIONAL_DEPENDENCIES: dict[str, tuple[str, ...]] = {
    "nnunetv2": ("monai_unc.nnunet",),
    "acvl_utils": ("monai_unc.nnunet",),
    "batchgenerators": ("monai_unc.nnunet",),
    "dynamic_network_architectures": ("monai_unc.nnunet",),
    "ignite": (),  # pytorch-ignite is a dev dependency only; MONAI's engines and handlers import it optionally
    "nilearn": (),  # a dependency, but heavy to import: the MNI152 example (monai_unc.data.mni152) loads it lazily
    # the dicom extra: only the DICOM package of io imports them (monai_unc.io itself never imports monai_unc.io.dicom)
    "pydicom": ("monai_unc.io.dicom",),
    "highdicom": ("monai_unc.io.dicom",),
    "psycopg": (),  # the monitor extra: monai_unc.monitoring.store loads it only for a postgresql:// store
}

#: the modules of the functional core (:data:`CORE`) that may import MONAI at module level: its adapters (the MONAI
#: metric and loss classes), each beside the functions it wraps. Everything else in the core imports without MONAI,
#: whose import takes seconds (``monai/__init__`` loads every submodule): ``monai-unc evaluate`` and the other commands
#: that only read and compute start without it
MONAI_IN_CORE = ("monai_unc.metrics.ambiguity_metric", "monai_unc.metrics.calibration.metric",
                 "monai_unc.metrics.qu_brats_metric", "monai_unc.metrics.spatial_metric",
                 "monai_unc.metrics.cumulative",
                 "monai_unc.losses.calibration")

#: (module, forbidden call) -> why that module may write a file directly (a third-party API that forces it)
WRITE_ALLOWED: dict[tuple[str, str], str] = {
    # every writer of the package goes through monai_unc.io (atomic_path, atomic_write_*, write_csv, ...), except:
    ("monai_unc._jit", "os.open"): "an empty lock file for fcntl.flock in numba's cache folder: opened, never "
    "written (an atomic replace would give each process its own file, and so no lock)",
    ("monai_unc.cli", "os.open"): "the null device, opened to take the place of a standard output whose reader went "
    "away (`| head`; cli._closed_output): no file is written",
}

#: violations on main today, each with where it is being fixed; remove an entry when its violation is gone
PENDING: dict[tuple[str, str, str, str], str] = {
    # (rule, importing module, imported module, name) -> note
}

#: what the report may not import: the computations of the cohort numbers, the maps and the masks (it renders what
#: evaluate wrote; drawing a curve from saved rows or a saved histogram is fine)
REPORT_FORBIDDEN = ("summarize", "resummarize", "derived_maps", "conformal_masks", "evaluate_case", "fit_products",
                    "fit_conformal_rules", "certify_referral_rule")


# ---------------------------------------------------------------------------------------------------------------
# the import graph
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Import:
    importer: str  # module name
    target: str  # the imported module (a package module) or third-party module
    names: tuple[str, ...]  # names taken with ``from target import ...`` (empty for ``import target``)
    lineno: int
    module_level: bool  # False inside a function or class body

    @property
    def internal(self) -> bool:
        return self.target == PACKAGE or self.target.startswith(PACKAGE + ".")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def _is_package(module: str) -> bool:
    return MODULES.get(module, Path()).name == "__init__.py"


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    """Absolute module of ``from <module> import ...``."""
    if not node.level:
        return node.module or ""
    base = importer.split(".") if _is_package(importer) else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, tree: ast.Module) -> list[Import]:
    found: list[Import] = []

    def visit(node: ast.AST, module_level: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append(Import(module, alias.name, (), child.lineno, module_level))
            elif isinstance(child, ast.ImportFrom):
                target = _resolve(module, child)
                names = tuple(a.name for a in child.names)
                # ``from pkg import submodule`` imports the submodule
                subs = [n for n in names if f"{target}.{n}" in MODULES]
                for n in subs:
                    found.append(Import(module, f"{target}.{n}", (), child.lineno, module_level))
                rest = tuple(n for n in names if n not in subs)
                if rest or not subs:
                    found.append(Import(module, target, rest, child.lineno, module_level))
            nested = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
            visit(child, module_level and not nested)

    visit(tree, True)
    return found


TREES: dict[str, ast.Module] = {m: ast.parse(p.read_text(), filename=str(p)) for m, p in MODULES.items()}
IMPORTS: list[Import] = [imp for m, tree in TREES.items() for imp in _imports(m, tree)]


def component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


def _where(imp: Import) -> str:
    return f"{MODULES[imp.importer].relative_to(ROOT)}:{imp.lineno}"


Violation = tuple[tuple[str, str, str, str], str]  # ((rule, importer, imported, name), message)


def _layer_violations() -> list[Violation]:
    out = []
    for i in IMPORTS:
        if not i.internal:
            continue
        src, dst = component(i.importer), component(i.target)
        if src == dst or dst not in LAYER_OF or src not in LAYER_OF:
            continue  # within a component; unknown components fail test_every_component_has_a_layer
        if LAYER_OF[dst] >= LAYER_OF[src]:
            message = f"{src} (layer {LAYER_OF[src]}) imports {i.target} ({dst}, layer {LAYER_OF[dst]})"
            out.append((("layer", i.importer, i.target, ""), f"{_where(i)}: {message}"))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_module_allowed(importer: str, target: str) -> bool:
    """A private module ``pkg._x`` may be imported inside ``pkg``; the shared ones from anywhere."""
    parts = target.split(".")
    private_at = [k for k, p in enumerate(parts) if _private(p)]
    if not private_at or target in SHARED_PRIVATE_MODULES:
        return True
    owner = ".".join(parts[: private_at[0]])
    return importer == owner or importer.startswith(owner + ".")


def _private_violations() -> list[Violation]:
    out = []
    for i in IMPORTS:
        if not i.internal or i.importer == i.target:
            continue
        for name in i.names:
            if _private(name):
                message = f"{i.importer} imports the private name {name} from {i.target}"
                out.append((("private", i.importer, i.target, name), f"{_where(i)}: {message}"))
        if not _private_module_allowed(i.importer, i.target):
            message = f"{i.importer} imports the private module {i.target}"
            out.append((("private", i.importer, i.target, ""), f"{_where(i)}: {message}"))
    # private attributes reached through an imported package module: ``from . import x as y; y._name``
    for module, tree in TREES.items():
        bound = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = _resolve(module, node)
                for a in node.names:
                    if f"{target}.{a.name}" in MODULES:
                        bound[a.asname or a.name] = f"{target}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in MODULES and a.asname:
                        bound[a.asname] = a.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
                target = bound[node.value.id]
                if _private(node.attr) and target != module:
                    where = f"{MODULES[module].relative_to(ROOT)}:{node.lineno}"
                    message = f"{module} uses {node.value.id}.{node.attr} of {target}"
                    out.append((("private", module, target, node.attr), f"{where}: {message}"))
    return out


def _lazy_violations() -> list[Violation]:
    return [
        (("lazy", i.importer, i.target, ""), f"{_where(i)}: {i.importer} imports {i.target} inside a function")
        for i in IMPORTS
        if i.internal and not i.module_level and (i.importer, i.target) not in LAZY_IMPORTS
    ]


def forbidden_imports(imports: list[Import]) -> list[Violation]:
    """Imports of a component that :data:`FORBIDDEN_IMPORTS` bars it from (module level or inside a function)."""
    out = []
    for i in imports:
        barred = FORBIDDEN_IMPORTS.get(component(i.importer), ())
        if i.internal and component(i.target) in barred:
            message = f"{i.importer} imports {i.target}: {component(i.importer)} may not import {', '.join(barred)}"
            where = f"{MODULES[i.importer].relative_to(ROOT)}:{i.lineno}" if i.importer in MODULES else str(i.lineno)
            out.append((("forbidden", i.importer, i.target, ""), f"{where}: {message}"))
    return out


# ---------------------------------------------------------------------------------------------------------------
# file writes outside monai_unc.io
# ---------------------------------------------------------------------------------------------------------------
#: calls that move or copy files
_MOVES = {"os.replace", "os.rename", "os.renames", "shutil.move", "shutil.copy", "shutil.copy2", "shutil.copyfile",
          "shutil.copytree", "os.open"}
#: methods that write a file whatever the receiver
_WRITE_METHODS = {"write_text", "write_bytes", "rename"}
#: writer -> index of its destination argument and the keyword of it; a destination that is an in-memory buffer
#: (a name bound to ``BytesIO()`` / ``StringIO()``, or such a call) is not a file
_SAVERS: dict[str, tuple[int, str]] = {
    "np.save": (0, "file"), "np.savez": (0, "file"), "np.savez_compressed": (0, "file"), "np.savetxt": (0, "fname"),
    "numpy.save": (0, "file"), "numpy.savez": (0, "file"), "numpy.savez_compressed": (0, "file"),
    "numpy.savetxt": (0, "fname"),
    "torch.save": (1, "f"), "nib.save": (1, "filename"), "nibabel.save": (1, "filename"),
    "json.dump": (1, "fp"), "pickle.dump": (1, "file"), "sitk.WriteImage": (1, "fileName"),
    "SimpleITK.WriteImage": (1, "fileName"),
    ".savefig": (0, "fname"), ".to_filename": (0, "filename"), ".tofile": (0, "fid"),
}
#: modules whose ``open(path, mode)`` takes the mode second (``Path.open(mode)`` takes it first)
_OPEN_MODULES = {"io", "gzip", "bz2", "lzma", "codecs", "tarfile", "zipfile"}
_BUFFERS = {"BytesIO", "StringIO", "io.BytesIO", "io.StringIO"}


def _dotted(node: ast.AST) -> str:
    """``np.save`` for ``np.save``, ``.savefig`` for a method on any other expression, ``open`` for a name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name):
            return f"{node.value.id}.{node.attr}"
        return f".{node.attr}"
    return ""


def _argument(call: ast.Call, index: int, keyword: str) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return call.args[index] if len(call.args) > index else None


def _writes_mode(mode: ast.AST | None) -> bool:
    """Whether an ``open`` mode may write: a constant with ``w``, ``a``, ``x`` or ``+``, or any non-constant."""
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return any(c in mode.value for c in "wax+")
    return True


def write_calls(tree: ast.Module) -> list[tuple[int, str]]:
    """``(line, call)`` of every call in ``tree`` that writes, moves or copies a file (the write rule)."""
    buffers: set[str] = set()  # names bound to an in-memory buffer
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _dotted(node.value.func) in _BUFFERS:
            buffers |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.withitem) and isinstance(node.context_expr, ast.Call) \
                and _dotted(node.context_expr.func) in _BUFFERS and isinstance(node.optional_vars, ast.Name):
            buffers.add(node.optional_vars.id)

    def in_memory(dest: ast.AST | None) -> bool:
        if isinstance(dest, ast.Name):
            return dest.id in buffers
        return isinstance(dest, ast.Call) and _dotted(dest.func) in _BUFFERS

    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        method = name[name.rfind("."):] if "." in name else ""
        if name in _MOVES or method[1:] in _WRITE_METHODS:
            bad = True
        elif name == "open":
            bad = _writes_mode(_argument(node, 1, "mode"))
        elif method == ".open":
            index = 1 if name[: -len(".open")] in _OPEN_MODULES else 0
            bad = _writes_mode(_argument(node, index, "mode"))
        elif name in _SAVERS or method in _SAVERS:
            index, keyword = _SAVERS.get(name) or _SAVERS[method]
            bad = not in_memory(_argument(node, index, keyword))
        else:
            bad = False
        if bad:  # a method on any receiver is named by the method (``.write_text``)
            found.append((node.lineno, name if name in _MOVES or name in _SAVERS or name == "open" else method))
    return found


def _write_violations_unfiltered() -> list[Violation]:
    out = []
    for module, tree in TREES.items():
        if module == f"{PACKAGE}.io" or module.startswith(f"{PACKAGE}.io."):
            continue
        for lineno, name in write_calls(tree):
            message = f"{module} writes a file with {name}(...) instead of monai_unc.io"
            out.append((("write", module, name, ""), f"{MODULES[module].relative_to(ROOT)}:{lineno}: {message}"))
    return out


def _write_violations() -> list[Violation]:
    return [v for v in _write_violations_unfiltered() if (v[0][1], v[0][2]) not in WRITE_ALLOWED]


def _report_violations() -> list[Violation]:
    out = []
    for i in IMPORTS:
        if component(i.importer) != "report" or not i.internal or not i.module_level:
            continue  # a lazy import is a listed exception (LAZY_IMPORTS), checked there
        for name in i.names:
            if name in REPORT_FORBIDDEN:
                out.append((("report-computes", i.importer, i.target, name),
                            f"{_where(i)}: {i.importer} imports the computation {name} from {i.target}"))
    return out


def _new(violations: list[Violation]) -> list[str]:
    return [message for key, message in violations if key not in PENDING]


# ---------------------------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------------------------
def test_the_graph_sees_known_imports():
    """Guard against a parser that finds nothing: edges that exist today are found, relative and absolute."""
    edges = {(i.importer, i.target) for i in IMPORTS}
    assert ("monai_unc.stats", "monai_unc.measures") in edges  # from .measures import ...
    assert ("monai_unc.io.cases", "monai_unc.keys") in edges  # from ..keys import ...
    assert ("monai_unc.nnunet.predictor", "monai_unc.stats") in edges  # from monai_unc.stats import ...
    assert ("monai_unc.cli", "monai_unc.nnunet.cli") in edges  # from .nnunet import cli (a submodule, in a function)
    assert any(not i.module_level for i in IMPORTS if i.importer == "monai_unc.cli" and i.internal)
    assert len(MODULES) > 50


def test_every_component_has_a_layer():
    components = {component(m) for m in MODULES}
    missing = sorted(components - set(LAYER_OF))
    assert not missing, (
        f"components without a layer: {missing}; add them to LAYERS in tests/test_architecture.py and to the table "
        "in docs/design.md"
    )
    assert len(LAYER_OF) == sum(len(c) for c in LAYERS.values()), "a component is listed in two layers"


def test_core_is_below_every_adapter():
    assert max(LAYER_OF[c] for c in CORE) < min(LAYER_OF[c] for c in ADAPTERS)


def test_core_never_imports_an_adapter():
    bad = [
        f"{_where(i)}: core module {i.importer} imports adapter {i.target}"
        for i in IMPORTS
        if i.internal and component(i.importer) in CORE and component(i.target) in ADAPTERS
    ]
    assert not bad, "\n".join(bad)


#: the formulas: arrays in, numbers out; they import no file writer or reader (``monai_unc.io``)
FORMULAS = ("measures", "stats", "aggregation", "metrics", "scores", "activation", "regions", "temperature", "networks",
            "losses", "state", "product")


def test_formulas_never_import_io():
    """The functional core computes; files are written and read by its callers through ``monai_unc.io``. A lazy
    import listed in :data:`LAZY_IMPORTS` (a deprecated method) is the only exception."""
    bad = [
        f"{_where(i)}: {i.importer} imports {i.target}"
        for i in IMPORTS
        if component(i.importer) in FORMULAS and (i.target == "monai_unc.io" or i.target.startswith("monai_unc.io."))
        and (i.importer, i.target) not in LAZY_IMPORTS
    ]
    assert not bad, "a formula imports the file layer:\n" + "\n".join(bad)


def test_the_product_protocol_is_light():
    """``monai_unc.product`` imports no heavy package, so the command line can offer every product's options before
    it imports torch (tests/cli/test_cli_startup.py checks the command line itself)."""
    heavy = ("torch", "monai", "numpy", "nibabel", "scipy")
    bad = [f"{_where(i)}: {i.target}" for i in IMPORTS
           if i.importer == "monai_unc.product" and (i.target.split(".")[0] in heavy or (
               i.internal and i.target not in ("monai_unc",)))]
    assert not bad, "monai_unc.product imports more than the standard library:\n" + "\n".join(bad)


def test_the_command_options_are_light():
    """``monai_unc.workflows.arguments`` (the options of every command) imports only the standard library,
    ``monai_unc.keys`` and ``monai_unc.product``, and the package ``monai_unc.workflows`` loads its names lazily, so
    that ``monai-unc --help`` answers without torch (tests/cli/test_cli_startup.py checks the command line itself)."""
    heavy = ("torch", "monai", "numpy", "nibabel", "scipy")
    bad = [f"{_where(i)}: {i.target}" for i in IMPORTS
           if i.importer == "monai_unc.workflows.arguments" and (i.target.split(".")[0] in heavy or (
               i.internal and i.target not in ("monai_unc.keys", "monai_unc.product")))]
    assert not bad, "monai_unc.workflows.arguments imports more than it may:\n" + "\n".join(bad)
    package = ast.parse((PACKAGE_DIR / "workflows" / "__init__.py").read_text())
    eager = [node.lineno for node in package.body if isinstance(node, ast.ImportFrom) and node.level == 1]
    assert not eager, f"monai_unc/workflows/__init__.py imports its submodules at import time (lines {eager})"


def test_the_report_imports_no_metric_computation():
    """The report renders what evaluate wrote (``summary.json``, the saved rows, histograms, rules and maps); it
    imports none of the computations of :data:`REPORT_FORBIDDEN` (another budget: the workflow calls
    :func:`monai_unc.evaluation.resummarize` and passes the summary)."""
    bad = _new(_report_violations())
    assert not bad, "the report computes:\n" + "\n".join(bad)


def test_imports_follow_the_layers():
    bad = _new(_layer_violations())
    assert not bad, "imports against the layering (docs/design.md):\n" + "\n".join(bad)


def test_no_private_name_crosses_modules():
    bad = _new(_private_violations())
    assert not bad, "private names used across modules (make them public or move the code):\n" + "\n".join(bad)


def test_package_imports_are_at_module_level():
    bad = _new(_lazy_violations())
    assert not bad, (
        "package modules imported inside functions (move them to the top, or add the pair to LAZY_IMPORTS with the "
        "reason, e.g. an optional dependency):\n" + "\n".join(bad)
    )
    lazy = {(i.importer, i.target) for i in IMPORTS if i.internal and not i.module_level}
    stale = sorted(set(LAZY_IMPORTS) - lazy)
    assert not stale, f"LAZY_IMPORTS entries without a lazy import: {stale}"


def test_pending_entries_still_match_a_violation():
    """PENDING only shrinks: an entry whose violation is gone must be removed."""
    found = {key for key, _ in _layer_violations() + _private_violations() + _lazy_violations()
             + _write_violations() + forbidden_imports(IMPORTS) + _report_violations()}
    # an entry about a module this tree does not have (yet) cannot be checked here
    applicable = {key for key in PENDING if key[1] in MODULES and key[2] in MODULES}
    stale = sorted(applicable - found)
    assert not stale, f"fixed: remove these entries from PENDING in tests/test_architecture.py: {stale}"


def test_the_cli_imports_nothing_from_the_engine():
    """The command line parses and prints: the process group, the engine and failed cases belong to ``workflows``
    (its command workflows return a ``CommandResult`` or raise ``CohortFailed``)."""
    bad = _new(forbidden_imports(IMPORTS))
    assert not bad, "imports barred by FORBIDDEN_IMPORTS (go through monai_unc.workflows):\n" + "\n".join(bad)


_CLI_ENGINE_IMPORTS = """
import monai_unc.engine
from monai_unc.distributed import CasesFailed
from .engine import cohort_session
from . import engine
from .workflows import evaluate_command
def cmd():
    from .distributed.collectives import barrier
    from .engine.run import run_cases
"""


def test_the_cli_rule_sees_every_form_of_engine_import():
    """Guard against a rule that finds nothing: absolute, relative, ``from . import``, old path and lazy imports of
    the engine by ``monai_unc.cli`` are found; the workflows import is not."""
    found = forbidden_imports(_imports(f"{PACKAGE}.cli", ast.parse(_CLI_ENGINE_IMPORTS)))
    targets = sorted(key[2] for key, _ in found)
    assert targets == ["monai_unc.distributed", "monai_unc.distributed.collectives", "monai_unc.engine",
                       "monai_unc.engine", "monai_unc.engine", "monai_unc.engine.run"], targets


def test_optional_dependencies_are_imported_where_they_belong():
    bad = []
    for i in IMPORTS:
        top = i.target.split(".")[0]
        if i.internal or not i.module_level or top not in OPTIONAL_DEPENDENCIES:
            continue
        allowed = OPTIONAL_DEPENDENCIES[top]
        if not any(i.importer == a or i.importer.startswith(a + ".") for a in allowed):
            bad.append(f"{_where(i)}: {i.importer} imports the optional {top} at module level")
    assert not bad, "\n".join(bad)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    """The lines of the ``if TYPE_CHECKING:`` blocks of a module (imports there never run)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def test_the_functional_core_imports_monai_only_in_its_adapter_modules():
    bad = []
    for i in IMPORTS:
        if i.internal or not i.module_level or i.target.split(".")[0] != "monai":
            continue
        if i.lineno in _type_checking_lines(TREES[i.importer]):
            continue
        if component(i.importer) in CORE and i.importer not in MONAI_IN_CORE:
            bad.append(f"{_where(i)}: {i.importer} imports {i.target} at module level")
    assert not bad, "MONAI in the core outside MONAI_IN_CORE (move the MONAI class apart):\n" + "\n".join(bad)
    assert all(m in TREES for m in MONAI_IN_CORE), [m for m in MONAI_IN_CORE if m not in TREES]


def _moved_modules() -> dict[str, list[str]]:
    """``MOVED_MODULES`` of ``monai_unc/_compat.py``, read with ``ast``: old path -> the new modules it names."""
    for node in TREES["monai_unc._compat"].body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "MOVED_MODULES" for t in targets):
            table = node.value
            assert isinstance(table, ast.Dict)
            out = {}
            for key, entry in zip(table.keys, table.values):
                # MovedModule(exports, advice): the exports dict, positional or by keyword
                exports = entry.args[0] if entry.args else next(k.value for k in entry.keywords if k.arg == "exports")
                out[ast.literal_eval(key)] = [ast.literal_eval(home) for home in exports.keys]
            return out
    raise AssertionError("monai_unc/_compat.py has no MOVED_MODULES table")


def test_deprecated_modules_are_not_imported_by_the_package():
    bad = [
        f"{_where(i)}: {i.importer} imports the deprecated {i.target}"
        for i in IMPORTS
        if i.target in DEPRECATED_MODULES
    ]
    assert not bad, "\n".join(bad)
    moved = _moved_modules()
    assert set(moved) == set(DEPRECATED_MODULES), "DEPRECATED_MODULES differs from MOVED_MODULES of _compat.py"
    for m, homes in moved.items():
        assert m not in MODULES, f"{m} is an entry of monai_unc/_compat.py: remove its file"
        unknown = [h for h in homes if h not in MODULES]
        assert not unknown, f"{m}: the new homes {unknown} are not modules of the package"
    # the import hook imports nothing of the package before an old path is imported
    assert not [i for i in IMPORTS if i.importer == "monai_unc._compat" and i.internal]


def test_the_design_doc_shows_these_layers():
    """docs/design.md's layer table lists exactly the components of LAYERS, layer by layer."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## Packages and what may import what", 1)[-1].split("\n## ", 1)[0]
    rows = re.findall(r"^\|\s*(\d+)\s*\|([^|]*)\|", section, flags=re.M)
    assert rows, "docs/design.md has no layer table (| layer | components | ... |)"
    doc = {int(layer): tuple(re.findall(r"`([\w.]+)`", cells)) for layer, cells in rows}
    assert doc == LAYERS, f"docs/design.md layer table {doc} differs from LAYERS {LAYERS}"


_WRITES = """
import io, json, os, shutil, pickle
import numpy as np, torch, nibabel as nib
from pathlib import Path
open(p, "w"); open(p, mode="a"); open(p, "rb+"); open(p, m); Path(p).open("w"); Path(p).open(mode="x")
os.replace(a, b); os.rename(a, b); shutil.move(a, b); shutil.copy2(a, b); Path(a).rename(b)
Path(p).write_text("x"); p.write_bytes(b"x")
fig.savefig(p); fig.savefig(fname=p, dpi=3); np.save(p, a); np.savez_compressed(p, a=a); torch.save(m, p)
nib.save(img, str(p)); img.to_filename(p); json.dump(obj, f); pickle.dump(obj, f)
"""
_READS = """
import io, json
import numpy as np
open(p); open(p, "rb"); open(p, mode="r"); Path(p).open(); Path(p).open("rb", newline="")
text = json.dumps(obj); np.load(p); "a.b".replace("a", "b"); Path(p).read_text()
buf = io.BytesIO()
fig.savefig(buf, format="png"); torch.save(m, buf); fig.savefig(io.BytesIO())
with io.StringIO() as out:
    json.dump(obj, out)
"""


def test_the_write_rule_sees_known_writes():
    """Guard against a checker that finds nothing: each forbidden form is found once, reads and in-memory buffers
    are not."""
    found = write_calls(ast.parse(_WRITES))
    names = [name for _, name in found]
    assert names.count("open") == 4 and names.count(".open") == 2
    for name in ("os.replace", "os.rename", "shutil.move", "shutil.copy2", ".rename", ".write_text", ".write_bytes",
                 "np.save", "np.savez_compressed", "torch.save", "nib.save", ".to_filename", "json.dump",
                 "pickle.dump"):
        assert names.count(name) == 1, (name, names)
    assert names.count(".savefig") == 2
    assert len(found) == 22
    assert write_calls(ast.parse(_READS)) == []


def test_every_file_write_goes_through_io():
    """Outside monai_unc/io/ nothing writes, moves or copies a file itself: files are written under a temporary
    name and renamed (monai_unc.io), so an interrupted run never leaves a half-written output."""
    bad = _new(_write_violations())
    assert not bad, (
        "file writes outside monai_unc.io (use atomic_path / atomic_write_* / write_csv / save_* of monai_unc.io, "
        "or add a commented WRITE_ALLOWED entry where a third-party API forces it):\n" + "\n".join(bad)
    )
    used = {(key[1], key[2]) for key, _ in _write_violations_unfiltered()}
    stale = sorted(set(WRITE_ALLOWED) - used)
    assert not stale, f"WRITE_ALLOWED entries without such a write: {stale}"


def test_the_design_doc_lists_every_module():
    """docs/design.md's "Where to find a concern" table names every module of the package (deprecated modules and
    packages that only re-export aside): ``a.b.c`` itself, or its package ``a.b`` with ``c`` in the same row."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("### Where to find a concern", 1)[-1].split("\n## ", 1)[0]
    rows = [re.findall(r"`([\w.]+)`", line) for line in section.splitlines() if line.startswith("|")]
    assert len(rows) > 20, "docs/design.md has no 'Where to find a concern' table"
    missing = []
    for module, path in MODULES.items():
        if path.name == "__init__.py":
            continue
        rel = module[len(PACKAGE) + 1:]
        parent, _, last = rel.rpartition(".")
        if not any(rel in names or (parent and parent in names and last in names) for names in rows):
            missing.append(rel)
    assert not missing, f"modules missing from the 'Where to find a concern' table of docs/design.md: {missing}"


# ---------------------------------------------------------------------------------------------------------------
# a capability is a unit: the masks with a guarantee live in a few modules
# ---------------------------------------------------------------------------------------------------------------
#: the modules of the masks with a guarantee: its formulas, its computations, the product, and the two packages that
#: re-export the public names of the first two
MASKS_MODULES = ("monai_unc.metrics.conformal", "monai_unc.evaluation.conformal", "monai_unc.products.conformal",
                 "monai_unc.metrics", "monai_unc.evaluation")
#: modules that use the word for two other capabilities from the same literature, never for the masks
OTHER_CONFORMAL_USES = {
    "monai_unc.metrics.quality": "the split-conformal interval of the expected Dice (its formula)",
    "monai_unc.evaluation.triage.rule": "the referral rule's split-conformal interval of the expected Dice",
    "monai_unc.report.triage": "the triage page's column of the expected-Dice interval",
    "monai_unc.metrics.monitoring": "conformal p-values and conformal test martingales (their formulas)",
    "monai_unc.monitoring": "monitoring's conformal test martingales (docstring)",
    "monai_unc.monitoring.status": "monitoring's conformal test martingales",
    "monai_unc.report.monitor": "the dashboard's chart of the conformal test martingales",
}
#: what only the masks' modules may name (their identifiers, files, options and command)
MASKS_WORDS = re.compile(r"conformal[ _-]?(mask|rule|state|strat|famil|side|loss)|ConformalMasks|ConformalRule"
                         r"|ConformalState|ConformalCase|--conformal\b|monai-unc conformal", re.IGNORECASE)


def test_the_masks_with_a_guarantee_are_a_unit():
    """The capability of the masks is its product module, its computations, its formulas and their re-exports.

    Every other command, page and writer reaches it through the product protocol (its options, command, outputs,
    overlays and rule file reader), so no other module of the package names it; the word itself is also the
    literature's name of two other capabilities (the expected-Dice interval, the monitoring martingales), in the
    modules listed with why.
    """
    assert len(MASKS_MODULES) <= 5
    mention = {m for m, p in MODULES.items() if "conformal" in p.read_text().lower()}
    assert mention <= set(MASKS_MODULES) | set(OTHER_CONFORMAL_USES), sorted(
        mention - set(MASKS_MODULES) - set(OTHER_CONFORMAL_USES))
    leaks = [f"{m}: {hit.group(0)!r}" for m in sorted(mention - set(MASKS_MODULES))
             for hit in MASKS_WORDS.finditer(MODULES[m].read_text())]
    assert not leaks, leaks
