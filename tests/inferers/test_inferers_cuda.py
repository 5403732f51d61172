"""The inferers on ``cuda_device`` (tests/inferers/test_inferers.py on a GPU): every inferer and products of sample
sources, 2D and 3D, whole volume and with MONAI's ``SlidingWindowInferer`` (windows on the device, stitching on the
device or on the CPU), under ``torch.autocast`` fp16 / bf16, exact deterministic properties, and memory that stays
flat in the number of samples.

Marked ``cuda``: skipped without a GPU; ``MONAI_UNC_TEST_DEVICE=cpu`` rehearses them on the CPU. Inputs are made on
the CPU with a fixed seed and moved to the device. Deterministic computations are compared with the CPU run at
``atol = rtol = 1e-4`` with TF32 switched off (float32 convolutions whose reductions run in another order);
dropout masks come from the device's generator, so stochastic inferers are compared through exact properties (the
same seed gives bitwise the same maps; stitching on the CPU equals stitching on the device) and statistically.
"""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
from monai.inferers import SlidingWindowInferer
from monai.networks.nets import UNet
from monai.transforms import Rotate90
from torch import nn

import monai_unc.inferers.sampling as sampling
import monai_unc.stats as stats_module
from monai_unc.inferers import (
    AugmentationSource,
    EnsembleInferer,
    EnsembleSource,
    FlipSource,
    InvertibleTransformSource,
    MCDropoutInferer,
    MCDropoutSource,
    NoiseSource,
    RateInInferer,
    RateInSource,
    SoftmaxInferer,
    StochasticSource,
    TTAInferer,
    UncertaintyInferer,
    add_dropout,
)
from monai_unc.stats import SampleStats
from tests._device import no_tf32

# deterministic cuDNN for every test: the exact checks (same seed, same maps; identical samples, MI = 0) need
# repeatable sums
pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("deterministic_cudnn")]

SPATIAL = {2: (16, 16), 3: (16, 16, 16)}
ROI = {2: (12, 12), 3: (12, 12, 12)}
#: float32 on the device vs float32 on the CPU (TF32 off): convolutions reduce in another order
ATOL = RTOL = 1e-4
#: autocast vs the float32 run on the same device: largest deviation of the deterministic maps (probabilities and
#: entropies in nats), several times the largest seen on the CPU at these sizes (bf16: 0.013, fp16: 0.002)
AUTOCAST_ATOL = {torch.float16: 0.02, torch.bfloat16: 0.08}


# ------------------------------------------------------------------------------------------------ helpers
def image(dims: int, batch: int = 1, seed: int = 0, channels: int = 1) -> torch.Tensor:
    """A CPU image ``(batch, channels, 16, ...)`` from a fixed seed."""
    return torch.randn(batch, channels, *SPATIAL[dims], generator=torch.Generator().manual_seed(seed))


def unet(dims: int, dropout: float = 0.2, out: int = 3, seed: int = 0) -> nn.Module:
    """A tiny MONAI UNet (channels (4, 8)) in eval mode, on the CPU."""
    torch.manual_seed(seed)
    return UNet(dims, 1, out, channels=(4, 8), strides=(2,), num_res_units=1, dropout=dropout).eval()


class DeadDropout(nn.Module):
    """A deterministic UNet with a dropout layer whose output is multiplied by 0: MC dropout runs (it finds a
    dropout layer) but every sample is the stock prediction."""

    def __init__(self, dims: int, out: int = 3) -> None:
        super().__init__()
        self.net = unet(dims, dropout=0.0, out=out)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.net(x)
        return y + 0.0 * self.drop(y)


def sw(dims: int, **kw) -> SlidingWindowInferer:
    """Overlapping Gaussian-weighted windows (2 per axis, overlapping by 8 voxels)."""
    return SlidingWindowInferer(ROI[dims], sw_batch_size=2, overlap=0.5, mode="gaussian", **kw)


