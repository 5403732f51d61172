"""Defects of ``monai_unc.temperature.TemperatureScaler`` found by hostile testing: float32 rounding noise in the
NLL fit, and the ECE loss binned otherwise than ``metrics.calibration.ece``."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar

from monai_unc.metrics.calibration import ece
from monai_unc.temperature import TemperatureScaler


def _nll(z: np.ndarray, y: np.ndarray, t: float) -> float:
    """Mean NLL of softmax(z / t) over classes on axis 1, in float64 numpy (the reference)."""
    a = z / t
    a = a - a.max(1, keepdims=True)
    return float((np.log(np.exp(a).sum(1)) - np.take_along_axis(a, y[:, None], 1)[:, 0]).mean())


def test_float32_and_float64_logits_fit_the_same_nll_minimum():
    """Found by hostile testing: with float32 logits every voxel's NLL term was float32 (only the sum float64);
    its rounding noise (~1e-7 relative) made the backoff halve the learning rate six times near the optimum and
    the fit report converged=True 6e-5 (relative) short of scipy's minimum, where float64 logits reached it. Each
    chunk is computed in float64 now: both dtypes give scipy's minimum to 1e-6 and the same temperature."""
    g = torch.Generator().manual_seed(0)
    zc = torch.randn(3, 4, 16, 16, 4, generator=g) * 2
    y = torch.distributions.Categorical(logits=zc.movedim(1, -1)).sample()
    y[:, :4] = 255
    z = zc * 2.5
    zz, yy = z[:, :, 4:].double().numpy(), y[:, 4:].numpy()
    ref = minimize_scalar(lambda t: _nll(zz, yy, t), bounds=(0.05, 20), method="bounded",
                          options={"xatol": 1e-12}).x  # fmt: skip
    fitted = {}
    for dt in (torch.float32, torch.float64):
        scaler = TemperatureScaler(ignore_index=255).fit(z.to(dt), y)
        fitted[dt] = scaler.temperature.item()
        assert scaler.converged
        assert fitted[dt] == pytest.approx(ref, rel=1e-6), dt
    assert fitted[torch.float32] == pytest.approx(fitted[torch.float64], rel=1e-7)


