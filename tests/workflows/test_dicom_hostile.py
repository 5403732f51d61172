"""Hostile runs of the DICOM export (:mod:`monai_unc.workflows.dicom`): prediction folders that hold the outputs of
an earlier run (a case since removed from the input), two runs into one output folder.

``nnunet-predict --output-format dicom|both`` is run with a stand-in for nnU-Net's prediction (it writes the
segmentations nnU-Net would write, on the series' grid), so that the tests are fast; the prediction itself is
tested in ``test_dicom_nnunet.py``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")
pytest.importorskip("nnunetv2")

from monai_unc.cli import build_parser, main  # noqa: E402
from monai_unc.io import OUTPUT_LOCK_FILE, save_nifti, save_probabilities  # noqa: E402
from monai_unc.io.dicom import read_series, write_series  # noqa: E402
from monai_unc.workflows.dicom import EXPORT_RECORD, nnunet_predict_dicom  # noqa: E402
from tests._argv import with_options  # noqa: E402
from tests._holders import ForkedHolder

ROOT_UID = "1.2.826.0.1.3680043.10.779."


def _args(images: Path, out: Path, *extra: str) -> argparse.Namespace:
    parser, _ = build_parser("nnunet-predict")
    return parser.parse_args(with_options(["nnunet-predict", "-i", str(images), "-o", str(out), "-m", "model", "-f",
                                           "0", "--disable_progress_bar", "--uid-root", ROOT_UID], *extra))


def _seg(images: Path, case: str, out: Path) -> None:
    grid = read_series(images / case, pixels=False)
    seg = np.zeros(grid.shape, np.uint8)
    seg[2:5, 2:5, 1:3] = 1
    save_nifti(seg, grid.affine, out / f"{case}.nii.gz")


def _held(lock: Path) -> bool:
    """Whether another open file holds ``lock`` (flock refuses a second one while held)."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


class FakePredict:
    """nnU-Net's prediction of the part's cases into ``args.o``; records whether the output folder was held (alone,
    ``.monai-unc.lock``, or as a part of a run, ``.monai-unc.part-<part>.lock``); with ``barrier``, waits there for
    the other parts' predictions before it returns (their exports start together)."""

    def __init__(self, images: Path, held: Path, barrier=None) -> None:
        self.images, self.held, self.locked, self.barrier = images, held, [], barrier

    def __call__(self, args: argparse.Namespace) -> int:
        out = Path(args.o)
        out.mkdir(parents=True, exist_ok=True)
        self.locked.append(_held(self.held / OUTPUT_LOCK_FILE)
                           or any(_held(p) for p in self.held.glob(".monai-unc.part-*.lock")))
        ids = sorted(p.name for p in self.images.iterdir())[args.part_id::args.num_parts]
        for case in ids:
            _seg(self.images, case, out)
        if self.barrier is not None:
            self.barrier.wait(timeout=60)
        return 0


def test_nnunet_both_exports_only_the_runs_cases(series, tmp_path, capsys):
    """Issue: ``nnunet-predict --output-format both`` exported every case of ``-o``: after an earlier run on a series
    since removed from the input (its ``old01.nii.gz`` still in ``-o``), the run failed at the export after the whole
    prediction (exit 2, "no source series for 1 case(s) (old01)"); it now exports the cases it predicted."""
    out = tmp_path / "pred"
    out.mkdir()
    old = tmp_path / "old_images"
    write_series(np.zeros((8, 7, 4)), np.diag([1.0, 1.0, 2.0, 1.0]), old / "old01", modality="CT")
    _seg(old, "old01", out)  # the earlier run's outputs
    fake = FakePredict(series, out)
    assert nnunet_predict_dicom(_args(series, out, "--output-format", "both"), fake) == 0, capsys.readouterr().err
    manifest = json.loads((out / "dicom" / EXPORT_RECORD).read_text())
    assert sorted(manifest["cases"]) == ["ct01", "ct02", "ct03"]
    assert not (out / "dicom" / "old01").exists()
    assert fake.locked == [True]  # the output folder was held while predicting
    assert not (out / OUTPUT_LOCK_FILE).exists()


