"""Hostile registrations of cohort products (:mod:`monai_unc.product`): a plug-in class must not silently take the
place of a package product or of the reader of another product's rule files."""

from __future__ import annotations

import pytest

from monai_unc.product import CohortProduct, command_product, product_type, register_product, unregister_product


@pytest.mark.parametrize(("attrs", "words"), [
    ({"name": "conformal"}, "name of the package's product ConformalMasks"),
    ({"name": "risk_control"}, "name of the package's product RiskControl"),
    ({"name": "fmt_thief", "artifact_format": "monai-unc conformal rule"}, "format of product ConformalMasks"),
    ({"name": "fmt_thief", "artifact_format": "monai-unc referral rule"}, "format of product RiskControl"),
    ({"name": "fmt_thief", "artifact_format": ""}, "artifact_format must be"),
    ({"name": "fmt_thief", "artifact_format": 3}, "artifact_format must be"),
])
def test_a_plugin_cannot_take_a_package_products_name_or_rule_format(attrs, words):
    builtin = {n: product_type(n) for n in ("conformal", "risk_control")}
    cls = type("Impostor", (CohortProduct,), {"title": "Impostor", **attrs})
    try:
        with pytest.raises(ValueError, match=words):
            register_product(cls)
    finally:
        if product_type(attrs["name"]) is cls:
            unregister_product(attrs["name"])
    assert {n: product_type(n) for n in builtin} == builtin and command_product("conformal") is builtin["conformal"]
