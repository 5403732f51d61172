"""Hostile cells for the one CSV writer (io/tables.py): case ids with line breaks, carriage returns, quotes, commas,
unicode and leading formula characters; non-finite and extreme floats; every table read back equal to what was
written (by :func:`read_csv` and by the standard library's own reader)."""

from __future__ import annotations

import csv
import io
import math
import sys

import numpy as np
import pytest

from monai_unc.io import csv_text, format_cell, parse_float, read_csv, write_csv

NASTY_IDS = [
    "a,b", 'say "hi"', "line\nbreak", "carriage\rreturn", "crlf\r\nend", "\r", "\n", "tab\tx", " padded ",
    "ünïcødé", "😀", "line\u2028sep", "nul\x00", "=1+1", "+cmd", "-2", "@SUM(A1)", "'quoted", '"', "", "nan",
    "\ufeffbom",
]


def test_every_nasty_case_id_reads_back_as_written(tmp_path):
    """Regression: a cell holding a lone ``\\r`` was written unquoted; every reader takes it for a line end, so the
    row split in two and the cells after it moved to another case."""
    rows = [{"case": cid, "dice": 0.5, "i": i} for i, cid in enumerate(NASTY_IDS)]
    path = write_csv(tmp_path / "t.csv", rows)
    back = read_csv(path)
    assert [r["case"] for r in back] == NASTY_IDS
    assert [int(r["i"]) for r in back] == list(range(len(NASTY_IDS)))
    with open(path, newline="", encoding="utf-8") as f:
        text = f.read()
    # Python 3.10's csv reader refuses a NUL (3.11 reads it): there the reference reads the text without them
    strip = (lambda t: t.replace("\x00", "")) if sys.version_info < (3, 11) else (lambda t: t)  # noqa: E731
    plain = list(csv.reader(io.StringIO(strip(text), newline="")))
    # other readers see the ids as written, an apostrophe in front of those a spreadsheet would evaluate
    assert [r[0] for r in plain[1:]] == [strip("'" + c if c[:1] in ("=", "+", "-", "@", "\t", "\r", "'") else c)
                                         for c in NASTY_IDS]


def test_a_nul_in_a_cell_is_written_as_python_3_11_writes_it():
    """Python 3.10's csv writer raised ``csv.Error: need to escape`` on a NUL, a traceback from every table writer
    (found by running the tests on 3.10, the declared minimum): the text is the one 3.11 writes, on every Python."""
    rows = [{"case": "nul\x00", "v": 1}, {"case": "cr\r\x00", "v": 2}, {"case": "q,\x00\"", "v": 3}]
    assert csv_text(rows) == 'case,v\nnul\x00,1\n"cr\r\x00","2"\n"q,\x00""",3\n'


def test_a_carriage_return_in_a_column_name_reads_back(tmp_path):
    rows = [{"case": "a", "x\ry": 1.0}]
    back = read_csv(write_csv(tmp_path / "t.csv", rows))
    assert back == [{"case": "a", "x\ry": "1.0"}]


def test_rows_without_a_carriage_return_are_quoted_minimally(tmp_path):
    """Only a row that needs it is quoted in full; the others keep the plain format."""
    path = write_csv(tmp_path / "t.csv", [{"case": "a", "v": 1}, {"case": "b\rc", "v": 2}])
    assert path.read_bytes().decode("utf-8") == 'case,v\na,1\n"b\rc","2"\n'
    assert [parse_float(r["v"]) for r in read_csv(path)] == [1.0, 2.0]


FLOATS = [0.1, 1 / 3, 5e-324, 2.0**-1022, 1.7976931348623157e308, -0.0, 1e16, 123456789.12345678,
          float(np.float32(0.3)), float(np.float16(0.1)), math.pi * 1e-300]


def test_floats_round_trip_bit_for_bit(tmp_path):
    vals = FLOATS + [float(np.float32(v)) for v in np.random.default_rng(0).normal(size=50)]
    small = [v if abs(v) < 3e38 else 1.0 for v in vals]  # float32 holds them
    rows = [{"v": v, "np64": np.float64(v), "np32": np.float32(w)} for v, w in zip(vals, small)]
    back = read_csv(write_csv(tmp_path / "t.csv", rows))
    for v, w, r in zip(vals, small, back):
        assert parse_float(r["v"]).hex() == float(v).hex()
        assert parse_float(r["np64"]).hex() == float(v).hex()
        assert parse_float(r["np32"]) == float(np.float32(w))


