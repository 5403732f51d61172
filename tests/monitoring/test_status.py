"""The per-site statistics of the store's rows: each stream equals the formulas on its own cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monai_unc.metrics.monitoring import risk_test, score_martingale
from monai_unc.monitoring import ALL_SITES, any_alarm, monitor_status, status_table
from monai_unc.monitoring.status import printable, stream_seed


def _rows(rng, n, site, shift_at=None, digest="r1", fail_after=None):
    out = []
    for i in range(n):
        s = float(rng.normal() + (2.0 if shift_at is not None and i >= shift_at else 0.0))
        loss = None
        if i % 2 == 0:
            p = 0.4 if fail_after is not None and i >= fail_after else 0.02
            loss = float(rng.uniform() < p)
        out.append({"case_id": f"{site}-{i}", "site": site, "triaged_at": f"t{i}", "score": s,
                    "image_z_max": float(abs(rng.normal())), "decision": "accept" if s < 1.5 else "review",
                    "rule_digest": digest, "loss": loss})
    return out


def test_each_stream_is_the_formulas_on_its_cases():
    rng = np.random.default_rng(0)
    cal = list(rng.normal(size=100))
    a, b = _rows(rng, 60, "A"), _rows(rng, 40, "B<script>")
    rows = [r for pair in zip(a, b) for r in pair] + a[40:]  # interleaved in recording order
    rules = {"r1": {"calibration_scores": cal, "target_risk": 0.1}}
    groups = monitor_status(rows, rules, alpha=0.05)
    assert [g.site for g in groups] == ["A", "B<script>", ALL_SITES]
    for g, stream in zip(groups, (a, b, rows)):
        assert [c["case_id"] for c in g.cases] == [c["case_id"] for c in stream]
        assert g.score is not None and g.image is not None
        ref = score_martingale([c["score"] for c in stream], cal, alpha=0.05, seed=stream_seed("r1", g.site, "score"))
        np.testing.assert_array_equal(g.score.log_martingale, ref.log_martingale)
        z = score_martingale([c["image_z_max"] for c in stream], (), seed=stream_seed("r1", g.site, "image"))
        np.testing.assert_array_equal(g.image.log_martingale, z.log_martingale)
        losses = [c["loss"] for c in stream if c["decision"] == "accept" and c["loss"] is not None]
        np.testing.assert_allclose(g.risk.log_eprocess, risk_test(losses, 0.1).log_eprocess)
        assert g.acceptance_rate == pytest.approx(np.mean([c["decision"] == "accept" for c in stream]))
    assert not any_alarm(groups)
    table = status_table(groups)
    assert table[-1].startswith("no alarm") and len(table) == 6
    # the rule records no statistics of its calibration images: the image alarm ranks within the stream, and says so
    assert table[-2].startswith("note: rule r1: the image martingale ranks each case against the stream's earlier")
    assert all(not g.image_against_calibration and "certify the rule again" in g.image_note for g in groups)


def test_alarms_are_raised_and_named():
    rng = np.random.default_rng(1)
    cal = list(rng.normal(size=200))
    rows = _rows(rng, 300, "A", shift_at=150) + _rows(rng, 400, "B", fail_after=100)
    for r in rows[300:]:
        r["decision"] = "accept"
    groups = monitor_status(rows, {"r1": {"calibration_scores": cal, "target_risk": 0.1}}, alpha=0.05)
    a, b = groups[0], groups[1]
    assert a.score.alarm is not None and 150 <= a.score.alarm < 200
    assert abs(a.score.change_point - 150) <= 10
    assert b.risk.alarm is not None and b.risk.lower_bound[-1] > 0.1
    assert any("score distribution changed" in x and "'A-1" in x for x in a.alarms())
    assert any("harmful shift" in x for x in b.alarms())
    assert any_alarm(groups) and any(line.startswith("ALARM [B]") for line in status_table(groups))


def test_undefined_values_and_no_labels():
    rows = [{"case_id": "x", "site": "S", "triaged_at": "t", "score": math.nan, "image_z_max": math.nan,
             "decision": "review", "rule_digest": "r", "loss": None}]
    (g,) = monitor_status(rows, {"r": {"calibration_scores": [0.1], "target_risk": 0.1}})  # undefined: left out
    assert g.score is None and g.image is None and g.risk is None and g.acceptance_rate == 0.0
    assert monitor_status([], {"r": {"calibration_scores": [], "target_risk": 0.1}}) == []
    with pytest.raises(ValueError, match="alpha"):
        monitor_status(rows, {}, alpha=1.5)


def test_printable_hides_terminal_escapes():
    assert printable("a\x1b[2Jb\n") == "a?[2Jb?"
