"""Hostile review 60 of the training side: calibration losses, temperature scaling and their references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.temperature import TemperatureScaler


def _over_confident(seed: int = 0, classes: int = 3, n: int = 400) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (1, n), generator=g)
    z = 3.0 * torch.nn.functional.one_hot(y, classes).movedim(-1, 1).float() + 3.0 * torch.randn(
        1, classes, n, generator=g)
    return z, y


@pytest.mark.parametrize("bad", [True, np.bool_(True), 255.5, float("nan"), "255", 2**70, [255]])
def test_ignore_index_that_is_no_integer_label_is_refused_naming_it(bad):
    # True == 1 left out every voxel of class 1 silently; 255.5 / NaN left out nothing; "255" raised an
    # AttributeError inside the fit and 2**70 an OverflowError
    with pytest.raises(ValueError, match="ignore_index"):
        TemperatureScaler(ignore_index=bad)


def test_integer_ignore_index_of_any_integer_type_leaves_out_the_same_voxels():
    z, y = _over_confident()
    y = y.clone()
    y[0, :50] = 255
    fits = [TemperatureScaler(ignore_index=i).fit(z, y).temperature.item() for i in (255, np.int64(255), np.uint8(255))]
    keep = y[0] != 255
    reference = TemperatureScaler().fit(z[:, :, keep], y[:, keep]).temperature.item()
    assert fits == pytest.approx([reference] * 3, rel=1e-12)


def test_calibrate_network_counts_a_region_models_voxels_once_not_once_per_region():
    # the record's "voxels" was the size of the region masks: 3 x 72 = 216 for 72 voxels of a 3-region model
    from monai_unc.temperature import calibrate_network

    g = torch.Generator().manual_seed(0)
    masks = (torch.rand(2, 3, 6, 6, generator=g) > 0.5).float()
    z = 4 * (2 * masks - 1) + 3 * torch.randn(2, 3, 6, 6, generator=g)
    _, record = calibrate_network([z, z[:1]], [masks, masks[:1]], torch.nn.Conv2d(1, 3, 1), mode="vector",
                                  activation="sigmoid", max_steps=5)
    assert record["voxels"] == 3 * 36
    labels = torch.randint(0, 3, (2, 1, 6, 6), generator=g)
    _, record = calibrate_network([z], [labels], torch.nn.Conv2d(1, 3, 1), max_steps=5)
    assert record["voxels"] == 72


def _binary_losses():
    from monai_unc.losses import DiceCEL1ACELoss, DiceSVLSLoss, L1ACELoss, SVLSLoss

    return [
        lambda onehot: SVLSLoss(to_onehot_y=onehot, sigmoid=True, softmax=False),
        lambda onehot: L1ACELoss(to_onehot_y=onehot, sigmoid=True, softmax=False),
        lambda onehot: L1ACELoss("soft", to_onehot_y=onehot, sigmoid=True, softmax=False, reduction="none"),
        lambda onehot: DiceSVLSLoss(to_onehot_y=onehot, sigmoid=True, softmax=False),
        lambda onehot: DiceCEL1ACELoss(to_onehot_y=onehot, sigmoid=True, softmax=False),
    ]


@pytest.mark.parametrize("make", _binary_losses())
@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.float32])
def test_one_channel_sigmoid_label_map_is_the_binary_mask(make, dtype):
    # a binary model (one sigmoid channel) with a 0/1 label map and to_onehot_y=True, the MONAI bundle configuration
    # DiceCELoss(to_onehot_y=True, sigmoid=True), was refused: "target labels must be in [0, 1), got [0, 1]"
    g = torch.Generator().manual_seed(1)
    z = torch.randn(2, 1, 7, 6, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 2, (2, 1, 7, 6), generator=g)
    value = make(True)(z, y.to(dtype))
    (grad,) = torch.autograd.grad(value.sum(), z)
    reference = make(False)(z, y.double())
    (ref_grad,) = torch.autograd.grad(reference.sum(), z)
    torch.testing.assert_close(value, reference, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-12)


def test_one_channel_sigmoid_label_map_matches_monai_dice_ce():
    from monai.losses import DiceCELoss

    from monai_unc.losses import DiceSVLSLoss

    g = torch.Generator().manual_seed(2)
    z = torch.randn(2, 1, 9, 8, generator=g)
    y = torch.randint(0, 2, (2, 1, 9, 8), generator=g)
    ours = DiceSVLSLoss(to_onehot_y=True, sigmoid=True, softmax=False)
    dice = ours.dice(z, y.float())  # the Dice part, against MONAI's DiceCELoss with lambda_ce = 0
    with pytest.warns(UserWarning, match="single channel"):
        monai_dice = DiceCELoss(to_onehot_y=True, sigmoid=True, lambda_ce=0.0)(z, y)
    torch.testing.assert_close(dice, monai_dice)
    assert float(ours(z, y)) > float(dice)


@pytest.mark.parametrize("make", _binary_losses())
def test_one_channel_sigmoid_label_map_outside_0_1_is_refused(make):
    z = torch.randn(1, 1, 4, 4)
    y = torch.full((1, 1, 4, 4), 2)
    with pytest.raises(ValueError, match=r"target labels must be in \[0, 2\)"):
        make(True)(z, y)


def test_one_channel_softmax_label_1_says_a_binary_model_needs_sigmoid_or_two_channels():
    from monai_unc.losses import SVLSLoss

    with pytest.raises(ValueError, match="sigmoid=True"):
        SVLSLoss(to_onehot_y=True)(torch.randn(1, 1, 4, 4), torch.ones(1, 1, 4, 4))


@pytest.mark.parametrize("value, mode", [(0.0, "scalar"), (2.5, "scalar"), (0.0, "vector")])
def test_fit_on_logits_equal_for_every_class_does_not_say_every_voxel_is_right(value, mode):
    # an untrained or unloaded head (equal logits) was reported as "every voxel is predicted right"; the NLL is log C at
    # every temperature
    y = torch.randint(0, 3, (1, 40), generator=torch.Generator().manual_seed(0))
    z = torch.full((1, 3, 40), value)
    with pytest.warns(UserWarning, match="equal for every class at every voxel") as record:
        scaler = TemperatureScaler(mode=mode, max_steps=3).fit(z, y)
    assert not any("predicted right:" in str(w.message) for w in record)
    assert scaler.defined is False
    assert scaler.history[0]["loss"] == pytest.approx(np.log(3), rel=1e-12)


def test_region_fit_on_zero_logits_does_not_say_every_voxel_is_right():
    g = torch.Generator().manual_seed(0)
    masks = (torch.rand(1, 2, 30, generator=g) > 0.5).float()
    z = torch.zeros(1, 2, 30)
    z[:, 1] = 5 * (2 * masks[:, 1] - 1) + 4 * torch.randn(1, 30, generator=g)  # region 1 fits a temperature
    with pytest.warns(UserWarning, match="region 0: the logits are equal") as record:
        TemperatureScaler(mode="vector", activation="sigmoid", max_steps=3).fit(z, masks)
    assert "region 1" not in str(record[0].message)


@pytest.mark.parametrize("activation, mode", [("softmax", "scalar"), ("softmax", "vector"), ("sigmoid", "vector")])
def test_calibrate_refuses_equal_logits_saying_so_not_that_every_voxel_is_right(activation, mode):
    from monai_unc.workflows.calibrate import check_fit_is_defined

    z = torch.zeros(1, 3, 4, 4)
    y = torch.randint(0, 3, (1, 4, 4)) if activation == "softmax" else (torch.rand(1, 3, 4, 4) > 0.5).to(torch.uint8)
    with pytest.raises(ValueError, match="(equal for every class|logits are 0) at every voxel") as info:
        check_fit_is_defined([z], [y], activation=activation, mode=mode)
    assert "right, so" not in str(info.value)
    # logits right at every voxel keep their message
    right = 5.0 * torch.nn.functional.one_hot(torch.randint(0, 3, (1, 4, 4)), 3).movedim(-1, 1).float()
    with pytest.raises(ValueError, match="predicts every voxel of the 1 calibration case"):
        check_fit_is_defined([right], [right.argmax(1)])


@pytest.mark.parametrize("name", ["dice_ce", "dice", "ce", "dice_nacl", "dice_svls", "dice_ce_mbls",
                                  "dice_ce_hard_l1ace"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_training_losses_of_half_logits_equal_the_float64_loss_of_the_same_values(name, dtype):
    # MONAI's Dice summed a patch in float16 (0.888 instead of 0.775 for a 48 x 64 x 64 patch), Dice + CE, CE and
    # Dice + NACL of float16 logits raised blaming the Dice's smoothing, bfloat16 CE came back in bfloat16 8e-3 off
    from monai_unc.data.training import make_training_loss

    g = torch.Generator().manual_seed(0)
    z = torch.randn(1, 3, 32, 48, 48, generator=g).to(dtype).requires_grad_(True)
    y = torch.randint(0, 3, (1, 1, 32, 48, 48), generator=g)
    y[:, :, :28] = 0  # a large background: its float16 sums pass 65504
    loss = make_training_loss(name)
    value = loss(z, y)
    reference = loss(z.detach().double(), y)
    assert value.dtype == torch.float32
    assert float(value) == pytest.approx(float(reference), rel=2e-6)
    value.backward()
    assert z.grad is not None and z.grad.dtype == dtype and bool(torch.isfinite(z.grad.float()).all())


@pytest.mark.parametrize("activation, names, match", [
    ("sigmoid", ["TC", "WT"], "2 names but the logits have 3 regions"),
    ("sigmoid", "TCWTET", "sequence of names"),
    ("softmax", ["a", "b", "c"], "activation='sigmoid'"),
])
def test_calibrate_network_refuses_bad_region_names_before_the_fit(monkeypatch, activation, names, match):
    # a region_names of the wrong length was refused only after the whole fit (hours on a large calibration set); a
    # string was split into one name per character, region_names of a softmax model ignored
    from monai_unc import temperature

    def no_fit(*args, **kwargs):
        raise AssertionError("the fit ran before region_names was checked")

    monkeypatch.setattr(temperature.TemperatureScaler, "fit", no_fit)
    g = torch.Generator().manual_seed(0)
    z = torch.randn(1, 3, 6, 6, generator=g) * 4
    y = (torch.rand(1, 3, 6, 6, generator=g) > 0.5).float() if activation == "sigmoid" else z.argmax(1)
    with pytest.raises(ValueError, match=match):
        temperature.calibrate_network([z], [y], torch.nn.Conv2d(1, 3, 1), activation=activation, region_names=names)


def test_vector_softmax_fit_is_the_scipy_minimum_of_the_per_class_nll():
    # pin: the per-class temperatures are the minimiser of the float64 NLL (L-BFGS in log t) to 1e-5
    from scipy.optimize import minimize
    from scipy.special import logsumexp

    g = torch.Generator().manual_seed(3)
    y = torch.randint(0, 4, (1, 3000), generator=g)
    z = 6.0 * torch.nn.functional.one_hot(y, 4).movedim(-1, 1).float() + torch.randn(1, 4, 3000, generator=g) * \
        torch.tensor([2.0, 4.0, 6.0, 3.0]).view(1, 4, 1)
    zz, yy = z[0].double().numpy(), y[0].numpy()

    def nll(log_t: np.ndarray) -> float:
        a = zz / np.exp(log_t)[:, None]
        return float(np.mean(logsumexp(a, axis=0) - a[yy, np.arange(yy.size)]))

    best = np.exp(minimize(nll, np.zeros(4), method="L-BFGS-B", options={"ftol": 1e-15, "gtol": 1e-12}).x)
    scaler = TemperatureScaler(mode="vector").fit(z, y)
    assert scaler.converged
    np.testing.assert_allclose(scaler.temperature.numpy(), best, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("t", [2.7, 0.37])
def test_a_refused_fold_leaves_the_layer_bit_for_bit_as_it_was(dtype, t):
    # the refused fold multiplied the weights back by t: a third of float32 weights came back 1 ulp off, float16 ones
    # up to 3e-5 (1e-3 relative), although the docstring says the layer is restored
    class Residual(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(32, 32, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x) + x  # a residual addition after the logit layer: no fold divides it by t

    torch.manual_seed(0)
    net = Residual().to(dtype)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    scaler = TemperatureScaler()
    scaler.temperature = torch.tensor([t], dtype=torch.float64)
    with pytest.raises(ValueError, match="does not divide"):
        scaler.fold_into(net, example_input=torch.randn(1, 32, 4, 4).to(dtype))
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k
