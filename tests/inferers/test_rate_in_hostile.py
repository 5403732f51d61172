"""Hostile input for Rate-In: controller arguments, vector and constant feature maps, rate bounds vs default rates."""

import collections
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from monai_unc.inferers import (
    RateInDropout,
    RateInInferer,
    add_rate_in,
    convert_dropout_to_rate_in,
    mutual_information_loss,
    remove_rate_in,
    search_dropout_rate,
    ssim_loss,
)


def _net(p: float) -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Dropout2d(p), nn.Conv2d(8, 3, 1)).eval()


@pytest.mark.parametrize("name", ["target_loss", "p_init", "lr", "lr_decay", "tol", "p_min", "p_max"])
@pytest.mark.parametrize("bad", [True, "0.1", None])
def test_controller_numbers_must_be_real_numbers(name, bad):
    # True was read as 1.0 (target_loss=True drove every rate to p_max) and "0.1" as 0.1
    with pytest.raises(TypeError, match=name):
        search_dropout_rate(torch.randn(1, 4, 5, 5), "mse", **{name: bad})


@pytest.mark.parametrize("name", ["lr", "tol"])
def test_infinite_step_or_tolerance_is_refused(name):
    # lr=inf jumped every rate to p_min or p_max; tol=inf stopped at p_init: neither is a search
    with pytest.raises(ValueError, match=name):
        search_dropout_rate(torch.randn(1, 4, 5, 5), "mse", **{name: float("inf")})


def test_layer_rate_must_be_a_number_named_p():
    with pytest.raises(TypeError, match="p must be"):
        RateInDropout(p=True)
    with pytest.raises(TypeError, match="p must be"):
        RateInDropout(p="0.2")


def test_default_mi_adapts_on_vector_features():
    # (B, C) features (a linear layer) get element-wise masks; "mi" meant the Gaussian estimate there, whose covariance
    # over one "voxel" is 0: every loss NaN, and the rate never left p_init
    torch.manual_seed(0)
    x = torch.randn(4, 64)
    res = search_dropout_rate(x, "mi", target_loss=0.3, p_init=0.05, tol=0.05, max_iter=30)
    assert bool(torch.isfinite(res.losses).all())
    assert bool((res.rates > 0.05).all())
    assert bool(res.converged.all())


def test_rate_in_layer_after_a_linear_layer_adapts():
    torch.manual_seed(0)
    layer = RateInDropout(p=0.05, target_loss=0.3, tol=0.05, max_iter=30).train()
    layer(torch.randn(3, 64))
    assert bool(torch.isfinite(layer.last_search.losses).all())
    assert bool((layer.rates > 0.05).all())


@pytest.mark.parametrize("shape", [(2, 8), (2, 4, 8)])
def test_ssim_loss_on_maps_without_two_or_three_spatial_axes_is_refused_by_name(shape):
    # was an IndexError from inside MONAI's SSIM
    with pytest.raises(ValueError, match="ssim"):
        search_dropout_rate(torch.randn(*shape), "ssim")
    with pytest.raises(ValueError, match="ssim"):
        RateInDropout(loss="ssim").train()(torch.randn(*shape))


def test_converted_rate_below_p_min_starts_at_p_min():
    # a network's Dropout2d(0.05) with p_min=0.1: ValueError "p_init must be in [0.1, 0.9], got 0.05" although the
    # caller never chose p_init
    net = _net(0.05)
    assert convert_dropout_to_rate_in(net, p_min=0.1) == ["2"]
    assert net[2].p == pytest.approx(0.1)
    remove_rate_in(net)
    torch.manual_seed(0)
    out = RateInInferer(num_samples=2, p_min=0.1, seed=0)(torch.rand(1, 1, 8, 8), _net(0.05))
    assert float(out.extras["rate_in_rates"]["2"].min()) >= 0.1


