"""The one Dice / IoU / Gram implementation (metrics/overlap.py): against MONAI, brute-force numpy and the formulas
each caller used before it moved there (written out here), with every empty-mask rule."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from monai.metrics import compute_dice, compute_iou
from monai.networks.utils import one_hot

import monai_unc.metrics.overlap as overlap
from monai_unc.data.training import dice_per_class
from monai_unc.evaluation.case import class_dice
from monai_unc.metrics.ambiguity import ged
from monai_unc.metrics.overlap import (
    OverlapCounts,
    check_empty_score,
    class_counts,
    dice,
    dice_from_counts,
    dice_matrix,
    iou,
    iou_from_counts,
    iou_matrix,
    label_gram,
    mask_gram,
    overlap_counts,
    overlap_ratio,
)
from monai_unc.metrics.quality import pairwise_dice
from tests._paths import ROOT


def random_labels(rng, shape, n_classes, absent=()):
    x = rng.integers(0, n_classes, size=shape)
    for c in absent:
        x[x == c] = 0
    return x


def bf_dice(p, t, c, empty):
    a, b = p == c, t == c
    den = int(a.sum()) + int(b.sum())
    return empty if den == 0 else 2 * int((a & b).sum()) / den


def bf_iou(p, t, c, empty):
    a, b = p == c, t == c
    union = int((a | b).sum())
    return empty if union == 0 else int((a & b).sum()) / union


# ------------------------------------------------------------------------------------------ per-class Dice / IoU


@pytest.mark.parametrize("shape", [(3, 9, 8), (2, 6, 5, 7)])
def test_dice_and_iou_equal_brute_force_and_monai(shape):
    rng = np.random.default_rng(len(shape))
    n_cls = 4
    pred = random_labels(rng, shape, n_cls)
    target = random_labels(rng, shape, n_cls)
    pred[0][pred[0] == 3] = 0  # class 3 absent from the prediction of case 0 ...
    target[0][target[0] == 3] = 0  # ... and from its target: both empty
    target[1][target[1] == 2] = 0  # class 2 absent from the target only
    for include_background in (False, True):
        first = 0 if include_background else 1
        d = dice(pred, target, num_classes=n_cls, include_background=include_background)
        j = iou(pred, target, num_classes=n_cls, include_background=include_background)
        assert d.dtype == np.float64 and d.shape == (shape[0], n_cls - first)
        for b in range(shape[0]):
            for k, c in enumerate(range(first, n_cls)):
                assert d[b, k] == bf_dice(pred[b], target[b], c, 1.0)
                assert j[b, k] == bf_iou(pred[b], target[b], c, 1.0)
        # MONAI with ignore_empty=False: the same rule (1 when absent from both, 0 when absent from one)
        p1 = torch.from_numpy(pred)[:, None]
        t1 = torch.from_numpy(target)[:, None]
        ref = compute_dice(p1, t1, include_background=include_background, ignore_empty=False, num_classes=n_cls)
        np.testing.assert_array_equal(d.astype(np.float32), ref.numpy())  # MONAI divides in float32
        ref_iou = compute_iou(one_hot(p1, n_cls), one_hot(t1, n_cls), include_background=include_background,
                              ignore_empty=False)
        np.testing.assert_allclose(j, ref_iou.numpy(), rtol=1e-6)
    assert dice(pred, target, num_classes=n_cls)[0, -1] == 1.0  # absent from both
    assert dice(pred, target, num_classes=n_cls)[1, 1] == 0.0  # absent from the target only


def test_empty_score_rules():
    pred = np.array([[0, 1, 1, 0]])
    target = np.array([[0, 1, 0, 0]])  # class 2 absent from both
    assert dice(pred, target, num_classes=3).tolist() == [[2 / 3, 1.0]]
    assert dice(pred, target, num_classes=3, empty_score=0.0).tolist() == [[2 / 3, 0.0]]
    assert iou(pred, target, num_classes=3, empty_score=0.5).tolist() == [[0.5, 0.5]]
    with pytest.warns(UserWarning, match="1 comparison.*two empty masks gave NaN"):
        d = dice(pred, target, num_classes=3, empty_score=float("nan"))
    assert d[0, 0] == 2 / 3 and math.isnan(d[0, 1])
    # one empty and one non-empty mask is a plain 0, whatever the rule
    assert dice(np.array([[0, 0]]), np.array([[1, 1]]), num_classes=2, empty_score=float("nan")).tolist() == [[0.0]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning unless the rule is NaN
        dice(pred, target, num_classes=3)
    for bad in (1.5, -0.1, float("inf")):
        with pytest.raises(ValueError, match="empty_score"):
            dice(pred, target, empty_score=bad)
    for bad in ("one", True, None):
        with pytest.raises(TypeError, match="empty_score"):
            dice(pred, target, empty_score=bad)
    assert check_empty_score(np.float32(0.25)) == 0.25 and math.isnan(check_empty_score(float("nan")))


def test_counts_and_ratios_from_counts():
    assert dice_from_counts(3, 4, 5).item() == 6 / 9
    assert iou_from_counts(3, 4, 5).item() == 3 / 6
    assert dice_from_counts(0, 0, 0, empty_score=0.25).item() == 0.25
    r = overlap_ratio(torch.tensor([1, 0]), torch.tensor([4, 0]), empty_score=1.0)
    assert r.dtype == torch.float64 and r.tolist() == [0.25, 1.0]
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 3, size=(2, 4, 50))
    cc = class_counts(labels, 3)
    np.testing.assert_array_equal(cc, np.stack([(labels == c).sum(-1) for c in range(3)], -1))
    # samples (S, B, V) against one reference per case (B, V): broadcast leading axes, sizes counted per map
    ref = rng.integers(0, 3, size=(4, 50))
    counts = overlap_counts(labels, ref, 3, foreground=True)
    assert isinstance(counts, OverlapCounts) and counts.intersection.shape == (2, 4, 4)
    for s in range(2):
        for b in range(4):
            for c in range(3):
                assert counts.intersection[s, b, c] == np.sum((labels[s, b] == c) & (ref[b] == c))
                assert counts.pred_size[s, b, c] == np.sum(labels[s, b] == c)
                assert counts.target_size[s, b, c] == np.sum(ref[b] == c)
            assert counts.intersection[s, b, 3] == np.sum((labels[s, b] > 0) & (ref[b] > 0))
            assert counts.target_size[s, b, 3] == np.sum(ref[b] > 0)
    tc = overlap_counts(torch.from_numpy(labels), torch.from_numpy(ref), 3)
    assert isinstance(tc.intersection, torch.Tensor) and tc.intersection.dtype == torch.int64
    np.testing.assert_array_equal(tc.intersection.numpy(), counts.intersection[..., :3])


def test_bad_inputs():
    a = np.zeros((2, 5), dtype=np.int64)
    with pytest.raises(ValueError, match="same shape"):
        dice(a, np.zeros((2, 6)))
    with pytest.raises(ValueError, match="pred must be label maps"):
        dice(np.zeros(5), np.zeros(5))
    with pytest.raises(ValueError, match="target holds class 3"):
        dice(a, a + 3, num_classes=3)
    with pytest.raises(ValueError, match="pred must be non-negative"):
        dice(a - 1, a)
    with pytest.raises(ValueError, match="integer class labels"):
        dice(a + 0.5, a)
    with pytest.raises(ValueError, match="num_classes"):
        dice(a, a, num_classes=1)
    with pytest.raises(ValueError, match="do not broadcast"):
        overlap_counts(np.zeros((3, 5)), np.zeros((2, 5)), 2)
    with pytest.raises(ValueError, match="same number of voxels"):
        overlap_counts(np.zeros((2, 5)), np.zeros((2, 4)), 2)
    with pytest.raises(TypeError, match="numpy array or a torch tensor"):
        dice("abc", a)


# ------------------------------------------------------------------------------------------ Gram matrices


def bf_gram(masks):
    m = masks.reshape(*masks.shape[:-1], -1).astype(np.int64)
    return np.einsum("...iv,...jv->...ij", m, m)


@pytest.mark.parametrize("block", [None, 1, 7, 64])
def test_mask_gram_is_exact_for_any_block(block):
    rng = np.random.default_rng(2)
    masks = rng.random((3, 5, 301)) < 0.4
    g = mask_gram(masks, block=block)
    assert g.dtype == torch.float64 and g.shape == (3, 5, 5)
    np.testing.assert_array_equal(g.numpy(), bf_gram(masks))
    # a list of stacks is concatenated along the mask axis, block by block
    np.testing.assert_array_equal(mask_gram([masks[:, :2], masks[:, 2:]], block=block).numpy(), g.numpy())


def test_label_gram_per_class_and_foreground():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 4, size=(6, 200))
    for c in range(4):
        np.testing.assert_array_equal(label_gram(labels, c).numpy(), bf_gram(labels == c))
    np.testing.assert_array_equal(label_gram(labels, "foreground").numpy(), bf_gram(labels > 0))
    np.testing.assert_array_equal(label_gram([labels[:2], labels[2:]], 2, block=13).numpy(), bf_gram(labels == 2))


def test_gram_counts_above_float32_resolution():
    """Counts past 2^24 (where float32 stops representing every integer) stay exact: blocks of <= 2^24 voxels."""
    n = (1 << 24) + 3
    x = torch.ones(1, 2, n, dtype=torch.bool)
    x[0, 1, :5] = False
    g = mask_gram(x, block=1 << 24)
    assert g[0].tolist() == [[n, n - 5], [n - 5, n - 5]]


def test_gram_bad_inputs():
    with pytest.raises(ValueError, match="block"):
        mask_gram(np.ones((2, 4), bool), block=0)
    with pytest.raises(ValueError, match="block"):
        mask_gram(np.ones((2, 4), bool), block=(1 << 24) + 1)
    with pytest.raises(ValueError, match="only 0 and 1"):
        mask_gram(np.full((2, 4), 2))
    with pytest.raises(ValueError, match="share the leading axes"):
        mask_gram([np.ones((2, 4), bool), np.ones((2, 5), bool)])
    with pytest.raises(ValueError, match="M masks of V voxels"):
        mask_gram(np.ones(4, bool))
    with pytest.raises(ValueError, match="foreground"):
        label_gram(np.ones((2, 4), int), "background")
    with pytest.raises(ValueError, match="square"):
        dice_matrix(np.ones((2, 3)))


def test_dice_and_iou_matrices_equal_brute_force():
    rng = np.random.default_rng(4)
    masks = rng.random((6, 40)) < 0.3
    masks[1] = False
    masks[4] = False  # two empty masks: their pair is 0/0
    g = mask_gram(masks)
    for empty in (1.0, 0.0):
        d = dice_matrix(g, empty_score=empty).numpy()
        j = iou_matrix(g, empty_score=empty).numpy()
        for a in range(6):
            for b in range(6):
                assert d[a, b] == bf_dice(masks[a].astype(int), masks[b].astype(int), 1, empty)
                assert j[a, b] == bf_iou(masks[a].astype(int), masks[b].astype(int), 1, empty)
    with pytest.warns(UserWarning, match="dice_matrix: 4 comparison"):  # (1,1), (1,4), (4,1), (4,4)
        assert math.isnan(float(dice_matrix(g, empty_score=float("nan"))[1, 4]))


# ------------------------------------------------------------------------------------------ the callers' old formulas


def old_ged_pairwise_distance(a, b, n_classes, distance):
    """metrics/ambiguity.py's ``_pairwise_distance`` (with its ``_gram``) before it called metrics/overlap.py."""
    m = a.shape[0] + b.shape[0]
    total = torch.zeros(m, m, dtype=torch.float64)
    present = torch.zeros_like(total)
    for c in range(1, n_classes):
        inter = torch.zeros(m, m, dtype=torch.float64)
        for s in range(0, a.shape[1], 1 << 20):
            x = torch.cat([a[:, s:s + (1 << 20)] == c, b[:, s:s + (1 << 20)] == c]).to(torch.float32)
            inter += (x @ x.T).to(torch.float64)
        size = torch.diagonal(inter)
        size_sum = size.unsqueeze(1) + size.unsqueeze(0)
        here = size_sum > 0
        if distance == "iou":
            sim = inter / (size_sum - inter).clamp_min(1.0)
        else:
            sim = 2.0 * inter / size_sum.clamp_min(1.0)
        total += torch.where(here, 1.0 - sim, torch.zeros_like(sim))
        present += here.to(torch.float64)
    return torch.where(present > 0, total / present.clamp_min(1.0), torch.zeros_like(total))


