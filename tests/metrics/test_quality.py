"""Label-free quality estimates: brute-force loops over kept samples, hand-worked cases, streaming == batch."""

from __future__ import annotations

import itertools
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import monai_unc.metrics.overlap as overlap
from monai_unc.inferers import MCDropoutInferer
from monai_unc.metrics.quality import (
    QualityScores,
    StreamingQuality,
    dice_to_mean,
    expected_dice,
    pairwise_dice,
    quality_estimates,
    sample_iou,
    volume_cv,
)
from monai_unc.stats import SampleStats
from tests._paths import ROOT

DOCS = ROOT / "docs"

# ---------------------------------------------------------------- brute-force references (numpy loops)


def random_samples(s, b, c, spatial, seed=0, sharp=2.0):
    rng = np.random.default_rng(seed)
    logits = sharp * rng.normal(size=(s, b, c, *spatial))
    p = np.exp(logits)
    return p / p.sum(axis=2, keepdims=True)


def masks_of(seg, j, c):
    """class j (j < C) or the foreground (j == C)."""
    return seg == j if j < c else seg > 0


def bf_dice(a, b, empty=1.0):
    den = a.sum() + b.sum()
    return empty if den == 0 else 2.0 * np.logical_and(a, b).sum() / den


def bf_all(samples, reference=None, empty=1.0):
    """Every estimate as (B, C + 1) arrays (last column foreground), by explicit loops."""
    s, b, c = samples.shape[:3]
    seg = samples.argmax(axis=2)
    ref = samples.mean(axis=0).argmax(axis=1) if reference is None else reference
    out = {k: np.zeros((b, c + 1)) for k in ("pairwise", "to_mean", "iou", "cv", "cv_soft")}
    for i in range(b):
        for j in range(c + 1):
            ms = [masks_of(seg[k, i], j, c) for k in range(s)]
            pairs = list(itertools.combinations(range(s), 2))
            out["pairwise"][i, j] = np.mean([bf_dice(ms[x], ms[y], empty) for x, y in pairs]) if pairs else np.nan
            out["to_mean"][i, j] = np.mean([bf_dice(m, masks_of(ref[i], j, c), empty) for m in ms])
            inter = np.logical_and.reduce(ms).sum()
            union = np.logical_or.reduce(ms).sum()
            out["iou"][i, j] = empty if union == 0 else inter / union
            vols = np.array([m.sum() for m in ms], dtype=float)
            out["cv"][i, j] = vols.std() / vols.mean() if vols.mean() > 0 else np.nan
            soft = np.array([
                (samples[k, i, j].sum() if j < c else (1 - samples[k, i, 0]).sum()) for k in range(s)
            ])
            out["cv_soft"][i, j] = soft.std() / soft.mean()
    return out


def bf_expected_dice(probs, empty=1.0):
    b, c = probs.shape[:2]
    out = np.zeros((b, c + 1))
    for i in range(b):
        seg = probs[i].argmax(axis=0)
        for j in range(c + 1):
            pj = probs[i, j] if j < c else 1 - probs[i, 0]
            r = masks_of(seg, j, c)
            den = pj.sum() + r.sum()
            if r.sum() == 0 and den > 0:  # not segmented, some probability: P(the reference holds none of it)
                none = 1.0
                for v in np.asarray(pj, np.float64).reshape(-1):
                    none *= 1.0 - min(max(v, 0.0), 1.0)
                out[i, j] = empty * none
            else:
                out[i, j] = empty if den == 0 else 2 * (pj * r).sum() / den
    return out


def check(scores: QualityScores, ref: np.ndarray, include_background=False, atol=1e-12):
    c = ref.shape[1] - 1
    cols = list(range(0 if include_background else 1, c))
    np.testing.assert_allclose(np.asarray(scores.foreground), ref[:, c], atol=atol)
    np.testing.assert_allclose(np.asarray(scores.per_class), ref[:, cols], atol=atol)


# ---------------------------------------------------------------- batch estimates against the loops


@pytest.mark.parametrize(
    ("s", "b", "c", "spatial"), [(5, 2, 3, (7, 8, 6)), (4, 1, 2, (9, 11)), (3, 2, 4, (5, 6, 4)), (6, 1, 3, (12, 10))]
)
@pytest.mark.parametrize("include_background", [False, True])
def test_estimates_match_bruteforce(s, b, c, spatial, include_background):
    x = random_samples(s, b, c, spatial, seed=s * 10 + c)
    ref = bf_all(x)
    kw = {"include_background": include_background}
    check(pairwise_dice(x, **kw), ref["pairwise"], include_background)
    check(dice_to_mean(x, **kw), ref["to_mean"], include_background)
    check(sample_iou(x, **kw), ref["iou"], include_background)
    check(volume_cv(x, **kw), ref["cv"], include_background)
    check(volume_cv(x, soft=True, **kw), ref["cv_soft"], include_background, atol=1e-9)
    check(expected_dice(x.mean(0), **kw), bf_expected_dice(x.mean(0)), include_background)


