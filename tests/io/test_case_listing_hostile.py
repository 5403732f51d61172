"""Listing the cases of a folder (found by hostile testing).

- an entry named like a volume that is not a file (a link to an unmounted share, a folder ``d.nii.gz``) and a DICOM
  series folder beside volume files were left out without a word: they are now cases that fail when read, naming
  the entry;
- names ending in ``_NNNN`` beside names without: :func:`list_image_cases` kept them apart while
  :func:`image_channel_files` stacked another case's scan as a second channel: one rule for both;
- a case id whose record ``<case>.json`` is one of an ``infer`` folder's own files (``infer.json``,
  ``failures.json``, another command's marker) is refused;
- ``--labels`` = ``--predictions`` (also through a link), and an image that is its case's label or prediction, are
  refused naming the options.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from monai_unc.io import (
    RESERVED_RECORD_NAMES,
    CaseError,
    ImageCase,
    check_case_ids,
    check_reference_folder,
    check_volume_entry,
    image_channel_files,
    list_files,
    list_image_cases,
    match_cases,
    read_probabilities,
    read_volume,
    save_nifti,
)


def _vol(path, value=0.0):
    save_nifti(np.full((4, 5, 6), value, np.float32), np.eye(4), path)
    return path


def test_entries_that_are_no_file_are_listed_and_fail_naming_why(tmp_path):
    _vol(tmp_path / "a.nii.gz")
    (tmp_path / "c.nii.gz").symlink_to(tmp_path / "share_not_mounted" / "c.nii.gz")  # a link to nothing
    (tmp_path / "d.nii.gz").mkdir()
    _vol(tmp_path / "d.nii.gz" / "d.nii.gz")  # a folder named like a volume
    (tmp_path / "p.npz").mkdir()
    assert sorted(list_files(tmp_path)) == ["a", "c", "d"]
    assert sorted(c.case_id for c in list_image_cases(tmp_path)) == ["a", "c", "d"]
    with pytest.raises(CaseError, match=r"c\.nii\.gz: a symbolic link to .*share_not_mounted.*which does not exist"):
        read_volume(tmp_path / "c.nii.gz")
    with pytest.raises(CaseError, match=r"d\.nii\.gz: a folder, not a volume file"):
        read_volume(tmp_path / "d.nii.gz")
    with pytest.raises(CaseError, match=r"p\.npz: a folder, not a volume file"):
        read_probabilities(tmp_path / "p.npz")
    check_volume_entry(tmp_path / "a.nii.gz")  # a file, a series folder and a missing path pass
    check_volume_entry(tmp_path)
    check_volume_entry(tmp_path / "missing.nii.gz")


def test_a_series_folder_beside_volume_files_is_a_case(tmp_path):
    _vol(tmp_path / "a.nii.gz")
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "IM0001").write_bytes(b"not dicom")
    (tmp_path / "empty").mkdir()  # no file: no case (as dicom_series_folders)
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x").write_bytes(b"")
    cases = list_image_cases(tmp_path)
    assert [(c.case_id, c.channels[0].name) for c in cases] == [("a", "a.nii.gz"), ("e", "e")]
    (tmp_path / "a").mkdir()  # a file and a folder of one case id: which one is the case would be a guess
    (tmp_path / "a" / "IM0001").write_bytes(b"")
    with pytest.raises(CaseError, match=r"case 'a': two inputs .*a\.nii\.gz and the folder a/"):
        list_image_cases(tmp_path)


def test_a_nifti_pair_beside_volume_files_is_a_case_that_fails_naming_the_conversion(tmp_path):
    """A NIfTI pair (SPM, FSL's NIFTI_PAIR: <case>.hdr + <case>.img) was left out without a word: ``infer`` wrote the
    other cases and exited 0. It is a case now; without itk (MONAI's only reader of it) it fails with the reason in
    one line (before: a pydicom error, "missing DICOM File Meta Information")."""
    nib = pytest.importorskip("nibabel")
    _vol(tmp_path / "a.nii.gz")
    nib.save(nib.Nifti1Pair(np.zeros((4, 5, 6), np.int16), np.eye(4)), tmp_path / "b.hdr")  # b.hdr and b.img
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.nii.gz", "b.hdr", "b.img"]
    cases = list_image_cases(tmp_path)
    assert [(c.case_id, c.channels[0].name) for c in cases] == [("a", "a.nii.gz"), ("b", "b.hdr")]
    try:
        import itk  # noqa: F401
    except ImportError:
        with pytest.raises(CaseError, match=r"b\.hdr: a NIfTI pair or Analyze file .*b\.img.*convert it to one "
                                            r"\.nii\.gz file") as info:
            read_volume(tmp_path / "b.hdr")
        assert "\n" not in str(info.value)
    nib.save(nib.Nifti1Pair(np.zeros((4, 5, 6), np.int16), np.eye(4)), tmp_path / "a.hdr")
    with pytest.warns(UserWarning, match=r"not read as cases: a\.hdr \(case 'a' is a\.nii\.gz\)"):
        cases = list_image_cases(tmp_path)  # the original beside its conversion: the volume file is the case
    assert [(c.case_id, c.channels[0].name) for c in cases] == [("a", "a.nii.gz"), ("b", "b.hdr")]
    only = tmp_path / "only_pairs"
    only.mkdir()
    nib.save(nib.Nifti1Pair(np.zeros((4, 5, 6), np.int16), np.eye(4)), only / "c.hdr")
    assert [c.case_id for c in list_image_cases(only)] == ["c"]  # before: "no image volume found"


def test_channel_files_follow_the_grouping_of_list_image_cases(tmp_path):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in ("p_0000", "p_0001", "c", "d"):
        _vol(mixed / f"{name}.nii.gz")
    cases = {c.case_id: [p.name for p in c.channels] for c in list_image_cases(mixed)}
    assert cases["p_0000"] == ["p_0000.nii.gz"] and cases["p_0001"] == ["p_0001.nii.gz"]
    # the case p_0000 that infer predicted is one file, not p_0000 with case p_0001's scan as a second channel
    assert [p.name for p in image_channel_files(mixed / "p_0000.nii.gz")] == ["p_0000.nii.gz"]
    grouped = tmp_path / "grouped"
    grouped.mkdir()
    for name in ("p_0000", "p_0001", "q_0000", "q_0001"):
        _vol(grouped / f"{name}.nii.gz")
    _vol(grouped / "p_0002.nii")  # another extension of the same case: one case, as list_image_cases groups it
    _vol(grouped / "q_0002.nii.gz")
    want = ["p_0000.nii.gz", "p_0001.nii.gz", "p_0002.nii"]
    assert [p.name for p in image_channel_files(grouped / "p_0000.nii.gz")] == want
    assert [p.name for p in next(c for c in list_image_cases(grouped) if c.case_id == "p").channels] == want
    assert image_channel_files(grouped / "p_0001.nii.gz") == (grouped / "p_0001.nii.gz",)


def test_different_channel_counts_name_a_case_of_each(tmp_path):
    for name in ("a_0000", "a_0001", "b_0000"):
        _vol(tmp_path / f"{name}.nii.gz")
    with pytest.raises(CaseError, match=r"'a' 2 \(a_0000\.nii\.gz, a_0001\.nii\.gz\).*'b' 1 \(b_0000\.nii\.gz\)|"
                                        r"'b' 1 \(b_0000\.nii\.gz\).*'a' 2"):
        list_image_cases(tmp_path)


@pytest.mark.parametrize("cid", ["infer", "failures", "Infer", "FAILURES", "summary", "triage"])
def test_case_ids_whose_record_is_a_file_of_the_folder_are_refused(tmp_path, cid):
    case = ImageCase(cid, (tmp_path / f"{cid}.nii.gz",))
    with pytest.raises(CaseError, match=rf"--input: case '{cid}' \({cid}\.nii\.gz\) cannot be predicted: its record "
                                        rf"{cid}\.json would be the output folder's own"):
        check_case_ids([ImageCase("a", (tmp_path / "a.nii.gz",)), case])
    check_case_ids(["a", f"{cid}_1", f"{cid}.x", f"my{cid}"])


def test_the_reserved_record_names_are_those_the_package_writes_and_reads():
    from monai_unc.io import INFER_RECORD, OUTPUT_MARKERS
    from monai_unc.workflows.options import FAILURES_FILE

    assert {INFER_RECORD, FAILURES_FILE} <= set(RESERVED_RECORD_NAMES)
    assert {n for names in OUTPUT_MARKERS.values() for n in names if n.endswith(".json")} <= set(RESERVED_RECORD_NAMES)


def test_labels_that_are_the_predictions_are_refused(tmp_path):
    pred = tmp_path / "pred"
    pred.mkdir()
    (tmp_path / "link").symlink_to(pred, target_is_directory=True)
    for labels in (pred, tmp_path / "link", tmp_path / "pred" / ".." / "pred"):
        with pytest.raises(ValueError, match=r"--labels and --predictions are the same folder .*scored against "
                                             "itself"):
            check_reference_folder(labels, pred)
    check_reference_folder(tmp_path / "labels", pred)


def test_an_image_that_is_the_cases_label_or_prediction_is_refused(tmp_path):
    lab, pred, nn = (tmp_path / n for n in ("lab", "pred", "nn"))
    for d in (lab, pred, nn):
        d.mkdir()
    for c in ("a", "b"):
        _vol(lab / f"{c}.nii.gz")
        _vol(pred / f"{c}_seg.nii.gz")
        _vol(nn / f"{c}.nii.gz")
    with pytest.raises(CaseError, match=r"--images .* and --labels name the same files: the image of case 'a' would be "
                                        r"its label a\.nii\.gz"):
        match_cases(lab, pred, images=lab)
    with pytest.raises(CaseError, match=r"and --predictions name the same files: the image of case 'a' would be its "
                                        r"segmentation a\.nii\.gz"):
        match_cases(lab, nn, layout="nnunet", images=os.fspath(nn))
    # triage lists a prediction folder against itself on purpose; its images must still be images
    assert [c.case_id for c in match_cases(nn, nn, layout="nnunet")] == ["a", "b"]
    with pytest.raises(CaseError, match=r"--images .* and --predictions name the same files"):
        match_cases(nn, nn, layout="nnunet", images=nn)


def test_a_stray_nifti_pair_does_not_refuse_a_folder_read_before(tmp_path):
    """Found by the review of NIfTI pairs: since a ``.hdr`` became a case, an image folder that every command read
    before was refused whole: ``evaluate --images`` exited 2 ("case 'case1': two inputs") for ``case1.nii.gz`` kept
    beside its original ``case1.hdr`` / ``.img``, and nnU-Net channel files beside an ``atlas.hdr`` gave "cases have
    different numbers of channels". Such a header is left out with a warning naming it; a folder of pairs alone
    still gives its cases."""
    nib = pytest.importorskip("nibabel")
    from monai_unc.io import match_cases

    pair = nib.Nifti1Pair(np.zeros((4, 5, 6), np.int16), np.eye(4))
    for name in ("labels/case1.nii.gz", "pred/case1_seg.nii.gz", "images/case1.nii.gz"):
        _vol(tmp_path / name)
    nib.save(pair, tmp_path / "images" / "case1.hdr")
    with pytest.warns(UserWarning, match=r"case1\.hdr \(case 'case1' is case1\.nii\.gz\)"):
        files = match_cases(tmp_path / "labels", tmp_path / "pred", images=tmp_path / "images")
    assert [f.image.name for f in files] == ["case1.nii.gz"]
    channels = tmp_path / "channels"
    for name in ("a_0000.nii.gz", "a_0001.nii.gz", "b_0000.nii.gz", "b_0001.nii.gz"):
        _vol(channels / name)
    nib.save(pair, channels / "atlas.hdr")
    with pytest.warns(UserWarning, match=r"atlas\.hdr \(one channel; the folder's cases have 2\)"):
        cases = list_image_cases(channels)
    assert [(c.case_id, len(c.channels)) for c in cases] == [("a", 2), ("b", 2)]
    series = tmp_path / "series"
    (series / "case2").mkdir(parents=True)
    (series / "case2" / "1.dcm").write_bytes(b"")
    nib.save(pair, series / "case2.hdr")
    nib.save(pair, series / "case3.hdr")
    with pytest.warns(UserWarning, match=r"case2\.hdr \(case 'case2' is case2/\)"):
        assert [c.case_id for c in list_image_cases(series)] == ["case2", "case3"]


def test_nifti_pairs_named_as_channel_files_are_channels_of_their_case(tmp_path):
    """Found by the review of NIfTI pairs: a header named as nnU-Net's channel files was a case of its own under its
    whole stem, so ``case1_0000.hdr`` kept beside its conversion ``case1_0000.nii.gz`` was predicted again as a case
    ``case1_0000``, and a case given as pairs alone (``case3_0000.hdr``) got the id ``case3_0000``, which its label
    ``case3`` does not match. Such headers are channels of their case, as the volume files are."""
    nib = pytest.importorskip("nibabel")
    pair = nib.Nifti1Pair(np.zeros((4, 5, 6), np.int16), np.eye(4))
    nn = tmp_path / "nnunet"
    for name in ("case1_0000.nii.gz", "case2_0000.nii.gz"):
        _vol(nn / name)
    nib.save(pair, nn / "case1_0000.hdr")
    nib.save(pair, nn / "case3_0000.hdr")
    with pytest.warns(UserWarning, match=r"case1_0000\.hdr \(case 'case1' is case1_0000\.nii\.gz\)"):
        cases = list_image_cases(nn)
    assert [(c.case_id, [p.name for p in c.channels]) for c in cases] == [
        ("case1", ["case1_0000.nii.gz"]), ("case2", ["case2_0000.nii.gz"]), ("case3", ["case3_0000.hdr"])]
    pairs = tmp_path / "pairs"
    pairs.mkdir()
    for name in ("a_0000.hdr", "a_0001.hdr", "b_0000.hdr", "b_0001.hdr"):
        nib.save(pair, pairs / name)
    assert [(c.case_id, [p.name for p in c.channels]) for c in list_image_cases(pairs)] == [
        ("a", ["a_0000.hdr", "a_0001.hdr"]), ("b", ["b_0000.hdr", "b_0001.hdr"])]
    assert [c.case_id for c in list_image_cases(pairs, channel_suffix="none")] == [
        "a_0000", "a_0001", "b_0000", "b_0001"]
    # the channels of a case's first header are its case's (triage's image features read every channel), found by
    # the review of the session after: image_channel_files gave the first header alone
    assert [p.name for p in image_channel_files(pairs / "a_0000.hdr")] == ["a_0000.hdr", "a_0001.hdr"]
    assert [p.name for p in image_channel_files(nn / "case3_0000.hdr")] == ["case3_0000.hdr"]
    nib.save(pair, nn / "atlas_0002.hdr")  # numbered with a gap: a case of its own, as before, not a refusal
    with pytest.warns(UserWarning, match=r"case1_0000\.hdr"):
        assert [c.case_id for c in list_image_cases(nn)] == ["atlas_0002", "case1", "case2", "case3"]


@pytest.mark.parametrize("pairs", [False, True], ids=["nifti", "pairs"])
def test_channel_files_list_a_folder_once_while_it_is_unchanged(tmp_path, monkeypatch, pairs):
    """Found by review: image_channel_files listed the whole folder in every call (three calls a case in a triage),
    so a cohort's cost grew with the square of its size. The listing is kept while the folder is unchanged; a file
    added, removed or renamed is seen by the next call."""
    import nibabel as nib

    import monai_unc.io.cases as cases

    def write(name):
        img = np.zeros((2, 2, 2), np.int16)
        if pairs:
            nib.save(nib.Nifti1Pair(img, np.eye(4)), tmp_path / f"{name}.hdr")
        else:
            nib.save(nib.Nifti1Image(img, np.eye(4)), tmp_path / f"{name}.nii.gz")

    ext = ".hdr" if pairs else ".nii.gz"
    for case in ("a", "b", "c"):
        for ch in (0, 1):
            write(f"{case}_{ch:04d}")
    monkeypatch.setattr("monai_unc.io.files.SETTLE_S", -1)  # a folder changed just now is kept too (here)
    calls = []
    lister = "_image_cases" if pairs else "list_files"  # list_image_cases' listing without its warnings
    real = getattr(cases, lister)
    monkeypatch.setattr(cases, lister, lambda *a, **k: calls.append(1) or real(*a, **k))
    for case in ("a", "b", "c", "a"):
        got = image_channel_files(tmp_path / f"{case}_0000{ext}")
        assert [p.name for p in got] == [f"{case}_0000{ext}", f"{case}_0001{ext}"]
    assert len(calls) == 1
    write("d_0000")  # a new case: the folder changed
    write("d_0001")
    assert [p.name for p in image_channel_files(tmp_path / f"d_0000{ext}")] == [f"d_0000{ext}", f"d_0001{ext}"]
    assert len(calls) == 2
    assert image_channel_files(tmp_path / f"b_0001{ext}") == (tmp_path / f"b_0001{ext}",)  # not a first channel
    for f in tmp_path.glob("c_000*"):  # a case removed
        f.unlink()
    assert image_channel_files(tmp_path / f"c_0000{ext}") == (tmp_path / f"c_0000{ext}",)


def test_a_channel_added_within_a_coarse_timestamp_tick_is_seen(tmp_path, monkeypatch):
    """Found by hostile review: on a file system with coarse timestamps (ext2 / FAT / NFS: 1-2 s) a channel file
    written just after the folder was listed left the folder's times unchanged, and the kept listing missed it on
    every call. A folder changed in the last seconds is listed again each time. The coarse times are simulated here
    (the folder's times frozen at the current second), as a loop-mounted ext2 folder gives them."""
    import pathlib

    import nibabel as nib

    def write(name):
        nib.save(nib.Nifti1Image(np.zeros((2, 2, 2), np.int16), np.eye(4)), tmp_path / f"{name}.nii.gz")

    frozen = (os.stat(tmp_path).st_mtime_ns // 1_000_000_000) * 1_000_000_000
    real_stat = pathlib.Path.stat

    def coarse_stat(self, *a, **k):
        st = real_stat(self, *a, **k)
        if os.path.abspath(self) != os.path.abspath(tmp_path):
            return st
        fields = list(st[:10])
        fields[8] = fields[9] = frozen // 1_000_000_000  # st_mtime, st_ctime (whole seconds)
        return os.stat_result(fields, {"st_mtime_ns": frozen, "st_ctime_ns": frozen, "st_atime_ns": frozen})

    monkeypatch.setattr(pathlib.Path, "stat", coarse_stat)
    write("case1_0000")
    write("case1_0001")
    first = tmp_path / "case1_0000.nii.gz"
    assert [p.name for p in image_channel_files(first)] == ["case1_0000.nii.gz", "case1_0001.nii.gz"]
    write("case1_0002")  # the same tick: the folder's (coarse) times do not change
    assert [p.name for p in image_channel_files(first)] == [f"case1_000{i}.nii.gz" for i in range(3)]
