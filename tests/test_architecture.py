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
- Optional third-party packages are imported at module level only where they belong (:data:`OPTIONAL_DEPENDENCIES`).
- The deprecated modules of old paths (:data:`DEPRECATED_MODULES`) are imported by nothing in the package.

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
    0: ("_utils", "_deprecation", "keys"),
    1: ("monai_unc", "measures", "aggregation", "io", "regions"),
    2: ("stats", "metrics", "scores", "activation"),
    3: ("temperature", "networks"),
    4: ("inferers",),
    5: ("transforms", "handlers", "engines", "distributed", "data"),
    6: ("evaluation", "nnunet"),
    7: ("report",),
    8: ("workflows",),
    9: ("cli",),
}
LAYER_OF = {c: layer for layer, comps in LAYERS.items() for c in comps}

#: the functional core and the adapters named by the architecture contract (checked on their own, whatever LAYERS says)
CORE = ("_utils", "_deprecation", "keys", "measures", "stats", "aggregation", "metrics", "temperature", "io",
        "activation")
ADAPTERS = ("transforms", "handlers", "engines", "nnunet", "evaluation", "report", "workflows", "cli", "data",
            "distributed")

#: old module paths kept for one release; they re-export the new homes and warn (tests/test_deprecations.py)
DEPRECATED_MODULES = (
    "monai_unc.predict",
    "monai_unc.calibration",
    "monai_unc.quality",
    "monai_unc.report.cohort",
    "monai_unc.report.demo",
    "monai_unc.report.nifti",
    "monai_unc.data.export",
)

#: private modules every part of the package may import (their names are public within the package)
SHARED_PRIVATE_MODULES = ("monai_unc._utils", "monai_unc._deprecation")

#: (importing module, imported module) -> why the import sits inside a function
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    ("monai_unc.cli", "monai_unc.nnunet.cli"): "nnunetv2 is optional: the nnU-Net sub-commands load it only when run",
}

#: third-party package -> the package prefixes that may import it at module level (empty: none, import it lazily)
OPTIONAL_DEPENDENCIES: dict[str, tuple[str, ...]] = {
    "nnunetv2": ("monai_unc.nnunet",),
    "acvl_utils": ("monai_unc.nnunet",),
    "batchgenerators": ("monai_unc.nnunet",),
    "dynamic_network_architectures": ("monai_unc.nnunet",),
    "ignite": (),  # pytorch-ignite is a dev dependency only; MONAI's engines and handlers import it optionally
    "nilearn": (),  # the "examples" extra
}

#: violations on main today, each with where it is being fixed; remove an entry when its violation is gone
PENDING: dict[tuple[str, str, str, str], str] = {
    # (rule, importing module, imported module, name) -> note
}


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
        if not i.internal or i.importer in DEPRECATED_MODULES:
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
    components = {component(m) for m in MODULES if m not in DEPRECATED_MODULES}
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
        if i.internal and i.importer not in DEPRECATED_MODULES
        and component(i.importer) in CORE and component(i.target) in ADAPTERS
    ]
    assert not bad, "\n".join(bad)


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
    found = {key for key, _ in _layer_violations() + _private_violations() + _lazy_violations()}
    # an entry about a module this tree does not have (yet) cannot be checked here
    applicable = {key for key in PENDING if key[1] in MODULES and key[2] in MODULES}
    stale = sorted(applicable - found)
    assert not stale, f"fixed: remove these entries from PENDING in tests/test_architecture.py: {stale}"


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


def test_deprecated_modules_are_not_imported_by_the_package():
    bad = [
        f"{_where(i)}: {i.importer} imports the deprecated {i.target}"
        for i in IMPORTS
        if i.target in DEPRECATED_MODULES and i.importer not in DEPRECATED_MODULES
    ]
    assert not bad, "\n".join(bad)
    for m in DEPRECATED_MODULES:
        assert m in MODULES, f"{m} is gone: remove it from DEPRECATED_MODULES (and tests/test_deprecations.py)"
        warns = [
            n for n in TREES[m].body
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and "DeprecationWarning" in ast.unparse(n)
        ]
        assert warns, f"{m} must warn with a DeprecationWarning at import"


def test_the_design_doc_shows_these_layers():
    """docs/design.md's layer table lists exactly the components of LAYERS, layer by layer."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## Packages and what may import what", 1)[-1].split("\n## ", 1)[0]
    rows = re.findall(r"^\|\s*(\d+)\s*\|([^|]*)\|", section, flags=re.M)
    assert rows, "docs/design.md has no layer table (| layer | components | ... |)"
    doc = {int(layer): tuple(re.findall(r"`([\w.]+)`", cells)) for layer, cells in rows}
    assert doc == LAYERS, f"docs/design.md layer table {doc} differs from LAYERS {LAYERS}"
