"""TemperatureScaler: planted temperatures, analytic gradients vs autograd, streaming, folding into a layer."""

import numpy as np
import pytest
import torch
from monai.networks.nets import BasicUNet, UNet
from torch import nn

from monai_unc.metrics.calibration import ece
from monai_unc.temperature import TemperatureScaler


def planted(n_cases=2, side=(120, 100), n_cls=3, temperature=2.5, seed=0):
    """Logits ``z * T`` whose calibrated version ``z`` generated the labels: the optimum is ``t = T``."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n_cases, n_cls, *side, generator=g) * 2.0
    t = torch.as_tensor(temperature, dtype=torch.float32)
    p = torch.softmax(z, 1)
    labels = torch.multinomial(p.movedim(1, -1).reshape(-1, n_cls), 1, generator=g).view(n_cases, *side)
    scale = t.view(1, -1, *([1] * len(side))) if t.ndim else t
    return z * scale, labels


def autograd_loss(z, y, t, loss, n_bins=20, min_count=50):
    """The same losses written with autograd in float64 (bins fixed by the detached confidence)."""
    n_cls = z.shape[1]
    a = z.double().movedim(1, -1).reshape(-1, n_cls) / t
    yy = y.reshape(-1)
    if loss == "nll":
        return nn.functional.cross_entropy(a, yy)
    p = torch.softmax(a, 1)
    conf, pred = p.max(1)
    b = (conf.detach() * n_bins).long().clamp(max=n_bins - 1)
    corr = (pred == yy).double()
    cs = torch.zeros(n_bins, dtype=torch.float64).index_add(0, b, conf)
    cr = torch.zeros(n_bins, dtype=torch.float64).index_add(0, b, corr)
    cn = torch.bincount(b, minlength=n_bins)
    keep = cn >= min_count
    return (cs - cr)[keep].abs().sum() / cn[keep].sum()


@pytest.mark.parametrize("loss", ["nll", "ece"])
@pytest.mark.parametrize("mode", ["scalar", "vector"])
def test_analytic_gradient_matches_autograd(loss, mode):
    z, y = planted(n_cases=1, side=(60, 50), temperature=2.0, seed=1)
    t0 = torch.tensor([1.3, 2.1, 0.8] if mode == "vector" else [1.6], dtype=torch.float64)
    scaler = TemperatureScaler(mode=mode, loss=loss)
    scaler.temperature = t0.clone()
    value, grad = scaler.loss_and_grad(z, y)
    t = t0.clone().requires_grad_(True)
    ref = autograd_loss(z, y, t if mode == "vector" else t[0], loss)
    ref.backward()
    assert value == pytest.approx(ref.item(), rel=1e-6)
    np.testing.assert_allclose(grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-9)


def test_ece_loss_equals_the_ece_metric():
    z, y = planted(n_cases=2, side=(50, 40), temperature=3.0, seed=2)
    scaler = TemperatureScaler(loss="ece")
    value, _ = scaler.loss_and_grad(z, y)
    probs = torch.softmax(z.double() / 2.0, 1)
    assert value == pytest.approx(ece(probs, y, n_bins=20, min_bin_count=50), rel=1e-6)


@pytest.mark.parametrize("planted_t", [2.5, 0.7])
def test_recovers_a_planted_scalar_temperature(planted_t):
    z, y = planted(temperature=planted_t, seed=3)
    scaler = TemperatureScaler().fit(z, y)
    t = scaler.temperature.item()
    assert abs(t / planted_t - 1) < 0.02, t
    assert scaler.converged and len(scaler.history) < 1000
    # the fit improves calibration: NLL and ECE at the fitted t are lower than at t = 1
    calibrated = scaler.transform(z)
    assert ece(torch.softmax(calibrated, 1), y) < ece(torch.softmax(z, 1), y)
    assert torch.equal(calibrated.argmax(1), z.argmax(1))  # scalar scaling keeps the segmentation


def test_recovers_a_planted_temperature_with_the_ece_loss():
    z, y = planted(temperature=2.5, seed=4)
    scaler = TemperatureScaler(loss="ece").fit(z, y)
    assert abs(scaler.temperature.item() / 2.5 - 1) < 0.05
    assert scaler.history[-1]["loss"] < scaler.history[0]["loss"]


def test_recovers_planted_vector_temperatures():
    planted_t = [1.6, 2.4, 3.0]
    z, y = planted(n_cases=3, temperature=planted_t, seed=5)
    scaler = TemperatureScaler(mode="vector").fit(z, y)
    np.testing.assert_allclose(scaler.temperature.numpy(), planted_t, rtol=0.05)
    assert scaler.temperature.shape == (3,)


def test_streaming_equals_one_batch():
    """Chunked gradient accumulation over batches gives the same trajectory as one big batch."""
    z, y = planted(n_cases=3, side=(40, 30), temperature=2.3, seed=6)
    whole = TemperatureScaler(max_steps=15).fit(z, y)
    batches = [z[i : i + 1] for i in range(3)]
    labels = [y[i : i + 1, None] for i in range(3)]  # (B, 1, *spatial) labels
    streamed = TemperatureScaler(max_steps=15, chunk_size=333).fit(batches, labels)
    assert streamed.temperature.item() == pytest.approx(whole.temperature.item(), abs=1e-9)
    from_callables = TemperatureScaler(max_steps=15, chunk_size=1000).fit(
        lambda: (b.numpy() for b in batches), lambda: (lab.numpy() for lab in labels)
    )
    assert from_callables.temperature.item() == pytest.approx(whole.temperature.item(), abs=1e-9)
    with pytest.raises(TypeError, match="one-shot iterator"):
        TemperatureScaler().fit(iter(batches), labels)


def test_plain_rmsprop_and_history():
    z, y = planted(n_cases=1, side=(40, 40), temperature=2.2, seed=7)
    scaler = TemperatureScaler(lr_backoff=None, max_steps=30).fit(z, y)
    assert len(scaler.history) <= 30
    assert all(h["lr"] == 0.05 for h in scaler.history)
    best = min(scaler.history, key=lambda h: h["loss"])
    assert scaler.temperature.tolist() == best["temperature"]


def test_ignore_index_and_dtypes():
    z, y = planted(n_cases=1, side=(50, 40), temperature=2.0, seed=8)
    y_ign = y.clone()
    y_ign[:, :10] = 255
    a = TemperatureScaler(ignore_index=255, max_steps=20).fit(z, y_ign)
    b = TemperatureScaler(max_steps=20).fit(z[:, :, 10:], y[:, 10:])
    assert a.temperature.item() == pytest.approx(b.temperature.item(), abs=1e-9)
    half = TemperatureScaler(max_steps=20).fit(z.half(), y)
    as_float = TemperatureScaler(max_steps=20).fit(z.half().float(), y)
    assert half.temperature.item() == pytest.approx(as_float.temperature.item())


def _fit_or_error(dtype, y, ignore_index, **kwargs):
    """The fitted temperature, or the ValueError's message, of a fit on labels ``y`` cast to ``dtype``."""
    z = kwargs.pop("z")
    try:
        scaler = TemperatureScaler(ignore_index=ignore_index, max_steps=20, **kwargs)
        return scaler.fit(z, y.to(dtype)).temperature.item()
    except ValueError as error:
        return str(error).split(":")[0]