def test_inserted_default_rate_respects_p_min():
    # the default initial rate (the target, 0.1) below p_min=0.5 made RateInInferer(p_min=0.5) fail when built
    inferer = RateInInferer(num_samples=2, p_min=0.5, placement="insert", after=["1"], seed=0)
    out = inferer(torch.rand(1, 1, 8, 8), _net(0.0))
    assert float(out.extras["rate_in_rates"]["1"].min()) >= 0.5
    net = _net(0.0)
    add_rate_in(net, after=["1"], p_min=0.5)
    assert remove_rate_in(net) == 1


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        # each refused under the name the caller gave (found by hostile testing): RateInDropout(p=0.95) said
        # "p_init must be in [p_min, p_max]", RateInInferer(p_init=0) "p (the initial rate) must be > 0", and
        # RateInInferer(target_loss=nan) "p (the initial rate) must be > 0, got nan" (the default p was derived from it)
        (lambda: RateInDropout(p=0.95), r"^p must be in \[p_min, p_max\]"),
        (lambda: RateInDropout(p=1.5), r"^p must be in \[p_min, p_max\]"),
        (lambda: RateInInferer(num_samples=2, p_init=0), r"^p_init \(the initial rate\) must be > 0"),
        (lambda: RateInInferer(num_samples=2, p_init=float("nan")), r"^p_init \(the initial rate\) must be > 0"),
        (lambda: RateInInferer(num_samples=2, p_init=0.95), r"^p_init must be in \[p_min, p_max\]"),
        (lambda: RateInInferer(num_samples=2, target_loss=float("nan")), r"^target_loss must be in \[0, 1\]"),
        (lambda: RateInInferer(num_samples=2, target_loss=1.5), r"^target_loss must be in \[0, 1\]"),
        (lambda: add_rate_in(_net(0.2), after=["0"], target_loss=float("nan")), r"^target_loss must be in \[0, 1\]"),
    ],
)
def test_rate_settings_are_refused_under_the_name_given(make, expected):
    with pytest.raises(ValueError, match=expected):
        make()


@pytest.mark.parametrize("bad", ["no", None, 1])
def test_channelwise_must_be_a_bool(bad):
    # found by hostile testing: channelwise="no" was taken as True (channel masks), None as False, without a word
    if bad is not None:  # None: RateInInferer's "not given"
        with pytest.raises(TypeError, match="channelwise must be True or False"):
            RateInInferer(num_samples=2, channelwise=bad)
    with pytest.raises(TypeError, match="channelwise must be True or False"):
        RateInDropout(channelwise=bad)
    with pytest.raises(TypeError, match="channelwise must be True or False"):
        search_dropout_rate(torch.randn(1, 4, 5, 5), "mse", channelwise=bad)
    if bad is not None:  # None: add_rate_in's "per site" (default_channelwise, review 66)
        with pytest.raises(TypeError, match="channelwise must be True or False"):
            add_rate_in(_net(0.2), after=["0"], channelwise=bad)
    assert RateInDropout(channelwise=np.bool_(False)).channelwise is False


def test_explicit_initial_rate_outside_the_bounds_is_still_refused():
    with pytest.raises(ValueError, match="p_init"):
        RateInInferer(num_samples=2, p_min=0.5, p_init=0.1)
    with pytest.raises(ValueError, match=r"^p must be in \[p_min, p_max\]"):  # the argument given here is p
        convert_dropout_to_rate_in(_net(0.2), p=0.05, p_min=0.1)


@pytest.mark.parametrize("loss", ["mi", "ssim"])
def test_constant_and_zero_maps_keep_the_initial_rate_with_undefined_loss(loss):
    # zero information: the loss is undefined (NaN), the rate stays (with a warning), nothing "converges". SSIM gave
    # 1 - SSIM = 0 at every rate on such maps (SSIM of equal constant maps is 1 through its constants), silently, and
    # the search raised the rate towards p_max
    for x in (torch.zeros(2, 8, 6, 6), torch.ones(2, 8, 6, 6)):
        with pytest.warns(UserWarning, match=r"undefined \(NaN\).*keeps the rate it had \(p_init=0.2 "):
            res = search_dropout_rate(x, loss, p_init=0.2)
        assert torch.equal(res.rates, torch.full((2,), 0.2, dtype=torch.float64))
        assert bool(torch.isnan(res.losses).all()) and not bool(res.converged.any())
        assert res.iterations.tolist() == [1, 1]
    fn = mutual_information_loss if loss == "mi" else ssim_loss
    with pytest.warns(UserWarning, match="constant"):
        assert bool(torch.isnan(fn(torch.zeros(1, 4, 5, 5), torch.zeros(1, 4, 5, 5))).all())


@pytest.mark.parametrize("max_iter", [1, 3])
def test_the_loop_stops_at_max_iter(max_iter):
    torch.manual_seed(0)
    res = search_dropout_rate(torch.randn(2, 8, 6, 6), "mse", target_loss=0.8, tol=1e-9, max_iter=max_iter)
    assert res.iterations.tolist() == [max_iter, max_iter]
    assert not bool(res.converged.any())


