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


def test_a_rerun_removes_the_derived_maps_of_an_earlier_run(tmp_path):
    """Found by hostile testing: ``evaluate`` of predictions without map files wrote the maps it derived into
    ``maps/``; a rerun on the predictions with map files of their own (or on fewer cases) kept them beside its own
    outputs, where the report and triage find a case's maps. ``maps/`` holds the derived maps of the run's cases
    only."""
    import shutil

    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(12, 12, 12))
    bare = tmp_path / "bare"  # segmentations and probabilities only: evaluate derives the maps
    bare.mkdir()
    for p in data["predictions"].glob("*_probs.nii.gz"):
        shutil.copy(p, bare / p.name)
        shutil.copy(p.with_name(p.name.replace("_probs", "_seg")), bare / p.name.replace("_probs", "_seg"))
    out = tmp_path / "eval"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(data["labels"], bare, out, EvaluationConfig())
        assert sorted(p.name for p in (out / "maps").iterdir()) == sorted(
            f"toy00{i}_{m}.nii.gz" for i in range(3) for m in ("one_minus_max_prob", "predictive_entropy"))
        (bare / "toy002_probs.nii.gz").unlink()  # a rerun on two of the cases: the third's maps go
        (bare / "toy002_seg.nii.gz").unlink()
        (data["labels"] / "toy002.nii.gz").unlink()
        run_evaluate(data["labels"], bare, out, EvaluationConfig())
        assert sorted(p.name for p in (out / "maps").iterdir()) == sorted(
            f"toy00{i}_{m}.nii.gz" for i in range(2) for m in ("one_minus_max_prob", "predictive_entropy"))
        for p in data["predictions"].glob("toy002*"):
            p.unlink()
        run_evaluate(data["labels"], data["predictions"], out, EvaluationConfig())  # maps of their own: none derived
    assert not [p for p in (out / "maps").iterdir() if p.is_file()]


def _without_map_files(data):
    for f in data["predictions"].glob("*_predictive_entropy*"):
        f.unlink()  # probabilities only: evaluate derives the maps into <output>/maps
    return data


def test_a_rerun_killed_after_writing_a_map_leaves_no_earlier_summary(tmp_path, monkeypatch):
    """Issue: a rerun on other predictions wrote its derived maps into ``<output>/maps`` in the per-case loop,
    replacing the earlier run's files of the same name, while the earlier ``metrics.csv``, ``summary.json`` and
    ``state/`` were removed only at the summary step; killed in between, the folder held the first run's summary with
    the second run's maps, and ``report`` drew them together (exit 0). The earlier run's cohort outputs are removed
    before the first map is written; the same command again resumes."""
    import pytest

    import monai_unc.evaluation.runner as runner

    a = _without_map_files(write_toy_cohort(tmp_path / "A", n_cases=3, shape=(12, 12, 12)))
    b = _without_map_files(write_toy_cohort(tmp_path / "B", n_cases=3, shape=(12, 12, 12), seed=7))
    out = tmp_path / "eval"
    cohort_files = [out / "metrics.csv", out / "summary.json", out / "state" / "rows.json"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(a["labels"], a["predictions"], out, EvaluationConfig())
        assert all(p.is_file() for p in cohort_files)
        written: list[bool] = []  # whether the cohort files were still there when each map was written
        real_write, real_case = runner.write_derived_maps, runner.evaluate_case

        def write(*args, **kwargs):
            written.append(any(p.exists() for p in cohort_files))
            return real_write(*args, **kwargs)

        def killed(*args, **kwargs):  # Ctrl-C / SIGKILL during the first case, its maps written
            raise KeyboardInterrupt

        monkeypatch.setattr(runner, "write_derived_maps", write)
        monkeypatch.setattr(runner, "evaluate_case", killed)
        with pytest.raises(KeyboardInterrupt):
            run_evaluate(a["labels"], b["predictions"], out, EvaluationConfig())
        assert written == [False]
        assert not [p for p in cohort_files if p.exists()]  # no summary of run A beside a map of run B
        monkeypatch.setattr(runner, "evaluate_case", real_case)
        written.clear()
        # the same command as the first run again: the case whose map was replaced is evaluated again (its map no
        # longer the one its state records), the others resumed; its outputs are back
        run_evaluate(a["labels"], a["predictions"], out, EvaluationConfig())
    assert written == [False]
    assert all(p.is_file() for p in cohort_files)
    import hashlib
    import json

    recorded = json.loads((out / "state" / "rows.json").read_text())["derived_maps_sha256"]
    assert sorted(recorded) == ["toy000", "toy001", "toy002"]  # resumed cases too
    for cid, digests in recorded.items():
        assert sorted(digests) == ["one_minus_max_prob", "predictive_entropy"]
        for measure, digest in digests.items():
            assert hashlib.sha256((out / "maps" / f"{cid}_{measure}.nii.gz").read_bytes()).hexdigest() == digest


def test_a_resume_through_another_path_to_the_output_folder_reuses_the_derived_maps(tmp_path):
    """Found by hostile review: the same output folder reached through a symbolic link (an HPC home folder, macOS
    ``/tmp``) or ``..`` recomputed every case without map files: the saved map paths were compared as text."""
    import os

    import numpy as np

    calls = []

    def counted(task):
        calls.append(1)
        return float(np.count_nonzero(task.pred))

    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(8, 8, 8))
    _without_map_files(data)
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "alias")
    config = EvaluationConfig(spatial=False, case_metrics={"fg": counted})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(data["labels"], data["predictions"], tmp_path / "real" / "ev", config)
        assert len(calls) == 3
        for out in (tmp_path / "alias" / "ev", tmp_path / "data" / ".." / "real" / "ev"):
            calls.clear()
            run_evaluate(data["labels"], data["predictions"], out, config)
            assert calls == [], out
    assert (tmp_path / "real" / "ev" / "metrics.csv").is_file()
