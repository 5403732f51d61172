"""Batch prediction with uncertainty: the engine behind ``monai-unc infer``.

Three ways to name the model (:func:`load_network`):

- ``model="example"``: the shipped MNI152 tissue UNet (:func:`monai_unc.data.load_example_model`);
- ``bundle=DIR``: a MONAI bundle: ``configs/inference.json`` (or ``.yaml``) defines ``network_def``; the weights are
  ``models/model.pt``. When the config defines ``preprocessing`` it is applied to ``{"image": path}`` and the
  output maps are mapped back to the input's grid with MONAI's ``Invertd``;
- ``network=SPEC`` + ``checkpoints=[...]``: a network given as a MONAI config dict (``{"_target_":
  "monai.networks.nets.UNet", ...}``, inline JSON or a ``.json``/``.yaml`` file) and its state dict.

Checkpoints are read with ``torch.load(weights_only=True)`` unless ``unsafe_load=True`` (only for files you
trust: a pickle can run code).

Methods (:func:`build_inferer`) are ``+``-joined sample sources: ``mcdropout``, ``ratein``, ``tta`` (flips over all
axis subsets, optional noise) and ``ensemble`` (one member per checkpoint), e.g. ``"mcdropout+tta"``; ``softmax``
alone is the deterministic baseline. The sliding-window inferer is used when ``roi`` is given.

Per case, :func:`predict_case` writes (atomically: temporary name, then rename) ``<case>_seg.nii.gz`` (argmax of
the mean probabilities), ``<case>_probs.nii.gz`` (4D ``(X, Y, Z, C)``), ``<case>_<measure>.nii.gz`` for each
uncertainty map, and last ``<case>.json`` (the record that marks the case finished). :func:`predict_cases` skips
finished cases, so an interrupted run resumes where it stopped; it takes an explicit list of cases so that
callers can shard a cohort. :func:`run_infer` is the whole ``monai-unc infer`` loop on one process or under
``torchrun``: rank 0 prepares the output folder, every rank predicts its shard (:func:`monai_unc.distributed.shard`,
sorted case ids round-robin; outputs are per-case files, so no two ranks write the same file), a case that fails is
reported with its id and the others go on, and rank 0 writes ``failures.json``. See docs/distributed.md.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .distributed import error_line
from .io import ImageCase, read_volume, save_probabilities
from .keys import UncertaintyKeys as K
from .report.nifti import atomic_write_text, save_nifti

__all__ = [
    "METHOD_TOKENS",
    "DEFAULT_MEASURES",
    "INTENSITY_MODES",
    "InferSettings",
    "LoadedModel",
    "load_network",
    "load_checkpoint",
    "build_inferer",
    "normalize_intensity",
    "load_image_case",
    "case_outputs",
    "is_finished",
    "predict_case",
    "predict_cases",
    "run_infer",
    "FAILURES_FILE",
    "check_run_settings",
    "TemperatureScaled",
    "collect_logits",
    "calibrate_network",
]

METHOD_TOKENS = ("softmax", "mcdropout", "ratein", "tta", "ensemble")
DEFAULT_MEASURES = (
    K.PREDICTIVE_ENTROPY.value,
    K.EXPECTED_ENTROPY.value,
    K.MUTUAL_INFORMATION.value,
    K.MAX_SOFTMAX.value,
)
INTENSITY_MODES = ("none", "max", "minmax", "zscore")
#: written by rank 0 of :func:`run_infer` when cases failed (removed by a run without failures)
FAILURES_FILE = "failures.json"
_CONFIG_NAMES = ("inference.json", "inference.yaml", "inference.yml")


# ----------------------------------------------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------------------------------------------
def load_checkpoint(path: str | os.PathLike, unsafe_load: bool = False) -> dict[str, torch.Tensor]:
    """State dict of a checkpoint (see :func:`monai_unc.inferers.load_state_dict`), with a clear error when a
    ``weights_only`` load is refused."""
    from .inferers import load_state_dict

    try:
        return load_state_dict(path, weights_only=not unsafe_load)
    except (pickle.UnpicklingError, RuntimeError, AttributeError) as e:
        if unsafe_load:
            raise ValueError(f"cannot load checkpoint {path}: {e}") from None
        raise ValueError(
            f"checkpoint {path} cannot be loaded with torch.load(weights_only=True) (it holds pickled Python "
            "objects); if you trust the file, pass --unsafe-load"
        ) from None


def _read_spec(spec: str | os.PathLike | dict) -> dict:
    if isinstance(spec, dict):
        return spec
    text = str(spec)
    path = Path(text)
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"network spec is not valid JSON: {e}") from None
    if not path.is_file():
        raise ValueError(f"network spec must be inline JSON or a .json/.yaml file, got {text!r} (file not found)")
    from monai.bundle import ConfigParser

    return ConfigParser.load_config_file(str(path))


def _instantiate(spec: dict, what: str) -> nn.Module:
    from monai.bundle import ConfigParser

    if "_target_" not in spec:
        raise ValueError(f"{what} must be a MONAI config dict with a '_target_' (e.g. monai.networks.nets.UNet)")
    try:
        net = ConfigParser({"network": spec}).get_parsed_content("network")
    except Exception as e:  # MONAI wraps instantiation errors in RuntimeError with the config path
        raise ValueError(f"cannot build the network from {what}: {e}") from None
    if not isinstance(net, nn.Module):
        raise ValueError(f"{what} built a {type(net).__name__}, not a torch.nn.Module")
    return net


class TemperatureScaled(nn.Module):
    """A network whose logits are divided by a temperature (for networks whose last layer cannot absorb it)."""

    def __init__(self, network: nn.Module, temperature: torch.Tensor) -> None:
        super().__init__()
        self.network = network
        self.register_buffer("temperature", torch.as_tensor(temperature, dtype=torch.float32).reshape(-1))

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        z = self.network(x, *args, **kwargs)
        t = self.temperature.to(device=z.device, dtype=z.dtype)
        return z / (t.view(1, -1, *([1] * (z.ndim - 2))) if t.numel() > 1 else t)


def _checkpoint_temperature(path: str, unsafe_load: bool) -> torch.Tensor | None:
    """The ``temperature`` entry that ``monai-unc calibrate`` stores next to a state dict it could not fold."""
    obj = torch.load(path, map_location="cpu", weights_only=not unsafe_load)
    t = obj.get("temperature") if isinstance(obj, dict) else None
    return t if isinstance(t, torch.Tensor) else None


@dataclass
class LoadedModel:
    """A network (eval mode, on its device), where it came from, and the bundle preprocessing (if any)."""

    network: nn.Module
    description: str
    default_intensity: str = "none"
    preprocessing: Callable | None = None
    checkpoints: list[str] = field(default_factory=list)


def _bundle_config(bundle: Path) -> Path:
    for name in _CONFIG_NAMES:
        p = bundle / "configs" / name
        if p.is_file():
            return p
    raise ValueError(f"bundle {bundle} has no configs/inference.json (or .yaml)")


def load_network(
    model: str | None = None,
    bundle: str | os.PathLike | None = None,
    network: str | os.PathLike | dict | None = None,
    checkpoints: Sequence[str | os.PathLike] = (),
    unsafe_load: bool = False,
    device: str | torch.device = "cpu",
    bundle_preprocessing: bool = True,
) -> LoadedModel:
    """Build the network from exactly one of ``model="example"``, ``bundle`` or ``network`` (see the module
    docstring) and load its weights (the first checkpoint when several are given: ensemble members are loaded
    by the ensemble source during inference)."""
    given = [x is not None for x in (model, bundle, network)]
    if sum(given) != 1:
        raise ValueError("name the model with exactly one of --model example, --bundle DIR or --network SPEC")
    checkpoints = [str(c) for c in checkpoints]
    for c in checkpoints:
        if not Path(c).is_file():
            raise ValueError(f"checkpoint file not found: {c}")
    preprocessing = None
    if model is not None:
        if model != "example":
            raise ValueError(f"--model must be 'example' (the shipped MNI152 tissue UNet), got {model!r}")
        from .data import build_example_network, example_weights_path

        net = build_example_network()
        weights = checkpoints[0] if checkpoints else str(example_weights_path())
        if not checkpoints:
            checkpoints = [weights]
        net.load_state_dict(load_checkpoint(weights, unsafe_load))
        desc, intensity = "example: MNI152 tissue UNet", "max"
    elif bundle is not None:
        from monai.bundle import ConfigParser

        root = Path(bundle)
        if not root.is_dir():
            raise ValueError(f"bundle folder not found: {root}")
        parser = ConfigParser()
        parser.read_config(str(_bundle_config(root)))
        parser["bundle_root"] = str(root.resolve())
        if "network_def" not in parser.config:
            raise ValueError(f"bundle {root}: the inference config defines no 'network_def'")
        try:
            net = parser.get_parsed_content("network_def")
        except Exception as e:
            raise ValueError(f"bundle {root}: cannot build network_def: {e}") from None
        if not checkpoints:
            weights = root / "models" / "model.pt"
            if not weights.is_file():
                raise ValueError(f"bundle {root} has no models/model.pt (or pass --checkpoint)")
            checkpoints = [str(weights)]
        net.load_state_dict(load_checkpoint(checkpoints[0], unsafe_load))
        if bundle_preprocessing and "preprocessing" in parser.config:
            try:
                preprocessing = parser.get_parsed_content("preprocessing")
            except Exception as e:
                raise ValueError(
                    f"bundle {root}: cannot build its 'preprocessing' ({e}); pass --no-bundle-preprocessing"
                ) from None
        desc, intensity = f"bundle: {root.resolve()}", "none"
    else:
        net = _instantiate(_read_spec(network), "--network")  # type: ignore[arg-type]
        if not checkpoints:
            raise ValueError("--network needs --checkpoint FILE (the trained weights)")
        net.load_state_dict(load_checkpoint(checkpoints[0], unsafe_load))
        desc, intensity = f"network: {type(net).__name__}", "none"
    temperature = _checkpoint_temperature(checkpoints[0], unsafe_load)
    if temperature is not None:
        net = TemperatureScaled(net, temperature)
        desc += f" (temperature {[round(float(v), 4) for v in temperature.reshape(-1)]})"
    return LoadedModel(net.to(device).eval(), desc, intensity, preprocessing, checkpoints)


def build_inferer(
    method: str,
    samples: int = 10,
    roi: int | Sequence[int] | None = None,
    overlap: float = 0.25,
    sw_batch_size: int = 1,
    checkpoints: Sequence[str] = (),
    unsafe_load: bool = False,
    seed: int | None = 0,
    tta_noise: float = 0.0,
    ratein_target: float = 0.1,
    activation: str | None = "softmax",
    measures: Sequence[str] = DEFAULT_MEASURES,
) -> Any:
    """An :class:`~monai_unc.inferers.UncertaintyInferer` for a ``+``-joined method string (module docstring)."""
    from monai.inferers import SimpleInferer, SlidingWindowInferer

    from .inferers import EnsembleSource, FlipSource, MCDropoutSource, NoiseSource, SoftmaxInferer, UncertaintyInferer

    tokens = [t.strip().lower() for t in method.split("+") if t.strip()]
    bad = [t for t in tokens if t not in METHOD_TOKENS]
    if not tokens or bad:
        raise ValueError(f"--method must be '+'-joined names from {METHOD_TOKENS}, got {method!r}")
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"--method names a source twice: {method!r}")
    if "softmax" in tokens and len(tokens) > 1:
        raise ValueError("--method softmax (the deterministic baseline) cannot be combined with other sources")
    if "mcdropout" in tokens and "ratein" in tokens:
        raise ValueError("--method: mcdropout and ratein both sample dropout masks; choose one")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"--samples must be a positive integer, got {samples!r}")
    if roi is not None:
        roi = int(roi) if isinstance(roi, (int, np.integer)) else tuple(int(r) for r in roi)
        if min(roi if isinstance(roi, tuple) else (roi,)) < 1:
            raise ValueError(f"--roi sizes must be positive, got {roi}")
        if not 0 <= overlap < 1:
            raise ValueError(f"--overlap must be in [0, 1), got {overlap}")
        base = SlidingWindowInferer(roi, sw_batch_size=sw_batch_size, overlap=overlap, mode="gaussian")
    else:
        base = SimpleInferer()
    keys = [K.PRED.value, *measures]
    if "softmax" in tokens:
        keys = [k for k in keys if k in (K.PRED.value, K.PREDICTIVE_ENTROPY.value, K.MAX_SOFTMAX.value)]
        return SoftmaxInferer(base_inferer=base, activation=activation, keys=keys, seed=seed)
    sources: list[Any] = []
    for t in tokens:
        if t == "ensemble":
            if any(_checkpoint_temperature(c, unsafe_load) is not None for c in checkpoints):
                raise ValueError("--method ensemble: a member holds a separate temperature (from monai-unc "
                                 "calibrate); ensemble members must be plain state dicts")
            if len(checkpoints) < 2:
                raise ValueError("--method ensemble needs at least two --checkpoint files (one per member)")
            sources.append(EnsembleSource(list(checkpoints), weights_only=not unsafe_load))
        elif t == "mcdropout":
            sources.append(MCDropoutSource(samples))
        elif t == "ratein":
            try:
                from .inferers.rate_in import RateInSource
            except ImportError as e:  # pragma: no cover - Rate-In ships with the package
                raise ValueError(f"--method ratein is not available: {e}") from None
            sources.append(RateInSource(samples, target_loss=ratein_target))
        elif t == "tta":
            sources.append(FlipSource("all"))
            if tta_noise > 0:
                sources.append(NoiseSource(tta_noise, num_samples=1))
    track_variance = K.VARIANCE.value in keys
    return UncertaintyInferer(
        sources, base_inferer=base, activation=activation, keys=keys, seed=seed, track_variance=track_variance
    )


def normalize_intensity(image: np.ndarray, mode: str) -> np.ndarray:
    """Intensity normalisation of a ``(C, *spatial)`` image before the network: ``none``; ``max`` (negative values
    clipped to 0, divided by the maximum, as the example model was trained); ``minmax`` (to [0, 1]); ``zscore``
    (zero mean, unit standard deviation per channel)."""
    if mode not in INTENSITY_MODES:
        raise ValueError(f"intensity must be one of {INTENSITY_MODES}, got {mode!r}")
    x = image.astype(np.float32, copy=True)
    for c in range(x.shape[0]):
        ch = x[c]
        if mode == "max":
            np.clip(ch, 0, None, out=ch)
            ch /= max(float(ch.max()), 1e-6)
        elif mode == "minmax":
            lo, hi = float(ch.min()), float(ch.max())
            ch -= lo
            ch /= max(hi - lo, 1e-6)
        elif mode == "zscore":
            ch -= float(ch.mean())
            ch /= max(float(ch.std()), 1e-6)
    return x


# ----------------------------------------------------------------------------------------------------------------
# per case
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class InferSettings:
    """Everything that determines the outputs of a run (stored in ``infer.json``; a resumed run must match)."""

    model: str
    method: str
    samples: int
    roi: list[int] | None
    overlap: float
    intensity: str
    measures: list[str]
    seed: int | None
    activation: str | None
    checkpoints: list[str]
    tta_noise: float = 0.0
    ratein_target: float = 0.1
    dropout: float | None = None
    write_probs: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def case_outputs(case_id: str, measures: Sequence[str], write_probs: bool = True) -> list[str]:
    """File names :func:`predict_case` writes for a case (the record ``<case>.json`` comes last)."""
    names = [f"{case_id}_seg.nii.gz"]
    if write_probs:
        names.append(f"{case_id}_probs.nii.gz")
    names += [f"{case_id}_{m}.nii.gz" for m in measures]
    return names


def is_finished(case_id: str, output: Path) -> bool:
    """A case is finished when its record exists and every file the record lists exists."""
    rec = output / f"{case_id}.json"
    if not rec.is_file():
        return False
    try:
        files = json.loads(rec.read_text())["files"]
    except (ValueError, KeyError, TypeError):
        return False
    return all((output / f).is_file() for f in files)


def load_image_case(case: ImageCase) -> tuple[np.ndarray, np.ndarray]:
    """The channels of a case stacked ``(C, *spatial)`` and the affine of the first one."""
    chans, affine = [], None
    for path in case.channels:
        data, aff = read_volume(path)
        if affine is None:
            affine = aff
        elif data.shape[1:] != chans[0].shape[1:] or not np.allclose(aff, affine, atol=1e-3):
            raise ValueError(f"case {case.case_id!r}: channel {path.name} does not share the geometry of channel 0")
        chans.append(data)
    assert affine is not None
    return np.concatenate(chans, axis=0), affine


def _run_with_preprocessing(
    case: ImageCase, model: LoadedModel, inferer: Any, device: torch.device
) -> tuple[dict, Any]:
    """Bundle preprocessing: transform, infer, and invert every map back onto the input grid."""
    from monai.transforms import Invertd

    src = [str(p) for p in case.channels]
    data = model.preprocessing({"image": src[0] if len(src) == 1 else src})  # type: ignore[misc]
    image = data["image"]
    x = image[None].to(device) if isinstance(image, torch.Tensor) else torch.as_tensor(image)[None].to(device)
    out = inferer(x, model.network)
    keys = [k for k in out if k != K.SAMPLES.value]
    d = {"image": image, **{k: out[k][0].detach().cpu() for k in keys}}
    d = Invertd(keys=keys, transform=model.preprocessing, orig_keys="image", nearest_interp=False)(d)
    affine = np.asarray(d[keys[0]].affine, dtype=np.float64)
    return {k: d[k][None] for k in keys}, (out, affine)


def predict_case(
    case: ImageCase, model: LoadedModel, inferer: Any, settings: InferSettings, output: Path, device: torch.device
) -> dict[str, Any]:
    """Predict one case and write its files (module docstring); returns the record written to ``<case>.json``."""
    t0 = time.time()
    if model.preprocessing is not None:
        maps, (raw, affine) = _run_with_preprocessing(case, model, inferer, device)
    else:
        image, affine = load_image_case(case)
        image = normalize_intensity(image, settings.intensity)
        x = torch.from_numpy(image)[None].to(device)
        raw = inferer(x, model.network)
        maps = raw
    pred = maps[K.PRED.value]
    seg = pred.argmax(1)[0].to(torch.int16).cpu().numpy()
    if seg.ndim != 3:
        raise ValueError(f"case {case.case_id!r}: only 3D volumes are written as NIfTI, got spatial shape {seg.shape}")
    names = case_outputs(case.case_id, [m for m in settings.measures if m in maps], settings.write_probs)
    # an earlier record (--overwrite) must not mark a case finished whose new files are only partly written
    (output / f"{case.case_id}.json").unlink(missing_ok=True)
    save_nifti(seg, affine, output / names[0])
    i = 1
    if settings.write_probs:
        save_probabilities(pred[0].float(), affine, output / names[1])
        i = 2
    for m in settings.measures:
        if m in maps:
            save_nifti(maps[m][0, 0].float(), affine, output / names[i])
            i += 1
    record = {
        "case": case.case_id,
        "inputs": [str(p) for p in case.channels],
        "files": names,
        "method": settings.method,
        "num_samples": int(getattr(raw, "num_samples", 1)),
        "mi_meaning": str(getattr(raw, "mi_meaning", "none")),
        "seconds": round(time.time() - t0, 3),
        "shape": list(seg.shape),
    }
    extras = getattr(raw, "extras", {}) or {}
    rates = extras.get("rate_in_rates")
    if rates:
        record["rate_in_mean_rates"] = {k: float(v.float().mean()) for k, v in rates.items()}
    atomic_write_text(output / f"{case.case_id}.json", json.dumps(record, indent=2) + "\n")
    return record


def check_run_settings(output: Path, settings: InferSettings, overwrite: bool = False) -> None:
    """Write ``infer.json``; refuse to resume a run whose settings differ (unless ``overwrite``) once it has
    finished a case (a run that finished nothing may be restarted with other settings)."""
    path = output / "infer.json"
    new = settings.to_json()
    started = any(p.name not in ("infer.json", FAILURES_FILE) for p in output.glob("*.json"))
    if path.is_file() and started and not overwrite:
        try:
            old = json.loads(path.read_text()).get("settings", {})
        except ValueError:
            old = {}
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if diff:
            raise ValueError(
                f"{output} holds a run with different settings ({', '.join(diff)}); resume with the same settings, "
                "choose another --output, or pass --overwrite"
            )
    atomic_write_text(path, json.dumps({"settings": new}, indent=2) + "\n")


def predict_cases(
    cases: Sequence[ImageCase],
    model: LoadedModel,
    inferer: Any,
    settings: InferSettings,
    output: str | os.PathLike,
    device: str | torch.device = "cpu",
    overwrite: bool = False,
    progress: bool = True,
    desc: str = "infer",
    on_error: str = "raise",
    on_failure: Callable[[str, BaseException], None] | None = None,
) -> list[dict[str, Any]]:
    """Predict ``cases`` into ``output``, skipping finished ones (unless ``overwrite``).

    Returns one dict per case: ``{"case", "status": "written" | "skipped", "record"}``, or with
    ``on_error="continue"`` also ``{"case", "status": "failed", "error"}`` for a case whose prediction raised (the
    loop goes on; its files are not marked finished, so a rerun redoes it; ``on_failure(case_id, exception)`` is
    called at once). ``on_error="raise"`` re-raises the first error. The caller checks the output folder
    (:func:`monai_unc.io.check_output_folder`) and the settings (:func:`check_run_settings`).
    """
    from tqdm.auto import tqdm

    if on_error not in ("raise", "continue"):
        raise ValueError(f"on_error must be 'raise' or 'continue', got {on_error!r}")
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    device = torch.device(device)
    results = []
    bar = tqdm(cases, desc=desc, unit="case", disable=not progress, file=sys.stderr, dynamic_ncols=True)
    for case in bar:
        bar.set_postfix_str(case.case_id)
        if not overwrite and is_finished(case.case_id, output):
            rec = json.loads((output / f"{case.case_id}.json").read_text())
            results.append({"case": case.case_id, "status": "skipped", "record": rec})
            continue
        try:
            rec = predict_case(case, model, inferer, settings, output, device)
        except Exception as e:  # KeyboardInterrupt is not an Exception: an interrupt stops the run
            if on_error == "raise":
                raise
            results.append({"case": case.case_id, "status": "failed", "error": error_line(e)})
            if on_failure is not None:
                on_failure(case.case_id, e)
            continue
        results.append({"case": case.case_id, "status": "written", "record": rec})
    return results


def run_infer(
    cases: Sequence[ImageCase],
    model: LoadedModel,
    inferer: Any,
    settings: InferSettings,
    output: str | os.PathLike,
    device: str | torch.device = "cpu",
    overwrite: bool = False,
    progress: bool = True,
    dist: Any = None,
    on_failure: Callable[[Any], None] | None = None,
) -> list[dict[str, Any]]:
    """The ``monai-unc infer`` loop on one process or on every rank of a process group.

    Rank 0 removes partial files of an interrupted run and checks / writes ``infer.json``
    (:func:`check_run_settings`); every rank then predicts its shard of ``cases``
    (:func:`monai_unc.distributed.shard`: sorted case ids, round-robin) with :func:`predict_cases`, continuing past a
    failing case (``on_failure(CaseFailure)`` is called at once; default: one stderr line with the case id and the
    rank). The per-case statuses are exchanged, rank 0 writes ``failures.json`` (or removes a stale one) and every
    rank returns the statuses of all cases ``{"case", "status", "rank", ["error"]}`` sorted by case id (each case
    exactly once), or raises :class:`~monai_unc.distributed.CasesFailed` on every rank when a case failed. Every
    collective is reached by every rank, so a failure never leaves a rank waiting.

    Args:
        dist: a :class:`~monai_unc.distributed.DistContext` (default :func:`~monai_unc.distributed.get_dist_context`,
            which joins or initialises the process group described by torchrun's environment variables).
    """
    from .distributed import get_dist_context

    ctx = dist if dist is not None else get_dist_context(device)
    return _run_infer(ctx, cases, model, inferer, settings, Path(output), device, overwrite, progress, on_failure)


def _run_infer(
    ctx: Any,
    cases: Sequence[ImageCase],
    model: LoadedModel,
    inferer: Any,
    settings: InferSettings,
    output: Path,
    device: str | torch.device,
    overwrite: bool,
    progress: bool,
    on_failure: Callable[[Any], None] | None,
) -> list[dict[str, Any]]:
    from .distributed import (
        CaseFailure,
        CasesFailed,
        all_gather_objects,
        check_each_case_once,
        check_same_cases,
        failure_reporter,
        shard,
        sync_errors,
        write_failures,
    )
    from .io import clean_partial_files

    err: BaseException | None = None
    if ctx.is_main:
        try:
            output.mkdir(parents=True, exist_ok=True)
            clean_partial_files(output)
            check_run_settings(output, settings, overwrite=overwrite)
        except Exception as e:
            err = e
    sync_errors(err, ctx)
    ids = sorted(c.case_id for c in cases)
    check_same_cases(ids, ctx)
    mine = shard(list(cases), ctx.rank, ctx.world_size, key=lambda c: c.case_id)
    failed = failure_reporter(ctx, "monai-unc infer", on_failure)

    results: list[dict[str, Any]] = []
    try:
        desc = f"infer ({ctx.describe()})" if ctx.distributed else "infer"
        results = predict_cases(mine, model, inferer, settings, output, device=device, overwrite=overwrite,
                                progress=progress and ctx.is_main, desc=desc, on_error="continue", on_failure=failed)
        err = None
    except Exception as e:  # not a per-case error (those are collected)
        err = e
    sync_errors(err, ctx)
    compact = [{"case": r["case"], "status": r["status"], "rank": ctx.rank,
                **({"error": r["error"]} if r["status"] == "failed" else {})} for r in results]
    every = sorted((r for part in all_gather_objects(compact, ctx) for r in part), key=lambda r: r["case"])
    check_each_case_once([r["case"] for r in every], ids)
    failures = [CaseFailure(r["case"], r["rank"], r["error"]) for r in every if r["status"] == "failed"]
    err = None
    if ctx.is_main:
        try:
            write_failures(output / FAILURES_FILE, failures, "monai-unc infer")
        except Exception as e:
            err = e
    sync_errors(err, ctx)
    if failures:
        raise CasesFailed(failures, results=every)
    return every


# ----------------------------------------------------------------------------------------------------------------
# temperature calibration
# ----------------------------------------------------------------------------------------------------------------
def collect_logits(
    cases: Sequence[ImageCase],
    labels: Sequence[str | os.PathLike],
    model: LoadedModel,
    intensity: str,
    roi: int | Sequence[int] | None = None,
    overlap: float = 0.25,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Deterministic logits ``(1, C, *spatial)`` (network in eval mode) and checked labels ``(1, *spatial)`` of
    validation cases, on the CPU."""
    from monai.inferers import SimpleInferer, SlidingWindowInferer
    from tqdm.auto import tqdm

    from .io import check_label_map, read_volume

    if model.preprocessing is not None:
        raise ValueError("calibrate cannot apply a bundle's preprocessing to the labels; pass "
                         "--no-bundle-preprocessing and preprocess the images beforehand")
    base = SimpleInferer() if roi is None else SlidingWindowInferer(roi, sw_batch_size=1, overlap=overlap,
                                                                    mode="gaussian")
    net = model.network.eval()
    logits, targets = [], []
    for case, label_path in tqdm(list(zip(cases, labels)), desc="logits", unit="case", disable=not progress,
                                 file=sys.stderr):
        image, affine = load_image_case(case)
        lab, lab_aff = read_volume(label_path)
        if lab.shape[1:] != image.shape[1:] or not np.allclose(lab_aff, affine, atol=1e-3):
            raise ValueError(f"case {case.case_id!r}: label {Path(label_path).name} does not share the image's grid")
        x = torch.from_numpy(normalize_intensity(image, intensity))[None].to(device)
        with torch.no_grad():
            z = base(x, net)
        z = (z[0] if isinstance(z, (tuple, list)) else z).float().cpu()
        z = z.as_tensor() if hasattr(z, "as_tensor") else z
        y = check_label_map(lab[0], f"case {case.case_id!r}: label {Path(label_path).name}", int(z.shape[1]))
        logits.append(z)
        targets.append(torch.from_numpy(y)[None])
    return logits, targets


def calibrate_network(
    logits: Sequence[torch.Tensor],
    labels: Sequence[torch.Tensor],
    network: nn.Module,
    mode: str = "scalar",
    loss: str = "nll",
    max_steps: int = 1000,
    example_input: torch.Tensor | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fit a :class:`~monai_unc.calibration.TemperatureScaler` (seed 001 protocol) and make a calibrated copy.

    Returns ``(checkpoint, record)``. The checkpoint is the copy's state dict with ``t`` folded into the logit
    layer when that provably divides the output by ``t`` (checked on ``example_input``); otherwise
    ``{"state_dict": original, "temperature": t}``, which :func:`load_network` applies by dividing the logits.
    The record holds ``t``, convergence, and the pooled NLL / ECE / all-label ECE of the validation voxels
    before and after (:mod:`monai_unc.metrics.calibration`).
    """
    import copy

    from .calibration import TemperatureScaler
    from .metrics.calibration import ConfidenceHistogram, calibration_metrics

    if not logits:
        raise ValueError("no validation case to calibrate on")
    scaler = TemperatureScaler(mode=mode, loss=loss, max_steps=max_steps).fit(list(logits), list(labels))

    def metrics(scale: Any) -> dict[str, float]:
        hist = ConfidenceHistogram(int(logits[0].shape[1]), per_case=False)
        for z, y in zip(logits, labels):
            zz = z if scale is None else scale.transform(z)
            hist.update(torch.softmax(zz.double(), 1), y, validate=False)
        return {k: float(v) for k, v in calibration_metrics(hist, ("nll", "ece", "all_label_ece")).items()}

    copy_net = copy.deepcopy(network).cpu().eval()
    folded = True
    try:
        scaler.fold_into(copy_net, example_input=example_input)
    except (ValueError, TypeError):
        folded = False
    temperature = scaler.temperature.detach().float().cpu()
    state = copy_net.state_dict() if folded else {
        "state_dict": network.state_dict(), "temperature": temperature, "temperature_mode": mode,
    }
    record = {
        "temperature": temperature.tolist(),
        "mode": mode,
        "loss": loss,
        "steps": len(scaler.history),
        "converged": bool(scaler.converged),
        "folded_into_last_layer": folded,
        "before": metrics(None),
        "after": metrics(scaler),
        "cases": len(logits),
        "voxels": int(sum(y.numel() for y in labels)),
    }
    return state, record
