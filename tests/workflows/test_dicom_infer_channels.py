"""``infer`` on DICOM series of a MONAI network with two input channels (e.g. T1 and T2).

A network of several input channels takes one series folder per channel, named as nnU-Net names its channel files
(``<case>_0000/``, ``<case>_0001/``), as ``nnunet-predict`` does. The outputs equal, bit for bit, those of the same
values given as NIfTI channel files, although the second channel's series stores its slices in the reverse order (it
is put on channel 0's voxel order, no interpolation); the DICOM objects of ``--output-format both`` and of
``dicom-export`` lie on channel 0's series. A network of one channel reads one series folder per case as before.
"""

from __future__ import annotations

import json
import shutil

import nibabel as nib
import numpy as np
import pytest
import torch

pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai.networks.nets import UNet  # noqa: E402

from monai_unc.cli import main  # noqa: E402
from monai_unc.io import save_nifti  # noqa: E402
from monai_unc.io.dicom import read_segmentation_labels, read_series, write_series  # noqa: E402
from tests._cases import TOY_NET  # noqa: E402
from tests.io.dicom._series import GEOMETRIES, dciodvfy_errors, mni_small  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]

ROOT_UID = "1.2.826.0.1.3680043.10.782."
AFFINE = GEOMETRIES["oblique_mr"][1]
#: the study and frame of reference of the example's series: the sequences of one session share them
STUDY, FRAME = "1.2.826.0.1.3680043.10.782.1", "1.2.826.0.1.3680043.10.782.2"
#: channel 1's series: the same grid with its slices stored the other way round
FLIP_SLICES = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, -1, 0], [0, 0, 0, 1.0]])


def _session(patient: str = "MONAIUNC001", frame: str = FRAME) -> dict:
    return {"study_uid": STUDY, "patient_id": patient, "extra": {"FrameOfReferenceUID": frame}}


def _channels():
    image = mni_small()[0]
    return np.round(image * 4000.0) + 100.0, np.round((1.0 - image) * 3000.0)


def _write_case(images, case: str, patient: str = "MONAIUNC001") -> None:
    t1, t2 = _channels()
    write_series(t1, AFFINE, images / f"{case}_0000", modality="MR", shuffle_seed=2, **_session(patient))
    flip = FLIP_SLICES.copy()
    flip[2, 3] = t1.shape[2] - 1
    write_series(t2[:, :, ::-1], AFFINE @ flip, images / f"{case}_0001", modality="MR", shuffle_seed=3,
                 **_session(patient))


def _network(folder, in_channels: int = 2):
    spec = {**TOY_NET, "in_channels": in_channels}
    torch.manual_seed(5)
    net = UNet(**{k: v for k, v in spec.items() if k != "_target_"})
    with torch.no_grad():  # both channels weigh: the outputs depend on each
        for p in net.parameters():
            p.mul_(3.0)
    torch.save(net.state_dict(), folder / f"net{in_channels}.pt")
    (folder / f"net{in_channels}.json").write_text(json.dumps(spec))
    return folder / f"net{in_channels}.json", folder / f"net{in_channels}.pt"


def _infer(images, out, net, *extra):
    spec, ckpt = net
    return main(["infer", "-i", str(images), "-o", str(out), "--network", str(spec), "--checkpoint", str(ckpt),
                 "--samples", "2", "--seed", "3", "--device", "cpu", "-q", "--intensity", "zscore", *extra])


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    root = tmp_path_factory.mktemp("infer_channels")
    net = _network(root)
    images = root / "images"
    _write_case(images, "br01")
    t1, t2 = _channels()
    affine = read_series(images / "br01_0000", pixels=False).affine
    nifti_in = root / "nifti_images"
    save_nifti(t1, affine, nifti_in / "br01_0000.nii.gz")
    save_nifti(t2, affine, nifti_in / "br01_0001.nii.gz")
    assert _infer(nifti_in, root / "from_nifti", net) == 0
    assert _infer(images, root / "both", net, "--output-format", "both", "--uid-root", ROOT_UID) == 0
    return root, images, net


