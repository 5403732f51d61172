"""Review 62 (end-to-end run): a shift table whose id differs from the case's only in Unicode form or spaces.

The table, typed on macOS (NFD: ``u`` and a combining diaeresis), was refused with ``the shift table has no row for
case(s) ['c06 Müller é']`` while it visibly held that row; the message now shows both spellings."""

from __future__ import annotations

import unicodedata

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort


def test_shift_row_in_another_unicode_form_is_named(tmp_path, capsys):
    paths = write_toy_cohort(tmp_path / "toy", n_cases=2, shape=(8, 8, 8), seed=3)
    name = "c06 Müller é"  # NFC, as a Linux file name
    for folder in (paths["labels"], paths["predictions"]):
        for f in folder.glob("toy001*"):
            f.rename(f.with_name(f.name.replace("toy001", name)))
    table = tmp_path / "shifts.csv"
    table.write_text(f"case,shift\ntoy000,none\n{unicodedata.normalize('NFD', name)},noise\n", encoding="utf-8")
    rc = cli.main(["evaluate", "-l", str(paths["labels"]), "-p", str(paths["predictions"]), "-o", str(tmp_path / "ev"),
                   "--shifts", str(table), "--no-spatial", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert "no row for case(s) ['c06 Müller é']" in err and "only in letter case, Unicode form or spaces" in err, err
    assert ascii(unicodedata.normalize("NFD", name)) in err, err


def test_calibration_case_in_another_unicode_form_names_the_option_and_the_case(tmp_path, capsys):
    # the line named the Python parameter (calibration_cases:) and showed two spellings that look the same
    paths = write_toy_cohort(tmp_path / "toy", n_cases=2, shape=(8, 8, 8), seed=3)
    name = "c06 Müller é"
    for folder in (paths["labels"], paths["predictions"]):
        for f in folder.glob("toy001*"):
            f.rename(f.with_name(f.name.replace("toy001", name)))
    listed = tmp_path / "cal.txt"
    listed.write_text(f"toy000\n{unicodedata.normalize('NFD', name)}\n", encoding="utf-8")
    rc = cli.main(["evaluate", "-l", str(paths["labels"]), "-p", str(paths["predictions"]), "-o", str(tmp_path / "ev"),
                   "--target-risk", "0.5", "--calibration-cases", str(listed), "--no-spatial", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert "error: --calibration-cases: 1 case(s) not in the evaluation" in err, err
    assert "only in letter case, Unicode form or spaces" in err and ascii(name) in err, err
