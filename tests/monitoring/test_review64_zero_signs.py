"""Review 64 of monitoring (numbers at scale): each test failed before its fix.

An audit entry written before monai-unc stored a negative zero as ``0.0`` hashed its zeros with their signs; read back
from SQLite they are all ``0.0``. ``verify`` tried every combination of signs only up to 10 zeros, and beyond that the
zeros of a column all of one sign: an untouched run of 14 cases whose scores held six ``-0.0`` and six ``0.0`` (two
computations of the score) was reported as "edited or deleted", and so was any larger one, where the store cannot
tell an edit from such zeros.
"""

from __future__ import annotations

import monai_unc.monitoring.store as store_module

from .test_review61_monitor import _old_writer, _problems, _record


def test_an_old_run_with_more_than_ten_zeros_of_mixed_signs_verifies(store_url):
    with _old_writer():
        _record(store_url, [f"c{i:02d}" for i in range(14)], [-0.0, 0.0] * 6 + [0.3, 0.4])
    assert _problems(store_url) == []  # "the rows written by audit entry 2 (record) were edited or deleted"


def test_an_edit_among_twelve_mixed_zeros_is_still_reported(store_url):
    from ._stream import raw_sql

    with _old_writer():
        _record(store_url, [f"c{i:02d}" for i in range(14)], [-0.0, 0.0] * 6 + [0.3, 0.4])
    raw_sql(store_url, "UPDATE cases SET score = 0.0 WHERE case_id = 'c13'")
    assert any("were edited or deleted" in p for p in _problems(store_url))


def test_too_many_mixed_zeros_to_try_are_reported_as_undecidable_not_as_edited(tmp_path, monkeypatch):
    store_url = str(tmp_path / "monitor.db")  # SQLite: PostgreSQL reads -0.0 back as written (the run verifies)
    monkeypatch.setattr(store_module, "_ZERO_SIGN_WORK", 2**8)  # 2**12 combinations of 14 rows exceed it
    with _old_writer():
        _record(store_url, [f"c{i:02d}" for i in range(14)], [-0.0, 0.0] * 6 + [0.3, 0.4])
    problems = _problems(store_url)
    assert len(problems) == 1 and "mixed signs" in problems[0] and "were edited or deleted" not in problems[0]
