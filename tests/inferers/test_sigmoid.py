"""Multi-label (region-based) sigmoid models: per-channel Bernoulli measures against brute force over kept samples
(numpy / scipy formulas written here), in the functional core, SampleStats and every inferer."""

import weakref

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from monai.networks.nets import UNet
from scipy.special import xlogy
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from monai_unc import measures as M
from monai_unc.inferers import (
    EnsembleInferer,
    MCDropoutInferer,
    RateInInferer,
    SoftmaxInferer,
    TTAInferer,
    UncertaintyInferer,
    apply_activation,
)
from monai_unc.stats import SampleStats

MAPS = ("predictive_entropy", "expected_entropy", "mutual_information", "one_minus_max_prob", "variance")


def hb(p):
    """Binary entropy in nats, 0 log 0 = 0 (scipy's xlogy)."""
    p = np.asarray(p, dtype=np.float64)
    return -(xlogy(p, p) + xlogy(1 - p, 1 - p))


def reference(samples):
    """Per-channel Bernoulli measures of samples (S, B, C, *spatial), written from the definitions."""
    s = np.asarray(samples, dtype=np.float64)
    m = s.mean(0)
    pe = hb(m)
    ee = hb(s).mean(0)
    return {
        "pred": m,
        "predictive_entropy": pe,
        "expected_entropy": ee,
        "mutual_information": np.maximum(pe - ee, 0),
        "one_minus_max_prob": np.minimum(m, 1 - m),
        "variance": ((s - m) ** 2).mean(0),
    }


def check(out, samples, atol):
    for k, v in reference(samples).items():
        np.testing.assert_allclose(out[k].double().cpu().numpy(), v, atol=atol, rtol=0, err_msg=k)


def region_unet(dims=3, out=3, dropout=0.2, seed=0):
    torch.manual_seed(seed)
    return UNet(dims, 1, out, channels=(4, 8, 16), strides=(2, 2), num_res_units=1, dropout=dropout).eval()


# ------------------------------------------------------------------------------------------ functional core
def test_binary_entropy_hand_values_and_normalisation():
    p = np.array([0.0, 0.5, 1.0, 0.25]).reshape(1, 4, 1)
    h = M.binary_entropy(p)
    np.testing.assert_allclose(h.ravel(), [0.0, np.log(2), 0.0, -(0.25 * np.log(0.25) + 0.75 * np.log(0.75))])
    np.testing.assert_allclose(M.binary_entropy(p, normalize=True).ravel()[1], 1.0)
    assert h.shape == (1, 4, 1) and isinstance(h, np.ndarray)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        M.binary_entropy(np.array([1.5]).reshape(1, 1, 1))
    with pytest.raises(ValueError, match="non-finite"):
        M.binary_entropy(np.array([np.nan]).reshape(1, 1, 1))


@pytest.mark.parametrize("shape", [(5, 2, 3, 7, 6), (4, 1, 2, 5, 4, 3)])
def test_sample_measures_multilabel_equal_reference(shape):
    rng = np.random.default_rng(1)
    s = rng.uniform(size=shape)
    s[0, ..., 0] = 1.0  # saturated probabilities: 0 log 0
    ref = reference(s)
    for name, fn in (("predictive_entropy", M.predictive_entropy), ("expected_entropy", M.expected_entropy),
                     ("mutual_information", M.mutual_information), ("variance", M.variance)):
        np.testing.assert_allclose(fn(s, multilabel=True), ref[name], atol=1e-12, err_msg=name)
    np.testing.assert_allclose(M.one_minus_max_prob(s.mean(0), multilabel=True), ref["one_minus_max_prob"], atol=1e-12)
    # no sum-to-one constraint, but values must be probabilities
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        M.mutual_information(s * 2 - 0.5, multilabel=True)
    with pytest.raises(ValueError, match="sum to 1"):
        M.mutual_information(s)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_one_channel_bernoulli_equals_two_class_categorical(n, seed):
    """A region is a two-class problem (1 - p, p): every map is the same, whatever S."""
    p = np.random.default_rng(seed).uniform(size=(n, 1, 1, 4, 3))
    two = np.concatenate([1 - p, p], axis=2)
    for fn in (M.predictive_entropy, M.expected_entropy, M.mutual_information, M.variance):
        np.testing.assert_allclose(fn(p, multilabel=True), fn(two), atol=1e-12)
    np.testing.assert_allclose(
        M.one_minus_max_prob(p.mean(0), multilabel=True), M.one_minus_max_prob(two.mean(0)), atol=1e-12
    )


