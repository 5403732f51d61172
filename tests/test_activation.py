"""``monai_unc.activation`` against references computed another way.

Every public function and method of the softmax (:data:`CATEGORICAL`) and sigmoid (:data:`BERNOULLI`) activations
is compared with an independent reference: brute-force loops over voxels, ``scipy.special`` (``softmax``,
``log_softmax``, ``expit``), sklearn's ``log_loss``, autograd of an independent torch formula, finite
differences and ``torch.autograd.gradcheck`` of the analytic temperature gradients, and a hand-worked case of 2
classes x 2 voxels. Then the edge cases (ties, one voxel, all correct, one region, 2D and 3D, ``t = 1``), bad
input (each error names the argument) and hypothesis properties.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import special
from sklearn.metrics import log_loss

from monai_unc.activation import (
    ACTIVATIONS,
    BERNOULLI,
    CATEGORICAL,
    Activation,
    Bernoulli,
    Categorical,
    TaskView,
    binary_probabilities,
    get_activation,
)

LN3 = math.log(3.0)


def rng_logits(shape, seed=0, scale=2.0, dtype=torch.float64):
    return torch.from_numpy(np.random.default_rng(seed).normal(0, scale, shape)).to(dtype)


def brute_confidence(p: np.ndarray):
    """Categorical confidence by a loop: the largest class probability, the first class holding it."""
    conf, pred = np.empty(p.shape[1]), np.empty(p.shape[1], np.int64)
    for i in range(p.shape[1]):
        best = 0
        for c in range(1, p.shape[0]):
            if p[c, i] > p[best, i]:
                best = c
        conf[i], pred[i] = p[best, i], best
    return conf, pred


def categorical_nll_autograd(z: torch.Tensor, y: torch.Tensor, t: torch.Tensor):
    """Summed NLL of ``z (C, n)`` at temperature ``t (C,)`` and its gradient, by F.cross_entropy and autograd."""
    t = t.detach().clone().requires_grad_(True)
    loss = F.cross_entropy((z / t[:, None]).T, y, reduction="sum")
    loss.backward()
    return float(loss.detach()), t.grad


def bernoulli_nll_autograd(z: torch.Tensor, y: torch.Tensor, t: float):
    t = torch.tensor(t, dtype=z.dtype, requires_grad=True)
    loss = F.binary_cross_entropy_with_logits(z / t, y.to(z.dtype), reduction="sum")
    loss.backward()
    return float(loss.detach()), t.grad.reshape(1)


# ------------------------------------------------------------------------------------------- names and objects


def test_get_activation_and_instances():
    assert get_activation("softmax") is CATEGORICAL and get_activation("sigmoid") is BERNOULLI
    assert get_activation(BERNOULLI) is BERNOULLI
    assert ACTIVATIONS == {"softmax": CATEGORICAL, "sigmoid": BERNOULLI}
    assert isinstance(CATEGORICAL, Categorical) and isinstance(BERNOULLI, Bernoulli)
    assert isinstance(CATEGORICAL, Activation)
    assert (CATEGORICAL.name, CATEGORICAL.multilabel, CATEGORICAL.min_channels, CATEGORICAL.channel_word) == (
        "softmax", False, 2, "classes")
    assert (BERNOULLI.name, BERNOULLI.multilabel, BERNOULLI.min_channels, BERNOULLI.channel_word) == (
        "sigmoid", True, 1, "regions")
    assert repr(CATEGORICAL) == "Categorical()" and repr(BERNOULLI) == "Bernoulli()"


@pytest.mark.parametrize("bad,exc", [("relu", ValueError), ("Softmax", ValueError), (None, TypeError),
                                     (3, TypeError), (["softmax"], TypeError)])
def test_get_activation_bad_name(bad, exc):
    with pytest.raises(exc, match="activation"):
        get_activation(bad)


@pytest.mark.parametrize("channels", [1, 2, 3, 7])
def test_num_tasks_and_grad_size(channels):
    assert BERNOULLI.num_tasks(channels) == channels and BERNOULLI.grad_size(channels) == 1
    if channels >= 2:
        assert CATEGORICAL.num_tasks(channels) == 1 and CATEGORICAL.grad_size(channels) == channels


@pytest.mark.parametrize("act,channels", [(CATEGORICAL, 1), (CATEGORICAL, 0), (BERNOULLI, 0), (BERNOULLI, 2.0),
                                          (CATEGORICAL, True), (BERNOULLI, "3")])
def test_num_tasks_bad_channels(act, channels):
    with pytest.raises(ValueError, match="channels"):
        act.num_tasks(channels)
    with pytest.raises(ValueError, match="channels"):
        act.grad_size(channels)


# ----------------------------------------------------------------------------------------------- probabilities


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 4, 3, 2, 5), (1, 2, 1)])
@pytest.mark.parametrize("temperature", [None, 1.0, 0.5, 2.5])
def test_probabilities_match_scipy(shape, temperature):
    z = rng_logits(shape, seed=len(shape))
    zn = z.numpy() if temperature is None else z.numpy() / temperature
    np.testing.assert_allclose(CATEGORICAL.probabilities(z, temperature).numpy(), special.softmax(zn, axis=1),
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(BERNOULLI.probabilities(z, temperature).numpy(), special.expit(zn),
                               rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 3, 2, 2), (1, 3, 2, 2, 2)])
def test_probabilities_vector_temperature_by_loops(shape):
    z = rng_logits(shape, seed=1)
    t = np.array([0.5, 1.0, 3.0])
    p_cat = CATEGORICAL.probabilities(z, torch.from_numpy(t)).numpy()
    p_ber = BERNOULLI.probabilities(z, t.tolist()).numpy()
    zn = z.numpy()
    for b in range(shape[0]):
        for idx in itertools.product(*[range(s) for s in shape[2:]]):
            a = np.array([zn[(b, c, *idx)] / t[c] for c in range(3)])
            e = np.exp(a - a.max())
            for c in range(3):
                assert p_cat[(b, c, *idx)] == pytest.approx(e[c] / e.sum(), rel=1e-12)
                assert p_ber[(b, c, *idx)] == pytest.approx(1 / (1 + math.exp(-a[c])), rel=1e-12)


def test_probabilities_hand_worked_2x2():
    z = torch.tensor([[[LN3, 0.0], [0.0, 0.0]]], dtype=torch.float64)  # (B=1, C=2, n=2)
    np.testing.assert_allclose(CATEGORICAL.probabilities(z)[0].numpy(), [[0.75, 0.5], [0.25, 0.5]], rtol=1e-14)
    np.testing.assert_allclose(BERNOULLI.probabilities(z)[0].numpy(), [[0.75, 0.5], [0.5, 0.5]], rtol=1e-14)
    # t = 2 halves the logits: softmax of (ln 3 / 2, 0) = (sqrt 3, 1) / (sqrt 3 + 1)
    s3 = math.sqrt(3.0)
    assert float(CATEGORICAL.probabilities(z, 2.0)[0, 0, 0]) == pytest.approx(s3 / (s3 + 1), rel=1e-14)
    assert float(BERNOULLI.probabilities(z, 2.0)[0, 0, 0]) == pytest.approx(s3 / (s3 + 1), rel=1e-14)


@pytest.mark.parametrize("act", [CATEGORICAL, BERNOULLI])
def test_temperature_one_is_identity(act):
    z = rng_logits((2, 3, 4, 4), seed=2, dtype=torch.float32)
    base = act.probabilities(z)
    assert base.dtype == torch.float32 and base.shape == z.shape
    for t in (1, 1.0, torch.tensor(1.0), torch.ones(1), torch.ones(3), [1.0, 1.0, 1.0]):
        assert torch.equal(act.probabilities(z, t), base)
    assert torch.equal(base, torch.softmax(z, 1) if act is CATEGORICAL else torch.sigmoid(z))


def test_probabilities_temperature_is_differentiable():
    z = rng_logits((1, 3, 4), seed=3)
    t = torch.tensor([0.7, 1.3, 2.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda tt: CATEGORICAL.probabilities(z, tt), (t,))
    assert torch.autograd.gradcheck(lambda tt: BERNOULLI.probabilities(z, tt), (t,))


# ----------------------------------------------------------------------------------------------- task split


@pytest.mark.parametrize("as_torch", [False, True])
def test_binary_probabilities_by_hand_and_axis(as_torch):
    p = np.array([[0.0, 0.25], [0.5, 1.0]])
    x = torch.from_numpy(p) if as_torch else p
    for axis in (0, 1, 2, -1, -3):
        out = binary_probabilities(x, axis)
        assert isinstance(out, torch.Tensor) == as_torch
        out = np.asarray(out)
        assert out.shape[axis] == 2 and out.ndim == 3
        np.testing.assert_array_equal(np.take(out, 0, axis=axis), 1 - p)
        np.testing.assert_array_equal(np.take(out, 1, axis=axis), p)
    assert binary_probabilities(np.array(0.3)).tolist() == [0.7, 0.3]  # a single voxel, 0-d


@pytest.mark.parametrize("as_torch", [False, True])
@pytest.mark.parametrize("shape,axis", [((2, 3, 4, 5), 1), ((3, 4, 5), 0), ((3, 4, 5, 2), 0), ((2, 1, 6), 1)])
def test_bernoulli_task_probabilities_and_targets_by_loops(as_torch, shape, axis):
    rng = np.random.default_rng(4)
    p = rng.random(shape)
    m = (rng.random(shape) < 0.5).astype(np.uint8)
    tasks = BERNOULLI.task_probabilities(torch.from_numpy(p) if as_torch else p, axis)
    targets = BERNOULLI.task_targets(torch.from_numpy(m) if as_torch else m, axis)
    assert len(tasks) == len(targets) == shape[axis]
    for r, (tp, tt) in enumerate(zip(tasks, targets)):
        tp, tt = np.asarray(tp), np.asarray(tt)
        assert tp.shape == shape[:axis] + (2,) + shape[axis + 1:]
        assert tt.dtype == np.int64 and tt.shape == shape[:axis] + shape[axis + 1:]
        for idx in itertools.product(*[range(s) for s in tt.shape]):
            full = idx[:axis] + (r,) + idx[axis:]
            assert tp[idx[:axis] + (1,) + idx[axis:]] == p[full]
            assert tp[idx[:axis] + (0,) + idx[axis:]] == 1 - p[full]
            assert tt[idx] == m[full]


@pytest.mark.parametrize("as_torch", [False, True])
def test_categorical_task_probabilities_and_targets_are_the_input(as_torch):
    p = special.softmax(np.random.default_rng(5).normal(size=(2, 3, 4)), axis=1)
    y = np.random.default_rng(5).integers(0, 3, (2, 4))
    x, t = (torch.from_numpy(p), torch.from_numpy(y)) if as_torch else (p, y)
    [tp] = CATEGORICAL.task_probabilities(x)
    [tt] = CATEGORICAL.task_targets(t)
    assert tp is x and tt is t
    assert CATEGORICAL.num_tasks(3) == len(CATEGORICAL.task_probabilities(x, axis=0)) == 1


@pytest.mark.parametrize("spatial", [(4, 5), (3, 4, 2)])
def test_categorical_split(spatial):
    rng = np.random.default_rng(6)
    probs = special.softmax(rng.normal(size=(3, *spatial)), axis=0)
    pred, target = probs.argmax(0), rng.integers(0, 3, spatial)
    maps = {"entropy": -(probs * np.log(probs)).sum(0)}
    sp = (0.5, 2.0, 1.5)[: len(spatial)]
    [view] = CATEGORICAL.split(pred, target, probs, maps, spacing=sp)
    assert view.name is None and view.num_classes == 3
    assert view.pred is pred and view.target is target and view.probs is probs
    assert view.maps == maps and view.maps is not maps
    assert view.spacing == sp and view.voxel_volume == pytest.approx(float(np.prod(sp)))
    # without probabilities: the classes from num_classes, else the largest label + 1
    assert CATEGORICAL.split(pred, target, num_classes=5)[0].num_classes == 5
    assert CATEGORICAL.split(np.zeros(spatial, int), np.full(spatial, 1))[0].num_classes == 2
    assert CATEGORICAL.split(pred, target)[0].probs is None and CATEGORICAL.split(pred, target)[0].voxel_volume == 1.0


@pytest.mark.parametrize("spatial", [(4, 5), (3, 4, 2)])
@pytest.mark.parametrize("n_regions", [1, 3])
def test_bernoulli_split_gives_one_binary_task_per_region(spatial, n_regions):
    rng = np.random.default_rng(7)
    probs = rng.random((n_regions, *spatial))
    pred, target = probs > 0.5, rng.random((n_regions, *spatial)) < 0.4
    maps = {"u": rng.random((n_regions, *spatial))}
    names = ["WT", "TC", "ET"][:n_regions]
    views = BERNOULLI.split(pred, target, probs, maps, names, spacing=[2.0] * len(spatial))
    assert [v.name for v in views] == names
    for r, v in enumerate(views):
        assert v.num_classes == 2 and v.pred.dtype == np.uint8 and v.target.dtype == np.uint8
        np.testing.assert_array_equal(v.pred, pred[r])
        np.testing.assert_array_equal(v.target, target[r])
        np.testing.assert_array_equal(v.probs, np.stack([1 - probs[r], probs[r]]))
        np.testing.assert_array_equal(v.maps["u"], maps["u"][r])
        assert v.voxel_volume == 2.0 ** len(spatial)
    default = BERNOULLI.split(pred, target)
    assert [v.name for v in default] == [str(r) for r in range(n_regions)]
    assert all(v.probs is None and v.maps == {} for v in default)


def test_taskview_fields():
    view = TaskView("WT", np.array([[0, 1], [1, 1]]), np.array([[0, 1], [0, 1]]), 2, spacing=(0.5, 4.0))
    assert view.voxel_volume == 2.0 and view.maps == {} and view.probs is None
    assert TaskView(None, np.zeros(3), np.zeros(3), 1).voxel_volume == 1.0
    assert TaskView(None, np.zeros((2, 2)), np.zeros((2, 2)), 2, spacing=3.0).spacing == (3.0, 3.0)


# ---------------------------------------------------------------------------------- confidence, correctness


def test_categorical_confidence_by_loops_with_ties():
    p = special.softmax(np.random.default_rng(8).normal(size=(4, 50)), axis=0)
    p[:, :5] = 0.25  # four-way ties: the first class wins
    p[:, 5] = [0.4, 0.1, 0.4, 0.1]  # a tie between classes 0 and 2
    p[:, 6] = [0.1, 0.4, 0.1, 0.4]
    conf, pred = CATEGORICAL.confidence(torch.from_numpy(p))
    ref_conf, ref_pred = brute_confidence(p)
    np.testing.assert_array_equal(conf.numpy(), ref_conf)
    np.testing.assert_array_equal(pred.numpy(), ref_pred)
    assert pred[:7].tolist() == [0, 0, 0, 0, 0, 0, 1]


def test_bernoulli_confidence_by_loops_with_the_tie_at_one_half():
    p = np.concatenate([np.random.default_rng(9).random(40), [0.0, 0.5, 1.0, np.nextafter(0.5, 1)]])
    conf, pred = BERNOULLI.confidence(torch.from_numpy(p))
    for i, v in enumerate(p):
        assert bool(pred[i]) == (v > 0.5)
        assert float(conf[i]) == (v if v > 0.5 else 1 - v)
    assert bool(pred[-3]) is False and float(conf[-3]) == 0.5  # p = 0.5: predicted 0, confidence 1/2


def test_confidence_single_voxel_and_dtype():
    conf, pred = CATEGORICAL.confidence(torch.tensor([[0.3], [0.7]], dtype=torch.float32))
    assert conf.tolist() == [pytest.approx(0.7)] and pred.tolist() == [1] and conf.dtype == torch.float32
    conf, pred = BERNOULLI.confidence(torch.tensor([0.2]))
    assert conf.tolist() == [pytest.approx(0.8)] and pred.tolist() == [False]


def test_correctness_by_loops():
    rng = np.random.default_rng(10)
    pred, target = rng.integers(0, 3, 30), rng.integers(0, 3, 30)
    c = CATEGORICAL.correctness(torch.from_numpy(pred), torch.from_numpy(target))
    assert c.dtype == torch.float64
    assert c.tolist() == [1.0 if a == b else 0.0 for a, b in zip(pred, target)]
    bpred, mask = rng.random(30) > 0.5, (rng.random(30) < 0.5).astype(np.float32)
    c = BERNOULLI.correctness(torch.from_numpy(bpred), torch.from_numpy(mask))
    assert c.dtype == torch.float64
    assert c.tolist() == [1.0 if bool(a) == bool(b) else 0.0 for a, b in zip(bpred, mask)]
    # all correct
    assert CATEGORICAL.correctness(torch.arange(4), torch.arange(4)).tolist() == [1.0] * 4
    assert BERNOULLI.correctness(torch.tensor([True, False]), torch.tensor([1, 0])).tolist() == [1.0, 1.0]


# ------------------------------------------------------------------------------------------ the batch pieces


def test_check_logits_refuses_probabilities_only():
    z = rng_logits((2, 3, 4, 4), seed=11)
    CATEGORICAL.check_logits(z)
    BERNOULLI.check_logits(z)
    with pytest.raises(ValueError, match="look like probabilities"):
        CATEGORICAL.check_logits(torch.softmax(z, 1))
    with pytest.raises(ValueError, match="look like probabilities"):
        BERNOULLI.check_logits(torch.sigmoid(z))
    # values in [0, 1] that do not sum to 1 are possible softmax logits, but not sigmoid logits
    u = torch.full((1, 3, 2, 2), 0.5)
    CATEGORICAL.check_logits(u)
    with pytest.raises(ValueError, match="look like probabilities"):
        BERNOULLI.check_logits(u)


@pytest.mark.parametrize("spatial", [(5,), (4, 3), (2, 3, 2)])
def test_categorical_batch_target_and_task_voxels(spatial):
    rng = np.random.default_rng(12)
    z = rng_logits((2, 3, *spatial), seed=12)
    y = torch.from_numpy(rng.integers(0, 3, (2, *spatial)))
    assert CATEGORICAL.batch_target(z, y) is y
    assert torch.equal(CATEGORICAL.batch_target(z, y[:, None]), y)
    chunks = list(CATEGORICAL.task_voxels(z, y))
    assert len(chunks) == 2
    for b, (task, zb, yb) in enumerate(chunks):
        assert task == 0 and zb.shape == (3, int(np.prod(spatial))) and yb.shape == (int(np.prod(spatial)),)
        for i, idx in enumerate(itertools.product(*[range(s) for s in spatial])):
            assert torch.equal(zb[:, i], z[(b, slice(None), *idx)]) and yb[i] == y[(b, *idx)]
    with pytest.raises(ValueError, match="target"):
        CATEGORICAL.batch_target(z, y[:1])
    with pytest.raises(ValueError, match="2 classes"):
        CATEGORICAL.batch_target(z[:, :1], y)


@pytest.mark.parametrize("spatial", [(5,), (4, 3), (2, 3, 2)])
def test_bernoulli_batch_target_and_task_voxels(spatial):
    rng = np.random.default_rng(13)
    z = rng_logits((2, 3, *spatial), seed=13)
    y = torch.from_numpy((rng.random((2, 3, *spatial)) < 0.5).astype(np.float32))
    assert BERNOULLI.batch_target(z, y) is y
    chunks = list(BERNOULLI.task_voxels(z, y))
    assert [c[0] for c in chunks] == [0, 1, 2, 0, 1, 2]
    for k, (task, zb, yb) in enumerate(chunks):
        b = k // 3
        assert torch.equal(zb, z[b, task].reshape(-1)) and torch.equal(yb, y[b, task].reshape(-1))
    # one region: a target without the region axis gets one
    assert BERNOULLI.batch_target(z[:, :1], y[:, 0]).shape == (2, 1, *spatial)
    with pytest.raises(ValueError, match="target"):
        BERNOULLI.batch_target(z, y[:, :2])


def test_check_target_task_target_chunk_target():
    y = torch.tensor([[0.0, 1.0, 255.0]])
    BERNOULLI.check_target(y, ignore_index=255)
    with pytest.raises(ValueError, match="target"):
        BERNOULLI.check_target(y, ignore_index=None)
    with pytest.raises(ValueError, match="target"):
        BERNOULLI.check_target(torch.tensor([0.0, float("nan")]), None)
    CATEGORICAL.check_target(torch.tensor([5, -1]), None)  # labels are checked per task (task_target)
    labels = torch.tensor([0.0, 2.0, 1.0])
    out = CATEGORICAL.task_target(labels, 3, first=True)
    assert out.dtype == torch.int64 and out.tolist() == [0, 2, 1]
    assert CATEGORICAL.task_target(torch.tensor([0, 1], dtype=torch.int32), 3, first=False).dtype == torch.int64
    with pytest.raises(ValueError, match="target"):
        CATEGORICAL.task_target(torch.tensor([0, 3]), 3, first=True)
    with pytest.raises(ValueError, match="target"):
        CATEGORICAL.task_target(torch.tensor([0.5, 1.0]), 3, first=True)
    assert BERNOULLI.task_target(labels, 1, first=True) is labels
    assert CATEGORICAL.chunk_target(out, torch.float32) is out
    m = BERNOULLI.chunk_target(torch.tensor([0, 1], dtype=torch.uint8), torch.float64)
    assert m.dtype == torch.float64 and m.tolist() == [0.0, 1.0]


def test_task_temperature():
    like = torch.zeros(3, 4, dtype=torch.float32)
    t = torch.tensor([2.0], dtype=torch.float64)
    tv = torch.tensor([0.5, 1.0, 4.0], dtype=torch.float64)
    assert CATEGORICAL.task_temperature(t, 0, 3, like).tolist() == [[2.0], [2.0], [2.0]]
    out = CATEGORICAL.task_temperature(tv, 0, 3, like)
    assert out.shape == (3, 1) and out.dtype == torch.float32 and out[:, 0].tolist() == [0.5, 1.0, 4.0]
    assert [float(BERNOULLI.task_temperature(tv, r, 3, like[0])) for r in range(3)] == [0.5, 1.0, 4.0]
    b = BERNOULLI.task_temperature(t, 2, 3, like[0])
    assert b.ndim == 0 and float(b) == 2.0 and b.dtype == torch.float32


# ----------------------------------------------------------------------------------- NLL and its gradient


def test_nll_and_ece_terms_hand_worked_2x2():
    """2 classes x 2 voxels; voxel 0 logits (ln 3, 0), voxel 1 logits (0, 0); labels (0, 1); t = 1.

    Softmax: p = (3/4, 1/4) and (1/2, 1/2). NLL = -ln 3/4 - ln 1/2 = ln 8/3. dNLL/dt_c = sum_i a_ic ([y_i = c] -
    p_ic): class 0: ln 3 (1 - 3/4) = ln 3 / 4 (voxel 1 has a = 0), class 1: 0. Confidence (3/4, 1/2), prediction
    (0, 0): the tie of voxel 1 goes to the first class, so correct = (1, 0). dconf/dt of voxel 0 (k = 0):
    p_k (p_c a_c - [c = k] a_k) = 3/4 (3/4 ln 3 - ln 3) = -3/16 ln 3 for c = 0, 0 for c = 1; voxel 1: 0.
    """
    z = torch.tensor([[LN3, 0.0], [0.0, 0.0]], dtype=torch.float64)
    y = torch.tensor([0, 1])
    t = torch.ones(2, 1, dtype=torch.float64)
    loss, grad = CATEGORICAL.nll_terms(z, y, t)
    assert float(loss) == pytest.approx(math.log(8 / 3), rel=1e-14)
    np.testing.assert_allclose(grad.numpy(), [LN3 / 4, 0.0], atol=1e-15)
    conf, correct, d = CATEGORICAL.ece_terms(z, y, t)
    np.testing.assert_allclose(conf.numpy(), [0.75, 0.5], rtol=1e-14)
    assert correct.tolist() == [1.0, 0.0]
    np.testing.assert_allclose(d.numpy(), [[-3 / 16 * LN3, 0.0], [0.0, 0.0]], atol=1e-15)
    # the same numbers for one region: logits (ln 3, 0), masks (1, 0): p = (3/4, 1/2), NLL = ln 8/3,
    # dNLL/dt = a (y - p) = ln 3 / 4; p = 1/2 predicts 0, so both voxels are right; dconf/dt = -p (1 - p) a
    zb, yb = torch.tensor([LN3, 0.0], dtype=torch.float64), torch.tensor([1.0, 0.0], dtype=torch.float64)
    tb = torch.tensor(1.0, dtype=torch.float64)
    loss, grad = BERNOULLI.nll_terms(zb, yb, tb)
    assert float(loss) == pytest.approx(math.log(8 / 3), rel=1e-14)
    assert grad.tolist() == [pytest.approx(LN3 / 4, rel=1e-14)]
    conf, correct, d = BERNOULLI.ece_terms(zb, yb, tb)
    np.testing.assert_allclose(conf.numpy(), [0.75, 0.5], rtol=1e-14)
    assert correct.tolist() == [1.0, 1.0]
    np.testing.assert_allclose(d.numpy(), [[-3 / 16 * LN3], [0.0]], atol=1e-15)


@pytest.mark.parametrize("n,C", [(1, 2), (40, 3), (200, 5)])
def test_categorical_nll_matches_scipy_sklearn_and_autograd(n, C):
    rng = np.random.default_rng(n + C)
    z = torch.from_numpy(rng.normal(0, 2, (C, n)))
    y = torch.from_numpy(rng.integers(0, C, n))
    tv = torch.from_numpy(rng.uniform(0.5, 2.0, C))
    loss, grad = CATEGORICAL.nll_terms(z, y, tv[:, None])
    assert loss.dtype == torch.float64 and loss.ndim == 0 and grad.shape == (C,) and grad.dtype == torch.float64
    a = z.numpy() / tv.numpy()[:, None]
    ref = -sum(special.log_softmax(a[:, i])[y[i]] for i in range(n))
    assert float(loss) == pytest.approx(ref, rel=1e-12)
    assert float(loss) == pytest.approx(
        log_loss(y.numpy(), special.softmax(a, axis=0).T, labels=list(range(C)), normalize=False), rel=1e-10)
    ref_loss, ref_grad = categorical_nll_autograd(z, y, tv)
    assert float(loss) == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(grad.numpy(), ref_grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [1, 37, 300])
@pytest.mark.parametrize("t", [0.4, 1.0, 3.0])
def test_bernoulli_nll_matches_sklearn_and_autograd(n, t):
    rng = np.random.default_rng(n)
    z = torch.from_numpy(rng.normal(0, 2, n))
    y = torch.from_numpy((rng.random(n) < 0.4).astype(np.float64))
    loss, grad = BERNOULLI.nll_terms(z, y, torch.tensor(t, dtype=torch.float64))
    assert loss.dtype == torch.float64 and grad.shape == (1,)
    p = special.expit(z.numpy() / t)
    ref = -sum(math.log(p[i]) if y[i] else math.log(1 - p[i]) for i in range(n))
    assert float(loss) == pytest.approx(ref, rel=1e-12)
    assert float(loss) == pytest.approx(log_loss(y.numpy(), p, labels=[0, 1], normalize=False), rel=1e-10)
    ref_loss, ref_grad = bernoulli_nll_autograd(z, y, t)
    assert float(loss) == pytest.approx(ref_loss, rel=1e-12)
    assert float(grad[0]) == pytest.approx(float(ref_grad[0]), rel=1e-10, abs=1e-12)


def test_bernoulli_nll_is_exact_for_large_logits():
    z = torch.tensor([800.0, -800.0, 40.0], dtype=torch.float64)
    y = torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64)
    loss, _ = BERNOULLI.nll_terms(z, y, torch.tensor(1.0, dtype=torch.float64))
    assert float(loss) == pytest.approx(800 + 800 + math.log1p(math.exp(-40)), rel=1e-14)


class _NLL(torch.autograd.Function):
    """The loss of ``nll_terms`` with its analytic gradient as the backward pass (to gradcheck the gradient)."""

    @staticmethod
    def forward(ctx, t, act, z, y):  # noqa: D102
        loss, grad = act.nll_terms(z, y, t.reshape(-1, 1) if act is CATEGORICAL else t.reshape(()))
        ctx.save_for_backward(grad)
        return loss

    @staticmethod
    def backward(ctx, g):  # noqa: D102
        (grad,) = ctx.saved_tensors
        return g * grad, None, None, None


class _Conf(torch.autograd.Function):
    """The confidence of ``ece_terms`` with its analytic dconf/dt as the backward pass."""

    @staticmethod
    def forward(ctx, t, act, z, y):  # noqa: D102
        conf, _, d = act.ece_terms(z, y, t.reshape(-1, 1) if act is CATEGORICAL else t.reshape(()))
        ctx.save_for_backward(d)
        return conf

    @staticmethod
    def backward(ctx, g):  # noqa: D102
        (d,) = ctx.saved_tensors
        return g @ d, None, None, None


def _chunk(act, n, seed):
    rng = np.random.default_rng(seed)
    if act is CATEGORICAL:
        z = torch.from_numpy(rng.normal(0, 2, (3, n)))
        return z, torch.from_numpy(rng.integers(0, 3, n)), torch.tensor([0.8, 1.5, 2.2], dtype=torch.float64)
    z = torch.from_numpy(rng.normal(0, 2, n))
    return z, torch.from_numpy((rng.random(n) < 0.5).astype(np.float64)), torch.tensor([1.3], dtype=torch.float64)


@pytest.mark.parametrize("act", [CATEGORICAL, BERNOULLI])
def test_temperature_gradients_pass_gradcheck(act):
    z, y, t = _chunk(act, 25, seed=14)
    t = t.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda tt: _NLL.apply(tt, act, z, y), (t,), eps=1e-6, atol=1e-6)
    assert torch.autograd.gradcheck(lambda tt: _Conf.apply(tt, act, z, y), (t,), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("act", [CATEGORICAL, BERNOULLI])
def test_confidence_gradient_matches_autograd_jacobian(act):
    z, y, t = _chunk(act, 30, seed=15)
    conf, correct, d = act.ece_terms(z, y, t.reshape(-1, 1) if act is CATEGORICAL else t.reshape(()))

    def top_label(tt):  # the confidence recomputed by autograd-able torch, independently of the module
        if act is CATEGORICAL:
            return torch.softmax(z / tt[:, None], 0).max(0).values
        p = torch.sigmoid(z / tt[0])
        return torch.maximum(p, 1 - p)

    np.testing.assert_allclose(conf.numpy(), top_label(t).numpy(), rtol=1e-14)
    jac = torch.autograd.functional.jacobian(top_label, t)
    assert d.shape == jac.shape == (30, t.numel())
    np.testing.assert_allclose(d.numpy(), jac.numpy(), rtol=1e-10, atol=1e-13)
    pred = (torch.softmax(z / t[:, None], 0).argmax(0) if act is CATEGORICAL else torch.sigmoid(z / t[0]) > 0.5)
    np.testing.assert_array_equal(correct.numpy(), (pred == (y if act is CATEGORICAL else y > 0.5)).double().numpy())


@pytest.mark.parametrize("act", [CATEGORICAL, BERNOULLI])
def test_nll_terms_add_up_over_chunks_and_a_single_voxel(act):
    z, y, t = _chunk(act, 11, seed=16)
    t = t.reshape(-1, 1) if act is CATEGORICAL else t.reshape(())
    loss, grad = act.nll_terms(z, y, t)
    parts = [act.nll_terms(z[..., i : i + 1], y[i : i + 1], t) for i in range(11)]
    assert float(loss) == pytest.approx(sum(float(p[0]) for p in parts), rel=1e-12)
    np.testing.assert_allclose(grad.numpy(), sum(p[1] for p in parts).numpy(), rtol=1e-10, atol=1e-14)


def test_float32_chunks_keep_float64_sums():
    z, y, t = _chunk(CATEGORICAL, 50, seed=17)
    loss64, grad64 = CATEGORICAL.nll_terms(z, y, t[:, None])
    loss32, grad32 = CATEGORICAL.nll_terms(z.float(), y, t[:, None].float())
    assert loss32.dtype == grad32.dtype == torch.float64
    assert float(loss32) == pytest.approx(float(loss64), rel=1e-5)
    np.testing.assert_allclose(grad32.numpy(), grad64.numpy(), rtol=1e-4, atol=1e-5)
    conf, correct, d = CATEGORICAL.ece_terms(z.float(), y, t[:, None].float())
    assert conf.dtype == torch.float32 and correct.dtype == torch.float64


def test_all_correct_and_all_confident():
    z = torch.tensor([[30.0, -30.0, 30.0], [-30.0, 30.0, -30.0]], dtype=torch.float64)
    y = torch.tensor([0, 1, 0])
    conf, correct, d = CATEGORICAL.ece_terms(z, y, torch.ones(2, 1, dtype=torch.float64))
    assert correct.tolist() == [1.0, 1.0, 1.0] and conf.numpy() == pytest.approx(1.0)
    loss, _ = CATEGORICAL.nll_terms(z, y, torch.ones(2, 1, dtype=torch.float64))
    assert 0 <= float(loss) < 1e-12  # log(1 + e^-60) rounds to 0 beside 30
    conf, correct, _ = BERNOULLI.ece_terms(z[0], (z[0] > 0).double(), torch.tensor(1.0, dtype=torch.float64))
    assert correct.tolist() == [1.0, 1.0, 1.0]


# ------------------------------------------------------------------------------------------------ bad input


NAN_LOGITS = torch.tensor([[[0.0, float("nan")], [1.0, 2.0]]])
INF_LOGITS = torch.tensor([[[0.0, float("inf")], [1.0, 2.0]]])


@pytest.mark.parametrize("act", [CATEGORICAL, BERNOULLI])
@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda a: a.probabilities(NAN_LOGITS), ValueError, "logits"),
        (lambda a: a.probabilities(INF_LOGITS), ValueError, "logits"),
        (lambda a: a.probabilities(np.zeros((1, 2, 3))), TypeError, "logits"),
        (lambda a: a.probabilities(torch.zeros(1, 2, 3, dtype=torch.long)), TypeError, "logits"),
        (lambda a: a.probabilities(torch.zeros(3)), ValueError, "logits"),
        (lambda a: a.probabilities(torch.zeros(1, 2, 3), 0.0), ValueError, "temperature"),
        (lambda a: a.probabilities(torch.zeros(1, 2, 3), -1.0), ValueError, "temperature"),
        (lambda a: a.probabilities(torch.zeros(1, 2, 3), float("nan")), ValueError, "temperature"),
        (lambda a: a.probabilities(torch.zeros(1, 2, 3), float("inf")), ValueError, "temperature"),
        (lambda a: a.probabilities(torch.zeros(1, 2, 3), [1.0, 2.0, 3.0]), ValueError, "temperature"),
        (lambda a: a.probabilities(torch.zeros(1, 2, 3), "hot"), TypeError, "temperature"),
        (lambda a: a.task_probabilities([0.5, 0.5]), TypeError, "probs"),
        (lambda a: a.task_probabilities(np.full((1, 2, 3), 0.5), axis=3), ValueError, "axis"),
        (lambda a: a.task_probabilities(np.full((1, 2, 3), 0.5), axis=1.0), ValueError, "axis"),
        (lambda a: a.task_targets([0, 1]), TypeError, "target"),
        (lambda a: a.confidence(np.array([0.5])), TypeError, "p"),
        (lambda a: a.confidence(torch.tensor([[0.5, float("nan")], [0.5, 0.5]])), ValueError, "p"),
        (lambda a: a.confidence(torch.tensor([[1, 0], [0, 1]])), TypeError, "p"),
        (lambda a: a.correctness(torch.zeros(3), torch.zeros(3, 1)), ValueError, "target"),
        (lambda a: a.correctness(np.zeros(3), torch.zeros(3)), TypeError, "pred"),
        (lambda a: a.check_logits(torch.tensor([[[0.0, float("nan")], [2.0, 3.0]]])), ValueError, "logits"),
        (lambda a: a.check_logits(torch.zeros(1, 2, 0)), ValueError, "logits"),
        (lambda a: a.check_logits(np.zeros((1, 2, 3))), TypeError, "logits"),
        (lambda a: a.batch_target(torch.zeros(1, 2, 3), np.zeros((1, 2, 3))), TypeError, "target"),
        (lambda a: a.split([0, 1], np.array([0, 1])), TypeError, "pred"),
        (lambda a: a.split(np.zeros((2, 3), int), np.zeros((2, 4), int)), ValueError, "target"),
        (lambda a: a.split(np.zeros((2, 3), int), np.zeros((2, 3), int), spacing=(1.0, 1.0, 1.0)), ValueError,
         "spacing"),
        (lambda a: a.split(np.zeros((2, 3), int), np.zeros((2, 3), int), spacing=(1.0, -2.0)), ValueError,
         "spacing"),
        (lambda a: a.split(np.zeros((2, 3), int), np.zeros((2, 3), int), maps={"u": np.zeros((3, 2))}),
         ValueError, "maps"),
    ],
)
def test_bad_input_names_the_argument(act, call, exc, match):
    with pytest.raises(exc, match=match):
        call(act)


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda: binary_probabilities(np.array([0.5, np.nan])), ValueError, "p"),
        (lambda: binary_probabilities(torch.tensor([0.5, float("inf")])), ValueError, "p"),
        (lambda: binary_probabilities(np.array([0.5, 1.5])), ValueError, "p"),
        (lambda: binary_probabilities(torch.tensor([-0.5, 0.5])), ValueError, "p"),
        (lambda: binary_probabilities([0.5]), TypeError, "p"),
        (lambda: binary_probabilities(np.array(["a"])), TypeError, "p"),
        (lambda: binary_probabilities(np.zeros((2, 3)), axis=3), ValueError, "axis"),
        (lambda: binary_probabilities(np.zeros((2, 3)), axis=-4), ValueError, "axis"),
        (lambda: BERNOULLI.task_probabilities(np.array([[0.5, 2.0]])), ValueError, "probs"),
        (lambda: BERNOULLI.task_probabilities(torch.tensor([[0.5, float("nan")]])), ValueError, "probs"),
        (lambda: BERNOULLI.task_targets(np.zeros((2, 3)), axis=2), ValueError, "axis"),
        (lambda: BERNOULLI.split(np.zeros((2, 3)), np.zeros((2, 3)), names=["a"]), ValueError, "names"),
        (lambda: BERNOULLI.split(np.zeros((2, 3)), np.zeros((2, 3)), np.full((3, 3), 0.5)), ValueError, "probs"),
        (lambda: BERNOULLI.split(np.zeros((2, 3)), np.zeros((2, 3)), np.array([[0.5, np.nan, 0], [0, 0, 0]])),
         ValueError, "probs"),
        (lambda: BERNOULLI.split(np.zeros(()), np.zeros(())), ValueError, "pred"),
        (lambda: BERNOULLI.split(np.zeros((2, 3)), np.zeros((2, 3)), maps={"u": np.zeros(3)}), ValueError, "maps"),
        (lambda: CATEGORICAL.split(np.zeros((2, 3), int), np.zeros((2, 3), int), np.full((2, 2, 2), 0.5)),
         ValueError, "probs"),
        (lambda: CATEGORICAL.split(np.zeros((2, 3), int), np.zeros((2, 3), int), np.full((2, 2, 3), 0.5),
                                   num_classes=3), ValueError, "num_classes"),
        (lambda: CATEGORICAL.split(np.zeros((2, 3), int), np.zeros((2, 3), int), num_classes=0), ValueError,
         "num_classes"),
        (lambda: CATEGORICAL.split(np.zeros((0, 3), int), np.zeros((0, 3), int)), ValueError, "pred"),
        (lambda: CATEGORICAL.confidence(torch.zeros(0, 3)), ValueError, "p"),
        (lambda: TaskView(None, np.zeros(3), np.zeros(4), 2), ValueError, "target"),
        (lambda: TaskView(None, torch.zeros(3), np.zeros(3), 2), TypeError, "pred"),
        (lambda: TaskView(None, np.zeros(3), np.zeros(3), 0), ValueError, "num_classes"),
        (lambda: TaskView(None, np.zeros(3), np.zeros(3), 2, probs=np.zeros((3, 3))), ValueError, "probs"),
        (lambda: TaskView(None, np.zeros(3), np.zeros(3), 2, spacing=(1.0, 1.0)), ValueError, "spacing"),
        (lambda: CATEGORICAL.batch_target(torch.zeros(2), torch.zeros(2)), ValueError, "logits"),
        (lambda: BERNOULLI.batch_target(torch.zeros(2), torch.zeros(2)), ValueError, "logits"),
        (lambda: CATEGORICAL.task_voxels(torch.zeros(1, 2, 3), torch.zeros(1, 4)).__next__(), ValueError, "target"),
        (lambda: BERNOULLI.task_voxels(torch.zeros(1, 2, 3), torch.zeros(1, 3)).__next__(), ValueError, "target"),
    ],
)
def test_bad_input_names_the_argument_one_activation(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def _t(act, value=1.0):
    if act is CATEGORICAL:
        return torch.full((2, 1), value, dtype=torch.float64)
    return torch.tensor(value, dtype=torch.float64)


def _z(act, *values):
    z = torch.tensor(values, dtype=torch.float64)
    return torch.stack([z, -z]) if act is CATEGORICAL else z


@pytest.mark.parametrize("method", ["nll_terms", "ece_terms"])
@pytest.mark.parametrize("act", [CATEGORICAL, BERNOULLI])
def test_chunk_pieces_bad_input(act, method):
    f = getattr(act, method)
    y = torch.tensor([0, 1]) if act is CATEGORICAL else torch.tensor([0.0, 1.0], dtype=torch.float64)
    cases = [
        ((_z(act, 0.0, float("nan")), y, _t(act)), ValueError, "z"),
        ((_z(act, 0.0, float("inf")), y, _t(act)), ValueError, "z"),
        ((_z(act, 1e300, 0.0), y, _t(act, 1e-300)), ValueError, "overflow"),
        ((_z(act, 0.0, 1.0), y, _t(act, 0.0)), ValueError, "t"),
        ((_z(act, 0.0, 1.0), y, _t(act, -1.0)), ValueError, "t"),
        ((_z(act, 0.0, 1.0), y, _t(act, float("nan"))), ValueError, "t"),
        ((_z(act, 0.0, 1.0), y, torch.ones(3, dtype=torch.float64)), ValueError, "t"),
        ((_z(act, 0.0, 1.0), y[:1], _t(act)), ValueError, "y"),
        ((_z(act, 0.0, 1.0), y + 2, _t(act)), ValueError, "y"),
        ((_z(act, 0.0, 1.0).numpy(), y, _t(act)), TypeError, "z"),
        ((_z(act, 0.0, 1.0).long(), y, _t(act)), TypeError, "z"),
        ((_z(act, 0.0, 1.0), y.tolist(), _t(act)), TypeError, "y"),
        ((_z(act, 0.0, 1.0)[None], y, _t(act)), ValueError, "z"),
    ]
    if act is CATEGORICAL:
        cases.append(((_z(act, 0.0, 1.0), y.int(), _t(act)), TypeError, "y"))
        cases.append(((_z(act, 0.0, 1.0), y, torch.ones(1, 2, dtype=torch.float64)), ValueError, "t"))
    else:
        cases.append(((_z(act, 0.0, 1.0), torch.tensor([0.0, float("nan")], dtype=torch.float64), _t(act)),
                      ValueError, "y"))
    for args, exc, match in cases:
        with pytest.raises(exc, match=match):
            f(*args)


@pytest.mark.parametrize(
    "act,args,match",
    [
        (CATEGORICAL, (torch.ones(2), 0, 3), "t"),
        (CATEGORICAL, (torch.tensor([1.0, 0.0, 1.0]), 0, 3), "t"),
        (CATEGORICAL, (torch.ones(1), 1, 3), "task"),
        (CATEGORICAL, (torch.ones(1), 0, 1), "channels"),
        (BERNOULLI, (torch.ones(3), 3, 3), "task"),
        (BERNOULLI, (torch.ones(3), -1, 3), "task"),
        (BERNOULLI, (torch.ones(2), 0, 3), "t"),
        (BERNOULLI, (torch.tensor([float("inf")]), 0, 3), "t"),
    ],
)
def test_task_temperature_bad_input(act, args, match):
    with pytest.raises(ValueError, match=match):
        act.task_temperature(*args, torch.zeros(3))


# ------------------------------------------------------------------------------------------ hypothesis


finite = st.floats(-30, 30, allow_nan=False, allow_infinity=False)
temperatures = st.floats(0.05, 20.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 2), st.integers(2, 4), st.integers(1, 5)), elements=finite),
       st.lists(temperatures, min_size=1, max_size=1) | st.lists(temperatures, min_size=4, max_size=4))
def test_property_probabilities(z, t):
    t = t[:1] if len(t) == 1 else t[: z.shape[1]]
    zt = torch.from_numpy(z)
    pc = CATEGORICAL.probabilities(zt, t)
    pb = BERNOULLI.probabilities(zt, t)
    for p in (pc, pb):
        assert bool(((p >= 0) & (p <= 1)).all())
    np.testing.assert_allclose(pc.sum(1).numpy(), 1.0, atol=1e-12)
    # the Bernoulli task split gives (1 - p, p) for every region
    for r, tp in enumerate(BERNOULLI.task_probabilities(pb)):
        assert torch.equal(tp[:, 1], pb[:, r]) and torch.equal(tp[:, 0], 1 - pb[:, r])
        np.testing.assert_allclose(tp.sum(1).numpy(), 1.0, atol=1e-15)


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(2, 5), st.integers(1, 6)), elements=finite), temperatures)
def test_property_scalar_temperature_keeps_argmax_and_order(z, t):
    zt = torch.from_numpy(z)[None]  # (1, C, n)
    p = CATEGORICAL.probabilities(zt, t)[0].numpy()
    ps = BERNOULLI.probabilities(zt, t)[0].numpy()
    for i in range(z.shape[1]):
        k = int(np.argmax(z[:, i]))
        assert p[k, i] == p[:, i].max()  # the predicted class does not change
        for c, d in itertools.permutations(range(z.shape[0]), 2):
            if z[c, i] < z[d, i]:  # the class order is kept (weakly: rounding may tie)
                assert p[c, i] <= p[d, i] and ps[c, i] <= ps[d, i]
    # a Bernoulli region keeps its prediction (p > 0.5 only for z > 0; p = 1/2 may be reached by rounding)
    assert not (ps > 0.5)[z <= 0].any() and not (ps < 0.5)[z >= 0].any()
    conf, pred = CATEGORICAL.confidence(torch.from_numpy(p))
    np.testing.assert_array_equal(conf.numpy(), p.max(0))


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, st.integers(1, 8), elements=st.floats(0, 1)), st.integers(-2, 1))
def test_property_binary_probabilities(p, axis):
    out = binary_probabilities(p[:, None], axis=axis)
    assert out.shape[axis] == 2
    np.testing.assert_array_equal(np.take(out, 1, axis=axis), p[:, None])
    np.testing.assert_allclose(np.take(out, 0, axis=axis) + np.take(out, 1, axis=axis), 1.0, atol=1e-15)
    conf, pred = BERNOULLI.confidence(torch.from_numpy(p))
    assert bool(((conf >= 0.5) & (conf <= 1)).all())
    c2, k2 = CATEGORICAL.confidence(torch.from_numpy(binary_probabilities(p)))
    np.testing.assert_array_equal(conf.numpy(), c2.numpy())  # the region task is the two-class softmax task
    np.testing.assert_array_equal(pred.numpy(), k2.numpy() == 1)
