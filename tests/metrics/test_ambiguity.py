"""Ambiguity metrics: NCC vs numpy's Pearson, rater variance vs eq. 13, GED vs brute force over all pairs."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ignite.engine import Engine
from scipy.stats import pearsonr

from monai_unc.handlers.ambiguity import GeneralizedEnergyDistance, NormalizedCrossCorrelation
from monai_unc.metrics.ambiguity import (
    GEDMetric,
    NCCMetric,
    ged,
    ged_detection,
    ged_nonempty_iou,
    ncc,
    rater_variance,
)

# ---------------------------------------------------------------- NCC and rater variance


def test_ncc_equals_numpy_pearson_2d_and_3d():
    rng = np.random.default_rng(0)
    for shape in [(1, 20, 17), (1, 9, 8, 7)]:
        a = rng.uniform(size=shape)
        b = 0.3 * a + rng.uniform(size=shape)
        expected = np.corrcoef(a.ravel(), b.ravel())[0, 1]
        assert ncc(a, b) == pytest.approx(expected, abs=1e-12)
        assert ncc(a, b) == pytest.approx(pearsonr(a.ravel(), b.ravel())[0], abs=1e-12)
        # eq. 12 written out with population standard deviations
        n = a.size
        by_hand = ((a - a.mean()) * (b - b.mean())).sum() / (n * a.std() * b.std())
        assert ncc(torch.tensor(a, dtype=torch.float32), torch.tensor(b)) == pytest.approx(by_hand, abs=1e-6)
    assert ncc(a, a) == pytest.approx(1.0) and ncc(a, -2 * a + 1) == pytest.approx(-1.0)


def test_ncc_degenerate_and_errors():
    with pytest.warns(UserWarning, match="target is constant"):
        assert np.isnan(ncc(np.arange(6.0), np.ones(6)))
    with pytest.warns(UserWarning, match="uncertainty is constant"):
        assert np.isnan(ncc(np.zeros(6), np.arange(6.0)))
    with pytest.raises(ValueError, match="same shape"):
        ncc(np.zeros((2, 3)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="target contains 1 non-finite"):
        ncc(np.arange(3.0), np.array([0.0, np.nan, 1.0]))
    with pytest.raises(ValueError, match="empty"):
        ncc(np.zeros(0), np.zeros(0))


def test_rater_variance_equals_eq13():
    rng = np.random.default_rng(1)
    raters = (rng.uniform(size=(4, 6, 5, 3)) < 0.4).astype(np.int64)
    expected = np.zeros(raters.shape[1:])
    for idx in np.ndindex(*raters.shape[1:]):
        ys = [raters[(j, *idx)] for j in range(4)]
        mean = sum(ys) / 4
        expected[idx] = sum((y - mean) ** 2 for y in ys) / 4
    np.testing.assert_allclose(rater_variance(raters), expected, atol=1e-15)
    np.testing.assert_allclose(rater_variance(raters), np.var(raters, axis=0), atol=1e-15)
    # batched with keepdim, torch in -> torch out
    out = rater_variance(torch.from_numpy(raters[None]), rater_dim=1, keepdim=True)
    assert isinstance(out, torch.Tensor) and out.shape == (1, 1, 6, 5, 3)
    # multi-class: sum of the foreground one-vs-rest variances
    mc = rng.integers(0, 3, size=(5, 4, 4))
    exp = sum(np.var((mc == c).astype(float), axis=0) for c in (1, 2))
    np.testing.assert_allclose(rater_variance(mc), exp, atol=1e-15)
    with pytest.raises(ValueError, match="raters"):
        rater_variance(np.zeros(5, dtype=np.int64))
    with pytest.raises(ValueError, match="non-negative"):
        rater_variance(-np.ones((2, 3, 3), dtype=np.int64))


# ---------------------------------------------------------------- GED: brute force over all ordered pairs


def bf_distance(x, y, distance="iou"):
    """Per-pair distance with Python sets of voxel indices; classes present in either mask are averaged."""
    x, y = np.asarray(x).ravel(), np.asarray(y).ravel()
    classes = sorted({int(c) for c in np.r_[x, y] if c > 0})
    if not classes:
        return 0.0  # both empty
    ds = []
    for c in classes:
        sx = {i for i, v in enumerate(x) if v == c}
        sy = {i for i, v in enumerate(y) if v == c}
        inter = len(sx & sy)
        if distance == "iou":
            ds.append(1 - inter / len(sx | sy))
        else:
            ds.append(1 - 2 * inter / (len(sx) + len(sy)))
    return float(np.mean(ds))


def bf_energy(refs, samples, dist):
    cross = np.mean([[dist(a, b) for b in samples] for a in refs])
    ref = np.mean([[dist(a, b) for b in refs] for a in refs])
    smp = np.mean([[dist(a, b) for b in samples] for a in samples])
    return 2 * cross - ref - smp, cross, ref, smp


def random_masks(rng, n, shape, n_classes=2, p_empty=0.3):
    out = rng.integers(0, n_classes, size=(n, *shape)) * (rng.uniform(size=(n, *shape)) < 0.5)
    for i in range(n):
        if rng.uniform() < p_empty:
            out[i] = 0
    return out.astype(np.int64)


@pytest.mark.parametrize("shape", [(6, 5), (4, 3, 5)])
@pytest.mark.parametrize("distance", ["iou", "dice"])
@pytest.mark.parametrize("n_classes", [2, 4])
def test_ged_equals_brute_force(shape, distance, n_classes):
    rng = np.random.default_rng([len(shape), len(distance), n_classes])
    refs = random_masks(rng, 4, shape, n_classes)
    smp = random_masks(rng, 5, shape, n_classes)
    refs[0] = 0  # an empty reference, as in Zepf et al.'s lesion data
    expected = bf_energy(refs, smp, lambda a, b: bf_distance(a, b, distance))
    got = ged(refs, smp, distance=distance)
    np.testing.assert_allclose(got, expected, atol=1e-12)
    assert got.ged == pytest.approx(2 * got.cross - got.reference_diversity - got.sample_diversity)
    # torch input, and an explicit num_classes larger than the labels found
    got_t = ged(torch.from_numpy(refs), torch.from_numpy(smp), distance=distance, num_classes=n_classes + 2)
    np.testing.assert_allclose(got_t, expected, atol=1e-12)


def test_ged_empty_mask_conventions():
    empty = np.zeros((1, 4, 4), dtype=np.int64)
    full = np.ones((1, 4, 4), dtype=np.int64)
    # two empty masks: d = 0; empty vs non-empty: IoU = 0, d = 1 (Zepf et al.)
    assert ged(empty, empty).ged == 0.0
    res = ged(empty, full)
    assert res.cross == 1.0 and res.ged == 2.0 and res.reference_diversity == 0.0
    # non-empty-only variant ignores the empty masks; undefined if a set has none
    refs = np.stack([empty[0], full[0]])
    assert ged_nonempty_iou(refs, full).ged == 0.0
    with pytest.warns(UserWarning, match="every mask in samples is empty"):
        res = ged_nonempty_iou(refs, empty)
    assert all(np.isnan(v) for v in res)


def test_ged_zero_for_identical_distributions():
    rng = np.random.default_rng(2)
    masks = random_masks(rng, 3, (8, 8, 4), 3, p_empty=0.0)
    assert ged(masks, masks).ged == pytest.approx(0.0, abs=1e-12)
    # same masks in the same proportions, different order and multiplicity
    samples = masks[[2, 0, 1, 1, 0, 2]]
    for fn in (ged, ged_nonempty_iou, ged_detection):
        assert fn(masks, samples).ged == pytest.approx(0.0, abs=1e-12)
    # a different distribution is farther away
    assert ged(masks, masks[[0, 0, 0]]).ged > 0.0


@pytest.mark.parametrize("shape", [(5, 5), (3, 4, 2)])
def test_ged_detection_brute_force_and_closed_form(shape):
    rng = np.random.default_rng(3)
    refs = random_masks(rng, 6, shape, p_empty=0.5)
    smp = random_masks(rng, 7, shape, p_empty=0.2)

    def k(a, b):
        return float((not a.any()) != (not b.any()))

    expected = bf_energy(refs, smp, k)
    got = ged_detection(refs, smp)
    np.testing.assert_allclose(got, expected, atol=1e-12)
    p = np.mean([not r.any() for r in refs])
    q = np.mean([not s.any() for s in smp])
    assert got.ged == pytest.approx(2 * (p - q) ** 2, abs=1e-12)


def test_ged_nonempty_iou_brute_force():
    rng = np.random.default_rng(4)
    refs = random_masks(rng, 6, (6, 6), p_empty=0.4)
    smp = random_masks(rng, 6, (6, 6), p_empty=0.4)
    refs[1] = 0
    smp[2] = 0
    ne_r = [r for r in refs if r.any()]
    ne_s = [s for s in smp if s.any()]
    np.testing.assert_allclose(ged_nonempty_iou(refs, smp), bf_energy(ne_r, ne_s, bf_distance), atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_property_ged_symmetry_and_permutation(n_ref, n_smp, seed):
    rng = np.random.default_rng(seed)
    refs = random_masks(rng, n_ref, (5, 4), 3)
    smp = random_masks(rng, n_smp, (5, 4), 3)
    a = ged(refs, smp)
    b = ged(smp, refs)
    assert a.ged == pytest.approx(b.ged, abs=1e-12) and a.cross == pytest.approx(b.cross, abs=1e-12)
    perm = rng.permutation(n_smp)
    assert ged(refs, smp[perm]).ged == pytest.approx(a.ged, abs=1e-12)
    assert 0.0 <= a.cross <= 1.0


def test_ged_bad_inputs():
    with pytest.raises(ValueError, match="spatial shape"):
        ged(np.zeros((2, 4, 4), dtype=np.int64), np.zeros((2, 4, 5), dtype=np.int64))
    with pytest.raises(ValueError, match="references is empty"):
        ged(np.zeros((0, 4, 4), dtype=np.int64), np.zeros((2, 4, 4), dtype=np.int64))
    with pytest.raises(ValueError, match="integer class labels"):
        ged(np.full((2, 4, 4), 0.5), np.zeros((2, 4, 4)))
    with pytest.raises(ValueError, match="non-finite"):
        ged(np.full((2, 4, 4), np.nan), np.zeros((2, 4, 4)))
    with pytest.raises(ValueError, match="distance"):
        ged(np.zeros((1, 4, 4), dtype=np.int64), np.zeros((1, 4, 4), dtype=np.int64), distance="hausdorff")
    with pytest.raises(ValueError, match="num_classes"):
        ged(np.full((1, 4, 4), 3), np.zeros((1, 4, 4), dtype=np.int64), num_classes=2)
    with pytest.raises(ValueError, match="shape"):
        ged(np.zeros(4, dtype=np.int64), np.zeros(4, dtype=np.int64))


# ---------------------------------------------------------------- MONAI metric classes and ignite handlers


def _batch(seed=5, b=3, shape=(6, 7)):
    rng = np.random.default_rng(seed)
    samples = torch.from_numpy(np.stack([random_masks(rng, 4, shape) for _ in range(b)]))
    raters = torch.from_numpy(np.stack([random_masks(rng, 3, shape) for _ in range(b)]))
    return samples, raters


def test_ged_metric_wraps_the_function():
    samples, raters = _batch()
    metric = GEDMetric(return_terms=True, reduction="none")
    per_case = metric(samples, raters)
    assert per_case.shape == (3, 4)
    for i in range(3):
        np.testing.assert_allclose(per_case[i].numpy(), ged(raters[i], samples[i]), atol=1e-12)
    # accumulation over iterations, lists of channel-first tensors, and MONAI's mean reduction
    m = GEDMetric(variant="detection")
    m(samples[:2], raters[:2])
    m(list(samples[2:]), list(raters[2:]))
    expected = np.mean([ged_detection(raters[i], samples[i]).ged for i in range(3)])
    assert float(m.aggregate()) == pytest.approx(expected, abs=1e-6)
    # NaN cases (no non-empty mask) are skipped by the reduction
    m = GEDMetric(variant="nonempty_iou", get_not_nans=True)
    s2 = samples.clone()
    s2[0] = 0
    with pytest.warns(UserWarning):
        m(s2, raters)
    value, not_nans = m.aggregate()
    assert float(not_nans) == 2.0
    expected = np.mean([ged_nonempty_iou(raters[i], s2[i]).ged for i in (1, 2)])
    assert float(value) == pytest.approx(expected, abs=1e-6)
    with pytest.raises(ValueError, match="variant"):
        GEDMetric(variant="energy")


def test_ncc_metric_with_reference_maps_and_raters():
    rng = np.random.default_rng(6)
    raters = torch.from_numpy((rng.uniform(size=(2, 3, 8, 8, 4)) < 0.5).astype(np.int64))
    unc = rater_variance(raters, rater_dim=1, keepdim=True) + torch.from_numpy(rng.uniform(0, 0.1, (2, 1, 8, 8, 4)))
    m = NCCMetric(y_is_raters=True, reduction="none")
    per_case = m(unc, raters)
    ref = rater_variance(raters, rater_dim=1, keepdim=True)
    for i in range(2):
        assert float(per_case[i, 0]) == pytest.approx(np.corrcoef(unc[i].ravel(), ref[i].ravel())[0, 1], abs=1e-12)
    m2 = NCCMetric()
    m2(unc, ref)
    assert float(m2.aggregate()) == pytest.approx(float(per_case.mean()), abs=1e-6)


def test_ignite_handlers_save_details():
    samples, raters = _batch(b=4)
    rng = np.random.default_rng(7)
    unc = torch.from_numpy(rng.uniform(size=(4, 1, 6, 7)))
    data = [(samples[:2], raters[:2], unc[:2]), (samples[2:], raters[2:], unc[2:])]

    engine = Engine(lambda e, batch: batch)
    GeneralizedEnergyDistance(output_transform=lambda o: (o[0], o[1])).attach(engine, "ged")
    NormalizedCrossCorrelation(y_is_raters=True, output_transform=lambda o: (o[2], o[1])).attach(engine, "ncc")
    engine.run(data, max_epochs=1)

    per_case_ged = [ged(raters[i], samples[i]).ged for i in range(4)]
    per_case_ncc = [ncc(unc[i], rater_variance(raters[i], keepdim=True)) for i in range(4)]
    assert engine.state.metrics["ged"] == pytest.approx(np.mean(per_case_ged), abs=1e-6)
    assert engine.state.metrics["ncc"] == pytest.approx(np.mean(per_case_ncc), abs=1e-6)
    np.testing.assert_allclose(engine.state.metric_details["ged"].ravel(), per_case_ged, atol=1e-6)


def test_every_case_nan_aggregates_to_nan_not_zero():
    """MONAI's reduction returns 0 ("perfect") when no case is valid; the wrappers return NaN with a warning."""
    samples, raters = _batch()
    empty = torch.zeros_like(samples)
    m = GEDMetric(variant="nonempty_iou", get_not_nans=True)
    with pytest.warns(UserWarning, match="every mask in samples is empty"):
        m(empty, raters)
    for red in ("mean", "sum", "mean_batch", "sum_batch", "mean_channel"):
        with pytest.warns(UserWarning, match="GEDMetric: every case is NaN"):
            value, not_nans = m.aggregate(red)
        assert torch.isnan(value).all() and (not_nans == 0).all()
    assert torch.isnan(m.aggregate("none")[0]).all()  # per-case values: NaN already
    # one valid case: the mean of the valid ones, no warning
    m.reset()
    m(torch.cat([samples[:1], empty[1:]]), raters)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value, not_nans = m.aggregate()
    assert float(not_nans) == 1 and float(value) == pytest.approx(ged_nonempty_iou(raters[0], samples[0]).ged)

    n = NCCMetric()
    const = torch.ones(2, 1, 5, 5)
    with pytest.warns(UserWarning, match="constant"):
        n(const, torch.rand(2, 1, 5, 5))
    with pytest.warns(UserWarning, match="NCCMetric: every case is NaN"):
        assert math.isnan(float(n.aggregate()))