def test_network_is_restored_after_an_exception_in_the_forward_pass():
    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.Dropout2d(0.2), Boom()).eval()
    with pytest.raises(RuntimeError, match="boom"):
        RateInInferer(num_samples=2, seed=0)(torch.rand(1, 1, 6, 6), net)
    assert type(net[1]) is nn.Dropout2d and not net[1].training
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert remove_rate_in(net) == 0


@pytest.mark.parametrize("shape", [(4, 8), (4, 8, 1, 1)])
def test_gaussian_information_loss_needs_voxels(shape):
    # a covariance over one voxel is 0: NaN with the warning "the feature map is constant", which it is not
    torch.manual_seed(0)
    x = torch.randn(*shape)
    with pytest.raises(ValueError, match="fewer than 2 voxels"):
        mutual_information_loss(x, x * (torch.rand(*shape) > 0.5))
    with pytest.raises(ValueError, match="fewer than 2 voxels"):
        search_dropout_rate(x, "mi_gaussian")


def test_default_mi_adapts_on_one_voxel_maps():
    torch.manual_seed(0)
    res = search_dropout_rate(torch.randn(4, 64, 1, 1), "mi", target_loss=0.3, p_init=0.05, tol=0.05, max_iter=30)
    assert bool(torch.isfinite(res.losses).all()) and bool((res.rates > 0.05).all())


@pytest.mark.parametrize("loss", ["mi", "mse"])
def test_search_pass_applies_a_representative_mask_not_the_last_draw(monkeypatch, loss):
    # the search pass applied the last mask of the last iteration, whatever its own loss: with 4 channels at a rate
    # of 0.14 one mask in 2,700 drops every channel (it happened in a RateInInferer call on a small UNet), and every
    # later layer of that input was searched on a map without the image (the next one kept p_init with a NaN loss).
    # Of the final draws the mask whose own loss is nearest their mean is applied
    from monai_unc.inferers import rate_in as ri

    scripted = iter([1.0, 1.0, 1.0, 0.0])  # three draws keep every channel, the last drops all four

    def draw(x, rates, channelwise):
        return torch.full(ri._mask_shape(x, channelwise), next(scripted), dtype=x.dtype)

    monkeypatch.setattr(ri, "_draw_keep", draw)
    torch.manual_seed(0)
    x = torch.randn(1, 4, 6, 6, 6)
    layer = RateInDropout(p=0.14, loss=loss, max_iter=1, draws=4).train()
    y = layer(x)
    assert layer.last_search.losses.tolist() == pytest.approx([0.25])  # (0 + 0 + 0 + 1) / 4
    assert bool(layer.last_search.keep.eq(1).all())
    torch.testing.assert_close(y, x / 0.86)  # kept: the draw nearest the mean, not the erasing last one


def test_ssim_leaves_constant_channels_out_of_the_average():
    # a channel constant in pre had its range clamped to 1e-12: under element-wise dropout any dropped element made its
    # windows' SSIM about 0, a loss of about 1 for that channel at any rate (one such channel of 8, at 5 or at 1e-3,
    # drove the searched rate from 0.17 to 0.005), and an all-zero channel counted as no loss (a diluted loss, a
    # higher rate); now such channels are left out, as the MSE and MI losses give them no weight
    torch.manual_seed(0)
    live = torch.randn(1, 3, 9, 9, 9)
    keep = (torch.rand(1, 5, 9, 9, 9) >= 0.05).float()
    expected = ssim_loss(live, live * keep[:, :3])
    for constant in (5.0, 1e-3, 0.0):
        x = torch.cat([live, torch.full((1, 2, 9, 9, 9), constant)], 1)
        torch.testing.assert_close(ssim_loss(x, x * keep), expected, atol=1e-12, rtol=0)


_Pair = collections.namedtuple("_Pair", "a b")


@pytest.mark.parametrize("kind", ["namedtuple", "dict"])
def test_rate_in_hook_samples_every_tensor_of_a_container_output(kind):
    """As post-hoc dropout's hook (tests/networks/test_dropout_hostile.py), Rate-In's rebuilt a container with
    ``type(x)(generator)``: a named tuple output raised ``TypeError`` and a dict output came back undropped."""
    from monai_unc.inferers import RateInHook

    torch.manual_seed(0)
    hook = RateInHook(RateInDropout(p=0.5, mode="fixed"))
    hook.mc_enabled = True
    x = torch.ones(1, 4, 8, 8)
    out = _Pair(x, 2 * x) if kind == "namedtuple" else {"a": x, "b": [2 * x], "n": 3}
    dropped = hook(nn.Identity().eval(), (x,), out)
    assert type(dropped) is type(out)
    a, b = (dropped.a, dropped.b) if kind == "namedtuple" else (dropped["a"], dropped["b"][0])
    for t in (a, b):
        zeroed = (t == 0).flatten(2).all(-1)
        assert bool(zeroed.any()) and not bool(zeroed.all())  # channelwise: some whole channels dropped
    if kind == "dict":
        assert dropped["n"] == 3