def test_sample_stats_multilabel_stream_merge_and_state():
    rng = np.random.default_rng(2)
    s = torch.from_numpy(rng.uniform(size=(7, 2, 3, 5, 4)))
    a = SampleStats(multilabel=True)
    for i in range(4):
        a.update(s[i])
    b = SampleStats(multilabel=True)
    for i in range(4, 7):
        b.update(s[i])
    a.merge(b)
    out = a.measures()
    assert all(out[k].shape == (2, 3, 5, 4) for k in MAPS)
    check(out, s.numpy(), atol=1e-12)
    # normalisation by log 2
    torch.testing.assert_close(a.measures(["mutual_information"], normalize=True)["mutual_information"],
                               out["mutual_information"] / np.log(2))
    c = SampleStats(multilabel=True).load_state_dict(a.state_dict())
    assert c.multilabel
    torch.testing.assert_close(c.measures()["expected_entropy"], out["expected_entropy"])
    with pytest.raises(ValueError, match="multilabel"):
        SampleStats().merge(a)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        SampleStats(multilabel=True).update(torch.full((1, 2, 3), 1.2))
    with pytest.raises(ValueError, match="window_disagreement"):
        a.measures(["window_disagreement"])


def test_apply_activation_sigmoid_channels():
    z = torch.randn(2, 3, 4, 5)
    torch.testing.assert_close(apply_activation(z, "sigmoid"), torch.sigmoid(z))
    one = apply_activation(z[:, :1], "sigmoid")
    torch.testing.assert_close(one, torch.cat([1 - torch.sigmoid(z[:, :1]), torch.sigmoid(z[:, :1])], 1))


# ------------------------------------------------------------------------------------------ inferers
@pytest.mark.parametrize("dims,batch", [(2, 2), (3, 1)])
def test_mc_dropout_sigmoid_equals_brute_force(dims, batch):
    net = region_unet(dims)
    x = torch.randn(batch, 1, *([16] * dims))
    out = MCDropoutInferer(num_samples=5, activation="sigmoid", keep_samples=True, seed=0)(x, net)
    s = out["samples"]
    assert s.shape == (5, batch, 3, *([16] * dims))
    assert all(out[k].shape == (batch, 3, *([16] * dims)) for k in MAPS)
    assert "window_disagreement" not in out  # SimpleInferer: nothing is stitched
    check(out, s.numpy(), atol=1e-6)
    # the samples are the sigmoid of the network's logits, channel by channel (not a softmax)
    assert float((s.sum(2) - 1).abs().max()) > 0.1
    assert float(out["mutual_information"].max()) > 0


def test_sigmoid_tta_ensemble_ratein_match_their_samples():
    x = torch.randn(1, 1, 16, 16, 16)
    net = region_unet()
    tta = TTAInferer(flip_axes=(0, 2), activation="sigmoid", keep_samples=True)(x, net)
    assert tta["samples"].shape[0] == 4
    check(tta, tta["samples"].numpy(), atol=1e-6)
    # the first TTA sample is the plain prediction
    torch.testing.assert_close(tta["samples"][0], torch.sigmoid(net(x)), atol=1e-6, rtol=0)
    members = [region_unet(seed=i, dropout=0.0) for i in range(3)]
    ens = EnsembleInferer(members, activation="sigmoid", keep_samples=True)(x, None)
    with torch.no_grad():
        expected = torch.stack([torch.sigmoid(m(x)) for m in members])
    torch.testing.assert_close(ens["samples"], expected, atol=1e-6, rtol=0)
    check(ens, expected.numpy(), atol=1e-6)
    rate = RateInInferer(num_samples=3, activation="sigmoid", keep_samples=True, seed=0)(x, net)
    check(rate, rate["samples"].numpy(), atol=1e-6)
    assert rate["pred"].shape == (1, 3, 16, 16, 16) and rate.extras["rate_in_rates"]


def test_sigmoid_normalize_and_softmax_inferer():
    net = region_unet(2, dropout=0.0)
    x = torch.randn(1, 1, 16, 16)
    out = SoftmaxInferer(activation="sigmoid", normalize=True)(x, net)
    with torch.no_grad():
        p = torch.sigmoid(net(x))
    torch.testing.assert_close(out["predictive_entropy"], torch.from_numpy(hb(p.numpy()) / np.log(2)).float(),
                               atol=1e-6, rtol=0)
    torch.testing.assert_close(out["one_minus_max_prob"], torch.minimum(p, 1 - p), atol=1e-7, rtol=0)
    assert float(out["predictive_entropy"].max()) <= 1 + 1e-6


