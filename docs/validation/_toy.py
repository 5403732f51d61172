"""Shared helpers of validation studies 3 (ValUES) and 4 (GED, Zepf et al.) on the synthetic toy set.

Everything here composes monai-unc: the data come from :mod:`monai_unc.data.synthetic`, the networks are
MONAI ``UNet`` s, inference goes through :class:`~monai_unc.inferers.SoftmaxInferer`,
:class:`~monai_unc.inferers.MCDropoutInferer`, :class:`~monai_unc.inferers.TTAInferer` and
:class:`~monai_unc.inferers.EnsembleInferer`. Nothing is downloaded; trained weights are cached on disk (keyed
by a hash of the training configuration) so that the two studies and repeated runs share them.

Training protocol (ValUES, Appendix C.1/C.2, scaled down to run on one CPU thread in minutes):

- 3D U-Net (MONAI ``UNet``, channels 8-16-32-64, initial filter size 8 as ValUES' toy U-Net, one residual
  unit per block, instance normalisation) with dropout in every convolution block (ValUES: p = 0.5; the same
  network is used for softmax, test-time dropout and TTA, and 5 of them trained with different seeds form the
  ensemble, as in ValUES C.2).
- Label: one rater drawn at random per training case, once per network (ValUES' ``toy_datamodule_3D.py`` draws
  one rater file per case with ``random.choice`` when the loader is built, so runs with different seeds draw
  differently), so the network sees the raters' disagreement across cases and can learn it as aleatoric
  uncertainty.
- DiceCE loss (``TrainConfig.extra["loss"]`` names another training loss, study 9), Adam (lr 3e-3, weight
  decay 1e-5, cosine decay; ValUES: 3e-4 for 150 epochs), batch 4,
  augmentation by random flips and Gaussian noise (ValUES C.1); TTA uses the same augmentations (all 8 flips,
  each with and without noise: 16 passes, ValUES C.2).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from monai.networks.nets import UNet
from monai.transforms import Compose, RandFlipd, RandGaussianNoised

from monai_unc.data import make_toy_case, make_toy_dataset
from monai_unc.data.training import make_training_loss
from monai_unc.inferers import EnsembleInferer, MCDropoutInferer, SoftmaxInferer, TTAInferer
from monai_unc.io import atomic_torch_save, atomic_write_text, json_safe

__all__ = [
    "DEFAULT_OUTPUT",
    "METHODS",
    "TrainConfig",
    "PresenceConfig",
    "annotator_ensemble",
    "atomic_write_json",
    "binary_dice",
    "build_network",
    "default_cache_dir",
    "ensemble_for",
    "fmt",
    "load_json",
    "make_inferers",
    "make_presence_case",
    "make_presence_dataset",
    "md_table",
    "predict_case",
    "random_rater_labels",
    "set_threads",
    "train_network",
]

#: repository-relative default output folder of the studies
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results"
#: prediction models compared by both studies (ValUES C1)
METHODS = ("softmax", "mc_dropout", "tta", "ensemble")


def parse_study_args(doc: str, argv: list[str] | None = None) -> argparse.Namespace:
    """The command line shared by the toy studies (3 and 4); ``doc`` is the script's docstring."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="results folder (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of data, training and sampling (default 0)")
    p.add_argument("--tiny", action="store_true", help="a few tiny cases and networks: smoke test in seconds")
    p.add_argument("--cache", type=Path, default=None, help="cache folder for trained networks (default: temp dir)")
    p.add_argument("--no-cache", action="store_true", help="always train, never read or write the cache")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--render-only", action="store_true", help="re-write the .md and figure from the JSON in --output")
    return p.parse_args(argv)


def set_threads(n: int) -> None:
    """Use ``n`` intra-op threads (1 = the single-threaded budget the studies are sized for)."""
    if n < 1:
        raise ValueError(f"threads must be >= 1, got {n}")
    torch.set_num_threads(n)


def default_cache_dir() -> Path:
    """Where trained toy networks are cached between runs (a folder in the system's temp directory)."""
    return Path(tempfile.gettempdir()) / "monai_unc_validation_cache"


def atomic_write_json(path: str | os.PathLike, obj: Any, digits: int = 6) -> Path:
    """Write ``obj`` as indented JSON through a temporary file and a rename (NaN written as null, floats rounded
    to ``digits`` significant digits to keep the per-case records small)."""
    return atomic_write_text(path, json.dumps(json_safe(obj, digits), indent=2) + "\n")