@pytest.mark.parametrize("fmt", ["both", "dicom"])
def test_nnunet_dicom_exports_the_part_and_holds_the_output(series, tmp_path, capsys, fmt, monkeypatch):
    """``-num_parts 2 -part_id 1``: the cases of the part (nnU-Net's split of the sorted case ids) are exported,
    under the output folder's lock; a second run into the held folder is refused in one line."""
    from monai_unc.io import output_lock

    out = tmp_path / "pred"
    fake = FakePredict(series, out)
    args = _args(series, out, "--output-format", fmt, "-num_parts", "2", "-part_id", "1")
    assert nnunet_predict_dicom(args, fake) == 0, capsys.readouterr().err
    record = out / "dicom" / EXPORT_RECORD if fmt == "both" else out / EXPORT_RECORD
    assert sorted(json.loads(record.read_text())["cases"]) == ["ct02"]
    assert fake.locked == [True]
    # another process holds the folder: refused before the prediction
    holder = ForkedHolder(lambda: output_lock(out, "other"), hold_s=60)
    try:
        capsys.readouterr()
        second = FakePredict(series, out)
        # a part waits a moment for another process's short hold of the folder (a part's manifest update)
        monkeypatch.setattr("monai_unc.workflows.dicom._PART_WAIT", 0.2)
        assert nnunet_predict_dicom(args, second) == 2 and second.locked == []
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is being written by another run" in err[0], err
    finally:
        holder.kill()
        holder.wait()
    with output_lock(out, "check"):  # released
        pass


def _maps(pred: Path, images: Path, case: str, measures, layout: str, record=None) -> None:
    """A case's segmentation and maps as ``infer`` (``monai-unc``) or ``nnunet-predict`` writes them, with its record
    listing the maps ``record`` (default ``measures``)."""
    grid = read_series(images / case, pixels=False)
    seg = np.zeros(grid.shape, np.uint8)
    seg[2:5, 2:5, 1:3] = 1
    unc = pred / "uncertainty" if layout == "nnunet" else pred
    unc.mkdir(parents=True, exist_ok=True)
    save_nifti(seg, grid.affine, pred / (f"{case}.nii.gz" if layout == "nnunet" else f"{case}_seg.nii.gz"))
    for m in measures:
        save_nifti(np.full(grid.shape, 0.25, np.float32), grid.affine, unc / f"{case}_{m}.nii.gz")
    listed = measures if record is None else record
    if layout == "nnunet":
        doc = {"case": case, "maps": {m: f"{case}_{m}.nii.gz" for m in listed}}
        (unc / f"{case}.json").write_text(json.dumps(doc))
    else:
        doc = {"case": case, "files": [f"{case}_seg.nii.gz", *(f"{case}_{m}.nii.gz" for m in listed)]}
        (pred / f"{case}.json").write_text(json.dumps(doc))


def _exported_maps(out: Path, case: str) -> list[str]:
    return sorted(p.stem for p in (out / case).glob("*.dcm") if p.stem not in ("seg", "sr"))


def test_nnunet_export_leaves_out_an_earlier_runs_maps(series, tmp_path):
    """Issue: ``nnunet-predict`` run again with fewer ``--measures`` leaves the earlier run's other maps beside each
    case it predicted again (its record lists the new maps only); the export took every map found, so the DICOM
    objects held a mutual-information map of another prediction, labelled as this one's algorithm."""
    from monai_unc.workflows.dicom import dicom_export

    pred = tmp_path / "pred"
    for case in ("ct01", "ct02"):
        _maps(pred, series, case, ["predictive_entropy", "mutual_information"], "nnunet",
              record=["predictive_entropy"])
    result = dicom_export(pred, series, tmp_path / "out", layout="nnunet", uid_root=ROOT_UID, progress=False)
    assert sorted(result.cases) == ["ct01", "ct02"]
    for case in ("ct01", "ct02"):
        assert _exported_maps(tmp_path / "out", case) == ["predictive_entropy"]


