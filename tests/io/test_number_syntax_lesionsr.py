"""Numbers read from files a person may edit follow the number syntax of JSON and CSV, not Python's ``float``.

Python's ``float`` (and ``int``) also read ``1_000`` as 1000, ``0.9_5`` as 0.95 and digits of other scripts
(``١٢`` as 12, full-width ``１`` as 1): text that no CSV or JSON reader takes for that number, typed by hand or
written by another program. ``metrics.csv`` cells went into the DICOM SR as ``float`` read them, a labels table of
``monai-unc monitor`` read ``0.9_5`` as the Dice 0.95 (found by the lesionsr review). The reference here is the
JSON grammar (``json.loads``), written independently of the implementation's pattern.
"""

from __future__ import annotations

import json
import math

import pytest

from monai_unc.evaluation.cohort import calibration_risks, column_values
from monai_unc.evaluation.triage.rule import as_float
from monai_unc.io import parse_float
from monai_unc.monitoring import read_label_table

#: text Python's float reads as a number that is no number in CSV or JSON
PYTHON_ONLY = ["1_000", "0.9_5", "1e1_0", "\u0661\u0662", "\uff11", "\u0967.5", "1\u00a0", "\u20071"]
#: numbers as JSON writes them, and the spellings of CSV writers beside JSON (+, .5, 5., leading zeros, nan / inf)
CSV_NUMBERS = {"0.5": 0.5, "-3": -3.0, "1e-05": 1e-05, "1.5E+3": 1500.0, "+2": 2.0, ".5": 0.5, "5.": 5.0,
               "007": 7.0, " 0.25\t": 0.25, "nan": math.nan, "NaN": math.nan, "-inf": -math.inf,
               "Infinity": math.inf}


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("text", PYTHON_ONLY)
def test_python_only_numbers_are_refused(text):
    float(text)  # the premise: Python's float reads it
    with pytest.raises(ValueError):
        json.loads(text)  # the reference: no JSON number
    with pytest.raises(ValueError, match="cell must be a number"):
        parse_float(text)
    with pytest.raises(ValueError, match="cell must be a number"):
        as_float(text)
    with pytest.raises(ValueError, match="cell must be a number"):
        column_values([{"dice": text}], "dice")
    with pytest.raises(ValueError, match="cell must be a number"):
        calibration_risks([text], ["a"], "failure", 0.8)


@pytest.mark.parametrize("text, value", CSV_NUMBERS.items())
def test_csv_numbers_are_read(text, value):
    assert _same(parse_float(text), value)
    assert _same(as_float(text), value)
    assert _same(float(column_values([{"x": text}], "x")[0]), value)


def test_json_numbers_are_read_as_json_reads_them():
    """Every number of the JSON grammar (generated, not written by the pattern's author) reads as json.loads."""
    ints, fracs, exps = ["0", "7", "10", "123456789"], ["", ".0", ".25", ".000001"], ["", "e5", "E-3", "e+07"]
    for sign in ("", "-"):
        for i in ints:
            for f in fracs:
                for e in exps:
                    text = sign + i + f + e
                    assert parse_float(text) == float(json.loads(text)), text


def test_a_labels_table_with_a_python_only_dice_is_refused(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("case,dice\na,0.9_5\n", encoding="utf-8")  # read as the Dice 0.95
    with pytest.raises(ValueError, match=r"line 2: 'dice' must be a number, got '0.9_5'"):
        read_label_table(path)
    path.write_text("case,dice\na,0.95\n", encoding="utf-8")
    assert read_label_table(path)[0]["dice"] == 0.95
