"""Validation study 7 (docs/validation/study7_conformal.py, conformal masks): the ``--tiny`` run writes its JSON,
markdown and figure with every reported number finite, and the committed results say what the docs say."""

from __future__ import annotations

import json
import math

import pytest

from tests.validation._studies import VALIDATION, load_study
from tests.validation._studies import finite_number as _finite

pytest.importorskip("nilearn")

RESULTS = VALIDATION / "results"


def _load():
    return load_study("study7_conformal")


def _check(result: dict, study) -> None:
    alpha = result["config"]["alpha"]
    for ds, res in result["datasets"].items():
        names = set(study.CLASSES[ds].values())
        assert len(res["rows"]) == len(study.FAMILIES) * len(study.SIDES) * len(study.METHODS) * len(study.STRATA)
        for r in res["rows"]:
            assert r["splits"] + r["refused"] == result["config"]["splits"], (ds, r)
            if r["splits"] == 0:
                continue
            assert set(r["achieved"]) == names
            assert all(_finite(v) and 0 <= v <= 1 for v in r["achieved"].values())
            assert set(r["conditional"]) == set(res["kinds"])
            assert all(_finite(v["achieved"]) for v in r["conditional"].values())
            assert all(_finite(v) and v >= 0 for v in r["volume_ratio"].values())
            if r["method"] == "high_probability":
                assert r["tol"] == alpha
        for b in result["bands"][ds]:
            assert b["band"] == pytest.approx(b["outer"] - b["inner"])
            if b["family"] == "margin":  # dilation and erosion of the predicted mask are nested
                assert b["inner"] <= b["outer"]


@pytest.mark.slow
def test_study7_tiny(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    study = _load()
    result = study.main(["--tiny", "--output", str(tmp_path), "--cache", str(tmp_path / "cache")])
    for name in ("study7.md", "study7.json", "study7_conditional.png"):
        assert (tmp_path / name).is_file(), name
    saved = json.loads((tmp_path / "study7.json").read_text())
    assert set(saved["datasets"]) == {"mni152", "toy"}
    _check(result, study)
    md = (tmp_path / "study7.md").read_text()
    assert md.startswith("## Study 7") and "Conditional" in md and "Runtime:" in md
    again = study.main(["--render-only", "--output", str(tmp_path)])
    assert again["statements"] == result["statements"]
    assert (tmp_path / "study7.md").read_text() == md


def test_committed_results_hold_the_marginal_guarantee_and_match_the_page():
    """The committed run: every rule fitted on every split, the marginal guarantee within Monte Carlo error for the
    CRC and high-probability rules, the shift types of each cohort, and study7.md rendered from study7.json."""
    study = _load()
    result = study.M.read_json(RESULTS / "study7.json")
    assert result["config"]["splits"] >= 100 and result["config"]["alpha"] == 0.1
    result = study._nan(result)
    _check(result, study)
    assert set(result["datasets"]["mni152"]["kinds"]) >= {"noise", "bias_field", "contrast", "blur", "resolution",
                                                          "affine", "crop"}
    assert set(result["datasets"]["toy"]["kinds"]) == {"none", "blur", "intensity", "shape", "position"}
    for res in result["datasets"].values():
        for r in res["rows"]:
            assert r["refused"] == 0, r["refusal"]
            if r["strata"] == "none":
                se = max(r["achieved_sd"].values()) / math.sqrt(r["splits"])
                assert max(r["achieved"].values()) <= 0.1 + 3 * se, r
    assert (RESULTS / "study7.md").read_text() == study.render_markdown(result)
    assert result["statements"] == study.statements(result)
