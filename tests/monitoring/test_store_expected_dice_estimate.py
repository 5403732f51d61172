"""The expected Dice the store keeps is of one quantity per rule, and the store says which.

A rule of classes certified before ``calibration.expected_dice_estimate`` holds merged-foreground estimates, and triage
computes those for the cases it decides (the rule's calibration cases' quantity); a rule certified since holds the
mean over the classes. The store keeps every case under its rule, reads the rule's field as untrusted input and says
in :meth:`MonitorStore.rules` what each rule's expected Dice is, so that the values of two rules are not compared as
one quantity; the streams of ``monitor status`` are per rule.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from monai_unc.io.provenance import rule_digest
from monai_unc.keys import LEGACY_REGION_ESTIMATE
from monai_unc.monitoring import MonitorStore, monitor_status, read_triage_run
from monai_unc.monitoring.store import check_rule
from monai_unc.workflows.monitor import record_triage

from ._stream import make_rule, write_triage


def _with_estimate(rule: dict, estimate) -> dict:
    rule = json.loads(json.dumps(rule))
    rule.pop("digest")
    rule["calibration"]["expected_dice_estimate"] = estimate
    rule["digest"] = rule_digest(rule)
    return rule


def _triage(folder, rule, estimates):
    cases = [{"case": c, "score": 0.1 + 0.01 * i} for i, c in enumerate(estimates)]
    write_triage(folder, rule, cases)
    doc = json.loads((folder / "triage.json").read_text())
    for c in doc["cases"]:
        c["expected_dice"] = estimates[c["case"]]
    (folder / "triage.json").write_text(json.dumps(doc))
    return folder


def test_two_definitions_stay_apart(store_url, tmp_path):
    old = make_rule([0.1, 0.2, 0.3], tag="certified before the field")
    new = _with_estimate(make_rule([0.1, 0.2, 0.3], tag="certified since"), "class_mean")
    # the same scans triaged with each rule: merged foreground 0.96, mean over the classes 0.63
    record_triage(store_url, _triage(tmp_path / "old", old, {"a": 0.96, "b": 0.95}), site="X", command=["test"])
    record_triage(store_url, _triage(tmp_path / "new", new, {"a": 0.63, "b": 0.62}), site="X", command=["test"])
    with MonitorStore(store_url, read_only=True) as store:
        rules, cases = store.rules(), store.cases()
        assert rules[old["digest"]]["expected_dice_estimate"] == "merged_foreground"
        assert rules[new["digest"]]["expected_dice_estimate"] == "class_mean"
        by_rule = {}
        for c in cases:
            by_rule.setdefault(rules[c["rule_digest"]]["expected_dice_estimate"], []).append(c["expected_dice"])
        assert sorted(by_rule["merged_foreground"]) == [0.95, 0.96] and sorted(by_rule["class_mean"]) == [0.62, 0.63]
        groups = monitor_status(cases, rules)
        assert sorted(g.rule_digest for g in groups) == sorted([old["digest"], new["digest"]])  # one stream each
        assert store.verify().ok


def test_a_region_rule_without_the_field_is_the_legacy_mean_over_its_regions(tmp_path):
    """A region rule certified before ``format_version`` 5 scored a region its segmentation does not hold 0: the
    store names that estimate (never recorded in a rule), not ``region_mean``, whatever an older rule says; a rule
    of version 5 recording ``region_mean`` holds the quantity of ``dice``."""
    rule = make_rule([0.1, 0.2])
    rule.pop("digest")
    rule["regions"] = {"WT": [1, 2, 3], "TC": [1, 3]}
    rule["digest"] = rule_digest(rule)
    stated = _with_estimate(dict(rule, format_version=4), "region_mean")  # written by no release: still the old one
    current = _with_estimate(dict(rule, format_version=5), "region_mean")
    with MonitorStore(tmp_path / "m.db") as store:
        record_triage(str(tmp_path / "m.db"), _triage(tmp_path / "t", rule, {"a": 0.9}), site="X", command=["t"])
        # a triage.json whose rule has a format_version is read as a full rule (read_triage_run: its decisions are
        # derived again), which these field-only rules are not: the store is given them directly
        run = read_triage_run(_triage(tmp_path / "r", rule, {"a": 0.9}), site="X")
        for name, r in (("s", stated), ("c", current)):
            store.record_run(r, [dataclasses.replace(c, rule_digest=r["digest"]) for c in run.cases],
                             source_digest=hashlib.sha256(name.encode()).hexdigest(), folder=name,
                             triaged_at=run.triaged_at, model_digest=None)
        rules = store.rules()
        assert rules[rule["digest"]]["expected_dice_estimate"] == LEGACY_REGION_ESTIMATE == "region_mean_soft"
        assert rules[stated["digest"]]["expected_dice_estimate"] == LEGACY_REGION_ESTIMATE
        assert rules[current["digest"]]["expected_dice_estimate"] == "region_mean"
    with pytest.raises(ValueError, match="expected_dice_estimate' must be one of"):  # never written in a rule
        check_rule(_with_estimate(current, LEGACY_REGION_ESTIMATE), "t.json")


@pytest.mark.parametrize("value", ["median", None, ["class_mean"], 5])
def test_the_field_is_untrusted_input(tmp_path, value):
    rule = _with_estimate(make_rule([0.1, 0.2]), value)
    with pytest.raises(ValueError, match="field 'rule.calibration.expected_dice_estimate' must be one of"):
        check_rule(rule, "t.json")
    folder = _triage(tmp_path / "t", rule, {"a": 0.9})
    with pytest.raises(ValueError, match="expected_dice_estimate"):
        read_triage_run(folder, site="X")
