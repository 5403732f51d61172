"""Review 63: the lesion counts of ``metrics.csv`` (``lesion_tp`` / ``lesion_fp`` / ``lesion_fn``) are whole numbers
written as integers (``3``, not ``3.0``); NaN stays ``nan``; the readers of ``metrics.csv`` still read files of older
versions that hold ``3.0``.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from monai_unc.cli import main
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.lesions import LesionState, lesion_columns
from monai_unc.io import read_csv, read_table

COUNTS = ("lesion_tp", "lesion_fp", "lesion_fn")


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    data = write_toy_cohort(root / "data", n_cases=4, shape=(10, 10, 10))
    out = root / "ev"
    assert main(["evaluate", "-l", str(data["labels"]), "-p", str(data["predictions"]), "-o", str(out), "--lesions",
                 "-q"]) == 0
    return root, out


def test_lesion_counts_are_written_as_integers(evaluated):
    _, out = evaluated
    columns, rows = read_table(out / "metrics.csv")
    counts = [c for c in columns if c.startswith(COUNTS)]
    assert counts  # lesion_tp_1, ...
    for row in rows:
        for c in counts:
            assert row[c].isdigit(), (c, row[c])  # "3", never "3.0"
        assert "." in row["lesion_dice_1"] or row["lesion_dice_1"] in ("nan", "0", "1")
    # the per-case rows of the state folder (report's input) hold the same integers
    state_rows = json.loads((out / "state" / "rows.json").read_text())["rows"]
    assert all(isinstance(r[c], int) for r in state_rows for c in counts)
    # and the report reads them (its lesion section from summary.json, its table from the state rows)
    assert main(["report", "-e", str(out), "-o", str(out.parent / "report_new"), "-q"]) == 0


def test_lesion_columns_counts_int_nan_stays_nan():
    arrays = {"n_cases": np.array([1]), "samples": np.array([0]),
              "case.1.lesion_dice": np.array([0.5]), "case.1.lesion_hd95": np.array([np.nan]),
              "case.1.lesion_tp": np.array([3.0]), "case.1.lesion_fp": np.array([np.nan]),
              "case.1.lesion_fn": np.array([0.0]), "case.1.lesion_f1": np.array([0.25]),
              "case.1.ndsc": np.array([0.5]), "case.1.ndsc_raac": np.array([np.nan])}
    cols = lesion_columns(LesionState(arrays))
    assert cols["lesion_tp_1"] == 3 and type(cols["lesion_tp_1"]) is int
    assert cols["lesion_fn_1"] == 0 and type(cols["lesion_fn_1"]) is int
    assert np.isnan(cols["lesion_fp_1"]) and type(cols["lesion_fp_1"]) is float
    assert type(cols["lesion_dice_1"]) is float and type(cols["lesion_f1_1"]) is float


def test_report_reads_an_older_metrics_csv_with_float_counts(evaluated, tmp_path):
    """An evaluation folder of an older version (counts ``3.0`` in metrics.csv and rows.json) still reports."""
    _, out = evaluated
    old = tmp_path / "old"
    shutil.copytree(out, old)
    text = (old / "metrics.csv").read_text()
    header = text.splitlines()[0].split(",")
    idx = [i for i, c in enumerate(header) if c.startswith(COUNTS)]
    lines = [text.splitlines()[0]]
    for line in text.splitlines()[1:]:
        cells = line.split(",")
        for i in idx:
            cells[i] = repr(float(cells[i]))
        lines.append(",".join(cells))
    (old / "metrics.csv").write_text("\n".join(lines) + "\n")
    meta = json.loads((old / "state" / "rows.json").read_text())
    for r in meta["rows"]:
        for c in list(r):
            if c.startswith(COUNTS):
                r[c] = float(r[c])
    (old / "state" / "rows.json").write_text(json.dumps(meta))
    assert any(r["lesion_tp_1"].endswith(".0") for r in read_csv(old / "metrics.csv"))
    assert main(["report", "-e", str(old), "-q"]) == 0
    assert (old / "report" / "report.html").is_file()
