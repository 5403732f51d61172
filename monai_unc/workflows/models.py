"""Loading the network of ``monai-unc infer`` / ``calibrate``: the shipped example, a MONAI bundle, or a network
spec and its checkpoints (:func:`load_network`).

Three ways to name the model:

- ``model="example"``: the shipped MNI152 tissue UNet (:func:`monai_unc.data.load_example_model`);
- ``bundle=DIR``: a MONAI bundle: ``configs/inference.json`` (or ``.yaml``) defines ``network_def``; the weights are
  ``models/model.pt``. When the config defines ``preprocessing`` it is applied to ``{"image": path}`` and the
  output maps are mapped back to the input's grid with MONAI's ``Invertd``;
- ``network=SPEC`` + ``checkpoints=[...]``: a network given as a MONAI config dict (``{"_target_":
  "monai.networks.nets.UNet", ...}``, inline JSON or a ``.json``/``.yaml`` file) and its state dict.

Checkpoints are read with ``torch.load(weights_only=True)`` unless ``unsafe_load=True`` (only for files you
trust: a pickle can run code). A checkpoint written by ``monai-unc calibrate`` that could not fold its temperature
into the last layer carries it beside the state dict; the network is then wrapped in
:class:`~monai_unc.temperature.TemperatureScaled`.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from monai.bundle import ConfigParser
from torch import nn

from ..data import build_example_network, example_weights_path
from ..inferers import load_state_dict
from ..temperature import TemperatureScaled

__all__ = ["LoadedModel", "load_network", "load_checkpoint", "checkpoint_temperature"]

_CONFIG_NAMES = ("inference.json", "inference.yaml", "inference.yml")


def load_checkpoint(path: str | os.PathLike, unsafe_load: bool = False) -> dict[str, torch.Tensor]:
    """State dict of a checkpoint (see :func:`monai_unc.inferers.load_state_dict`), with a clear error when a
    ``weights_only`` load is refused."""

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

    return ConfigParser.load_config_file(str(path))


def _instantiate(spec: dict, what: str) -> nn.Module:

    if "_target_" not in spec:
        raise ValueError(f"{what} must be a MONAI config dict with a '_target_' (e.g. monai.networks.nets.UNet)")
    try:
        net = ConfigParser({"network": spec}).get_parsed_content("network")
    except Exception as e:  # MONAI wraps instantiation errors in RuntimeError with the config path
        raise ValueError(f"cannot build the network from {what}: {e}") from None
    if not isinstance(net, nn.Module):
        raise ValueError(f"{what} built a {type(net).__name__}, not a torch.nn.Module")
    return net


def checkpoint_temperature(path: str, unsafe_load: bool) -> torch.Tensor | None:
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

        net = build_example_network()
        weights = checkpoints[0] if checkpoints else str(example_weights_path())
        if not checkpoints:
            checkpoints = [weights]
        net.load_state_dict(load_checkpoint(weights, unsafe_load))
        desc, intensity = "example: MNI152 tissue UNet", "max"
    elif bundle is not None:

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
    temperature = checkpoint_temperature(checkpoints[0], unsafe_load)
    if temperature is not None:
        net = TemperatureScaled(net, temperature)
        desc += f" (temperature {[round(float(v), 4) for v in temperature.reshape(-1)]})"
    return LoadedModel(net.to(device).eval(), desc, intensity, preprocessing, checkpoints)