def test_single_channel_sigmoid_unchanged():
    """One sigmoid channel keeps the two-class output (1 - p, p) and (B, 1, *spatial) maps."""
    net = region_unet(2, out=1)
    x = torch.randn(1, 1, 16, 16)
    out = MCDropoutInferer(4, activation="sigmoid", keep_samples=True, seed=1)(x, net)
    assert out["pred"].shape == (1, 2, 16, 16) and out["mutual_information"].shape == (1, 1, 16, 16)
    s = out["samples"][:, :, 1:]  # foreground channel
    ref = reference(s.numpy())
    for k in ("predictive_entropy", "expected_entropy", "mutual_information", "variance", "one_minus_max_prob"):
        np.testing.assert_allclose(out[k].numpy(), ref[k], atol=1e-6, err_msg=k)


def test_single_channel_sigmoid_background_keeps_its_tail():
    """The background of a one-channel sigmoid output is sigmoid(-z), as the two-class softmax of (0, z) gives it:
    1 - sigmoid(z) in float32 was 0 from z = 17 on, and the NLL of a confidently wrong voxel the 1e-15 clamp's 34.5
    nats instead of z. Found by hostile testing (precision review)."""
    from monai.inferers import SimpleInferer

    from monai_unc.metrics import nll

    z = torch.tensor([5.0, 17.0, 20.0, 30.0, -25.0, 0.0]).view(1, 1, 2, 3)
    exact = 1 / (1 + np.exp(z.double().numpy()))  # sigmoid(-z) in float64
    probs = apply_activation(z, "sigmoid")
    np.testing.assert_allclose(probs[:, :1].double().numpy(), exact, rtol=1e-6, atol=0)
    np.testing.assert_allclose(probs[:, 1:].double().numpy(), 1 / (1 + np.exp(-z.double().numpy())), rtol=1e-6, atol=0)
    out = UncertaintyInferer(base_inferer=SimpleInferer(), activation="sigmoid")(z, nn.Identity())
    softmax = UncertaintyInferer(base_inferer=SimpleInferer(), activation="softmax")(
        z, lambda x: torch.cat([torch.zeros_like(x), x], 1))
    np.testing.assert_allclose(out["pred"].numpy(), softmax["pred"].numpy(), rtol=1e-6, atol=0)
    target = torch.zeros(1, 2, 3, dtype=torch.long)  # background: the voxels of z >= 17 are confidently wrong
    expected = float(np.mean(np.logaddexp(0.0, z.double().numpy())))  # -log sigmoid(-z)
    assert float(nll(out["pred"], target)) == pytest.approx(expected, rel=1e-6)


def test_sigmoid_ensemble_members_must_agree_on_the_output_kind():
    class Const(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c = c
            self.w = nn.Parameter(torch.zeros(1))

        def forward(self, x):
            return x.new_zeros(x.shape[0], self.c, *x.shape[2:]) + self.w

    with pytest.raises(ValueError, match="multilabel"):
        EnsembleInferer([Const(2), Const(1)], activation="sigmoid")(torch.zeros(1, 1, 4, 4), None)


# ------------------------------------------------------------------------------------------ memory
class LiveBytes(TorchDispatchMode):
    """Bytes of the tensors created under this mode that are still alive, and their peak (views and in-place
    results are not counted twice)."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0

    def _free(self, n):
        self.live -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {id(a) for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)}
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and id(t) not in inputs and not t._is_view():
                n = t.untyped_storage().nbytes()
                self.live += n
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._free, n)
        return out


@pytest.mark.parametrize("activation", ["sigmoid", "softmax"])
def test_memory_flat_in_the_number_of_samples(activation):
    """Streaming: peak tensor memory is the same for 2 and 6 samples; keeping the samples (the control) grows."""
    net = region_unet()
    x = torch.randn(1, 1, 8, 8, 8)
    volume = x.numel() * 3 * 4  # one float32 probability map
    peaks = {}
    for keep in (False, True):
        for n in (2, 6):
            with LiveBytes() as mem:
                MCDropoutInferer(n, activation=activation, seed=0, keep_samples=keep)(x, net)
            peaks[keep, n] = mem.peak
    assert peaks[False, 6] == peaks[False, 2], peaks
    assert peaks[True, 6] - peaks[True, 2] >= 4 * volume, peaks


def test_uncertainty_inferer_sigmoid_with_latent_source():
    from monai_unc.inferers import StochasticSource

    class Latent(nn.Module):
        def forward(self, x):
            return torch.randn(x.shape[0], 2, *x.shape[2:]) + x

    x = torch.zeros(1, 1, 6, 6)
    out = UncertaintyInferer([StochasticSource(6)], activation="sigmoid", keep_samples=True, seed=0)(x, Latent())
    check(out, out["samples"].numpy(), atol=1e-6)
    assert str(out.mi_meaning) == "aleatoric"
