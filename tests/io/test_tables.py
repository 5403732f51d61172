"""The one CSV writer of the package (:func:`monai_unc.io.write_csv`): one cell format, column order, atomicity."""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

import numpy as np
import pytest

from monai_unc.io import CSV_NAN, format_cell, parse_float, read_csv, table_columns, write_csv

FLOATS = [0.1, 1 / 3, 2.0**-1074, 1.7976931348623157e308, -0.0, 1e-05, 123456789.12345678, float(np.float32(0.3))]


def _rows() -> list[dict]:
    return [
        {"case": "a", "nan": float("nan"), "inf": float("inf"), "ninf": float("-inf"), "none": None, "int": 7,
         "bool": True, "float": 0.1},
        {"case": "b", "nan": np.float32("nan"), "inf": np.float64("inf"), "ninf": -np.inf, "none": None,
         "int": np.int64(-3), "bool": np.bool_(False), "float": np.float32(0.3)},
    ]


def test_cells_have_one_format():
    assert [format_cell(v) for v in (None, True, False, np.bool_(True), 0, 42, np.int32(-5), np.uint8(200))] == [
        "", "True", "False", "True", "0", "42", "-5", "200"]
    assert [format_cell(v) for v in (float("nan"), np.float32("nan"), float("inf"), -np.inf)] == [
        CSV_NAN, "nan", "inf", "-inf"]
    assert format_cell(np.float32(0.3)) == "0.30000001192092896"  # the float32's exact value, not "0.3"
    assert [format_cell(v) for v in ("x, \"y\"", Path("a/b"), "é")] == ["x, \"y\"", os.path.join("a", "b"), "é"]
    for f in FLOATS:
        assert float(format_cell(f)) == f and format_cell(f) == repr(f)
    for bad in ([1.0], np.zeros(2), {"a": 1}, b"x"):
        with pytest.raises(TypeError, match="value must be"):
            format_cell(bad)


def test_round_trip_through_csv_module(tmp_path):
    path = write_csv(tmp_path / "t.csv", _rows())
    assert path == tmp_path / "t.csv"
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[0] == "case,nan,inf,ninf,none,int,bool,float"
    assert text.splitlines()[1:] == ["a,nan,inf,-inf,,7,True,0.1", "b,nan,inf,-inf,,-3,False,0.30000001192092896"]
    assert text.endswith("\n") and "\r" not in text
    rows = read_csv(path)
    assert rows == list(csv.DictReader(text.splitlines()))
    for r in rows:
        assert math.isnan(parse_float(r["nan"])) and math.isnan(parse_float(r["none"]))
        assert parse_float(r["inf"]) == math.inf and parse_float(r["ninf"]) == -math.inf
    assert [int(r["int"]) for r in rows] == [7, -3]
    assert [r["bool"] == "True" for r in rows] == [True, False]
    assert [float(r["float"]) for r in rows] == [0.1, float(np.float32(0.3))]


def test_full_precision_round_trip(tmp_path):
    values = np.random.default_rng(0).standard_normal(200) * 10.0 ** np.random.default_rng(1).integers(-30, 30, 200)
    values = [*values.tolist(), *FLOATS]
    write_csv(tmp_path / "p.csv", [{"i": i, "x": v} for i, v in enumerate(values)])
    got = [float(r["x"]) for r in read_csv(tmp_path / "p.csv")]
    assert got == values  # bit-exact
    assert [math.copysign(1, v) for v in got] == [math.copysign(1, v) for v in values]  # -0.0 kept


def test_numpy_reads_nan_inf_and_empty_back(tmp_path):
    write_csv(tmp_path / "n.csv", [{"x": 0.25, "y": float("nan")}, {"x": float("-inf"), "y": None},
                                   {"x": float("inf"), "y": 1 / 3}])
    a = np.genfromtxt(tmp_path / "n.csv", delimiter=",", names=True, dtype=float, encoding="utf-8")
    np.testing.assert_array_equal(a["x"], [0.25, -np.inf, np.inf])
    assert np.isnan(a["y"][:2]).all() and a["y"][2] == 1 / 3
    b = np.genfromtxt(tmp_path / "n.csv", delimiter=",", skip_header=1)
    assert b.shape == (3, 2) and np.isnan(b[0, 1]) and np.isnan(b[1, 1]) and b[1, 0] == -np.inf


