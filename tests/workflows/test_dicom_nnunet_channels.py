"""``nnunet-predict`` on DICOM series of a model with two input channels (e.g. T1 and T2).

Each case gives one series folder per channel, named as nnU-Net names its channel files (``<case>_0000/``,
``<case>_0001/``). The prediction equals, bit for bit, that of the same values given as nnU-Net's NIfTI channel
files, although the second channel's series stores its slices in the reverse order (it is put on channel 0's voxel
order, no interpolation); the DICOM objects are written on the grid of channel 0's series. Series folders not named
by channel, a missing channel and a channel on another grid are refused in one line before any prediction.
"""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest
import torch

pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")
pytest.importorskip("nnunetv2")

from nnunetv2.utilities.get_network_from_plans import get_network_from_plans  # noqa: E402
from nnunetv2.utilities.plans_handling.plans_handler import PlansManager  # noqa: E402

from monai_unc import cli  # noqa: E402
from monai_unc.io import save_nifti  # noqa: E402
from monai_unc.io.dicom import read_segmentation_labels, read_series, write_series  # noqa: E402
from tests.io.dicom._series import GEOMETRIES, dciodvfy_errors, mni_small  # noqa: E402
from tests.nnunet.test_nnunet import DATASET_JSON, make_plans  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]

ROOT_UID = "1.2.826.0.1.3680043.10.781."
AFFINE = GEOMETRIES["oblique_mr"][1]


def write_two_channel_model(folder):
    """A trained-model folder of the tiny 3D network of ``make_plans`` taking two channels, fixed random weights."""
    plans = make_plans()
    cfg = plans["configurations"]["cfg"]
    cfg["normalization_schemes"] = ["ZScoreNormalization"] * 2
    cfg["use_mask_for_norm"] = [False] * 2
    props = plans["foreground_intensity_properties_per_channel"]["0"]
    plans["foreground_intensity_properties_per_channel"] = {"0": props, "1": dict(props)}
    cm = PlansManager(plans).get_configuration("cfg")
    torch.manual_seed(11)
    net = get_network_from_plans(cm.network_arch_class_name, cm.network_arch_init_kwargs,
                                 cm.network_arch_init_kwargs_req_import, 2, 3, allow_init=True,
                                 deep_supervision=False)
    with torch.no_grad():  # sharper logits, and the second channel weighs: the outputs depend on both
        net.decoder.seg_layers[-1].weight.mul_(4.0)
    (folder / "fold_0").mkdir(parents=True)
    (folder / "plans.json").write_text(json.dumps(plans))
    (folder / "dataset.json").write_text(json.dumps({**DATASET_JSON, "channel_names": {"0": "T1", "1": "T2"}}))
    torch.save({"network_weights": net.state_dict(), "trainer_name": "nnUNetTrainer",
                "init_args": {"configuration": "cfg"}, "inference_allowed_mirroring_axes": (0, 1, 2)},
               folder / "fold_0" / "checkpoint_final.pth")
    return folder


def _predict(images, out, model, *extra):
    argv = ["nnunet-predict", "-i", str(images), "-o", str(out), "-m", str(model), "-f", "0", "-device", "cpu",
            "--sources", "mirroring", "-npp", "0", "-nps", "0", "--disable_progress_bar", "--save_probabilities",
            *extra]
    return cli.main(argv)


#: the study and frame of reference of the example's series: the sequences of one session share them
STUDY, FRAME = "1.2.826.0.1.3680043.10.781.1", "1.2.826.0.1.3680043.10.781.2"


def _session(patient: str = "MONAIUNC001", frame: str = FRAME) -> dict:
    return {"study_uid": STUDY, "patient_id": patient, "extra": {"FrameOfReferenceUID": frame}}


