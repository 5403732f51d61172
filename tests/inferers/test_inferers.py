"""Inferers: streaming statistics vs brute force on kept samples, identities, sliding windows, errors."""

import numpy as np
import pytest
import torch
from monai.data import MetaTensor
from monai.inferers import SimpleInferer, SlidingWindowInferer
from monai.networks.nets import UNet
from torch import nn

from monai_unc import MIMeaning
from monai_unc import measures as M
from monai_unc.inferers import (
    EnsembleInferer,
    EnsembleSource,
    FlipSource,
    MCDropoutInferer,
    MCDropoutSource,
    NoiseSource,
    SoftmaxInferer,
    StochasticSource,
    TTAInferer,
    UncertaintyInferer,
    flip_subsets,
)

ALL = ("pred", "predictive_entropy", "expected_entropy", "mutual_information", "one_minus_max_prob", "variance")


class PointwiseNet(nn.Module):
    """1x1 convolutions only: exactly flip-equivariant, any spatial size, optional dropout."""

    def __init__(self, dims=3, in_ch=1, out_ch=3, p=0.0, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        conv = nn.Conv3d if dims == 3 else nn.Conv2d
        drop = nn.Dropout3d if dims == 3 else nn.Dropout2d
        self.a = conv(in_ch, 8, 1)
        self.drop = drop(p) if p > 0 else nn.Identity()
        self.b = conv(8, out_ch, 1)

    def forward(self, x):
        return self.b(self.drop(torch.tanh(self.a(x))))


def small_unet(dims=3, dropout=0.2, out=3):
    torch.manual_seed(0)
    return UNet(dims, 1, out, channels=(4, 8, 16), strides=(2, 2), num_res_units=1, dropout=dropout).eval()


def check_against_samples(out, atol):
    s = out["samples"].double().numpy()
    ref = {
        "pred": s.mean(0),
        "predictive_entropy": M.predictive_entropy(s),
        "expected_entropy": M.expected_entropy(s),
        "mutual_information": M.mutual_information(s),
        "one_minus_max_prob": M.one_minus_max_prob(s.mean(0)),
        "variance": M.variance(s),
    }
    for k, v in ref.items():
        np.testing.assert_allclose(out[k].double().numpy(), v, atol=atol, err_msg=k)


@pytest.mark.parametrize("dims,batch", [(2, 1), (2, 3), (3, 2)])
def test_mc_dropout_streaming_equals_brute_force(dims, batch):
    net = small_unet(dims)
    x = torch.randn(batch, 1, *([16] * dims))
    out = MCDropoutInferer(num_samples=6, keep_samples=True, seed=1)(x, net)
    assert set(out) == set(ALL) | {"samples"}
    assert out["samples"].shape == (6, batch, 3, *([16] * dims))
    assert out["pred"].shape == (batch, 3, *([16] * dims))
    assert all(out[k].shape == (batch, 1, *([16] * dims)) for k in ALL[1:])
    check_against_samples(out, atol=1e-6)
    # samples differ (dropout really on) and MI is non-negative; PE = EE + MI
    assert not torch.allclose(out["samples"][0], out["samples"][1])
    assert float(out["mutual_information"].min()) >= 0
    torch.testing.assert_close(out["predictive_entropy"], out["expected_entropy"] + out["mutual_information"],
                               atol=1e-6, rtol=0)
    assert out.mi_meaning == MIMeaning.EPISTEMIC and out.num_samples == 6


def test_dropout_modes_restored_and_eval_untouched():
    net = small_unet()
    net.eval()
    MCDropoutInferer(num_samples=2)(torch.randn(1, 1, 16, 16, 16), net)
    assert not any(m.training for m in net.modules())
    net.train()
    MCDropoutInferer(num_samples=2)(torch.randn(1, 1, 16, 16, 16), net)
    assert all(m.training for m in net.modules())


def test_seed_reproducible_and_global_rng_untouched():
    net = small_unet()
    x = torch.randn(1, 1, 16, 16, 16)
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = MCDropoutInferer(4, seed=7)(x, net)
    after = torch.rand(1)
    assert torch.equal(before, after)
    b = MCDropoutInferer(4, seed=7)(x, net)
    c = MCDropoutInferer(4, seed=8)(x, net)
    assert torch.equal(a["mutual_information"], b["mutual_information"])
    assert not torch.equal(a["mutual_information"], c["mutual_information"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtypes(dtype):
    net = small_unet().to(dtype)
    out = MCDropoutInferer(3, keep_samples=True)(torch.randn(1, 1, 16, 16, 16, dtype=dtype), net)
    assert all(v.dtype == dtype for v in out.values())
    check_against_samples(out, atol=1e-5 if dtype == torch.float32 else 1e-12)


def test_ensemble_of_identical_networks_has_zero_mi(tmp_path):
    net = small_unet(dropout=0.0)
    x = torch.randn(2, 1, 16, 16, 16)
    out = EnsembleInferer([net, net, net])(x, None)
    assert float(out["mutual_information"].abs().max()) < 1e-6
    assert float(out["variance"].max()) < 1e-10
    ref = torch.softmax(net(x), 1)
    torch.testing.assert_close(out["pred"], ref, atol=1e-6, rtol=0)
    # checkpoints: loaded into the given network one at a time, its weights restored afterwards
    other = small_unet(dropout=0.0)
    for p in other.parameters():
        p.data.add_(0.3)
    paths = []
    for i, n in enumerate((net, other)):
        paths.append(tmp_path / f"m{i}.pt")
        torch.save({"state_dict": n.state_dict()}, paths[-1])
    template = small_unet(dropout=0.0)
    for p in template.parameters():
        p.data.mul_(0)
    before = {k: v.clone() for k, v in template.state_dict().items()}
    out2 = EnsembleInferer(paths, keep_samples=True)(x, template)
    assert all(torch.equal(before[k], v) for k, v in template.state_dict().items())
    torch.testing.assert_close(out2["samples"][0], ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(out2["samples"][1], torch.softmax(other(x), 1), atol=1e-6, rtol=0)
    assert float(out2["mutual_information"].max()) > 1e-4
    check_against_samples(out2, atol=1e-6)


def test_tta_of_flip_equivariant_network_has_zero_mi():
    net = PointwiseNet().eval()
    x = torch.randn(1, 1, 8, 9, 10)
    out = TTAInferer(flip_axes="all", keep_samples=True)(x, net)
    assert out["samples"].shape[0] == 8
    assert float(out["mutual_information"].max()) < 1e-6
    torch.testing.assert_close(out["pred"], torch.softmax(net(x), 1), atol=1e-6, rtol=0)


def test_tta_inverts_flips():
    # a network that is not flip-equivariant: output depends on position; flips are undone sample by sample
    class Ramp(nn.Module):
        def forward(self, x):
            ramp = torch.linspace(-3, 3, x.shape[-1]).expand_as(x)
            return torch.cat([x + ramp, -x - ramp], 1)

    x = torch.zeros(1, 1, 4, 6)
    out = TTAInferer(flip_axes=(1,), keep_samples=True)(x, Ramp())
    s = out["samples"]
    torch.testing.assert_close(s[1], torch.flip(torch.softmax(Ramp()(torch.flip(x, (3,))), 1), (3,)))
    assert flip_subsets(3) == [(), (0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)]
    with pytest.raises(ValueError, match="flip_axes"):
        flip_subsets(2, (0, 2))


def test_tta_noise_copies_and_count():
    net = PointwiseNet(dims=2).eval()
    out = TTAInferer(flip_axes=(0,), noise_std=0.5, noise_samples=3, keep_samples=True, seed=0)(
        torch.randn(1, 1, 6, 6), net)
    assert out["samples"].shape[0] == 6 and out.num_samples == 6
    assert float(out["mutual_information"].max()) > 0


@pytest.mark.parametrize("shape,overlap,mode", [((32, 16, 32), 0.0, "constant"), ((24, 20, 28), 0.5, "gaussian")])
def test_sliding_window_with_deterministic_network_equals_sliding_softmax_entropy(shape, overlap, mode):
    net = small_unet(dropout=0.0)
    x = torch.randn(1, 1, *shape)
    sw = SlidingWindowInferer((16, 16, 16), sw_batch_size=2, overlap=overlap, mode=mode)
    out = MCDropoutInferer(4, base_inferer=sw)(x, add_dropout_zero(net))
    ref_p = sw(x, lambda t: torch.softmax(net(t), 1))
    torch.testing.assert_close(out["pred"], ref_p, atol=1e-6, rtol=0)
    torch.testing.assert_close(out["predictive_entropy"], M.entropy(ref_p), atol=1e-5, rtol=0)
    # EE is the stitched per-window entropy; MI = H(stitched p) - stitched H(p): zero without overlapping
    # windows, and otherwise the (non-negative) disagreement between overlapping windows (docs/design.md)
    ref_ee = sw(x, lambda t: M.entropy(torch.softmax(net(t), 1)))
    torch.testing.assert_close(out["expected_entropy"], ref_ee, atol=1e-6, rtol=0)
    assert float(out["mutual_information"].min()) >= 0
    if overlap == 0.0:
        assert float(out["mutual_information"].max()) < 1e-5


class WithInertDropout(nn.Module):
    """A deterministic network that still has a dropout layer (its output is multiplied by 0)."""

    def __init__(self, net):
        super().__init__()
        self.net, self.drop = net, nn.Dropout(0.5)

    def forward(self, x):
        return self.net(x) + 0.0 * self.drop(torch.ones(1, dtype=x.dtype)).sum()


def add_dropout_zero(net):
    return WithInertDropout(net)


def test_sliding_window_stochastic_matches_kept_samples():
    net = small_unet()
    x = torch.randn(2, 1, 20, 24, 16)
    sw = SlidingWindowInferer((16, 16, 16), overlap=0.25, mode="gaussian")
    out = UncertaintyInferer([MCDropoutSource(3), FlipSource((0,))], base_inferer=sw, keep_samples=True, seed=0)(
        x, net)
    assert out["samples"].shape == (6, 2, 3, 20, 24, 16)
    # pred and EE are convex blends of per-window means: exact against stitched samples
    torch.testing.assert_close(out["pred"], out["samples"].mean(0), atol=1e-6, rtol=0)
    assert float(out["mutual_information"].min()) >= 0
    # stitching blends sample-wise: with the window-wise dropout masks the stitched samples are not the
    # samples of one network, so EE of stitched samples <= stitched EE (Jensen); PE is identical
    torch.testing.assert_close(out["predictive_entropy"], M.entropy(out["samples"].mean(0)), atol=1e-5, rtol=0)


def test_product_of_sources_and_ensemble_members_merge():
    net_a, net_b = small_unet(), small_unet()
    for p in net_b.parameters():
        p.data.mul_(1.1)
    x = torch.randn(1, 1, 16, 16, 16)
    inf = UncertaintyInferer([EnsembleSource([net_a, net_b]), MCDropoutSource(2), FlipSource((0, 1))],
                             keep_samples=True, seed=3)
    out = inf(x, None)
    assert out["samples"].shape[0] == 2 * 2 * 4 == out.num_samples
    check_against_samples(out, atol=1e-6)
    assert out.mi_meaning == MIMeaning.EPISTEMIC


def test_latent_source_reports_aleatoric_and_mixed():
    class Latent(nn.Module):
        def forward(self, x):
            z = torch.randn(x.shape[0], 1, *([1] * (x.ndim - 2)))
            return torch.cat([x + z, -x - z], 1)

    x = torch.randn(1, 1, 5, 5)
    out = UncertaintyInferer([StochasticSource(4)], seed=0)(x, Latent())
    assert out.mi_meaning == MIMeaning.ALEATORIC
    out = UncertaintyInferer([StochasticSource(2), NoiseSource(0.1, 2)], seed=0)(x, Latent())
    assert out.mi_meaning == MIMeaning.MIXED


def test_softmax_inferer_baseline():
    net = small_unet(dropout=0.3)
    x = torch.randn(1, 1, 16, 16, 16)
    out = SoftmaxInferer()(x, net)
    assert set(out) == {"pred", "predictive_entropy", "one_minus_max_prob"}
    ref = torch.softmax(net(x), 1)
    torch.testing.assert_close(out["pred"], ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(out["predictive_entropy"], M.entropy(ref), atol=1e-6, rtol=0)
    assert out.mi_meaning == MIMeaning.NONE


def test_activations():
    class Const(nn.Module):
        def __init__(self, val):
            super().__init__()
            self.val = val

        def forward(self, x):
            return self.val.expand(x.shape[0], -1, *x.shape[2:])

    x = torch.zeros(1, 1, 3, 3)
    logit = torch.tensor([0.7]).view(1, 1, 1, 1)
    out = SoftmaxInferer(activation="sigmoid")(x, Const(logit))
    p = torch.sigmoid(torch.tensor(0.7))
    torch.testing.assert_close(out["pred"][0, :, 0, 0], torch.stack([1 - p, p]))
    probs = torch.tensor([0.2, 0.8]).view(1, 2, 1, 1)
    out = SoftmaxInferer(activation=None)(x, Const(probs))
    torch.testing.assert_close(out["pred"][0, :, 1, 1], probs.flatten())
    with pytest.raises(ValueError, match="sum to 1"):
        SoftmaxInferer(activation=None)(x, Const(torch.tensor([0.2, 0.3]).view(1, 2, 1, 1)))
    # several sigmoid channels: multi-label, one Bernoulli variable per channel (tests/inferers/test_sigmoid.py)
    out = SoftmaxInferer(activation="sigmoid")(x, Const(torch.tensor([0.7, -0.2]).view(1, 2, 1, 1)))
    torch.testing.assert_close(out["pred"][0, :, 0, 0], torch.sigmoid(torch.tensor([0.7, -0.2])))
    with pytest.raises(ValueError, match="activation"):
        SoftmaxInferer(activation="relu")


def test_metatensor_in_metatensor_out():
    net = small_unet()
    affine = torch.diag(torch.tensor([2.0, 1.0, 3.0, 1.0]))
    x = MetaTensor(torch.randn(1, 1, 16, 16, 16), affine=affine)
    out = MCDropoutInferer(2)(x, net)
    assert isinstance(out["mutual_information"], MetaTensor)
    torch.testing.assert_close(out["mutual_information"].affine.float(), affine)


def test_bad_input_errors():
    plain = nn.Sequential(nn.Conv3d(1, 2, 1))
    x = torch.randn(1, 1, 4, 4, 4)
    with pytest.raises(ValueError, match="no dropout layer"):
        MCDropoutInferer(2)(x, plain)
    for n in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="num_samples"):
            MCDropoutInferer(n)
    with pytest.raises(ValueError, match="activation"):
        MCDropoutInferer(2, activation="softplus")

    class NaNNet(nn.Module):
        def forward(self, x):
            return torch.full((x.shape[0], 2, *x.shape[2:]), float("nan"))

    with pytest.raises(ValueError, match="non-finite"):
        SoftmaxInferer()(x, NaNNet())
    with pytest.raises(ValueError, match="buffer_steps"):
        MCDropoutInferer(2, base_inferer=SlidingWindowInferer((4, 4, 4), buffer_steps=1))
    with pytest.raises(ValueError, match="network is required"):
        SoftmaxInferer()(x, None)
    with pytest.raises(TypeError, match="inputs"):
        SoftmaxInferer()(np.zeros((1, 1, 4, 4)), plain)
    with pytest.raises(ValueError, match="checkpoint file not found"):
        EnsembleInferer(["/nonexistent/model.pt"])
    with pytest.raises(ValueError, match="at least one"):
        EnsembleInferer([])
    with pytest.raises(ValueError, match="softmax"):
        SoftmaxInferer()(x, nn.Conv3d(1, 1, 1))


def test_works_as_monai_inferer_in_evaluator():
    from monai.engines import SupervisedEvaluator

    net = small_unet()
    data = [{"image": torch.randn(1, 1, 16, 16, 16), "label": torch.zeros(1, 1, 16, 16, 16)}]
    captured = {}

    def grab(engine):
        captured.update(engine.state.output[0] if isinstance(engine.state.output, list) else engine.state.output)

    ev = SupervisedEvaluator(device=torch.device("cpu"), val_data_loader=data, network=net,
                             inferer=MCDropoutInferer(3), decollate=False)
    from ignite.engine import Events

    ev.add_event_handler(Events.ITERATION_COMPLETED, grab)
    ev.run()
    pred = captured["pred"]
    assert isinstance(pred, dict) and pred["mutual_information"].shape == (1, 1, 16, 16, 16)
    assert float(pred["mutual_information"].max()) > 0  # dropout re-enabled inside the eval-mode evaluator


def test_simple_inferer_explicit():
    net = small_unet()
    out = MCDropoutInferer(2, base_inferer=SimpleInferer(), keys=["mutual_information"])(
        torch.randn(1, 1, 16, 16, 16), net)
    assert list(out) == ["mutual_information"]


def test_tta_with_monai_invertible_transforms():
    from monai.transforms import RandAffine, Rotate90

    net = PointwiseNet(dims=2).eval()
    x = torch.randn(2, 1, 6, 8)
    out = TTAInferer(flip_axes=(), transforms=[Rotate90(1, (0, 1))], keep_samples=True)(x, net)
    # a pointwise network commutes with rotation: the inverted prediction equals the plain one
    torch.testing.assert_close(out["samples"][0], torch.softmax(net(x), 1), atol=1e-6, rtol=0)
    rand = TTAInferer(flip_axes=(0,), transforms=[RandAffine(prob=1.0, rotate_range=(0.2,))], transform_samples=3,
                      keep_samples=True, seed=0)(x, net)
    assert rand["samples"].shape == (6, 2, 3, 6, 8) and rand.num_samples == 6
    assert float(rand["mutual_information"].max()) > 0
    with pytest.raises(TypeError, match="InvertibleTransform"):
        TTAInferer(transforms=[lambda t: t])


def test_batched_metatensor_from_collated_items():
    from monai.data import list_data_collate
    from monai.transforms import EnsureChannelFirstd

    items = [EnsureChannelFirstd("image", channel_dim="no_channel")(
        {"image": MetaTensor(torch.randn(16, 16, 16), meta={"filename_or_obj": f"c{i}"})}) for i in range(2)]
    batch = list_data_collate(items)["image"]
    out = MCDropoutInferer(2)(batch, small_unet())
    assert isinstance(out["mutual_information"], MetaTensor) and out["mutual_information"].shape[0] == 2
