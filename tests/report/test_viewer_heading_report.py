"""The report's viewer section names the cases it shows as what they are.

Found by hostile testing: the section of the ``n_cases`` most uncertain cases was headed "Flagged cases: interactive
viewer", while the table beside it marked some of them ``budget: kept`` (with a budget of 25 % of four cases, one case
is flagged and three viewers were shown under that heading). It is headed "Most uncertain cases".
"""

from __future__ import annotations

import re
import warnings

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.report.html import build_report


def test_the_viewer_heading_does_not_call_kept_cases_flagged(tmp_path):
    data = write_toy_cohort(tmp_path / "data", n_cases=4, shape=(12, 12, 12))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(data["labels"], data["predictions"], tmp_path / "eval", EvaluationConfig(budget=0.25,
                                                                                              spatial=False))
    text = build_report(tmp_path / "eval", n_cases=3).read_text()
    flagged = set(re.findall(r'<tr class="[^"]*referred[^"]*"[^>]*data-case="([^"]+)"', text))
    viewers = re.findall(r'data-viewer-case="([^"]+)"', text) or re.findall(r'aria-label="3D viewer of case ([^"]+)"',
                                                                            text)
    assert len(flagged) == 1 and len(viewers) == 3 and set(viewers) - flagged, (flagged, viewers)
    assert "Flagged cases" not in text and "<h2>Most uncertain cases: interactive viewer</h2>" in text
