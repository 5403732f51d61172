"""docs/validation/study10_lesions.py at smoke-test size: it runs, and its numbers have the right shape."""

from __future__ import annotations

import pytest

from tests.validation._studies import finite_number, load_study


@pytest.mark.slow
def test_study10_tiny(tmp_path):
    study = load_study("study10_lesions")
    r = study.main(["--tiny", "--output", str(tmp_path)])
    assert (tmp_path / "study10.md").read_text().startswith("## Study 10")
    assert r["settings"]["test"] == 4 and r["n_predicted_lesions"] >= r["n_false_positive"] >= 0
    assert {"existence_uncertainty", "volume_cv", "predictive_entropy_mean"} <= set(r["scores"])
    aucs = [v["auroc_false_positive"] for v in r["scores"].values() if v["auroc_false_positive"] is not None]
    assert aucs and all(finite_number(x) and 0 <= x <= 1 for x in aucs)
    ret = r["retention"]
    assert all(len(v) == len(ret["referred"]) for level in ("lesion", "case") for v in ret[level].values())
    again = study.main(["--render-only", "--output", str(tmp_path)])
    assert (tmp_path / "study10.md").read_text() == study.render_markdown(again)
