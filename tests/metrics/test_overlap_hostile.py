"""Hostile input for Dice / IoU / Gram matrices (metrics/overlap.py): empty masks on one or both sides, the NaN
rule against MONAI's ``ignore_empty``, one-hot against labels, bool and float masks, empty batches, bad
``num_classes`` and ``label``; every number checked against an independent numpy brute force."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from monai.metrics import DiceMetric, compute_dice, compute_iou
from monai.networks.utils import one_hot

from monai_unc.metrics.overlap import (
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
)


def brute(pred: np.ndarray, target: np.ndarray, c: int, kind: str, empty: float) -> np.ndarray:
    """Dice / IoU per case and class by loops over sets of voxel indices (no counting trick)."""
    out = np.empty((pred.shape[0], c))
    for b in range(pred.shape[0]):
        p, t = pred[b].ravel(), target[b].ravel()
        for k in range(c):
            a, r = set(np.flatnonzero(p == k)), set(np.flatnonzero(t == k))
            if not a and not r:
                out[b, k] = empty
            elif kind == "dice":
                out[b, k] = 2 * len(a & r) / (len(a) + len(r))
            else:
                out[b, k] = len(a & r) / len(a | r)
    return out


def hostile_pair(seed: int, c: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Label maps (3, 5, 6, 3) with a class absent from both (case 0), from the target only (case 1) and from the
    prediction only (case 2)."""
    rng = np.random.default_rng(seed)
    p = rng.integers(0, c, (3, 5, 6, 3))
    t = rng.integers(0, c, (3, 5, 6, 3))
    p[0][p[0] == 2], t[0][t[0] == 2] = 0, 0
    t[1][t[1] == 3] = 1
    p[2][p[2] == 1] = 0
    return p, t


@pytest.mark.parametrize("kind", ["dice", "iou"])
@pytest.mark.parametrize("empty", [1.0, 0.0, 0.25])
def test_matches_brute_force_with_every_empty_rule(kind, empty):
    fn = dice if kind == "dice" else iou
    for seed in range(5):
        p, t = hostile_pair(seed)
        got = fn(p, t, num_classes=4, include_background=True, empty_score=empty)
        np.testing.assert_allclose(got, brute(p, t, 4, kind, empty), rtol=0, atol=1e-15)


def test_one_side_empty_is_zero_never_the_empty_score():
    p = np.zeros((1, 8), int)
    t = np.zeros((1, 8), int)
    t[0, :3] = 1
    for empty in (1.0, 0.5, float("nan")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no NaN warning: the pair is not an empty pair
            assert dice(p, t, num_classes=2, empty_score=empty)[0, 0] == 0.0
            assert dice(t, p, num_classes=2, empty_score=empty)[0, 0] == 0.0
            assert iou(p, t, num_classes=2, empty_score=empty)[0, 0] == 0.0


def test_nan_rule_warns_and_counts_only_pairs_of_empty_masks():
    p, t = hostile_pair(0)
    with pytest.warns(UserWarning, match=r"dice: 1 comparison\(s\) of two empty masks"):
        d = dice(p, t, num_classes=4, empty_score=float("nan"))
    assert math.isnan(d[0, 1]) and np.isfinite(np.delete(d.ravel(), 1)).all()


def test_monai_ignore_empty_false_equals_the_default_rule():
    for seed in range(5):
        p, t = hostile_pair(seed)
        pt, tt = (one_hot(torch.as_tensor(x)[:, None], 4) for x in (p, t))
        for inc in (False, True):
            ref = compute_dice(pt, tt, include_background=inc, ignore_empty=False).numpy()
            np.testing.assert_allclose(dice(p, t, num_classes=4, include_background=inc), ref, atol=1e-6)
            ref = compute_iou(pt, tt, include_background=inc, ignore_empty=False).numpy()
            np.testing.assert_allclose(iou(p, t, num_classes=4, include_background=inc), ref, atol=1e-6)


def test_monai_ignore_empty_true_is_nan_where_the_reference_is_empty_and_differs_only_there():
    p, t = hostile_pair(1)
    pt, tt = (one_hot(torch.as_tensor(x)[:, None], 4) for x in (p, t))
    metric = DiceMetric(include_background=False, ignore_empty=True, reduction="none")
    ref = metric(pt, tt).numpy()
    ours = dice(p, t, num_classes=4)
    ref_empty = np.stack([(t == k).reshape(3, -1).sum(1) == 0 for k in range(1, 4)], axis=1)
    assert np.isnan(ref[ref_empty]).all() and np.isfinite(ref[~ref_empty]).all()
    np.testing.assert_allclose(ours[~ref_empty], ref[~ref_empty], atol=1e-6)
    # where only the reference is empty (case 1, class 3) ours is the formula's 0, MONAI's NaN: a different rule
    assert ours[1, 2] == 0.0 and math.isnan(ref[1, 2])


def test_spacing_does_not_enter_and_layouts_agree():
    """Overlap counts voxels: the same labels as (B, *spatial), (B, 1, *spatial) and (B, V) give the same Dice,
    and any axis order (as after a resampling to another anisotropic grid's axis order) too."""
    p, t = hostile_pair(2)
    base = dice(p, t, num_classes=4)
    np.testing.assert_array_equal(dice(p[:, None], t[:, None], num_classes=4), base)
    np.testing.assert_array_equal(dice(p.reshape(3, -1), t.reshape(3, -1), num_classes=4), base)
    np.testing.assert_array_equal(dice(p.transpose(0, 3, 1, 2), t.transpose(0, 3, 1, 2), num_classes=4), base)


def test_bool_float_and_integer_dtypes_agree():
    p, t = hostile_pair(3, c=2)
    base = dice(p, t)
    for dt in (bool, np.uint8, np.int16, np.float32, np.float64):
        np.testing.assert_array_equal(dice(p.astype(dt), t.astype(dt)), base)
    np.testing.assert_array_equal(dice(torch.as_tensor(p), torch.as_tensor(t)).numpy(), base)


def test_fractional_nan_and_negative_labels_are_refused():
    p, t = hostile_pair(4)
    with pytest.raises(ValueError, match="pred must hold integer class labels"):
        dice(p + 0.5, t)
    bad = p.astype(float)
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="pred contains 1 non-finite"):
        dice(bad, t)
    with pytest.raises(ValueError, match="target must be non-negative"):
        dice(p, t - 1)
    with pytest.raises(ValueError, match="pred holds class 3 but only 3 classes"):
        dice(p, t, num_classes=3)