def test_pandas_reads_nan_inf_and_empty_back(tmp_path):
    pd = pytest.importorskip("pandas")  # not a dependency; a user's tool
    write_csv(tmp_path / "d.csv", _rows())
    # round_trip: pandas 2's default parser ("high") may be one ulp off a float's shortest repr; pandas 3 is exact and
    # deprecates the argument (removed in pandas 4)
    exact = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}
    df = pd.read_csv(tmp_path / "d.csv", **exact)
    assert df["nan"].isna().all() and df["none"].isna().all()
    assert list(df["inf"]) == [np.inf, np.inf] and list(df["ninf"]) == [-np.inf, -np.inf]
    assert list(df["int"]) == [7, -3] and list(df["bool"]) == [True, False]
    assert list(df["float"]) == [0.1, float(np.float32(0.3))]


def test_columns_are_the_union_in_first_seen_order(tmp_path):
    rows = [{"case": "a", "dice": 0.5}, {"shift": "noise", "case": "b"}, {"z": 1, "dice": 0.25, "case": "c"}]
    assert table_columns(rows) == ["case", "dice", "shift", "z"]
    write_csv(tmp_path / "u.csv", rows)
    assert (tmp_path / "u.csv").read_text().splitlines() == ["case,dice,shift,z", "a,0.5,,", "b,,noise,", "c,0.25,,1"]
    # given columns: that order, missing cells empty; a key outside them is refused
    write_csv(tmp_path / "g.csv", rows, columns=["z", "case", "shift", "dice", "extra"])
    assert (tmp_path / "g.csv").read_text().splitlines()[:2] == ["z,case,shift,dice,extra", ",a,,0.5,"]
    with pytest.raises(ValueError, match=r"rows\[1\] has keys \['shift'\]"):
        write_csv(tmp_path / "bad.csv", rows, columns=["case", "dice", "z"])
    with pytest.raises(ValueError, match="columns must be unique"):
        write_csv(tmp_path / "bad.csv", rows, columns=["case", "case", "dice", "shift", "z"])
    with pytest.raises(TypeError, match=r"rows\[0\] must be a mapping"):
        write_csv(tmp_path / "bad.csv", [("a", 1)], columns=["case", "x"])
    assert not (tmp_path / "bad.csv").exists()
    # no rows: the header alone, or an empty file without columns
    write_csv(tmp_path / "h.csv", [], columns=["case", "score"])
    assert (tmp_path / "h.csv").read_text() == "case,score\n"
    write_csv(tmp_path / "e.csv", [])
    assert (tmp_path / "e.csv").read_text() == ""


def test_unicode_and_quoting_round_trip(tmp_path):
    rows = [{"case": "patient_é_🧠", "note": 'a, "quoted"\nsecond line', "région": "München"}]
    write_csv(tmp_path / "u.csv", rows)
    assert "patient_é_🧠" in (tmp_path / "u.csv").read_bytes().decode("utf-8")
    assert read_csv(tmp_path / "u.csv") == rows


class _Boom(float):
    """A float whose formatting fails: an error in the middle of a write."""

    def __float__(self) -> float:
        raise RuntimeError("disk full")


def test_no_partial_file_on_an_error_mid_write(tmp_path):
    rows = [{"case": f"c{i}", "x": float(i)} for i in range(1000)]
    rows[700]["x"] = _Boom(1.0)
    target = tmp_path / "sub" / "m.csv"
    with pytest.raises(RuntimeError, match="disk full"):
        write_csv(target, rows)
    assert not target.exists() and list(target.parent.iterdir()) == []  # no file, no temporary file
    # an older table survives a failed rewrite untouched
    write_csv(target, rows[:3])
    before = target.read_bytes()
    with pytest.raises(RuntimeError):
        write_csv(target, rows)
    assert target.read_bytes() == before and [p.name for p in target.parent.iterdir()] == ["m.csv"]
    with pytest.raises(TypeError, match="value must be"):
        write_csv(target, [{"x": 1.0}, {"x": [1.0]}])
    assert target.read_bytes() == before


def test_parse_float_refuses_text():
    assert parse_float(None) != parse_float(None)  # NaN
    assert parse_float(" 2.5 ") == 2.5
    with pytest.raises(ValueError, match="cell must be a number"):
        parse_float("abc")