def rerender(output: str | os.PathLike, study: int, write_outputs: Callable[..., Any], figure: str) -> Any:
    """``--render-only`` of a study: re-write ``study<N>.md`` and its figure from the saved ``study<N>.json``
    (``write_outputs(result, folder, json_too=False)``); returns the loaded result."""
    folder = Path(output)
    result = load_json(folder / f"study{study}.json")
    write_outputs(result, folder, json_too=False)
    print(f"re-rendered {folder / f'study{study}.md'} and {figure} from study{study}.json")
    return result


def load_json(path: str | os.PathLike) -> Any:
    """Read a results JSON written by :func:`atomic_write_json`, turning its nulls back into NaN."""

    def nan(o: Any) -> Any:
        if o is None:
            return float("nan")
        if isinstance(o, dict):
            return {k: nan(v) for k, v in o.items()}
        if isinstance(o, list):
            return [nan(v) for v in o]
        return o

    return nan(json.loads(Path(path).read_text()))


# ------------------------------------------------------------------------------------------------ data
@dataclass(frozen=True)
class PresenceConfig:
    """Toy cases whose raters disagree on whether the object is there at all (study 4, Zepf et al. Sec. 3).

    ``make_toy_case`` has no option for this, so :func:`make_presence_case` builds it from a noise-free toy case:
    the object's contrast ``a`` and outer radius are drawn per case, the image is ``a * profile + noise``, and
    rater ``j`` leaves its mask empty when the object's visibility ``v = a * (r / r_max)`` (times a per-rater
    log-normal jitter of ``jitter``, the annotation error of Zepf et al. eq. 1) is below that rater's detection
    threshold ``thresholds[j]`` (its bias ``b^j``). Raters keep their boundary styles of ``make_toy_case``
    (nested spheres of 10 % ... 100 % of the outermost rater's volume).
    """

    n_raters: int = 4
    contrast: tuple[float, float] = (0.1, 1.0)
    radius_fraction: tuple[float, float] = (0.08, 0.28)
    #: detection threshold of rater 0..R-1 on the visibility v in [0, 1] (not ordered like the boundary styles)
    thresholds: tuple[float, ...] = (0.22, 0.1, 0.3, 0.16)
    jitter: float = 0.25
    noise_std: float = 0.1
    blur: bool = True

    def __post_init__(self) -> None:
        if len(self.thresholds) != self.n_raters:
            raise ValueError(f"thresholds must have n_raters={self.n_raters} values, got {len(self.thresholds)}")
        if not 0 < self.contrast[0] <= self.contrast[1]:
            raise ValueError(f"contrast must be an increasing positive range, got {self.contrast}")
        if not 0 < self.radius_fraction[0] <= self.radius_fraction[1] < 0.5:
            raise ValueError(f"radius_fraction must be an increasing range inside (0, 0.5), got {self.radius_fraction}")


def make_presence_case(shape: Sequence[int], config: PresenceConfig, rng: np.random.Generator) -> dict:
    """One toy case with presence disagreement between raters; see :class:`PresenceConfig`.

    Returns the keys of :func:`monai_unc.data.make_toy_case` (``label`` = majority vote, ``probs`` = fraction of
    raters) plus ``contrast``, ``visibility`` and ``n_empty`` (raters with an empty mask).
    """
    smallest = min(shape)
    lo, hi = config.radius_fraction
    radius = float(rng.uniform(lo, hi) * smallest)
    contrast = float(rng.uniform(*config.contrast))
    clean = make_toy_case(shape, n_raters=config.n_raters, blur=config.blur, radius=radius, noise_std=0.0, rng=rng)
    image = contrast * clean["image"] + config.noise_std * rng.standard_normal(clean["image"].shape)
    visibility = contrast * radius / (hi * smallest)
    raters = clean["raters"].copy()
    seen = visibility * np.exp(config.jitter * rng.standard_normal(config.n_raters))
    empty = seen < np.asarray(config.thresholds)
    raters[empty] = 0
    fg = raters.mean(axis=0).astype(np.float32)
    label = (raters.sum(axis=0) * 2 > config.n_raters).astype(np.int64)
    return {
        "image": image.astype(np.float32),
        "label": label,
        "raters": raters,
        "probs": np.stack([1.0 - fg, fg]).astype(np.float32),
        "shift": "none",
        "object_volume": int(label.sum()),
        "radius": radius,
        "blur": config.blur,
        "contrast": contrast,
        "visibility": float(visibility),
        "n_empty": int(empty.sum()),
    }


