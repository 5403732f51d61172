"""Hostile checks of the conformal masks: the quantile rank, the refusals, and the rule file as untrusted input.

The references are independent: exact enumeration / brute-force numpy of the ``ceil((n + 1)(1 - alpha))``-th order
statistic, and ``scipy.stats.binom`` for the coverage of a fixed rank.
"""

from __future__ import annotations

import copy
import json
import math
import re
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from monai_unc.evaluation.conformal import ConformalRuleFile, ConformalStrata
from monai_unc.io.provenance import rule_digest
from monai_unc.metrics.conformal import (
    ConformalRule,
    conformal_case_state,
    crc_lambda,
    fit_conformal_rule,
    high_probability_lambda,
    min_calibration_cases,
)
from tests.evaluation.test_conformal_rule_fields import SOURCE, assert_edit_refused

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
    "field unknown": (lambda d: d["strata"].update(exact=True), "strata.exact"),  # found by hostile review: ignored
}


def test_genuine_stratified_rule_loads(stratified):
    f = ConformalRuleFile.from_json(copy.deepcopy(stratified), SOURCE)
    assert f.strata is not None and f.strata.edges == (0.5,) and f.strata.counts == (20, 20)


@pytest.mark.parametrize("name", list(STRATA_EDITS))
def test_edited_strata_field_is_refused_naming_it(stratified, name):
    assert_edit_refused(stratified, *STRATA_EDITS[name])


@pytest.mark.parametrize("targets", [{"outer": "0.3"}, {"outer": None}, [0.3], {"outer": True}, {"outer": 1.0}])
def test_edited_targets_are_refused_naming_the_field(stratified, targets):
    d = copy.deepcopy(stratified)
    d["targets"] = targets
    d["digest"] = rule_digest(d)
    with pytest.raises(ValueError) as e:
        ConformalRuleFile.from_json(d, SOURCE)
    msg = str(e.value)
    assert msg.startswith(SOURCE) and "'targets'" in msg and "\n" not in msg, msg


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


# --------------------------------------------------------------------------------------------------------------
# the quantile rank and the guarantees at the smallest calibration sets, where an off-by-one shows
# --------------------------------------------------------------------------------------------------------------


def _step_losses(s: np.ndarray, width: int) -> np.ndarray:
    """Losses ``L_i(j) = 1`` for ``j < s_i``, else 0: the case-wise score of the high-probability rule is ``s_i``."""
    return (np.arange(width)[None, :] < s[:, None]).astype(np.float64)


@pytest.mark.parametrize("alpha", [0.5, 0.3, 0.25, 0.2, 0.1, 0.05, 1 / 3])
def test_high_probability_rank_against_exact_enumeration(alpha):
    """``lambda_hat`` is the ``ceil((n + 1)(1 - alpha))``-th smallest ``s_i`` (exact rational arithmetic), refused
    (never a finite mask) when that rank exceeds ``n``; the fewest cases is the first ``n`` with a finite rank."""
    a = Fraction(1, 3) if alpha == 1 / 3 else Fraction(str(alpha))
    for n in range(1, 60):
        s = np.random.default_rng(n).permutation(n) + 1  # distinct scores 1 .. n, shuffled
        k = math.ceil((n + 1) * (1 - a))
        losses = _step_losses(s, n + 2)
        if k > n:
            with pytest.raises(ValueError, match="too few"):
                high_probability_lambda(losses, tol=0.5, alpha=alpha)
            assert n < min_calibration_cases(alpha, high_probability=True)
        else:
            assert high_probability_lambda(losses, tol=0.5, alpha=alpha) == float(np.sort(s)[k - 1])
            assert n >= min_calibration_cases(alpha, high_probability=True)
    # ties: the k-th smallest of the multiset, however the ties fall
    s = np.array([3, 3, 3, 1, 1, 5, 5, 5, 5])  # n = 9, alpha = 0.1: k = 9, the largest
    assert high_probability_lambda(_step_losses(s, 7), tol=0.5, alpha=0.1) == 5.0
    assert high_probability_lambda(_step_losses(s, 7), tol=0.5, alpha=0.3) == 5.0  # k = 7: sorted[6] = 5
    assert high_probability_lambda(_step_losses(s, 7), tol=0.5, alpha=0.5) == 3.0  # k = 5: sorted[4] = 3


