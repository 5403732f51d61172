"""Two runs into one output folder at the same time (review D): the second is refused before it writes anything.

The second run is another process (``monai_unc.cli.main(...)`` in a process of its own: the fixture ``other_process``)
started while the first is inside its cases.

Both would write the same temporary names and each removes the other's at its start (``clean_partial_files``), so
the first run's files could be corrupted or lost. A run holds its output folder (:func:`monai_unc.io.output_lock`)
from the listing of its cases to its last cohort file; a second ``monai-unc evaluate`` / ``infer`` into the folder
meanwhile exits 2 with one line, and the first run's outputs equal those of a run alone. A run killed with SIGKILL
leaves no lock behind.
"""

from __future__ import annotations

import json
import os
import signal
import warnings
from pathlib import Path

import pytest

from monai_unc.cli import main
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.io import OUTPUT_LOCK_FILE, output_lock
from tests._cases import run_toy_infer, toy_infer_files
from tests._holders import ForkedHolder
from tests._interpreter import ForkServer

ROOT = Path(__file__).resolve().parents[2]


#: imported once by the server of the second runs (their copies inherit them; nothing run: no thread started)
_PRELUDE = "import torch, monai, monai_unc.cli, monai_unc.evaluation, monai_unc.workflows.evaluate\n" \
    "import monai_unc.workflows.infer, monai_unc.workflows.report"


@pytest.fixture(scope="module")
def other_process():
    """``run(argv)``: ``monai-unc ARGV`` in another process, its exit status and stderr.

    Each run is a process of its own, forked from one fresh interpreter of this module (:class:`~tests._interpreter.
    ForkServer`) that imported torch, MONAI and the commands once and runs nothing itself: a clean process as
    ``python -c`` starts it, with one thread (``OMP_NUM_THREADS=1``), that opens the folder's lock file itself,
    without paying the 5-8 s of CPU of those imports at every second run. A run that does not end within 300 s is
    killed and fails the test.
    """
    server = ForkServer(_PRELUDE, {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})

    def run(argv: list[str]) -> tuple[int, str]:
        code, _, err = server.run(f"import sys\nfrom monai_unc.cli import main\nsys.exit(main({argv!r}))", 300)
        return code, err

    try:
        yield run
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    return write_toy_cohort(tmp_path_factory.mktemp("concurrent"), n_cases=3, shape=(8, 8, 8))


def _evaluate_argv(cohort, out):
    return ["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o", str(out),
            "--no-spatial", "-q"]


def _evaluate(cohort, out):
    return main(_evaluate_argv(cohort, out))


@pytest.mark.slow
def test_a_second_evaluate_into_a_busy_folder_is_refused(cohort, tmp_path, monkeypatch, capsys, other_process):
    from monai_unc.evaluation import runner

    out, alone = tmp_path / "eval", tmp_path / "alone"
    real = runner._evaluate_record
    second: list[tuple[int, str]] = []

    def case_then_second_run(files, config, *rest):
        if not second:  # while the first run is inside its cases: the same command into the same folder
            second.append(other_process(_evaluate_argv(cohort, out)))
        return real(files, config, *rest)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        monkeypatch.setattr(runner, "_evaluate_record", case_then_second_run)
        assert _evaluate(cohort, out) == 0
        monkeypatch.setattr(runner, "_evaluate_record", real)
        assert _evaluate(cohort, alone) == 0
    status, err = second[0]
    assert status == 2, err
    lines = [x for x in err.strip().splitlines() if "Warning" not in x and "warnings.warn" not in x]
    assert len(lines) == 1 and "another run" in err and str(out) in err and "pid" in err, err
    assert (out / "metrics.csv").read_bytes() == (alone / "metrics.csv").read_bytes()
    assert sorted(p.name for p in (out / "state" / "cases").iterdir()) == \
        sorted(p.name for p in (alone / "state" / "cases").iterdir())
    assert not (out / OUTPUT_LOCK_FILE).exists()  # released at the end


