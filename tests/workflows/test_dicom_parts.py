"""The DICOM export of the parts of one ``nnunet-predict`` run into one folder, and the objects of a case that is no
longer a case of the run (:mod:`monai_unc.workflows.dicom`).

Issues: the folder of objects of a case no longer in a run (its predictions removed, its series removed from the
input) stayed in the export folder, unlisted by the new ``dicom_export.json``: a site sending every ``*.dcm`` of the
folder to a PACS sent an earlier run's objects. ``nnunet-predict -num_parts 2 --output-format dicom|both`` into one
``-o``: run one after the other, the manifest listed the last part's cases only; run at the same time (one GPU
each), the second part was refused ("is being written by another run").

nnU-Net's prediction is a stand-in (:class:`~tests.workflows.test_dicom_hostile.FakePredict`), so that the tests
are fast.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from tests._holders import ForkedHolder

pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")
pytest.importorskip("nnunetv2")

from monai_unc.cli import main  # noqa: E402
from monai_unc.io import output_lock_holder, part_lock  # noqa: E402
from monai_unc.io.dicom import write_series  # noqa: E402
from monai_unc.workflows.dicom import EXPORT_RECORD, dicom_export, nnunet_predict_dicom  # noqa: E402

from .test_dicom_hostile import ROOT_UID, FakePredict, _args, _maps  # noqa: E402

OTHER_ROOT = "1.2.826.0.1.3680043.10.780."


def _export_folder(out: Path, fmt: str) -> Path:
    return out / "dicom" if fmt == "both" else out


def _listed(folder: Path) -> dict[str, list[str]]:
    """The objects ``dicom_export.json`` lists, by case; every one exists, and no other ``*.dcm`` is in the folder."""
    doc = json.loads((folder / EXPORT_RECORD).read_text())
    listed = {case: sorted(o["file"] for o in entry["objects"]) for case, entry in doc["cases"].items()}
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.dcm"))
    assert files == sorted(f for objects in listed.values() for f in objects), (files, listed)
    return listed


def _content(path: Path) -> list:
    """An object's attributes but its UIDs, dates and times (new with every run)."""
    import pydicom

    ds = pydicom.dcmread(path)
    return [(e.tag, e.value) for e in ds.iterall() if e.VR not in ("UI", "DA", "TM", "DT", "SQ")]


def _parts(images: Path, out: Path, fmt: str, *extra: str, barrier=None) -> list[int]:
    """Part 0, then part 1 of a two-part run (each with its stand-in prediction); their exit statuses."""
    return [nnunet_predict_dicom(_args(images, out, "--output-format", fmt, "-num_parts", "2", "-part_id", str(k),
                                       *extra), FakePredict(images, out, barrier)) for k in (0, 1)]


