"""Hostile review of the bundle integration without running a bundle: every ``_target_`` of the shipped configs, the
test fixtures and the documented override blocks resolves, and ConfigParser builds the whole evaluator (metrics,
handlers, postprocessing) with the ``pred`` format the postprocessing needs."""

from __future__ import annotations

import importlib
import json
import re
import sys
import warnings

import pytest
from monai.bundle import ConfigParser
from monai.bundle.config_item import ComponentLocator

from monai_unc.engines import UncertaintyEvaluator
from tests._paths import ROOT

BUNDLES = ("brain_tissue_uncertainty", "toy_uncertainty")
FIXTURES = {"spleen": ROOT / "tests" / "data" / "spleen_like_bundle" / "configs" / "inference.json",
            "brats": ROOT / "tests" / "data" / "brats_like_bundle" / "configs" / "inference.json"}


def _targets(node) -> list[str]:
    if isinstance(node, dict):
        found = [v for k, v in node.items() if (k == "_target_" or k.endswith("#_target_")) and isinstance(v, str)]
        return found + [t for v in node.values() for t in _targets(v)]
    if isinstance(node, list):
        return [t for v in node for t in _targets(v)]
    return []


def _doc_blocks() -> list[dict]:
    text = (ROOT / "docs" / "add_uncertainty_to_bundle.md").read_text()
    return [json.loads(b) for b in re.findall(r"```json\n(.*?)```", text, re.S)]


#: ``ComponentLocator`` objects by the ``monai*`` modules loaded when they were made: a new locator scans every such
#: module (~20 ms of CPU; one per name was 159 locators, 3.7 s), and its table depends on nothing else, so one locator
#: per set of loaded modules (5 here: the walk imports some) finds exactly what a new one would
_LOCATORS: dict[frozenset[str], ComponentLocator] = {}


def _locator() -> ComponentLocator:
    loaded = frozenset(m for m in sys.modules if m.startswith(ComponentLocator.MOD_START))
    if loaded not in _LOCATORS:
        _LOCATORS[loaded] = ComponentLocator()
    return _LOCATORS[loaded]


def _resolves(name: str) -> bool:
    if name.startswith(("$", "@", "%")):
        return True  # an expression or a reference, not a class name
    if "." not in name:
        return _locator().get_component_module_name(name) is not None
    module, _, attr = name.rpartition(".")
    try:
        return hasattr(importlib.import_module(module), attr)
    except ImportError:
        return False


def test_every_target_resolves():
    configs = [p for b in BUNDLES for p in (ROOT / "bundles" / b / "configs").glob("*.json") if "schema" not in p.name]
    sources = {str(p.relative_to(ROOT)): json.loads(p.read_text()) for p in [*configs, *FIXTURES.values()]}
    sources.update({f"docs/add_uncertainty_to_bundle.md block {i}": b for i, b in enumerate(_doc_blocks())})
    missing = [(src, t) for src, cfg in sources.items() for t in _targets(cfg) if not _resolves(t)]
    assert not missing, missing
    assert sum(len(_targets(c)) for c in sources.values()) > 50  # the walk found the configs' components


@pytest.mark.parametrize("bundle", BUNDLES)
@pytest.mark.parametrize("config", ["inference.json", "evaluate.json"])
def test_shipped_evaluator_builds_with_its_handlers(bundle, config, tmp_path):
    parser = ConfigParser()
    parser.read_config(str(ROOT / "bundles" / bundle / "configs" / config))
    parser.update({"bundle_root": str(ROOT / "bundles" / bundle), "datalist": [], "output_dir": str(tmp_path)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        evaluator = parser.get_parsed_content("evaluator")
    assert isinstance(evaluator, UncertaintyEvaluator)
    assert evaluator.pred_format == "probabilities"  # no activation on pred in the shipped postprocessing
    assert not any(tmp_path.iterdir())  # building writes nothing


@pytest.mark.parametrize(("fixture", "block", "pred_format"),
                         [("spleen", 0, "log_probabilities"), ("brats", 3, "binary_logit")])
def test_documented_override_builds_the_evaluator(fixture, block, pred_format, tmp_path):
    """The override merged as ``monai.bundle run`` merges it: the Model Zoo softmax / sigmoid stays and ``pred`` is
    stored so that it yields the mean probabilities; the inverted and saved keys include the maps."""
    override = _doc_blocks()[block]
    assert override["evaluator#_target_"] == "monai_unc.engines.UncertaintyEvaluator"
    path = tmp_path / "uncertainty.json"
    path.write_text(json.dumps(override))
    parser = ConfigParser()
    parser.read_config([str(FIXTURES[fixture]), str(path)])  # merged in order, "+" appends, as `run` does
    parser.update({"bundle_root": str(tmp_path), "output_dir": str(tmp_path / "out")})
    for key in ("datalist", "test_datalist"):
        if key in parser.config:
            parser[key] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        evaluator = parser.get_parsed_content("evaluator")
    assert isinstance(evaluator, UncertaintyEvaluator)
    assert evaluator.pred_format == pred_format
    invert = parser.get_parsed_content("postprocessing").transforms[1]
    assert set(invert.keys) >= {"pred", "predictive_entropy", "mutual_information"}


def test_fewer_maps_need_fewer_inverted_keys(tmp_path):
    """The "more or fewer outputs" variant on top of the override: with ``inferer#keys`` restricted, the ``Invertd`` of
    the override asks for a map the inferer no longer returns (the doc says to drop it). Checked on the transforms the
    config builds, with the inferer's outputs."""
    import torch
    from monai.data import MetaTensor

    override = dict(_doc_blocks()[0], **{"inferer#keys": ["pred", "mutual_information"]})
    path = tmp_path / "uncertainty.json"
    path.write_text(json.dumps(override))
    parser = ConfigParser()
    parser.read_config([str(FIXTURES["spleen"]), str(path)])
    inferer = parser.get_parsed_content("inferer")
    net = torch.nn.Sequential(torch.nn.Conv3d(1, 2, 1), torch.nn.Dropout(0.1))
    out = inferer(torch.rand(1, 1, 8, 8, 8), net)
    assert set(map(str, out)) == {"pred", "mutual_information"}
    invert = parser.get_parsed_content("postprocessing").transforms[1]
    item = {k: MetaTensor(v[0]) for k, v in out.items()}
    with pytest.raises(KeyError, match="predictive_entropy"):
        list(invert.key_iterator(item))
    text = (ROOT / "docs" / "add_uncertainty_to_bundle.md").read_text()
    assert "name only those\nmaps in the `Invertd` keys" in text
