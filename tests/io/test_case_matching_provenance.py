"""Case matching by id where a case id ends like a map name (io/cases.py ``match_cases``)."""

from __future__ import annotations

import warnings

import pytest

from monai_unc.io import match_cases
from monai_unc.io.provenance import list_prediction_cases


def _touch(root, *names):
    for n in names:
        p = root / n
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")


def test_nnunet_segmentation_of_a_case_named_like_a_map_is_read(tmp_path):
    # found by hostile testing: every nnU-Net segmentation whose name ended in _<measure> was taken for a map, so the
    # case 'scan_variance' scored the argmax of its probabilities instead of its segmentation (or was refused)
    _touch(tmp_path, "lab/scan_variance.nii.gz", "lab/b.nii.gz", "pred/scan_variance.nii.gz", "pred/b.nii.gz",
           "pred/scan_variance.npz", "pred/b.npz", "pred/uncertainty/scan_variance_variance.nii.gz",
           "pred/uncertainty/b_variance.nii.gz")
    found = {c.case_id: c for c in match_cases(tmp_path / "lab", tmp_path / "pred", layout="nnunet")}
    assert sorted(found) == ["b", "scan_variance"]
    assert found["scan_variance"].seg.name == "scan_variance.nii.gz"
    assert found["scan_variance"].maps["variance"].name == "scan_variance_variance.nii.gz"
    triage = {c.case_id: c for c in list_prediction_cases(tmp_path / "pred", "nnunet", measure="variance")}
    assert triage["scan_variance"].seg.name == "scan_variance.nii.gz"
    (tmp_path / "pred/scan_variance.npz").unlink()  # no probabilities: the segmentation alone, not a refusal
    assert [c.seg.name for c in match_cases(tmp_path / "lab", tmp_path / "pred", layout="nnunet")] == [
        "b.nii.gz", "scan_variance.nii.gz"]


@pytest.mark.parametrize("kwargs", [dict(seg_suffix=""), dict(layout="nnunet", uncertainty="pred")])
def test_maps_beside_the_segmentations_stay_maps(tmp_path, kwargs):
    _touch(tmp_path, "lab/a.nii.gz", "pred/a.nii.gz", "pred/a_variance.nii.gz", "pred/a_max_softmax.nii.gz")
    if "uncertainty" in kwargs:
        kwargs = {**kwargs, "uncertainty": tmp_path / kwargs["uncertainty"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the deprecated name max_softmax is read with a warning
        found = match_cases(tmp_path / "lab", tmp_path / "pred", **kwargs)
    assert [(c.case_id, c.seg.name, sorted(c.maps)) for c in found] == [
        ("a", "a.nii.gz", ["one_minus_max_prob", "variance"])]


@pytest.mark.parametrize("uncertainty", [None, "pred"])
def test_a_map_left_by_a_removed_case_is_no_unlabelled_prediction(tmp_path, uncertainty):
    """A map of a case no longer predicted (``c3_predictive_entropy``) beside the segmentations: dropped as a map,
    not read as the segmentation of an unlabelled case ``c3_predictive_entropy`` (which refused the whole run; found
    by the review of the session's change)."""
    _touch(tmp_path, "lab/c1.nii.gz", "lab/c2.nii.gz", "pred/c1.nii.gz", "pred/c2.nii.gz",
           "pred/c1_predictive_entropy.nii.gz", "pred/c2_predictive_entropy.nii.gz",
           "pred/c3_predictive_entropy.nii.gz")
    unc = None if uncertainty is None else tmp_path / uncertainty
    found = match_cases(tmp_path / "lab", tmp_path / "pred", layout="nnunet", uncertainty=unc)
    assert [c.case_id for c in found] == ["c1", "c2"]