def test_empty_batch_is_refused_by_name():
    """Regression: a batch of 0 cases crashed in torch's reshape ("cannot reshape tensor of 0 elements")."""
    z = torch.zeros(0, 4, 4, dtype=torch.long)
    for fn in (dice, iou):
        with pytest.raises(ValueError, match="pred is empty"):
            fn(z, z)
        with pytest.raises(ValueError, match="pred is empty"):
            fn(np.zeros((0, 2, 3), int), np.zeros((0, 2, 3), int), num_classes=2)
    with pytest.raises(ValueError, match="V > 0 voxels"):
        dice(np.zeros((2, 0), int), np.zeros((2, 0), int))


@pytest.mark.parametrize("bad", ["3", [3], {}])
def test_num_classes_of_another_type_is_a_type_error_naming_it(bad):
    """Regression: ``num_classes="3"`` failed inside the label check ("'>=' not supported between ... 'str'")."""
    p, t = hostile_pair(0)
    with pytest.raises(TypeError, match="num_classes"):
        dice(p, t, num_classes=bad)
    with pytest.raises(TypeError, match="num_classes"):
        class_counts(p.reshape(3, -1), num_classes=bad)


@pytest.mark.parametrize("bad", [2.5, float("nan"), float("inf"), 1, 0, -3, True])
def test_num_classes_out_of_range_is_a_value_error_naming_it(bad):
    p, t = hostile_pair(0)
    with pytest.raises(ValueError, match="num_classes must be an integer >= 2"):
        overlap_counts(p.reshape(3, -1), t.reshape(3, -1), num_classes=bad)


def test_num_classes_may_be_a_numpy_integer_or_an_integral_float():
    p, t = hostile_pair(0)
    base = dice(p, t, num_classes=4)
    np.testing.assert_array_equal(dice(p, t, num_classes=np.int64(4)), base)
    np.testing.assert_array_equal(dice(p, t, num_classes=4.0), base)


@pytest.mark.parametrize("bad", [-1, 1.5, float("nan"), float("inf"), True, "2"])
def test_label_gram_refuses_a_label_that_is_no_class(bad):
    """Regression: ``label=-1`` gave an all-zero Gram matrix (every mask 'empty'), NaN a bare int() error."""
    with pytest.raises(ValueError, match="label must be a class index"):
        label_gram(np.array([[0, 1, 2], [1, 1, 0]]), bad)


