"""Hostile tests of DICOM input to networks of several input channels (``infer`` / ``dicom-export`` / ``report``).

Each test is a finding of hostile testing that failed before its fix: the case and what went wrong are in its
docstring.
"""

from __future__ import annotations

import json
import shutil

import nibabel as nib
import numpy as np
import pytest

pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.cli import main  # noqa: E402
from monai_unc.io import save_nifti  # noqa: E402
from monai_unc.io.dicom import read_series, write_series  # noqa: E402
from tests._cases import TOY_NET  # noqa: E402
from tests.workflows.test_dicom_infer_channels import (  # noqa: E402
    AFFINE,
    _channels,
    _infer,
    _network,
    _session,
    _write_case,
)

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]


def _bundle(root, net, in_channels: int, repeat: int = 1):
    """A bundle of the toy network whose preprocessing loads the image with MONAI's ``LoadImaged`` (and repeats its
    channel ``repeat`` times: the network's channels made from one image)."""
    folder = root / "bundle"
    (folder / "configs").mkdir(parents=True)
    (folder / "models").mkdir()
    shutil.copy(net[1], folder / "models" / "model.pt")
    config = {"network_def": {**TOY_NET, "in_channels": in_channels},
              "preprocessing": {"_target_": "Compose", "transforms": [
                  {"_target_": "LoadImaged", "keys": "image"},
                  {"_target_": "EnsureChannelFirstd", "keys": "image"},
                  *([{"_target_": "RepeatChanneld", "keys": "image", "repeats": repeat}] if repeat > 1 else []),
                  {"_target_": "NormalizeIntensityd", "keys": "image", "channel_wise": True}]}}
    (folder / "configs" / "inference.json").write_text(json.dumps(config))
    return folder


def _infer_bundle(images, out, bundle):
    return main(["infer", "-i", str(images), "-o", str(out), "--bundle", str(bundle), "--samples", "2", "--seed", "3",
                 "--device", "cpu", "-q"])


def _assert_same_outputs(ours, ref):
    names = sorted(p.name for p in ref.glob("*.nii.gz"))
    assert names and names == sorted(p.name for p in ours.glob("*.nii.gz"))
    for name in names:
        a, b = nib.load(ours / name), nib.load(ref / name)
        np.testing.assert_allclose(a.affine, b.affine, atol=1e-4, err_msg=name)
        np.testing.assert_array_equal(np.asarray(a.dataobj), np.asarray(b.dataobj), err_msg=name)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("in_channels", [1, 2])
def test_a_bundles_preprocessing_reads_series_by_slice_position(tmp_path, in_channels):
    """Found by hostile testing: under a bundle's preprocessing a series folder went to MONAI's ``LoadImaged``, which
    orders the slices by ``InstanceNumber``: a series numbered out of slice order was predicted scrambled, with
    another affine, exit status 0 (probabilities off by 0.99); a channel series stored the other way round failed
    the case. The outputs equal those of the same values given as NIfTI files."""
    net = _network(tmp_path, in_channels=in_channels)
    bundle = _bundle(tmp_path, net, in_channels)
    images, nifti = tmp_path / "images", tmp_path / "nifti"
    t1, t2 = _channels()
    if in_channels == 1:  # instance numbers shuffled (shuffle_seed), the files in no order
        write_series(t1, AFFINE, images / "br01", modality="MR", shuffle_seed=2, **_session())
        save_nifti(t1, read_series(images / "br01", pixels=False).affine, nifti / "br01.nii.gz")
    else:  # channel 1 stored with its slices the other way round
        _write_case(images, "br01")
        affine = read_series(images / "br01_0000", pixels=False).affine
        save_nifti(t1, affine, nifti / "br01_0000.nii.gz")
        save_nifti(t2, affine, nifti / "br01_0001.nii.gz")
    assert _infer_bundle(nifti, tmp_path / "from_nifti", bundle) == 0
    assert _infer_bundle(images, tmp_path / "from_series", bundle) == 0
    _assert_same_outputs(tmp_path / "from_series", tmp_path / "from_nifti")
    assert not [p.name for p in (tmp_path / "from_series").iterdir() if p.name.startswith(".")]  # no scratch left


