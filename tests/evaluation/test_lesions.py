"""The lesion-wise product's computations: the lesion-level retention curve against a brute-force numpy reference, and
the existence probability / volume spread read from per-sample masks against a direct count."""

from __future__ import annotations

import math
import tracemalloc
from itertools import permutations
from types import SimpleNamespace

import nibabel as nib
import numpy as np
import pytest
from scipy import ndimage

from monai_unc.activation import TaskView
from monai_unc.evaluation.lesions import (
    RETENTION_REFERRED,
    LesionState,
    lesion_case_state,
    lesion_retention,
    read_lesion_samples,
    summarize_lesions,
)
from monai_unc.io import cases as cases_module
from monai_unc.io import save_label_maps, save_region_maps

FULL = ndimage.generate_binary_structure(3, 3)


def _brute_retention(u, v, tau):
    """Mean of ``v`` over the lesions kept after referring ``ceil(tau n)`` of the most uncertain, averaged over every
    order of the tied lesions (all permutations: ties broken by the permutation, sort stable)."""
    n = len(u)
    kept = n - math.ceil(round(tau * n, 9))
    if kept == 0:
        return math.nan
    means = []
    for perm in permutations(range(n)):
        order = sorted(perm, key=lambda i: u[i])  # stable: ties in the permutation's order
        means.append(np.mean([v[i] for i in order[:kept]]))
    return float(np.mean(means))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_retention_equals_brute_force_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = 6
    u = rng.integers(0, 3, n).astype(float)  # many ties
    dice = np.round(rng.uniform(0, 1, n), 3)
    fp = rng.uniform(size=n) < 0.4
    dice[fp] = 0.0
    taus = (0.0, 0.1, 0.25, 0.5, 0.8)
    curve = lesion_retention(u, dice, fp, referred=taus)
    for i, t in enumerate(taus):
        assert curve["dice"][i] == pytest.approx(_brute_retention(u, dice, t), abs=1e-12)
        assert curve["false_positive_share"][i] == pytest.approx(_brute_retention(u, fp.astype(float), t), abs=1e-12)
        assert curve["oracle_dice"][i] == pytest.approx(_brute_retention(-dice, dice, t), abs=1e-12)
        assert curve["kept"][i] == n - math.ceil(round(t * n, 9))


def test_retention_properties_and_edge_cases():
    rng = np.random.default_rng(5)
    dice = rng.uniform(0, 1, 40)
    u = rng.uniform(0, 1, 40)
    curve = lesion_retention(u, dice, dice < 0.2)
    assert curve["referred"] == list(RETENTION_REFERRED)
    assert curve["dice"][0] == pytest.approx(dice.mean())  # nothing referred: the mean over every lesion
    assert all(o >= d - 1e-12 for o, d in zip(curve["oracle_dice"], curve["dice"]))  # the oracle bounds any score
    perfect = lesion_retention(1.0 - dice, dice, dice < 0.2)  # a score that ranks like the oracle
    assert perfect["dice"] == pytest.approx(perfect["oracle_dice"])
    const = lesion_retention(np.zeros(40), dice, dice < 0.2)  # a constant score: referral at random (ties averaged)
    assert const["dice"] == pytest.approx([dice.mean()] * len(RETENTION_REFERRED))
    # non-finite scores are left out; none finite: no curve
    u_nan = u.copy()
    u_nan[:10] = np.nan
    part = lesion_retention(u_nan, dice, dice < 0.2, referred=(0.0,))
    assert part["kept"] == [30] and part["dice"][0] == pytest.approx(dice[10:].mean())
    assert lesion_retention([np.nan], [0.5], [0]) is None
    with pytest.raises(ValueError, match="one length"):
        lesion_retention([0.1, 0.2], [0.5], [0, 1])


def _sphere(shape, c, r):
    g = np.ogrid[tuple(slice(0, s) for s in shape)]
    return sum((x - y) ** 2 for x, y in zip(g, c)) <= r * r


def _cohort_case(seed):
    """Labels 0/1/2, four lesions of class 1 and one of class 2; samples drop lesions at random."""
    rng = np.random.default_rng(seed)
    shape = (24, 22, 18)
    pred = np.zeros(shape, np.int64)
    centres = [(5, 5, 5), (5, 15, 10), (16, 6, 12), (17, 16, 5)]
    for c in centres:
        pred[_sphere(shape, c, 2.5)] = 1
    pred[_sphere(shape, (12, 11, 9), 2.0)] = 2
    truth = np.zeros_like(pred)
    truth[_sphere(shape, (5, 5, 5), 2.5)] = 1
    truth[_sphere(shape, (16, 6, 12), 3.0)] = 1
    truth[_sphere(shape, (12, 11, 9), 2.0)] = 2
    samples = []
    for _ in range(5):
        s = np.zeros_like(pred)
        for c in centres + [(12, 11, 9)]:
            if rng.uniform() < 0.7:
                s[_sphere(shape, c, float(rng.uniform(1.5, 3.0)))] = pred[c]
        samples.append(s)
    return pred, truth, np.stack(samples)