@pytest.mark.parametrize("loss", ["mi", "mi_gaussian", "mi_binned", "ssim", "mse"])
@pytest.mark.parametrize("channelwise", [True, False])
def test_non_finite_maps_keep_the_initial_rate_without_validation(loss, channelwise):
    # found by hostile testing: without validation (as inside a network, where an activation can overflow) the
    # documented "a non-finite map gives a NaN loss and keeps p_init" failed for the default "mi" with a LinAlgError
    # (Gaussian estimate) or "bincount only supports ... non-negative" (binned estimate), for the whole batch
    torch.manual_seed(0)
    x = torch.randn(3, 4, 6, 6)
    x[0, 0, 0, 0] = float("nan")
    x[2, 1, 2, 3] = float("inf")
    with pytest.warns(UserWarning, match="non-finite"):
        res = search_dropout_rate(x, loss, 0.2, channelwise=channelwise, validate=False, p_init=0.15)
    assert res.rates[0] == 0.15 and res.rates[2] == 0.15
    assert torch.isnan(res.losses[[0, 2]]).all() and (res.iterations[[0, 2]] == 0).all()
    assert not res.converged[[0, 2]].any()
    assert torch.isfinite(res.losses[1]) and res.iterations[1] >= 1 and res.rates[1] != 0.15
    assert set(res.keep.unique().tolist()) <= {0.0, 1.0}
    layer = RateInDropout(p=0.15, target_loss=0.2, loss=loss, channelwise=channelwise).train()
    with pytest.warns(UserWarning, match="undefined"):
        y = layer(x)
    assert y.shape == x.shape and torch.isfinite(y[1]).all()


def _binned_loss_reference(pre: np.ndarray, post: np.ndarray, bins: int = 64) -> np.ndarray:
    """1 - I(pre; post) / H(pre) with numpy: pre on ``bins`` equal-width bins over its range, post on the same
    edges with one more bin below and one above (the erased zeros of a map whose range excludes 0)."""
    out = []
    for a, y in zip(pre.reshape(len(pre), -1), post.reshape(len(post), -1)):
        edges = np.linspace(a.min(), a.max(), bins + 1)
        y_edges = np.concatenate([[-np.inf], edges[:-1], [edges[-1], np.nextafter(edges[-1], np.inf), np.inf]])
        joint, _, _ = np.histogram2d(a, y, bins=[edges, y_edges])
        joint /= joint.sum()
        px, py = joint.sum(1), joint.sum(0)
        nz = joint > 0
        mi = (joint[nz] * np.log(joint[nz] / np.outer(px, py)[nz])).sum()
        hx = -(px[px > 0] * np.log(px[px > 0])).sum()
        out.append(1 - mi / hx)
    return np.array(out)


@pytest.mark.parametrize("offset", [0.0, 5.0, -5.0, 1e3])
def test_binned_information_loss_of_a_map_away_from_zero(offset):
    # found by hostile testing: the bins spanned the range of pre *and 0*, so the map 5 + 0.05 u (not constant) fell
    # into one bin: loss NaN with "the feature map is constant", and Rate-In kept p_init; a map in [5, 6] used 11 of
    # the 64 bins. The erased elements are a value of their own, whatever the offset of the map
    torch.manual_seed(0)
    base = 0.05 * torch.rand(2, 4, 8, 8, 8, dtype=torch.float64)
    keep = (torch.rand(base.shape) > 0.3).double()
    x = base + offset
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss = mutual_information_loss(x, x * keep, estimator="binned")
    np.testing.assert_allclose(loss.numpy(), _binned_loss_reference(x.numpy(), (x * keep).numpy()), atol=1e-9)
    if offset != 0.0:  # the erased value 0 is outside the range: the loss does not depend on where the map lies
        shifted = base + 2 * offset
        np.testing.assert_allclose(loss.numpy(), mutual_information_loss(shifted, shifted * keep,
                                                                          estimator="binned").numpy(), atol=1e-9)
        res = search_dropout_rate(x.float(), "mi", 0.2, channelwise=False)
        assert torch.isfinite(res.losses).all() and res.converged.all()


