"""Review 64 (speed lead): ``verify`` tries the signs of an entry's zeros sharing the hash of the unchanged prefix.

Before, every variant serialized and hashed the whole entry (up to 1024 times for 10 zeros: 8.6 s at 1e5 rows).
The digests must stay ``rows_digest``'s, so stores written before (and by) this version still verify.
"""

from __future__ import annotations

import hashlib
import itertools
import types

import numpy as np

import monai_unc.monitoring.store as store_module
from monai_unc.monitoring.store import _digest_up_to_zero_signs, rows_digest

from .test_review61_monitor import _old_writer, _problems, _record

COLUMNS = ["case_id", "score", "dice", "loss"]


def _rows(rng: np.random.Generator, n: int, zeros: int) -> list[dict]:
    rows = [{"case_id": f"c{i}", "score": float(rng.uniform()), "dice": float(rng.uniform()),
             "loss": None if rng.uniform() < 0.2 else float(rng.uniform())} for i in range(n)]
    spots = [(i, c) for i in range(n) for c in COLUMNS[1:]]
    for k in rng.choice(len(spots), size=min(zeros, len(spots)), replace=False).tolist():
        i, c = spots[k]
        rows[i][c] = 0.0
    return rows


def _brute_force(rows: list[dict], expected: str) -> bool:
    """Whether any assignment of signs to the zeros gives ``expected`` (every variant, whole entry each time)."""
    zeros = [(i, c) for i, r in enumerate(rows) for c in COLUMNS if isinstance(r[c], float) and r[c] == 0]
    for signs in itertools.product((0.0, -0.0), repeat=len(zeros)):
        variant = [dict(r) for r in rows]
        for (i, c), v in zip(zeros, signs):
            variant[i][c] = v
        if rows_digest(variant, COLUMNS) == expected:
            return True
    return False


def test_same_answers_as_trying_every_variant_of_the_whole_entry() -> None:
    rng = np.random.default_rng(3)
    for trial in range(60):
        rows = _rows(rng, int(rng.integers(1, 9)), int(rng.integers(0, 8)))
        written = [dict(r) for r in rows]
        for r in written:  # the signs as an old writer hashed them
            for c in COLUMNS[1:]:
                if r[c] == 0 and rng.uniform() < 0.5:
                    r[c] = -0.0
        if trial % 3 == 1:  # an edit: a value that no sign explains
            k = int(rng.integers(len(written)))
            written[k]["dice"] = 0.123456
        expected = rows_digest(written, COLUMNS)
        assert _digest_up_to_zero_signs(rows, COLUMNS, expected) is _brute_force(rows, expected), trial


def test_an_edited_entry_hashes_its_unchanged_prefix_once(monkeypatch) -> None:
    rng = np.random.default_rng(5)
    rows = _rows(rng, 2000, 0)
    for i in range(1990, 2000):  # ten zeros near the end: 1024 variants, every one tried (the entry was edited)
        rows[i]["score"] = 0.0
    entry = len(store_module._canonical(
        [[store_module._clean(r[c]) for c in COLUMNS] for r in rows]).encode())
    hashed = []

    class Counting:
        def __init__(self, data: bytes = b"", _h=None) -> None:
            self._h = _h or hashlib.sha256()
            self.update(data)

        def update(self, data: bytes) -> None:
            hashed.append(len(data))
            self._h.update(data)

        def copy(self) -> Counting:
            return Counting(b"", self._h.copy())

        def hexdigest(self) -> str:
            return self._h.hexdigest()

    monkeypatch.setattr(store_module, "hashlib", types.SimpleNamespace(sha256=Counting))
    assert _digest_up_to_zero_signs(rows, COLUMNS, "0" * 64) is False
    assert sum(hashed) < 3 * entry  # before review 64: 1024 x the entry


def test_stores_written_now_and_before_the_zero_fix_still_verify(tmp_path) -> None:
    now, old = str(tmp_path / "now.db"), str(tmp_path / "old.db")
    scores = [-0.0, 0.0, 0.5, -0.0, 0.2, 0.0, 0.0, -0.0, 0.9, 0.1]
    _record(now, [f"c{i}" for i in range(10)], scores)
    with _old_writer():
        _record(old, [f"c{i}" for i in range(10)], scores)
    assert _problems(now) == [] and _problems(old) == []
