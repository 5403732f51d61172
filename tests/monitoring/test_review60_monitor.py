"""Hostile review 60 of monitoring: each test failed before its fix, or pins behaviour checked against an independent
computation.

- a negative zero (a score of ``-0.0`` in ``triage.json``, a Dice written ``-0`` in an audit table) was stored as it
  came: SQLite reads ``-0.0`` back as ``0.0``, so the rows no longer matched the digest their audit entry recorded and
  ``monitor verify`` reported an untouched store as tampered (exit status 1), where PostgreSQL kept ``-0.0`` and
  verified: the two backends disagreed;
- ``monitor label`` with label maps compared each map with whatever file lay at the prediction's path: one written
  over since triage (a follow-up scan's, same case id and grid) gave the Dice against the follow-up's prediction;
- ``first_alarm`` refused ``-inf``, the log of a nonnegative martingale at 0;
- docs/monitoring.md said every scan triaged again with another model is recorded: one that repeats a recorded
  decision exactly (the same prediction's voxels) is skipped as recorded (pinned, the page corrected);
- pinned: every ``status`` continues the martingales of the earlier ones (the values of the cases already seen never
  change as runs are recorded), on both backends.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from monai_unc.io.files import save_nifti
from monai_unc.metrics.monitoring import first_alarm
from monai_unc.monitoring import ALL_SITES, MonitorStore, monitor_status
from monai_unc.workflows.monitor import record_labels, record_triage, verify_store

from ._stream import make_rule, write_triage


def test_a_negative_zero_is_stored_as_zero_and_the_store_verifies(store_url, tmp_path):
    rule = make_rule([0.1, 0.2, 0.3])
    cases = [{"case": "a", "score": -0.0}, {"case": "b", "score": 0.25}]
    record_triage(store_url, write_triage(tmp_path / "t1", rule, cases), site="A", command=["test"])
    labels = tmp_path / "audit.csv"
    labels.write_text("case,dice\na,-0\nb,0.9\n")
    assert record_labels(store_url, labels, command=["test"]).value == 2
    res = verify_store(store_url)
    assert res.exit_status == 0, res.lines
    with MonitorStore(store_url, read_only=True) as store:
        rows = {r["case_id"]: r for r in store.cases()}
    # one value on both backends: +0.0 (SQLite cannot keep the sign)
    assert rows["a"]["score"] == 0.0 and math.copysign(1.0, rows["a"]["score"]) == 1.0
    assert rows["a"]["dice"] == 0.0 and math.copysign(1.0, rows["a"]["dice"]) == 1.0
    assert rows["a"]["loss"] == 1.0 and rows["b"]["loss"] == 0.0
    # the same decision recorded again from another folder is still skipped
    record_triage(store_url, write_triage(tmp_path / "t2", rule, cases), site="A", command=["test"])
    with MonitorStore(store_url, read_only=True) as store:
        assert len(store.cases()) == 2


@pytest.mark.parametrize("field", ["score", "image_z_max", "expected_dice"])
def test_a_negative_zero_case_value_through_the_api_verifies(store_url, field):
    import dataclasses

    from monai_unc.monitoring.store import CaseRecord

    rule = make_rule([0.1, 0.2])
    case = CaseRecord("a", "A", None, "2026-01-31T00:00:00+00:00", 0.2, float("nan"), float("nan"), "accept",
                      "accepted", "accepted", rule["digest"], None)
    with MonitorStore(store_url) as store:
        store.record_run(rule, [dataclasses.replace(case, **{field: -0.0})], source_digest="x", folder="f",
                         triaged_at="t", model_digest=None, command=["x"])
        store.add_labels([{"case": "a", "dice": -0.0, "failure": None, "loss": 1.0}], source="audit.csv")
        assert store.verify().ok, store.verify().problems


def _seg(path, k):
    """A predicted label map (classes 0..2) whose voxels depend on ``k``."""
    seg = np.zeros((6, 6, 4), dtype=np.uint8)
    seg[1:4, 1:4, 1 + k % 2] = 1 + k // 2
    path.parent.mkdir(parents=True, exist_ok=True)
    save_nifti(seg, np.eye(4), path)
    return str(path)


def test_a_label_map_is_never_compared_with_a_prediction_written_over_since_triage(store_url, tmp_path):
    """The Dice of a label map is against the prediction its triage run read (docs/monitoring.md): a follow-up scan's
    prediction written over it since (the same case id, the same grid) gave the Dice against the follow-up, 0 here, an
    audited failure of a case that was segmented perfectly, without a word."""
    rule = make_rule([0.1, 0.2, 0.3])
    pred = _seg(tmp_path / "preds" / "p001.nii.gz", 0)
    record_triage(store_url, write_triage(tmp_path / "t1", rule, [{"case": "p001", "score": 0.1}],
                                          segs={"p001": pred}), site="A", command=["test"])
    labels = tmp_path / "labels"
    _seg(labels / "p001.nii.gz", 0)  # the audited label map: the prediction triage read was perfect
    _seg(tmp_path / "preds" / "p001.nii.gz", 3)  # the follow-up's prediction, written over it
    with pytest.raises(ValueError, match=r"case 'p001': its prediction .* is not the one its triage run read"):
        record_labels(store_url, labels, command=["test"])
    with MonitorStore(store_url, read_only=True) as store:
        assert [r["n_labels"] for r in store.cases()] == [0]  # nothing written
    _seg(tmp_path / "preds" / "p001.nii.gz", 0)  # the prediction triage read, back in its place: compared
    assert record_labels(store_url, labels, command=["test"]).value == 1
    with MonitorStore(store_url, read_only=True) as store:
        assert [(r["dice"], r["loss"]) for r in store.cases()] == [(1.0, 0.0)]


def test_first_alarm_takes_the_log_of_a_martingale_at_zero():
    """A nonnegative martingale can lose its whole capital: ``log S_n = -inf``, no alarm (it was a ValueError)."""
    assert first_alarm(np.log([1.0, 0.5, 0.0, 0.0]), alpha=0.05) is None
    assert first_alarm([0.0, math.log(19.0), math.inf], alpha=0.05) == 2  # an e-process that grew past any level
    assert first_alarm([0.0, math.log(20.0), -math.inf], alpha=0.05) == 1
    with pytest.raises(ValueError, match="log_martingale must be one-dimensional"):
        first_alarm([[0.0]], alpha=0.05)


def test_every_status_continues_the_martingales_of_the_earlier_ones(store_url, tmp_path):
    """Checking every day costs nothing (docs/monitoring.md) only if each ``status`` continues the same martingale:
    the p-values and ``log S_n`` of the cases already seen never change when runs are recorded (their tie-breaking
    draws are a prefix of the same seeded sequence; undefined scores and a second site in between)."""
    rng = np.random.default_rng(3)
    rule = make_rule(list(rng.normal(0, 1, 50)))
    seen: dict[tuple[str, str], np.ndarray] = {}
    for k in range(4):
        cases = [{"case": f"m{k}-{i}", "score": None if i % 5 == 0 else float(rng.normal(0.5 * k, 1)),
                  "image_z_max": float(abs(rng.normal(0, 1)))} for i in range(12)]
        folder = write_triage(tmp_path / f"t{k}", rule, cases)
        sites = tmp_path / f"sites{k}.csv"
        sites.write_text("case,site\n" + "".join(f"m{k}-{i},{'AB'[i % 2]}\n" for i in range(12)))
        record_triage(store_url, folder, sites=sites, command=["test"])
        with MonitorStore(store_url, read_only=True) as store:
            groups = monitor_status(store.cases(), store.rules(), alpha=0.05)
        for g in groups:
            for kind, m in (("score", g.score), ("image", g.image)):
                key = (g.site, kind)
                if key in seen:
                    old = seen[key]
                    np.testing.assert_array_equal(m.log_martingale[:len(old)], old)
                seen[key] = m.log_martingale.copy()
    assert len(seen[(ALL_SITES, "score")]) == 36 and len(seen[(ALL_SITES, "image")]) == 48  # 3 of 12 undefined


def test_another_model_that_repeats_a_decision_exactly_is_skipped_as_recorded(store_url):
    """docs/monitoring.md said every scan triaged again with another model is recorded; one whose decision and
    prediction are the recorded ones (a checkpoint saved again: another weights digest, the same voxels) is the same
    decision, skipped (the documentation now says so); another prediction from the other model is recorded."""
    import dataclasses

    from monai_unc.monitoring.store import CaseRecord

    rule = make_rule([0.1, 0.2])
    first = CaseRecord("a", "A", None, "t", 0.2, float("nan"), float("nan"), "accept", "accepted", "accepted",
                       rule["digest"], "sha256:" + "1" * 64, "/p/a.nii.gz", "sha256:" + "a" * 64)
    with MonitorStore(store_url) as store:
        store.record_run(rule, [first], source_digest="m1", folder="f1", triaged_at="t",
                         model_digest=first.model_digest)
        same = dataclasses.replace(first, model_digest="sha256:" + "2" * 64)  # the same voxels, another digest
        store.record_run(rule, [same], source_digest="m2", folder="f2", triaged_at="t", model_digest=same.model_digest)
        assert [r["n_cases"] for r in store.runs()] == [1, 0]
        other = dataclasses.replace(same, prediction_sha256="sha256:" + "b" * 64)  # the other model's prediction
        store.record_run(rule, [other], source_digest="m3", folder="f3", triaged_at="t",
                         model_digest=other.model_digest)
        assert [r["n_cases"] for r in store.runs()] == [1, 0, 1]
        groups = monitor_status(store.cases(), store.rules())
    assert [(g.n_cases, g.n_retriaged) for g in groups] == [(2, 1)]