def _brute_existence(mask, sample_masks):
    """Per lesion (26-connected, raster order): the share of samples with a foreground voxel inside it, and the
    coefficient of variation of the volume of the sample's components that touch it."""
    lab, n = ndimage.label(mask, FULL)
    exist, cv = [], []
    for k in range(1, n + 1):
        les = lab == k
        vols = []
        for s in sample_masks:
            s_lab, _ = ndimage.label(s, FULL)
            touching = set(np.unique(s_lab[les & s])) - {0}
            vols.append(sum(int((s_lab == j).sum()) for j in touching))
        exist.append(np.mean([v > 0 for v in vols]))
        cv.append(np.std(vols) / np.mean(vols) if np.mean(vols) > 0 else np.nan)
    return np.array(exist), np.array(cv)


def test_case_state_with_samples_equals_a_direct_count(tmp_path):
    pred, truth, samples = _cohort_case(0)
    spacing = (1.0, 1.2, 2.0)
    affine = np.diag([*spacing, 1.0])
    affine[:3, 3] = (-10.0, 5.0, 2.0)
    save_region_maps(samples.astype(np.float32), affine, tmp_path / "c1_samples.nii.gz")
    read = read_lesion_samples(tmp_path, "c1", pred.shape)
    assert read.dtype == np.uint8 and np.array_equal(read, samples)  # a float file: the smallest type of its labels
    u = np.random.default_rng(1).uniform(0, 1, pred.shape)
    task = TaskView(None, pred, truth, 3, maps={"pe": u}, spacing=spacing)
    case = SimpleNamespace(case_id="c1", spacing=spacing, affine=affine)
    options = {"dilation": 1, "min_volume": 0.0, "iou": 0.25, "hd_penalty": 374.0, "r": 0.001}
    state = lesion_case_state(case, [task], options, None, "pe", samples=read)
    a = state.arrays
    assert a["samples"].tolist() == [5]
    for c in (1, 2):
        exist, cv = _brute_existence(pred == c, samples == c)
        np.testing.assert_allclose(a[f"lesion.{c}.existence"], exist)
        np.testing.assert_allclose(a[f"lesion.{c}.score.existence_uncertainty"], 1.0 - exist)
        np.testing.assert_allclose(a[f"lesion.{c}.score.volume_cv"], cv)
        # the world centre is the affine applied to the voxel centre
        vox = np.stack([a[f"lesion.{c}.center_{d}"] for d in range(3)], 1)
        mm = np.stack([a[f"lesion.{c}.center_mm_{d}"] for d in range(3)], 1)
        np.testing.assert_allclose(mm, vox * spacing + affine[:3, 3])
    # regions: the samples' regions from the spec
    regions = {"all": [1, 2], "two": [2]}
    tasks = [TaskView(r, np.isin(pred, v).astype(np.int64), np.isin(truth, v).astype(np.int64), 2,
                      maps={"pe": u}, spacing=spacing) for r, v in regions.items()]
    rs = lesion_case_state(case, tasks, options, None, "pe", samples=read, regions=regions)
    exist, _ = _brute_existence(np.isin(pred, [1, 2]), np.isin(samples, [1, 2]))
    np.testing.assert_allclose(rs.arrays["lesion.all.existence"], exist)
    with pytest.raises(ValueError, match="not in the region spec"):
        lesion_case_state(case, tasks, options, None, "pe", samples=read, regions={"all": [1, 2]})


def test_read_samples_refuses_bad_files(tmp_path):
    save_region_maps(np.full((2, 4, 4, 4), 0.5, np.float32), np.eye(4), tmp_path / "p_samples.nii.gz")
    with pytest.raises(ValueError, match="integer label maps"):
        read_lesion_samples(tmp_path, "p", (4, 4, 4))
    with pytest.raises(ValueError, match="grid"):
        read_lesion_samples(tmp_path, "p", (4, 4, 5))
    with pytest.raises(FileNotFoundError, match="no per-sample masks"):
        read_lesion_samples(tmp_path, "missing", (4, 4, 4))
    for bad in (-1.0, np.nan, np.inf, 2.0**40):  # a float file's labels: whole, finite, non-negative, not huge
        values = np.zeros((2, 4, 4, 4), np.float32)
        values[1, 2, 3, 1] = bad
        save_region_maps(values, np.eye(4), tmp_path / "f_samples.nii.gz")
        with pytest.raises(ValueError, match="integer label maps"):
            read_lesion_samples(tmp_path, "f", (4, 4, 4))
    nib.save(nib.Nifti1Image(np.full((4, 4, 4, 2), -3, np.int16), np.eye(4)), tmp_path / "i_samples.nii.gz")
    with pytest.raises(ValueError, match="integer label maps"):
        read_lesion_samples(tmp_path, "i", (4, 4, 4))


