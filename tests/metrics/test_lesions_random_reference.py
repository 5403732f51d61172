"""Lesion-wise metrics on 80 random label maps: the official codes' frozen scores (BraTS 2023, Shifts), and lesion by
lesion a brute-force reference (review 62).

``tests/metrics/data/lesion_random_reference.json`` holds 80 random cases (BraTS labels 1 / 2 / 3 as blobs touching
the border and each other; predictions redrawn, thinned with stray voxels, shifted, grown into merged components,
emptied; empty references; voxel sizes that float32 does not hold; the GLI, MEN and MET rules) and the scores of the
official BraTS 2023 lesion-wise code (R. Saluja et al.) for their WT, TC and ET regions and of the Shifts ``mswml``
code for their whole tumour (nDSC, lesion F1, R-AAC), made by
``tests/metrics/data/make_lesion_random_reference.py``. The case score is all the official code gives; the lesions
themselves (merging, matching, volumes, Dice, the HD95 of each lesion against its matched components, the false
positives) are checked against a reference written with loops over the lesions and components.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage

from monai_unc.metrics.lesions import (
    BRATS_2023_SETTINGS,
    brats_lesion_metrics,
    lesion_detection,
    ndsc_retention_area,
    normalized_dice,
    surface_hd95,
)

DATA = Path(__file__).parent / "data"
sys.path.insert(0, str(DATA))
from make_lesion_random_reference import (  # noqa: E402
    decode,
    draw_cases,
    encode,
    official_scores,
    official_shifts,
    uncertainty,
)

TABLE = json.loads((DATA / "lesion_random_reference.json").read_text())
REGIONS = {"WT": (1, 2, 3), "TC": (1, 3), "ET": (3,)}
PENALTY = 374.0
#: the 26 neighbours of a voxel (BraTS labels lesions 26-connected) and the 18 of its dilation
FULL = np.ones((3, 3, 3), bool)
EDGE_OFFSETS = [o for o in itertools.product((-1, 0, 1), repeat=3) if 0 < sum(x != 0 for x in o) <= 2]


def _cases() -> list[tuple[np.ndarray, np.ndarray, tuple[float, ...], str, dict]]:
    """(pred, truth, spacing (the header zooms the official code used), challenge, official scores) per case."""
    return [(decode(c["pred"], c["shape"]), decode(c["truth"], c["shape"]), tuple(c["spacing"]), c["challenge"], c)
            for c in TABLE["cases"]]


CASES = _cases()


def _shift(mask: np.ndarray, offset: tuple[int, ...]) -> np.ndarray:
    out = np.zeros_like(mask)
    src = tuple(slice(max(0, -o), mask.shape[d] - max(0, o)) for d, o in enumerate(offset))
    dst = tuple(slice(max(0, o), mask.shape[d] - max(0, -o)) for d, o in enumerate(offset))
    out[dst] = mask[src]
    return out


def _grow(mask: np.ndarray, iterations: int) -> np.ndarray:
    """``iterations`` steps into the 18 neighbours (a face or an edge shared), nothing beyond the volume."""
    m = mask.copy()
    for _ in range(iterations):
        m = m | np.logical_or.reduce([_shift(m, o) for o in EDGE_OFFSETS])
    return m


def _reference_lesions(pred: np.ndarray, gt: np.ndarray, spacing: tuple, dilation: int, min_volume: float) -> dict:
    """The BraTS rule lesion by lesion: zones of the grown truth merge lesions, each merged lesion grown on its own,
    every predicted component touching the growth matched (a loop over the pairs)."""
    zone, n_zone = ndimage.label(_grow(gt, dilation), FULL)
    p_cc, n_pred = ndimage.label(pred, FULL)
    components = [p_cc == j for j in range(1, n_pred + 1)]
    lesions, matched_any = [], set()
    for k in range(1, n_zone + 1):
        lesion = gt & (zone == k)
        grown = _grow(lesion, dilation)
        matched = [j + 1 for j, comp in enumerate(components) if (comp & grown).any()]
        matched_any |= set(matched)
        union = np.zeros_like(pred)
        for j in matched:
            union |= components[j - 1]
        inter = int(np.count_nonzero(lesion & union))
        dice = 2.0 * inter / (np.count_nonzero(lesion) + np.count_nonzero(union))
        hd = surface_hd95(lesion, union, spacing) if matched else PENALTY
        volume = float(np.count_nonzero(lesion)) * spacing[0] * spacing[1] * spacing[2]
        size = float(np.count_nonzero(union)) * spacing[0] * spacing[1] * spacing[2]
        lesions.append({"volume": volume, "matched": tuple(matched), "dice": dice, "hd95": hd,
                        "counted": volume > min_volume, "volume_error": size - volume})
    counted = [le for le in lesions if le["counted"]]
    fp = tuple(j for j in range(1, n_pred + 1) if j not in matched_any)
    n = len(counted) + len(fp)
    return {"lesions": lesions, "fp": fp, "n_pred": n_pred,
            "dice": 1.0 if n == 0 else sum(le["dice"] for le in counted) / n,
            "hd95": 0.0 if n == 0 else (sum(le["hd95"] for le in counted) + PENALTY * len(fp)) / n,
            "n_tp": sum(bool(le["matched"]) for le in counted), "n_fn": sum(not le["matched"] for le in counted)}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def test_the_random_cohort_covers_the_cases_that_matter():
    """Misses, false positives, merged and imperfect lesions, lesions left out by the minimum volume, empty masks."""
    scores = [c[4][r] for c in CASES for r in REGIONS]
    assert len(CASES) == 80
    assert sum(s["n_fn"] > 0 for s in scores) >= 10 and sum(s["n_fp"] > 0 for s in scores) >= 50
    assert sum(0.0 < s["dice"] < 1.0 for s in scores) >= 100 and sum(0.0 < s["hd95"] < PENALTY for s in scores) >= 100
    assert sum(s["dice"] == 1.0 and s["hd95"] == 0.0 for s in scores) >= 20
    assert {c[3] for c in CASES} == {"BraTS-GLI", "BraTS-MEN", "BraTS-MET"}
    assert any(not c[1].any() for c in CASES) and any(not c[0].any() for c in CASES)
    assert any(any(s not in (0.5, 1.0, 2.0, 3.0) for s in c[2]) for c in CASES)  # float32 header zooms


def test_random_volumes_equal_the_frozen_official_scores():
    """Lesion-wise Dice, HD95 and TP / FP / FN of every region of the 80 cases equal the official code's."""
    wrong = []
    for i, (pred, truth, spacing, challenge, ref) in enumerate(CASES):
        dilation, min_volume = BRATS_2023_SETTINGS[challenge]
        for region, labels in REGIONS.items():
            r = brats_lesion_metrics(np.isin(pred, labels), np.isin(truth, labels), spacing, dilation, min_volume)
            want = ref[region]
            if (r.n_tp, r.n_fp, r.n_fn) != (want["n_tp"], want["n_fp"], want["n_fn"]) or not (
                    _close(r.dice, want["dice"]) and _close(r.hd95, want["hd95"])):
                wrong.append((i, region, (r.dice, r.hd95, r.n_tp, r.n_fp, r.n_fn), want))
    assert not wrong, wrong[:5]