def test_pairwise_dice_blocks_are_exact(monkeypatch):
    """The Gram matrix is accumulated over voxel blocks: tiny blocks give the same result."""
    x = random_samples(5, 2, 3, (9, 7, 5), seed=3)
    whole = pairwise_dice(x)
    monkeypatch.setattr(overlap, "GRAM_BLOCK", 7)  # the Gram matrix is computed by metrics.overlap
    blocked = pairwise_dice(x)
    np.testing.assert_allclose(blocked.per_class, whole.per_class, atol=1e-15)
    np.testing.assert_allclose(blocked.foreground, whole.foreground, atol=1e-15)


def test_dice_to_an_explicit_reference():
    x = random_samples(4, 2, 3, (6, 7, 5), seed=1)
    ref_map = np.random.default_rng(0).integers(0, 3, size=(2, 6, 7, 5))
    check(dice_to_mean(x, reference=ref_map), bf_all(x, reference=ref_map)["to_mean"])
    # (B, 1, *spatial) is accepted as well
    check(dice_to_mean(x, reference=ref_map[:, None]), bf_all(x, reference=ref_map)["to_mean"])


def test_hand_worked_binary_case():
    # 2 samples, 4 voxels (a 2 x 2 image): sample 1 segments voxels {0, 1}, sample 2 voxels {1, 2}
    fg = np.array([[0.9, 0.8, 0.2, 0.1], [0.4, 0.9, 0.7, 0.2]])
    x = np.stack([1 - fg, fg], axis=1).reshape(2, 1, 2, 2, 2)  # (S, B, C, 2, 2)
    assert pairwise_dice(x).foreground[0] == pytest.approx(2 * 1 / (2 + 2))  # 0.5
    assert sample_iou(x).foreground[0] == pytest.approx(1 / 3)
    # the mean foreground is (0.65, 0.85, 0.45, 0.15): R = {0, 1}; Dice(A1, R) = 1, Dice(A2, R) = 0.5
    assert dice_to_mean(x).foreground[0] == pytest.approx(0.75)
    assert volume_cv(x).foreground[0] == 0.0  # both samples segment two voxels
    # expected Dice of the mean: soft overlap 0.65 + 0.85 = 1.5, soft volume 2.1, |R| = 2
    assert expected_dice(x.mean(0)).foreground[0] == pytest.approx(2 * 1.5 / (2.1 + 2))
    # binary: the foreground is class 1
    assert expected_dice(x.mean(0)).per_class[0, 0] == expected_dice(x.mean(0)).foreground[0]


def test_identical_samples_agree_perfectly():
    p = random_samples(1, 2, 3, (6, 6, 6), seed=4)[0]
    x = np.stack([p] * 4)
    for fn in (pairwise_dice, dice_to_mean, sample_iou):
        r = fn(x)
        np.testing.assert_allclose(r.per_class, 1.0)
        np.testing.assert_allclose(r.foreground, 1.0)
    np.testing.assert_array_equal(volume_cv(x).per_class, 0.0)


def test_absent_class_and_empty_score():
    x = random_samples(3, 1, 3, (5, 5, 5), seed=5)
    x[:, :, 2] = 0.0  # class 2 never predicted
    x /= x.sum(axis=2, keepdims=True)
    assert pairwise_dice(x).per_class[0, 1] == 1.0
    assert dice_to_mean(x, empty_score=0.3).per_class[0, 1] == 0.3
    assert sample_iou(x).per_class[0, 1] == 1.0
    with pytest.warns(UserWarning, match="empty"):
        assert np.isnan(sample_iou(x, empty_score=float("nan")).per_class[0, 1])
    with pytest.warns(UserWarning, match="undefined"):
        cv = volume_cv(x)
    assert np.isnan(cv.per_class[0, 1]) and np.isfinite(cv.per_class[0, 0])
    # expected Dice: no mass on class 2 and no voxel of it -> empty_score
    assert expected_dice(x.mean(0)).per_class[0, 1] == 1.0


