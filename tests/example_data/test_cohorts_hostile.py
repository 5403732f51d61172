"""Hostile reruns of the demo cohort writer (data/cohorts.py): a folder written with another seed, perturbation or
parameter, a missing record, an interrupted run. A small fake template keeps every test fast."""

from __future__ import annotations

import csv

import nibabel as nib
import numpy as np
import pytest

import monai_unc.data.cohorts as cohorts
from monai_unc.data.cohorts import make_demo_cohort


@pytest.fixture
def small_template(monkeypatch):
    rng = np.random.default_rng(0)
    image = rng.uniform(0.1, 0.9, size=(1, 8, 6, 10)).astype(np.float32)
    right = np.zeros((8, 6, 10), bool)
    right[4:] = True
    data = {"image": image, "label": rng.integers(0, 3, (1, 8, 6, 10)), "right": right, "affine": np.eye(4)}
    monkeypatch.setattr(cohorts, "load_mni152_tissue", lambda resolution=2: data)
    return data


def image_of(folder, case):
    return nib.load(folder / "images" / f"{case}.nii.gz").get_fdata()


def test_a_rerun_with_another_parameter_or_seed_remakes_the_case(tmp_path, small_template):
    """Regression: existing images were kept whatever they were made with, so a rerun with another parameter (or
    seed) under the same case id left the old image while ``shifts.csv`` recorded the new parameter."""
    first = make_demo_cohort(tmp_path, seed=0, shifts=[("x", "none", "noise", 0.05)])
    a = image_of(tmp_path, "x")
    make_demo_cohort(tmp_path, seed=0, shifts=[("x", "noise", "noise", 0.3)])
    b = image_of(tmp_path, "x")
    assert np.std(b - small_template["image"][0, 4:]) > 3 * np.std(a - small_template["image"][0, 4:])
    with open(first["shifts"]) as f:
        assert [r["parameter"] for r in csv.DictReader(f)] == ["0.3"]
    make_demo_cohort(tmp_path, seed=1, shifts=[("x", "noise", "noise", 0.3)])
    assert not np.array_equal(image_of(tmp_path, "x"), b)
    make_demo_cohort(tmp_path, seed=0, shifts=[("x", "none", "noise", 0.05)])
    np.testing.assert_array_equal(image_of(tmp_path, "x"), a)  # reproducible from (seed, kind, value)


def test_an_unchanged_rerun_keeps_the_files(tmp_path, small_template):
    make_demo_cohort(tmp_path, seed=0, shifts=[("x", "none", "noise", 0.05)])
    path = tmp_path / "images" / "x.nii.gz"
    before = path.stat().st_mtime_ns, path.stat().st_ino
    make_demo_cohort(tmp_path, seed=0, shifts=[("x", "none", "noise", 0.05)])
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == before


def test_a_folder_without_its_record_is_made_again(tmp_path, small_template):
    make_demo_cohort(tmp_path, seed=0, shifts=[("x", "none", "noise", 0.05)])
    a = image_of(tmp_path, "x")
    nib.save(nib.Nifti1Image(np.zeros_like(a, dtype=np.float32), np.eye(4)), tmp_path / "images" / "x.nii.gz")
    (tmp_path / "demo_cases.json").write_text("{broken")
    make_demo_cohort(tmp_path, seed=0, shifts=[("x", "none", "noise", 0.05)])
    np.testing.assert_array_equal(image_of(tmp_path, "x"), a)


def test_an_interrupted_remake_is_never_taken_for_the_old_case(tmp_path, small_template, monkeypatch):
    make_demo_cohort(tmp_path, seed=0, shifts=[("x", "none", "noise", 0.05)])
    a = image_of(tmp_path, "x")
    real = cohorts.save_nifti
    calls = []

    def interrupted(arr, affine, path):
        calls.append(path)
        if len(calls) == 2:  # after the new image, before its label and record
            raise KeyboardInterrupt
        return real(arr, affine, path)

    monkeypatch.setattr(cohorts, "save_nifti", interrupted)
    with pytest.raises(KeyboardInterrupt):
        make_demo_cohort(tmp_path, seed=0, shifts=[("x", "noise", "noise", 0.3)])
    monkeypatch.setattr(cohorts, "save_nifti", real)
    make_demo_cohort(tmp_path, seed=0, shifts=[("x", "none", "noise", 0.05)])
    np.testing.assert_array_equal(image_of(tmp_path, "x"), a)


def test_a_case_made_before_its_perturbation_changed_is_made_again(tmp_path, small_template):
    """Regression: ``lowres`` was corrected (kept slices no longer stretched along z) but a demo folder made before
    recorded only (seed, perturbation, parameter), so a rerun kept the old, misaligned image."""
    make_demo_cohort(tmp_path, seed=0, shifts=[("x", "resolution", "lowres", 4.0)])
    good = image_of(tmp_path, "x")
    made = cohorts.read_json_or_none(tmp_path / "demo_cases.json")
    assert made["x"][:3] == [0, "lowres", 4.0]
    made["x"] = made["x"][:3]  # the record of the earlier version
    cohorts.atomic_write_json(tmp_path / "demo_cases.json", made)
    nib.save(nib.Nifti1Image(np.zeros_like(good, dtype=np.float32), np.eye(4)), tmp_path / "images" / "x.nii.gz")
    make_demo_cohort(tmp_path, seed=0, shifts=[("x", "resolution", "lowres", 4.0)])
    np.testing.assert_array_equal(image_of(tmp_path, "x"), good)


def test_a_toy_cohort_never_mixes_two_calls(tmp_path):
    """A second ``write_toy_cohort`` with fewer cases left the first call's cases beside its own (six images, a
    shift table of two); a rerun of the same call, and one adding predictions, rewrite in place."""
    from monai_unc.data.cohorts import write_toy_cohort

    first = write_toy_cohort(tmp_path, n_cases=3, shape=(8, 8, 8), predictions=False)
    again = write_toy_cohort(tmp_path, n_cases=3, shape=(8, 8, 8), predictions=True, seed=1)
    assert sorted(p.name for p in again["predictions"].iterdir())[0] == "toy000_predictive_entropy.nii.gz"
    assert len(list(first["images"].iterdir())) == 3
    with pytest.raises(ValueError, match=r"folder .* holds 5 file\(s\) that this cohort does not write .*toy002"):
        write_toy_cohort(tmp_path, n_cases=2, shape=(8, 8, 8))
    with open(tmp_path / "shifts.csv", newline="") as f:
        assert [r["case"] for r in csv.DictReader(f)] == ["toy000", "toy001", "toy002"]


def test_a_toy_cohort_without_predictions_never_keeps_an_earlier_calls_predictions(tmp_path):
    """review38: a call with ``predictions=False`` rewrote images and labels (another shape, another seed) beside the
    first call's ``predictions/`` of other images, which ``evaluate`` would then pair with the new labels."""
    from monai_unc.data.cohorts import write_toy_cohort

    write_toy_cohort(tmp_path, n_cases=2, shape=(8, 8, 8), predictions=True)
    before = (tmp_path / "labels" / "toy000.nii.gz").read_bytes()
    with pytest.raises(ValueError, match=r"holds 6 file\(s\) that this cohort does not write .*predictions/toy000"):
        write_toy_cohort(tmp_path, n_cases=2, shape=(6, 6, 6), predictions=False, seed=3)
    assert (tmp_path / "labels" / "toy000.nii.gz").read_bytes() == before  # refused before any write