def test_a_case_of_channel_series_never_overwrites_an_input(tmp_path, capsys):
    """Found by hostile testing: ``--network OUT/br01.json`` was overwritten by the record of the case ``br01`` read
    from ``br01_0000/`` and ``br01_0001/`` (its outputs were checked against the inputs as the cases ``br01_0000`` and
    ``br01_0001``), while the same case given as NIfTI channel files was refused. Refused in one line as well."""
    spec, ckpt = _network(tmp_path)
    _write_case(tmp_path / "images", "br01")
    (tmp_path / "out").mkdir()
    inside = tmp_path / "out" / "br01.json"
    shutil.copy(spec, inside)
    capsys.readouterr()
    assert _infer(tmp_path / "images", tmp_path / "out", (inside, ckpt)) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "the command writes br01.json there, which is the input file" in err[0], err
    assert inside.read_text() == spec.read_text()
    assert not list((tmp_path / "out").glob("*.nii.gz"))


def test_channel_series_beside_nifti_channel_files(tmp_path):
    """Found by hostile testing: a folder holding the case ``s1`` as series named by channel (``s1_0000/``,
    ``s1_0001/``) beside the case ``n1`` as NIfTI channel files was refused by ``infer`` and by ``evaluate --images``
    ("different numbers of channels, e.g. 's1_0000' 1"), although ``list_image_cases(series_channels=2)`` reads it.
    Both cases are predicted (equal values: equal outputs) and ``evaluate`` gives ``s1`` channel 0's series."""
    from monai_unc.io import read_csv

    net = _network(tmp_path)
    images = tmp_path / "images"
    _write_case(images, "s1")
    t1, t2 = _channels()
    affine = read_series(images / "s1_0000", pixels=False).affine
    save_nifti(t1, affine, images / "n1_0000.nii.gz")
    save_nifti(t2, affine, images / "n1_0001.nii.gz")
    assert _infer(images, tmp_path / "out", net) == 0
    n1, s1 = (np.asarray(nib.load(tmp_path / "out" / f"{c}_probs.nii.gz").dataobj) for c in ("n1", "s1"))
    np.testing.assert_array_equal(n1, s1)
    for case in ("n1", "s1"):
        seg = nib.load(tmp_path / "out" / f"{case}_seg.nii.gz")
        save_nifti(np.asarray(seg.dataobj).astype(np.uint8), seg.affine, tmp_path / "labels" / f"{case}.nii.gz")
    assert main(["evaluate", "-l", str(tmp_path / "labels"), "-p", str(tmp_path / "out"), "--images", str(images),
                 "-o", str(tmp_path / "eval"), "--no-spatial", "-q"]) == 0
    assert sorted(r["case"] for r in read_csv(tmp_path / "eval" / "metrics.csv")) == ["n1", "s1"]
    records = {c: (tmp_path / "eval" / "state" / "cases" / f"{c}.json").read_text() for c in ("n1", "s1")}
    assert str(images / "n1_0000.nii.gz") in records["n1"] and str(images / "s1_0000") + '"' in records["s1"]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_report_draws_a_case_of_channel_series_on_its_image(tmp_path):
    """Found by hostile testing: ``report --images SERIES`` of cases predicted from one series per channel found no
    image for them (the folder's series are ``br01_0000/`` and ``br01_0001/``) and drew them on their label map, as
    without ``--images``. The figures equal those drawn with the same values as NIfTI channel files."""
    net = _network(tmp_path)
    images, nifti = tmp_path / "images", tmp_path / "nifti"
    _write_case(images, "br01")
    t1, t2 = _channels()
    affine = read_series(images / "br01_0000", pixels=False).affine
    save_nifti(t1, affine, nifti / "br01_0000.nii.gz")
    save_nifti(t2, affine, nifti / "br01_0001.nii.gz")
    assert _infer(images, tmp_path / "out", net) == 0
    seg = nib.load(tmp_path / "out" / "br01_seg.nii.gz")
    label = np.asarray(seg.dataobj).astype(np.uint8)
    label[:3] = 0
    save_nifti(label, seg.affine, tmp_path / "labels" / "br01.nii.gz")
    assert main(["evaluate", "-l", str(tmp_path / "labels"), "-p", str(tmp_path / "out"), "-o",
                 str(tmp_path / "eval"), "--no-spatial", "-q"]) == 0
    figures = {}
    for name, folder in (("series", images), ("nifti", nifti)):
        assert main(["report", "-e", str(tmp_path / "eval"), "--images", str(folder), "-o",
                     str(tmp_path / f"report_{name}"), "-q"]) == 0
        figures[name] = (tmp_path / f"report_{name}" / "figures" / "case_br01.png").read_bytes()
    assert figures["series"] == figures["nifti"]