def test_gram_matrices_match_brute_force_with_empty_masks():
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 3, (6, 40))
    labels[2] = 0  # no foreground at all
    labels[4] = labels[3]  # identical maps
    for label in (1, 2, "foreground"):
        masks = labels > 0 if label == "foreground" else labels == label
        g = label_gram(labels, label, block=7).numpy()
        ref = masks.astype(np.int64) @ masks.T.astype(np.int64)
        np.testing.assert_array_equal(g, ref)
        np.testing.assert_array_equal(mask_gram(masks, block=3).numpy(), ref)
        np.testing.assert_array_equal(mask_gram(masks.astype(np.float32)).numpy(), ref)
        d, j = dice_matrix(g).numpy(), iou_matrix(g).numpy()
        for a in range(6):
            for b in range(6):
                x, y = set(np.flatnonzero(masks[a])), set(np.flatnonzero(masks[b]))
                if not x and not y:
                    assert d[a, b] == 1.0 and j[a, b] == 1.0
                else:
                    assert d[a, b] == pytest.approx(2 * len(x & y) / (len(x) + len(y)), abs=1e-15)
                    assert j[a, b] == pytest.approx(len(x & y) / len(x | y), abs=1e-15)


def test_mask_gram_refuses_non_binary_masks():
    with pytest.raises(ValueError, match="masks must hold only 0 and 1"):
        mask_gram(np.array([[0.0, 0.5, 1.0]]))
    with pytest.raises(ValueError, match="masks must hold only 0 and 1"):
        mask_gram(np.array([[0.0, np.nan, 1.0]]))


@pytest.mark.parametrize("fn", [dice_from_counts, iou_from_counts])
@pytest.mark.parametrize("counts, match", [
    (([5], [2], [2]), "intersection exceeds the smaller"),
    (([3], [2], [9]), "intersection exceeds the smaller"),
    (([-1], [0], [2]), "intersection must be non-negative"),
    (([0], [-1], [2]), "size_a must be non-negative"),
    (([0], [1], [-2]), "size_b must be non-negative"),
    (([np.nan], [1], [1]), "intersection must be finite"),
    (([1], [np.inf], [1]), "size_a must be finite"),
    (([1, 2], [3, 3, 3], [3]), "must broadcast"),
])
def test_impossible_counts_are_refused(fn, counts, match):
    """Regression: ``dice_from_counts(5, 2, 2)`` gave 2.5 and a negative intersection a negative Dice, silently."""
    with pytest.raises(ValueError, match=match):
        fn(*counts)


def test_counts_at_their_limits_and_soft_counts_are_accepted():
    np.testing.assert_array_equal(dice_from_counts([2, 0, 0], [2, 0, 3], [2, 0, 0]).numpy(), [1.0, 1.0, 0.0])
    np.testing.assert_allclose(dice_from_counts([1.5], [2.0], [1.5]).numpy(), [3 / 3.5])
    # expected counts rounded a hair above the smaller size (sum of products vs sum of probabilities)
    assert float(iou_from_counts([1.0 + 1e-12], [1.0], [4.0])) == pytest.approx(1 / 4)
    with pytest.raises(ValueError, match="intersection exceeds"):
        dice_matrix(np.array([[2.0, 3.0], [3.0, 2.0]]))  # no Gram matrix of masks


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("dtype, counts", [
    ("int32", (1_500_000_000, 1_600_000_000, 1_700_000_000)),  # a mask of 1.6e9 voxels: 2 |A & B| wraps
    ("uint8", (100, 200, 250)),
    ("int16", (20000, 30000, 30000)),
])
def test_narrow_integer_counts_do_not_wrap(lib, dtype, counts):
    """Regression: ``2 |A & B|`` and ``|A| + |B|`` were formed in the counts' own dtype, so int32 counts of a large
    volume gave a Dice of 1.30 and uint8 / int16 counts Dice and IoU above 1, silently. Checked against Python's
    unbounded integers."""
    inter, a, b = counts
    arrays = [np.array([v], dtype=dtype) for v in counts]
    if lib == "torch":
        arrays = [torch.from_numpy(x) for x in arrays]
    assert float(dice_from_counts(*arrays)) == pytest.approx(2 * inter / (a + b), rel=1e-15)
    assert float(iou_from_counts(*arrays)) == pytest.approx(inter / (a + b - inter), rel=1e-15)


