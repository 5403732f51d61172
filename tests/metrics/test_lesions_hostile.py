"""Hostile review of the lesion-wise metrics: brute-force references written independently of the implementation
(own flood fill, own dilation, marching-cubes cells found by loops, all-pairs surface distances) and the edge cases
and bad inputs that the reference tests do not reach."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import ndimage

from monai_unc.metrics.lesions import (
    brats_lesion_metrics,
    label_lesions,
    lesion_detection,
    lesion_uncertainty,
    ndsc_retention_area,
    ndsc_retention_curve,
    normalized_dice,
    surface_hd95,
)

# -- independent references -----------------------------------------------------------------------------------------


def _offsets(ndim: int, order: int) -> list[tuple[int, ...]]:
    """Neighbour offsets with at most ``order`` non-zero coordinates (1: faces, ndim: the full neighbourhood)."""
    return [d for d in itertools.product((-1, 0, 1), repeat=ndim) if 0 < sum(x != 0 for x in d) <= order]


def _inside(w: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    return all(0 <= w[i] < shape[i] for i in range(len(shape)))


def _flood_label(mask: np.ndarray, order: int) -> tuple[np.ndarray, int]:
    """Connected components by a depth-first flood fill, numbered in raster order of their first voxel."""
    lab = np.zeros(mask.shape, int)
    n = 0
    offs = _offsets(mask.ndim, order)
    for idx in zip(*np.nonzero(mask)):
        if lab[idx]:
            continue
        n += 1
        lab[idx] = n
        stack = [idx]
        while stack:
            v = stack.pop()
            for o in offs:
                w = tuple(a + b for a, b in zip(v, o))
                if _inside(w, mask.shape) and mask[w] and not lab[w]:
                    lab[w] = n
                    stack.append(w)
    return lab, n


def _grow(mask: np.ndarray, iterations: int) -> np.ndarray:
    """``iterations`` steps of growth into the 18 neighbours (a face or an edge shared), nothing outside the volume."""
    m = mask.copy()
    offs = _offsets(mask.ndim, 2)
    for _ in range(iterations):
        new = m.copy()
        for idx in zip(*np.nonzero(m)):
            for o in offs:
                w = tuple(a + b for a, b in zip(idx, o))
                if _inside(w, m.shape):
                    new[w] = True
        m = new
    return m


def _cells(mask: np.ndarray, spacing: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Marching-cubes surface cells by loops: positions (mm) of the 2x2x2 cells that are neither empty nor full and
    their areas (the triangles' area vectors of each neighbour code, scaled by the orthogonal face areas)."""
    from monai.metrics.utils import _get_neighbour_code_to_normals_table

    normals = np.asarray(_get_neighbour_code_to_normals_table().cpu().numpy(), float)
    face = np.array([spacing[1] * spacing[2], spacing[0] * spacing[2], spacing[0] * spacing[1]])
    pts, areas = [], []
    for i, j, k in itertools.product(*(range(s + 1) for s in mask.shape)):
        code = 0
        for a, b, c in itertools.product((0, 1), repeat=3):
            w = (i - 1 + a, j - 1 + b, k - 1 + c)
            if _inside(w, mask.shape) and mask[w]:
                code |= 1 << (7 - (4 * a + 2 * b + c))  # corner (0, 0, 0) is the high bit
        if code in (0, 255):
            continue
        pts.append((i * spacing[0], j * spacing[1], k * spacing[2]))
        areas.append(sum(float(np.linalg.norm(v * face)) for v in normals[code]))
    return np.asarray(pts, float).reshape(-1, 3), np.asarray(areas)


def _directed(pa: np.ndarray, aa: np.ndarray, pb: np.ndarray, q: float) -> float:
    """All-pairs directed distances, the first distance (sorted) whose cumulative area share reaches ``q`` %."""
    if len(pa) == 0 or len(pb) == 0:
        return math.inf
    d = np.sqrt(((pa[:, None, :] - pb[None, :, :]) ** 2).sum(-1)).min(axis=1)
    items = sorted(zip(d.tolist(), aa.tolist()))
    total, acc = sum(a for _, a in items), 0.0
    for dist, a in items:
        acc += a
        if acc / total >= q / 100.0 - 1e-12:
            return dist
    return items[-1][0]