def test_single_sample():
    x = random_samples(1, 2, 2, (6, 5), seed=6)
    with pytest.warns(UserWarning, match="single sample"):
        r = pairwise_dice(x)
    assert np.isnan(r.foreground).all() and np.isnan(r.per_class).all()
    np.testing.assert_allclose(dice_to_mean(x).foreground, 1.0)
    np.testing.assert_array_equal(volume_cv(x).foreground, 0.0)
    with pytest.warns(UserWarning, match="degrees of freedom"):
        assert np.isnan(volume_cv(x, ddof=1).foreground).all()


def test_argmax_ties_go_to_the_lower_class():
    x = np.full((2, 1, 2, 4, 4), 0.5)
    assert pairwise_dice(x).foreground[0] == 1.0  # every voxel background in both samples: two empty masks
    # mass 0.5 per voxel on class 1, but no voxel predicted: the chance that the reference holds none of the 16
    # voxels either (the soft Dice alone, 0, was the API's number before review 68 and is a former rule's estimate)
    assert expected_dice(x[0]).per_class[0, 0] == pytest.approx(0.5 ** 16, rel=1e-12)
    r = expected_dice(x[0], include_background=True).per_class[0, 0]
    assert r == pytest.approx(2 * 8 / (8 + 16))


def test_torch_in_torch_out():
    x = random_samples(4, 2, 3, (6, 5, 4), seed=7)
    t = torch.from_numpy(x)
    for fn in (pairwise_dice, dice_to_mean, sample_iou, volume_cv):
        a, b = fn(x), fn(t)
        assert isinstance(b.foreground, torch.Tensor) and b.per_class.dtype == torch.float64
        np.testing.assert_allclose(b.per_class.numpy(), a.per_class)
    e = expected_dice(t.mean(0).to(torch.float32))
    assert isinstance(e.foreground, torch.Tensor)
    np.testing.assert_allclose(e.foreground.numpy(), expected_dice(x.mean(0)).foreground, atol=1e-6)


def test_expected_dice_from_streamed_statistics():
    x = torch.from_numpy(random_samples(5, 2, 3, (6, 6, 5), seed=8))
    stats = SampleStats()
    for p in x:
        stats.update(p)
    a, b = expected_dice(stats.mean), expected_dice(x.mean(0))
    torch.testing.assert_close(a.per_class, b.per_class)


def test_bad_input_names_the_argument():
    x = random_samples(3, 1, 2, (4, 4), seed=0)
    with pytest.raises(ValueError, match="samples"):
        pairwise_dice(x[0])  # (B, C, *spatial) read as (S, B, C, x): its "classes" do not sum to 1
    with pytest.raises(ValueError, match="samples"):
        dice_to_mean(x * 2)
    with pytest.raises(ValueError, match="probs"):
        expected_dice(x[0, :, :1])
    with pytest.raises(ValueError, match="reference"):
        dice_to_mean(x, reference=np.zeros((1, 5, 4), np.int64))
    with pytest.raises(ValueError, match="reference"):
        dice_to_mean(x, reference=np.full((1, 4, 4), 2))
    with pytest.raises(ValueError, match="output"):
        quality_estimates({"samples": x})


# ---------------------------------------------------------------- streaming == batch


@settings(max_examples=30, deadline=None)
@given(
    s=st.integers(1, 5),
    b=st.integers(1, 2),
    c=st.integers(2, 4),
    spatial=st.sampled_from([(5, 4), (4, 3, 5), (7, 6)]),
    seed=st.integers(0, 1000),
    sharp=st.sampled_from([0.3, 3.0]),
)
def test_streaming_equals_batch(s, b, c, spatial, seed, sharp):
    x = random_samples(s, b, c, spatial, seed=seed, sharp=sharp)
    ref_map = x.mean(0).argmax(1)
    acc = StreamingQuality(reference=ref_map, include_background=True)
    for p in x:
        acc.update(p)
    assert acc.num_samples == s
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # absent classes give NaN CVs on both sides
        pairs = [
            (acc.sample_iou(), sample_iou(x, include_background=True)),
            (acc.dice_to_reference(), dice_to_mean(x, include_background=True)),
            (acc.volume_cv(), volume_cv(x, include_background=True)),
            (acc.volume_cv(soft=True), volume_cv(x, soft=True, include_background=True)),
        ]
    for got, want in pairs:
        np.testing.assert_allclose(got.per_class, want.per_class, atol=1e-12)
        np.testing.assert_allclose(got.foreground, want.foreground, atol=1e-12)
    assert acc.volumes().shape == (s, b, c + 1)


@pytest.mark.parametrize("c", [8, 9, 20, 40])
def test_streaming_many_classes(c):
    """The per-voxel class bits live in the narrowest integer type: check each width against the batch IoU."""
    x = random_samples(3, 1, c, (6, 6, 6), seed=c, sharp=4.0)
    acc = StreamingQuality(include_background=True)
    for p in x:
        acc.update(p)
    want = sample_iou(x, include_background=True)
    np.testing.assert_allclose(acc.sample_iou().per_class, want.per_class)
    np.testing.assert_allclose(acc.sample_iou().foreground, want.foreground)