def test_float32_soft_counts_are_summed_in_float64():
    """Soft counts in float32: their sums in float64, as the module docstring states for every ratio."""
    inter, a, b = (np.array([v], np.float32) for v in (0.5, 16777216.0, 3.0))
    want = 2 * 0.5 / (16777216.0 + 3.0)  # the float32 sum 2**24 + 3 rounds to 2**24 + 4
    assert float(dice_from_counts(inter, a, b)) == want


def test_a_label_beyond_2_to_the_24_without_num_classes_is_refused_up_front():
    """One label 2**33 (a uint64 id map) with ``num_classes=None``: the output has a column per class up to it, and
    torch's allocation error (64 GiB) came back. Now a ValueError naming the map, before anything is allocated; the
    largest label that fits (2**24 - 1) still gives its column, exactly counted."""
    pred = torch.zeros(1, 4, dtype=torch.long)
    huge = pred.clone()
    huge[0, 1] = 2**33
    for fn, args, name in ((dice, (pred, huge), "target"), (iou, (huge, pred), "pred"),
                           (overlap_counts, (pred, huge), "target"), (class_counts, (huge,), "labels")):
        with pytest.raises(ValueError, match=rf"^{name} holds label 8589934592: .* 2\*\*24 = 16777216; relabel"):
            fn(*args)
    with pytest.raises(ValueError, match=r"^num_classes is 8589934593: .*more than 2\*\*24"):
        dice(pred, pred, num_classes=2**33 + 1)
    top = pred.clone()
    top[0, 2] = (1 << 24) - 1
    counts = class_counts(top)
    assert counts.shape == (1, 1 << 24) and int(counts[0, -1]) == 1 and int(counts[0, 0]) == 3
    with pytest.raises(ValueError, match=r"^labels holds label 16777216"):
        class_counts(top + 1)


def test_gram_counts_exact_under_autocast():
    """The Gram products are float32 whatever the caller's autocast (a MONAI validation loop under
    ``torch.autocast``): CPU autocast ran them in bfloat16, and 49906 voxels came back as 49920. Found by hostile
    testing (precision review)."""
    from monai_unc.metrics.ambiguity import ged
    from monai_unc.metrics.overlap import label_gram, mask_gram

    gen = torch.Generator().manual_seed(0)
    masks = torch.rand(3, 100_000, generator=gen) < 0.5
    exact = (masks[:, None, :] & masks[None, :, :]).sum(-1).double()
    labels = torch.randint(0, 3, (4, 50_000), generator=gen)
    exact_labels = ((labels[:, None] == 2) & (labels[None] == 2)).sum(-1).double()
    raters = torch.randint(0, 2, (2, 40, 40, 40), generator=gen)
    samples = torch.randint(0, 2, (3, 40, 40, 40), generator=gen)
    plain = ged(raters, samples)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        gram = mask_gram(masks)
        gram_labels = label_gram(labels, 2)
        autocast = ged(raters, samples)
    assert torch.equal(gram, exact)
    assert torch.equal(gram_labels, exact_labels)
    assert autocast == plain


@pytest.mark.parametrize("call, name", [
    (lambda p, t: dice(p, t, include_background="False"), "include_background"),
    (lambda p, t: iou(p, t, include_background=0), "include_background"),
    (lambda p, t: overlap_counts(p, t, foreground="no"), "foreground"),
    (lambda p, t: overlap_counts(p, t, validate="no"), "validate"),
    (lambda p, t: class_counts(p, validate="False"), "validate"),
])
def test_flags_given_as_text_or_numbers_are_refused(call, name):
    """Regression: ``include_background="False"`` (a value read from a text config) is truthy and added the background
    column, so that every class was read one column off; ``foreground="no"`` appended the foreground column. A
    ``TypeError`` naming the flag now, as for the package's other flags; real booleans (numpy's too) still work."""
    p, t = torch.tensor([[0, 1, 1, 0]]), torch.tensor([[0, 1, 0, 0]])
    with pytest.raises(TypeError, match=rf"{name} must be True or False"):
        call(p, t)
    assert dice(p, t, include_background=np.bool_(False)).shape == (1, 1)
    assert overlap_counts(p, t, foreground=np.bool_(True), validate=True).intersection.shape == (1, 3)


