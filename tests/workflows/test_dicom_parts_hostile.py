"""Hostile runs of the DICOM export of the parts of one ``nnunet-predict`` run and of the removal of an earlier run's
objects (:mod:`monai_unc.workflows.dicom`): planted files, a part of no case, runs taken as one.

nnU-Net's prediction is a stand-in (:class:`~tests.workflows.test_dicom_hostile.FakePredict`).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import unicodedata
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")
pytest.importorskip("nnunetv2")

from monai_unc.cli import main  # noqa: E402
from monai_unc.io.dicom import write_series  # noqa: E402
from monai_unc.workflows.dicom import EXPORT_RECORD, _part_run, nnunet_predict_dicom  # noqa: E402

from .test_dicom_hostile import FakePredict, _args, _maps  # noqa: E402
from .test_dicom_parts import _listed  # noqa: E402


def _finishes(fn, timeout: float = 30.0) -> int | None:
    """``fn()``'s return value as the exit status of a forked process; None when it was still running after
    ``timeout`` seconds (killed)."""
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=lambda: os._exit(fn()))
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return None
    return proc.exitcode


@pytest.mark.parametrize("where", ["stale case", "case of the run", "manifest"])
def test_a_fifo_in_the_export_folder_blocks_nothing(series, tmp_path, where):
    """Found by hostile testing: a FIFO planted as ``<case>/x.dcm`` (of a stale case, whose objects are removed, or of
    a case of the run, checked for files of another origin) or as ``dicom_export.json`` was opened to be read, which
    blocked the export forever. A FIFO is no export's object (a stale case's folder is left, with a warning; a case
    of the run is refused in one line) and no manifest."""
    pred, out = tmp_path / "pred", tmp_path / "out"
    for case in ("ct01", "ct02"):
        _maps(pred, series, case, ["predictive_entropy"], "monai-unc")
    export = ["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(out), "-q"]
    assert main(export) == 0
    if where == "stale case":
        for f in pred.glob("ct02*"):
            f.unlink()
    if where == "manifest":
        (out / EXPORT_RECORD).unlink()
        os.mkfifo(out / EXPORT_RECORD)
    else:
        os.mkfifo(out / "ct02" / "zz.dcm")
    status = _finishes(lambda: main(export))
    assert status is not None, f"a FIFO as {where} blocked the export"
    assert status == (2 if where == "case of the run" else 0)
    if where == "stale case":
        assert (out / "ct02" / "zz.dcm").exists() and (out / "ct02" / "seg.dcm").is_file()
    if where == "manifest":
        assert sorted(_listed(out)) == ["ct01", "ct02"]


@pytest.mark.parametrize("fmt", ["both", "dicom"])
def test_a_part_of_no_case_succeeds(series, tmp_path, capsys, fmt):
    """Found by hostile testing: ``-num_parts 4`` on three cases: part 3, of no case (nnU-Net predicts nothing),
    failed with "no segmentation found" (exit 2). It exports nothing and keeps the other parts' entries; the manifest
    lists every case."""
    out = tmp_path / "pred"
    statuses = [nnunet_predict_dicom(_args(series, out, "--output-format", fmt, "-num_parts", "4", "-part_id", str(k)),
                                     FakePredict(series, out)) for k in (3, 0, 1, 2, 3)]
    assert statuses == [0] * 5, capsys.readouterr().err
    assert "dicom: 0 DICOM object(s) for 0 case(s)" in capsys.readouterr().out
    assert sorted(_listed(out / "dicom" if fmt == "both" else out)) == ["ct01", "ct02", "ct03"]


def test_a_part_of_no_case_removes_the_objects_of_a_removed_series(series, tmp_path, capsys):
    """A part of no case still removes an earlier run's objects of a series since removed from the input."""
    images, out = tmp_path / "images", tmp_path / "pred"
    shutil.copytree(series, images)
    assert nnunet_predict_dicom(_args(images, out, "--output-format", "dicom"), FakePredict(images, out)) == 0
    shutil.rmtree(images / "ct03")
    assert nnunet_predict_dicom(_args(images, out, "--output-format", "dicom", "-num_parts", "3", "-part_id", "2"),
                                FakePredict(images, out)) == 0, capsys.readouterr().err
    assert not (out / "ct03").exists()


def test_runs_that_differ_in_what_their_arguments_name_are_other_runs(series, tmp_path):
    """Found by hostile testing: the run identity of a part (``_part_run``) was a digest of the arguments: a
    ``--segments`` file whose content changed between the parts' starts, a series added to the input (another split
    of the cases among the parts) or a model whose checkpoint was replaced were taken as the same run, their entries
    mixed in one manifest."""
    images, model = tmp_path / "images", tmp_path / "model"
    shutil.copytree(series, images)
    (model / "fold_0").mkdir(parents=True)
    (model / "fold_0" / "checkpoint_final.pth").write_bytes(b"weights 1")
    segments = tmp_path / "segments.json"
    segments.write_text(json.dumps({"1": {"label": "tumour"}}))

    def run() -> str:
        args = _args(images, tmp_path / "out", "--output-format", "dicom", "-num_parts", "2", "-part_id", "0",
                     "--segments", str(segments))
        args.m = str(model)
        return _part_run(args)

    first = run()
    assert run() == first  # the parts of one run: the same
    segments.write_text(json.dumps({"1": {"label": "liver"}}))
    assert run() != first
    first = run()
    write_series(np.zeros((8, 7, 4)), np.diag([1.0, 1.0, 2.0, 1.0]), images / "ct00", modality="CT")
    assert run() != first
    first = run()
    (model / "fold_0" / "checkpoint_final.pth").write_bytes(b"weights 2, retrained")
    assert run() != first


