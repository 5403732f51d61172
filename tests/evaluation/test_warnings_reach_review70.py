"""Library code hides no warning the user should see (review 70).

``certify_and_triage`` and ``resummarize`` called :func:`~monai_unc.evaluation.summarize` inside
``warnings.catch_warnings()`` with every ``UserWarning`` ignored: process-wide state that hid every warning of
``summarize`` that it does not list itself (and other threads' warnings), not only the "no threshold certifies"
line, which ``summarize`` lists in the summary (the rule records it) and never raises to its caller.

``summarize``, ``evaluate_case`` and ``triage_case`` listed the ``UserWarning`` s they recorded and dropped every other
category; they issue those again as raised (``_utils.reemit_warning``).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from monai_unc._utils import reemit_warning
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import CohortState, EvaluationConfig, evaluate_case
from monai_unc.evaluation import cohort as cohort_module
from monai_unc.evaluation.triage import ReferralRule
from monai_unc.evaluation.triage import runner as triage_runner
from monai_unc.io import match_cases
from monai_unc.workflows import triage as triage_workflow

_MARK = "a warning of summarize's own (review 70)"


def _state() -> CohortState:
    rows = [{"case": f"c{i}", "dice": d, "measure": "predictive_entropy", "predictive_entropy_fg_mean": s}
            for i, (d, s) in enumerate(zip([0.9, 0.4, 0.7, 0.8, 0.6, 0.95], [0.1, 0.5, 0.3, 0.2, 0.4, 0.05]))]
    return CohortState(num_classes=2, n_fine_bins=240, rows=rows)


def _warn_in_summarize(monkeypatch):
    """A ``UserWarning`` that summarize raises to its caller (a function it calls warns before its own blocks)."""
    checked = cohort_module.check_scored_cases

    def warning_check(cases):
        warnings.warn(_MARK, UserWarning, stacklevel=2)
        return checked(cases)

    monkeypatch.setattr(cohort_module, "check_scored_cases", warning_check)


class _Rule:
    def save(self, path):
        return Path(path)


def test_certify_and_triage_lets_summarize_warnings_through(monkeypatch, tmp_path):
    _warn_in_summarize(monkeypatch)
    seen = {}

    def certify(state, summary, cfg, predictions=None, layout="monai-unc"):
        seen["summary"] = summary
        return _Rule()

    # the files of the rule and the triage are other tests' business: the summary the rule is certified from is this
    monkeypatch.setattr(triage_workflow, "certify_referral_rule", certify)
    monkeypatch.setattr(triage_workflow, "run_triage", lambda *a, **k: "result")
    monkeypatch.setattr(triage_workflow, "build_triage_page", lambda *a, **k: tmp_path / "triage.html")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        triage_workflow.certify_and_triage(_state(), EvaluationConfig(num_classes=2), tmp_path / "p", tmp_path / "o",
                                           ["c0", "c1", "c2"], ["c3", "c4", "c5"], target_risk=0.01, delta=0.1)
    messages = [str(w.message) for w in caught]
    assert _MARK in messages, messages
    # the infeasible target: listed in the summary (the rule records it), not raised at the caller
    assert seen["summary"]["risk_control"]["feasible"] is False
    assert any("no threshold certifies" in w for w in seen["summary"]["warnings"])
    assert not any("no threshold certifies" in m for m in messages), messages


def test_resummarize_lets_summarize_warnings_through(monkeypatch):
    state = _state()
    saved = cohort_module.summarize(state, EvaluationConfig(num_classes=2))
    saved = {**saved, "config": {"num_classes": 2}}
    _warn_in_summarize(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = cohort_module.resummarize(state, saved, 0.5)
    assert _MARK in [str(w.message) for w in caught]
    assert again["triage"]["budget"] == 0.5
    # its own warnings (listed in the summary) are still not raised at the caller as well
    assert not any(str(w.message).startswith("cohort:") for w in caught)


# ------------------------------------------------------------------------------------------------------------------
# summarize, evaluate_case and triage_case record the warnings raised inside them with simplefilter("always") and list
# the UserWarnings (summary.json, the case's warnings, triage.json); every other category (a DeprecationWarning of
# the package, numpy's RuntimeWarning on the user's arrays, a warning of the user's own case metric) was dropped
_OTHER = "an overflow in the user's data (review 70)"


def _others(caught):
    return [w for w in caught if str(w.message) == _OTHER]


def test_summarize_reemits_the_other_categories(monkeypatch):
    curve, calls = cohort_module.referral_curve, []

    def warning_curve(*args, **kwargs):
        calls.append(1)
        warnings.warn(_OTHER, RuntimeWarning, stacklevel=2)
        return curve(*args, **kwargs)

    monkeypatch.setattr(cohort_module, "referral_curve", warning_curve)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = cohort_module.summarize(_state(), EvaluationConfig(num_classes=2))
    # each one raised reaches the caller, as raised
    assert calls and [w.category for w in _others(caught)] == [RuntimeWarning] * len(calls), caught
    assert not any(_OTHER in w for w in summary["warnings"])  # the list holds the UserWarnings, as before


def _toy(tmp_path):
    data = write_toy_cohort(tmp_path / "toy", n_cases=1, shape=(8, 8, 8), seed=3)
    return data, match_cases(data["labels"], data["predictions"])[0]


def test_evaluate_case_reemits_the_other_categories(tmp_path):
    def noisy(task):
        warnings.warn(_OTHER, RuntimeWarning, stacklevel=2)
        warnings.warn("a note of the metric (review 70)", UserWarning, stacklevel=2)
        return 1.0

    _, files = _toy(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = evaluate_case(files, EvaluationConfig(spatial=False, case_metrics={"noisy": noisy}))
    assert [w.category for w in _others(caught)] == [RuntimeWarning], [str(w.message) for w in caught]
    # the UserWarning is the case's, listed (and said by evaluate with the cohort's), not raised here: as before
    assert f"{files.case_id}: a note of the metric (review 70)" in result.warnings
    assert not any("a note of the metric" in str(w.message) for w in caught)
    assert result.row["noisy"] == 1.0


def test_triage_case_reemits_the_other_categories(monkeypatch, tmp_path):
    scores = tuple(float(v) for v in np.linspace(0.01, 0.9, 12))
    rule = ReferralRule("predictive_entropy_fg_mean", float("inf"), True, 0.5, 0.2, "sgr", "failure", 0.8, scores,
                        tuple(f"c{i}" for i in range(12)), num_classes=2, map_source="probabilities")
    columns = triage_runner.case_score_columns

    def warning_columns(*args, **kwargs):
        warnings.warn(_OTHER, RuntimeWarning, stacklevel=2)
        return columns(*args, **kwargs)

    monkeypatch.setattr(triage_runner, "case_score_columns", warning_columns)
    data, _ = _toy(tmp_path)
    files = triage_runner.find_prediction_cases(data["predictions"], rule)[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        row = triage_runner.triage_case(files, rule)
    assert [w.category for w in _others(caught)] == [RuntimeWarning], [str(w.message) for w in caught]
    assert not any(_OTHER in w for w in row["warnings"])


def test_reemitted_warning_keeps_its_module_for_the_filters():
    """A filter naming the module of the line that raised it applies to the warning issued again (as ``-W`` or
    pytest's ``ignore::FutureWarning:monai.*`` would to the original)."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        warnings.warn(_OTHER, FutureWarning)
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=FutureWarning, module=__name__.replace(".", r"\."))
        reemit_warning(got[0])
    assert again == []
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        reemit_warning(got[0])
    assert [(w.category, w.filename, w.lineno) for w in again] == [(FutureWarning, got[0].filename, got[0].lineno)]
