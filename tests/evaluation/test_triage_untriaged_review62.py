"""Review 62 (end-to-end run): inputs that have no prediction are named by ``triage``, never left out silently.

An image with NaN voxels failed in ``monai-unc infer`` (exit 1, ``failures.json``); ``monai-unc triage`` then
reported the other cases (exit 0) as if the cohort were complete: the failed case was neither accepted nor referred,
and ``monitor record`` recorded the run without it.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.triage import ReferralRule, run_triage, untriaged_cases
from monai_unc.workflows.triage import triage_summary


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    paths = write_toy_cohort(root / "A", n_cases=3, shape=(8, 8, 8), seed=2)
    pred = root / "pred"  # toy002's inference failed: no prediction files
    shutil.copytree(paths["predictions"], pred, ignore=shutil.ignore_patterns("toy002_*"))
    return paths, pred


def _rule() -> ReferralRule:
    scores = tuple(float(v) for v in np.linspace(0.01, 0.9, 12))
    return ReferralRule("predictive_entropy_fg_mean", float("inf"), True, 0.5, 0.2, "sgr", "failure", 0.8, scores,
                        tuple(f"c{i}" for i in range(12)), num_classes=2, map_source="probabilities")


def test_image_without_prediction_is_named_not_dropped(cohort, tmp_path):
    paths, pred = cohort
    with pytest.warns(UserWarning, match=r"1 case\(s\) have an image in .* NOT triaged .*'toy002'") as got:
        result = run_triage(pred, _rule(), tmp_path / "out", images=paths["images"])
    assert sum("NOT triaged" in str(w.message) for w in got) == 1  # one line
    summary = json.loads((tmp_path / "out" / "triage.json").read_text())
    assert summary["n_cases"] == 2 and summary["not_triaged"] == ["toy002"]
    assert any("'toy002'" in w for w in summary["warnings"])
    lines = triage_summary(result, tmp_path / "out" / "triage.html", tmp_path / "out")
    assert any(line.startswith("WARNING: 1 case(s) NOT triaged") and "'toy002'" in line for line in lines)


def test_failures_file_of_infer_names_cases_without_images(cohort, tmp_path):
    paths, pred = cohort
    pred2 = tmp_path / "pred2"
    shutil.copytree(pred, pred2)
    (pred2 / "failures.json").write_text(json.dumps({"n_failed": 1, "failures": [{"case": "toy002", "rank": 0,
                                                                                   "error": "CaseError: NaN"}]}))
    with pytest.warns(UserWarning, match=r"1 case\(s\) have no prediction in .* NOT triaged .*'toy002'"):
        run_triage(pred2, _rule(), tmp_path / "out")
    assert json.loads((tmp_path / "out" / "triage.json").read_text())["not_triaged"] == ["toy002"]


def test_complete_cohort_and_chosen_cases_warn_nothing(cohort, tmp_path):
    paths, pred = cohort
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        run_triage(paths["predictions"], _rule(), tmp_path / "a", images=paths["images"])
        run_triage(pred, _rule(), tmp_path / "b", images=paths["images"], cases=["toy000"])  # the caller chose
    assert json.loads((tmp_path / "a" / "triage.json").read_text())["not_triaged"] == []


@pytest.mark.parametrize("text", ["[1, 2]", '{"failures": "toy002"}', '{"failures": [3, {"case": 4}, {"case": ""}]}',
                                  "not json"])
def test_edited_failures_file_is_read_leniently(tmp_path, text):
    (tmp_path / "failures.json").write_text(text)
    assert untriaged_cases(tmp_path, ["toy000"]) == []


def test_channel_series_of_a_case_is_that_case(tmp_path):
    images = tmp_path / "images"
    for name in ("brain_0000", "brain_0001", "other"):
        (images / name).mkdir(parents=True)
        (images / name / "IM0001").write_bytes(b"")
    assert untriaged_cases(tmp_path / "pred", ["brain"], images=images) == ["other"]


def test_page_names_cases_not_triaged_at_the_top(cohort, tmp_path):
    from monai_unc.workflows.report import triage_with_page

    paths, pred = cohort
    with pytest.warns(UserWarning, match="NOT triaged"):
        triage_with_page(pred, _rule(), tmp_path / "out", images=paths["images"], cases=1, progress=False)
    page = (tmp_path / "out" / "triage.html").read_text()
    summary_part = page[page.index('id="summary"'):page.index("</section>", page.index('id="summary"'))]
    assert "1 case(s) NOT triaged, neither accepted nor referred" in summary_part and "toy002" in summary_part