@pytest.mark.parametrize(("top", "dtype"), [(200, np.uint8), (300, np.uint16), (70000, np.uint32)])
def test_float_lesion_samples_become_the_smallest_unsigned_type(tmp_path, top, dtype):
    """Whole-number float samples (float64 files) come back as the smallest unsigned type holding their largest
    label, every label exact (70000 would wrap to 4464 in uint16)."""
    values = np.zeros((2, 4, 4, 4))
    values[1, 2, 3, 1], values[0, 0, 0, 0] = top, top - 1
    save_region_maps(values, np.eye(4), tmp_path / "d_samples.nii.gz")
    read = read_lesion_samples(tmp_path, "d", (4, 4, 4))
    assert read.dtype == dtype and np.array_equal(read, values)


@pytest.mark.parametrize("top", [104, 300], ids=["uint8", "uint16"])
def test_lesion_samples_are_read_in_the_files_integer_type(tmp_path, top):
    """Found by hostile testing: ``read_lesion_samples`` read 1-byte label maps as float32, checked them with float
    and boolean temporaries of the whole array and returned an int64 copy while the float copy was alive: ~12 bytes
    of memory per sample-voxel (~70 GiB for 80 samples of a 512 x 512 x 300 CT). The samples come back in the file's
    type (uint8 / uint16, as ``save_label_maps`` writes them), read straight into one array: about one byte per
    sample-voxel of a 1-byte file (two without python-isal, whose gzip reader this chunked read uses)."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, top + 1, size=(8, 64, 64, 40)).astype(np.uint8 if top < 256 else np.uint16)
    save_label_maps(labels, np.diag([0.7, 0.7, 5.0, 1.0]), tmp_path / "c_samples.nii.gz")
    tracemalloc.start()
    try:
        read = read_lesion_samples(tmp_path, "c", labels.shape[1:])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert read.dtype == labels.dtype and np.array_equal(read, labels)
    copies = 1 if cases_module._igzip is not None else 2
    assert peak <= copies * labels.nbytes + (2 << 20)  # the labels, a megabyte of read buffer


def test_lesion_results_of_the_files_integer_type_equal_those_of_int64_samples(tmp_path):
    """The samples as the file stores them (uint8, in its order) give the lesion state of the int64 copy the read
    returned before."""
    pred, truth, samples = _cohort_case(0)
    spacing = (1.0, 1.2, 2.0)
    affine = np.diag([*spacing, 1.0])
    save_label_maps(samples, affine, tmp_path / "c1_samples.nii.gz")
    read = read_lesion_samples(tmp_path, "c1", pred.shape)
    assert read.dtype == np.uint8 and np.array_equal(read, samples)
    u = np.random.default_rng(1).uniform(0, 1, pred.shape)
    case = SimpleNamespace(case_id="c1", spacing=spacing, affine=affine)
    options = {"dilation": 1, "min_volume": 0.0, "iou": 0.25, "hd_penalty": 374.0, "r": 0.001}
    regions = {"all": [1, 2], "two": [2]}
    for tasks, spec in (([TaskView(None, pred, truth, 3, maps={"pe": u}, spacing=spacing)], None),
                        ([TaskView(r, np.isin(pred, v).astype(np.int64), np.isin(truth, v).astype(np.int64), 2,
                                   maps={"pe": u}, spacing=spacing) for r, v in regions.items()], regions)):
        new = lesion_case_state(case, tasks, options, None, "pe", samples=read, regions=spec).arrays
        old = lesion_case_state(case, tasks, options, None, "pe", samples=read.astype(np.int64), regions=spec).arrays
        assert list(new) == list(old)
        for k in new:
            np.testing.assert_array_equal(new[k], old[k], err_msg=k)


def test_summary_says_once_that_samples_are_missing():
    pred, truth, _ = _cohort_case(1)
    task = TaskView(None, pred, truth, 3, maps={"pe": np.zeros(pred.shape)}, spacing=(1.0, 1.0, 1.0))
    case = SimpleNamespace(case_id="c", spacing=(1.0, 1.0, 1.0), affine=np.eye(4))
    options = {"dilation": 1, "min_volume": 0.0, "iou": 0.25, "hd_penalty": 374.0, "r": 0.001, "failure_dice": 0.5}
    s1 = lesion_case_state(case, [task], options, None, "pe")
    s2 = lesion_case_state(case, [task], options, None, "pe")
    merged = LesionState(dict(s1.arrays)).merge(s2)
    block = summarize_lesions(merged, ["a", "b"], options)
    assert block["samples"] is None and len(block["notes"]) == 1 and "existence" in block["notes"][0]
    assert all(d["existence"] is None for d in block["lesions"])
    assert not any("existence" in s for s in block["per_task"]["1"]["failure_detection"])
    ret = block["per_task"]["1"]["retention"]
    assert ret["score"] == "pe_mean" and ret["kept"][0] == block["per_task"]["1"]["n_predicted_lesions"]


def test_retention_leaves_out_shares_that_refer_every_lesion():
    curve = lesion_retention([0.3, 0.1], [0.5, 0.9], [0, 0])  # two lesions: one kept up to 50 % referred, then none
    assert curve["referred"] == [round(0.05 * k, 2) for k in range(11)] and curve["kept"][-1] == 1
    assert curve["dice"][-1] == pytest.approx(0.9)
    with pytest.raises(ValueError, match="referred"):
        lesion_retention([0.3], [0.5], [0], referred=(1.0,))


def _many_class_case(n_classes, size=48):
    """A ``size``^3 case with one small lesion per foreground class (the prediction shifted by a voxel) and a map."""
    lab = np.zeros((size, size, size), np.int64)
    for c in range(1, n_classes):
        x, y = 2 + 5 * (c % 6), 2 + 5 * (c // 6)
        lab[x:x + 3, y:y + 3, 10:13] = c
    u = np.random.default_rng(0).random(lab.shape).astype(np.float32)
    task = TaskView(None, np.roll(lab, 1, axis=2), lab, n_classes, maps={"pe": u, "mi": u / 2})
    case = SimpleNamespace(case_id="x", spacing=(1.0, 1.0, 1.0), affine=np.eye(4), label_file=None)
    return case, task


def test_lesion_case_state_memory_does_not_grow_with_the_class_count():
    """One class's pair of masks at a time, the maps in float64 once per task: the peak of a case of 25 classes is
    that of 3 classes (a whole-body model's hundred classes held 2 (C - 1) boolean volumes and a float64 copy of
    every map per class; found by the scale review: +2 bytes per voxel per class)."""
    options = {"dilation": 3, "min_volume": 0.0, "hd_penalty": 374.0, "iou": 0.25, "r": 0.001}
    case, task = _many_class_case(3)
    lesion_case_state(case, [task], options, None, "pe")  # the first call's one-off imports and tables
    peaks = {}
    for n_classes in (3, 25):
        case, task = _many_class_case(n_classes)
        tracemalloc.start()
        try:
            state = lesion_case_state(case, [task], options, None, "pe")
            peaks[n_classes] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert state.tasks() == [str(c) for c in range(1, n_classes)]
    voxels = 48**3
    assert peaks[25] - peaks[3] < 4 * voxels, peaks  # was 44 bytes per voxel more


def test_a_lesion_dice_below_the_failure_dice_fails_at_float64_precision():
    """Per-lesion Dice is computed and kept in float64: a lesion of Dice 0.5 next to ``failure_dice`` 0.500000001 is
    a failure ("a Dice below D"). Compared in float32 as a case's recorded Dice is, 0.500000001 rounded to 0.5 and
    no lesion failed, so the low-Dice AUROC was undefined (found by a hostile review)."""
    truth = np.zeros((12, 12, 12), np.int64)
    pred = np.zeros_like(truth)
    truth[1:3, 1, 1] = 1  # lesion A: 2 voxels, predicted at one of them and one beside: Dice 0.5
    pred[2:4, 1, 1] = 1
    truth[7:9, 7:9, 7:9] = 1  # lesion B: predicted exactly, Dice 1
    pred[7:9, 7:9, 7:9] = 1
    u = np.zeros(truth.shape)
    u[2:4, 1, 1] = 0.9  # the failed lesion is the more uncertain one
    u[7:9, 7:9, 7:9] = 0.1
    options = {"dilation": 0, "min_volume": 0.0, "iou": 0.1, "hd_penalty": 374.0, "r": 0.001,
               "failure_dice": 0.500000001}
    task = TaskView(None, pred, truth, 2, maps={"pe": u}, spacing=(1.0, 1.0, 1.0))
    case = SimpleNamespace(case_id="c", spacing=(1.0, 1.0, 1.0), affine=np.eye(4))
    state = lesion_case_state(case, [task], options, None, "pe")
    dice = sorted(state.arrays[f"lesion.{t}.dice"].tolist() for t in state.tasks())[0]
    assert dice == [0.5, 1.0]
    block = summarize_lesions(state, ["c"], options)
    (per_task,) = block["per_task"].values()
    assert per_task["failure_detection"]["pe_mean"]["auroc_low_dice"] == 1.0
