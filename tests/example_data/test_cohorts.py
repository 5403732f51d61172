"""The demo cohorts (:mod:`monai_unc.data.cohorts`): the full demo's calibration and new cases, and their seeds."""

import csv

import nibabel as nib
import numpy as np
import pytest

from monai_unc.data.cohorts import DEMO_CALIBRATION_SHIFTS, DEMO_NEW_SHIFTS, DEMO_SHIFTS, make_demo_cohort


def test_full_demo_cohorts_are_disjoint_graded_and_labelled_by_the_training_range():
    cal, new = DEMO_CALIBRATION_SHIFTS, DEMO_NEW_SHIFTS
    ids = [c[0] for c in cal + new]
    assert len(ids) == len(set(ids)) == 54 and (len(cal), len(new)) == (42, 12)
    assert not {c[0] for c in DEMO_SHIFTS} & set(ids)
    # no new case repeats a calibration case (same perturbation and level)
    assert not {c[2:] for c in cal} & {c[2:] for c in new}
    kinds = {"gamma_noise", "noise", "bias", "gamma", "blur", "lowres"}
    assert {c[2] for c in cal} == kinds | {"identity"} and {c[2] for c in new} <= kinds
    for kind in kinds:  # graded: at least three levels of every kind to calibrate on
        assert len({c[3] for c in cal if c[2] == kind}) >= 3, kind
    labels = {(c[2], c[3]): c[1] for c in cal + new}
    # inside the training augmentation range: "none"; beyond it: the kind
    assert labels[("noise", 0.03)] == "none" and labels[("noise", 0.06)] == "noise"
    assert labels[("bias", 0.3)] == "none" and labels[("bias", 0.5)] == "bias field"
    assert labels[("gamma", 1.3)] == "none" and labels[("gamma", 0.6)] == "contrast"
    assert labels[("gamma", 2.0)] == "contrast" and labels[("blur", 1.0)] == "none"
    assert labels[("blur", 1.5)] == "blur" and labels[("lowres", 2.0)] == "resolution"
    assert sum(c[1] == "none" for c in cal) >= len(cal) // 2  # mostly mild, as a clinic's stream is


def test_demo_case_noise_is_the_same_in_any_subset_and_every_given_case_is_written(tmp_path):
    pytest.importorskip("nilearn")
    noisy = DEMO_SHIFTS[3]  # right_noise010
    alone = make_demo_cohort(tmp_path / "a", shifts=[noisy])
    both = make_demo_cohort(tmp_path / "b", shifts=[DEMO_SHIFTS[0], noisy, DEMO_NEW_SHIFTS[3]])
    name = f"{noisy[0]}.nii.gz"
    a = nib.load(alone["images"] / name).get_fdata()
    np.testing.assert_array_equal(a, nib.load(both["images"] / name).get_fdata())
    # a case of the full demo is written too (the cohort writer once wrote only cases of DEMO_SHIFTS), with noise
    # of its own
    new = nib.load(both["images"] / f"{DEMO_NEW_SHIFTS[3][0]}.nii.gz").get_fdata()
    assert new.shape == a.shape and not np.array_equal(new, a)
    custom = ("my_noise", "noise", "noise", 0.10)  # a case of no shipped list: seeded by its id
    c1 = make_demo_cohort(tmp_path / "c", shifts=[custom])
    c2 = make_demo_cohort(tmp_path / "d", shifts=[custom])
    np.testing.assert_array_equal(nib.load(c1["images"] / "my_noise.nii.gz").get_fdata(),
                                  nib.load(c2["images"] / "my_noise.nii.gz").get_fdata())
    assert not np.array_equal(nib.load(c1["images"] / "my_noise.nii.gz").get_fdata(), a)
    with open(both["shifts"]) as f:
        assert [r["case"] for r in csv.DictReader(f)] == [DEMO_SHIFTS[0][0], noisy[0], DEMO_NEW_SHIFTS[3][0]]
    with pytest.raises(ValueError, match="shifts names a case twice"):
        make_demo_cohort(tmp_path / "e", shifts=[noisy, noisy])