def _hd_reference(t: np.ndarray, p: np.ndarray, spacing: tuple, q: float = 95.0) -> float:
    pt, at = _cells(t, spacing)
    pp, ap = _cells(p, spacing)
    return max(_directed(pt, at, pp, q), _directed(pp, ap, pt, q))


def _brats_reference(pred: np.ndarray, gt: np.ndarray, spacing: tuple, dilation: int, min_volume: float,
                     penalty: float = 374.0) -> tuple:
    """The BraTS 2023 rule lesion by lesion with full-volume masks: merge by the grown truth, grow each merged
    lesion on its own, match every predicted component that touches it."""
    p_lab, n_pred = _flood_label(pred, 3)
    zone, n_zone = _flood_label(_grow(gt, dilation), 3)
    voxel = spacing[0] * spacing[1] * spacing[2]
    matched_any: set[int] = set()
    dice, hd, n_tp = [], [], 0
    for k in range(1, n_zone + 1):
        lesion = gt & (zone == k)
        matched = sorted(set(p_lab[_grow(lesion, dilation) & pred].tolist()))
        matched_any |= set(matched)
        if lesion.sum() * voxel <= min_volume:
            continue
        union = np.isin(p_lab, matched) & pred
        if matched:
            dice.append(2.0 * (union & lesion).sum() / (union.sum() + lesion.sum()))
            hd.append(_hd_reference(lesion, union, spacing))
            n_tp += 1
        else:
            dice.append(0.0)
            hd.append(penalty)
    n_fp = n_pred - len(matched_any)
    denom = len(dice) + n_fp
    if denom == 0:
        return 1.0, 0.0, 0, 0, 0
    return sum(dice) / denom, (sum(hd) + n_fp * penalty) / denom, n_tp, len(dice) - n_tp, n_fp