def autocast(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    """``torch.autocast`` on ``device`` in ``dtype``; skips where this torch has no such autocast on the CPU."""
    if device.type == "cpu":
        try:
            with torch.autocast("cpu", dtype=dtype):
                nn.Conv2d(1, 1, 1)(torch.ones(1, 1, 2, 2))
        except (RuntimeError, TypeError) as err:  # pragma: no cover - depends on the torch build
            pytest.skip(f"autocast on the CPU in {dtype} is not supported by this torch: {err}")
    return torch.autocast(device.type, dtype=dtype)


def roll_pair():
    """A custom invertible augmentation: roll by 3 voxels along the first spatial axis, and back."""
    return (lambda t: torch.roll(t, 3, dims=2), lambda o: torch.roll(o, -3, dims=2))


def members(dims: int, out: int = 3, dropout: float = 0.2) -> list[nn.Module]:
    return [unet(dims, dropout, out, seed=s) for s in (1, 2)]


#: name -> (inferer factory (members, **options), deterministic)
INFERERS = {
    "softmax": (lambda nets, **kw: SoftmaxInferer(**kw), True),
    "mcdropout": (lambda nets, **kw: MCDropoutInferer(3, **kw), False),
    # post-hoc dropout (forward hooks added by add_dropout) on a network built without dropout
    "mcdropout_posthoc": (lambda nets, **kw: MCDropoutInferer(3, **kw), False),
    "tta_flips": (lambda nets, **kw: TTAInferer(**kw), True),
    "tta_noise": (lambda nets, **kw: TTAInferer(flip_axes=(0,), noise_std=0.1, noise_samples=2, **kw), False),
    "tta_inverted": (
        lambda nets, **kw: TTAInferer(flip_axes=(1,), augmentations=[roll_pair()],
                                      transforms=[Rotate90(1, spatial_axes=(0, 1))], **kw),
        True,
    ),
    "ensemble": (lambda nets, **kw: EnsembleInferer(nets, **kw), True),
    "ensemble_mcdropout_flips": (
        lambda nets, **kw: EnsembleInferer(nets, extra_sources=[MCDropoutSource(2), FlipSource((0,))], **kw), False
    ),
    "rate_in": (lambda nets, **kw: RateInInferer(2, max_iter=3, draws=2, **kw), False),
    # Rate-In layers inserted (for the call) into a network built without dropout
    "rate_in_inserted": (lambda nets, **kw: RateInInferer(2, max_iter=3, draws=2, placement="insert", **kw), False),
    # every window-level source the package offers, times an ensemble: 2 * 2 * 2 * 1 * 1 * 1 * 1 = 8 samples
    "product_all": (
        lambda nets, **kw: UncertaintyInferer(
            [EnsembleSource(nets), MCDropoutSource(2), FlipSource((0,)), NoiseSource(0.05), StochasticSource(1),
             AugmentationSource([roll_pair()]), InvertibleTransformSource([Rotate90(1, spatial_axes=(0, 1))])],
            **kw,
        ),
        False,
    ),
    "product_rate_in": (
        lambda nets, **kw: UncertaintyInferer(
            [EnsembleSource(nets), RateInSource(2, max_iter=3, draws=2), FlipSource((0,))], **kw
        ),
        False,
    ),
}
STOCHASTIC = [k for k, (_, det) in INFERERS.items() if not det]
DETERMINISTIC = [k for k, (_, det) in INFERERS.items() if det]
USES_MEMBERS = {"ensemble", "ensemble_mcdropout_flips", "product_all", "product_rate_in"}
#: the costlier checks run every inferer in 3D and these in 2D too (the whole-volume and sliding-window tests run
#: every inferer in both)
IN_2D = ("mcdropout", "tta_inverted", "ensemble_mcdropout_flips", "product_all")


def cases(names) -> list[tuple[str, int]]:
    """``(name, dims)``: every name in 3D, those of ``IN_2D`` in 2D too."""
    return [(n, 3) for n in names] + [(n, 2) for n in names if n in IN_2D]


def build(name: str, dims: int, out: int = 3, activation: str = "softmax", **kw):
    """The inferer ``name`` and its ``network`` argument (``None`` for an ensemble of modules), both on the CPU."""
    factory, _ = INFERERS[name]
    nets = members(dims, out)
    inferer = factory(nets, activation=activation, **kw)
    if name in USES_MEMBERS:
        network = None
    elif name in ("mcdropout_posthoc", "rate_in_inserted"):
        network = unet(dims, dropout=0.0, out=out)
        if name == "mcdropout_posthoc":
            add_dropout(network, p=0.2)
    else:
        network = unet(dims, out=out)
    return inferer, network, nets


def to(net: nn.Module | None, device: torch.device) -> nn.Module | None:
    return None if net is None else copy.deepcopy(net).to(device)


def check_maps(out, device: torch.device, dtype: torch.dtype = torch.float32) -> None:
    """Every map on ``device`` in ``dtype``, finite, and PE = EE + MI (+ WD) where the maps are there."""
    for k, v in out.items():
        assert v.device.type == device.type, (k, v.device)
        assert v.dtype == dtype, (k, v.dtype)
        assert bool(torch.isfinite(v).all()), k
    if "expected_entropy" not in out:  # the softmax baseline: one pass, no decomposition
        return
    total = out["expected_entropy"] + out["mutual_information"] + out.get("window_disagreement", 0.0)
    torch.testing.assert_close(out["predictive_entropy"], total, atol=2e-5, rtol=1e-5)
    assert float(out["mutual_information"].min()) >= 0


def assert_maps_close(a, b, atol: float, rtol: float, keys=None) -> None:
    assert sorted(a) == sorted(b)
    for k in keys or a:
        torch.testing.assert_close(a[k].cpu(), b[k].cpu(), atol=atol, rtol=rtol, msg=lambda m, k=k: f"{k}: {m}")


# ------------------------------------------------------------------------------------------------ whole volume
@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("name", list(INFERERS))
def test_inferer_on_device_tensors(cuda_device, name, dims):
    """Every inferer on device tensors: maps on the device in float32, PE = EE + MI; ensemble members go to the
    device one at a time and come back home; deterministic inferers equal the CPU run."""
    inferer, network, nets = build(name, dims, seed=0)
    x = image(dims, batch=2)
    with no_tf32():
        out = inferer(x.to(cuda_device), to(network, cuda_device))
    check_maps(out, cuda_device)
    assert out["pred"].shape == (2, 3, *SPATIAL[dims])
    assert out["predictive_entropy"].shape == (2, 1, *SPATIAL[dims])
    assert all(p.device.type == "cpu" for n in nets for p in n.parameters())  # members back where they were
    ref = build(name, dims, seed=0)[0](x, network)
    assert out.num_samples == ref.num_samples and out.mi_meaning == ref.mi_meaning
    if INFERERS[name][1]:
        assert_maps_close(out, ref, ATOL, RTOL)
    if "rate_in" in name:  # one rate per image (and per ensemble member), reported on the CPU
        rates = out.extras["rate_in_rates"]
        searched = 2 * (len(nets) if name in USES_MEMBERS else 1)
        assert rates and all(v.device.type == "cpu" and v.shape == (searched,) for v in rates.values())


@pytest.mark.parametrize(("name", "dims"), cases(STOCHASTIC))
def test_same_seed_gives_identical_maps_on_the_device(cuda_device, name, dims):
    """A seed fixes every draw on the device (bitwise the same maps), another seed changes them, and the caller's
    random state is left as it was."""
    inferer, network, _ = build(name, dims, seed=5)
    net = to(network, cuda_device)
    x = image(dims).to(cuda_device)
    cpu_state = torch.get_rng_state()
    dev_state = torch.cuda.get_rng_state(cuda_device) if cuda_device.type == "cuda" else None
    a = inferer(x, net)
    b = inferer(x, net)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert torch.equal(torch.get_rng_state(), cpu_state)
    if dev_state is not None:
        assert torch.equal(torch.cuda.get_rng_state(cuda_device), dev_state)
    c = build(name, dims, seed=6)[0](x, net)
    assert not torch.equal(a["mutual_information"], c["mutual_information"])


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("window", [False, True])
def test_network_without_effective_dropout_gives_zero_mi_and_the_stock_prediction(cuda_device, dims, window):
    """MC dropout, a stochastic forward and zero noise on a deterministic network: MI = 0 (float tolerance) and the
    mean prediction is the stock softmax (bitwise for the whole volume; through the same windows otherwise)."""
    net = DeadDropout(dims).to(cuda_device)
    x = image(dims, batch=2).to(cuda_device)
    base = sw(dims) if window else None
    sources = [MCDropoutSource(2), StochasticSource(2), NoiseSource(0.0, 2)]
    out = UncertaintyInferer(sources, base_inferer=base, seed=0)(x, net)
    check_maps(out, cuda_device)
    assert out.num_samples == 8
    assert float(out["mutual_information"].abs().max()) <= 1e-6
    with torch.no_grad():
        if window:  # (stitched, the variance also holds the windows' disagreement: not 0)
            stock = sw(dims)(x, lambda t: torch.softmax(net(t), 1))
            torch.testing.assert_close(out["pred"], stock, atol=1e-6, rtol=1e-6)
        else:
            assert float(out["variance"].abs().max()) <= 1e-6
            assert torch.equal(out["pred"], torch.softmax(net(x), 1))


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("window", [False, True])
def test_identical_ensemble_members_give_zero_mi(cuda_device, dims, window):
    """Three copies of one network (members on the CPU, moved to the device one at a time): MI = 0 with and without
    overlapping windows, and the mean prediction is the stock one."""
    net = unet(dims)
    nets = [net, copy.deepcopy(net), copy.deepcopy(net)]
    x = image(dims).to(cuda_device)
    out = EnsembleInferer(nets, base_inferer=sw(dims) if window else None)(x)
    check_maps(out, cuda_device)
    assert float(out["mutual_information"].abs().max()) <= 1e-6
    if not window:
        with torch.no_grad():
            assert torch.equal(out["pred"], torch.softmax(net.to(cuda_device)(x), 1))


def test_mc_dropout_statistics_match_the_cpu(cuda_device):
    """Dropout masks on the device come from another generator than on the CPU: the voxel averages of MI and of
    the mean prediction of 32 samples agree with the CPU run within sampling error (measured over 8 CPU seeds at this
    size: the mean MI varies by 0.34 % (relative sd), the mean |pred_a - pred_b| of two seeds is 0.025 to 0.029)."""
    net = unet(2, dropout=0.3)
    x = image(2, batch=2, seed=1)
    inferer = MCDropoutInferer(32, seed=0)
    with no_tf32():
        dev = inferer(x.to(cuda_device), to(net, cuda_device))
    cpu = MCDropoutInferer(32, seed=1)(x, net)
    mi_dev, mi_cpu = float(dev["mutual_information"].mean()), float(cpu["mutual_information"].mean())
    assert abs(mi_dev - mi_cpu) <= 0.05 * mi_cpu, (mi_dev, mi_cpu)
    diff = (dev["pred"].cpu() - cpu["pred"]).abs().mean()
    assert float(diff) <= 0.04, float(diff)


# ------------------------------------------------------------------------------------------------ sliding windows
@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("name", list(INFERERS))
def test_sliding_windows_on_the_device_stitched_on_the_cpu(cuda_device, name, dims):
    """``SlidingWindowInferer(sw_device=cuda, device=cpu)`` on a CPU volume: every map comes back on the CPU and
    equals the run stitched on the device with the same seed (same windows, same draws); ensemble members on the CPU
    are moved to the windows' device."""
    x = image(dims)
    inferer_dev, network, _ = build(name, dims, seed=0, base_inferer=sw(dims))
    inferer_split, _, nets = build(name, dims, seed=0, base_inferer=sw(dims, sw_device=cuda_device,
                                                                         device=torch.device("cpu")))
    cuda_state = torch.cuda.get_rng_state(cuda_device) if cuda_device.type == "cuda" else None
    with no_tf32():
        on_dev = inferer_dev(x.to(cuda_device), to(network, cuda_device))
        split = inferer_split(x, to(network, cuda_device))
    check_maps(on_dev, cuda_device)
    check_maps(split, torch.device("cpu"))
    assert "window_disagreement" in split or "expected_entropy" not in split
    assert_maps_close(split, on_dev, 1e-5, 1e-5)
    assert all(p.device.type == "cpu" for n in nets for p in n.parameters())
    if cuda_state is not None:  # the seed's fork covers the windows' device although the input is on the CPU
        assert torch.equal(torch.cuda.get_rng_state(cuda_device), cuda_state)
    if INFERERS[name][1]:
        assert_maps_close(split, build(name, dims, base_inferer=sw(dims))[0](x, network), ATOL, RTOL)


# ------------------------------------------------------------------------------------------------ autocast
class _Recorder:
    """Records the accumulation dtype of every SampleStats an inferer fills."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dtypes: list[tuple[torch.dtype, torch.dtype]] = []
        recorder = self

        class Recording(SampleStats):
            def update(self, probs, weight=1.0):
                result = super().update(probs, weight)
                recorder.dtypes.append((self.sum_p.dtype, self.sum_h.dtype))
                return result

        def warned_dtype(*args, **kwargs):  # the inferer's per-window statistics (built in monai_unc.stats)
            stats = stats_module.sample_stats_warned_dtype(*args, **kwargs)
            stats.__class__ = Recording
            return stats

        monkeypatch.setattr(sampling, "SampleStats", Recording)
        monkeypatch.setattr(sampling, "sample_stats_warned_dtype", warned_dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize(("name", "dims"), cases(INFERERS))
def test_autocast(cuda_device, name, dims, dtype, monkeypatch):
    """Under ``torch.autocast`` the network runs in half precision, the statistics are still summed in float64 (or
    the ``accum_dtype`` asked for), the maps come back in the input's float32 with PE = EE + MI, and deterministic
    inferers stay within ``AUTOCAST_ATOL`` of the float32 run."""
    x = image(dims).to(cuda_device)
    inferer, network, _ = build(name, dims, seed=0)
    net = to(network, cuda_device)
    ref = inferer(x, net) if INFERERS[name][1] else None
    rec = _Recorder(monkeypatch)
    with autocast(cuda_device, dtype):
        out = inferer(x, net)
        out32 = build(name, dims, seed=0, accum_dtype=torch.float32)[0](x, net)
    check_maps(out, cuda_device)
    check_maps(out32, cuda_device)
    n = out.num_samples
    assert rec.dtypes[:n] == [(torch.float64, torch.float64)] * n
    assert rec.dtypes[n:] == [(torch.float32, torch.float32)] * n
    torch.testing.assert_close(out["pred"].sum(1), torch.ones_like(out["pred"][:, 0]), atol=1e-5, rtol=0)
    if ref is not None:
        assert_maps_close(out, ref, AUTOCAST_ATOL[dtype], 0)
        assert_maps_close(out32, ref, AUTOCAST_ATOL[dtype], 0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", ["mcdropout", "ensemble"])
def test_autocast_with_windows_stitched_on_the_cpu(cuda_device, name, dtype):
    """Autocast windows on the device, stitched on the CPU: maps on the CPU in float32, equal to the same run
    stitched on the device."""
    x = image(3)
    inferer, network, _ = build(name, 3, seed=0, base_inferer=sw(3, sw_device=cuda_device, device=torch.device("cpu")))
    net = to(network, cuda_device)
    with autocast(cuda_device, dtype):
        split = inferer(x, net)
        on_dev = build(name, 3, seed=0, base_inferer=sw(3))[0](x.to(cuda_device), net)
    check_maps(split, torch.device("cpu"))
    assert_maps_close(split, on_dev, 1e-5, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_autocast_deterministic_network_keeps_zero_mi_and_the_stock_prediction(cuda_device, dtype):
    net = DeadDropout(3).to(cuda_device)
    x = image(3).to(cuda_device)
    with autocast(cuda_device, dtype):
        out = MCDropoutInferer(3, seed=0)(x, net)
        with torch.no_grad():
            stock = torch.softmax(net(x).float(), 1)
    check_maps(out, cuda_device)
    assert float(out["mutual_information"].abs().max()) <= 1e-6
    assert torch.equal(out["pred"], stock)


# ------------------------------------------------------------------------------------------------ memory
def test_streaming_statistics_memory_is_flat_in_the_number_of_samples(cuda_device):
    """Peak device memory of 8 MC-dropout samples is within 10 % of 2 samples (statistics stream; nothing is
    stacked). The memory assertion needs CUDA's allocator statistics: on the CPU only the run is rehearsed."""
    net = unet(3).to(cuda_device)
    x = torch.randn(1, 1, 32, 32, 32, generator=torch.Generator().manual_seed(0)).to(cuda_device)
    MCDropoutInferer(2, seed=0)(x, net)  # warm-up: cuDNN workspaces, allocator pools
    peaks = {}
    for n in (2, 8):
        if cuda_device.type == "cuda":
            torch.cuda.synchronize(cuda_device)
            torch.cuda.reset_peak_memory_stats(cuda_device)
            base = torch.cuda.memory_allocated(cuda_device)
        out = MCDropoutInferer(n, seed=0)(x, net)
        assert out.num_samples == n
        if cuda_device.type == "cuda":
            torch.cuda.synchronize(cuda_device)
            peaks[n] = torch.cuda.max_memory_allocated(cuda_device) - base
        del out
    if cuda_device.type == "cuda":
        assert peaks[8] <= 1.1 * peaks[2], peaks


def test_checkpoint_ensemble_on_the_device(cuda_device, tmp_path):
    """Members given as checkpoints (loaded onto the CPU) are loaded into the device network one at a time: the maps
    equal those of the same members given as modules, and the network gets its own weights back, on the device."""
    nets = members(3)
    paths = []
    for i, n in enumerate(nets):
        paths.append(tmp_path / f"fold{i}.pt")
        torch.save({"network_weights": n.state_dict()}, paths[-1])
    network = unet(3, seed=9).to(cuda_device)
    before = {k: v.clone() for k, v in network.state_dict().items()}
    x = image(3).to(cuda_device)
    for base in (None, sw(3, sw_device=cuda_device, device=torch.device("cpu"))):
        with no_tf32():
            got = EnsembleInferer(paths, base_inferer=base)(x if base is None else x.cpu(), network)
            ref = EnsembleInferer(nets, base_inferer=base)(x if base is None else x.cpu())
        check_maps(got, cuda_device if base is None else torch.device("cpu"))
        assert_maps_close(got, ref, ATOL, RTOL)
        for k, v in network.state_dict().items():
            assert v.device.type == cuda_device.type and torch.equal(v, before[k]), k