def test_two_series_per_case_equal_the_nifti_channel_files(predicted):
    root, images, _ = predicted
    series = read_series(images / "br01_0000", pixels=False)
    names = sorted(p.name for p in (root / "from_nifti").glob("br01_*.nii.gz"))
    assert "br01_seg.nii.gz" in names and "br01_predictive_entropy.nii.gz" in names
    assert names == sorted(p.name for p in (root / "both").glob("br01_*.nii.gz"))
    for name in names:
        ours, ref = nib.load(root / "both" / name), nib.load(root / "from_nifti" / name)
        np.testing.assert_array_equal(np.asarray(ours.dataobj), np.asarray(ref.dataobj), err_msg=name)
        np.testing.assert_allclose(ours.affine, series.affine, atol=1e-5)
        assert ours.shape[:3] == series.shape
    seg = np.asarray(nib.load(root / "both" / "br01_seg.nii.gz").dataobj)
    assert len(np.unique(seg)) > 1  # not a constant prediction
    record = json.loads((root / "both" / "br01.json").read_text())
    assert [e["file"] for e in record["input_digests"]] == ["br01_0000", "br01_0001"]


def test_the_second_channel_counts(predicted, tmp_path):
    """The T2 series is read, in channel 0's voxel order: another T2 changes the outputs."""
    root, images, net = predicted
    t1, t2 = _channels()
    affine = read_series(images / "br01_0000", pixels=False).affine
    save_nifti(t1, affine, tmp_path / "in" / "br01_0000.nii.gz")
    save_nifti(t2[:, :, ::-1].copy(), affine, tmp_path / "in" / "br01_0001.nii.gz")  # not reordered
    assert _infer(tmp_path / "in", tmp_path / "out", net) == 0
    ours = np.asarray(nib.load(root / "both" / "br01_probs.nii.gz").dataobj)
    other = np.asarray(nib.load(tmp_path / "out" / "br01_probs.nii.gz").dataobj)
    assert np.abs(ours - other).max() > 1e-3


def test_the_dicom_objects_lie_on_channel_0s_series(predicted, tmp_path):
    root, images, _ = predicted
    folder = root / "both" / "dicom" / "br01"
    assert dciodvfy_errors(folder / "seg.dcm") == []
    seg = np.asarray(nib.load(root / "both" / "br01_seg.nii.gz").dataobj)
    series = read_series(images / "br01_0000", pixels=False)
    np.testing.assert_array_equal(read_segmentation_labels(folder / "seg.dcm", series), seg)
    entry = json.loads((root / "both" / "dicom" / "dicom_export.json").read_text())["cases"]["br01"]
    # the objects lie on channel 0's series (the manifest's series) and reference channel 1's too (its other_series)
    assert entry["series"]["folder"] == str((images / "br01_0000").resolve())
    channel1 = read_series(images / "br01_0001", pixels=False)
    assert entry["other_series"] == [{"channel": 1, "series_instance_uid": channel1.series_uid,
                                      "study_instance_uid": STUDY, "folder": str((images / "br01_0001").resolve()),
                                      "slices": channel1.shape[2]}]
    # dicom-export on its own finds channel 0's series of each case (its record says it had two)
    assert main(["dicom-export", "-p", str(root / "both"), "-s", str(images), "-o", str(tmp_path / "dicom"),
                 "-q"]) == 0
    np.testing.assert_array_equal(read_segmentation_labels(tmp_path / "dicom" / "br01" / "seg.dcm", series), seg)