def _channels():
    image = mni_small()[0]
    t1 = np.round(image * 4000.0) + 100.0
    t2 = np.round((1.0 - image) * 3000.0)
    return t1, t2


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    root = tmp_path_factory.mktemp("nnunet_channels")
    model = write_two_channel_model(root / "model")
    t1, t2 = _channels()
    images = root / "images"
    write_series(t1, AFFINE, images / "br01_0000", modality="MR", shuffle_seed=2, **_session())
    # the T2 series on the same grid with its slices stored the other way round (slice k is T1's slice Z-1-k)
    flip = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, -1, t1.shape[2] - 1], [0, 0, 0, 1.0]])
    write_series(t2[:, :, ::-1], AFFINE @ flip, images / "br01_0001", modality="MR", shuffle_seed=3, **_session())
    nifti_in = root / "nifti_images"
    affine = read_series(images / "br01_0000", pixels=False).affine
    save_nifti(t1, affine, nifti_in / "br01_0000.nii.gz")
    save_nifti(t2, affine, nifti_in / "br01_0001.nii.gz")
    assert _predict(nifti_in, root / "from_nifti", model) == 0
    assert _predict(images, root / "both", model, "--output-format", "both", "--uid-root", ROOT_UID) == 0
    return root, images, model


def test_two_series_per_case_equal_the_nifti_channel_files(predicted):
    root, images, _ = predicted
    series = read_series(images / "br01_0000", pixels=False)
    for name in ("br01.nii.gz", "uncertainty/br01_predictive_entropy.nii.gz"):
        ours, ref = nib.load(root / "both" / name), nib.load(root / "from_nifti" / name)
        np.testing.assert_array_equal(np.asarray(ours.dataobj), np.asarray(ref.dataobj))
        assert ours.shape == series.shape
    np.testing.assert_array_equal(np.load(root / "both" / "br01.npz")["probabilities"],
                                  np.load(root / "from_nifti" / "br01.npz")["probabilities"])
    seg = np.asarray(nib.load(root / "both" / "br01.nii.gz").dataobj)
    assert len(np.unique(seg)) > 1  # not a constant prediction


def test_the_dicom_objects_lie_on_channel_0s_series(predicted):
    root, images, _ = predicted
    folder = root / "both" / "dicom" / "br01"
    assert dciodvfy_errors(folder / "seg.dcm") == []
    seg = np.asarray(nib.load(root / "both" / "br01.nii.gz").dataobj)
    series = read_series(images / "br01_0000", pixels=False)
    np.testing.assert_array_equal(read_segmentation_labels(folder / "seg.dcm", series), seg)
    entry = json.loads((root / "both" / "dicom" / "dicom_export.json").read_text())["cases"]["br01"]
    # the objects lie on channel 0's series (the manifest's series) and reference channel 1's too (its other_series)
    assert entry["series"]["folder"] == str((images / "br01_0000").resolve())
    assert entry["series"]["series_instance_uid"] == series.series_uid
    channel1 = read_series(images / "br01_0001", pixels=False)
    assert entry["other_series"] == [{"channel": 1, "series_instance_uid": channel1.series_uid,
                                      "study_instance_uid": STUDY, "folder": str((images / "br01_0001").resolve()),
                                      "slices": channel1.shape[2]}]


def test_the_dicom_channel_of_a_single_series_is_the_nifti_value_reordered(predicted, tmp_path):
    """The staged channel 1 holds the T2 values in channel 0's voxel order (slices reversed back)."""
    from monai_unc.nnunet.cli import stage_dicom_input

    _, images, model = predicted
    staged = tmp_path / "staged"
    staged.mkdir()
    dataset = json.loads((model / "dataset.json").read_text())
    assert stage_dicom_input(str(images), str(staged), dataset) == [
        [str(staged / "br01_0000.nii.gz"), str(staged / "br01_0001.nii.gz")]]
    t1, t2 = _channels()
    assert sorted(p.name for p in staged.iterdir()) == ["br01_0000.nii.gz", "br01_0001.nii.gz"]
    np.testing.assert_array_equal(np.asarray(nib.load(staged / "br01_0000.nii.gz").dataobj), t1)
    np.testing.assert_array_equal(np.asarray(nib.load(staged / "br01_0001.nii.gz").dataobj), t2)