@pytest.mark.parametrize("distance", ["iou", "dice"])
def test_ged_is_bit_identical_to_its_old_formula(distance):
    rng = np.random.default_rng(5)
    for trial in range(6):
        n_cls = 2 + trial % 3
        refs = rng.integers(0, n_cls, size=(3, 7, 6)) * (rng.random((3, 7, 6)) < 0.4)
        smp = rng.integers(0, n_cls, size=(4, 7, 6)) * (rng.random((4, 7, 6)) < 0.4)
        refs[0] = 0
        smp[trial % 4] = 0
        a = torch.from_numpy(refs.reshape(3, -1))
        b = torch.from_numpy(smp.reshape(4, -1))
        d = old_ged_pairwise_distance(a, b, n_cls, distance)
        cross, ref, sam = float(d[:3, 3:].mean()), float(d[:3, :3].mean()), float(d[3:, 3:].mean())
        got = ged(refs, smp, distance=distance, num_classes=n_cls)
        assert tuple(got) == (2.0 * cross - ref - sam, cross, ref, sam)  # bit for bit


def old_pairwise_dice_foreground(samples, empty_score):
    """metrics/quality.py's ``pairwise_dice`` (foreground column) before it called metrics/overlap.py."""
    s = torch.as_tensor(samples)
    n_s, b = s.shape[:2]
    seg = s.argmax(2).reshape(n_s, b, -1).transpose(0, 1)
    m = (seg > 0).to(torch.float32)
    gram = torch.bmm(m, m.transpose(1, 2)).to(torch.float64)
    size = torch.diagonal(gram, dim1=1, dim2=2)
    iu = torch.triu_indices(n_s, n_s, offset=1)
    num, den = 2 * gram[:, iu[0], iu[1]], size[:, iu[0]] + size[:, iu[1]]
    empty = den == 0
    out = torch.where(empty, torch.full_like(num, empty_score), num / torch.where(empty, torch.ones_like(den), den))
    return out.mean(dim=1).numpy()