def test_export_of_the_runs_cases_ignores_a_stale_case_with_other_measures(series, tmp_path):
    """Issue: ``infer --output-format both`` (``dicom_export(cases=...)``) after an earlier run with other measures on
    a case since removed from the input: the stale case's maps made the export demand them of every case, and the
    run failed at the export after the prediction ("3 of 3 case(s) lack files ... e.g. case 'ct00' has no
    predictive_entropy map ... (use --allow-missing to skip them)", an option dicom-export does not have)."""
    from monai_unc.workflows.dicom import dicom_export

    pred = tmp_path / "pred"
    _maps(pred, series, "ct01", ["predictive_entropy"], "monai-unc")
    _maps(pred, series, "ct02", ["predictive_entropy"], "monai-unc")
    stale = tmp_path / "old_images"
    write_series(np.zeros((8, 7, 4)), np.diag([1.0, 1.0, 2.0, 1.0]), stale / "ct00", modality="CT")
    _maps(pred, stale, "ct00", ["variance"], "monai-unc")  # sorts first: an earlier run's case
    result = dicom_export(pred, series, pred / "dicom", uid_root=ROOT_UID, progress=False, inside_predictions=True,
                          cases=["ct01", "ct02"])
    assert sorted(result.cases) == ["ct01", "ct02"]
    assert _exported_maps(pred / "dicom", "ct01") == ["predictive_entropy"]


def test_export_refuses_cases_predicted_with_other_measures(series, tmp_path):
    """Without ``cases`` (``monai-unc dicom-export``), a folder whose cases' records list different measures is
    refused in one message naming two cases and their measures, before anything is written (it was "1 of 3 case(s)
    lack files ... (use --allow-missing to skip them)", an option dicom-export does not have); ``measures`` given
    exports those maps of every case."""
    from monai_unc.workflows.dicom import dicom_export

    pred = tmp_path / "pred"
    _maps(pred, series, "ct01", ["predictive_entropy", "variance"], "monai-unc")
    _maps(pred, series, "ct02", ["predictive_entropy", "variance"], "monai-unc")
    _maps(pred, series, "ct03", ["predictive_entropy"], "monai-unc")
    with pytest.raises(ValueError, match=r"predicted with different measures \(e\.g\. case 'ct01': "
                                         r"predictive_entropy, variance; case 'ct03': predictive_entropy\)"):
        dicom_export(pred, series, tmp_path / "out", uid_root=ROOT_UID, progress=False)
    assert not (tmp_path / "out" / "ct01").exists()
    result = dicom_export(pred, series, tmp_path / "out", uid_root=ROOT_UID, progress=False,
                          measures=["predictive_entropy"])
    assert sorted(result.cases) == ["ct01", "ct02", "ct03"]
    assert _exported_maps(tmp_path / "out", "ct02") == ["predictive_entropy"]


def test_a_case_without_a_map_named_by_measures_suggests_an_option_dicom_export_has(series, tmp_path, capsys):
    """Found by hostile testing: the refusal of a case without a map said "(use --allow-missing to skip them)", an
    option of ``evaluate`` that ``dicom-export`` does not have; it names ``--measures`` now."""
    pred = tmp_path / "pred"
    _maps(pred, series, "ct01", ["predictive_entropy", "variance"], "monai-unc")
    _maps(pred, series, "ct02", ["predictive_entropy"], "monai-unc")
    rc = main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(tmp_path / "out"), "-q",
               "--measures", "predictive_entropy", "variance"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, (rc, err)
    assert "case 'ct02' has no variance map" in err[0] and "allow-missing" not in err[0], err
    assert err[0].endswith("(every case exported needs each map: name with --measures maps that every case has, "
                           "or export such cases apart)"), err


def test_export_takes_the_measures_of_the_folders_run(series, tmp_path):
    """The run record (``uncertainty_config.json``, ``infer.json``) names the measures: a case kept from an earlier run
    with more maps (``--continue_prediction``) gives the run's maps only; a case whose record lacks one of them (made
    by an earlier run with other measures) is refused, naming it and both sets of measures."""
    from monai_unc.workflows.dicom import dicom_export

    pred = tmp_path / "pred"
    _maps(pred, series, "ct01", ["predictive_entropy", "mutual_information"], "nnunet")
    _maps(pred, series, "ct02", ["predictive_entropy"], "nnunet")
    (pred / "uncertainty_config.json").write_text(json.dumps({"measures": ["predictive_entropy"]}))
    result = dicom_export(pred, series, tmp_path / "out", layout="nnunet", uid_root=ROOT_UID, progress=False)
    assert sorted(result.cases) == ["ct01", "ct02"]
    assert _exported_maps(tmp_path / "out", "ct01") == ["predictive_entropy"]

    pred2 = tmp_path / "pred2"
    _maps(pred2, series, "ct01", ["predictive_entropy", "variance"], "monai-unc")
    _maps(pred2, series, "ct02", ["variance"], "monai-unc")
    (pred2 / "infer.json").write_text(json.dumps({"settings": {"measures": ["predictive_entropy", "variance"]}}))
    with pytest.raises(ValueError, match=r"1 case\(s\) of .* \(ct02\) were predicted with other measures than its "
                                         r"run \(infer\.json: predictive_entropy, variance; case 'ct02': variance\)"):
        dicom_export(pred2, series, tmp_path / "out2", uid_root=ROOT_UID, progress=False)
    assert not (tmp_path / "out2" / "ct01").exists()