@pytest.mark.parametrize("layout, words", [
    ("unnamed", "needs one series folder per channel named <case>_0000, <case>_0001"),
    ("missing", "case 'br02' has the series _0000; the model takes 2 input channels (_0000 to _0001)"),
    ("other_grid", "case 'br01': series br01_0001 is not on the grid of the series"),
    # found by hostile testing: a series of another patient (or frame of reference) on the same grid was combined
    ("other_patient", "case 'br01': series br01_0001 differs from br01_0000 in PatientID: the channels of a case are "
                      "series of one patient in one frame of reference"),
    ("other_frame", "series br01_0001 differs from br01_0000 in FrameOfReferenceUID"),
    # found by hostile testing: Arabic-Indic digits passed as channel numbers, and the export found no series
    ("other_digits", "br01_\u0660\u0660\u0660\u0660/ is not named so"),
])
def test_bad_channel_series_are_refused_in_one_line(predicted, tmp_path, capsys, layout, words):
    _, _, model = predicted
    t1, t2 = _channels()
    images = tmp_path / "images"
    names = {"unnamed": ("br01", "br01_0001"), "missing": ("br01_0000", "br01_0001", "br02_0000"),
             "other_digits": ("br01_\u0660\u0660\u0660\u0660", "br01_\u0660\u0660\u0660\u0661")}.get(
        layout, ("br01_0000", "br01_0001"))
    for name in names:
        shift = np.eye(4)
        second = name.endswith(("1", "\u0661"))
        if layout == "other_grid" and second:
            shift[:3, 3] = (0.0, 0.0, 1.0)  # half a slice (2 mm slices): another grid
        session = _session(patient="OTHER" if layout == "other_patient" and second else "MONAIUNC001",
                           frame=FRAME + ".9" if layout == "other_frame" and second else FRAME)
        write_series(t2 if second else t1, AFFINE @ shift, images / name, modality="MR", **session)
    capsys.readouterr()
    rc = _predict(images, tmp_path / "out", model, "--output-format", "both", "--uid-root", ROOT_UID)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and words in err[0], (rc, err)
    if layout == "other_grid":
        assert "resample it onto the grid of br01_0000" in err[0]
    assert not list(tmp_path.glob("out/*.nii.gz"))  # refused before any prediction


def test_each_case_is_exported_on_its_own_channel_0(predicted, tmp_path):
    """Found by hostile testing: the export took ``<case>/`` before ``<case>_0000/``, so case ``a_0000`` got the
    series of case ``a``'s channel 0 (another patient), and an empty ``<case>/`` beside the channel series failed the
    run after the prediction. A model of several channels reads ``<case>_0000/`` only."""
    _, _, model = predicted
    t1, t2 = _channels()
    images = tmp_path / "images"
    for case, patient in (("a", "PATIENT_A"), ("a_0000", "PATIENT_B")):
        write_series(t1, AFFINE, images / f"{case}_0000", modality="MR", **_session(patient))
        write_series(t2, AFFINE, images / f"{case}_0001", modality="MR", **_session(patient))
    (images / "a").mkdir()  # a leftover empty folder named as case a
    assert _predict(images, tmp_path / "out", model, "--output-format", "both", "--uid-root", ROOT_UID) == 0
    import pydicom

    for case, patient in (("a", "PATIENT_A"), ("a_0000", "PATIENT_B")):
        seg = pydicom.dcmread(tmp_path / "out" / "dicom" / case / "seg.dcm")
        assert seg.PatientID == patient, case
        series = read_series(images / f"{case}_0000", pixels=False)
        assert seg.ReferencedSeriesSequence[0].SeriesInstanceUID == series.series_uid, case


def test_evaluate_reads_a_seg_on_channel_0s_series(predicted, tmp_path):
    """``evaluate --layout nnunet --images`` gives each case of a model of several channels (its ``dataset.json``
    beside the predictions) channel 0's series: a DICOM SEG label is read on it."""
    import shutil

    from monai_unc.io import read_csv

    root, images, _ = predicted
    (tmp_path / "labels").mkdir()
    shutil.copy(root / "both" / "dicom" / "br01" / "seg.dcm", tmp_path / "labels" / "br01.dcm")
    assert cli.main(["evaluate", "--layout", "nnunet", "-l", str(tmp_path / "labels"), "-p", str(root / "both"),
                     "--images", str(images), "-o", str(tmp_path / "eval"), "--no-spatial", "-q"]) == 0
    row = read_csv(tmp_path / "eval" / "metrics.csv")[0]
    assert row["case"] == "br01" and float(row["dice"]) == 1.0