def test_export_refuses_another_series_as_a_channel(predicted, tmp_path, capsys):
    """Each channel's series must be the one the case was predicted from, not only channel 0's."""
    root, images, _ = predicted
    other = tmp_path / "images"
    shutil.copytree(images, other)
    _, t2 = _channels()
    shutil.rmtree(other / "br01_0001")
    write_series(t2 + 1.0, AFFINE, other / "br01_0001", modality="MR", **_session())
    capsys.readouterr()
    assert main(["dicom-export", "-p", str(root / "both"), "-s", str(other), "-o", str(tmp_path / "dicom"),
                 "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "br01_0001 is not the one the case was predicted from" in err[0], err
    assert not (tmp_path / "dicom").exists()


def test_a_rerun_reuses_the_cases(predicted, tmp_path):
    root, images, net = predicted
    shutil.copytree(root / "both", tmp_path / "again", ignore=shutil.ignore_patterns("dicom"))
    before = (tmp_path / "again" / "br01.json").stat().st_mtime_ns
    assert _infer(images, tmp_path / "again", net) == 0
    assert (tmp_path / "again" / "br01.json").stat().st_mtime_ns == before


@pytest.mark.parametrize("layout, words", [
    ("unnamed", "needs one series folder per channel named <case>_0000, <case>_0001"),
    ("missing", "case 'br02' has the series _0000; the model takes 2 input channels (_0000 to _0001)"),
])
def test_series_not_named_by_channel_are_refused_in_one_line(predicted, tmp_path, capsys, layout, words):
    _, _, net = predicted
    t1, _ = _channels()
    names = {"unnamed": ("br01", "br01_0001"), "missing": ("br01_0000", "br01_0001", "br02_0000")}[layout]
    for name in names:
        write_series(t1, AFFINE, tmp_path / "images" / name, modality="MR", **_session())
    capsys.readouterr()
    assert _infer(tmp_path / "images", tmp_path / "out", net) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and words in err[0], err
    assert not list(tmp_path.glob("out/*.nii.gz"))


@pytest.mark.parametrize("layout, words", [
    ("other_grid", "case 'br01': series br01_0001 is not on the grid of the series"),
    ("other_patient", "case 'br01': series br01_0001 differs from br01_0000 in PatientID: the channels of a case are "
                      "series of one patient in one frame of reference"),
    ("other_frame", "series br01_0001 differs from br01_0000 in FrameOfReferenceUID"),
])
def test_a_channel_of_another_grid_patient_or_frame_fails_its_case(predicted, tmp_path, capsys, layout, words):
    _, _, net = predicted
    t1, t2 = _channels()
    for name in ("br01_0000", "br01_0001"):
        second = name.endswith("1")
        shift = np.eye(4)
        if layout == "other_grid" and second:
            shift[:3, 3] = (0.0, 0.0, 1.0)  # half a slice (2 mm slices): another grid
        session = _session(patient="OTHER" if layout == "other_patient" and second else "MONAIUNC001",
                           frame=FRAME + ".9" if layout == "other_frame" and second else FRAME)
        write_series(t2 if second else t1, AFFINE @ shift, tmp_path / "images" / name, modality="MR", **session)
    capsys.readouterr()
    assert _infer(tmp_path / "images", tmp_path / "out", net) == 1
    err = capsys.readouterr().err
    assert words in err, err
    if layout == "other_grid":
        assert "resample it onto the grid of br01_0000" in err
    assert not list(tmp_path.glob("out/*.nii.gz"))


def test_a_one_channel_network_reads_one_series_per_case(tmp_path):
    """Compatibility: series folders named like channels stay cases of their own for a one-channel network."""
    net = _network(tmp_path, in_channels=1)
    t1, _ = _channels()
    for name in ("pat_0000", "pat_0001"):
        write_series(t1, AFFINE, tmp_path / "images" / name, modality="MR", **_session())
    assert _infer(tmp_path / "images", tmp_path / "out", net) == 0
    assert sorted(p.name for p in (tmp_path / "out").glob("*_seg.nii.gz")) == ["pat_0000_seg.nii.gz",
                                                                               "pat_0001_seg.nii.gz"]


def test_calibrate_reads_one_series_per_channel(predicted, tmp_path):
    """``calibrate`` reads the cases of a network of several channels as ``infer`` does: its temperature equals that
    fitted on the same values given as NIfTI channel files."""
    root, images, net = predicted
    spec, ckpt = net
    t1, _ = _channels()
    affine = read_series(images / "br01_0000", pixels=False).affine
    save_nifti((t1 > np.median(t1)).astype(np.uint8), affine, tmp_path / "labels" / "br01.nii.gz")
    temperatures = []
    for name, folder in (("series", images), ("nifti", root / "nifti_images")):
        out = tmp_path / f"{name}.pt"
        assert main(["calibrate", "-i", str(folder), "-l", str(tmp_path / "labels"), "-o", str(out), "--network",
                     str(spec), "--checkpoint", str(ckpt), "--intensity", "zscore", "--max-steps", "50", "-q"]) == 0
        temperatures.append(json.loads(out.with_suffix(".json").read_text())["temperature"])
    assert temperatures[0] == temperatures[1]


def test_evaluate_reads_a_seg_on_channel_0s_series(predicted, tmp_path):
    """``evaluate --images`` gives a case predicted from one series per channel channel 0's series (its record
    lists them): a DICOM SEG label is read on it. The exported SEG of the prediction scores Dice 1 against it."""
    from monai_unc.io import read_csv

    root, images, _ = predicted
    (tmp_path / "labels").mkdir()
    shutil.copy(root / "both" / "dicom" / "br01" / "seg.dcm", tmp_path / "labels" / "br01.dcm")
    assert main(["evaluate", "-l", str(tmp_path / "labels"), "-p", str(root / "both"), "--images", str(images),
                 "-o", str(tmp_path / "eval"), "--no-spatial", "-q"]) == 0
    row = read_csv(tmp_path / "eval" / "metrics.csv")[0]
    assert row["case"] == "br01" and float(row["dice"]) == 1.0


def test_a_channel_given_as_an_enhanced_multiframe_image(predicted, tmp_path):
    """A channel's series may be one enhanced multi-frame image (its frames stored in the reverse slice order): the
    outputs equal those of the single-frame series."""
    from tests.io.dicom._multiframe import legacy_multiframe

    root, images, net = predicted
    mixed = tmp_path / "images"
    shutil.copytree(images / "br01_0000", mixed / "br01_0000")
    legacy_multiframe(sorted((images / "br01_0001").iterdir()), mixed / "br01_0001")
    assert len(list((mixed / "br01_0001").iterdir())) == 1
    assert read_series(mixed / "br01_0001", pixels=False).multiframe
    assert _infer(mixed, tmp_path / "out", net) == 0
    for name in ("br01_seg.nii.gz", "br01_probs.nii.gz", "br01_predictive_entropy.nii.gz"):
        np.testing.assert_array_equal(np.asarray(nib.load(tmp_path / "out" / name).dataobj),
                                      np.asarray(nib.load(root / "both" / name).dataobj), err_msg=name)


def test_a_case_predicted_from_nifti_channel_files_keeps_its_case_series(predicted, tmp_path):
    """Found by review: a case predicted from NIfTI channel files needed ``<case>_0000/`` in ``dicom-export -s`` and
    ``evaluate --images``, refusing (losing the image of) ``<case>/``, which earlier versions took; both are read."""
    from monai_unc.io import read_csv

    root, images, _ = predicted
    series = tmp_path / "series"
    shutil.copytree(images / "br01_0000", series / "br01")
    assert main(["dicom-export", "-p", str(root / "from_nifti"), "-s", str(series), "-o", str(tmp_path / "dicom"),
                 "-q"]) == 0
    seg = np.asarray(nib.load(root / "from_nifti" / "br01_seg.nii.gz").dataobj)
    np.testing.assert_array_equal(
        read_segmentation_labels(tmp_path / "dicom" / "br01" / "seg.dcm", read_series(series / "br01")), seg)
    (tmp_path / "labels").mkdir()
    shutil.copy(tmp_path / "dicom" / "br01" / "seg.dcm", tmp_path / "labels" / "br01.dcm")
    assert main(["evaluate", "-l", str(tmp_path / "labels"), "-p", str(root / "from_nifti"), "--images", str(series),
                 "-o", str(tmp_path / "eval"), "--no-spatial", "-q"]) == 0
    assert float(read_csv(tmp_path / "eval" / "metrics.csv")[0]["dice"]) == 1.0
