"""docs/validation/study8_monitoring.py at smoke-test size: it runs, and its numbers have the right shape."""

from __future__ import annotations

from tests.validation._studies import finite_number, load_study


def test_study8_tiny(tmp_path):
    study = load_study("study8_monitoring")
    r = study.main(["--tiny", "--streams", "20", "--output", str(tmp_path)])
    assert (tmp_path / "study8.md").read_text().startswith("## Study 8")
    assert r["streams"] == 20
    shares = [s["alarm_share"] for scen in r["label_free"].values() for s in scen.values()]
    shares += [s["alarm_share"] for scen in r["risk"].values() for s in scen.values()]
    assert all(finite_number(x) and 0 <= x <= 1 for x in shares)
    assert r["label_free"]["scanner change"]["score martingale"]["detected"] >= 0.8  # a 1 SD shift is caught
    images = r["images"]
    shares += [s["alarm_share"] for scen in images.values() for s in scen.values()]
    assert all(finite_number(x) and 0 <= x <= 1 for x in shares)
    # a new scanner from the first case: seen against the calibration images, hardly by the stream alone
    new = images["new scanner from case 1"]
    assert new["against the calibration images"]["detected"] >= 0.8
    assert new["stream alone"]["alarm_share"] <= 0.5
    again = study.main(["--render-only", "--output", str(tmp_path)])
    assert (tmp_path / "study8.md").read_text() == study.render_markdown(again)