def test_high_probability_refuses_when_too_many_cases_never_reach_tol():
    s = np.array([1, 2, 3, 4, 5, 6, 7, 8, 99])  # the 9th case never gets below tol on a grid of 10 points
    with pytest.raises(ValueError, match="stay above tol"):
        high_probability_lambda(_step_losses(np.minimum(s, 10), 10), tol=0.5, alpha=0.1)


@pytest.mark.parametrize(("n", "alpha"), [(9, 0.1), (19, 0.1), (19, 0.05), (4, 0.2)])
def test_high_probability_coverage_at_the_smallest_n(n, alpha):
    """``P(L_new(lambda_hat) <= tol) >= 1 - alpha`` over fresh i.i.d. calibration sets and new cases, and no more
    than ``k / (n + 1)`` plus ties: at these ``n`` the rank is ``n`` or ``n - 1``, where an off-by-one moves the
    coverage by ``1 / (n + 1)``. One-sided binomial tests at level 1e-4 with a fixed seed (deterministic)."""
    rng = np.random.default_rng(2026)
    trials, width = 4000, 2000
    k = math.ceil((n + 1) * (1 - Fraction(str(alpha))))
    covered = 0
    for _ in range(trials):
        s = rng.integers(0, width, n + 1)  # i.i.d. case scores on a fine grid (ties rare)
        j = int(high_probability_lambda(_step_losses(s[:n], width), tol=0.5, alpha=alpha))
        covered += int(s[n] <= j)  # the new case's loss at lambda_hat is <= tol iff its score is <= lambda_hat
    assert stats.binom.cdf(covered, trials, 1 - alpha) > 1e-4, (covered, trials)  # not below 1 - alpha
    assert stats.binom.sf(covered - 1, trials, k / (n + 1) + 0.005) > 1e-4, (covered, trials)  # the rank is k


@pytest.mark.parametrize(("n", "alpha"), [(9, 0.1), (19, 0.1), (4, 0.3)])
def test_crc_expected_loss_at_the_smallest_n(n, alpha):
    """``E[L_new(lambda_hat)] <= alpha`` for non-increasing losses, at the fewest cases CRC allows; a z-test of the
    mean over fresh i.i.d. draws (fixed seed)."""
    rng = np.random.default_rng(7)
    trials, width = 4000, 400
    grid = np.arange(width) / (width - 1)
    got = np.empty(trials)
    for t in range(trials):
        c = rng.uniform(1.0, 6.0, n + 1)  # L_i(lambda) = max(0, 1 - c_i lambda): non-increasing, 0 at lambda = 1
        losses = np.maximum(0.0, 1.0 - c[:, None] * grid[None, :])
        j = int(crc_lambda(losses[:n], alpha))
        got[t] = losses[n, j]
    se = got.std(ddof=1) / math.sqrt(trials)
    assert got.mean() <= alpha + 3.72 * se, (got.mean(), se)  # one-sided, level 1e-4
    assert got.mean() >= alpha - 2 / (n + 1) - 3.72 * se  # and CRC is tight up to about 2 B / (n + 1)


# --------------------------------------------------------------------------------------------------------------
# ConformalRule.from_dict on its own (the Python API reads a rule's JSON with it)
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rule_dict() -> dict:
    rng = np.random.default_rng(3)
    states = []
    for _ in range(12):
        truth = rng.random((1, 40)) < 0.5
        p = np.clip(truth * 0.5 + rng.random((1, 40)) * 0.5, 0, 1)
        states.append(conformal_case_state(p, truth, activation="sigmoid", grid=16))
    return json.loads(json.dumps(fit_conformal_rule(states, alpha=0.2).to_dict()))


