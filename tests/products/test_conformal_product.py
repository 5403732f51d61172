"""The product of the masks with a guarantee (:mod:`monai_unc.products.conformal`): its options and their refusals,
the specs, the deprecated keywords of ``EvaluationConfig``, the per-case state and the command line's options.

The numbers of the fitted rules are tested against brute force in tests/metrics/test_conformal.py and end to end in
tests/evaluation/test_conformal_cli.py."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from monai_unc.evaluation import EvaluationConfig
from monai_unc.evaluation.conformal import CONFORMAL_LOSSES, CONFORMAL_RULE_FILE, ConformalState
from monai_unc.metrics.conformal import CONFORMAL_FAMILIES, conformal_case_state, min_calibration_cases
from monai_unc.product import product_type
from monai_unc.products.conformal import FAMILIES, LOSSES, RULE_FILE, ConformalMasks, min_cases, parse_specs
from monai_unc.state import pack_states, unpack_states


def test_the_light_constants_agree_with_the_computations():
    assert FAMILIES == tuple(CONFORMAL_FAMILIES) and LOSSES == CONFORMAL_LOSSES and RULE_FILE == CONFORMAL_RULE_FILE
    assert product_type("conformal") is ConformalMasks and ConformalMasks.artifact_file == RULE_FILE


@pytest.mark.parametrize("specs, expected", [
    (["outer:fnr=0.1"], {"outer": 0.1}),
    ("inner:fp=0.05", {"inner": 0.05}),
    (["inner:fp=0.05", " outer : fnr = 0.2 "], {"outer": 0.2, "inner": 0.05}),
    ({"inner": "0.3", "outer": 0.1}, {"outer": 0.1, "inner": 0.3}),
    (("outer:fnr=1e-2",), {"outer": 0.01}),
])
def test_parse_specs(specs, expected):
    got = parse_specs(specs)
    assert got == expected and list(got) == [k for k in LOSSES if k in expected]


@pytest.mark.parametrize("specs, match", [
    (["outer:fp=0.1"], "is not a spec"),
    (["inner:fnr=0.1"], "is not a spec"),
    (["middle:fnr=0.1"], "is not a spec"),
    (["outer=0.1"], "is not a spec"),
    (["outer:fnr=0.1", "outer:fnr=0.2"], "given twice"),
    (["outer:fnr=abc"], "must be a number"),
    (["outer:fnr=0"], r"must be in \(0, 1\)"),
    (["outer:fnr=1"], r"must be in \(0, 1\)"),
    (["outer:fnr=nan"], r"must be in \(0, 1\)"),
    ({"side": 0.1}, "must be 'outer' or 'inner'"),
    ({"outer": None}, "must be a number"),
    ([], "at least one mask"),
    ({}, "at least one mask"),
])
def test_parse_specs_refusals(specs, match):
    with pytest.raises(ValueError, match="conformal"):
        parse_specs(specs)
    with pytest.raises(ValueError, match=match):
        parse_specs(specs)


@pytest.mark.parametrize("kwargs, field", [
    ({"targets": ["outer:fp=0.1"]}, "conformal"),
    ({"targets": {"outer": 1.0}}, "conformal"),
    ({"targets": []}, "conformal"),
    ({"family": "quantile"}, "conformal_family"),
    ({"delta": 1.0}, "conformal_delta"),
    ({"delta": 0.0}, "conformal_delta"),
    ({"delta": "0.1"}, "conformal_delta"),
    ({"stratify_by": "predictive_entropy_mean"}, "conformal_stratify_by"),
    ({"strata": 1}, "conformal_strata"),
    ({"strata": True}, "conformal_strata"),
    ({"strata": 2.5}, "conformal_strata"),
    ({"strata": 3, "strata_edges": [0.1]}, "conformal_strata"),
    ({"strata_edges": [0.2, 0.1]}, "conformal_strata_edges"),
    ({"strata_edges": [math.nan]}, "conformal_strata_edges"),
    ({"strata_edges": ["x"]}, "conformal_strata_edges"),
    ({"strata_edges": []}, "conformal_strata_edges"),
])
def test_the_options_are_refused_by_name(kwargs, field):
    kwargs = {"targets": ["outer:fnr=0.1"], **kwargs}
    with pytest.raises(ValueError, match=field):
        ConformalMasks(**kwargs)


def test_options_and_case_options():
    p = ConformalMasks(["inner:fp=0.05", "outer:fnr=0.1"], strata_edges=(np.float32(0.5), 1),
                       stratify_by="variance_fg_mean_WT")
    assert p.targets == {"outer": 0.1, "inner": 0.05} and p.strata_edges == [0.5, 1.0] and p.num_strata == 3
    assert p.options() == {"targets": {"outer": 0.1, "inner": 0.05}, "family": "threshold", "delta": None,
                           "strata": None, "strata_edges": [0.5, 1.0], "stratify_by": "variance_fg_mean_WT"}
    # the per-case states depend on the sides and the family only: a new target refits without new case states
    assert p.case_options() == {"sides": ["outer", "inner"], "family": "threshold"}
    assert ConformalMasks({"outer": 0.2}).case_options() == ConformalMasks({"outer": 0.1}).case_options()
    assert ConformalMasks({"outer": 0.1}, strata=np.int64(4)).num_strata == 4


def test_min_cases_per_stratum_and_the_check():
    p = ConformalMasks({"outer": 0.1, "inner": 0.2}, strata=3)
    assert p.min_cases_per_stratum() == max(min_calibration_cases(0.1), min_calibration_cases(0.2)) == min_cases(
        p.targets, None)
    assert ConformalMasks({"outer": 0.1}, delta=0.1).min_cases_per_stratum() == min_calibration_cases(
        0.1, high_probability=True)
    ids = [f"c{i:02d}" for i in range(3 * p.min_cases_per_stratum())]
    p.check(ids, EvaluationConfig())  # enough
    with pytest.raises(ValueError, match=r"too few .* in 3 strata: each stratum needs at least"):
        p.check(ids[:-1], EvaluationConfig())
    with pytest.raises(ValueError, match="too few"):  # only the calibration cases count
        p.check(ids, EvaluationConfig(calibration_cases=ids[:5]))
    with pytest.raises(ValueError, match="conformal_stratify_by"):
        ConformalMasks({"outer": 0.1}, strata=2, stratify_by="dice").check(ids, EvaluationConfig())
    with pytest.raises(ValueError, match="conformal_stratify_by"):  # a region score without regions
        ConformalMasks({"outer": 0.1}, strata=2, stratify_by="predictive_entropy_fg_mean_WT").check(
            ids, EvaluationConfig())
    ConformalMasks({"outer": 0.1}, strata=2, stratify_by="predictive_entropy_fg_mean_WT").check(
        ids, EvaluationConfig(regions="brats"))


def _args(**kw):
    parser = argparse.ArgumentParser()
    ConformalMasks.add_arguments(parser.add_argument_group("g"))
    argv = []
    for k, v in kw.items():
        for one in (v if isinstance(v, list) else [v]):
            argv += [f"--{k.replace('_', '-')}", str(one)]
    return parser.parse_args(argv)


def test_from_arguments():
    assert ConformalMasks.from_arguments(_args()) is None
    p = ConformalMasks.from_arguments(_args(conformal=["outer:fnr=0.1", "inner:fp=0.2"], conformal_family="margin",
                                            conformal_strata_edges="0.2,0.4"))
    assert p.targets == {"outer": 0.1, "inner": 0.2} and p.family == "margin" and p.strata_edges == [0.2, 0.4]
    with pytest.raises(ValueError, match="need conformal masks"):
        ConformalMasks.from_arguments(_args(conformal_strata=3))
    # found by hostile review: ignored before, so the run wrote no rule at the level the user asked for
    for kw in ({"conformal_delta": 0.05}, {"conformal_family": "margin"}):
        with pytest.raises(ValueError, match="--conformal-delta / --conformal-family need conformal masks"):
            ConformalMasks.from_arguments(_args(**kw))
    with pytest.raises(ValueError, match="--conformal-stratify-by needs --conformal-strata or"):
        ConformalMasks.from_arguments(_args(conformal_stratify_by="variance_mean"))
    with pytest.raises(ValueError, match="--conformal-strata-edges must be comma-separated numbers"):
        ConformalMasks.from_arguments(_args(conformal="outer:fnr=0.1", conformal_strata_edges="a,b"))
    with pytest.raises(SystemExit):  # argparse's own choice check
        _args(conformal="outer:fnr=0.1", conformal_family="quantile")


def test_the_state_round_trips_and_merges():
    rng = np.random.default_rng(0)
    probs = rng.dirichlet([1, 1, 1], size=(6, 5)).transpose(2, 0, 1)
    label = rng.integers(0, 3, size=(6, 5))
    sides = {s: conformal_case_state(probs, label, side=s) for s in ("outer", "inner")}
    state = ConformalState(sides, ["variance", "predictive_entropy"])
    assert state.file_maps == ("predictive_entropy", "variance")
    back = unpack_states(pack_states({"conformal": state}))["conformal"]
    assert back == state and isinstance(back, ConformalState)
    other = ConformalState({s: conformal_case_state(probs, label, side=s) for s in sides}, ["variance"])
    merged = ConformalState.from_state_dict(state.state_dict()).merge(other)
    assert merged.file_maps == ("variance",)  # a file map only if it is one in both
    for s in sides:
        assert np.array_equal(merged.sides[s].true_counts, 2 * sides[s].true_counts)
