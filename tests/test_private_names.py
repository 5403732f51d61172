"""No private name is imported across modules of the calibration, spatial, boundary, aggregation and temperature
code (the package-wide rule is in ``tests/test_architecture.py``)."""

import ast

import pytest

from tests._paths import ROOT

OWNED = [
    "monai_unc/metrics/calibration/__init__.py",
    "monai_unc/metrics/calibration/histogram.py",
    "monai_unc/metrics/calibration/functional.py",
    "monai_unc/metrics/calibration/metric.py",
    "monai_unc/metrics/spatial.py",
    "monai_unc/metrics/boundary.py",
    "monai_unc/handlers/calibration.py",
    "monai_unc/handlers/spatial.py",
    "monai_unc/aggregation.py",
    "monai_unc/temperature.py",
]


@pytest.mark.parametrize("path", OWNED)
def test_no_private_name_is_imported_across_modules(path):
    tree = ast.parse((ROOT / path).read_text())
    bad = [
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("monai_unc"))
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert not bad, bad