RULE_EDITS = {
    "index off the grid (empty outer masks)": (lambda d: d["tasks"][0].update(index=-1, lambda_hat=-0.0625),
                                               "tasks[0].index"),
    "index past the grid": (lambda d: d["tasks"][0].update(index=99, lambda_hat=99 / 16), "tasks[0].index"),
    "lambda_hat not its index's": (lambda d: d["tasks"][0].update(lambda_hat=0.9), "tasks[0].lambda_hat"),
    "side unknown (applied as inner)": (lambda d: d.update(side="outside"), "side"),
    "family unknown": (lambda d: d.update(family="distance"), "family"),
    "step off the threshold grid": (lambda d: d.update(step=0.5), "step"),
    "alpha out of range": (lambda d: d.update(alpha=1.5), "alpha"),
    "alpha NaN": (lambda d: d.update(alpha=float("nan")), "alpha"),
    "tol with expectation": (lambda d: d.update(tol=0.2), "tol"),
    "method unknown": (lambda d: d.update(method="bootstrap"), "method"),
    "task missing": (lambda d: d["tasks"].pop(), "tasks"),
    "task renamed": (lambda d: d["tasks"][0].update(name="7"), "tasks[0]"),
    "n zero": (lambda d: d["tasks"][0].update(n=0), "tasks[0].n"),
    "edges decreasing": (lambda d: d.update(edges=[0.5, 0.2]), "edges"),
    "names repeated": (lambda d: d.update(names=["0", "0"]), "names"),
    # found by hostile review: from_dict coerced the values (int(16.7), float("0.2"), tuple("01")) and left the
    # recorded calibration numbers unchecked, so an edited dict loaded as another rule or with a loss of NaN or 7
    "size not an integer (truncated)": (lambda d: d.update(size=16.7), "size"),
    "size a string": (lambda d: d.update(size="16"), "size"),
    "step a string": (lambda d: d.update(step="0.0625"), "step"),
    "alpha a string": (lambda d: d.update(alpha="0.2"), "alpha"),
    "names a string": (lambda d: d.update(names="0"), "names"),
    "edges strings": (lambda d: d.update(edges=["0.5"]), "edges"),
    "activation not a string": (lambda d: d.update(activation=1), "activation"),
    "stratum a float": (lambda d: d["tasks"][0].update(stratum=0.0), "tasks[0].stratum"),
    "calibration loss NaN": (lambda d: d["tasks"][0].update(calibration_loss=float("nan")),
                             "tasks[0].calibration_loss"),
    "calibration loss 7": (lambda d: d["tasks"][0].update(calibration_loss=7), "tasks[0].calibration_loss"),
    "calibration loss above the level": (lambda d: d["tasks"][0].update(calibration_loss=0.3),
                                         "tasks[0].calibration_loss"),
    "above tol with expectation": (lambda d: d["tasks"][0].update(calibration_above_tol=0.5),
                                   "tasks[0].calibration_above_tol"),
    "guarantee not a string": (lambda d: d["tasks"][0].update(guarantee=5), "tasks[0].guarantee"),
    "n too few for alpha": (lambda d: d["tasks"][0].update(n=3), "tasks[0].n"),
    "unknown field": (lambda d: d.update(extra=1), "extra"),
    "missing field": (lambda d: d.pop("tol"), "tol"),
    "unknown task field": (lambda d: d["tasks"][0].update(extra=1), "extra"),
}


def test_genuine_rule_dict_round_trips(rule_dict):
    rule = ConformalRule.from_dict(copy.deepcopy(rule_dict))
    assert rule.to_dict() == rule_dict


@pytest.mark.parametrize("name", list(RULE_EDITS))
def test_rule_from_dict_refuses_an_edited_field_naming_it(rule_dict, name):
    edit, field = RULE_EDITS[name]
    d = copy.deepcopy(rule_dict)
    edit(d)
    with pytest.raises(ValueError, match=re.escape(field)):
        ConformalRule.from_dict(d)


def test_high_probability_rule_dict_checks_its_calibration_numbers():
    """The share above ``tol`` is at most what the rank allows, and the mean loss at most ``above + (1 - above) tol``
    (the cases above ``tol`` lose at most 1, the others at most ``tol``). Found by hostile review: a mean loss of 1.0
    beside no case above ``tol`` loaded."""
    states = [conformal_case_state(np.array([[0.9, 0.7, 0.4, 0.2]]), np.array([[1, 1, 1, 0]]), activation="sigmoid",
                                   grid=8)] * 19
    d = json.loads(json.dumps(fit_conformal_rule(states, alpha=0.1, tol=0.2).to_dict()))
    assert ConformalRule.from_dict(copy.deepcopy(d)).tol == 0.2
    for edit, field in [({"calibration_loss": 1.0}, "calibration_loss"), ({"calibration_above_tol": 0.5},
                        "calibration_above_tol"), ({"calibration_above_tol": None}, "calibration_above_tol")]:
        e = copy.deepcopy(d)
        e["tasks"][0].update(edit)
        with pytest.raises(ValueError, match=re.escape(f"tasks[0].{field}")):
            ConformalRule.from_dict(e)


