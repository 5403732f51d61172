"""Per-region temperature scaling of region-based (multi-label sigmoid) networks, against independent references:
each region's binary NLL written in numpy and minimised by scipy, autograd gradients, the ECE metric."""

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from torch import nn

from monai_unc.metrics.calibration import ece
from monai_unc.temperature import TemperatureScaled, TemperatureScaler, calibrate_network


def planted_regions(temperatures=(2.5, 0.7, 1.5), n_cases=2, side=(60, 50), seed=0):
    """Region logits ``z * T_r`` whose calibrated version ``z`` generated the masks: the optimum is ``t_r = T_r``."""
    g = torch.Generator().manual_seed(seed)
    t = torch.tensor(temperatures, dtype=torch.float32)
    z = torch.randn(n_cases, len(temperatures), *side, generator=g) * 2.0
    y = torch.bernoulli(torch.sigmoid(z), generator=g)
    return z * t.view(1, -1, *([1] * len(side))), y


def bce_np(z, y, t):
    """Binary NLL of ``sigmoid(z / t)`` against the 0/1 masks ``y`` (numpy, float64)."""
    a = np.asarray(z, dtype=np.float64) / t
    return float(np.mean(np.logaddexp(0.0, a) - np.asarray(y, np.float64) * a))


def argmin(f):
    return minimize_scalar(f, bounds=(0.05, 20.0), method="bounded", options={"xatol": 1e-9}).x


def test_vector_fit_equals_each_regions_own_minimum():
    z, y = planted_regions(seed=1)
    scaler = TemperatureScaler(mode="vector", activation="sigmoid").fit(z, y)
    zn, yn = z.numpy(), y.numpy()
    ref = [argmin(lambda t, r=r: bce_np(zn[:, r], yn[:, r], t)) for r in range(3)]
    np.testing.assert_allclose(scaler.temperature.numpy(), ref, rtol=2e-4)
    np.testing.assert_allclose(ref, [2.5, 0.7, 1.5], rtol=0.1)  # the planted temperatures, up to sampling
    assert scaler.converged


def test_scalar_fit_minimises_the_sum_of_region_means():
    z, y = planted_regions(seed=2)
    # one region with more ignored voxels: the loss is the sum of per-region means, not the pooled mean
    y[:, 2, :20] = 255
    scaler = TemperatureScaler(mode="scalar", activation="sigmoid", ignore_index=255).fit(z, y)
    zn, yn = z.numpy(), y.numpy()

    def total(t):
        return sum(bce_np(zn[:, r][yn[:, r] != 255], yn[:, r][yn[:, r] != 255], t) for r in range(3))

    assert scaler.temperature.item() == pytest.approx(argmin(total), rel=2e-4)
    value, _ = scaler.loss_and_grad(z, y)
    assert value == pytest.approx(total(scaler.temperature.item()), rel=1e-9)


def autograd_region_loss(z, y, t, loss, n_bins=20, min_count=50):
    """Sum over regions of the binary NLL / binary top-label ECE, with autograd in float64."""
    total = 0
    for r in range(z.shape[1]):
        tr = t[r] if t.numel() > 1 else t[0]
        a = z[:, r].double().reshape(-1) / tr
        yy = y[:, r].double().reshape(-1)
        if loss == "nll":
            total = total + nn.functional.binary_cross_entropy_with_logits(a, yy)
            continue
        p = torch.sigmoid(a)
        pred = p > 0.5
        conf = torch.where(pred, p, 1 - p)
        b = (conf.detach() * n_bins).long().clamp(max=n_bins - 1)
        corr = (pred.double() == yy).double()
        cs = torch.zeros(n_bins, dtype=torch.float64).index_add(0, b, conf)
        cr = torch.zeros(n_bins, dtype=torch.float64).index_add(0, b, corr)
        cn = torch.bincount(b, minlength=n_bins)
        keep = cn >= min_count
        total = total + (cs - cr)[keep].abs().sum() / cn[keep].sum()
    return total