def test_float32_and_float64_region_logits_fit_the_same_temperatures():
    """The same for region-based networks (``activation="sigmoid"``): each region's binary terms are computed in
    float64 too, so float32 and float64 logits give the same temperatures."""
    g = torch.Generator().manual_seed(2)
    zc = torch.randn(2, 3, 16, 16, 8, generator=g) * 2
    masks = (torch.rand(zc.shape, generator=g) < torch.sigmoid(zc)).float()
    z = zc * torch.tensor([3.0, 1.0, 0.5]).view(1, 3, 1, 1, 1)
    fitted = {dt: TemperatureScaler(mode="vector", activation="sigmoid").fit(z.to(dt), masks).temperature
              for dt in (torch.float32, torch.float64)}  # fmt: skip
    np.testing.assert_allclose(fitted[torch.float32].numpy(), fitted[torch.float64].numpy(), rtol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("loss", ["nll", "ece"])
def test_a_flat_loss_leaves_the_temperature_unchanged(dtype, loss):
    """Found by hostile testing: constant logits make the NLL flat (log C for every t), yet with float32 logits
    RMSprop, which normalises the gradient's size, walked t from 2.0 to 0.957 on rounding noise. In float64 the
    gradient is 0 (or far below RMSprop's epsilon): t stays at its starting value."""
    y = torch.randint(0, 3, (1, 8, 8), generator=torch.Generator().manual_seed(1))
    scaler = TemperatureScaler(loss=loss, min_bin_count=0).fit(torch.full((1, 3, 8, 8), 1.234, dtype=dtype), y)
    assert scaler.temperature.item() == pytest.approx(2.0, abs=1e-7)
    assert scaler.converged


def _edge_logit() -> float:
    """A float32 logit ``d`` whose float32 and float64 softmax of ``(d, 0)`` lie just below the edge 17 / 20."""
    d0 = np.float32(np.log(0.85 / 0.15))
    for i in range(-2000, 2000):
        d = float(d0 + np.float32(i) * np.float32(1.1920929e-07))
        p64 = 1.0 / (1.0 + np.exp(-d))
        a = torch.tensor([[d], [0.0]], dtype=torch.float32)
        p32 = torch.exp(a - torch.logsumexp(a, 0, keepdim=True))[0, 0].item()
        if p32 < 0.85 and p64 < 0.85 and p32 * 20 != 17 and np.float32(p32) * np.float32(20) == np.float32(17):
            return d
    raise AssertionError("no edge logit found")


def test_ece_loss_bins_as_the_ece_metric_at_a_bin_edge():
    """Found by hostile testing: the ECE loss binned its confidences as ``conf * n_bins`` in float32, so a
    confidence one ulp below the edge 17/20 (``0.84999996 * 20`` rounds to 17 in float32) landed one bin higher
    than in ``metrics.calibration.ece`` (loss 0.4950, ece 0.3450), contradicting the documented identity. The loss
    bins with ``confidence_bins`` (float64, the histogram's grid), as ``ece`` does."""
    edge = _edge_logit()
    d84 = float(np.log(0.84 / 0.16))
    z = torch.tensor([[edge] * 10 + [d84] * 10, [0.0] * 20], dtype=torch.float32)[None]  # (1, 2, 20)
    y = torch.tensor([[0] * 10 + [1] * 10])
    scaler = TemperatureScaler(loss="ece", n_bins=20, min_bin_count=0)
    scaler.temperature = torch.tensor([1.0], dtype=torch.float64)
    loss, _ = scaler.loss_and_grad(z, y)
    assert loss == pytest.approx(ece(torch.softmax(z.double(), 1), y, n_bins=20, min_bin_count=0), abs=1e-12)
    assert loss == pytest.approx(0.345, abs=1e-6)


@pytest.mark.parametrize("n_bins, min_bin_count", [(20, 50), (15, 0), (7, 5), (64, 10)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ece_loss_equals_ece_of_the_float64_softmax(n_bins, min_bin_count, dtype):
    """The documented identity, on many voxels and temperatures (a non-divisor of the fine grid too): the loss is
    ``ece`` of the float64 ``softmax(z / t)`` with the same binning, to rounding."""
    g = torch.Generator().manual_seed(n_bins)
    z = (torch.randn(2, 3, 24, 24, generator=g) * 3).to(dtype)
    y = torch.randint(0, 3, (2, 24, 24), generator=g)
    for t in (0.5, 1.0, 2.3):
        scaler = TemperatureScaler(loss="ece", n_bins=n_bins, min_bin_count=min_bin_count)
        scaler.temperature = torch.tensor([t], dtype=torch.float64)
        loss, _ = scaler.loss_and_grad(z, y)
        with pytest.warns(UserWarning, match="does not divide") if 15360 % n_bins else contextlib.nullcontext():
            ref = ece(torch.softmax(z.double() / t, 1), y, n_bins=n_bins, min_bin_count=min_bin_count)
        assert loss == pytest.approx(ref, abs=1e-12)


def test_calibrate_network_folds_only_where_a_check_proves_it():
    """Found by hostile testing: without example_input, calibrate_network folded t into the last Conv of MONAI's UNet
    with residual units (a residual addition follows it) and recorded folded_into_last_layer=True; the "calibrated"
    network's output was 3.4 off logits / t. Without a check it now keeps the original weights and the temperature
    (applied at load); a network that is itself the logit layer is still folded."""
    from monai.networks.nets import UNet

    from monai_unc.temperature import calibrate_network

    def unet() -> torch.nn.Module:
        torch.manual_seed(0)
        return UNet(spatial_dims=2, in_channels=1, out_channels=3, channels=(4, 8), strides=(2,), num_res_units=2)

    net = unet().eval()
    x = torch.randn(2, 1, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        z = 4 * net(x)
    y = torch.distributions.Categorical(logits=(z / 4).movedim(1, -1)).sample()
    state, record = calibrate_network([z], [y], net, max_steps=100)
    t = record["temperature"][0]
    assert t > 1.5
    assert not record["folded_into_last_layer"]
    assert torch.equal(state["temperature"], torch.tensor([t], dtype=torch.float32))
    restored = unet().eval()
    restored.load_state_dict(state["state_dict"])
    with torch.no_grad():
        torch.testing.assert_close(restored(x) / t, net(x) / t)
    layer = torch.nn.Conv2d(1, 3, 1)  # the network is its own logit layer: the fold is exact without a check
    with torch.no_grad():
        zl = 4 * layer(x)
    state, record = calibrate_network([zl], [y], layer, max_steps=100)
    assert record["folded_into_last_layer"]
    folded = torch.nn.Conv2d(1, 3, 1)
    folded.load_state_dict(state)
    with torch.no_grad():
        torch.testing.assert_close(folded(x), layer(x) / record["temperature"][0], rtol=1e-4, atol=1e-5)


def test_ece_loss_fit_on_a_small_set_reaches_the_optimum():
    """Found by hostile testing: the backoff halved the learning rate whenever the binned ECE loss rose, and on 3600
    voxels that loss ticks up on the way down the slope; the fit stalled at t = 6.83 (ECE 0.068) where the paper's
    plain RMSprop reaches 9.7 (ECE 0.0205). The rate is now halved only when the step overshot (the gradient at its
    end points back), so the default fit gets the plain fit's ECE, and the NLL fit is unchanged."""
    torch.manual_seed(3)
    zc = torch.randn(1, 3, 60, 60) * 2
    y = torch.distributions.Categorical(logits=zc.movedim(1, -1)).sample()
    z = zc * 10
    err = {}
    for backoff in (0.5, None):
        t = TemperatureScaler(loss="ece", lr_backoff=backoff).fit(z, y).temperature.item()
        err[backoff] = ece(torch.softmax(z.double() / t, 1), y, n_bins=20, min_bin_count=50)
    assert err[0.5] <= 1.05 * err[None] and err[0.5] < 0.03