@pytest.mark.parametrize("old, new", [("ct03", "CT03"), (unicodedata.normalize("NFD", "cé03"),
                                                       unicodedata.normalize("NFC", "cé03"))])
def test_the_objects_of_a_case_renamed_in_case_only_are_removed(series, tmp_path, capsys, old, new):
    """Found by hostile testing: the stale cases of the earlier manifest compared with the run's cases without case,
    so that after a series folder renamed ``ct03`` -> ``CT03`` the earlier run's ``ct03/`` stayed beside the new
    ``CT03/``, unlisted (a PACS sent both); the same for a name in another Unicode normalisation (NFD -> NFC). On a
    file system that tells them apart it is removed; a name of the same folder (a case-folding or normalising file
    system) is kept."""
    images, out = tmp_path / "images", tmp_path / "pred"
    shutil.copytree(series, images)
    (images / "ct03").rename(images / old)
    assert nnunet_predict_dicom(_args(images, out, "--output-format", "dicom"), FakePredict(images, out)) == 0
    (images / old).rename(images / new)
    assert nnunet_predict_dicom(_args(images, out, "--output-format", "dicom"), FakePredict(images, out)) == 0, \
        capsys.readouterr().err
    assert (out / new / "seg.dcm").is_file()
    if not (out / old).exists() or not os.path.samefile(out / old, out / new):
        assert not (out / old).exists()
    assert sorted(_listed(out)) == sorted(["ct01", "ct02", new])


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_run_killed_while_it_removes_a_stale_case_leaves_no_manifest_listing_it(series, tmp_path, parts, when,
                                                                                  monkeypatch):
    """Found by hostile testing: the earlier run's objects of a case no longer in the run were removed before the
    earlier manifest was replaced: a run killed (SIGKILL) or failing on a file meanwhile left the manifest listing
    objects that no longer existed. Every object a manifest lists exists, whenever the run stops; the next run
    completes and removes the stale case, and what the killed run left of nnU-Net's files (review 75: in the system's
    temporary folder, for good, at every run of this test)."""
    import signal
    import tempfile

    import monai_unc.workflows.dicom as dicom

    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))  # the forked run's too
    images, out = tmp_path / "images", tmp_path / "pred"
    shutil.copytree(series, images)
    assert nnunet_predict_dicom(_args(images, out, "--output-format", "dicom"), FakePredict(images, out)) == 0
    shutil.rmtree(images / "ct03")
    split = ("-num_parts", "2", "-part_id", "0") if parts == 2 else ()

    def killed() -> int:
        def kill(folder, *rest):  # before the stale case's objects are removed, or after (not yet its folder)
            if Path(folder).name == "ct03":
                os.kill(os.getpid(), signal.SIGKILL)
            return step(folder, *rest)

        name = "_foreign_object" if when == "before" else "clean_partial_files"
        step = getattr(dicom, name)
        setattr(dicom, name, kill)
        return nnunet_predict_dicom(_args(images, out, "--output-format", "dicom", *split), FakePredict(images, out))

    assert _finishes(killed) == -signal.SIGKILL
    if (out / EXPORT_RECORD).exists():
        doc = json.loads((out / EXPORT_RECORD).read_text())
        for entry in doc["cases"].values():
            assert all((out / o["file"]).is_file() for o in entry["objects"]), doc
    assert list(system_tmp.iterdir()) == []
    assert nnunet_predict_dicom(_args(images, out, "--output-format", "dicom"), FakePredict(images, out)) == 0
    assert not (out / "ct03").exists() and sorted(_listed(out)) == ["ct01", "ct02"]
    assert list(out.glob(".*.partial*")) == [] and list(system_tmp.iterdir()) == []


def test_a_killed_dicom_run_leaves_no_prediction_in_the_system_temporary_folder(series, tmp_path, monkeypatch):
    """Found by review 75: ``nnunet-predict --output-format dicom`` made nnU-Net's files (a patient's segmentation and
    maps) in ``/tmp/monai-unc-nnunet-*``, which a killed run (SIGKILL, the OOM killer) left there for good. They are
    made in a scratch folder inside the output folder now: a killed run leaves nothing in the system's temporary
    folder, and the next run into the output folder removes what it left there."""
    import signal
    import tempfile

    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))  # the forked run's too
    out = tmp_path / "pred"

    def killed() -> int:
        fake = FakePredict(series, out)

        def predict(args) -> int:  # nnU-Net's files written, the run killed before its export
            fake(args)
            os.kill(os.getpid(), signal.SIGKILL)
            return 0

        return nnunet_predict_dicom(_args(series, out, "--output-format", "dicom"), predict)

    assert _finishes(killed) == -signal.SIGKILL
    assert list(system_tmp.iterdir()) == []
    left = list(out.glob(".predictions.partial-nnunet-*.dir"))
    assert len(left) == 1 and (left[0] / "predictions" / "ct01.nii.gz").is_file()
    assert nnunet_predict_dicom(_args(series, out, "--output-format", "dicom"), FakePredict(series, out)) == 0
    assert sorted(_listed(out)) == ["ct01", "ct02", "ct03"]
    assert list(out.glob(".*.partial*")) == [] and list(system_tmp.iterdir()) == []