def make_presence_dataset(n_cases: int, shape: Sequence[int], config: PresenceConfig, seed: int) -> list[dict]:
    """``n_cases`` presence-ambiguous cases, reproducible from ``seed``."""
    if n_cases < 1:
        raise ValueError(f"n_cases must be >= 1, got {n_cases}")
    rngs = np.random.default_rng(seed).spawn(n_cases)
    return [make_presence_case(shape, config, r) for r in rngs]


def toy_mix(n_cases: int, shape: Sequence[int], blur_fraction: float, seed: int, n_raters: int = 3) -> list[dict]:
    """In-distribution toy cases (no shift), the first ``round(blur_fraction * n)`` with blur (aleatoric
    uncertainty, raters disagree on the border), the rest without (ValUES Appendix B.1.1, setting 3)."""
    n_blur = int(round(blur_fraction * n_cases))
    out = []
    if n_blur:
        out += make_toy_dataset(n_blur, shape=shape, n_raters=n_raters, blur=True, seed=seed)
    if n_cases - n_blur:
        out += make_toy_dataset(n_cases - n_blur, shape=shape, n_raters=n_raters, blur=False, seed=seed + 7919)
    return out


def random_rater_labels(cases: Sequence[dict], seed: int) -> list[np.ndarray]:
    """One rater's mask per case, the rater drawn at random once per case (ValUES' toy data loader)."""
    rng = np.random.default_rng(seed)
    return [c["raters"][int(rng.integers(c["raters"].shape[0]))] for c in cases]


# ------------------------------------------------------------------------------------------------ model
@dataclass(frozen=True)
class TrainConfig:
    """Network and training settings of one ensemble member (see the module docstring)."""

    channels: tuple[int, ...] = (8, 16, 32, 64)
    dropout: float = 0.5
    iterations: int = 300
    batch_size: int = 4
    lr: float = 3e-3
    weight_decay: float = 1e-5
    noise_std: float = 0.1
    extra: dict = field(default_factory=dict)

    def key(self, data_fingerprint: str, seed: int) -> str:
        """Cache key of a member trained with this configuration on the given data and seed."""
        blob = json.dumps(
            {"cfg": asdict(self), "data": data_fingerprint, "seed": seed, "torch": torch.__version__},
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:20]


def build_network(cfg: TrainConfig) -> UNet:
    """The toy 3D U-Net with dropout in every block."""
    return UNet(
        spatial_dims=3,
        in_channels=1,
        out_channels=2,
        channels=cfg.channels,
        strides=(2,) * (len(cfg.channels) - 1),
        num_res_units=1,
        dropout=cfg.dropout,
    )


def _fingerprint(images: Sequence[np.ndarray], labels: Sequence[np.ndarray]) -> str:
    h = hashlib.sha256()
    for x, y in zip(images, labels):
        h.update(np.ascontiguousarray(x, dtype=np.float32).tobytes())
        h.update(np.ascontiguousarray(y, dtype=np.uint8).tobytes())
    return h.hexdigest()[:20]


def train_network(
    images: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    cfg: TrainConfig,
    seed: int,
    cache_dir: Path | None = None,
    log: Callable[[str], None] = print,
) -> UNet:
    """Train (or load from ``cache_dir``) one toy U-Net on ``images`` ``(1, *spatial)`` / ``labels`` ``(*spatial)``.

    Deterministic for a given seed and thread count on CPU. Returns the network in eval mode.
    """
    if len(images) != len(labels) or not images:
        raise ValueError(f"images and labels must be non-empty and equally long, got {len(images)}, {len(labels)}")
    key = cfg.key(_fingerprint(images, labels), seed)
    path = None if cache_dir is None else Path(cache_dir) / f"toy_unet_{key}.pt"
    net = build_network(cfg)
    if path is not None and path.is_file():
        net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        log(f"  member seed {seed}: loaded from cache {path.name}")
        return net.eval()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    aug = Compose(
        [
            RandFlipd(["image", "label"], prob=0.5, spatial_axis=0),
            RandFlipd(["image", "label"], prob=0.5, spatial_axis=1),
            RandFlipd(["image", "label"], prob=0.5, spatial_axis=2),
            RandGaussianNoised("image", prob=0.5, std=cfg.noise_std),
        ]
    )
    aug.set_random_state(seed)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.iterations)
    # the training loss: Dice + CE, or a calibration loss named by ``extra["loss"]`` (study 9)
    loss_fn = make_training_loss(cfg.extra.get("loss", "dice_ce"), classes=2)
    t0 = time.perf_counter()
    net.train()
    losses = []
    for _ in range(cfg.iterations):
        idx = rng.choice(len(images), size=min(cfg.batch_size, len(images)), replace=False)
        batch = [aug({"image": images[i], "label": labels[i][None]}) for i in idx]
        x = torch.stack([torch.as_tensor(np.asarray(b["image"]), dtype=torch.float32) for b in batch])
        y = torch.stack([torch.as_tensor(np.asarray(b["label"]), dtype=torch.int64) for b in batch])
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    log(
        f"  member seed {seed}: trained {cfg.iterations} iterations in {time.perf_counter() - t0:.0f} s "
        f"(loss of the last 50: {np.mean(losses[-50:]):.3f})"
    )
    net.eval()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_torch_save(path, net.state_dict())
    return net