@pytest.mark.parametrize("loss", ["nll", "ece"])
@pytest.mark.parametrize("mode", ["scalar", "vector"])
def test_analytic_gradient_matches_autograd(loss, mode):
    z, y = planted_regions(n_cases=1, seed=3)
    t0 = torch.tensor([1.3, 2.1, 0.8] if mode == "vector" else [1.6], dtype=torch.float64)
    scaler = TemperatureScaler(mode=mode, loss=loss, activation="sigmoid", chunk_size=777)
    scaler.temperature = t0.clone()
    value, grad = scaler.loss_and_grad(z, y)
    t = t0.clone().requires_grad_(True)
    ref = autograd_region_loss(z, y, t, loss)
    ref.backward()
    assert value == pytest.approx(ref.item(), rel=1e-6)
    np.testing.assert_allclose(grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-9)


def test_ece_loss_is_the_sum_of_binary_top_label_eces():
    z, y = planted_regions(seed=4)
    scaler = TemperatureScaler(loss="ece", activation="sigmoid")
    scaler.temperature = torch.tensor([2.0], dtype=torch.float64)
    value, _ = scaler.loss_and_grad(z, y)
    ref = 0.0
    for r in range(3):
        p = torch.sigmoid(z[:, r : r + 1].double() / 2.0)
        ref += ece(torch.cat([1 - p, p], 1), y[:, r].long(), n_bins=20, min_bin_count=50)
    assert value == pytest.approx(ref, rel=1e-6)
    fitted = TemperatureScaler(mode="vector", loss="ece", activation="sigmoid").fit(z, y)
    assert fitted.history[-1]["loss"] < fitted.history[0]["loss"]


def test_transform_divides_each_region_and_keeps_the_masks():
    z, y = planted_regions(seed=5)
    scaler = TemperatureScaler(mode="vector", activation="sigmoid").fit(z, y)
    out = scaler.transform(z)
    t = scaler.temperature.float()
    for r in range(3):
        torch.testing.assert_close(out[:, r], z[:, r] / t[r])
    assert torch.equal(torch.sigmoid(out) > 0.5, torch.sigmoid(z) > 0.5)
    wrapped = TemperatureScaled(nn.Identity(), scaler.temperature)
    torch.testing.assert_close(wrapped(z), out)


def test_single_region_accepts_a_mask_without_channel_and_matches_reference():
    z, y = planted_regions(temperatures=(1.8,), seed=6)
    scaler = TemperatureScaler(activation="sigmoid").fit(z, y[:, 0])
    ref = argmin(lambda t: bce_np(z.numpy(), y.numpy(), t))
    assert scaler.temperature.item() == pytest.approx(ref, rel=2e-4)


def test_streamed_batches_and_chunks_give_the_same_temperature():
    z, y = planted_regions(seed=7)
    whole = TemperatureScaler(mode="vector", activation="sigmoid").fit(z, y)
    streamed = TemperatureScaler(mode="vector", activation="sigmoid", chunk_size=500).fit(
        [z[:1], z[1:]], [y[:1], y[1:]]
    )
    np.testing.assert_allclose(streamed.temperature.numpy(), whole.temperature.numpy(), rtol=1e-4)
    l_whole, _ = whole.loss_and_grad(z, y)
    l_streamed, _ = whole.loss_and_grad([z[:1], z[1:]], [y[:1], y[1:]])
    assert l_streamed == pytest.approx(l_whole, rel=1e-12)


def test_bad_input_is_refused():
    z, y = planted_regions(seed=8)
    sig = TemperatureScaler(activation="sigmoid")
    with pytest.raises(ValueError, match="probabilities"):
        sig.fit(torch.sigmoid(z), y)
    with pytest.raises(ValueError, match="binary region masks"):
        TemperatureScaler(activation="sigmoid").fit(z, y * 2)
    with pytest.raises(ValueError, match="one binary mask per region"):
        TemperatureScaler(activation="sigmoid").fit(z, y[:, 0])
    with pytest.raises(ValueError, match="activation"):
        TemperatureScaler(activation="relu")
    with pytest.raises(ValueError, match="no voxels"):
        TemperatureScaler(activation="sigmoid", ignore_index=9).fit(z, torch.full_like(y, 9))
    with pytest.raises(ValueError, match="regions, expected"):
        TemperatureScaler(activation="sigmoid").fit([z, z[:, :2]], [y, y[:, :2]])


