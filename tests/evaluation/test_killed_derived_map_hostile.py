"""Hostile testing of crash consistency: the half-written derived map of a killed ``evaluate`` is not left behind."""

from __future__ import annotations

import warnings

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate


def test_a_killed_runs_half_written_derived_map_is_removed_by_a_rerun_on_other_predictions(tmp_path):
    """Found by hostile testing: ``evaluate`` of predictions without map files, killed (SIGKILL) while it wrote a map
    it derives into ``maps/``, left the partial file in its private folder ``.<map>.partial.dir``, which only the next
    write of the same map removed; a rerun on predictions with map files of their own wrote none, and reported success
    with the half-written volume still in the output folder."""
    data = write_toy_cohort(tmp_path / "data", n_cases=2, shape=(12, 12, 12))
    out = tmp_path / "eval"
    killed = out / "maps" / ".toy000_predictive_entropy.nii.gz.partial.dir"  # what the killed write left
    killed.mkdir(parents=True)
    (killed / ".toy000_predictive_entropy.partial.nii.gz").write_bytes(b"\x1f\x8b half")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(data["labels"], data["predictions"], out, EvaluationConfig())
    assert not list((out / "maps").glob(".*.partial*"))
