"""Hostile review 60 of the distributed cohort engine and the mergeable states it sends between ranks."""

from __future__ import annotations

import pytest

from monai_unc.engine import CaseCache, run_cases


def test_repeated_case_ids_are_refused_before_the_set_up_and_any_folder(tmp_path):
    """Regression: a list with a repeated id was refused only by the sharding, after rank 0 had taken the output
    folder, created the cache's folder and run ``setup`` (which may remove an earlier run's outputs)."""
    ran = []
    with pytest.raises(ValueError, match=r"unique ids, got duplicates \['a'\]"):
        run_cases(["a", "b", "a"], str.upper, command="toy", key=str, setup=lambda: ran.append("setup"),
                  cache=CaseCache(tmp_path / "state"), lock=tmp_path / "out")
    assert ran == []
    assert sorted(p.name for p in tmp_path.iterdir()) == []