def ensemble_for(
    cases: Sequence[dict],
    cfg: TrainConfig,
    n_members: int,
    seed: int,
    cache_dir: Path | None,
    log: Callable[[str], None] = print,
) -> list[UNet]:
    """``n_members`` networks trained on ``cases`` with seeds ``seed, seed + 1, ...`` (ValUES C.2: the ensemble is 5
    networks that differ only in their seed). Each member is trained on one random rater per case drawn with its own
    seed, as ValUES' runs with different seeds draw their raters differently."""
    images = [c["image"] for c in cases]
    return [
        train_network(images, random_rater_labels(cases, seed + m), cfg, seed + m, cache_dir, log)
        for m in range(n_members)
    ]


def annotator_ensemble(
    cases: Sequence[dict],
    cfg: TrainConfig,
    seed: int,
    cache_dir: Path | None,
    log: Callable[[str], None] = print,
) -> list[UNet]:
    """One network per rater, each trained on that rater's masks only: the "ensemble of annotators" of Zepf et al.
    (Sec. 1 and 3), an aleatoric model whose members reproduce the raters' styles and detection biases."""
    images = [c["image"] for c in cases]
    n_raters = cases[0]["raters"].shape[0]
    return [
        train_network(images, [c["raters"][j] for c in cases], cfg, seed + j, cache_dir, log) for j in range(n_raters)
    ]


# ------------------------------------------------------------------------------------------------ inference
def make_inferers(
    nets: Sequence[torch.nn.Module], noise_std: float, mc_samples: int = 10, keep_samples: bool = False, seed: int = 0
) -> dict[str, tuple[Any, torch.nn.Module | None]]:
    """The four prediction models of ValUES C1 as ``name -> (inferer, network)``.

    ``softmax``, ``mc_dropout`` and ``tta`` use the first network; ``ensemble`` all of them. TTA: every flip of the
    three axes, each with and without Gaussian noise of ``noise_std`` (16 passes, ValUES C.2).
    """

    def add_noise(t: torch.Tensor) -> torch.Tensor:
        return t + noise_std * torch.randn_like(t)

    def identity(t: torch.Tensor) -> torch.Tensor:
        return t

    kw = {"keep_samples": keep_samples, "seed": seed}
    return {
        "softmax": (SoftmaxInferer(keep_samples=keep_samples), nets[0]),
        "mc_dropout": (MCDropoutInferer(num_samples=mc_samples, **kw), nets[0]),
        "tta": (
            TTAInferer(flip_axes="all", augmentations=[(identity, identity), (add_noise, identity)], **kw),
            nets[0],
        ),
        "ensemble": (EnsembleInferer(list(nets), **kw), None),
    }


def binary_dice(a: np.ndarray, b: np.ndarray) -> float:
    """Dice of two binary masks (1 when both are empty)."""
    s = int(a.sum()) + int(b.sum())
    return 2.0 * float(np.logical_and(a, b).sum()) / s if s else 1.0


def predict_case(inferer: Any, network: torch.nn.Module | None, image: np.ndarray) -> dict[str, np.ndarray]:
    """Run one inferer on one case ``(1, *spatial)``; returns numpy arrays with the batch axis dropped
    (``pred`` ``(C, *spatial)``, maps ``(1, *spatial)``, ``samples`` ``(S, C, *spatial)`` when kept)."""
    x = torch.from_numpy(np.ascontiguousarray(image[None], dtype=np.float32))
    out = inferer(x, network)
    res = {}
    for k, v in out.items():
        a = v.detach().cpu().numpy()
        res[k] = a[:, 0] if k == "samples" else a[0]
    return res


# ------------------------------------------------------------------------------------------------ reporting
def fmt(x: Any, digits: int = 2) -> str:
    """A number for a Markdown table ("n/a" for None/NaN)."""
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    f = float(x)
    return "n/a" if not math.isfinite(f) else f"{f:.{digits}f}"


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def environment() -> dict:
    """Versions and thread count, recorded next to every result."""
    import monai

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "monai": monai.__version__,
        "numpy": np.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }
