"""Shared helpers of the MNI152 validation studies 1 (Zeevi et al., Table 1) and 5 (RETINA, Band et al.: referral
curves).

Data protocol (docs/data.md; ``monai_unc.data``): the shipped UNet
(``load_example_model``) was trained on the left hemisphere of the MNI152 2009 template (2 mm, nilearn);
everything here is evaluated on the held-out right hemisphere (world x >= 0).

Cases: the template and realistic perturbed copies of it, the perturbation recorded as the shift label. Five
kinds come from :func:`monai_unc.data.perturb` (Gaussian noise, bias field, contrast/gamma, blur, resolution
loss); two are added here because the package has no transform for them:

- ``affine``: a small rotation (up to ``0.02 s`` rad per axis) and scaling (up to ``+-2 s`` % per axis) of the
  whole volume about its centre, image bilinear and label nearest-neighbour (severity 5 is the limit of the
  network's training augmentation, 0.1 rad / 10 %). A rotation about the volume centre can move a few voxels
  of left-hemisphere tissue (at most ~2 voxels at 5.7 deg) across the mid-sagittal plane;
- ``crop``: a smaller field of view: the network input loses ``5 s`` % of its extent along each in-plane axis
  (y, z), split at random between the two sides; the case is evaluated on the right hemisphere inside the crop.

Severity ``s`` is drawn uniformly from [1, 5] per case (``perturb``'s scale: severity 5 lies beyond the training
augmentation), reproducibly from the study seed.

Network input: one block per case, the 64 most lateral sagittal slices (the 50 of the right hemisphere plus 14 of
left context) x a 96 x 80 in-plane box centred on the brain (it holds the whole brain in y and z), padded to a
multiple of 8 and inferred in one window. Why one window: the 64^3 sliding window of the example (6 windows
with overlap 0.25) costs ~3x more per sample; this block gives the same deterministic Dice on the right hemisphere
(GM 0.873 / WM 0.870 vs 0.877 / 0.872 with the sliding window; the full 64 x 120 x 96 volume in one window
gives only 0.842 / 0.843 because the network's instance normalisation then sees mostly background). Rate-In
therefore searches its rates once per case. Evaluation region: the right-hemisphere slices of the block,
50 x 96 x 80 voxels of 2 mm.

Methods (``predict_*``): the deterministic network (softmax), MC dropout inserted post hoc after every encoder and
decoder stage but the output (Zeevi et al. Sec. 4.2) at a fixed rate, Rate-In at the same six sites, MC dropout with the
network's own trained dropout (p = 0.1, after every convolution), and test-time augmentation. Maps: predictive
entropy and mutual information, both divided by log 3 (``normalize=True``) so that they lie in [0, 1] as BA-ECE,
SPACE, the voxel accuracy and the thresholded metrics expect.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from monai_unc.aggregation import aggregate
from monai_unc.data import load_example_model, load_mni152_tissue, perturb
from monai_unc.inferers import (
    MCDropoutInferer,
    SoftmaxInferer,
    TTAInferer,
    add_dropout,
    remove_dropout,
)
from monai_unc.inferers.rate_in import RateInInferer
from monai_unc.io import atomic_write_text, json_safe

__all__ = [
    "DEFAULT_OUTPUT",
    "KINDS",
    "StudyConfig",
    "Timer",
    "make_cases",
    "load_networks",
    "predict_deterministic",
    "predict_mc_posthoc",
    "predict_rate_in",
    "predict_mc_own",
    "predict_tta",
    "dice_score",
    "case_score",
    "write_json",
]

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results"

#: perturbation kinds in the order the cases cycle through them (case 0 is the unperturbed template)
KINDS = ("noise", "bias_field", "contrast", "blur", "resolution", "affine", "crop")
PACKAGE_KINDS = ("noise", "bias_field", "contrast", "blur", "resolution")  # monai_unc.data.perturb


@dataclass(frozen=True)
class StudyConfig:
    """Everything that determines the cases and the per-case predictions (the cache key of study 5)."""

    n_cases: int = 24
    samples: int = 30
    fixed_p: float = 0.5
    target_loss: float = 0.1
    roi_size: tuple[int, int, int] = (64, 96, 80)
    kinds: tuple[str, ...] = KINDS
    severity_range: tuple[float, float] = (1.0, 5.0)
    seed: int = 0
    tiny: bool = False

    @classmethod
    def create(cls, tiny: bool, seed: int, n_cases: int | None = None, samples: int | None = None) -> StudyConfig:
        """The full-size configuration, or the smoke-test one (``tiny``: 3 cases, 2 samples, a 32 x 48 x 48 block)."""
        if tiny:
            cfg = cls(n_cases=3, samples=2, roi_size=(32, 48, 48), kinds=("affine", "crop"), seed=seed, tiny=True)
        else:
            cfg = cls(seed=seed)
        if n_cases is not None:
            if n_cases < 2:
                raise ValueError(f"n_cases must be at least 2 (Cohen's d needs two cases), got {n_cases}")
            cfg = cls(**{**asdict(cfg), "n_cases": int(n_cases)})
        if samples is not None:
            if samples < 2:
                raise ValueError(f"samples must be at least 2, got {samples}")
            cfg = cls(**{**asdict(cfg), "samples": int(samples)})
        return cfg

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StudyConfig:
        """Inverse of :meth:`to_json` (extra keys are ignored)."""
        names = set(cls.__dataclass_fields__)
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in names})

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


class Timer:
    """Wall-clock and process CPU seconds since construction (``elapsed()`` -> ``(wall, cpu)``)."""

    def __init__(self) -> None:
        self.wall0 = time.perf_counter()
        self.cpu0 = time.process_time()

    def elapsed(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall0, time.process_time() - self.cpu0


# ------------------------------------------------------------------------------------------------ cases
def _seed32(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**32 - 1))


def _roi(data: dict, size: Sequence[int]) -> tuple[slice, slice, slice]:
    """The input block: the ``size[0]`` most lateral right-side sagittal slices, in-plane centred on the brain."""
    shape = data["image"].shape[1:]
    right_x = np.nonzero(data["right"].any(axis=(1, 2)))[0]
    x_stop = int(right_x.max()) + 1
    x_start = max(0, x_stop - int(size[0]))
    fg = data["label"][0] > 0
    out = [slice(x_start, x_stop)]
    for ax in (1, 2):
        other = tuple(a for a in range(3) if a != ax)
        idx = np.nonzero(fg.any(axis=other))[0]
        centre = (int(idx.min()) + int(idx.max()) + 1) // 2
        n = min(int(size[ax]), shape[ax])
        start = min(max(0, centre - n // 2), shape[ax] - n)
        out.append(slice(start, start + n))
    return tuple(out)  # type: ignore[return-value]


def _affine(image: np.ndarray, label: np.ndarray, severity: float, rng: np.random.Generator):
    from monai.transforms import Affine

    rot = rng.uniform(-0.02 * severity, 0.02 * severity, size=3)
    scale = 1.0 + rng.uniform(-0.02 * severity, 0.02 * severity, size=3)
    common = dict(rotate_params=[float(r) for r in rot], scale_params=[float(v) for v in scale],
                  padding_mode="zeros", image_only=True)
    img = Affine(mode="bilinear", **common)(torch.from_numpy(image))
    lab = Affine(mode="nearest", **common)(torch.from_numpy(label.astype(np.float32)))
    img = img.as_tensor() if hasattr(img, "as_tensor") else img
    lab = lab.as_tensor() if hasattr(lab, "as_tensor") else lab
    params = {"rotate_rad": [float(r) for r in rot], "scale": [float(s) for s in scale]}
    return np.clip(img.numpy(), 0, None).astype(np.float32), np.rint(lab.numpy()).astype(np.int64), params


@functools.lru_cache(maxsize=1)
def _template() -> dict[str, Any]:
    """The 2 mm template, loaded once per process (nilearn resamples it on every load, ~3 s); not to be modified."""
    return load_mni152_tissue(resolution=2)


def make_cases(cfg: StudyConfig) -> list[dict[str, Any]]:
    """The cohort of ``cfg.n_cases`` cases (module docstring): case 0 the template, then one kind after the other.

    Each case: ``image`` ``(1, X, Y, Z)`` float32 network input; ``label`` ``(X', Y, Z)`` int64 on the evaluation
    region (the right-hemisphere slices of the block, ``x0`` = its first slice in the block); ``shift``,
    ``severity``, ``seed``, ``params`` (what the perturbation did), ``spacing`` (mm), ``name``.
    """
    data = _template()
    roi = _roi(data, cfg.roi_size)
    rng = np.random.default_rng(cfg.seed)
    lo, hi = cfg.severity_range
    cases = []
    for i in range(cfg.n_cases):
        case_seed = _seed32(rng)
        crng = np.random.default_rng(case_seed)
        image, label, box, params = data["image"], data["label"], roi, {}
        if i == 0:
            kind, sev = "none", 0.0
        else:
            kind = cfg.kinds[(i - 1) % len(cfg.kinds)]
            sev = float(crng.uniform(lo, hi))
            if kind in PACKAGE_KINDS:
                image = perturb(data["image"], kind, sev, seed=_seed32(crng))
            elif kind == "affine":
                image, label, params = _affine(data["image"], data["label"], sev, crng)
            elif kind == "crop":
                new = [roi[0]]
                for ax in (1, 2):
                    n = roi[ax].stop - roi[ax].start
                    cut = int(round(0.05 * sev * n))
                    before = int(crng.integers(0, cut + 1))
                    new.append(slice(roi[ax].start + before, roi[ax].stop - (cut - before)))
                box = tuple(new)
                params = {"box": [[s.start, s.stop] for s in box]}
            else:
                raise ValueError(f"unknown perturbation kind {kind!r}")
        right = data["right"][box]
        is_right = right.any(axis=(1, 2))
        if not np.array_equal(is_right, right.all(axis=(1, 2))) or not is_right.any():
            raise ValueError("the right hemisphere must be a set of whole sagittal slices of the block")
        x0 = int(np.argmax(is_right))
        cases.append(
            {
                "name": f"{i:02d}_{kind}",
                "image": np.ascontiguousarray(image[(slice(None), *box)], dtype=np.float32),
                "label": np.array(label[0][box][x0:], dtype=np.int64, order="C"),
                "x0": x0,
                "shift": kind,
                "severity": sev,
                "seed": case_seed,
                "params": params,
                "spacing": tuple(float(s) for s in data["spacing"]),
            }
        )
    return cases


# ------------------------------------------------------------------------------------------------ inference
def load_networks() -> tuple[torch.nn.Module, torch.nn.Module]:
    """The shipped network twice: without dropout (post-hoc sites, deterministic, TTA) and with its own p = 0.1."""
    net0, _ = load_example_model(dropout=0.0)
    net1, _ = load_example_model(dropout=0.1)
    return net0, net1


def _run(inferer: Any, network: torch.nn.Module, case: dict[str, Any]) -> dict[str, Any]:
    """Run ``inferer`` on the case's block (padded at the far end to a multiple of 8) and cut the evaluation region.

    Returns ``probs`` ``(3, X', Y, Z)``, ``seg``, ``pe`` and, for sampling methods, ``mi`` ``(X', Y, Z)`` float32
    (entropies / log 3), and the inferer's ``extras``.
    """
    x = torch.from_numpy(case["image"])[None]
    spatial = x.shape[2:]
    pad = [(-s) % 8 for s in spatial]
    x = F.pad(x, (0, pad[2], 0, pad[1], 0, pad[0]))
    out = inferer(x, network)
    cut = (0, slice(None), slice(case["x0"], spatial[0]), slice(0, spatial[1]), slice(0, spatial[2]))
    probs = out["pred"][cut].numpy().astype(np.float32)
    res: dict[str, Any] = {
        "probs": probs,
        "seg": probs.argmax(0).astype(np.int64),
        "pe": out["predictive_entropy"][cut][0].numpy().astype(np.float32),
        "extras": getattr(out, "extras", {}),
    }
    if "mutual_information" in out:
        res["mi"] = np.clip(out["mutual_information"][cut][0].numpy(), 0, None).astype(np.float32)
    return res


def predict_deterministic(net0: torch.nn.Module, case: dict[str, Any]) -> dict[str, Any]:
    """One deterministic pass: softmax probabilities and their normalised entropy."""
    return _run(SoftmaxInferer(normalize=True), net0, case)


def predict_mc_posthoc(net0: torch.nn.Module, case: dict[str, Any], p: float, samples: int, seed: int) -> dict:
    """MC dropout at fixed rate ``p`` (channel-wise) inserted after the six stage sites (Zeevi et al. Sec. 4.2)."""
    add_dropout(net0, p=p)
    try:
        return _run(MCDropoutInferer(num_samples=samples, normalize=True, seed=seed), net0, case)
    finally:
        remove_dropout(net0)


def predict_rate_in(net0: torch.nn.Module, case: dict[str, Any], samples: int, target: float, seed: int) -> dict:
    """Rate-In at the same six sites (Gaussian-MI loss, target ``target``); adds ``rates`` (per site) and
    ``mean_rate`` (their mean) to the result."""
    inferer = RateInInferer(num_samples=samples, target_loss=target, loss="mi", placement="insert", seed=seed,
                            normalize=True)
    res = _run(inferer, net0, case)
    rates = res["extras"]["rate_in_rates"]
    res["rates"] = {k: float(v.float().mean()) for k, v in rates.items()}
    res["mean_rate"] = float(torch.cat([v.reshape(-1).float() for v in rates.values()]).mean())
    return res


def predict_mc_own(net1: torch.nn.Module, case: dict[str, Any], samples: int, seed: int) -> dict[str, Any]:
    """MC dropout with the network's own trained dropout (p = 0.1 after every convolution)."""
    return _run(MCDropoutInferer(num_samples=samples, normalize=True, seed=seed), net1, case)


def predict_tta(net0: torch.nn.Module, case: dict[str, Any], seed: int, noise_samples: int = 2) -> dict[str, Any]:
    """Test-time augmentation: flips of the two in-plane axes (4) x ``noise_samples`` Gaussian-noise copies
    (std 0.03 of the [0, 1] intensity range).

    The left-right flip is left out on purpose: the MNI152 template is an average brain and nearly symmetric, so
    mirroring the held-out right hemisphere turns it into (almost) the training hemisphere (deterministic Dice
    on the block rises from 0.87 to 0.90 with it), which would leak the training data into TTA.
    """
    inferer = TTAInferer(flip_axes=(1, 2), noise_std=0.03, noise_samples=noise_samples, normalize=True, seed=seed)
    return _run(inferer, net0, case)


# ------------------------------------------------------------------------------------------------ scores
def dice_score(seg: np.ndarray, label: np.ndarray) -> float:
    """Mean Dice of grey and white matter (MONAI ``compute_dice``, ``ignore_empty=False``, as the CLI computes)."""
    from monai.metrics import compute_dice

    p = torch.from_numpy(np.ascontiguousarray(seg))[None, None]
    y = torch.from_numpy(np.ascontiguousarray(label))[None, None]
    d = compute_dice(p, y, include_background=False, ignore_empty=False, num_classes=3)[0]
    return float(d.mean())


def case_score(uncertainty: np.ndarray, seg: np.ndarray) -> float:
    """Case score: mean uncertainty inside the predicted foreground (GM + WM), the CLI's ``<measure>_fg_mean``
    (:func:`monai_unc.aggregation.aggregate`, ValUES Appendix F.1)."""
    return float(aggregate(uncertainty[None, None], "mean", mask=(seg > 0)[None, None])[0])


def write_json(path: Path, obj: Any) -> None:
    """JSON with NaN written as null, through a temporary file and a rename."""
    atomic_write_text(path, json.dumps(json_safe(obj), indent=1) + "\n")


def read_json(path: Path) -> Any:
    """``json.load`` of ``path`` (None when the file does not exist)."""
    return json.loads(Path(path).read_text()) if Path(path).is_file() else None


def threads_note() -> str:
    """Thread settings, for the report."""
    return f"torch threads {torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
