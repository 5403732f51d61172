"""docs/validation/study11_shared_passes.py at smoke-test size: it runs, its tests and ratios have the right shape,
and the page fragment is re-rendered from the JSON unchanged."""

from __future__ import annotations

import pytest

from tests.validation._studies import finite_number, load_study


@pytest.mark.slow
def test_study11_tiny(tmp_path):
    study = load_study("study11_shared_passes")
    r = study.main(["--tiny", "--output", str(tmp_path)])
    assert (tmp_path / "study11.md").read_text().startswith("## Study 11")
    assert (r["runs"], r["samples"]) == (2, 3) and set(r["placements"]) == set(study.PLACEMENTS)
    for name, placement in r["placements"].items():
        assert set(placement["tests"]) == set(study.STATISTICS)
        for t in placement["tests"].values():
            assert finite_number(t["p"]) and 0 <= t["p"] <= 1 and 0 <= t["ks"] <= 1
        if name != "last":  # several dropout layers: batched replays draw other masks than full passes (not empty)
            assert placement["tests"]["mean MI"]["mean_a"] != placement["tests"]["mean MI"]["mean_b"]
        assert finite_number(placement["shared_ratio"]) and placement["shared_ratio"] > 0
    assert r["control"]["mean MI"]["mean_a"] > r["control"]["mean MI"]["mean_b"]  # a higher rate: more MI
    again = study.main(["--render-only", "--output", str(tmp_path)])
    assert (tmp_path / "study11.md").read_text() == study.render_markdown(again)
