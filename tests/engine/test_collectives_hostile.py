"""Hostile input for the rank collectives (engine/collectives.py) on one process: case lists that differ only in
where their line breaks are, duplicate and odd ids in shards, bad ranks, failure files."""

from __future__ import annotations

import json

import pytest

import monai_unc.engine.collectives as collectives
from monai_unc.engine import DistContext, run_cases
from monai_unc.engine.collectives import CaseFailure, check_same_cases, error_line, shard, write_failures


def case_list_value(ids, monkeypatch):
    """The value that check_same_cases compares across ranks."""
    seen = []
    monkeypatch.setattr(collectives, "check_same", lambda value, ctx, what: seen.append(value))
    check_same_cases(ids, DistContext())
    return seen[0]


def test_case_lists_differing_only_in_line_breaks_are_told_apart(monkeypatch):
    """Regression: the ids were hashed joined by "\\n", so ranks listing ["a\\nb", "c"] and ["a", "b\\nc"] (same count,
    same joined text) passed the check with different cases."""
    assert case_list_value(["a\nb", "c"], monkeypatch) != case_list_value(["a", "b\nc"], monkeypatch)
    assert case_list_value(["b", "a"], monkeypatch) == case_list_value(["a", "b"], monkeypatch)


def test_shard_deals_odd_ids_once_each():
    ids = ["a\nb", "a", "b\nc", " ", "é", "😀", "A", "a b", "10", "9"]
    parts = [shard(ids, r, 3) for r in range(3)]
    assert sorted(sum(parts, [])) == sorted(ids)
    with pytest.raises(ValueError, match="unique ids"):
        shard(["a", "b", "a"], 0, 2)
    with pytest.raises(ValueError, match="unique ids"):
        shard([1, "1"], 0, 1)  # the same id once made a string


@pytest.mark.parametrize("rank, world, match", [(2, 2, "rank must be in"), (-1, 2, "rank must be in"),
                                                (0, 0, "world_size must be >= 1"), (0.0, 1, "rank must be an"),
                                                (True, 2, "rank must be an")])
def test_shard_bad_rank(rank, world, match):
    with pytest.raises(ValueError, match=match):
        shard(["a"], rank, world)


def test_run_cases_refuses_duplicate_case_ids():
    with pytest.raises(ValueError, match="unique ids"):
        run_cases(["a", "a"], str.upper, command="toy", key=str)


def test_failures_file_with_odd_ids_and_messages(tmp_path):
    fails = [CaseFailure("b\nc", 0, "ValueError: x"), CaseFailure("a,\"q\"", 1, "OSError: ü")]
    path = write_failures(tmp_path / "failures.json", fails, "toy")
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["n_failed"] == 2 and [f["case"] for f in doc["failures"]] == ["a,\"q\"", "b\nc"]
    assert not write_failures(path, []).exists()
    assert error_line(ValueError("first\nsecond")) == "ValueError: first"
