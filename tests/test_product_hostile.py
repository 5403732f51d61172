"""Hostile registrations of cohort products (:mod:`monai_unc.product`): a plug-in class must not silently take the
place of a package product or of the reader of another product's rule files."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monai_unc.product import CohortProduct, command_product, product_type, register_product, unregister_product


@pytest.mark.parametrize(("attrs", "words"), [
    ({"name": "conformal"}, "name of the package's product ConformalMasks"),
    ({"name": "risk_control"}, "name of the package's product RiskControl"),
    ({"name": "fmt_thief", "artifact_format": "monai-unc conformal rule"}, "format of product ConformalMasks"),
    ({"name": "fmt_thief", "artifact_format": "monai-unc referral rule"}, "format of product RiskControl"),
    ({"name": "fmt_thief", "artifact_format": ""}, "artifact_format must be"),
    ({"name": "fmt_thief", "artifact_format": 3}, "artifact_format must be"),
    ({"name": "table_thief", "command": "thief", "applied_table": "conformal.csv"}, "table of product ConformalMasks"),
    ({"name": "table_thief", "command": "thief", "applied_table": "metrics.csv"}, "package's own commands"),
    ({"name": "table_thief", "command": "thief", "applied_table": "triage.csv"}, "package's own commands"),
])
def test_a_plugin_cannot_take_a_package_products_name_rule_format_or_table(attrs, words):
    builtin = {n: product_type(n) for n in ("conformal", "risk_control")}
    cls = type("Impostor", (CohortProduct,), {"title": "Impostor", **attrs})
    try:
        with pytest.raises(ValueError, match=words):
            register_product(cls)
    finally:
        if product_type(attrs["name"]) is cls:
            unregister_product(attrs["name"])
    assert {n: product_type(n) for n in builtin} == builtin and command_product("conformal") is builtin["conformal"]


@pytest.mark.parametrize("where", ["conformal", "evaluate", "predictions"])
def test_a_plugin_command_cannot_write_into_another_commands_folder_or_its_inputs(tmp_path, where):
    """``monai-unc <command>`` of a plug-in that does not check its output folder itself: the command's session
    refuses a folder holding another command's outputs (it wrote its table beside the masks of ``monai-unc
    conformal`` or into an evaluation) and a folder inside the predictions."""
    from monai_unc.workflows.apply import apply_command

    calls = []

    class Stamp(CohortProduct):
        name, title, command, applied_table = "stamp", "Stamp", "stamp-cases", "stamp.csv"

        @classmethod
        def apply_cases(cls, predictions, artifact, output, *, dist=None, **options):
            calls.append(output)
            return []

    pred = tmp_path / "pred"
    pred.mkdir()
    out = {"conformal": tmp_path / "masks", "evaluate": tmp_path / "ev", "predictions": pred / "out"}[where]
    out.mkdir(parents=True)
    marker = {"conformal": "conformal.csv", "evaluate": "summary.json", "predictions": None}[where]
    if marker:
        (out / marker).write_text("{}")
    register_product(Stamp)
    try:
        with pytest.raises(ValueError, match="conformal|evaluate|inside the input folder"):
            apply_command("stamp-cases", pred, tmp_path / "rule.json", out)
        assert calls == []
        apply_command("stamp-cases", pred, tmp_path / "rule.json", tmp_path / "fresh")
        assert calls == [(tmp_path / "fresh").resolve()]
    finally:
        unregister_product("stamp")


@settings(max_examples=400, deadline=None)
@given(st.floats(-1e3, 1e3, allow_nan=False), st.floats(-1e3, 1e3, allow_nan=False), st.integers(2, 4))
def test_format_cell_never_reads_equal_to_or_across_its_threshold(v, t, digits):
    """Found by hostile testing: the zero rule ran after the threshold's, so 0.00039996 next to 0.0004 read 0.0004."""
    from monai_unc.product import format_cell

    for value, threshold in ((v, t), (v * 1e-6, t * 1e-6), (t * (1 + 1e-9), t), (t * (1 - 1e-9), t)):
        shown = float(format_cell(value, digits, threshold))
        assert (shown > threshold) - (shown < threshold) == (value > threshold) - (value < threshold), (value,
                                                                                                          threshold)
