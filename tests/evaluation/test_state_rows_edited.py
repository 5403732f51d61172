"""``state/rows.json`` is a file a user may edit (found by hostile testing): a key given twice was silently taken as
its last value (the report used Dice 0.2 where the first entry says 0.9); the file is UTF-8 whatever the locale."""

from __future__ import annotations

import math

import pytest

from monai_unc.evaluation.cohort import CohortState


def test_a_key_given_twice_in_rows_json_is_refused_naming_the_file(tmp_path):
    CohortState(2, 240, rows=[{"case": "a", "dice": 0.9}]).save(tmp_path)
    path = tmp_path / "rows.json"
    text = path.read_text(encoding="utf-8")
    assert '"dice": 0.9' in text
    path.write_text(text.replace('"dice": 0.9', '"dice": 0.9, "dice": 0.2', 1), encoding="utf-8")
    with pytest.raises(ValueError, match=r"rows\.json: the key 'dice' is given twice"):
        CohortState.load(tmp_path)


def test_rows_json_with_non_ascii_ids_and_nan_reads_back(tmp_path):
    CohortState(2, 240, rows=[{"case": "Müller 李", "dice": 0.5, "ece": float("nan")}]).save(tmp_path)
    rows = CohortState.load(tmp_path).rows
    assert rows[0]["case"] == "Müller 李" and math.isnan(rows[0]["ece"])
