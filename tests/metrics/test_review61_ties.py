"""Review 61: ranking metrics of scores that cannot rank the cases (all tied, or all undefined).

A constant score gave its AURC, AUROC or average precision, the value of no ranking, without a word, and a cohort whose
every score is undefined (NaN) its failure detection and OoD AUROC as if the filled stand-ins ranked it. All tied: the
chance value (checked against scikit-learn and brute force) with a warning; all undefined: NaN with a warning.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from monai_unc.metrics import (
    area_under_referral_curve,
    au_arc,
    augrc,
    aurc,
    eaurc,
    error_auprc,
    error_auroc,
    failure_detection,
    ood_auroc,
    referral_curve,
    risk_coverage_curve,
)
from monai_unc.metrics.casewise import ood_auroc_by_shift
from monai_unc.metrics.discrimination import auroc

TIED = r"{}: all {} scores are tied, so the scores cannot rank the cases"
RISK = np.array([0.0, 1.0, 0.0, 1.0, 0.5])


def _brute_expected_aurc(u: np.ndarray, r: np.ndarray) -> float:
    """Mean over every order of the tied cases of the AURC with a point at every kept count (then (0, last))."""
    n = u.size
    areas = []
    for perm in itertools.permutations(range(n)):
        kept = sorted(range(n), key=lambda i: (u[i], perm[i]))  # most certain first
        sel = [r[kept[:k]].mean() for k in range(n, 0, -1)]
        cov = [k / n for k in range(n, 0, -1)] + [0.0]
        areas.append(-np.trapezoid(sel + [sel[-1]], cov))
    return float(np.mean(areas))


@pytest.mark.parametrize("value", [0.0, 0.3, 1e6])
def test_selective_metrics_of_a_constant_score_are_the_chance_value_with_a_warning(value):
    u = np.full(RISK.size, value)
    with pytest.warns(UserWarning, match=TIED.format("aurc", 5)) as caught:
        assert aurc(u, RISK) == pytest.approx(RISK.mean())  # one point at the mean risk
    assert caught[0].filename == __file__  # the caller's line
    with pytest.warns(UserWarning, match=TIED.format("augrc", 5)):
        assert augrc(u, RISK) == pytest.approx(RISK.mean() / 2)  # generalized risk from the mean down to 0
    with pytest.warns(UserWarning, match=TIED.format("risk_coverage_curve", 5)):
        assert risk_coverage_curve(u, RISK).coverage.tolist() == [1.0, 0.0]
    oracle = np.sort(RISK)
    optimum = -np.trapezoid([oracle[:k].mean() for k in range(5, 0, -1)] + [oracle[0]],
                            [k / 5 for k in range(5, 0, -1)] + [0.0])
    with pytest.warns(UserWarning, match=TIED.format("eaurc", 5)):
        assert eaurc(u, RISK) == pytest.approx(_brute_expected_aurc(u, RISK) - optimum)
    with pytest.warns(UserWarning, match=TIED.format("failure_detection", 5)) as caught:
        fd = failure_detection(u, 1.0 - RISK)
    assert len([w for w in caught if "tied" in str(w.message)]) == 1  # one warning, not one per area
    assert fd.aurc == pytest.approx(RISK.mean())
    dice = 1.0 - RISK
    with pytest.warns(UserWarning, match=TIED.format("referral_curve", 5)):
        assert np.allclose(referral_curve(u, dice).value, dice.mean())  # a random choice: the mean at every rate
    with pytest.warns(UserWarning, match=TIED.format("referral_curve", 5)):
        assert area_under_referral_curve(u, dice, normalize=True) == pytest.approx(dice.mean())


def test_discrimination_metrics_of_tied_scores_are_sklearn_chance_with_a_warning():
    e = np.array([0, 1, 0, 1, 1, 0, 0, 0], bool)
    u = np.full(e.size, 0.25)
    with pytest.warns(UserWarning, match=TIED.format("error_auroc", 8)):
        assert error_auroc(u, e, per_case=False) == roc_auc_score(e, u) == 0.5
    with pytest.warns(UserWarning, match=TIED.format("error_auprc", 8)):
        assert error_auprc(u, e, per_case=False) == pytest.approx(average_precision_score(e, u))  # the error rate
    with pytest.warns(UserWarning, match=TIED.format("au_arc", 8)) as caught:
        assert au_arc(u, e.astype(float), per_case=False) == pytest.approx(1 - e.mean())
    assert not any(str(w.message).startswith("aurc:") for w in caught)  # named as the caller's metric
    with pytest.warns(UserWarning, match=TIED.format("auroc", 5)):
        assert auroc([0.2, 0.2], [0.2, 0.2, 0.2]) == 0.5
    with pytest.warns(UserWarning, match=TIED.format("auroc", 3)):
        assert ood_auroc([0.7, 0.7], [0.7]) == 0.5
    # per case: the constant case warns, the other does not
    per = np.stack([np.full(8, 0.3), np.linspace(0, 1, 8)]).reshape(2, 1, 2, 4)
    err = np.stack([e, e]).reshape(2, 1, 2, 4)
    with pytest.warns(UserWarning, match=TIED.format("error_auroc", 8)) as caught:
        values = error_auroc(per, err, per_case=True)
    assert len([w for w in caught if "tied" in str(w.message)]) == 1
    assert values[0] == 0.5 and values[1] == pytest.approx(roc_auc_score(e, np.linspace(0, 1, 8)))


@pytest.mark.parametrize("seed", range(20))
def test_partly_tied_scores_give_sklearn_and_brute_force_values_without_a_warning(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 7))
    u = rng.integers(0, 3, n).astype(float)
    u[0], u[1] = 0.0, 2.0  # never all tied
    e = np.r_[0, 1, rng.integers(0, 2, n - 2)].astype(bool)
    r = e.astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert auroc(u[e], u[~e]) == pytest.approx(roc_auc_score(e, u))
        assert error_auprc(u, e, per_case=False) == pytest.approx(average_precision_score(e, u))
        oracle = np.sort(r)
        optimum = -np.trapezoid([oracle[:k].mean() for k in range(n, 0, -1)] + [oracle[0]],
                                [k / n for k in range(n, 0, -1)] + [0.0])
        assert eaurc(u, r) == pytest.approx(_brute_expected_aurc(u, r) - optimum)
        aurc(u, r), augrc(u, r), referral_curve(u, 1 - r), failure_detection(u, 1 - r)


def test_one_case_is_not_a_tie():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert aurc([0.3], [0.5]) == 0.5


def test_ood_auroc_of_undefined_scores_is_nan_with_a_warning():
    """Found by review 61: every score NaN was filled alike and gave the OoD AUROC 0.5 (and 0.5 per shift)."""
    with pytest.warns(UserWarning, match="every one of the 4 scores is undefined"):
        out = ood_auroc_by_shift([np.nan] * 4, ["none", "none", "blur", "noise"])
    assert np.isnan(out["auroc"]) and all(np.isnan(v) for v in out["per_shift"].values())
    assert sorted(out["per_shift"]) == ["blur", "noise"] and (out["n_iid"], out["n_ood"]) == (2, 2)
    # one score defined: the undefined rank most uncertain, as before
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ood_auroc_by_shift([0.1, np.nan, np.nan, np.nan], ["none", "none", "blur", "noise"])["auroc"] == 0.75
