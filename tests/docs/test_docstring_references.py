"""Every fully qualified name a docstring points users at (``:func:`monai_unc...``` and its ``class`` / ``data`` /
``mod`` / ``exc`` roles) exists: found by hostile review, ``monai_unc.metrics.buc``,
``monai_unc.product.command_output_markers`` and ``monai_unc.evaluation.triage.certify_rule`` named nothing."""

import importlib
import re

from tests._paths import ROOT

ROLE = re.compile(r":(?:func|class|data|mod|exc):`~?(monai_unc(?:\.\w+)+)`")
#: packages of optional extras; their references are checked where the extra is installed
OPTIONAL = {"monai_unc.nnunet": "nnunetv2", "monai_unc.io.dicom": "highdicom", "monai_unc.workflows.dicom": "highdicom"}


def _resolves(name: str) -> bool:
    """Whether ``name`` is an attribute path from ``monai_unc``, importing a submodule only where no attribute of
    that name exists (a function shadows the deprecated module path of the same name, e.g. ``metrics.qu_brats``)."""
    obj = importlib.import_module("monai_unc")
    for part in name.split(".")[1:]:
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        try:
            obj = importlib.import_module(f"{obj.__name__}.{part}")
        except (ImportError, AttributeError):
            return False
    return True


def _references():
    for path in sorted((ROOT / "monai_unc").rglob("*.py")):
        for name in sorted(set(ROLE.findall(path.read_text(encoding="utf-8")))):
            yield str(path.relative_to(ROOT)), name


def test_fully_qualified_docstring_references_exist():
    missing = []
    for where, name in _references():
        extra = next((mod for prefix, mod in OPTIONAL.items() if name.startswith(prefix)), None)
        if extra is not None and importlib.util.find_spec(extra) is None:
            continue
        if not _resolves(name):
            missing.append(f"{where}: {name}")
    assert not missing, "docstrings name what does not exist:\n" + "\n".join(missing)


def test_the_check_finds_a_missing_name():
    assert _resolves("monai_unc.metrics.ece") and _resolves("monai_unc.evaluation.command_output_markers")
    assert not _resolves("monai_unc.metrics.buc")
    assert not _resolves("monai_unc.product.command_output_markers")
    assert _resolves("monai_unc.metrics.qu_brats")  # the function, not the deprecated module of that name
