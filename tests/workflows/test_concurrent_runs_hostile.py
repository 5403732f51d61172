"""Two runs at once on one folder, found by the hostile review of concurrency (review s35).

- ``evaluate``, ``triage`` and ``conformal`` checked their predictions once, when listing the cases: another run
  that wrote the predictions meanwhile (``infer --overwrite`` with other settings) made an evaluation (and a
  certified rule) of cases of two runs, exit 0. The input files are compared again before the cohort files.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc.cli import main
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.io import OUTPUT_LOCK_FILE, CaseFiles, output_lock
from tests._holders import ForkedHolder


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    return write_toy_cohort(tmp_path_factory.mktemp("concurrent_hostile"), n_cases=3, shape=(8, 8, 8))


def _rewrite(path: Path) -> None:
    """Replace a volume as another run does (a new file renamed into place), with other values."""
    img = nib.load(path)
    data = np.asarray(img.dataobj)
    new = path.with_name(".new_" + path.name)
    nib.save(nib.Nifti1Image((data[::-1]).astype(data.dtype), img.affine, img.header), new)
    os.replace(new, path)


def test_predictions_rewritten_while_evaluate_reads_them_are_refused(cohort, tmp_path, monkeypatch, capsys):
    """A case rewritten by another run after the first case was read: exit 2, one line, no summary of two runs."""
    import shutil

    from monai_unc.evaluation import runner

    preds = tmp_path / "preds"
    shutil.copytree(cohort["predictions"], preds)
    out = tmp_path / "ev"
    real = runner._evaluate_record
    seen: list[str] = []

    def case_then_other_run(files, config, *rest):
        result = real(files, config, *rest)
        if not seen:  # another run replaces the last case's prediction while this one is inside its cases
            _rewrite(sorted(preds.glob("*_seg.nii.gz"))[-1])
        seen.append(files.case_id)
        return result

    monkeypatch.setattr(runner, "_evaluate_record", case_then_other_run)
    argv = ["evaluate", "-l", str(cohort["labels"]), "-p", str(preds), "-o", str(out), "--no-spatial", "-q",
            "--target-risk", "0.5"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        capsys.readouterr()
        assert main(argv) == 2
    err = [x for x in capsys.readouterr().err.strip().splitlines() if "warning:" not in x]
    last = sorted(p.name for p in preds.glob("*_seg.nii.gz"))[-1][: -len("_seg.nii.gz")]
    assert len(err) == 1 and "written again while monai-unc evaluate read them" in err[0] and last in err[0], err
    assert not (out / "summary.json").exists() and not (out / "referral_rule.json").exists()
    assert not (out / "metrics.csv").exists()
    monkeypatch.setattr(runner, "_evaluate_record", real)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(argv) == 0  # run again once the other run ended: one version of every case


def test_a_run_record_written_again_is_named(tmp_path):
    """``infer.json`` rewritten (another infer started into the folder) is named, even with the cases unchanged."""
    from monai_unc.evaluation.resume import check_inputs_unchanged, input_signatures

    seg = tmp_path / "c1_seg.nii.gz"
    seg.write_bytes(b"x")
    (tmp_path / "infer.json").write_text("{}")
    cases = [CaseFiles("c1", seg)]
    before = input_signatures(cases, tmp_path)
    check_inputs_unchanged(before, cases, tmp_path)
    (tmp_path / "new.json").write_text("{}")  # the same record written again (a run adding other cases): no change
    os.replace(tmp_path / "new.json", tmp_path / "infer.json")
    check_inputs_unchanged(before, cases, tmp_path)
    (tmp_path / "new.json").write_text('{"settings": {}}')
    os.replace(tmp_path / "new.json", tmp_path / "infer.json")
    with pytest.raises(ValueError, match=r"infer\.json were written again while monai-unc triage") as e:
        check_inputs_unchanged(before, cases, tmp_path, "monai-unc triage")
    assert "c1" not in str(e.value) and "\n" not in str(e.value)
    before = input_signatures(cases, tmp_path)
    seg.unlink()  # a case's file removed: named as changed
    with pytest.raises(ValueError, match=r"case\(s\) \['c1'\]"):
        check_inputs_unchanged(before, cases, tmp_path)


ROOT = Path(__file__).resolve().parents[2]


def _Holder(folder: Path, command: str) -> ForkedHolder:  # noqa: N802 (was a class)
    """Another process that holds a folder with ``output_lock`` (as a running command does) until closed."""
    return ForkedHolder(lambda: output_lock(folder, command))


def _dicom_cases(root: Path) -> tuple[Path, Path]:
    """Two small CT series and a segmentation and a variance map of each on its grid."""
    from monai_unc.io.dicom import read_series, write_series

    pred = root / "pred"
    pred.mkdir(parents=True, exist_ok=True)
    for case in ("c0", "c1"):
        write_series(np.zeros((8, 7, 3)), np.diag([0.9, 1.1, 2.0, 1.0]), root / "series" / case, modality="CT")
        grid = read_series(root / "series" / case, pixels=False)
        label = np.zeros(grid.shape, np.uint8)
        label[2:5, 2:5, 1] = 1
        nib.save(nib.Nifti1Image(label, grid.affine), pred / f"{case}_seg.nii.gz")
        nib.save(nib.Nifti1Image(np.full(grid.shape, 0.25, np.float32), grid.affine), pred / f"{case}_variance.nii.gz")
    return pred, root / "series"


def _files(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != OUTPUT_LOCK_FILE}


def test_a_second_dicom_export_into_a_busy_folder_is_refused(tmp_path, capsys):
    """Two exports at once into one folder: the manifest listed objects the other run had replaced (7 of 18), the
    objects were of two ``--study-uid`` settings, and one run failed on a file the other removed. The second run is
    refused in one line naming the holder, before it removes or writes anything."""
    pytest.importorskip("highdicom", reason="needs the dicom extra")
    pred, series = _dicom_cases(tmp_path)
    out = tmp_path / "out"
    argv = ["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(out), "-q"]
    assert main(argv) == 0
    before = _files(out)
    capsys.readouterr()
    with _Holder(out, "monai-unc dicom-export") as holder:
        assert main([*argv, "--study-uid", "new"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "another run" in err[0] and f"pid {holder.pid}" in err[0], err
    assert _files(out) == before  # nothing removed or written (the killed holder's lock file aside)
    assert main([*argv, "--study-uid", "new"]) == 0  # the holder gone (even killed): the folder is free


def test_dicom_export_of_predictions_being_written_is_refused(tmp_path, capsys):
    """A prediction folder that a live run holds (``infer`` writing it): its files could be of two runs."""
    pytest.importorskip("highdicom", reason="needs the dicom extra")
    pred, series = _dicom_cases(tmp_path)
    out = tmp_path / "out"
    with _Holder(pred, "monai-unc infer"):
        assert main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(out), "-q"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "being written by another run" in err[0] and "monai-unc infer" in err[0], err
    assert not out.exists()


def test_a_second_report_into_a_busy_folder_is_refused(cohort, tmp_path, capsys):
    """Two reports at once into one folder (--budget 0.1 / 0.5): figures/ held a referral curve of the other run's
    page, and its record listed a figure that was not there. The second is refused in one line, writing nothing; a
    report of an evaluation that ``evaluate`` is still writing says so (it said "no summary.json: run evaluate")."""
    ev = tmp_path / "ev"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o", str(ev),
                     "--no-spatial", "-q"]) == 0
        out = tmp_path / "report"
        argv = ["report", "-e", str(ev), "-o", str(out), "--cases", "0", "-q"]
        assert main([*argv, "--budget", "0.1"]) == 0
        before = _files(out)
        capsys.readouterr()
        with _Holder(out, "monai-unc report") as holder:
            assert main([*argv, "--budget", "0.5"]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "another run" in err[0] and f"pid {holder.pid}" in err[0], err
        assert _files(out) == before
        with _Holder(ev, "monai-unc evaluate"):
            assert main([*argv, "--budget", "0.5"]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "being written by another run" in err[0] and "monai-unc evaluate" in err[0], err
        assert _files(out) == before
        assert main([*argv, "--budget", "0.5"]) == 0


def test_the_refusal_names_the_holders_host(tmp_path):
    """On a cluster the output folder is shared between nodes: a pid alone named a process of another node (a
    ``kill`` of it on the login node hits an unrelated process). The line names the holder's host too."""
    import socket

    from monai_unc.io import output_lock, output_lock_holder

    with _Holder(tmp_path, "monai-unc infer") as holder:
        with pytest.raises(ValueError) as e:
            with output_lock(tmp_path, "monai-unc infer"):
                pass
        assert f"pid {holder.pid}, monai-unc infer, since " in str(e.value)
        assert f"host {socket.gethostname()}" in str(e.value) and "\n" not in str(e.value)
        assert f"host {socket.gethostname()}" in output_lock_holder(tmp_path)