def test_quality_pairwise_dice_is_bit_identical_to_its_old_formula():
    rng = np.random.default_rng(6)
    logits = rng.normal(size=(5, 3, 3, 6, 7)) * 3
    logits[:, 1, 1:] -= 50  # case 1: background everywhere in every sample (empty pairs)
    p = np.exp(logits)
    p /= p.sum(2, keepdims=True)
    for empty in (1.0, 0.0):
        np.testing.assert_array_equal(pairwise_dice(p, empty_score=empty).foreground,
                                      old_pairwise_dice_foreground(p, empty))
    assert pairwise_dice(p).foreground[1] == 1.0


def test_evaluate_dice_equals_monai_compute_dice_bit_for_bit():
    """``monai-unc evaluate`` computed its per-class Dice with MONAI's compute_dice(ignore_empty=False) before."""
    rng = np.random.default_rng(7)
    for trial in range(8):
        shape = (9, 8, 7) if trial % 2 else (13, 11)
        seg = random_labels(rng, shape, 3, absent=(2,) if trial % 3 == 0 else ())
        label = random_labels(rng, shape, 3, absent=(2,) if trial % 4 == 0 else ())
        ref = compute_dice(torch.from_numpy(seg)[None, None], torch.from_numpy(label)[None, None],
                           include_background=False, ignore_empty=False, num_classes=3)[0].numpy()
        got = class_dice(seg, label, 3)
        assert got.dtype == ref.dtype == np.float32
        np.testing.assert_array_equal(got, ref)