def test_handlers_report_nan_when_every_case_is_nan():
    samples, raters = _batch(b=2)
    data = [(torch.zeros_like(samples), raters, torch.ones(2, 1, 6, 7))]
    engine = Engine(lambda e, batch: batch)
    GeneralizedEnergyDistance(variant="nonempty_iou", output_transform=lambda o: (o[0], o[1])).attach(engine, "ged")
    NormalizedCrossCorrelation(y_is_raters=True, output_transform=lambda o: (o[2], o[1])).attach(engine, "ncc")
    with pytest.warns(UserWarning, match="every case is NaN"):
        engine.run(data, max_epochs=1)
    assert math.isnan(engine.state.metrics["ged"]) and math.isnan(engine.state.metrics["ncc"])


def _dist_worker(rank: int, world: int, init_file: str, out_file: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)  # a forked child must not reuse the parent's OpenMP pool
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    samples, raters = _batch(b=4)
    m = GEDMetric(reduction="none")
    m(samples[rank * 2 : rank * 2 + 2], raters[rank * 2 : rank * 2 + 2])  # each rank sees half of the cases
    gathered = m.aggregate()
    if rank == 0:
        torch.save(gathered, out_file)
    dist.destroy_process_group()


def test_ged_metric_gathers_across_ranks(tmp_path):
    """Two gloo ranks each evaluate half of the cases; MONAI's buffer gathering returns all of them."""
    import torch.multiprocessing as mp

    out = tmp_path / "gathered.pt"
    args = (2, str(tmp_path / "init"), str(out))
    mp.start_processes(_dist_worker, args=args, nprocs=2, join=True, start_method="fork")
    gathered = torch.load(out)
    samples, raters = _batch(b=4)
    expected = [ged(raters[i], samples[i]).ged for i in range(4)]
    np.testing.assert_allclose(gathered.ravel().numpy(), expected, atol=1e-12)


