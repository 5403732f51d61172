"""Hostile checks of the conformal masks: the quantile rank, the refusals, and the rule file as untrusted input.

The references are independent: exact enumeration / brute-force numpy of the ``ceil((n + 1)(1 - alpha))``-th order
statistic, and ``scipy.stats.binom`` for the coverage of a fixed rank.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from monai_unc.evaluation.conformal import ConformalRuleFile, ConformalStrata
from monai_unc.io.provenance import rule_digest
from monai_unc.metrics.conformal import conformal_case_state, fit_conformal_rule

SOURCE = "conformal rule R.json"


# --------------------------------------------------------------------------------------------------------------
# the strata block of conformal_rule.json is untrusted input
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stratified() -> dict:
    """A genuine stratified rule file (two strata of 20 cases), as parsed JSON."""
    rng = np.random.default_rng(0)
    states = []
    for _ in range(40):
        truth = rng.random((5, 5, 5)) < 0.4
        p1 = np.clip(truth * 0.5 + rng.random((5, 5, 5)) * 0.5, 0, 1)
        states.append(conformal_case_state(np.stack([1 - p1, p1]), truth.astype(int), activation="softmax", grid=64))
    scores = np.r_[np.full(20, 0.1), np.full(20, 0.9)]
    rule = fit_conformal_rule(states, 0.3, scores=scores, edges=[0.5])
    strata = ConformalStrata("predictive_entropy_mean", "predictive_entropy", "mean", None, (0.5,), "fixed", (20, 20),
                             "probabilities", 32)
    f = ConformalRuleFile({"outer": rule}, {"outer": 0.3}, None, {"activation": "softmax"},
                          [f"c{i:02d}" for i in range(40)], strata=strata)
    return json.loads(json.dumps(f.to_json()))


def _both_edges(value):
    """Edit the strata edges and the rule's copy of them alike (so that only the edges' own check can refuse)."""
    return lambda d: (d["strata"].update(edges=value), d["rules"]["outer"].update(edges=value))


STRATA_EDITS = {
    "edge as the string inf": (_both_edges(["inf"]), "strata.edges"),
    "edge as the string nan": (_both_edges(["nan"]), "strata.edges"),
    "edges decreasing": (lambda d: (_both_edges([0.7, 0.2])(d), d["strata"].update(counts=[20, 0, 20])),
                         "strata.edges"),
    "count not an integer": (lambda d: d["strata"].update(counts=[20.9, 20]), "strata.counts"),
    "count a bool": (lambda d: d["strata"].update(counts=[True, 20]), "strata.counts"),
    "patch size negative": (lambda d: d["strata"].update(patch_size=-3), "strata.patch_size"),
    "patch size fractional": (lambda d: d["strata"].update(patch_size=2.7), "strata.patch_size"),
    "score null": (lambda d: d["strata"].update(score=None), "strata.score"),
    "score of another measure": (lambda d: d["strata"].update(score="mutual_information_mean"), "strata.score"),
    "aggregation unknown": (lambda d: d["strata"].update(aggregation="max"), "strata.aggregation"),
    "region a number": (lambda d: d["strata"].update(region=3), "strata.region"),
    "strata a list": (lambda d: d.update(strata=[0.5]), "'strata'"),
    "field missing": (lambda d: d["strata"].pop("patch_size"), "'strata' lacks"),
}


def test_genuine_stratified_rule_loads(stratified):
    f = ConformalRuleFile.from_json(copy.deepcopy(stratified), SOURCE)
    assert f.strata is not None and f.strata.edges == (0.5,) and f.strata.counts == (20, 20)


@pytest.mark.parametrize("name", list(STRATA_EDITS))
def test_edited_strata_field_is_refused_naming_it(stratified, name):
    edit, field = STRATA_EDITS[name]
    d = copy.deepcopy(stratified)
    edit(d)
    d["digest"] = rule_digest(d)  # an unkeyed digest: whoever edits the file recomputes it
    with pytest.raises(ValueError) as e:
        ConformalRuleFile.from_json(d, SOURCE)
    msg = str(e.value)
    assert msg.startswith(SOURCE) and field in msg and "\n" not in msg, msg


@pytest.mark.parametrize("kwargs,field", [({"edges": (0.5, 0.2), "counts": (1, 1, 1)}, "edges"),
                                          ({"edges": (float("inf"),)}, "edges"),
                                          ({"counts": (-1, 21)}, "counts"),
                                          ({"patch_size": 0}, "patch_size")])
def test_strata_constructor_refuses_out_of_range_fields(kwargs, field):
    args = {"score": "predictive_entropy_mean", "measure": "predictive_entropy", "aggregation": "mean",
            "region": None, "edges": (0.5,), "method": "fixed", "counts": (20, 20), "map_source": "probabilities",
            "patch_size": 32, **kwargs}
    with pytest.raises(ValueError, match=field):
        ConformalStrata(**args)