class _ReusedDropout(nn.Module):
    """One dropout module applied after two convolutions (a common pattern)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2, self.c3 = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 2, 1)
        self.drop = nn.Dropout2d(0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.drop(torch.relu(self.c1(x)))
        return self.c3(self.drop(torch.relu(self.c2(x))))


def test_a_dropout_module_called_twice_in_one_pass_is_warned_about():
    # found by hostile testing: searched at both places, only the last search was kept and the samples applied its
    # rates at both places, with one record and no word
    torch.manual_seed(0)
    net = _ReusedDropout().eval()
    with pytest.warns(UserWarning, match=r"called more than once in one forward pass: \['drop \(2 times\)'\]"):
        RateInInferer(num_samples=2, seed=0)(torch.rand(1, 1, 12, 12), net)
    with warnings.catch_warnings():  # one call per pass: no such warning
        warnings.simplefilter("error")
        RateInInferer(num_samples=2, seed=0)(torch.rand(1, 1, 12, 12), _net(0.2))
    assert isinstance(net.drop, nn.Dropout2d)


@pytest.mark.parametrize("bad", [4, 2, 0, -3, 3.0, True])
def test_ssim_window_must_be_a_positive_odd_integer(bad):
    # found by hostile testing: kernel_size=4 was used as 3 without a word (scikit-image refuses an even win_size)
    x = torch.randn(1, 2, 16, 16)
    with pytest.raises(ValueError, match="kernel_size must be a positive odd integer"):
        ssim_loss(x, x * 0.5, kernel_size=bad)


@pytest.mark.parametrize(("bad", "error"), [(True, TypeError), ("0.1", TypeError), (float("inf"), ValueError),
                                            (float("nan"), ValueError), (0.0, ValueError)])
def test_loss_settings_must_be_positive_finite_numbers(bad, error):
    # found by hostile testing: eps=True / kernel_sigma=True were read as 1, eps=inf failed inside LAPACK and "0.1"
    # with "'>' not supported between instances of 'str' and 'int'"
    x = torch.randn(1, 4, 8, 8)
    with pytest.raises(error, match="eps must be"):
        mutual_information_loss(x, x * 0.5, eps=bad)
    with pytest.raises(error, match="kernel_sigma must be"):
        ssim_loss(x, x * 0.5, kernel_sigma=bad)


def test_numpy_integer_counts_are_integers():
    """Found by hostile testing: ``RateInInferer(num_samples=np.int64(3))`` (and ``max_iter`` / ``draws``, the search's
    ``draws``, ``ssim_loss(kernel_size=)``, ``mutual_information_loss(bins=)``) were refused with "must be an integer
    >= 1, got np.int64(3)", where ``MCDropoutInferer`` and the SSN settings take numpy integers; they are ``int`` s in
    the settings record (JSON). Bools, floats and strings stay refused, naming the argument."""
    import json

    torch.manual_seed(0)
    x = torch.rand(1, 1, 6, 6)
    inferer = RateInInferer(num_samples=np.int64(2), max_iter=np.int64(3), draws=np.int64(2), seed=0)
    out = inferer(x, _net(0.2))
    assert out.num_samples == 2 and int(out.extras["rate_in_iterations"]["2"].max()) <= 3
    settings = inferer.source.applied_settings(_net(0.2))
    assert type(settings["num_samples"]) is int and type(settings["max_iter"]) is int
    assert type(settings["draws"]) is int
    json.dumps(settings)
    res = search_dropout_rate(torch.randn(1, 4, 5, 5), "mse", max_iter=np.int32(2), draws=np.int64(2))
    assert int(res.iterations[0]) <= 2
    a, b = torch.randn(1, 4, 9, 9), torch.randn(1, 4, 9, 9)
    assert torch.equal(ssim_loss(a, b, kernel_size=np.int64(3)), ssim_loss(a, b, kernel_size=3))
    assert torch.equal(mutual_information_loss(a, b, estimator="binned", bins=np.int64(8)),
                       mutual_information_loss(a, b, estimator="binned", bins=8))
    for name, bad in (("num_samples", np.bool_(True)), ("max_iter", 2.0), ("draws", "2")):
        with pytest.raises(ValueError, match=name):
            RateInInferer(**{name: bad})
    with pytest.raises(ValueError, match="kernel_size"):
        ssim_loss(a, b, kernel_size=np.float64(3))
