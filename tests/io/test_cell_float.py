"""One strict reader of the numbers of table cells (``monai_unc.io.cell_float``), used by every caller.

``column_values`` / ``calibration_risks`` (evaluate's cohort numbers, the referral rule's certification), ``as_float``
(triage's scores) and the SR's numbers (``report_numbers``) each read cells with rules of their own; they differed in
what they made of a bool (``True`` read as the score or Dice 1.0 by ``float``) and of bytes. The rules they keep
(empty and NaN cells) are explicit arguments now. The references are ``json.loads`` (the number syntax) and the
callers' documented behaviour, written out here.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from monai_unc.evaluation.cohort import calibration_risks, column_values
from monai_unc.evaluation.triage.rule import as_float
from monai_unc.io import cell_float

#: cells and the float every caller reads (JSON numbers, CSV spellings, numbers of Python and NumPy)
READ = [("0.25", 0.25), (" 1e-3\t", 0.001), ("-7", -7.0), ("1.5E+3", 1500.0), (3, 3.0), (0.1, 0.1),
        (np.float32(0.5), 0.5), (np.int64(4), 4.0), (np.float64(-2.5), -2.5)]
#: cells no caller takes for a number: (cell, error type)
REFUSED = [(True, TypeError), (False, TypeError), (np.bool_(True), TypeError), (b"0.5", TypeError),
           ([0.5], TypeError), ({"v": 1}, TypeError), (np.array([0.5]), TypeError), (1 + 0j, TypeError),
           ("1_000", ValueError), ("0,5", ValueError), ("\uff11", ValueError), ("0.5 0.6", ValueError)]
EMPTY = [None, "", "   ", "\t"]
NON_FINITE = [("nan", math.nan), ("-inf", -math.inf), ("Infinity", math.inf), (math.nan, math.nan),
              (np.float32("inf"), math.inf)]


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _readers():
    """Every caller of the reader, as cell -> float."""
    return {"cell_float": cell_float, "as_float": as_float,
            "column_values": lambda v: float(column_values([{"x": v}], "x")[0])}


@pytest.mark.parametrize("cell, value", READ)
def test_numbers_read_alike_by_every_caller(cell, value):
    if isinstance(cell, str):
        assert json.loads(cell.strip()) == value  # the reference: the JSON number
    for name, read in _readers().items():
        assert read(cell) == value and type(read(cell)) is float, name
    assert cell_float(cell, missing="refuse", non_finite="refuse") == value


@pytest.mark.parametrize("cell, error", REFUSED)
def test_what_is_no_number_is_refused_by_every_caller(cell, error):
    for _name, read in _readers().items():
        with pytest.raises(error):
            read(cell)
    if not isinstance(cell, (list, np.ndarray)):  # calibration_risks flattens an array of Dice
        with pytest.raises(error):
            calibration_risks([cell], ["a"], "failure", 0.8)


def test_a_bool_is_no_dice_or_score():
    """``float(True)`` is 1.0: a ``true`` in a row's Dice (a JSON state or rule edited by hand) was a perfect case."""
    with pytest.raises(TypeError, match="must be a number, text or None, got bool True"):
        column_values([{"dice": 0.5}, {"dice": True}], "dice")
    with pytest.raises(TypeError, match="got bool"):
        as_float(True)


@pytest.mark.parametrize("cell", EMPTY)
def test_an_empty_cell_is_nan_unless_refused(cell):
    for name, read in _readers().items():
        assert math.isnan(read(cell)), name
    with pytest.raises(ValueError, match="'dice' must be a number, got an empty cell"):
        cell_float(cell, "'dice'", missing="refuse")
    assert math.isnan(cell_float(cell, non_finite="refuse"))  # empty is not a non-finite number
    # calibration_risks keeps its own rule: an undefined Dice is refused, naming the case
    with pytest.raises(ValueError, match=r"undefined \(null or NaN\) for 1 case\(s\): 'b'"):
        calibration_risks([0.9, cell], ["a", "b"], "failure", 0.8)


@pytest.mark.parametrize("cell, value", NON_FINITE)
def test_nan_and_infinities_are_kept_unless_refused(cell, value):
    for name, read in _readers().items():
        assert _same(read(cell), value), name
    with pytest.raises(ValueError, match="'score' must be a finite number"):
        cell_float(cell, "'score'", non_finite="refuse")
    assert _same(cell_float(cell, missing="refuse"), value)


def test_the_error_names_the_cell():
    with pytest.raises(ValueError, match=r"^triage.csv: line 3: 'score': cell must be a number"):
        cell_float("1_000", "triage.csv: line 3: 'score'")
    with pytest.raises(ValueError, match=r"^cell must be a number"):  # the message of parse_float, unnamed
        cell_float("1_000")
    with pytest.raises(TypeError, match=r"^field 'score' must be a number, text or None, got bytes"):
        cell_float(b"1", "field 'score'")


@pytest.mark.parametrize("kwargs", [{"missing": "zero"}, {"non_finite": "nan"}, {"missing": None}])
def test_an_unknown_rule_is_refused(kwargs):
    with pytest.raises(ValueError, match=f"{next(iter(kwargs))} must be one of"):
        cell_float("0.5", **kwargs)


def test_the_sr_numbers_refuse_empty_and_non_finite_cells():
    """The DICOM SR holds finite numbers only: its reader is the same, refusing both (such cells are left out)."""
    pytest.importorskip("highdicom", reason="needs the dicom extra")
    from monai_unc.io.dicom import report_numbers

    row = {"case": "a", "dice": "0.5", "n": 3, "ece": "nan", "empty": "", "none": None, "inf": math.inf,
           "flag": True, "note": "text", "f32": np.float32(0.25)}
    assert report_numbers(row) == {"dice": 0.5, "n": 3.0, "f32": 0.25}
    with pytest.raises(ValueError, match="column 'dice': the cell '1_000' is not a number as CSV writes it"):
        report_numbers({"dice": "1_000"})