@pytest.mark.cuda
def test_cuda_inputs(cuda_device):
    samples, raters = _batch()
    got = ged(raters[0].to(cuda_device), samples[0].to(cuda_device))
    np.testing.assert_allclose(got, ged(raters[0], samples[0]), atol=1e-12)
    a = torch.rand(1, 8, 8, generator=torch.Generator().manual_seed(0)).to(cuda_device)
    assert ncc(a, 2 * a + 1) == pytest.approx(1.0)


# ---------------------------------------------------------------- the labels present, without sorting the maps


def test_ged_and_rater_variance_find_the_labels_without_sorting_the_maps(monkeypatch):
    """The labels present are found from each map's range (and counts), not by sorting every map: ``torch.unique`` of
    the label maps took ten times the GED itself (4 raters x 16 samples of 48^3: 7.7 -> 80 ms CPU, found by the
    benchmark review, ``bench_caselevel.py --quick``'s GED row). The values are unchanged."""
    rng = np.random.default_rng(0)
    cases = []
    for hi, dtype in ((3, torch.int64), (2, torch.int64), (3, torch.uint8), (5, torch.int16)):
        raters = torch.from_numpy(rng.integers(0, hi, size=(3, 10, 11, 12))).to(dtype)
        samples = torch.from_numpy(rng.integers(0, hi, size=(5, 10, 11, 12))).to(dtype)
        cases.append((raters, samples, ged(raters, samples), ged(raters, samples, distance="dice"),
                      rater_variance(samples)))
    sorted_sizes = []
    unique = torch.unique

    def counting_unique(x, *args, **kwargs):
        sorted_sizes.append(x.numel())
        return unique(x, *args, **kwargs)

    monkeypatch.setattr(torch, "unique", counting_unique)
    for raters, samples, g_iou, g_dice, rv in cases:
        assert ged(raters, samples) == g_iou
        assert ged(raters, samples, distance="dice") == g_dice
        assert torch.equal(rater_variance(samples), rv)
    assert sorted_sizes == [], f"label maps sorted to find their labels: {sorted_sizes}"


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1),
       st.sampled_from(["binary", "few", "sparse", "negative", "bool", "uint16", "empty"]))