def test_export_of_a_series_with_a_multi_valued_attribute_is_one_line(series, tmp_path, capsys):
    """Issue: a slice whose NumberOfFrames (an attribute read with ``int()``) holds two values (invalid DICOM, seen in
    the wild) stopped ``dicom-export`` with a ``TypeError`` traceback; it is now one line naming the file and the
    attribute, exit status 2, and nothing is written."""
    import shutil

    import pydicom

    from monai_unc.cli import main

    images = tmp_path / "images"
    shutil.copytree(series / "ct01", images / "ct01")
    _maps(tmp_path / "pred", images, "ct01", ["predictive_entropy"], "monai-unc")
    first = sorted((images / "ct01").iterdir())[1]
    ds = pydicom.dcmread(first)
    ds.NumberOfFrames = [1, 1]
    ds.save_as(first)
    capsys.readouterr()
    assert main(["dicom-export", "-p", str(tmp_path / "pred"), "-s", str(images), "-o", str(tmp_path / "out"),
                 "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{first.name}: NumberOfFrames has 2 values" in err[0], err
    assert not list((tmp_path / "out").rglob("*.dcm"))


@pytest.mark.slow
def test_infer_on_a_series_with_a_multi_valued_rescale_slope_names_file_and_attribute(series, tmp_path, capsys):
    """Issue: ``monai-unc infer`` on a series whose slice has two RescaleSlope values failed the case with
    ``TypeError: float() argument must be ... not 'MultiValue'``, naming neither the file nor the attribute; the
    case's failure line (infer's way with a bad case: the other cases go on, exit status 1) now names both."""
    import shutil

    import pydicom

    from monai_unc.cli import main

    images = tmp_path / "images"
    shutil.copytree(series / "ct01", images / "ct01")
    first = sorted((images / "ct01").iterdir())[2]
    ds = pydicom.dcmread(first)
    ds.RescaleSlope = [0.5, 1]
    ds.save_as(first)
    capsys.readouterr()
    assert main(["infer", "-i", str(images), "-o", str(tmp_path / "out"), "--model", "example", "--samples", "2",
                 "--device", "cpu", "-q"]) == 1
    err = capsys.readouterr().err
    assert "TypeError" not in err and f"{first.name}: RescaleSlope has 2 values (0.5\\1.0), it must have one" in err
    failures = json.loads((tmp_path / "out" / "failures.json").read_text())
    assert "RescaleSlope has 2 values" in json.dumps(failures)


def _probs_case(pred: Path, images: Path, case: str, probs: np.ndarray) -> None:
    """A case as ``infer`` writes it, with its probabilities ``(2, X, Y, Z)`` as ``<case>_probs.nii.gz``."""
    _maps(pred, images, case, ["predictive_entropy"], "monai-unc")
    grid = read_series(images / case, pixels=False)
    save_probabilities(probs, grid.affine, pred / f"{case}_probs.nii.gz")


@pytest.mark.parametrize("bad, what", [
    (255.0, "probabilities"),  # a probability file stored as 0..255: every voxel was clipped to 1, silently
    (np.nan, "probabilities"),  # "probs must be finite and in [0, 1]": no case, no file
    (np.nan, "map"),  # "the predictive_entropy map has NaN or infinite values": no case, no file
    (np.inf, "map"),
], ids=["probs_255", "probs_nan", "map_nan", "map_inf"])
def test_export_refuses_non_probabilities_and_non_finite_maps_naming_case_and_file(series, tmp_path, bad, what):
    """Issue: probabilities outside [0, 1] were clipped into it without a word (a FRACTIONAL SEG of ones from a file of
    0..255 values), and a NaN in the probabilities or a map was refused in a line naming neither the case nor the
    file, leaving the case's SEG written before; both are now refused in one line naming the case and the file, and
    no object of the case is left."""
    from monai_unc.workflows.dicom import dicom_export

    pred = tmp_path / "pred"
    grid = read_series(series / "ct02", pixels=False)
    probs = np.stack([np.full(grid.shape, 0.75), np.full(grid.shape, 0.25)])
    _probs_case(pred, series, "ct01", probs)
    if what == "probabilities":
        probs[1, 3, 3, 1] = bad
        _probs_case(pred, series, "ct02", probs)
        file = "ct02_probs.nii.gz"
    else:
        _probs_case(pred, series, "ct02", probs)
        values = np.full(grid.shape, 0.25, np.float32)
        values[3, 3, 1] = bad
        save_nifti(values, grid.affine, pred / "ct02_predictive_entropy.nii.gz")
        file = "ct02_predictive_entropy.nii.gz"
    with pytest.raises(ValueError, match=rf"case 'ct02': .*{file}.*1 value") as refused:
        dicom_export(pred, series, tmp_path / "out", uid_root=ROOT_UID, progress=False, cases=["ct01", "ct02"])
    assert "\n" not in str(refused.value)
    # no object of the refused case is left (its SEG was written before its map was read, and stayed); ct01 is whole
    assert not list((tmp_path / "out" / "ct02").glob("*.dcm"))
    assert sorted(p.name for p in (tmp_path / "out" / "ct01").glob("*.dcm")) == [
        "predictive_entropy.dcm", "probabilities.dcm", "seg.dcm", "sr.dcm"]


def test_export_keeps_float_noise_of_probabilities(series, tmp_path):
    """Probabilities a rounding step outside [0, 1] (1 + 1e-7, -1e-7) are still written, clipped into it."""
    from monai_unc.workflows.dicom import dicom_export

    grid = read_series(series / "ct01", pixels=False)
    probs = np.stack([np.full(grid.shape, 1 + 1e-7), np.full(grid.shape, -1e-7)])
    _probs_case(tmp_path / "pred", series, "ct01", probs)
    result = dicom_export(tmp_path / "pred", series, tmp_path / "out", uid_root=ROOT_UID, progress=False,
                          cases=["ct01"])
    assert (tmp_path / "out" / "ct01" / "probabilities.dcm").is_file() and list(result.cases) == ["ct01"]


def test_export_refuses_an_output_whose_case_folder_holds_other_dicom_files(series, tmp_path, capsys):
    """Issue: a rerun removes every ``*.dcm`` of ``<output>/<case>/`` (the case's earlier objects), so an ``--output``
    whose case folders held other DICOM files (here the site's own copy of the original slices, and a radiologist's
    SEG, not an input of the run) lost them all without a word. It is now refused in one line, exit status 2, before
    any object; the objects of an earlier export are still replaced."""
    import shutil

    from monai_unc.cli import main

    _maps(tmp_path / "pred", series, "ct01", ["predictive_entropy"], "monai-unc")
    pred, images = tmp_path / "pred", tmp_path / "images"
    shutil.copytree(series / "ct01", images / "ct01")
    archive = tmp_path / "archive"
    shutil.copytree(series / "ct01", archive / "ct01")  # the site's folders of the cases, named by case id
    kept = sorted(p.name for p in (archive / "ct01").iterdir())
    capsys.readouterr()
    assert main(["dicom-export", "-p", str(pred), "-s", str(images), "-o", str(archive), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "case ct01:" in err[0] and "not an object of an earlier dicom-export" in err[0], err
    assert sorted(p.name for p in (archive / "ct01").iterdir()) == kept  # nothing removed, nothing written
    assert not (archive / EXPORT_RECORD).exists()
    out = tmp_path / "out"  # an export folder of its own: a rerun replaces its objects
    for _ in range(2):
        assert main(["dicom-export", "-p", str(pred), "-s", str(images), "-o", str(out), "-q"]) == 0
    assert sorted(p.name for p in (out / "ct01").iterdir()) == ["predictive_entropy.dcm", "seg.dcm", "sr.dcm"]


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_export_names_a_predictions_folder_that_is_no_folder(tmp_path, capsys, kind):
    """Issue (option sweep): ``dicom-export -p /missing`` said "labels folder not found: /missing"."""
    from monai_unc import cli

    pred, src = tmp_path / "pred", tmp_path / "series"
    src.mkdir()
    if kind == "file":
        pred.write_text("")
    out = tmp_path / "out"
    assert cli.main(["dicom-export", "-p", str(pred), "-s", str(src), "-o", str(out), "-q"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "predictions folder" in err[0] and "labels" not in err[0], err
    assert not out.exists()