def test_streaming_torch_and_errors():
    x = torch.from_numpy(random_samples(3, 1, 3, (5, 5, 5), seed=9))
    acc = StreamingQuality()
    with pytest.raises(ValueError, match="empty"):
        acc.volume_cv()
    for p in x:
        acc.update(p)
    assert isinstance(acc.sample_iou().foreground, torch.Tensor)
    with pytest.raises(ValueError, match="reference"):
        acc.dice_to_reference()
    with pytest.raises(ValueError, match="does not match"):
        acc.update(x[0, :, :, :4])


# ---------------------------------------------------------------- from an inferer's output


class TinyDropoutNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv3d(1, 8, 3, padding=1)
        self.drop = torch.nn.Dropout(0.3)
        self.conv2 = torch.nn.Conv3d(8, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.drop(torch.relu(self.conv1(x))))


def test_quality_estimates_from_inferer_output():
    torch.manual_seed(0)
    net = TinyDropoutNet().eval()
    x = torch.randn(2, 1, 8, 8, 8)
    out = MCDropoutInferer(num_samples=4, keep_samples=True, seed=0)(x, net)
    est = quality_estimates(out)
    assert set(est) == {"expected_dice", "pairwise_dice", "dice_to_mean", "sample_iou", "volume_cv"}
    torch.testing.assert_close(est["pairwise_dice"].per_class, pairwise_dice(out["samples"]).per_class)
    torch.testing.assert_close(est["expected_dice"].foreground, expected_dice(out["pred"]).foreground)
    for v in est.values():
        assert v.foreground.shape == (2,) and v.per_class.shape == (2, 2)
    # without samples only the estimate from the mean prediction is available
    plain = MCDropoutInferer(num_samples=4, seed=0)(x, net)
    assert set(quality_estimates(plain)) == {"expected_dice"}


# ---------------------------------------------------------------- the docs page runs


def test_referral_threshold_doc_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = (DOCS / "referral_threshold.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "docs/referral_threshold.md has no python example"
    # the page demonstrates an infeasible target on purpose: it must warn
    with pytest.warns(UserWarning, match="refer every case"):
        for code in blocks:
            exec(compile(code, "docs/referral_threshold.md", "exec"), {"__name__": "__docs__"})


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_expected_dice_cpu_sums_equal_the_torch_sums(dtype):
    """The CPU's NumPy path (one weighted count of the segmentation) and the torch path (every device) give the same
    sums: ties (first class wins), a permuted (non-contiguous) input, several cases, an all-background case and NaN
    with ``validate=False``."""
    from monai_unc.metrics.quality import _expected_dice_sums, _expected_dice_sums_cpu

    g = torch.Generator().manual_seed(3)
    p = torch.softmax(3 * torch.randn(3, 10, 12, 4, generator=g, dtype=torch.float64), -1).to(dtype)
    p[0, :3] = torch.tensor([0.4, 0.4, 0.1, 0.1], dtype=dtype)  # ties between classes 0 and 1
    p[1, 5:] = torch.tensor([0.25, 0.25, 0.25, 0.25], dtype=dtype)  # four-way ties
    p[2] = torch.tensor([0.9, 0.05, 0.03, 0.02], dtype=dtype)  # all background
    x = p.permute(0, 3, 1, 2)  # (B, C, X, Y), not contiguous
    for probs in (x, x.clone().index_put_((torch.tensor([1]), torch.tensor([2]), torch.tensor([4]),
                                           torch.tensor([7])), torch.tensor(float("nan"), dtype=dtype))):
        flat = probs.reshape(3, 4, -1)
        num, den, held = _expected_dice_sums_cpu(flat)
        ref_num, ref_den, ref_held = _expected_dice_sums(flat)
        torch.testing.assert_close(num, ref_num, rtol=1e-12, atol=1e-9, equal_nan=True)
        torch.testing.assert_close(den, ref_den, rtol=1e-12, atol=1e-9, equal_nan=True)
        torch.testing.assert_close(held, ref_held, rtol=0, atol=0)
        assert held.dtype == torch.int64 and bool((held[:, :-1].sum(dim=1) == flat.shape[-1]).all())
    scores = expected_dice(x)  # the public function takes the CPU path and agrees with the brute-force loops
    check(scores, bf_expected_dice(x.double().numpy()), atol=1e-6 if dtype == torch.float32 else 1e-12)