def test_dice_per_class_is_unchanged():
    """data.training.dice_per_class (NaN for a class absent from both) written out as it was."""
    rng = np.random.default_rng(8)
    pred, label = rng.integers(0, 3, size=(2, 6, 7, 5))
    pred[pred == 2] = 0
    label[label == 2] = 0
    mask = rng.random((6, 7, 5)) < 0.6
    for m in (None, mask):
        p, t = (pred, label) if m is None else (pred[m], label[m])
        old = []
        for c in (1, 2):
            a, b = p == c, t == c
            denom = int(a.sum()) + int(b.sum())
            old.append(float(2 * np.logical_and(a, b).sum() / denom) if denom else float("nan"))
        with pytest.warns(UserWarning, match="NaN"):
            new = dice_per_class(pred, label, 3, m)
        assert new[0] == old[0] and math.isnan(new[1]) and math.isnan(old[1])


# ------------------------------------------------------------------------------------------ properties


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=1, max_size=40), st.integers(0, 2**31 - 1))
def test_property_dice_iou_relation(labels, seed):
    a = np.array([labels])
    b = np.random.default_rng(seed).permutation(a[0])[None]
    d = dice(a, b, num_classes=3, include_background=True)
    j = iou(a, b, num_classes=3, include_background=True)
    np.testing.assert_array_equal(d, dice(b, a, num_classes=3, include_background=True))  # symmetric
    assert ((0 <= d) & (d <= 1)).all() and ((0 <= j) & (j <= 1)).all()
    np.testing.assert_allclose(d, 2 * j / (1 + j), atol=1e-15)  # Dice = 2 IoU / (1 + IoU), empty pairs too
    np.testing.assert_array_equal(dice(a, a, num_classes=3, include_background=True), 1.0)