def test_dicom_export_removes_the_objects_of_a_case_no_longer_predicted(series, tmp_path):
    """``dicom-export`` after a case's predictions were removed: its folder of objects goes (after every check: a
    refused run removes nothing), and a stale folder holding a DICOM file that no export wrote is left, with a
    warning."""
    pred, out = tmp_path / "pred", tmp_path / "out"
    for case in ("ct01", "ct02", "ct03"):
        _maps(pred, series, case, ["predictive_entropy"], "monai-unc")
    export = ["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(out), "-q"]
    assert main(export) == 0
    for f in pred.glob("ct03*"):
        f.unlink()
    images = tmp_path / "images"  # ct02's series missing: refused before any object
    shutil.copytree(series / "ct01", images / "ct01")
    assert main(["dicom-export", "-p", str(pred), "-s", str(images), "-o", str(out), "-q"]) == 2
    assert (out / "ct03" / "seg.dcm").is_file()
    assert main(export) == 0
    assert not (out / "ct03").exists()
    assert sorted(_listed(out)) == ["ct01", "ct02"]

    # a stale case's folder with the site's own DICOM file: nothing of it removed, a warning
    shutil.copy(sorted((series / "ct02").iterdir())[0], out / "ct02" / "site.dcm")
    for f in pred.glob("ct02*"):
        f.unlink()
    kept = sorted(p.name for p in (out / "ct02").iterdir())
    with pytest.warns(UserWarning, match=r"case ct02 of the earlier dicom_export\.json is no case of this run, but "
                                         r".*site\.dcm is not an object of an earlier dicom-export.*is left as it is"):
        result = dicom_export(pred, series, out, uid_root=ROOT_UID, progress=False)
    assert sorted(result.cases) == ["ct01"]
    assert sorted(p.name for p in (out / "ct02").iterdir()) == kept


@pytest.mark.parametrize("fmt", ["both", "dicom"])
def test_nnunet_dicom_removes_the_objects_of_a_series_removed_from_the_input(series, tmp_path, fmt):
    """``nnunet-predict --output-format both|dicom`` again after a series was removed from the input: the earlier
    run's objects of its case are removed, the manifest lists the run's cases and nothing else is left."""
    images, out = tmp_path / "images", tmp_path / "pred"
    shutil.copytree(series, images)
    assert nnunet_predict_dicom(_args(images, out, "--output-format", fmt), FakePredict(images, out)) == 0
    assert (_export_folder(out, fmt) / "ct03" / "seg.dcm").is_file()
    shutil.rmtree(images / "ct03")
    assert nnunet_predict_dicom(_args(images, out, "--output-format", fmt), FakePredict(images, out)) == 0
    assert not (_export_folder(out, fmt) / "ct03").exists()
    assert sorted(_listed(_export_folder(out, fmt))) == ["ct01", "ct02"]


@pytest.mark.parametrize("fmt", ["both", "dicom"])
def test_nnunet_parts_one_after_the_other_list_every_case(series, tmp_path, fmt):
    """``-num_parts 2``, part 0 then part 1 into one folder: the manifest lists the cases of both parts (it listed
    part 1's only), and the objects are those of a one-part run but for their UIDs; an earlier run's objects of a
    series since removed from the input are removed."""
    whole = tmp_path / "whole"
    assert nnunet_predict_dicom(_args(series, whole, "--output-format", fmt), FakePredict(series, whole)) == 0
    images, out = tmp_path / "images", tmp_path / "parts"
    shutil.copytree(series, images)
    write_series(np.zeros((8, 7, 4)), np.diag([1.0, 1.0, 2.0, 1.0]), images / "ct04", modality="CT")
    assert nnunet_predict_dicom(_args(images, out, "--output-format", fmt), FakePredict(images, out)) == 0
    shutil.rmtree(images / "ct04")  # an earlier run's case, since removed from the input
    assert _parts(images, out, fmt) == [0, 0]
    listed = _listed(_export_folder(out, fmt))
    assert listed == _listed(_export_folder(whole, fmt)) and sorted(listed) == ["ct01", "ct02", "ct03"]
    for files in listed.values():
        for f in files:
            assert _content(_export_folder(out, fmt) / f) == _content(_export_folder(whole, fmt) / f), f
    assert not [p.name for p in out.iterdir() if p.name.startswith(".monai-unc")]  # no lock file left


def _part_process(images: Path, out: Path, fmt: str, part: int, barrier) -> None:
    sys.exit(nnunet_predict_dicom(_args(images, out, "--output-format", fmt, "-num_parts", "2", "-part_id",
                                        str(part)), FakePredict(images, out, barrier)))


@pytest.mark.parametrize("fmt", ["both", "dicom"])
def test_nnunet_parts_at_the_same_time_share_the_folder(series, tmp_path, fmt):
    """The two parts of a run at the same time (two processes, as on two GPUs), both predictions finished before
    either export starts: both succeed (the second was refused), the manifest lists every case, every object it
    lists exists and no object is unlisted."""
    out = tmp_path / "pred"
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_part_process, args=(series, out, fmt, k, barrier)) for k in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert sorted(_listed(_export_folder(out, fmt))) == ["ct01", "ct02", "ct03"]
    assert not [p.name for p in out.iterdir() if p.name.startswith(".monai-unc")]


def test_nnunet_parts_drop_the_entries_of_a_run_with_other_settings(series, tmp_path):
    """A part of a run with other settings (another ``--uid-root``) than the manifest's: the other run's entries are
    dropped (never listed beside this run's), their objects left to the part of their case; the run's second part
    completes the manifest. A later run of one part replaces the manifest whole."""
    import pydicom

    out = tmp_path / "pred"
    assert _parts(series, out, "dicom") == [0, 0]
    assert nnunet_predict_dicom(_args(series, out, "--output-format", "dicom", "-num_parts", "2", "-part_id", "0",
                                      "--uid-root", OTHER_ROOT), FakePredict(series, out)) == 0
    doc = json.loads((out / EXPORT_RECORD).read_text())
    assert sorted(doc["cases"]) == ["ct01", "ct03"] and doc["uid_root"] == OTHER_ROOT
    assert (out / "ct02" / "seg.dcm").is_file()  # the other run's object of part 1's case, until part 1 runs
    assert nnunet_predict_dicom(_args(series, out, "--output-format", "dicom", "-num_parts", "2", "-part_id", "1",
                                      "--uid-root", OTHER_ROOT), FakePredict(series, out)) == 0
    listed = _listed(out)
    assert sorted(listed) == ["ct01", "ct02", "ct03"]
    for files in listed.values():
        for f in files:
            assert str(pydicom.dcmread(out / f, stop_before_pixels=True).SOPInstanceUID).startswith(OTHER_ROOT)
    assert nnunet_predict_dicom(_args(series, out, "--output-format", "dicom"), FakePredict(series, out)) == 0
    doc = json.loads((out / EXPORT_RECORD).read_text())
    assert "run" not in doc and doc["uid_root"] == ROOT_UID and sorted(_listed(out)) == ["ct01", "ct02", "ct03"]