def _random_pair(rng: np.random.Generator, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Sparse voxels and small blobs everywhere, the border included (diagonal contacts, one-voxel lesions)."""
    gt = rng.uniform(size=shape) < rng.uniform(0.03, 0.15)
    if rng.uniform() < 0.5:
        gt = ndimage.binary_dilation(gt & (rng.uniform(size=shape) < 0.3))
    pred = gt ^ (rng.uniform(size=shape) < 0.08)
    if rng.uniform() < 0.3:
        pred = np.roll(gt, 1, axis=int(rng.integers(3)))
    return pred, gt


# -- the numbers against the references -----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(8))
def test_brats_and_surface_hd95_against_brute_force(seed):
    """Lesion-wise Dice, HD95 and counts, and the surface HD95 of the whole masks, against the brute-force
    references on small volumes whose lesions touch the border and each other diagonally, anisotropic spacing
    (0.5 x 0.5 x 3 mm among others), dilation 0-2 and minimum volumes that leave some lesions out."""
    rng = np.random.default_rng(100 + seed)
    shape = tuple(int(v) for v in rng.integers(5, 9, 3))
    pred, gt = _random_pair(rng, shape)
    spacing = [(0.5, 0.5, 3.0), (1.0, 1.0, 1.0), (1.3, 0.5, 1.0), (3.0, 1.0, 0.5)][seed % 4]
    dilation, min_volume = seed % 3, [0.0, 1.0, 2.0, 4.0][seed % 4]
    r = brats_lesion_metrics(pred, gt, spacing, dilation, min_volume)
    dice, hd, n_tp, n_fn, n_fp = _brats_reference(pred, gt, spacing, dilation, min_volume)
    assert (r.n_tp, r.n_fn, r.n_fp) == (n_tp, n_fn, n_fp)
    assert r.dice == pytest.approx(dice, rel=1e-12, abs=1e-15)
    assert r.hd95 == pytest.approx(hd, rel=1e-12)
    for q in (95.0, 100.0, 50.0):
        assert surface_hd95(gt, pred, spacing, q) == pytest.approx(_hd_reference(gt, pred, spacing, q), rel=1e-12)


@pytest.mark.parametrize("ndim,connectivity,order", [(3, 6, 1), (3, 18, 2), (3, 26, 3), (3, "face", 1), (3, None, 3),
                                                     (2, 4, 1), (2, 8, 2), (2, "full", 2), (1, None, 1)])
def test_connectivity_and_detection_against_flood_fill(ndim, connectivity, order):
    """label_lesions and lesion_detection with every documented connectivity, 1-3 D, float and bool labels, against
    a flood fill and all pairs of lesions."""
    rng = np.random.default_rng(ndim * 100 + order)
    shape = (9, 8, 7)[:ndim] if ndim == 3 else (13, 11)[:ndim] if ndim == 2 else (30,)
    for _ in range(3):
        gt = rng.uniform(size=shape) < 0.2
        pred = gt ^ (rng.uniform(size=shape) < 0.1)
        lab, n = label_lesions(gt.astype(np.float32), connectivity)
        ref, n_ref = _flood_label(gt, order)
        assert n == n_ref and np.array_equal(lab, ref)
        p_lab, n_p = _flood_label(pred, order)
        iou = np.zeros((n_p + 1, n_ref + 1))
        for i, j in itertools.product(range(1, n_p + 1), range(1, n_ref + 1)):
            a, b = p_lab == i, ref == j
            iou[i, j] = (a & b).sum() / (a | b).sum()
        for thr in (0.2, 0.5, 1.0):
            got = lesion_detection(pred.astype(float), gt, thr, connectivity)
            best_p = [max(iou[i, 1:].tolist() + [0.0]) for i in range(1, n_p + 1)]
            best_t = [max(iou[1:, j].tolist() + [0.0]) for j in range(1, n_ref + 1)]
            tp = sum(v >= thr for v in best_p)
            fn = sum(v < thr for v in best_t)
            assert (got.tp, got.fp, got.fn) == (tp, n_p - tp, fn)
            denom = tp + 0.5 * (n_p - tp + fn)
            assert got.f1 == pytest.approx(1.0 if denom == 0 else tp / denom, rel=1e-12)


@pytest.mark.parametrize("ndim,connectivity,order", [(3, 6, 1), (3, None, 3), (2, 4, 1), (2, 8, 2)])
def test_lesion_uncertainty_against_brute_force(ndim, connectivity, order):
    """Per-lesion mean, max, share, boundary (a face neighbour inside the volume outside the lesion), core, volume
    and existence, with tied map values, against loops over each lesion's voxels."""
    rng = np.random.default_rng(7 + ndim + order)
    shape = (8, 7, 6)[:ndim] if ndim == 3 else (14, 12)
    pred = rng.uniform(size=shape) < 0.35
    u = np.round(rng.uniform(size=shape), 1)  # many ties, some exactly at the threshold
    samples = np.stack([pred, pred & (rng.uniform(size=shape) < 0.6), np.zeros_like(pred)])
    spacing = (0.5, 2.0, 1.5)[:ndim]
    out = lesion_uncertainty(pred, {"u": u}, samples=samples, connectivity=connectivity, threshold=0.5,
                             spacing=spacing)
    lab, n = _flood_label(pred, order)
    assert out["lesion"].tolist() == list(range(1, n + 1))
    for k in range(1, n + 1):
        m = lab == k
        boundary = np.zeros_like(m)
        for idx in zip(*np.nonzero(m)):
            for o in _offsets(ndim, 1):
                w = tuple(a + b for a, b in zip(idx, o))
                boundary[idx] |= _inside(w, shape) and not m[w]
        core = m & ~boundary
        assert out["u_mean"][k - 1] == pytest.approx(u[m].mean(), rel=1e-12)
        assert out["u_max"][k - 1] == u[m].max()
        assert out["u_share"][k - 1] == pytest.approx((u[m] > 0.5).mean(), rel=1e-12)
        for key, sel in (("u_boundary", boundary), ("u_core", core)):
            assert (math.isnan(out[key][k - 1]) if not sel.any()
                    else out[key][k - 1] == pytest.approx(u[sel].mean(), rel=1e-12))
        assert out["volume_mm3"][k - 1] == pytest.approx(m.sum() * np.prod(spacing), rel=1e-12)
        assert out["existence"][k - 1] == pytest.approx(np.mean([(s & m).any() for s in samples]), rel=1e-12)


def test_brats_empty_combinations_and_all_lesions_below_the_minimum():
    """Both empty: 1 / 0; only lesions below the minimum and nothing predicted: 1 / 0 (no counted lesion, no false
    positive); those lesions found: still 1 / 0 and their components are no false positives; a prediction away from
    them: one false positive, 0 / penalty."""
    z = np.zeros((10, 10, 10), bool)
    small = z.copy()
    small[0, 0, 0] = small[9, 9, 9] = small[0, 9, 0] = True  # one-voxel lesions in corners
    far = z.copy()
    far[5, 5, 5] = True
    for pred, want in ((z, (1.0, 0.0, 0, 0, 0)), (small, (1.0, 0.0, 0, 0, 0)), (far, (0.0, 374.0, 0, 0, 1))):
        r = brats_lesion_metrics(pred, small, min_volume=1.0)
        assert (r.dice, r.hd95, r.n_tp, r.n_fn, r.n_fp) == want
    r = brats_lesion_metrics(z, z)
    assert (r.dice, r.hd95, r.n_pred, r.lesions) == (1.0, 0.0, 0, ())


# -- defects ----------------------------------------------------------------------------------------------------------

def test_ndsc_when_every_voxel_is_lesion():
    """Every voxel (of the volume, or of the brain mask) in the truth: no false positive is possible, so nDSC is the
    Dice; the rescaling k = (1 - r)|T| / (r (N - |T|)) divided by zero (ZeroDivisionError, or 1.0 in the curve)."""
    t = np.ones((4, 4, 4), bool)
    p = t.copy()
    p[:2] = False
    dice = 2 * 32 / (2 * 32 + 32)
    assert normalized_dice(p, t) == pytest.approx(dice, rel=1e-12)
    brain = np.zeros_like(t)
    brain[1:3] = True  # inside the lesion: the half of it the prediction finds and the half it misses
    assert normalized_dice(p, t, mask=brain) == pytest.approx(2 * 16 / (2 * 16 + 16), rel=1e-12)
    u = np.random.default_rng(0).uniform(size=t.shape)
    _, v = ndsc_retention_curve(p, t, u, fractions=[0.0, 1.0])
    assert v.tolist() == [1.0, pytest.approx(dice, rel=1e-12)]
    assert 0.0 < ndsc_retention_area(p, t, u) < 1.0 - dice


def test_ndsc_refuses_a_mask_without_voxels():
    """An empty brain mask leaves nothing to score: a ValueError naming ``mask``, not nDSC 1 / R-AAC 0."""
    t = np.zeros((4, 4, 4), bool)
    t[1, 1, 1] = True
    empty = np.zeros_like(t)
    with pytest.raises(ValueError, match="mask"):
        normalized_dice(t, t, mask=empty)
    with pytest.raises(ValueError, match="mask"):
        ndsc_retention_area(t, t, np.zeros(t.shape), mask=empty)


def test_lesion_uncertainty_volume_cv_counts_only_the_components_that_are_the_lesion():
    """With ``iou_threshold`` a sample's component that overlaps the lesion without reaching the IoU is not the
    lesion (existence 0 in that sample); its volume must not enter ``volume_cv`` either."""
    pred = np.zeros((12, 12, 12), bool)
    pred[1:3, 1:3, 1:3] = True  # 8 voxels
    huge = np.zeros_like(pred)
    huge[2:12, 2:12, 2:12] = True  # touches one voxel of the lesion: IoU 1 / 1007
    samples = np.stack([pred, pred, huge])
    out = lesion_uncertainty(pred, samples=samples, iou_threshold=0.5)
    assert out["existence"].tolist() == [pytest.approx(2 / 3)]
    vols = np.array([8.0, 8.0, 0.0])
    assert out["volume_cv"][0] == pytest.approx(vols.std() / vols.mean(), rel=1e-12)
    # any overlap (the default): the huge component is the lesion in the third sample
    out = lesion_uncertainty(pred, samples=samples)
    vols = np.array([8.0, 8.0, 1000.0])
    assert out["existence"].tolist() == [1.0]
    assert out["volume_cv"][0] == pytest.approx(vols.std() / vols.mean(), rel=1e-12)


@pytest.mark.parametrize("kwargs,error,match", [
    ({"threshold": float("nan")}, ValueError, "threshold"),
    ({"threshold": "0.5"}, TypeError, "threshold"),
    ({"threshold": True}, TypeError, "threshold"),
    ({"iou_threshold": 2.0}, ValueError, "iou_threshold"),
    ({"iou_threshold": float("nan")}, ValueError, "iou_threshold"),
    ({"iou_threshold": -0.5}, ValueError, "iou_threshold"),
    ({"iou_threshold": "0.5"}, TypeError, "iou_threshold"),
])
def test_lesion_uncertainty_refuses_bad_levels(kwargs, error, match):
    """A NaN, out-of-range or non-numeric threshold gave shares or existences of 0 (or 1) without a word."""
    pred = np.zeros((5, 5, 5), bool)
    pred[1:3, 1:3, 1:3] = True
    with pytest.raises(error, match=match):
        lesion_uncertainty(pred, {"pe": np.zeros(pred.shape)}, samples=pred[None], **kwargs)


def test_lesion_uncertainty_refuses_bad_maps_by_name():
    """Maps that are not a mapping, or of text, raise a TypeError naming the argument (an AttributeError, or a
    ValueError from numpy's float conversion, before)."""
    pred = np.zeros((5, 5, 5), bool)
    pred[1:3, 1:3, 1:3] = True
    with pytest.raises(TypeError, match="maps"):
        lesion_uncertainty(pred, [np.zeros(pred.shape)])
    with pytest.raises(TypeError, match=r"maps\['pe'\]"):
        lesion_uncertainty(pred, {"pe": np.full(pred.shape, "a")})
    with pytest.raises(ValueError, match=r"maps\['pe'\] must be finite"):  # NaN: refused, never a silent number
        lesion_uncertainty(pred, {"pe": np.full(pred.shape, np.nan)})


def test_retention_refuses_text_uncertainty_by_name():
    t = np.zeros((4, 4, 4), bool)
    t[1, 1, 1] = True
    with pytest.raises(TypeError, match="uncertainty"):
        ndsc_retention_curve(t, t, np.full(t.shape, "a"))


@pytest.mark.parametrize("call,error,match", [
    (lambda a: surface_hd95(a, a, percentile="95"), TypeError, "percentile"),
    (lambda a: surface_hd95(a, a, percentile=True), TypeError, "percentile"),
    (lambda a: brats_lesion_metrics(a, a, min_volume=True), ValueError, "min_volume"),
    (lambda a: brats_lesion_metrics(a, a, hd_penalty=True), ValueError, "hd_penalty"),
    (lambda a: lesion_detection(a, a, iou_threshold=True), ValueError, "iou_threshold"),
])
def test_scalar_options_refuse_text_and_bools(call, error, match):
    """A string percentile was converted with float(); True passed as a volume, a penalty or an IoU of 1."""
    a = np.zeros((5, 5, 5), bool)
    a[2, 2, 2] = True
    with pytest.raises(error, match=match):
        call(a)


@pytest.mark.parametrize("kwargs,match", [({"dilation": float("inf")}, "lesion_dilation"),
                                          ({"dilation": float("nan")}, "lesion_dilation")])
def test_product_options_refuse_non_finite_integers_by_name(kwargs, match):
    """``int(inf)`` raised an OverflowError (``int(nan)`` a ValueError naming nothing) before the range check."""
    from monai_unc.products.lesions import LesionMetrics

    with pytest.raises(ValueError, match=match):
        LesionMetrics("gli", **kwargs)


def test_product_ranks_lesions_by_the_primary_measure():
    """The summary's retention curve and list of the most uncertain lesions use the evaluation's primary measure
    (the map of the nDSC R-AAC: ``--measure``, else predictive entropy), not the alphabetically first map: with the
    default maps, expected entropy ranked the lesions while predictive entropy gave the R-AAC."""
    from types import SimpleNamespace

    from monai_unc.evaluation.lesions import lesion_case_state
    from monai_unc.products.lesions import LesionMetrics

    gt = np.zeros((16, 16, 16), bool)
    pred = np.zeros_like(gt)
    for i, c in enumerate((2, 6, 10, 14)):
        pred[c - 1:c + 1, 2:4, 2:4] = True  # four predicted lesions; the first two are right
        gt[c - 1:c + 1, 2:4, 2:4] = i < 2
    pe = np.zeros(gt.shape)  # predictive entropy puts the two false positives first
    ee = np.zeros(gt.shape)  # expected entropy puts the two true positives first
    for i, c in enumerate((2, 6, 10, 14)):
        pe[c - 1:c + 1] = 0.1 + 0.2 * i
        ee[c - 1:c + 1] = 0.9 - 0.2 * i
    task = SimpleNamespace(name="WT", pred=pred, target=gt, spacing=(1.0, 1.0, 1.0), num_classes=2,
                           maps={"expected_entropy": ee, "predictive_entropy": pe})
    case = SimpleNamespace(case_id="a", spacing=(1.0, 1.0, 1.0), affine=np.eye(4))
    product = LesionMetrics("gli", min_volume=0.0)
    for measure, want in ((None, "predictive_entropy_mean"), ("predictive_entropy", "predictive_entropy_mean"),
                          ("expected_entropy", "expected_entropy_mean")):
        config = SimpleNamespace(measure=measure, class_names=None, regions=None)
        state = lesion_case_state(case, [task], product.options(), None, measure or "predictive_entropy")
        block = product.summarize({"a": state}, [], None, config)
        assert block["per_task"]["WT"]["retention"]["score"] == want
        assert {d["score"] for d in block["lesions"]} == {want}
        first = block["lesions"][0]
        assert first["false_positive"] == (want == "predictive_entropy_mean")


def test_best_false_positive_score_is_not_chosen_on_a_subset_of_the_lesions():
    """``pe_core`` is NaN for lesions without inner voxels (the small ones, most false positives); its AUROC over the
    few lesions with a core must not make it the "best" false-positive detector over a score defined for every
    lesion, and each AUROC says how many lesions it covers."""
    from monai_unc.evaluation.lesions import CASE_FIELDS, LESION_FIELDS, LesionState, summarize_lesions

    fp = np.array([1, 1, 1, 1, 0, 0, 0, 0, 1, 0], float)
    pe_mean = np.array([0.9, 0.8, 0.7, 0.2, 0.6, 0.3, 0.1, 0.05, 0.65, 0.75])  # AUROC 0.84 over all ten
    pe_core = np.array([np.nan, np.nan, np.nan, np.nan, 0.1, 0.2, 0.3, np.nan, 0.9, np.nan])  # 1.0 over four
    arrays = {f"case.WT.{f}": np.array([0.5]) for f in CASE_FIELDS}
    arrays.update({f"lesion.WT.{f}": np.zeros(10) for f in LESION_FIELDS})
    arrays.update({"lesion.WT.false_positive": fp, "lesion.WT.dice": np.where(fp > 0, 0.0, 0.8),
                   "lesion.WT.lesion": np.arange(1.0, 11.0), "lesion.WT.score.pe_mean": pe_mean,
                   "lesion.WT.score.pe_core": pe_core, "n_cases": np.array([1]), "samples": np.array([0])})
    block = summarize_lesions(LesionState(arrays), ["a"], {"failure_dice": 0.5})
    task = block["per_task"]["WT"]
    det = task["failure_detection"]
    assert det["pe_core"]["auroc_false_positive"] == 1.0 > det["pe_mean"]["auroc_false_positive"]
    assert task["best_fp_score"] == "pe_mean"
    assert (det["pe_core"]["n_lesions"], det["pe_mean"]["n_lesions"]) == (4, 10)


@pytest.mark.parametrize("fractions", [["0.5", "1"], ["a"], [1j, 1]])
def test_ndsc_retention_fractions_must_be_numbers(fractions):
    """Text was parsed as numbers (``["0.5", "1"]`` accepted) or refused with numpy's words, naming no argument (found
    by a hostile review)."""
    from monai_unc.metrics.lesions import ndsc_retention_curve

    m = np.zeros((4, 4), bool)
    m[1, 1] = True
    with pytest.raises(TypeError, match="fractions"):
        ndsc_retention_curve(m, m, np.zeros((4, 4)), fractions=fractions)
