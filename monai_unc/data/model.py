"""The shipped example network: a small MONAI 3D UNet with dropout trained on the MNI152 tissue task.

Weights live in ``monai_unc/data/weights/mni152_tissue_unet.pt`` (a plain state dict, loaded with
``torch.load(weights_only=True)``), with the training record (protocol, seed, held-out Dice) beside it in
``mni152_tissue_unet.pt.json``. ``scripts/train_example.py`` reproduces them.

A training record is named after its file of weights with ``.json`` appended (``model.pt`` -> ``model.pt.json``):
one record per file of weights. In earlier versions it was the weights' name with its suffix replaced by ``.json``,
which ``model.pt`` and ``model.pth``, or ``ssn_lr0.001`` and ``ssn_lr0.01``, shared; such a record is still read when
the weights have none of their own and it records their digest.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from monai.networks.nets import UNet

from ..io import atomic_torch_save, atomic_write_text, check_output_file, file_sha256

__all__ = [
    "EXAMPLE_NETWORK",
    "WEIGHTS_DIR",
    "build_example_network",
    "check_trained_network_path",
    "example_weights_path",
    "example_weights_record",
    "load_example_model",
    "save_trained_network",
]

#: architecture of the example network (MONAI UNet keyword arguments)
EXAMPLE_NETWORK = {
    "spatial_dims": 3,
    "in_channels": 1,
    "out_channels": 3,
    "channels": (16, 32, 64, 128),
    "strides": (2, 2, 2),
    "num_res_units": 1,
    "dropout": 0.1,
}

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


def build_example_network(dropout: float | None = None) -> UNet:
    """The example UNet (:data:`EXAMPLE_NETWORK`), untrained.

    Args:
        dropout: overrides the trained dropout rate (0.1) for MC sampling, in [0, 1); None keeps it.

    Returns:
        A MONAI ``UNet`` (3D, 1 input channel, 3 classes) with fresh weights.

    Raises:
        ValueError: ``dropout`` is outside [0, 1).

    Example:
        >>> net = build_example_network(dropout=0.2)
        >>> net(torch.zeros(1, 1, 16, 16, 16)).shape
        torch.Size([1, 3, 16, 16, 16])
    """
    kwargs = dict(EXAMPLE_NETWORK)
    if dropout is not None:
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        kwargs["dropout"] = dropout
    return UNet(**kwargs)


def example_weights_path() -> Path:
    """The path of the shipped weights (``weights/mni152_tissue_unet.pt`` beside this module).

    Returns:
        The path (the file may be missing in a source tree without the weights).

    Example:
        >>> example_weights_path().name
        'mni152_tissue_unet.pt'
    """
    return WEIGHTS_DIR / "mni152_tissue_unet.pt"


def load_example_model(dropout: float | None = None, device: str | torch.device = "cpu") -> tuple[UNet, dict]:
    """The trained example network (eval mode) and its training record.

    Args:
        dropout: overrides the trained dropout rate (see :func:`build_example_network`).
        device: where to put the network.

    Returns:
        ``(network, record)``: the ``UNet`` in eval mode, and the training record of ``mni152_tissue_unet.pt.json``
        (protocol, seed, held-out Dice, ...; ``{}`` when the file is missing).

    Raises:
        FileNotFoundError: the weights are missing (run ``python scripts/train_example.py``).
        ValueError: the weights are not the ones their training record describes (:func:`example_weights_record`).

    Example:
        >>> net, record = load_example_model()
        >>> net.training, "dice_right_heldout" in record
        (False, True)
    """
    path = example_weights_path()
    meta = example_weights_record()
    net = build_example_network(dropout)
    net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return net.to(device).eval(), meta


def _record_path(path: Path) -> Path:
    """The training record of the weights ``path``: its name with ``.json`` appended (one record per file)."""
    return path.with_name(path.name + ".json")


def example_weights_record(path: str | os.PathLike | None = None) -> dict:
    """The training record of the example weights, checked against the weights' sha256 digest.

    The record (``<weights>.json``, e.g. ``model.pt.json``: protocol, seed, held-out Dice, ``weights_sha256``)
    describes one file of weights; weights replaced after training (another run, a download, a corrupted copy)
    would be reported with the record's numbers, so a record with a digest that the file does not have is refused.
    A record of earlier versions, named with the weights' suffix replaced (``model.json``, a name that ``model.pt``
    and ``model.pth`` shared), is read when the weights have no ``<weights>.json`` and it records a digest: a record
    there that records none may be another file's and is not taken.

    Args:
        path: the weights (``.pt``); None: the shipped ones (:func:`example_weights_path`).

    Returns:
        The record (``{}`` when there is none; not checked when it records no digest).

    Raises:
        FileNotFoundError: the weights are missing (run ``python scripts/train_example.py``).
        ValueError: the weights' digest is not the record's, or the record is not a JSON object.

    Example:
        >>> record = example_weights_record()
        >>> len(record["weights_sha256"]), "dice_right_heldout" in record
        (64, True)
    """
    path = example_weights_path() if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"example weights not found at {path}; run `python scripts/train_example.py`")
    meta_path, legacy = _record_path(path), False
    if not meta_path.is_file():
        meta_path, legacy = path.with_suffix(".json"), True
        if meta_path == path or not meta_path.is_file():
            return {}
    try:
        meta = json.loads(meta_path.read_text())
    except ValueError as e:
        raise ValueError(f"{meta_path}: the training record is not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{meta_path}: the training record must be a JSON object, got {type(meta).__name__}")
    expected = meta.get("weights_sha256")
    if expected is None and legacy:  # a name other weights may share: nothing says whose record it is
        return {}
    if expected is not None and file_sha256(path) != expected:
        shared = (f" (a record of earlier versions, a name that other weights such as {path.stem}.* shared)"
                  if legacy else "")
        raise ValueError(f"{path} is not the network its training record {meta_path.name}{shared} describes (sha256 "
                         f"{file_sha256(path)[:12]}..., recorded {str(expected)[:12]}...): restore the weights or "
                         "train them again with `python scripts/train_example.py`")
    return meta


def check_trained_network_path(path: str | os.PathLike, name: str = "out_path") -> Path:
    """Check, before training, where :func:`save_trained_network` will write the weights and their record.

    The record goes beside the state dict, named after it with ``.json`` appended (``model.pt`` ->
    ``model.pt.json``; in earlier versions the suffix was replaced, and ``ssn_lr0.001`` / ``ssn_lr0.01`` or
    ``model.pt`` / ``model.pth`` shared one record). A ``path`` ending in ``.json`` is refused: it is the name of
    another file's record (``model.json`` is the record of ``model``, and of ``model.pt`` in earlier versions) and
    would overwrite it or be taken for it (found by hostile testing: ``train_ssn("model.json")`` once overwrote the
    weights with the record). Both files must be writable (:func:`monai_unc.io.check_output_file`).

    Args:
        path: where the state dict goes.
        name: the argument's name in the messages.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: naming ``name``: a ``.json`` path, an existing folder, or a folder that cannot be written.

    Example:
        >>> from monai_unc.data import check_trained_network_path
        >>> check_trained_network_path("model.json")
        Traceback (most recent call last):
            ...
        ValueError: out_path model.json ends in .json: ... give a name such as model.pt
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file path, got {type(path).__name__}")
    path = Path(path)
    if path.suffix.lower() == ".json":
        raise ValueError(f"{name} {path} ends in .json: the name of training records (<weights>.json); the weights "
                         f"would overwrite the record of {path.with_suffix('').name} or be taken for one; give a name "
                         f"such as {path.with_suffix('.pt').name}")
    check_output_file(path, what=name)
    check_output_file(_record_path(path), what=f"the training record of {name}")
    return path