def test_non_finite_and_missing_cells(tmp_path):
    rows = [{"case": "a", "v": float("nan")}, {"case": "b", "v": float("inf")}, {"case": "c", "v": -np.inf},
            {"case": "d", "v": None}, {"case": "e"}, {"case": "f", "v": np.float32("nan")}]
    back = read_csv(write_csv(tmp_path / "t.csv", rows))
    got = [parse_float(r["v"]) for r in back]
    assert math.isnan(got[0]) and got[1] == math.inf and got[2] == -math.inf
    assert math.isnan(got[3]) and math.isnan(got[4]) and math.isnan(got[5])
    assert [r["v"] for r in back] == ["nan", "inf", "-inf", "", "", "nan"]


@pytest.mark.parametrize("bad", [[1, 2], np.zeros(2), {"a": 1}, b"bytes", 1 + 2j, object()])
def test_a_cell_of_another_type_is_refused_and_keeps_the_old_file(tmp_path, bad):
    path = write_csv(tmp_path / "t.csv", [{"case": "old"}])
    with pytest.raises(TypeError, match="table cell"):
        write_csv(path, [{"case": "new"}, {"case": bad}])
    assert read_csv(path) == [{"case": "old"}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


def test_bad_rows_and_columns(tmp_path):
    with pytest.raises(TypeError, match=r"rows\[1\] must be a mapping"):
        write_csv(tmp_path / "t.csv", [{"a": 1}, [("a", 1)]])
    with pytest.raises(ValueError, match="columns must be unique"):
        write_csv(tmp_path / "t.csv", [{"a": 1}], columns=["a", "a"])
    with pytest.raises(ValueError, match=r"rows\[0\] has keys \['b'\]"):
        write_csv(tmp_path / "t.csv", [{"a": 1, "b": 2}], columns=["a"])
    assert not (tmp_path / "t.csv").exists()


def test_numpy_scalars_and_bools_format_like_python_ones():
    assert format_cell(np.int8(-3)) == "-3" and format_cell(np.uint64(2**64 - 1)) == str(2**64 - 1)
    assert format_cell(np.bool_(True)) == "True" and format_cell(False) == "False"
    assert format_cell(np.str_("x,y")) == "x,y"
    with pytest.raises(ValueError, match="cell must be a number"):
        parse_float("True")


def test_text_cells_a_spreadsheet_would_evaluate_are_escaped_and_read_back(tmp_path):
    """CSV injection: a case id such as ``=HYPERLINK(...)`` (from a file name) was written as is, and a spreadsheet
    opening metrics.csv evaluated it as a formula. Text cells beginning with a formula prefix (or an apostrophe) get an
    apostrophe in front; numbers never; read_csv gives every text back unchanged."""
    import csv as csv_module

    texts = ['=HYPERLINK("http://x.example","open")', "+1", "-2+3", "@SUM(A1:A2)", "\tcase", "\rcase", "'quoted",
             "''twice", "plain", "a=b", "", "-"]
    rows = [{"case": t, "dice": v} for t, v in zip(texts, [-0.5, float("-inf"), -1, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0,
                                                           6.0, 7.0, 8.0])]
    rows.append({"case": "=x", "dice": None, "-region_dice": "@y"})
    path = write_csv(tmp_path / "metrics.csv", rows)
    with open(path, newline="", encoding="utf-8") as f:
        raw = list(csv_module.reader(f))
    assert raw[0] == ["case", "dice", "'-region_dice"]
    written = {r[0] for r in raw[1:]}
    for t in texts:
        bad = t[:1] in ("=", "+", "-", "@", "\t", "\r", "'")
        assert (("'" + t) in written) == bad and (t in written) == (not bad), t
    assert [r[1] for r in raw[1:4]] == ["-0.5", "-inf", "-1"]  # numbers stay numbers
    assert raw[-1][2] == "'@y"
    back = read_csv(path)
    assert [r["case"] for r in back] == [*texts, "=x"]
    assert back[-1]["-region_dice"] == "@y" and back[0]["dice"] == "-0.5"


def test_shift_and_case_lists_of_ours_read_back_escaped_ids(tmp_path):
    """shifts.csv and a case list written by write_csv (escaped ids) read back as the ids, by the readers that parse
    CSV themselves (read_shifts, --calibration-cases)."""
    from monai_unc.evaluation import read_shifts
    from monai_unc.io import unescape_cell
    from monai_unc.workflows.prepare import read_case_list

    path = write_csv(tmp_path / "shifts.csv", [{"case": "=cmd", "shift": "-noise"}, {"case": "b", "shift": "iid"}])
    assert read_shifts(path) == {"=cmd": "-noise", "b": "iid"}
    cases = write_csv(tmp_path / "cases.csv", [{"case": "@x", "dice": 0.5}, {"case": "y", "dice": 0.1}])
    assert read_case_list(cases) == ["@x", "y"]
    assert unescape_cell("'") == "'" and unescape_cell("") == ""


def test_an_apostrophe_typed_before_a_plain_id_stays(tmp_path):
    """read_csv removed the first apostrophe of every cell, also of a hand-written table (monitoring sites, shifts.csv)
    whose id truly begins with one: only the apostrophe write_csv puts in front of a formula prefix or an apostrophe
    is removed now, and every text still round-trips."""
    from monai_unc.evaluation import read_shifts
    from monai_unc.io import unescape_cell

    typed = tmp_path / "shifts.csv"
    typed.write_text("case,shift\n'case01,'iid\n'=x,''y\n", encoding="utf-8")
    assert read_csv(typed) == [{"case": "'case01", "shift": "'iid"}, {"case": "=x", "shift": "'y"}]
    assert read_shifts(typed) == {"'case01": "'iid", "=x": "'y"}
    texts = ["'", "''", "'a", "''a", "'=a", "=a", "-1", "@", "a'", "\t", "'\t", "", "x"]
    back = read_csv(write_csv(tmp_path / "t.csv", [{"case": t} for t in texts]))
    assert [r["case"] for r in back] == texts
    assert [unescape_cell(t) for t in ("'a", "'", "'1")] == ["'a", "'", "'1"]


def test_case_and_shift_lists_keep_ids_as_written(tmp_path):
    """read_case_list dropped ('#3') and split ('c\\x85d', quoted CR) ids of a table of ours before parsing it as CSV;
    read_shifts crashed on a short row once it unescaped cells (None)."""
    from monai_unc.evaluation import read_shifts
    from monai_unc.workflows.prepare import read_case_list

    ids = ["#3", "a", "c\x85d", "e\rf", "g\u2028h", "=x"]
    path = write_csv(tmp_path / "metrics.csv", [{"case": c, "dice": 0.5} for c in ids])
    assert read_case_list(path) == ids
    assert read_case_list(write_csv(tmp_path / "spaced.csv", [{"case": " b "}])) == ["b"]  # cells stripped
    lines = tmp_path / "commented.csv"
    lines.write_bytes(b"# exported\n\n" + path.read_bytes())
    assert read_case_list(lines) == ids
    short = tmp_path / "shifts.csv"
    short.write_text("case,shift\na,iid\nb\n", encoding="utf-8")
    assert read_shifts(short) == {"a": "iid", "b": None}


def test_a_cell_over_the_csv_field_limit_is_one_line_naming_the_file(tmp_path, capsys):
    """Found by hostile testing: a table a user gives (``monitor label --labels``, ``--sites``,
    ``--calibration-cases``, an edited ``metrics.csv``) with one cell over the ``csv`` module's limit (131072
    characters) raised ``_csv.Error`` through ``read_csv``: a traceback naming no file, exit 1."""
    from monai_unc.cli import main
    from monai_unc.monitoring import read_sites
    from monai_unc.monitoring.store import MonitorStore
    from monai_unc.workflows.prepare import read_case_list

    labels = tmp_path / "labels.csv"
    labels.write_text("case,dice\n" + "a" * 200_000 + ",0.5\n")
    with pytest.raises(ValueError, match=r"labels.csv: not a readable CSV table \(line 2: field larger than"):
        read_csv(labels)
    sites = tmp_path / "sites.csv"
    sites.write_text("case,site\nc1," + "s" * 200_000 + "\n")
    with pytest.raises(ValueError, match="sites.csv: not a readable CSV table"):
        read_sites(sites)
    cases = tmp_path / "cal.csv"
    for text in ("case,x\n" + "c" * 200_000 + ",1\n", "case" + "h" * 200_000 + ",x\nc1,1\n"):
        cases.write_text(text)
        with pytest.raises(ValueError, match=r"--calibration-cases: .*cal.csv is not a readable CSV table"):
            read_case_list(cases)
    with MonitorStore(str(tmp_path / "m.db"), create=True):
        pass
    assert main(["monitor", "label", "--labels", str(labels), "--db", str(tmp_path / "m.db")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "labels.csv: not a readable CSV table" in err, err


def test_a_nul_in_a_cell_reads_back_on_python_3_10(tmp_path, monkeypatch):
    """Python 3.10's csv reader refuses a NUL ("line contains NUL"), so read_table refused a table 3.11 reads (found
    by running the tests on 3.10, the declared minimum): a character the file lacks stands in for it there. The 3.10
    path is taken here too, by saying the csv module is 3.10's; ids holding the first stand-in candidates stay apart."""
    from monai_unc.io import tables

    ids = ["a\x00b", "\ue000", "\ue000\x00\ue001", "plain", "line\nbreak\x00"]
    path = write_csv(tmp_path / "t.csv", [{"case": c, "v": i} for i, c in enumerate(ids)])
    want = read_csv(path)
    monkeypatch.setattr(tables, "_CSV_WRITES_NUL", False)
    assert read_csv(path) == want and [r["case"] for r in want] == ids
    assert tables.read_table(path, return_lines=True)[2] == [2, 3, 4, 5, 6]