@pytest.mark.parametrize("dtype, label, holder", [
    (torch.uint8, 256, 0),  # 256 wrapped to 0: the background was counted as class 256
    (torch.uint8, 300, 44),  # 300 wrapped to 44
    (torch.int8, 200, -56),
    (torch.float16, 2049, 2048),  # 2049 rounded to the float16 2048
    (torch.bool, 2, 1),
    (torch.int64, 2**70, 0),  # an OverflowError naming no argument
])
def test_label_gram_of_a_class_the_maps_dtype_cannot_hold_is_empty(dtype, label, holder):
    """Regression: ``label_gram(uint8 maps, 256)`` compared the maps with 256 as a uint8, i.e. 0, and returned the
    Gram matrix of the *background* (300 that of label 44; a float16 map's 2048 counted as class 2049): a class that
    the maps' dtype cannot hold is in no voxel, as :func:`monai_unc.regions.label_to_regions` has it. Checked against
    the masks of the maps as int64 (or float64) values, and with a part of another dtype beside them."""
    maps = torch.tensor([[0, 1, holder, holder], [holder, 0, 0, 1]]).to(dtype)
    got = label_gram(maps, label)
    assert torch.equal(got, torch.zeros(2, 2, dtype=torch.float64))
    wide = torch.tensor([[label, 0, 0, 0]], dtype=torch.float64 if label > 2**62 else torch.int64)
    got = label_gram([maps, wide], label)
    want = torch.zeros(3, 3, dtype=torch.float64)
    want[2, 2] = 1.0
    assert torch.equal(got, want)


@pytest.mark.parametrize("fn", [dice_from_counts, iou_from_counts])
@pytest.mark.parametrize("counts", [(1e-9, 1e-12, 1e-12), (5e-10, 0.0, 1.0), (0.3 + 5e-10, 0.3, 0.6)])
def test_soft_counts_below_one_are_checked_relative_to_their_size(fn, counts):
    """Regression: the tolerance for expected counts, documented as a relative 1e-9 of the smaller size, was an
    absolute 1e-9 for sizes below 1: ``dice_from_counts(1e-9, 1e-12, 1e-12)`` gave a Dice of 1000 and
    ``iou_from_counts`` an IoU of -1.002, and an intersection with an empty mask was accepted."""
    with pytest.raises(ValueError, match="intersection exceeds the smaller"):
        fn(*counts)
    inter, a, b = counts[1] * (1 + 1e-10), counts[1], counts[2]  # rounding within the tolerance: accepted
    assert 0.0 <= float(fn(inter, a, b)) <= 1.0 + 1e-9


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
def test_label_gram_of_the_foreground_of_wide_unsigned_maps(dtype):
    """Regression: ``label_gram(maps, "foreground")`` of uint16 maps (a common NIfTI label dtype) raised torch's
    ``NotImplementedError: "gt_cpu" not implemented for 'UInt16'``; the classes of the same maps worked."""
    labels = np.array([[0, 1, 2, 2, 0], [1, 1, 2, 0, 0], [0, 0, 0, 0, 0]])
    want = label_gram(labels, "foreground")
    assert torch.equal(label_gram(labels.astype(dtype), "foreground"), want)
    assert torch.equal(label_gram([labels[:1].astype(dtype), labels[1:]], "foreground"), want)


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("num_classes", [None, 3, 500])  # 500: the per-map counts, without the C x C table
def test_counts_of_wide_unsigned_maps_without_validation(dtype, num_classes):
    """Regression: ``overlap_counts(..., validate=False)`` and ``class_counts(..., validate=False)`` of uint16 maps
    raised torch's ``NotImplementedError: "max_all" not implemented for 'UInt16'`` (``"gt_cpu"`` with the foreground
    column), where ``validate=True`` (which converts the labels) worked."""
    p = np.array([[0, 1, 2, 2, 1, 0], [2, 2, 0, 0, 1, 1]])
    t = np.array([[0, 1, 1, 2, 2, 0], [2, 0, 0, 1, 1, 1]])
    want = overlap_counts(p, t, num_classes, foreground=True)
    got = overlap_counts(p.astype(dtype), t.astype(dtype), num_classes, foreground=True, validate=False)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(class_counts(p.astype(dtype), num_classes, validate=False),
                                  class_counts(p, num_classes))


