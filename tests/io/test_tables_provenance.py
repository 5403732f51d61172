"""Table column names: only text is a column name (io/tables.py ``csv_text`` / ``write_csv``)."""

from __future__ import annotations

import pytest

from monai_unc.io.tables import csv_text, read_csv, write_csv


@pytest.mark.parametrize("rows, columns, names", [
    ([{1: 0.5}], None, "the rows' keys"),  # was an AttributeError from deep inside the writer
    ([{1: 0.5}], [1], "columns"),  # was a ValueError saying the key 1 is not among ['1']
    ([{"a": 1}], ["a", None], "columns"),  # was a column named 'None', written without a word
])
def test_a_column_name_that_is_not_text_is_refused(tmp_path, rows, columns, names):
    with pytest.raises(TypeError, match=f"{names} must be column names"):
        csv_text(rows, columns)
    with pytest.raises(TypeError, match=f"{names} must be column names"):
        write_csv(tmp_path / "t.csv", rows, columns)
    assert not (tmp_path / "t.csv").exists()


def test_text_column_names_round_trip(tmp_path):
    rows = [{"case": "=a", "-b": 0.1, "@c": None}]
    assert read_csv(write_csv(tmp_path / "t.csv", rows)) == [{"case": "=a", "-b": "0.1", "@c": ""}]