def test_two_parts_writing_the_scores_table_at_once_lose_no_case(tmp_path):
    """``nnunet-predict -num_parts 2``: two parts ending together into one folder. Part A listed the records, part B
    wrote its last record and its table, then A wrote its table without B's last case (a case lost from
    ``uncertainty_scores.csv``; A's reading is slowed here as thousands of records are). The parts write the table
    one at a time, each listing under the lock."""
    import json
    import signal
    import time
    import traceback

    pytest.importorskip("nnunetv2", reason="needs the nnunet extra")
    from monai_unc.io import read_csv
    from monai_unc.nnunet import export

    (tmp_path / "uncertainty").mkdir()

    def record(case):
        return json.dumps({"case": case, "num_samples": 4, "foreground_voxels": 1,
                           "scores": {"predictive_entropy": {"mean": 0.1}}})

    (tmp_path / "uncertainty" / "a0.json").write_text(record("a0"))
    pid = os.fork()  # part A: a copy of this process (no interpreter start-up), its reading of the records slowed
    if pid == 0:
        code = 70
        try:
            real = export.json.loads

            def slow(t, *a, **k):
                (tmp_path / "listed").touch()
                time.sleep(3)
                return real(t, *a, **k)

            export.json.loads = slow
            export.write_scores_table(tmp_path)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    done = (0, 0)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "listed").exists() and time.monotonic() < deadline:  # A has listed and is reading
            time.sleep(0.05)
        (tmp_path / "uncertainty" / "b1.json").write_text(record("b1"))  # part B's last case, then its table
        export.write_scores_table(tmp_path)  # part B: this process
        deadline = time.monotonic() + 300
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert done[0] == pid and os.waitstatus_to_exitcode(done[1]) == 0
    finally:
        if done[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert [r["case"] for r in read_csv(tmp_path / "uncertainty_scores.csv")] == ["a0", "b1"]