def test_foreground_labels_are_the_sorted_distinct_labels_above_zero(seed, kind):
    from monai_unc.metrics.ambiguity import _foreground_labels

    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(1, 6, size=3))
    if kind == "binary":
        maps = [torch.from_numpy(rng.integers(0, 2, size=shape)) + int(rng.integers(0, 3)) for _ in range(2)]
    elif kind == "few":
        maps = [torch.from_numpy(rng.integers(0, 7, size=shape)).to(torch.int16) for _ in range(2)]
    elif kind == "sparse":  # ids far above the voxels (an atlas's): sorted, not counted
        maps = [torch.from_numpy(rng.choice([0, 17, 12175, 600_000_000], size=shape)) for _ in range(2)]
    elif kind == "negative":
        maps = [torch.from_numpy(rng.integers(-3, 4, size=shape)).to(torch.int8) for _ in range(2)]
    elif kind == "uint16":  # no aminmax or bincount in torch for it: sorted
        maps = [torch.from_numpy(rng.integers(0, 7, size=shape)).to(torch.uint16) for _ in range(2)]
    elif kind == "bool":
        maps = [torch.from_numpy(rng.integers(0, 2, size=shape).astype(bool)) for _ in range(2)]
    else:
        maps = [torch.zeros(0, dtype=torch.int64), torch.from_numpy(rng.integers(0, 3, size=shape))]
    expected = sorted({int(v) for m in maps for v in m.reshape(-1).tolist()} - {v for v in range(-3, 1)})
    assert _foreground_labels(*maps) == expected