@pytest.mark.parametrize("activation", ["softmax", "sigmoid"])
def test_ignore_index_is_compared_as_a_number_whatever_the_label_dtype(activation):
    """An ``ignore_index`` the label dtype cannot hold matches no voxel: torch cast it to the labels' dtype first, so
    with uint8 labels 256 left out every voxel of class 0 and -1 every voxel labelled 255 (int64 labels refuse 255)."""
    g = torch.Generator().manual_seed(3)
    if activation == "softmax":
        y = torch.randint(0, 3, (2, 12, 12), generator=g)
        z = 4.0 * torch.nn.functional.one_hot(y, 3).permute(0, 3, 1, 2).float()
        z = z + 2 * torch.randn(2, 3, 12, 12, generator=g)
    else:
        y = (torch.rand(2, 2, 12, 12, generator=g) > 0.5).long()
        z = 4.0 * (2 * y - 1).float() + 2 * torch.randn(2, 2, 12, 12, generator=g)
    kw = {"z": z, "activation": activation}
    y255 = y.clone()
    y255[:, :2] = 255
    yneg = y.clone()
    yneg[:, :2] = -1
    cases = [(y, 256, (torch.uint8, torch.int16, torch.float16)), (y255, -1, (torch.uint8,)),
             (yneg, 255, (torch.int8,)), (y, 2**40, (torch.int32, torch.float32))]
    for labels, ignore_index, dtypes in cases:
        reference = _fit_or_error(torch.int64, labels, ignore_index, **dict(kw))
        for dtype in dtypes:
            assert _fit_or_error(dtype, labels, ignore_index, **dict(kw)) == reference, (dtype, ignore_index)
    assert isinstance(_fit_or_error(torch.int64, y, 256, **dict(kw)), float)  # nothing left out
    assert isinstance(_fit_or_error(torch.int64, y255, -1, **dict(kw)), str)  # 255 refused