def _hold_part(out: Path, run: str, part: int) -> ForkedHolder:
    """Another process holding ``out`` as part ``part`` of ``run``, until killed."""
    return ForkedHolder(lambda: part_lock(out, run, part, "nnunet-predict"), hold_s=60)


def test_another_run_is_refused_while_a_part_holds_the_folder(series, tmp_path, capsys, monkeypatch):
    """While a part of a run holds the folder: a part of a run with other settings, a run of one part,
    ``dicom-export`` and the same part of the run in another process are refused in one line before they write
    anything (a reader sees the hold); the run's other part goes on."""
    from monai_unc.workflows.dicom import _part_run

    monkeypatch.setattr("monai_unc.workflows.dicom._PART_WAIT", 0.2)
    out = tmp_path / "pred"
    part1 = _args(series, out, "--output-format", "dicom", "-num_parts", "2", "-part_id", "1")
    holder = _hold_part(out, "0123456789abcdef", 0)  # a part of another run
    try:
        assert output_lock_holder(out).startswith("run 0123456789abcdef, part 0")
        pred = tmp_path / "nifti"
        _maps(pred, series, "ct01", ["predictive_entropy"], "monai-unc")
        for attempt in (lambda: nnunet_predict_dicom(part1, FakePredict(series, out)),
                        lambda: nnunet_predict_dicom(_args(series, out, "--output-format", "dicom"),
                                                     FakePredict(series, out)),
                        lambda: main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(out), "-q"])):
            capsys.readouterr()
            assert attempt() == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "is being written by another run (run 0123456789abcdef, part 0" in err[0], err
        assert not list(out.rglob("*.dcm"))
    finally:
        holder.kill()
        holder.wait()
    holder = _hold_part(out, _part_run(part1), 0)  # part 0 of this run
    try:
        part0 = _args(series, out, "--output-format", "dicom", "-num_parts", "2", "-part_id", "0")
        capsys.readouterr()
        assert nnunet_predict_dicom(part0, FakePredict(series, out)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "part 0 of this run is being written by another process" in err[0], err
        assert nnunet_predict_dicom(part1, FakePredict(series, out)) == 0, capsys.readouterr().err
        assert sorted(_listed(out)) == ["ct02"]
    finally:
        holder.kill()
        holder.wait()


class _FailingPredict(FakePredict):
    """A prediction whose segmentation of ``ct02`` holds a value no segmentation holds: its export fails."""

    def __call__(self, args):
        status = super().__call__(args)
        from monai_unc.io import read_volume, save_nifti

        seg = Path(args.o) / "ct02.nii.gz"
        if seg.is_file():
            values, affine = read_volume(seg)
            save_nifti(np.full(values.shape[1:], 0.5, np.float32), affine, seg)
        return status


def test_a_failed_part_leaves_no_entry_of_its_cases(series, tmp_path, capsys):
    """A part whose export fails (after the run's other part exported) leaves the manifest listing the other part's
    cases, and none of its own (whose objects it may have replaced or removed), as a run of one part that fails leaves
    no manifest."""
    out = tmp_path / "pred"
    assert _parts(series, out, "dicom") == [0, 0]
    args = _args(series, out, "--output-format", "dicom", "-num_parts", "2", "-part_id", "1")
    capsys.readouterr()
    assert nnunet_predict_dicom(args, _FailingPredict(series, out)) == 2
    assert "ct02" in capsys.readouterr().err
    doc = json.loads((out / EXPORT_RECORD).read_text())
    assert sorted(doc["cases"]) == ["ct01", "ct03"]  # ct02's earlier objects are no longer listed
