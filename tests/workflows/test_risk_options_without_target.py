"""Options of the risk-controlled threshold given without a target risk are refused, not ignored.

Found by hostile testing (option sweep): ``monai-unc evaluate ... --delta 0.05`` without ``--target-risk`` exited 0
and fitted nothing; ``monai-unc report --delta 0.1`` (``--risk``, ``--risk-method``) of an evaluation without a
target risk did the same, so a user expecting a guarantee at that level got none without a word.
"""

from __future__ import annotations

import json
import warnings

import pytest

from monai_unc.cli import main
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import check_risk_options, config_from_summary


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("risk_options")
    return write_toy_cohort(root / "data", n_cases=4, shape=(8, 8, 8))


def _evaluate(cohort, out, *flags):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return main(["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o", str(out), "-q",
                     "--no-spatial", *flags])


@pytest.mark.parametrize("flags", [["--delta", "0.05"], ["--risk", "1-dice"], ["--risk-method", "ltt"],
                                   ["--delta", "0.1", "--risk-method", "sgr"]])
def test_evaluate_refuses_risk_options_without_a_target(cohort, tmp_path, capsys, flags):
    assert _evaluate(cohort, tmp_path / "ev", *flags) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--target-risk" in err[0]
    assert all(f in err[0] for f in flags if f.startswith("--"))
    assert not (tmp_path / "ev" / "summary.json").exists()


def test_evaluate_takes_them_with_a_target_and_the_defaults_without(cohort, tmp_path):
    assert _evaluate(cohort, tmp_path / "a", "--target-risk", "0.5", "--delta", "0.05") == 0
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["risk_control"]["delta"] == 0.05
    assert _evaluate(cohort, tmp_path / "b") == 0  # the default delta of no target is not "given"


def test_report_refuses_them_for_an_evaluation_without_a_target(cohort, tmp_path, capsys):
    ev = tmp_path / "ev"
    assert _evaluate(cohort, ev) == 0
    capsys.readouterr()  # evaluate's own warning lines
    for flags in (["--delta", "0.1"], ["--risk", "1-dice"], ["--risk-method", "ltt"]):
        assert main(["report", "-e", str(ev), "-o", str(tmp_path / "rp"), "-q", *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and flags[0] in err[0] and "--target-risk" in err[0]
        assert not (tmp_path / "rp" / "report.html").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["report", "-e", str(ev), "-o", str(tmp_path / "rp"), "-q", "--target-risk", "0.5", "--delta",
                     "0.2", "--cases", "0"]) == 0


def test_config_from_summary_refuses_them_without_a_recorded_target():
    with pytest.raises(ValueError, match="--delta, --risk-method set the risk-controlled threshold"):
        config_from_summary({"config": {"budget": 0.2}}, [], delta=0.05, risk_method="ltt")
    assert config_from_summary({"config": {"target_risk": 0.1}}, [], delta=0.05).delta == 0.05
    assert config_from_summary({"config": {}}, [], target_risk=0.1, risk="1-dice").risk == "1-dice"
    check_risk_options(None, ["budget", "calibration_cases"])  # other options are not the threshold's