@pytest.mark.slow
def test_a_second_infer_into_a_busy_folder_is_refused(tmp_path, monkeypatch, capsys, other_process):
    from monai_unc.workflows import infer

    toy = toy_infer_files(tmp_path / "toy", n_cases=2)
    out, alone = tmp_path / "pred", tmp_path / "alone"
    real = infer.predict_case
    second: list[tuple[int, str]] = []

    def case_then_second_run(*args, **kwargs):
        if not second:
            second.append(other_process(["infer", "-i", str(toy["images"]), "-o", str(out), "--network",
                                          str(toy["spec"]), "--checkpoint", str(toy["ckpt"]), "--samples", "3",
                                          "--device", "cpu", "--quiet", "--seed", "0"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(infer, "predict_case", case_then_second_run)
    assert run_toy_infer(toy, out, "--seed", "0") == 0
    monkeypatch.setattr(infer, "predict_case", real)
    assert run_toy_infer(toy, alone, "--seed", "0") == 0
    status, err = second[0]
    assert status == 2 and "another run" in err, err
    got = {p.name: p.read_bytes() for p in out.glob("*.nii.gz")}
    assert got == {p.name: p.read_bytes() for p in alone.glob("*.nii.gz")} and len(got) >= 2


@pytest.mark.slow
def test_a_second_infer_while_the_first_writes_its_dicom_objects_is_refused(tmp_path, monkeypatch, other_process):
    """``infer --output-format both`` wrote its DICOM objects after the folder's lock was released: a second run into
    the folder could then rewrite the NIfTI outputs the export was reading, or its objects. The folder stays the first
    run's until its last DICOM object (and ``dicom_export.json``) is written."""
    pytest.importorskip("highdicom", reason="needs the dicom extra")
    import torch
    from monai.networks.nets import UNet

    from monai_unc.workflows import dicom
    from tests._cases import TOY_NET
    from tests.io.dicom._series import make_series

    images, out = tmp_path / "images", tmp_path / "pred"
    make_series(images / "ct01", "anisotropic_ct")
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), tmp_path / "net.pt")
    (tmp_path / "net.json").write_text(json.dumps(TOY_NET))
    argv = ["infer", "-i", str(images), "-o", str(out), "--network", str(tmp_path / "net.json"), "--checkpoint",
            str(tmp_path / "net.pt"), "--samples", "2", "--device", "cpu", "-q", "--seed", "0",
            "--output-format", "both", "--uid-root", "1.2.826.0.1.3680043.10.778."]
    real = dicom._export_case
    second: list[tuple[int, str]] = []

    def export_then_second_run(*args, **kwargs):
        if not second:  # while the first run writes its DICOM objects: the same command into the same folder
            second.append(other_process(argv))
        return real(*args, **kwargs)

    monkeypatch.setattr(dicom, "_export_case", export_then_second_run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(argv) == 0
    status, err = second[0]
    assert status == 2 and "another run" in err, err
    manifest = json.loads((out / "dicom" / "dicom_export.json").read_text())
    assert sorted(manifest["cases"]) == ["ct01"]
    assert not (out / OUTPUT_LOCK_FILE).exists()  # released at the end


def test_a_killed_holder_leaves_no_lock(tmp_path):
    pid = os.fork()  # another process (a copy of this one: no interpreter start-up) killed while it holds the folder
    if pid == 0:
        try:
            with output_lock(tmp_path, "killed"):
                os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(70)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == -9
    assert (tmp_path / OUTPUT_LOCK_FILE).exists()  # the file stays, the lock does not
    with output_lock(tmp_path, "next"):
        pass
    assert not (tmp_path / OUTPUT_LOCK_FILE).exists()


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_triage_into_an_evaluation_folder_is_refused(cohort, tmp_path, capsys):
    """The triage would replace the evaluation's derived maps (``maps/``, drawn by its report) and ``state/cases/``."""
    import shutil

    preds = tmp_path / "preds"
    shutil.copytree(cohort["predictions"], preds)
    for p in preds.glob("*.nii.gz"):  # no map files: evaluate (and triage) derive the maps from the probabilities
        if not p.name.endswith(("_probs.nii.gz", "_seg.nii.gz")):
            p.unlink()
    ev = tmp_path / "ev"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["evaluate", "-l", str(cohort["labels"]), "-p", str(preds), "-o", str(ev), "--no-spatial", "-q",
                     "--target-risk", "0.5"]) == 0
        before = _tree(ev)
        assert any(k.startswith("maps/") for k in before)
        capsys.readouterr()
        assert main(["triage", "-p", str(preds), "--rule", str(ev / "referral_rule.json"), "-o", str(ev),
                     "-q"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "monai-unc evaluate" in err, err
        assert _tree(ev) == before  # nothing written
        assert main(["triage", "-p", str(preds), "--rule", str(ev / "referral_rule.json"), "-o", str(ev / "triage"),
                     "-q"]) == 0  # a folder of its own (inside the evaluation) is fine
        capsys.readouterr()
        assert main(["evaluate", "-l", str(cohort["labels"]), "-p", str(preds), "-o", str(ev / "triage"),
                     "--no-spatial", "-q"]) == 2  # and the other way round
        assert "monai-unc triage" in capsys.readouterr().err


@pytest.mark.slow
def test_a_second_triage_while_the_first_writes_its_page_is_refused(cohort, tmp_path, monkeypatch, other_process):
    """The folder stays the first run's until ``triage.html`` is written (after the engine's cohort step)."""
    from monai_unc.workflows import report

    tri = tmp_path / "tri"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main([*_evaluate_argv(cohort, tmp_path / "ev_rule"), "--target-risk", "0.5"]) == 0
    rule = tmp_path / "ev_rule" / "referral_rule.json"
    argv = ["triage", "-p", str(cohort["predictions"]), "--rule", str(rule), "-o", str(tri), "-q"]
    real = report.build_triage_page
    second: list[tuple[int, str]] = []

    def page_then_second_run(*args, **kwargs):
        second.append(other_process(argv))
        return real(*args, **kwargs)

    monkeypatch.setattr(report, "build_triage_page", page_then_second_run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(argv) == 0
    status, err = second[0]
    assert status == 2 and "another run" in err, err
    assert (tri / "triage.html").is_file() and not (tri / OUTPUT_LOCK_FILE).exists()


def test_a_file_system_without_flock_runs_unlocked(tmp_path, monkeypatch):
    """ENOLCK / EOPNOTSUPP (a file system mounted without flock) is no other run: the run goes on, unlocked."""
    import errno
    import fcntl

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    with output_lock(tmp_path / "out", "toy"):
        assert (tmp_path / "out").is_dir()
    assert not (tmp_path / "out" / OUTPUT_LOCK_FILE).exists()


def test_a_refused_run_leaves_no_new_folder(tmp_path):
    out = tmp_path / "new"
    holder = ForkedHolder(lambda: output_lock(tmp_path / "held", "holder"), hold_s=60)
    try:
        with pytest.raises(ValueError, match="another run .*pid"):
            with output_lock(tmp_path / "held", "second"):
                pass
        with output_lock(out, "x"):
            pass
        assert not out.exists()  # created for the run and left empty: removed
    finally:
        holder.kill()
        holder.wait()