def test_entry_index_of_float16_values_equals_float64():
    """float16 values on the largest threshold grid (size 65536): numpy made the size float16 inf and every index
    -2^31; distances in float16 lost the margin grid the same way. Found by hostile testing (precision review)."""
    from monai_unc.metrics import entry_index

    p = np.array([0.0, 0.25, 0.5, 0.99951171875, 1.0])
    for side in ("outer", "inner"):
        assert entry_index(p.astype(np.float16), "threshold", side, 1 / 65536, 65536).tolist() == entry_index(
            p, "threshold", side, 1 / 65536, 65536).tolist()
    d = np.array([0.0, 0.5, 600.0, 60000.0, np.inf])
    assert entry_index(d.astype(np.float16), "margin", "outer", 0.5, 200000).tolist() == entry_index(
        d.astype(np.float16).astype(np.float64), "margin", "outer", 0.5, 200000).tolist()


@pytest.mark.parametrize("value", [0.0, 0.25, 0.5, 0.75, 1.0])
@pytest.mark.parametrize("side", ["outer", "inner"])
def test_constant_probability_maps_equal_brute_force(value, side):
    """A constant map (every voxel on one grid point; at 0.5 the sigmoid prediction ``p > 0.5`` is empty) gives the
    losses of the masks computed on the full volume, in both families (3D, anisotropic spacing), and NaN
    probabilities are refused naming ``probs``."""
    from tests.metrics.test_conformal import brute_margin_losses, brute_threshold_losses

    rng = np.random.default_rng(int(value * 4))
    p = np.full((1, 5, 6, 4), value)
    y = rng.random((1, 5, 6, 4)) < 0.4
    spacing = (0.7, 1.1, 2.0)
    state = conformal_case_state(p, y, activation="sigmoid", side=side, grid=16)
    np.testing.assert_array_equal(state.losses()[0], brute_threshold_losses(p[0], y[0], side, 16))
    state = conformal_case_state(p, y, activation="sigmoid", family="margin", side=side, grid=(3.0, 0.5),
                                 spacing=spacing)
    np.testing.assert_array_equal(state.losses()[0], brute_margin_losses(p[0] > 0.5, y[0], side, spacing, 0.5, 6))
    p[0, 0, 0, 0] = np.nan  # one NaN voxel is named as such (it read "got values in [nan, nan]")
    with pytest.raises(ValueError, match=r"probs must lie in \[0, 1\], got 1 NaN value\(s\) of 120"):
        conformal_case_state(p, y, activation="sigmoid", side=side, grid=16)


@pytest.mark.parametrize("tol", [None, 0.2])
def test_fit_at_the_edges_of_alpha_and_tol(tol):
    """alpha 0, 1, NaN, inf, a string or a bool is refused naming alpha; 1e-12 says in words how many cases it needs
    (about 1e12, decided by the fit's own arithmetic); tol 0, 1 and NaN are refused naming tol, a tiny tol fits."""
    rng = np.random.default_rng(0)
    states = []
    for _ in range(20):
        p = rng.random((4, 4))
        states.append(conformal_case_state(np.stack([1 - p, p]), (rng.random((4, 4)) < p).astype(int), grid=16))
    for bad in (0, 1, float("nan"), float("inf"), -0.1, "0.1", True):
        with pytest.raises(ValueError, match="alpha"):
            fit_conformal_rule(states, bad, tol=tol)
    with pytest.raises(ValueError, match=r"20 calibration case\(s\) are too few: alpha=1e-12 needs at least \d{12}"):
        fit_conformal_rule(states, 1e-12, tol=tol)
    assert min_calibration_cases(1e-12, high_probability=tol is not None) > 10**11
    if tol is not None:
        for bad in (0, 1, float("nan")):
            with pytest.raises(ValueError, match="tol"):
                fit_conformal_rule(states, 0.2, tol=bad)
        rule = fit_conformal_rule(states, 0.2, tol=1e-12)  # only a loss of 0 is within tol: the trivial end if need be
        assert rule.task_rule("1").index <= rule.size