@pytest.mark.parametrize("bad", [np.True_, np.False_, torch.tensor(True), np.array(True)])
def test_numpy_and_torch_booleans_are_no_empty_score(bad):
    """Regression: ``empty_score=True`` raises ``TypeError`` (documented), but numpy's ``np.True_`` and a 0-d bool
    tensor were read as 1.0 (``np.False_`` as 0.0); numpy and torch numbers are still accepted."""
    p, t = np.array([[0, 1, 0]]), np.array([[0, 1, 1]])
    with pytest.raises(TypeError, match="empty_score"):
        dice(p, t, num_classes=3, empty_score=bad)
    assert dice(p, t, num_classes=3, empty_score=np.float32(0.5))[0, 1] == 0.5
    assert dice(p, t, num_classes=3, empty_score=torch.tensor(0.5))[0, 1] == 0.5


@pytest.mark.parametrize("fn", [dice, iou])
def test_one_hot_maps_are_refused_not_read_as_label_maps(fn):
    """A MONAI-style one-hot map ``(B, C, H, W, D)`` (what ``compute_dice`` takes) was read as a 4D label map of 0 / 1
    labels: one column, the overlap of the union of every channel, background included (Dice 0.965 instead of the
    per-class 0.667 and 0.571). A 5D map of 0 and 1 with C >= 2 channels is refused, naming the argument and saying
    to pass its argmax; 2D one-hot maps cannot be told from binary 3D label maps and are not refused (below)."""
    target = torch.zeros(1, 16, 16, 8, dtype=torch.long)
    target[0, 4:10, 4:10, 2:6] = 1
    target[0, 10:12, 4:10, 2:6] = 2
    pred = target.clone()
    pred[0, 4:10, 4:10, 2:4] = 2

    def oh(x):
        return torch.nn.functional.one_hot(x, 3).movedim(-1, 1)

    for a, b, name in ((oh(pred), oh(target), "pred"), (pred, oh(target), "target"), (oh(pred), target, "pred"),
                       (oh(pred).bool(), oh(target).bool(), "pred"), (oh(pred).float(), target, "pred")):
        with pytest.raises(ValueError, match=f"{name} .* one-hot .*argmax"):
            fn(a, b)
    # the argmax of the one-hot maps is the per-class result MONAI gives for the one-hot maps
    ref = (compute_dice if fn is dice else compute_iou)(oh(pred), oh(target), include_background=False)
    np.testing.assert_allclose(fn(oh(pred).argmax(1), oh(target).argmax(1)).numpy(), ref.numpy(), atol=1e-6)
    # label maps of every documented layout are still read as such, binary ones too
    np.testing.assert_array_equal(fn(pred[:, None], target[:, None]), fn(pred, target))
    np.testing.assert_array_equal(fn(pred > 0, target > 0), fn((pred > 0)[:, None], (target > 0)[:, None]))


@pytest.mark.parametrize("fn", [dice, iou])
def test_label_maps_that_look_like_2d_one_hot_maps_are_read_as_label_maps(fn):
    """Found by review: a test of one 1 along axis 1 refused valid label maps as one-hot, e.g. a one-pixel boundary
    crossing every column of a 2D image (a retinal layer in an OCT scan); label maps of 4 spatial axes with more than
    two labels were refused too. Both are read as label maps again, equal to numpy's counts."""
    h, w = 32, 48
    cols = np.arange(w)
    row_t = (16 + 4 * np.sin(cols / 8)).astype(int)
    row_p = row_t.copy()
    row_p[::3] += 1
    t = np.zeros((1, h, w), np.int64)
    t[0, row_t, cols] = 1
    p = np.zeros((1, h, w), np.int64)
    p[0, row_p, cols] = 1
    inter, size = int((t & p).sum()), int(t.sum() + p.sum())
    want = 2 * inter / size if fn is dice else inter / (size - inter)
    np.testing.assert_allclose(fn(torch.from_numpy(p), torch.from_numpy(t)).numpy(), [[want]], rtol=1e-12)
    g = np.random.default_rng(0)
    t4, p4 = (torch.from_numpy(g.integers(0, 3, (1, 4, 5, 6, 3))) for _ in range(2))  # (B, X, Y, Z, T), 3 labels
    got = fn(p4, t4).numpy()
    for c in (1, 2):
        i, s_p, s_t = int(((p4 == c) & (t4 == c)).sum()), int((p4 == c).sum()), int((t4 == c).sum())
        np.testing.assert_allclose(got[0, c - 1], 2 * i / (s_p + s_t) if fn is dice else i / (s_p + s_t - i))
    # binary label maps of 4 spatial axes: given with their channel axis
    b4 = (t4 > 0).long()
    assert np.isfinite(fn(b4[:, None], b4[:, None]).numpy()).all()
