"""Tables and lists a person saved from a spreadsheet or an editor (found by hostile testing): Excel's byte-order mark,
a decimal comma in a comma-separated table, a column given twice, UTF-16, a server in an 8-bit locale; the shift
table and ``--calibration-cases`` read them as the labels and sites tables do."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from monai_unc.evaluation import read_shifts
from monai_unc.io import read_csv, read_table, write_csv
from monai_unc.workflows.prepare import read_case_list


def test_a_byte_order_mark_is_skipped(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("\ufeffcase,dice\r\na,0.5\r\n", encoding="utf-8")
    assert read_table(path) == (["case", "dice"], [{"case": "a", "dice": "0.5"}])
    assert read_csv(path) == [{"case": "a", "dice": "0.5"}]


def test_a_row_with_more_cells_than_the_header_is_refused_with_its_line(tmp_path):
    """'a,0,85' under 'case,dice' (a decimal comma) read the Dice as '0' and dropped '85' without a word."""
    path = tmp_path / "t.csv"
    path.write_text("case,dice\nb,0.9\nMüller,0,85\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"t\.csv: line 3 has 3 cells but the header 2 columns"):
        read_csv(path)


def test_empty_cells_beyond_the_header_and_short_rows_are_read(tmp_path):
    """Trailing separators of a spreadsheet (and its empty trailing column) are no data; a short row's missing
    cells are None, as before."""
    path = tmp_path / "t.csv"
    path.write_text("case,dice,\na,0.5,,\nb\n\n", encoding="utf-8")
    assert read_table(path) == (["case", "dice", ""], [{"case": "a", "dice": "0.5", "": ""},
                                                      {"case": "b", "dice": None, "": None}])


def test_a_decimal_comma_under_a_header_ending_in_a_separator_is_refused(tmp_path):
    """'Müller,0,85' under 'case,dice,' (a spreadsheet's once-used column) put 85 in the unnamed column and read the
    Dice as 0, where the same row under 'case,dice' is refused; an empty trailing column is still no data."""
    path = tmp_path / "t.csv"
    path.write_text("case,dice,\nb,0.9,\nMüller,0,85\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"t\.csv: line 3 has 3 cells but the header 2 columns"):
        read_table(path)
    path.write_text("case,,dice,,\nb,,0.9,,\nc,,0,85,\n", encoding="utf-8")  # an unnamed column inside is kept
    with pytest.raises(ValueError, match=r"line 3 has 4 cells but the header 3 columns"):
        read_table(path)
    path.write_text("case,,dice,,\nb,x,0.9,,\n", encoding="utf-8")
    assert read_table(path)[1] == [{"case": "b", "": "", "dice": "0.9"}]


def test_a_column_given_twice_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("case,dice,dice\na,0.95,0.5\n", encoding="utf-8")
    with pytest.raises(ValueError, match="the column 'dice' is given twice"):
        read_csv(path)


def test_our_tables_still_read_back(tmp_path):
    rows = [{"case": "=x", "dice": 0.5, "note": "a,b"}, {"case": "\ufeffbom", "dice": None, "note": "line\nbreak"}]
    back = read_csv(write_csv(tmp_path / "t.csv", rows))
    assert back == [{"case": "=x", "dice": "0.5", "note": "a,b"},
                    {"case": "\ufeffbom", "dice": "", "note": "line\nbreak"}]
    (tmp_path / "empty.csv").write_text("")
    assert read_table(tmp_path / "empty.csv") == ([], [])


def test_the_shift_table_skips_a_byte_order_mark_and_refuses_misread_rows(tmp_path):
    path = tmp_path / "shifts.csv"
    path.write_text("\ufeffcase,shift\r\na,iid\r\nb,noise\r\n", encoding="utf-8")
    assert read_shifts(path) == {"a": "iid", "b": "noise"}
    path.write_text("case,shift\nMüller, Hans,noise\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2 has 3 cells"):
        read_shifts(path)
    path.write_text("case,shift\n", encoding="utf-8")
    assert read_shifts(path) == {}


def test_calibration_cases_skip_a_byte_order_mark(tmp_path):
    """The mark became part of the first id ('\\ufeffcase01': not in the evaluation); a .csv was refused as
    having no 'case' column."""
    plain = tmp_path / "cal.txt"
    plain.write_text("\ufeffcase01\r\ncase02\r\n", encoding="utf-8")
    assert read_case_list(plain) == ["case01", "case02"]
    table = tmp_path / "cal.csv"
    table.write_text("\ufeffcase,dice\r\ncase01,0.9\r\n", encoding="utf-8")
    assert read_case_list(table) == ["case01"]


def test_calibration_cases_not_in_utf8_are_one_line_naming_the_option_and_file(tmp_path):
    path = tmp_path / "u16.txt"
    path.write_bytes("case01\r\ncase02\r\n".encode("utf-16"))  # Excel's "Unicode text"
    with pytest.raises(ValueError, match=r"--calibration-cases: .*u16\.txt is not UTF-8 text"):
        read_case_list(path)


@pytest.mark.skipif(sys.platform == "win32", reason="the C locale of a POSIX system")
def test_calibration_cases_are_utf8_in_an_8bit_locale(tmp_path):
    """The file was decoded in the locale's encoding: an ASCII (or Latin-1) locale failed (or misread 'Müller')."""
    path = tmp_path / "cal.txt"
    path.write_text("Müller\n李\n", encoding="utf-8")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
           "PYTHONIOENCODING": "utf-8"}
    code = ("import locale, sys; from monai_unc.workflows.prepare import read_case_list; "
            "print(locale.getpreferredencoding(False), read_case_list(sys.argv[1]) == ['M\\u00fcller', '\\u674e'])")
    r = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True,
                       encoding="utf-8")
    assert r.returncode == 0 and r.stdout.split()[-1] == "True", r.stdout + r.stderr


def test_column_names_are_read_without_surrounding_spaces(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("case , dice\na,0.5\n", encoding="utf-8")
    assert read_csv(path) == [{"case": "a", "dice": "0.5"}]
    path.write_text("case,dice,dice \na,0.5,0.6\n", encoding="utf-8")
    with pytest.raises(ValueError, match="the column 'dice' is given twice"):
        read_csv(path)



def test_a_row_is_named_by_the_line_it_starts_on(tmp_path):
    """Found by a review of read_table: it skips blank lines (and a quoted cell may hold line breaks), and the monitor's
    labels and sites tables counted rows from line 2: a bad Dice on line 4 after a blank line was said to be on line
    3, on line 5 after a two-line note on line 4."""
    from monai_unc.monitoring import read_label_table, read_sites

    path = tmp_path / "labels.csv"
    path.write_text('case,dice,note\na,0.9,\n\nb,0.8,"two\nlines"\nc,1.5,\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"labels\.csv: line 6: 'dice' must be in \[0, 1\], got 1\.5"):
        read_label_table(path)
    columns, rows, lines = read_table(path, return_lines=True)
    assert [r["case"] for r in rows] == ["a", "b", "c"] and lines == [2, 4, 6]
    assert read_table(path) == (columns, rows)
    sites = tmp_path / "sites.csv"
    sites.write_text("case,site\na,A\n\nb,\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"sites\.csv: line 4: 'site'"):
        read_sites(sites)
