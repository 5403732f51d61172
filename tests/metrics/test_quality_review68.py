"""One number for one quantity: the API's expected Dice is the one ``evaluate`` and ``triage`` compute (review 68).

``monai_unc.metrics.quality.expected_dice`` (and ``quality_estimates``, which returns it) scored a class or region that
the segmentation does not hold 0 as soon as the model gave it any probability, while ``evaluate`` / ``triage``
(``case_expected_dice``) scored it ``prod_x (1 - p(x))``, the chance that the reference holds none of it: two
"expected Dice" numbers for the same case. The formula now lives in one function of ``metrics.quality``; the former
0 is reached only through the estimate kind of a referral rule certified before (``case_expected_dice``'s
``estimate``). The exact expectation of the Dice, by enumerating every reference of a tiny case (each voxel's label
drawn from ``p`` on its own), shows what each estimate approximates: the product is exact for a class the
segmentation does not hold (the former 0 is off by that product), the soft Dice of a held class is the ratio of the
expected overlap and volumes.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch

from monai_unc.evaluation import EvaluationConfig, evaluate_case
from monai_unc.evaluation.rows import case_expected_dice, class_dice
from monai_unc.io import LoadedCase
from monai_unc.keys import LEGACY_REGION_ESTIMATE
from monai_unc.metrics.quality import expected_dice, quality_estimates


def _softmax(rng, c, spatial, scale=3.0):
    z = scale * rng.standard_normal((c, *spatial))
    e = np.exp(z - z.max(axis=0))
    return (e / e.sum(axis=0)).astype(np.float32)


def _class_missing(rng, c, spatial):
    """Softmax probabilities whose last class is never the argmax but has some probability (about 5 %)."""
    p = _softmax(rng, c, spatial).astype(np.float64)
    p[-1] = 0.1 * p[:-1].max(axis=0)
    p /= p.sum(axis=0, keepdims=True)
    p = p.astype(np.float32)
    assert not (p.argmax(axis=0) == c - 1).any() and p[-1].min() > 0
    return p


def _regions_missing(rng, spatial):
    """Two sigmoid regions: region 0 segmented, region 1 below 0.5 everywhere with some probability."""
    z = 3.0 * rng.standard_normal((2, *spatial))
    p = 1.0 / (1.0 + np.exp(-z))
    p[1] = 0.02 + 0.4 * p[1]
    p = p.astype(np.float32)
    assert (p[0] > 0.5).any() and not (p[1] > 0.5).any()
    return p


@pytest.mark.parametrize("spatial", [(6, 5), (4, 3, 5)], ids=["2d", "3d"])
@pytest.mark.parametrize("c", [2, 3])
def test_the_api_gives_evaluates_number_for_a_class_the_segmentation_does_not_hold(c, spatial):
    p = _class_missing(np.random.default_rng(c + len(spatial)), c, spatial)
    api = quality_estimates({"pred": torch.from_numpy(p[None])})["expected_dice"]
    cli = case_expected_dice(p, False)  # evaluate's and triage's expected_dice_<class>
    want = float(np.exp(np.log1p(-p[-1].astype(np.float64)).sum()))
    assert 0.0 < want < 1.0
    assert float(api.per_class[0, -1]) == pytest.approx(want, rel=1e-9)
    np.testing.assert_allclose(np.asarray(api.per_class), cli.per_class, rtol=1e-12, atol=0)
    # evaluate's expected_dice column of the case, in process: the mean over the classes of the API's per_class
    seg = p.argmax(axis=0).astype(np.int64)
    case = LoadedCase("c", seg.copy(), seg, p, {}, np.eye(4), (1.0,) * len(spatial), None)
    row = evaluate_case(case, EvaluationConfig(spatial=False)).row
    assert row["expected_dice"] == pytest.approx(float(api.per_class.mean()), rel=1e-12)
    if c == 2:  # one foreground class: the merged foreground is the same mask, the same number (``1 - p_0``
        # against ``p_1``: the float32 probabilities sum to 1 within rounding)
        assert float(api.foreground[0]) == pytest.approx(row["expected_dice"], rel=1e-5)


@pytest.mark.parametrize("spatial", [(7, 5), (4, 3, 5)], ids=["2d", "3d"])
def test_the_api_gives_evaluates_number_for_a_region_the_segmentation_does_not_hold(spatial):
    p = _regions_missing(np.random.default_rng(len(spatial)), spatial)
    api = quality_estimates({"pred": p[None]}, multilabel=True)["expected_dice"]
    cli = case_expected_dice(p, True)
    want = float(np.exp(np.log1p(-p[1].astype(np.float64)).sum()))
    assert 0.0 < want < 1.0 and float(api.per_class[0, 1]) == pytest.approx(want, rel=1e-9)
    np.testing.assert_allclose(api.per_class, cli.per_class, rtol=1e-12, atol=0)
    np.testing.assert_allclose(api.foreground, cli.foreground, rtol=1e-12, atol=0)  # evaluate's expected_dice
    # the former soft Dice (0) only through the estimate kind of a rule certified before
    assert case_expected_dice(p, True, LEGACY_REGION_ESTIMATE).per_class[0, 1] == 0.0


def test_the_former_zero_is_reached_only_through_a_rules_estimate_kind():
    p = _class_missing(np.random.default_rng(5), 3, (5, 4))
    old = case_expected_dice(p, False, "merged_foreground")
    assert old.per_class[0, -1] == 0.0
    new = expected_dice(p[None])
    assert float(new.per_class[0, -1]) > 0.0
    np.testing.assert_array_equal(old.per_class[0, :-1], new.per_class[0, :-1])  # held classes: the same soft Dice
    # an empty segmentation of the merged foreground: the former 0, now the chance that the reference has none
    q = np.zeros((2, 3, 3), np.float32)
    q[1] = 0.1
    q[0] = 0.9
    assert case_expected_dice(q, False, "merged_foreground").foreground[0] == 0.0
    assert float(expected_dice(q[None]).foreground[0]) == pytest.approx(0.9 ** 9, rel=1e-6)


@pytest.mark.parametrize("multilabel", [False, True])
def test_no_probability_anywhere_is_one(multilabel):
    if multilabel:
        p = np.zeros((2, 3, 4), np.float32)
        p[0, 0] = 0.9
        q = quality_estimates({"pred": p[None]}, multilabel=True)["expected_dice"]
    else:
        p = np.zeros((3, 3, 4), np.float32)
        p[0], p[1, 0], p[0, 0] = 1.0, 0.9, 0.1
        q = expected_dice(p[None])
    assert float(q.per_class[0, 1]) == 1.0
    np.testing.assert_array_equal(np.asarray(q.per_class), case_expected_dice(p, multilabel).per_class)


@pytest.mark.parametrize("multilabel", [False, True])
def test_a_probability_of_one_half_exactly(multilabel):
    """``p = 0.5`` everywhere: no segmentation (a tie goes to the background, ``p > 0.5`` for a region), so the
    estimate is the chance that the reference holds none of the 12 voxels, ``0.5 ** 12``, in the API as in evaluate."""
    if multilabel:
        p = np.full((1, 3, 4), 0.5, np.float32)
        q = quality_estimates({"pred": p[None]}, multilabel=True)["expected_dice"]
    else:
        p = np.full((2, 3, 4), 0.5, np.float32)
        q = quality_estimates({"pred": p[None]})["expected_dice"]
    assert float(q.per_class[0, 0]) == pytest.approx(0.5 ** 12, rel=1e-12)
    assert float(q.foreground[0]) == pytest.approx(0.5 ** 12, rel=1e-12)
    assert case_expected_dice(p, multilabel).per_class[0, 0] == float(q.per_class[0, 0])
    assert _exact_expected_dice(p, multilabel)[0] == pytest.approx(0.5 ** 12, rel=1e-12)


def test_nan_probabilities_give_nan_with_a_warning():
    p = _class_missing(np.random.default_rng(1), 3, (4, 4))
    p[1, 0, 0] = np.nan
    with pytest.warns(UserWarning, match="NaN"):
        q = expected_dice(p[None], validate=False)
    assert np.isnan(q.foreground).all() and np.isnan(q.per_class).all()
    with pytest.warns(UserWarning, match="NaN"):
        c = case_expected_dice(p, False)
    assert np.isnan(c.foreground).all() and np.isnan(c.per_class).all()
    with pytest.raises(ValueError, match="probs"):  # validated: refused, as before
        expected_dice(p[None])
    good = _class_missing(np.random.default_rng(1), 3, (4, 4))
    with pytest.warns(UserWarning, match="1 case"):  # only the case with NaN is undefined
        q = expected_dice(np.stack([good, p]), validate=False)
    assert np.isfinite(q.per_class[0]).all() and np.isnan(q.per_class[1]).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a case without NaN: no warning
        expected_dice(good[None], validate=False)


def _exact_expected_dice(p: np.ndarray, multilabel: bool) -> list[float]:
    """``E[Dice_k(S, Y)]`` per foreground class / region by enumerating every reference ``Y`` (each voxel's label drawn
    from ``p`` on its own; <= 12 voxels), ``S`` the segmentation, a class absent from both scoring 1."""
    if multilabel:  # each region a binary task
        out = []
        for r in range(p.shape[0]):
            two = np.stack([1.0 - p[r].astype(np.float64), p[r].astype(np.float64)])
            out.append(_exact_expected_dice(two, False)[0])
        return out
    c = p.shape[0]
    flat = p.reshape(c, -1).astype(np.float64)
    n = flat.shape[1]
    assert n <= 12
    seg = np.array([int(np.argmax(flat[:, i])) for i in range(n)])  # the first maximum: the lower class on a tie
    refs = np.array(list(itertools.product(range(c), repeat=n)))  # (c ** n, n): every reference
    prob = np.prod(flat[refs, np.arange(n)], axis=1)
    out = []
    for k in range(1, c):
        inter = ((refs == k) & (seg == k)).sum(axis=1)
        size = (refs == k).sum(axis=1) + (seg == k).sum()
        dice = np.where(size == 0, 1.0, 2.0 * inter / np.maximum(size, 1))  # absent from both: 1, as class_dice
        out.append(float((prob * dice).sum()))
    # the enumeration scores as class_dice does (float32), checked on a few references
    for y in refs[:: max(1, len(refs) // 5)]:
        want = class_dice(seg, y, c)
        for k in range(1, c):
            both = (y == k).sum() + (seg == k).sum()
            got = 1.0 if both == 0 else 2.0 * ((y == k) & (seg == k)).sum() / both
            assert got == pytest.approx(float(want[k - 1]), rel=1e-6)
    return out


@pytest.mark.parametrize("multilabel", [False, True])
def test_against_the_exact_expectation_by_enumeration(multilabel):
    """A class / region the segmentation does not hold: the product is the exact expected Dice (the former 0 is off by
    it); a held one: the soft Dice is the ratio of the expectations, within a few hundredths here."""
    rng = np.random.default_rng(7)
    if multilabel:
        p = _regions_missing(rng, (3, 4))  # 12 voxels, 2 ** 12 references per region
        api = quality_estimates({"pred": p[None]}, multilabel=True)["expected_dice"].per_class[0]
        old = case_expected_dice(p, True, LEGACY_REGION_ESTIMATE).per_class[0]
    else:
        p = _class_missing(rng, 3, (2, 4))  # 8 voxels, 3 ** 8 references
        api = np.asarray(expected_dice(p[None]).per_class[0])
        old = case_expected_dice(p, False, "merged_foreground").per_class[0]
    exact = _exact_expected_dice(p, multilabel)
    # rel 1e-6: the enumeration multiplies the float32 p of the other classes, whose sum is 1 - p within rounding
    assert api[-1] == pytest.approx(exact[-1], rel=1e-6) and exact[-1] > 0.05
    assert old[-1] == 0.0
    assert abs(api[0] - exact[0]) < 0.05 and api[0] != pytest.approx(exact[0], rel=1e-6)  # an approximation


def test_the_torch_path_gives_the_same_numbers():
    """The sums of every device (the torch path, taken here by float16 and by an input that requires grad) and the
    CPU's NumPy path agree on the product for a class the segmentation does not hold, and on the held classes."""
    p = torch.from_numpy(_class_missing(np.random.default_rng(11), 3, (5, 6)))[None]
    cpu = expected_dice(p).per_class
    half = p.to(torch.float16)
    want = float(torch.exp(torch.log1p(-half[0, 2].double()).sum()))
    assert float(expected_dice(half).per_class[0, 1]) == pytest.approx(want, rel=1e-12)
    grad = expected_dice(p.clone().requires_grad_(True)).per_class
    torch.testing.assert_close(grad.detach(), cpu, rtol=1e-12, atol=1e-12)
    assert 0.0 < float(cpu[0, 1]) < 1.0