def test_image_statistics_read_every_channel_series(tmp_path):
    """Found by hostile testing: the image statistics of a referral rule (``evaluate --images --target-risk``, then
    ``triage --images``) read only channel 0's series of a case predicted from one series per channel (``"all"``
    channel files: ``br01_0000/`` alone), so a rule fitted on the same cases as NIfTI channel files failed every case
    given as series ("has 1 channel(s), the calibration images of the rule 2") and the reverse, and a shift of
    channel 1 went unseen. Every channel's series is read, in channel 0's voxel order (channel 1 is stored the other
    way round), as the NIfTI channel files are; a case of one series named ``<name>_0000`` stays one channel."""
    from monai_unc.evaluation.triage import read_image_channels
    from monai_unc.io import image_channel_files

    images, nifti = tmp_path / "images", tmp_path / "nifti"
    _write_case(images, "br01")
    t1, t2 = _channels()
    affine = read_series(images / "br01_0000", pixels=False).affine
    save_nifti(t1, affine, nifti / "br01_0000.nii.gz")
    save_nifti(t2, affine, nifti / "br01_0001.nii.gz")
    assert [p.name for p in image_channel_files(images / "br01_0000", "br01")] == ["br01_0000", "br01_0001"]
    ours = read_image_channels(images / "br01_0000", "all", case_id="br01")
    ref = read_image_channels(nifti / "br01_0000.nii.gz", "all", case_id="br01")
    assert ours.shape == ref.shape == (2, *t1.shape)
    np.testing.assert_array_equal(ours, ref)
    # a case of one series named like a channel (a network of one channel): its own series only
    assert [p.name for p in image_channel_files(images / "br01_0000", "br01_0000")] == ["br01_0000"]
    assert read_image_channels(images / "br01_0000", "all", case_id="br01_0000").shape[0] == 1


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_bundle_making_its_channels_from_one_image_reads_one_series_per_case(tmp_path):
    """Found by hostile testing: a bundle whose network takes 2 channels made by its preprocessing from one image
    (``RepeatChanneld``; CT windows concatenated) refused every series folder ("the model takes 2 input channels, so
    each case needs one series folder per channel ... ct01/ is not named so"), while ``ct01.nii.gz`` was predicted.
    The series is one case, predicted as the NIfTI file is."""
    net = _network(tmp_path)
    bundle = _bundle(tmp_path, net, 2, repeat=2)
    t1, _ = _channels()
    write_series(t1, AFFINE, tmp_path / "images" / "ct01", modality="MR", shuffle_seed=2, **_session())
    save_nifti(t1, read_series(tmp_path / "images" / "ct01", pixels=False).affine, tmp_path / "nifti" / "ct01.nii.gz")
    assert _infer_bundle(tmp_path / "nifti", tmp_path / "from_nifti", bundle) == 0
    assert _infer_bundle(tmp_path / "images", tmp_path / "from_series", bundle) == 0
    _assert_same_outputs(tmp_path / "from_series", tmp_path / "from_nifti")
    # series named by channel with one missing are still refused in one line under a bundle
    shutil.rmtree(tmp_path / "images")
    write_series(t1, AFFINE, tmp_path / "images" / "br01_0000", modality="MR", **_session())
    assert _infer_bundle(tmp_path / "images", tmp_path / "missing", bundle) == 2


def test_a_case_predicted_from_nifti_channel_files_lies_on_channel_0s_series(tmp_path):
    """Found by hostile testing: a case of two channels predicted from NIfTI channel files converted from its series
    could not be exported onto them (``dicom-export -s SERIES``: "expected the folder SERIES/<case>", which for a
    case of several channels is no series of it) nor evaluated with them (``evaluate --images SERIES``: no image).
    Its record lists two inputs: it lies on channel 0's series, ``<case>_0000/``."""
    from monai_unc.io.dicom import read_segmentation_labels

    net = _network(tmp_path)
    images, nifti = tmp_path / "images", tmp_path / "nifti"
    _write_case(images, "br01")
    t1, t2 = _channels()
    series = read_series(images / "br01_0000", pixels=False)
    save_nifti(t1, series.affine, nifti / "br01_0000.nii.gz")
    save_nifti(t2, series.affine, nifti / "br01_0001.nii.gz")
    assert _infer(nifti, tmp_path / "out", net) == 0
    assert main(["dicom-export", "-p", str(tmp_path / "out"), "-s", str(images), "-o", str(tmp_path / "dicom"),
                 "--uid-root", "1.2.826.0.1.3680043.10.782.", "-q"]) == 0
    seg = np.asarray(nib.load(tmp_path / "out" / "br01_seg.nii.gz").dataobj)
    np.testing.assert_array_equal(read_segmentation_labels(tmp_path / "dicom" / "br01" / "seg.dcm", series), seg)
    (tmp_path / "labels").mkdir()
    shutil.copy(tmp_path / "dicom" / "br01" / "seg.dcm", tmp_path / "labels" / "br01.dcm")
    assert main(["evaluate", "-l", str(tmp_path / "labels"), "-p", str(tmp_path / "out"), "--images", str(images),
                 "-o", str(tmp_path / "eval"), "--no-spatial", "-q"]) == 0


