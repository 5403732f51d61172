"""Smoke test of the MNI152 validation studies 1 (Zeevi et al. Table 1) and 5 (RETINA referral) in ``--tiny`` mode.

Runs each script's ``main`` into a temporary folder (study 5 first on its own, then after study 1 so that it reuses
study 1's per-case values) and checks that the outputs exist and hold finite numbers where numbers must be.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from tests.validation._studies import finite_number as _finite
from tests.validation._studies import load_study as _load

pytest.importorskip("nilearn")


def test_mni152_tissue_is_loaded_once_and_handed_out_as_copies(monkeypatch):
    """The studies, the training and the cohort exports each load the example: ``load_mni152_tissue`` keeps the last
    resolution's arrays (nilearn resamples the tissue templates at every load, ~2.5 s of CPU at 2 mm) and hands out
    copies, so that a caller that changes its arrays changes no later caller's; nilearn is still checked at every
    call."""
    from monai_unc.data import mni152

    calls = []

    def fake(datasets, resolution):
        calls.append(resolution)
        return {"image": np.zeros((1, 2, 2, 2), np.float32), "spacing": (float(resolution),) * 3}

    monkeypatch.setattr(mni152, "_TISSUE_CACHE", {})
    monkeypatch.setattr(mni152, "_load_tissue", fake)
    first = mni152.load_mni152_tissue(2)
    first["image"][:] = 1.0
    again = mni152.load_mni152_tissue(2)
    assert calls == [2] and again["image"].max() == 0.0 and again["spacing"] == (2.0,) * 3
    mni152.load_mni152_tissue(1)
    mni152.load_mni152_tissue(2)
    assert calls == [2, 1, 2]  # the last resolution only
    monkeypatch.setitem(sys.modules, "nilearn", None)  # `from nilearn import datasets` raises ImportError
    monkeypatch.setitem(sys.modules, "nilearn.datasets", None)
    with pytest.raises(ImportError, match="pip install 'nilearn>=0.10.1'"):
        mni152.load_mni152_tissue(2)


def test_mni152_tissue_of_two_threads_keeps_one_resolution(monkeypatch):
    """Found by review: a thread asking for 2 mm while another loaded 1 mm cleared the cache between the other's
    load and its store (both resolutions kept, ~280 MB) or between a check and a read (KeyError). One lock now."""
    import threading

    from monai_unc.data import mni152

    entered, release = threading.Event(), threading.Event()

    def fake(datasets, resolution):
        if resolution == 1:
            entered.set()
            assert release.wait(30)
        return {"image": np.full((1, 2, 2, 2), resolution, np.float32)}

    monkeypatch.setattr(mni152, "_TISSUE_CACHE", {})
    monkeypatch.setattr(mni152, "_load_tissue", fake)
    got = {}
    one = threading.Thread(target=lambda: got.setdefault(1, mni152.load_mni152_tissue(1)))
    two = threading.Thread(target=lambda: got.setdefault(2, mni152.load_mni152_tissue(2)))
    one.start()
    assert entered.wait(30)
    two.start()
    two.join(0.2)  # the 2 mm load waits for the 1 mm one (it finished here without the lock)
    release.set()
    one.join(30)
    two.join(30)
    assert got[1]["image"].max() == 1 and got[2]["image"].max() == 2
    assert len(mni152._TISSUE_CACHE) == 1



@pytest.mark.slow
def test_study1_and_study5_tiny(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    study1 = _load("study1_spatial_metrics")
    study5 = _load("study5_referral")

    alone = tmp_path / "alone"
    r5_alone = study5.main(["--tiny", "--output", str(alone), "--seed", "1"])
    assert r5_alone["reused_from_study1"] == []
    assert (alone / "study5.md").is_file() and (alone / "study5_referral.png").stat().st_size > 1000

    out = tmp_path / "both"
    r1 = study1.main(["--tiny", "--output", str(out), "--seed", "1"])
    for name in ("study1.md", "study1.json", "study1_accuracy.png", "study1_maps.png"):
        assert (out / name).is_file(), name
    saved = json.loads((out / "study1.json").read_text())
    assert len(saved["cases"]) == 3
    main_rows = saved["comparisons"]["main_pe"]["rows"]
    names = [r["metric"] for r in main_rows]
    for metric in ("SPACE", "BUC", "BA-ECE", "ECE", "MCE", "AUC-ROC", "AUC-PR", "AvU", "PAvPU(w=5)", "PAvPU(w=11)",
                   "AU-ARC", "Correct Certain Ratio", "Uncertain Incorrect Ratio", "VOXEL_ACC"):
        assert metric in names, metric
    for r in main_rows:
        assert 0.0 <= r["accuracy_percent"] <= 100.0
    spatial = {r["metric"]: r for r in main_rows if r["spatial"]}
    assert all(_finite(r["cohens_d"]) and _finite(r["mean_diff_percent"]) for r in spatial.values())
    assert spatial["SPACE"]["paper_accuracy_percent"] == pytest.approx(95.83)
    for rec in saved["cases"]:
        for m in ("deterministic", "mc_fixed", "rate_in", "mc_matched"):
            assert 0.0 < rec["methods"][m]["dice"] <= 1.0
            assert _finite(rec["methods"][m]["pe_fg_mean"])
        assert 0.0 < rec["rate_in_mean_rate"] < 1.0
    md = (out / "study1.md").read_text()
    assert "| **SPACE** | 95.83 |" in md and "Runtime:" in md
    assert r1["runtime"]["wall_s"] > 0

    r5 = study5.main(["--tiny", "--output", str(out), "--seed", "1"])
    assert r5["reused_from_study1"] == ["deterministic", "mc_fixed", "rate_in"]
    saved5 = json.loads((out / "study5.json").read_text())
    assert (out / "study5.md").is_file() and (out / "study5_referral.png").is_file()
    methods = {r["method"] for r in saved5["rows"]}
    assert methods == {"deterministic", "mc_own", "mc_fixed", "rate_in", "tta"}
    for r in saved5["rows"]:
        for key in ("area", "oracle_area", "random_area", "dice_no_referral", "dice_at_50"):
            assert _finite(r[key]), (r["label"], key)
        assert r["dice_at_70"] is None  # ceil(0.7 * 3) = 3: every case referred, undefined (null in the JSON)
        assert r["oracle_area"] >= r["area"] - 1e-12  # nothing refers better than the oracle
        assert 0 <= r["violations"] <= r["steps"] == 2
    # the reused values are study 1's, and a recomputation from scratch gives the same numbers
    det1 = [c["methods"]["deterministic"]["dice"] for c in saved["cases"]]
    det5 = [c["methods"]["deterministic"]["dice"] for c in saved5["cases"]]
    assert det1 == det5
    det_alone = [c["methods"]["deterministic"]["dice"] for c in r5_alone["cases"]]
    assert det_alone == pytest.approx(det5, abs=1e-6)
    ri1 = [c["methods"]["rate_in"]["pe_fg_mean"] for c in saved["cases"]]
    ri_alone = [c["methods"]["rate_in"]["pe_fg_mean"] for c in r5_alone["cases"]]
    assert ri_alone == pytest.approx(ri1, rel=1e-4)

    # --render-only re-writes the fragments from the JSON files alone, to the same text
    md1, md5 = (out / "study1.md").read_text(), (out / "study5.md").read_text()
    study1.main(["--render-only", "--output", str(out)])
    study5.main(["--render-only", "--output", str(out)])
    assert (out / "study1.md").read_text() == md1
    assert (out / "study5.md").read_text() == md5