def test_gram_block_default_is_read_at_call_time(monkeypatch):
    """label_gram(block=None) uses overlap.GRAM_BLOCK: a block of 3 voxels splits the products (spied)."""
    calls = []
    real = torch.matmul
    monkeypatch.setattr(overlap, "GRAM_BLOCK", 3)
    monkeypatch.setattr(torch, "matmul", lambda x, y: calls.append(x.shape[-1]) or real(x, y))
    labels = np.arange(10)[None].repeat(2, 0) % 3
    np.testing.assert_array_equal(label_gram(labels, 1).numpy(), bf_gram(labels == 1))
    assert calls == [3, 3, 3, 1]


@pytest.mark.cuda
def test_cuda_inputs(cuda_device):
    rng = np.random.default_rng(9)
    p, t = rng.integers(0, 3, size=(2, 2, 9, 9))
    got = dice(torch.from_numpy(p).to(cuda_device), torch.from_numpy(t).to(cuda_device), num_classes=3)
    assert got.device.type == cuda_device.type
    np.testing.assert_array_equal(got.cpu().numpy(), dice(p, t, num_classes=3))  # exact: ratios of integer counts
    masks = torch.from_numpy(rng.random((4, 500)) < 0.5)
    gram = mask_gram(masks.to(cuda_device))
    assert gram.device.type == cuda_device.type
    np.testing.assert_array_equal(gram.cpu().numpy(), mask_gram(masks).numpy())


def test_docs_example_runs(tmp_path, monkeypatch):
    """The python block of docs/overlap.md runs as written."""
    import re

    text = (ROOT / "docs" / "overlap.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "docs/overlap.md has no python example"
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        exec(compile(code, "docs/overlap.md", "exec"), {"__name__": "__docs__"})


def test_dice_per_class_takes_a_0_1_mask_as_a_mask():
    """Regression: a 0/1 uint8 mask (a NIfTI brain mask as nibabel reads it) indexed the voxels by number (voxels 0
    and 1, repeated) instead of selecting them: class 2 came back NaN instead of 1.0, silently. Checked against the
    brute-force count over the selected voxels; a mask of another shape or with other values, and label maps of
    different shapes, are refused."""
    pred = np.array([[0, 1, 1], [2, 2, 2]])
    label = np.array([[0, 1, 2], [2, 2, 2]])
    keep = np.array([[1, 1, 0], [1, 1, 1]], np.uint8)
    sel = keep.astype(bool)
    want = [float(2 * ((pred[sel] == c) & (label[sel] == c)).sum() / ((pred[sel] == c).sum() + (label[sel] == c).sum()))
            for c in (1, 2)]
    assert want == [1.0, 1.0]
    for m in (keep, keep.astype(np.float32), keep.astype(bool)):
        assert dice_per_class(pred, label, 3, m) == want
    with pytest.raises(ValueError, match="mask must be a binary mask"):
        dice_per_class(pred, label, 3, keep * 2)
    with pytest.raises(ValueError, match="mask must have the shape"):
        dice_per_class(pred, label, 3, keep.reshape(-1))
    with pytest.raises(ValueError, match="pred and label must have the same shape"):
        dice_per_class(pred, label.reshape(3, 2), 3)
