"""Hostile review 60 of monitoring: each test failed before its fix, or pins behaviour checked against an independent
computation.

- a negative zero (a score of ``-0.0`` in ``triage.json``, a Dice written ``-0`` in an audit table) was stored as it
  came: SQLite reads ``-0.0`` back as ``0.0``, so the rows no longer matched the digest their audit entry recorded and
  ``monitor verify`` reported an untouched store as tampered (exit status 1), where PostgreSQL kept ``-0.0`` and
  verified: the two backends disagreed.
"""

from __future__ import annotations

import math

import pytest

from monai_unc.monitoring import MonitorStore
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
