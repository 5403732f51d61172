"""Hostile review 55 of the conformal masks: arguments that were read as other numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from monai_unc.metrics.conformal import conformal_grid, crc_lambda, high_probability_lambda, last_index

LOSSES = np.tile([1.0, 0.5, 0.0], (10, 1))


@pytest.mark.parametrize("size", [2.5, True, np.float64(80.0), "80"])
def test_last_index_refuses_a_size_that_is_no_integer(size):
    # 2.5 gave the index 3.5, True the index 2
    with pytest.raises(ValueError, match="size"):
        last_index("margin", size)


def test_last_index_takes_a_numpy_integer():
    assert last_index("margin", np.int64(80)) == 81
    assert last_index("threshold", np.int32(4096)) == 4096


@pytest.mark.parametrize("grid", [(True, 0.5), (2.0, True), ("20", "0.25"), "20,0.25", (np.bool_(True), 0.5)])
def test_margin_grid_refuses_bools_and_text(grid):
    # (True, 0.5) was a 1 mm grid; ("20", "0.25") was parsed
    with pytest.raises(ValueError, match="grid"):
        conformal_grid("margin", grid)


def test_margin_grid_takes_numbers_and_numpy_scalars():
    assert conformal_grid("margin", (np.float32(2.0), np.int64(1))) == (1.0, 2)
    assert conformal_grid("margin", [20, 0.25]) == (0.25, 80)


@pytest.mark.parametrize("fit", [lambda lam: crc_lambda(LOSSES, 0.1, lambdas=lam),
                                 lambda lam: high_probability_lambda(LOSSES, 0.2, 0.1, lambdas=lam)])
def test_lambdas_must_be_finite_real_numbers(fit):
    assert fit([0.0, 0.5, 1.0]) == 1.0
    assert fit(torch.tensor([0.0, 0.5, 1.0])) == 1.0
    with pytest.raises(TypeError, match="lambdas"):
        fit(["0", "0.5", "1"])  # was parsed: 1.0
    with pytest.raises(TypeError, match="lambdas"):
        fit([False, True, True])
    with pytest.raises(ValueError, match="lambdas"):
        fit([0.0, 0.5, math.inf])  # lambda_hat was inf


def test_losses_refuse_complex_and_text():
    with pytest.raises(TypeError, match="losses"):
        crc_lambda(LOSSES + 0.5j, 0.1)  # the imaginary part was dropped with a ComplexWarning
    with pytest.raises(TypeError, match="losses"):
        crc_lambda(LOSSES.astype(str), 0.1)
    assert crc_lambda(LOSSES.astype(bool), 0.1) == 2.0  # 0/1 losses as booleans stay accepted


def _stratified_rule_dict(tol=None):
    import json
    import warnings

    from monai_unc.metrics.conformal import conformal_case_state, fit_conformal_rule

    s = [conformal_case_state(np.array([[0.2, 0.9]]), np.array([[0, 1]]), activation="sigmoid", grid=4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rule = fit_conformal_rule(s * 20, alpha=0.1, tol=tol, scores=[0.2] * 10 + [2.0] * 10, edges=[1.0])
    return rule, json.loads(json.dumps(rule.to_dict()))


@pytest.mark.parametrize("edges", [[True], [np.bool_(True)]])
def test_rule_from_dict_refuses_a_bool_edge(edges):
    # [True] was kept as the edge 1.0 of the strata (and written back as true)
    from monai_unc.metrics.conformal import ConformalRule

    rule, d = _stratified_rule_dict()
    assert ConformalRule.from_dict(d) == rule
    with pytest.raises(ValueError, match="edges"):
        ConformalRule.from_dict({**d, "edges": edges})


@pytest.mark.parametrize("tol", [None, 0.2])
def test_rule_from_dict_refuses_guarantee_words_that_are_not_the_rule_s(tol):
    # an edited "E[FNR] <= 0.001" was read beside a rule of level 0.1 (the file reader checked it, from_dict did not)
    from monai_unc.metrics.conformal import ConformalRule, task_guarantee

    _, d = _stratified_rule_dict(tol)
    d["tasks"][1]["guarantee"] = "E[FNR] <= 0.001 for every case"
    with pytest.raises(ValueError, match=r"tasks\[1\]\.guarantee"):
        ConformalRule.from_dict(d)
    _, d = _stratified_rule_dict(tol)
    d["tasks"][1]["guarantee"] = d["tasks"][0]["guarantee"].replace("within stratum 0", "within stratum 1").replace(
        "the 10 calibration", "the 11 calibration")
    with pytest.raises(ValueError, match="guarantee"):
        ConformalRule.from_dict(d)
    if tol is not None:  # the words of the previous release (level as 1 - alpha with %g) stay readable
        _, d = _stratified_rule_dict(tol)
        d["tasks"][1]["guarantee"] = task_guarantee("outer", 0.1, tol, 10, 1, legacy=True)
        assert ConformalRule.from_dict(d).tasks[1].guarantee == d["tasks"][1]["guarantee"]


@pytest.mark.parametrize(("step", "size"), [(True, 4), (0.5, 4.7), (0.5, True), ("0.5", 4), (0.5, "4")])
def test_case_state_refuses_a_step_or_size_that_is_no_number(step, size):
    # True was a 1 mm step, 4.7 the grid of 4 (int()), "0.5" was parsed
    from monai_unc.metrics.conformal import ConformalCaseState

    counts = np.zeros((1, 6), np.int64)
    with pytest.raises(ValueError, match="step|size"):
        ConformalCaseState("sigmoid", "margin", "outer", step, size, ["0"], counts, counts)


def test_saved_case_state_refuses_a_fractional_size_or_a_text_step():
    from monai_unc.metrics.conformal import ConformalCaseState, conformal_case_state

    state = conformal_case_state(np.array([[0.2, 0.8]]), np.array([[0, 1]]), activation="sigmoid", family="margin",
                                 grid=(2.0, 0.5))
    assert ConformalCaseState.from_arrays(state.to_arrays()) == state
    assert ConformalCaseState("sigmoid", "margin", "outer", np.float32(0.5), np.int64(4), ["0"],
                              state.true_counts, state.false_counts).size == 4
    with pytest.raises(ValueError, match="size"):
        ConformalCaseState.from_arrays({**state.to_arrays(), "size": np.array(4.7)})  # read as the grid of 4
    with pytest.raises(ValueError, match="step"):
        ConformalCaseState.from_arrays({**state.to_arrays(), "step": np.array("0.5")})