def test_transform_follows_input_library():
    scaler = TemperatureScaler(mode="vector", num_classes=3)
    scaler.temperature = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
    z = np.ones((2, 3, 4, 4), dtype=np.float32)
    out = scaler.transform(z)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_allclose(out[0, :, 0, 0], [1.0, 0.5, 0.25])
    assert torch.allclose(scaler(torch.from_numpy(z)), torch.from_numpy(out))
    with pytest.raises(ValueError, match="classes"):
        scaler.transform(np.ones((1, 4, 2, 2), dtype=np.float32))


def _check_fold(model, mode, x):
    scaler = TemperatureScaler(mode=mode, num_classes=3)
    scaler.temperature = torch.tensor([1.5, 2.5, 0.8] if mode == "vector" else [2.7], dtype=torch.float64)
    with torch.no_grad():
        before = model(x)
    scaler.fold_into(model, example_input=x)
    with torch.no_grad():
        after = model(x)
    torch.testing.assert_close(after, scaler.transform(before), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["scalar", "vector"])
def test_fold_into_final_layer(mode):
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Conv3d(2, 4, 3, padding=1), nn.ReLU(), nn.Conv3d(4, 3, 1)).eval()
    _check_fold(seq, mode, torch.randn(1, 2, 6, 6, 6))
    net = BasicUNet(spatial_dims=2, in_channels=1, out_channels=3, features=(4, 4, 4, 4, 4, 4)).eval()
    _check_fold(net, mode, torch.randn(1, 1, 32, 32))
    lin = nn.Linear(5, 3)
    _check_fold(lin, mode, torch.randn(4, 5))
    up = nn.Sequential(nn.Conv2d(1, 4, 1), nn.ConvTranspose2d(4, 3, 2, stride=2)).eval()
    _check_fold(up, mode, torch.randn(1, 1, 4, 4))


def test_fold_into_refuses_a_layer_that_is_not_last():
    torch.manual_seed(0)
    # a residual unit follows the last transposed convolution: scaling it does not scale the output
    net = UNet(spatial_dims=2, in_channels=1, out_channels=3, channels=(4, 8), strides=(2,), num_res_units=1).eval()
    x = torch.randn(1, 1, 8, 8)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    scaler = TemperatureScaler()
    scaler.temperature = torch.tensor([2.0], dtype=torch.float64)
    with pytest.raises(ValueError, match="does not divide"):
        scaler.fold_into(net, example_input=x)
    for k, v in net.state_dict().items():
        torch.testing.assert_close(v, state[k])  # restored
    with pytest.raises(ValueError, match="no submodule"):
        scaler.fold_into(net, layer="nope")
    with pytest.raises(TypeError, match="cannot fold"):
        scaler.fold_into(net, layer=nn.ReLU())


def test_bad_inputs():
    z, y = planted(n_cases=1, side=(8, 8), seed=9)
    with pytest.raises(ValueError, match="mode"):
        TemperatureScaler(mode="matrix")
    with pytest.raises(ValueError, match="loss"):
        TemperatureScaler(loss="brier")
    with pytest.raises(ValueError, match="init_temperature"):
        TemperatureScaler(init_temperature=0)
    bad = z.clone()
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="logits"):
        TemperatureScaler().fit(bad, y)
    with pytest.raises(ValueError, match="target"):
        TemperatureScaler().fit(z, y + 3)
    with pytest.raises(ValueError, match="target must have shape"):
        TemperatureScaler().fit(z, y[:, :4])
    with pytest.raises(ValueError, match="empty"):
        TemperatureScaler().fit([], [])
    with pytest.raises(ValueError, match="no voxels"):
        TemperatureScaler(ignore_index=0).fit(z, torch.zeros_like(y))
