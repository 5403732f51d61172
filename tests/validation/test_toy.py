"""Smoke tests of validation studies 3 (ValUES toy), 4 (GED parts) and 6 (SSN): each script's main with --tiny."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.validation._studies import load_study as _load


def _finite(x) -> bool:
    return x is not None and math.isfinite(float(x))


def test_presence_cases_have_empty_raters():
    toy = _load("_toy")
    cfg = toy.PresenceConfig()
    cases = toy.make_presence_dataset(40, (16, 16, 16), cfg, seed=3)
    n_empty = np.array([c["n_empty"] for c in cases])
    assert (n_empty > 0).any() and (n_empty == 0).any()
    for c in cases:
        empty = ~c["raters"].reshape(cfg.n_raters, -1).any(axis=1)
        assert empty.sum() == c["n_empty"]
    # fainter or smaller objects have more empty rater masks: compare the quartiles of visibility
    vis = np.array([c["visibility"] for c in cases])
    assert n_empty[vis < np.quantile(vis, 0.25)].mean() > n_empty[vis > np.quantile(vis, 0.75)].mean()
    with pytest.raises(ValueError, match="thresholds"):
        toy.PresenceConfig(n_raters=3)


@pytest.mark.slow
def test_study3_tiny(tmp_path):
    study3 = _load("study3_values")
    res = study3.main(["--tiny", "--output", str(tmp_path), "--cache", str(tmp_path / "cache")])
    for name in ("study3.md", "study3.json", "study3_size.png"):
        assert (tmp_path / name).is_file()
    data = json.loads((tmp_path / "study3.json").read_text())
    assert set(data["ood_auroc"]) == set(res["ood_auroc"])
    for v in data["ood_auroc"].values():
        assert _finite(v["3a"]) and _finite(v["3b"]) and 0 <= v["3a"] <= 1
    assert all(_finite(v) for v in data["ncc"].values())
    assert all(_finite(t) for th in data["thresholds"].values() for t in th.values())
    assert _finite(data["size_correlation"]["mc_dropout/predictive_entropy"]["sum"]["spearman"])
    md = (tmp_path / "study3.md").read_text()
    assert "paper 3b" in md and "paper (Toy 1)" in md
    # second run loads the networks from the cache and gives the same numbers
    again = study3.main(["--tiny", "--output", str(tmp_path / "b"), "--cache", str(tmp_path / "cache")])
    assert again["ood_auroc"] == res["ood_auroc"]


@pytest.mark.slow
def test_study4_tiny(tmp_path):
    study4 = _load("study4_ged")
    study4.main(["--tiny", "--output", str(tmp_path), "--no-cache"])
    for name in ("study4.md", "study4.json", "study4_ged.png"):
        assert (tmp_path / name).is_file()
    data = json.loads((tmp_path / "study4.json").read_text())
    means = data["analysis"]["all"]["metrics"]
    for metric in ("ged", "d_det"):
        assert all(_finite(v) for v in means[metric]["means"].values())
    # D_Det is 2 (p_A - p_Y)^2 <= 2, and GED >= 0 for every case and sampler
    for row in data["cases"]:
        assert 0 <= row["ensemble/d_det"] <= 2
        assert row["softmax_argmax/ged"] >= -1e-9
    assert "D_Det" in (tmp_path / "study4.md").read_text()


@pytest.mark.slow
def test_study6_tiny(tmp_path):
    study6 = _load("study6_ssn")
    res = study6.main(["--tiny", "--output", str(tmp_path), "--cache", str(tmp_path / "cache")])
    for name in ("study6.md", "study6.json", "study6_maps.png"):
        assert (tmp_path / name).is_file()
    data = json.loads((tmp_path / "study6.json").read_text())
    assert len(data["summaries"]) == 2  # two training runs at tiny size
    s = data["summaries"][0]
    assert set(s["au_measure"].values()) == {"expected_entropy", "mutual_information"}
    assert s["au_measure"]["ssn"] == "mutual_information"  # ValUES Appendix D
    assert all(_finite(v["mean"]) and -1 <= v["mean"] <= 1 for v in s["ncc"].values())
    for row in data["cases"]:
        for m in ("mc_dropout", "ensemble", "ssn"):  # GED = 2 cross - sample diversity - rater diversity >= 0
            g = 2 * row[f"{m}/cross"] - row[f"{m}/sample_diversity"] - row[f"{m}/reference_diversity"]
            assert row[f"{m}/ged"] == pytest.approx(g, abs=1e-5) and row[f"{m}/ged"] >= -1e-9
    assert all(0 <= v["3b"] <= 1 for v in s["ood_auroc"].values())
    assert "### (b) GED" in (tmp_path / "study6.md").read_text()
    # --render-only rewrites the same page fragment from the JSON
    md = (tmp_path / "study6.md").read_text()
    study6.main(["--render-only", "--output", str(tmp_path)])
    assert (tmp_path / "study6.md").read_text() == md
    # a second run loads the networks from the cache and gives the same numbers
    again = study6.main(["--tiny", "--output", str(tmp_path / "b"), "--cache", str(tmp_path / "cache")])
    assert again["summaries"] == res["summaries"]