@pytest.mark.parametrize("part", range(4))
def test_random_volumes_lesion_by_lesion_equal_the_brute_force(part):
    """Each ground-truth lesion (after merging) has the volume, matched components, Dice, HD95 and counted flag of
    the reference, the false-positive components are the reference's, and the case scores follow; a quarter of the
    cases per run, every rule, region and dilation 0 to 3, and in every other case a minimum volume equal to the
    volume of one of the lesions."""
    checked = 0
    for i, (pred, truth, spacing, challenge, _) in enumerate(CASES):
        if i % 4 != part:
            continue
        dilation, min_volume = BRATS_2023_SETTINGS[challenge]
        dilation = (dilation + i) % 4  # 0 (overlap only) to 3
        for region, labels in REGIONS.items():
            p, t = np.isin(pred, labels), np.isin(truth, labels)
            ref = _reference_lesions(p, t, spacing, dilation, min_volume)
            if i % 2 and ref["lesions"]:  # a lesion of exactly the minimum volume: not counted ("at most")
                min_volume = ref["lesions"][len(ref["lesions"]) // 2]["volume"]
                ref = _reference_lesions(p, t, spacing, dilation, min_volume)
            r = brats_lesion_metrics(p, t, spacing, dilation, min_volume)
            where = (i, region, dilation)
            assert len(r.lesions) == len(ref["lesions"]), where
            for got, want in zip(r.lesions, ref["lesions"]):
                assert got.matched == want["matched"] and got.counted == want["counted"], where
                assert _close(got.volume_mm3, want["volume"]) and _close(got.dice, want["dice"]), where
                assert _close(got.hd95, want["hd95"]), (where, got.hd95, want["hd95"])
            assert r.fp_components == ref["fp"] and r.n_pred == ref["n_pred"], where
            assert r.volume_error_mm3 == pytest.approx(
                [le["volume_error"] for le in ref["lesions"] if le["counted"]], rel=1e-12, abs=1e-9), where
            assert (r.n_tp, r.n_fn, r.n_fp) == (ref["n_tp"], ref["n_fn"], len(ref["fp"])), where
            assert _close(r.dice, ref["dice"]) and _close(r.hd95, ref["hd95"]), where
            checked += 1
    assert checked == 60


def test_random_volumes_equal_the_frozen_shifts_scores():
    """The whole tumour of the 80 cases: lesion F1 (IoU 0.25 and 0.5) equal to the Shifts code's, nDSC and R-AAC to
    its float32 precision."""
    wrong = []
    for i, (pred, truth, _, _, ref) in enumerate(CASES):
        p, t = pred > 0, truth > 0
        want = ref["shifts"]
        got = {"f1": lesion_detection(p, t).f1, "f1_iou_0.5": lesion_detection(p, t, 0.5).f1,
               "ndsc": normalized_dice(p, t), "raac": ndsc_retention_area(p, t, uncertainty(pred, truth))}
        for key, value in got.items():
            exact = key.startswith("f1")
            if not math.isclose(value, want[key], rel_tol=1e-15 if exact else 1e-6, abs_tol=0.0 if exact else 1e-7):
                wrong.append((i, key, value, want[key]))
    assert not wrong, wrong[:5]
    assert sum(0.0 < c[4]["shifts"]["f1"] < 1.0 for c in CASES) >= 30
    assert sum(c[4]["shifts"]["f1"] != c[4]["shifts"]["f1_iou_0.5"] for c in CASES) >= 10


@pytest.mark.skipif(not (os.environ.get("BRATS_2023_METRICS_DIR") and os.environ.get("SHIFTS_MSWML_DIR")),
                    reason="set BRATS_2023_METRICS_DIR and SHIFTS_MSWML_DIR to checkouts of the official codes")
def test_random_volumes_equal_the_official_code_live():
    """The cases drawn again equal the frozen ones, and the official codes run now give the frozen scores."""
    drawn = draw_cases()
    assert [encode(c["pred"]) for c in drawn] == [c["pred"] for c in TABLE["cases"]]
    assert [encode(c["truth"]) for c in drawn] == [c["truth"] for c in TABLE["cases"]]
    for row, frozen in zip(official_shifts(os.environ["SHIFTS_MSWML_DIR"], drawn), TABLE["cases"]):
        assert row == pytest.approx(frozen["shifts"], rel=1e-12)
    live = official_scores(os.environ["BRATS_2023_METRICS_DIR"], drawn)
    for row, frozen in zip(live, TABLE["cases"]):
        assert row["spacing"] == frozen["spacing"]
        for region in REGIONS:
            for key in ("n_tp", "n_fp", "n_fn"):
                assert row[region][key] == frozen[region][key]
            for key in ("dice", "hd95"):
                assert row[region][key] == pytest.approx(frozen[region][key], rel=1e-12, abs=1e-12)


def test_surface_percentile_at_an_exact_area_share_takes_the_first_element():
    """The directed percentile is the first distance (sorted) whose cumulative area share reaches the percentile, as
    in the official surface-distance code (``searchsorted``, side left): two one-voxel masks three voxels apart have
    eight surface elements of equal area each, half of them two voxels from the other surface and half three, so
    the 50th percentile is two voxels (not three) and any percentile above it three (numbers of the official code)."""
    a = np.zeros((6, 3, 3), bool)
    b = a.copy()
    a[1, 1, 1] = b[4, 1, 1] = True
    for spacing, step in (((1.0, 1.0, 1.0), 1.0), ((2.0, 1.0, 0.5), 2.0)):
        assert [surface_hd95(a, b, spacing, q) for q in (12.5, 50.0, 50.1, 62.5, 95.0, 100.0)] == [
            2 * step, 2 * step, 3 * step, 3 * step, 3 * step, 3 * step]


@pytest.mark.slow
def test_evaluate_on_random_cases_with_turned_grids_equals_the_official_scores(tmp_path):
    """``monai-unc evaluate --lesions --regions brats2023`` on cases of the random cohort written with affines that
    flip, permute and rotate the axes (the voxel sizes, the columns' lengths, unchanged): the ``metrics.csv`` columns
    equal the official code's frozen scores (which depend on the voxel sizes alone)."""
    import csv
    import warnings

    import nibabel as nib

    from monai_unc.cli import main
    from monai_unc.regions import parse_regions

    channels = list(parse_regions("brats2023"))
    labels, preds = tmp_path / "labels", tmp_path / "predictions"
    labels.mkdir()
    preds.mkdir()
    turn = math.radians(25.0)
    rotation = np.array([[math.cos(turn), -math.sin(turn), 0.0], [math.sin(turn), math.cos(turn), 0.0], [0, 0, 1]])
    linear = [np.eye(3), np.diag([-1.0, 1.0, -1.0]), np.eye(3)[[2, 0, 1]], rotation]
    chosen = [i for i, c in enumerate(CASES) if c[3] == "BraTS-MET" and c[1].any() and c[0].any()][:8]
    assert len(chosen) == 8
    for n, i in enumerate(chosen):
        pred, truth, spacing, _, _ = CASES[i]
        affine = np.eye(4)
        affine[:3, :3] = linear[n % 4] @ np.diag(spacing)
        affine[:3, 3] = (-20.0, 7.5, 3.0)
        nib.save(nib.Nifti1Image(truth, affine), labels / f"c{i:02d}.nii.gz")
        masks = np.stack([np.isin(pred, REGIONS[r]) for r in channels]).astype(np.uint8)
        nib.save(nib.Nifti1Image(np.moveaxis(masks, 0, -1), affine), preds / f"c{i:02d}_seg.nii.gz")
        u = 0.6 * uncertainty(pred, truth)  # in [0, ln 2): a binary entropy
        nib.save(nib.Nifti1Image(np.repeat(u[..., None], 3, -1).astype(np.float32), affine),
                 preds / f"c{i:02d}_predictive_entropy.nii.gz")
    out = tmp_path / "ev"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rc = main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(out), "--regions", "brats2023",
                   "--lesions", "--lesion-settings", "met", "--no-spatial", "--quiet"])
    assert rc == 0
    with open(out / "metrics.csv", newline="") as f:
        rows = {r["case"]: r for r in csv.DictReader(f)}
    for i in chosen:
        row, ref = rows[f"c{i:02d}"], CASES[i][4]
        for region in REGIONS:
            want = ref[region]
            assert [int(float(row[f"lesion_{k}_{region}"])) for k in ("tp", "fp", "fn")] == [
                want["n_tp"], want["n_fp"], want["n_fn"]], (i, region)
            assert float(row[f"lesion_dice_{region}"]) == pytest.approx(want["dice"], rel=1e-9, abs=1e-12)
            assert float(row[f"lesion_hd95_{region}"]) == pytest.approx(want["hd95"], rel=1e-9, abs=1e-9)