def test_each_case_in_the_other_representation_keeps_its_image(tmp_path):
    """Found by hostile testing: ``evaluate --images`` with a case predicted from its channel series given as NIfTI
    channel files beside the series of another case dropped its image ("no image"), and the other case, predicted
    from NIfTI channel files, had none among the series. Each case gets its channel 0: a file or a series."""
    net = _network(tmp_path)
    images, swapped = tmp_path / "images", tmp_path / "swapped"
    _write_case(images, "s1")
    t1, t2 = _channels()
    affine = read_series(images / "s1_0000", pixels=False).affine
    for case, folder in (("n1", images), ("s1", swapped)):
        save_nifti(t1, affine, folder / f"{case}_0000.nii.gz")
        save_nifti(t2, affine, folder / f"{case}_0001.nii.gz")
    for c in ("0000", "0001"):
        shutil.copytree(images / f"s1_{c}", swapped / f"n1_{c}")
    assert _infer(images, tmp_path / "out", net) == 0
    for case in ("n1", "s1"):
        seg = nib.load(tmp_path / "out" / f"{case}_seg.nii.gz")
        save_nifti(np.asarray(seg.dataobj).astype(np.uint8), seg.affine, tmp_path / "labels" / f"{case}.nii.gz")
    assert main(["evaluate", "-l", str(tmp_path / "labels"), "-p", str(tmp_path / "out"), "--images", str(swapped),
                 "-o", str(tmp_path / "eval"), "--no-spatial", "-q"]) == 0
    records = {c: (tmp_path / "eval" / "state" / "cases" / f"{c}.json").read_text() for c in ("n1", "s1")}
    assert str(swapped / "n1_0000") + '"' in records["n1"] and str(swapped / "s1_0000.nii.gz") in records["s1"]


def test_output_format_both_names_the_volume_files_beside_channel_series(tmp_path, capsys):
    """Found by hostile testing: ``--output-format both`` on channel series beside NIfTI channel files was refused as
    "cases ... have different numbers of channels", not for the volume files it cannot write DICOM objects for."""
    net = _network(tmp_path)
    images = tmp_path / "images"
    _write_case(images, "s1")
    t1, t2 = _channels()
    affine = read_series(images / "s1_0000", pixels=False).affine
    save_nifti(t1, affine, images / "n1_0000.nii.gz")
    save_nifti(t2, affine, images / "n1_0001.nii.gz")
    capsys.readouterr()
    assert _infer(images, tmp_path / "out", net, "--output-format", "both", "--uid-root",
                  "1.2.826.0.1.3680043.10.782.") == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "--output-format both needs DICOM input" in err[0], err


def test_export_names_a_missing_channel_series(tmp_path, capsys):
    """Found by hostile testing: ``dicom-export`` with channel 1's series folder missing said it "is not the one the
    case was predicted from: its files differ", as for another series; it names the missing folder."""
    net = _network(tmp_path)
    _write_case(tmp_path / "images", "br01")
    assert _infer(tmp_path / "images", tmp_path / "out", net) == 0
    shutil.rmtree(tmp_path / "images" / "br01_0001")
    capsys.readouterr()
    assert main(["dicom-export", "-p", str(tmp_path / "out"), "-s", str(tmp_path / "images"), "-o",
                 str(tmp_path / "dicom"), "--uid-root", "1.2.826.0.1.3680043.10.782.", "-q"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "no series folder" in err[0] and "br01_0001" in err[0], err
    assert "is not the one" not in err[0]