def save_trained_network(net: torch.nn.Module, record: dict[str, Any], path: str | os.PathLike) -> Path:
    """Save a trained network's state dict to ``path`` and its training record beside it, atomically.

    The record goes to ``path`` with ``.json`` appended (``model.pt`` -> ``model.pt.json``: one record per file of
    weights), as indented JSON with a final newline, the file :func:`example_weights_record` reads back, with the
    state dict's sha256 digest added as ``weights_sha256`` (:func:`example_weights_record` checks it).

    Args:
        net: the trained network.
        record: the training record (JSON-serialisable).
        path: where the state dict goes (``.pt``); the record goes to ``<path>.json``.

    Returns:
        The path of the state dict.

    Raises:
        ValueError: as :func:`check_trained_network_path` (a ``.json`` path is refused); the network has a
            non-finite weight or buffer (a diverged training; nothing is written then).
        TypeError: ``record`` holds a value JSON cannot write (nothing is written then).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     saved = save_trained_network(torch.nn.Linear(2, 2), {"seed": 0}, Path(d) / "net.pt")
        ...     saved.name, sorted(p.name for p in Path(d).iterdir())
        ('net.pt', ['net.pt', 'net.pt.json'])
    """
    path = check_trained_network_path(path, "path")
    state = net.state_dict()
    bad = [k for k, v in state.items() if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex())
           and not bool(torch.isfinite(v).all())]
    if bad:  # a diverged training: weights that predict NaN everywhere, saved with a record of its settings
        raise ValueError(f"net has non-finite values in {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}: the "
                         "training diverged; nothing is written")
    try:  # before the weights: a record that cannot be written left a .pt without its .json (found by hostile testing)
        json.dumps(record)
    except (TypeError, ValueError) as err:
        raise TypeError(f"record must hold JSON values (it is written beside the weights): {err}") from None
    atomic_torch_save(path, state)
    record = {**record, "weights_sha256": file_sha256(path)}
    atomic_write_text(_record_path(path), json.dumps(record, indent=2) + "\n")
    return path
