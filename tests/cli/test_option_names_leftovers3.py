"""A check of the Python API reached from the command line names the option the user typed, not the Python
parameter (found by hostile review: ``evaluate --n-bins 10**12`` said ``n_bins must be at most 4096``,
``dicom-export --algorithm-name ''`` said ``algorithm_name must be ...``)."""

from __future__ import annotations

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    return write_toy_cohort(tmp_path_factory.mktemp("opt"), n_cases=2, shape=(8, 8, 8))


@pytest.mark.parametrize("extra, message", [
    (["--n-bins", "1000000000000"], "--n-bins must be at most"),
    (["--num-classes", "1"], "--num-classes must be an integer >= 2, got 1"),
    (["--min-bin-count", "-1"], "--min-bin-count must be a non-negative integer, got -1"),
    (["--lesion-dilation", "1"], "--lesion-dilation needs lesion-wise metrics (--lesions)"),
    # found by hostile testing: these three were ignored without --lesions (exit 0, even --lesion-iou 7)
    (["--lesion-iou", "7"], "--lesion-iou needs lesion-wise metrics (--lesions)"),
    (["--lesion-settings", "met"], "--lesion-settings needs lesion-wise metrics (--lesions)"),
    (["--lesion-failure-dice", "0.5", "--lesion-min-volume", "3"],
     "--lesion-min-volume / --lesion-failure-dice need lesion-wise metrics (--lesions)"),
    (["--conformal-strata", "3"], "--conformal-strata / --conformal-strata-edges need conformal masks (--conformal)"),
    (["--conformal-delta", "0.05"], "--conformal-delta / --conformal-family need conformal masks (--conformal)"),
    (["--conformal-family", "threshold"], "--conformal-delta / --conformal-family need conformal masks (--conformal)"),
    # found by hostile testing: these two ran and exited 0, the option unused
    (["--ignore-unclaimed-labels"], "--ignore-unclaimed-labels needs --regions"),
    (["--seg-label-values", "1,2"], "--seg-label-values reads labels given as DICOM SEG (<case>.dcm), but no label of "
                                    "the cohort is one"),
    (["--conformal", "outer:fnr=0.1", "--conformal-stratify-by", "variance_mean"],
     "--conformal-stratify-by needs --conformal-strata or --conformal-strata-edges"),
])
def test_evaluate_names_the_option(cohort, tmp_path, capsys, extra, message):
    rc = cli.main(["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o",
                   str(tmp_path / "ev"), "-q", *extra])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and not ln.startswith("warning")]
    assert rc == 2 and len(err) == 1 and err[0].startswith("monai-unc evaluate: error: "), (rc, err)
    assert message in err[0], err
    assert "n_bins" not in err[0].split("(")[0] and "_" not in err[0].split("error: ")[1].split(" ")[0], err


def test_dicom_export_names_the_option(cohort, tmp_path, capsys):
    pytest.importorskip("pydicom")
    rc = cli.main(["dicom-export", "-p", str(cohort["predictions"]), "-s", str(tmp_path / "series"), "-o",
                   str(tmp_path / "out"), "--algorithm-name", ""])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "error: --algorithm-name must be 1 to 64 characters" in err[0], err

