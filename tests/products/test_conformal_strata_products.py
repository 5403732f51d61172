"""A strata score of a measure the cases have no map of is refused before any case is evaluated.

Found by hostile testing: ``evaluate --conformal ... --conformal-stratify-by mutual_information_mean`` on predictions
with predictive-entropy maps only evaluated every case, then failed at the fit ("the evaluation has no column");
it is refused first, as ``--score`` is (``ConformalMasks.check_inputs``).
"""

from __future__ import annotations

import warnings

from monai_unc.cli import main
from monai_unc.data.cohorts import write_toy_cohort


def test_a_strata_score_without_maps_is_refused_before_any_work(tmp_path, capsys):
    cohort = write_toy_cohort(tmp_path / "cohort", n_cases=6, shape=(8, 8, 8))
    out = tmp_path / "ev"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rc = main(["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o", str(out),
                   "--no-spatial", "--conformal", "outer:fnr=0.3", "--conformal-strata-edges", "0.5",
                   "--conformal-stratify-by", "mutual_information_mean", "-q"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--conformal-stratify-by 'mutual_information_mean'" in err and "no map of its measure" in err
    assert not list(out.rglob("*.npz")) and not list(out.rglob("*.json"))  # no case was evaluated