def test_calibrate_network_folds_per_region_temperatures():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv3d(4, 3, 1)).eval()
    x = torch.randn(2, 1, 8, 8, 6)
    with torch.no_grad():
        z = net(x) * 4.0  # overconfident: scale the last layer up
        net[2].weight.mul_(4.0)
        net[2].bias.mul_(4.0)
        torch.testing.assert_close(net(x), z)
    y = torch.bernoulli(torch.sigmoid(z / 4.0), generator=torch.Generator().manual_seed(1))
    state, record = calibrate_network(
        [z[:1], z[1:]], [y[:1], y[1:]], net, mode="vector", example_input=x, activation="sigmoid",
        region_names=["TC", "WT", "ET"],
    )
    assert record["folded_into_last_layer"] and record["activation"] == "sigmoid"
    assert record["regions"] == ["TC", "WT", "ET"] and len(record["temperature"]) == 3
    assert record["region_not_converged"] == [None, None, None]  # every region at its own NLL minimum
    assert set(record["before"]["regions"]) == {"TC", "WT", "ET"}
    assert record["after"]["nll"] < record["before"]["nll"]
    ref = np.mean([record["after"]["regions"][k]["nll"] for k in ("TC", "WT", "ET")])
    assert record["after"]["nll"] == pytest.approx(ref)
    calibrated = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv3d(4, 3, 1))
    calibrated.load_state_dict(state)
    t = torch.tensor(record["temperature"]).view(1, 3, 1, 1, 1)
    with torch.no_grad():
        torch.testing.assert_close(calibrated(x), z / t, rtol=1e-4, atol=1e-5)


def test_a_region_without_minimum_leaves_the_others_at_their_own_minimum():
    """Region 1 has no NLL minimum (every voxel right); region 0 (t about 200) is still pinned to its own minimum,
    as it is when fitted alone, and the per-region record says which region is which."""
    g = np.random.default_rng(1)
    m = (g.random((2, 2, 16, 16)) > 0.5).astype(np.float32)
    z0 = 600 * (2 * m[:, 0] - 1 + 0.8 * g.standard_normal((2, 16, 16)))  # over-confident about 200 times, some errors
    z = np.stack([z0, 5 * (2 * m[:, 1] - 1)], 1).astype(np.float32)  # region 1: every voxel right
    ref0 = minimize_scalar(lambda t: bce_np(z[:, 0], m[:, 0], t), bounds=(1e-3, 1e4), method="bounded",
                           options={"xatol": 1e-10}).x
    with pytest.warns(UserWarning, match="no temperature minimises") as said:
        scaler = TemperatureScaler(mode="vector", activation="sigmoid").fit(torch.from_numpy(z), torch.from_numpy(m))
    t = scaler.temperature.tolist()
    assert t[0] == pytest.approx(ref0, rel=2e-4)
    message = " ".join(str(w.message) for w in said)
    assert "region 1" in message and "region 0" not in message.split("region 1")[0]
    assert scaler.defined is False and scaler.converged is False and scaler.not_converged == "no_minimum"
    assert scaler.region_not_converged == [None, "no_minimum"]
    alone = TemperatureScaler(mode="vector", activation="sigmoid").fit(torch.from_numpy(z[:, :1]),
                                                                       torch.from_numpy(m[:, :1]))
    assert alone.region_not_converged == [None] and t[0] == pytest.approx(alone.temperature.item(), rel=2e-4)


def test_a_region_without_labelled_voxel_is_refused_by_name():
    """A region whose every target voxel is ``ignore_index`` has no data to fit its temperature on: refused naming it
    (it kept the starting value 2.0, reported converged), in a per-region fit only; a shared one fits the others."""
    g = np.random.default_rng(0)
    m = (g.random((2, 2, 12, 12)) > 0.5).astype(np.float32)
    z = torch.from_numpy((4 * (2 * m - 1) + 3 * g.standard_normal(m.shape)).astype(np.float32))
    m[:, 1] = 255
    for loss in ("nll", "ece"):
        scaler = TemperatureScaler(mode="vector", activation="sigmoid", ignore_index=255, loss=loss, min_bin_count=1)
        with pytest.raises(ValueError, match=r"region 1 has no labelled voxel.*ignore_index=255"):
            scaler.fit(z, torch.from_numpy(m))
        assert not scaler.fitted
    shared = TemperatureScaler(activation="sigmoid", ignore_index=255).fit(z, torch.from_numpy(m))
    ref = minimize_scalar(lambda t: bce_np(z[:, 0].numpy(), m[:, 0], t), bounds=(1e-2, 1e2), method="bounded",
                          options={"xatol": 1e-10}).x
    assert shared.converged and shared.temperature.item() == pytest.approx(ref, rel=2e-4)
