"""Dropout for nnU-Net v2: a plans variant for training with dropout, and post-hoc dropout for trained models.

Two ways to train an nnU-Net with dropout (the networks of ``dynamic_network_architectures`` take
``dropout_op`` / ``dropout_op_kwargs`` and place the dropout, ``conv -> dropout -> norm -> nonlin``: ``PlainConvUNet``
after every convolution of encoder and decoder; ``ResidualEncoderUNet``, nnU-Net's ResEnc presets, after the stem's
convolution, the first convolution of each residual block only, and every decoder convolution):

1. **Plans variant, no trainer** (:func:`write_dropout_plans`): copy ``nnUNetPlans.json`` to
   ``nnUNetPlansDropout.json`` with the ``"dropout_op"`` of each configuration's convolution (``"torch.nn.Dropout3d"``,
   ``"torch.nn.Dropout2d"`` for ``2d``) and ``"dropout_op_kwargs": {"p": 0.2, "inplace": false}`` in the architecture
   of every configuration, then ``nnUNetv2_train DATASET 3d_fullres FOLD -p
   nnUNetPlansDropout``. The preprocessed data is reused (the configurations keep their ``data_identifier``).
2. **Trainer** :class:`monai_unc.nnunet.trainers.nnUNetTrainerMCDropout` (via ``nnUNet_extTrainer``): the same
   network from the unchanged plans.

Without retraining, :func:`add_posthoc_dropout` inserts dropout into a trained network as forward hooks after
every encoder and decoder stage but the output (Zeevi et al., Sec. 4), leaving the weights and ``state_dict`` keys
untouched; it is what ``UncertaintyPredictor(uncertainty_sources=("dropout",), dropout_p=0.1)`` does.

This module uses absolute imports only: nnU-Net imports the modules of the ``nnUNet_extTrainer`` folder as
top-level modules.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from monai_unc._utils import check_bool, is_int, is_real
from monai_unc.io import atomic_write_text
from monai_unc.networks.dropout import add_dropout

__all__ = [
    "DEFAULT_TRAINING_DROPOUT",
    "check_dropout_rate",
    "dropout_op_for",
    "dropout_arch_kwargs",
    "dropout_plans",
    "write_dropout_plans",
    "add_posthoc_dropout",
]

#: dropout rate of the training routes (plans variant and trainer)
DEFAULT_TRAINING_DROPOUT = 0.2

_DROPOUT_FOR_CONV = {
    "Conv1d": "torch.nn.Dropout1d",
    "Conv2d": "torch.nn.Dropout2d",
    "Conv3d": "torch.nn.Dropout3d",
}


def check_dropout_rate(p: Any, name: str = "p") -> float:
    """``p`` as a dropout rate in (0, 1), a Python float; ``ValueError`` naming ``name`` otherwise.

    The one check of a dropout rate for the nnU-Net routes (plans variant, post-hoc insertion, trainers). A numpy
    rate (``np.float32(0.2)``) is a rate; booleans, text, NaN, 0, 1 and values outside are refused. The value is
    compared as given (``10**400`` is refused, not an ``OverflowError`` of ``float()``).

    Args:
        p: the rate, a real number.
        name: how the error names it (e.g. ``"nnUNetTrainerMCDropout.dropout_p"``).

    Returns:
        ``p`` as a Python float, which a plans file (JSON) can hold.

    Raises:
        ValueError: ``p`` is not a real number in the open interval (0, 1).

    Example:
        >>> import numpy as np
        >>> check_dropout_rate(np.float32(0.25))
        0.25
        >>> check_dropout_rate(1.5, "dropout_p")
        Traceback (most recent call last):
        ...
        ValueError: dropout_p must be a dropout rate in (0, 1), got 1.5
    """
    # a numpy rate was refused as "must be a dropout rate in (0, 1)" (found by hostile testing)
    if not is_real(p) or not 0 < p < 1:  # compared as given: float(10**400) was an OverflowError naming nothing
        raise ValueError(f"{name} must be a dropout rate in (0, 1), got {p!r}")
    return float(p)


def dropout_op_for(conv_op: str | type) -> str:
    """Dotted name of the channel dropout matching an nnU-Net ``conv_op`` (``...Conv3d`` -> ``torch.nn.Dropout3d``).

    Args:
        conv_op: the convolution class or its dotted name (as in plans files).

    Returns:
        ``"torch.nn.Dropout1d"``, ``"torch.nn.Dropout2d"`` or ``"torch.nn.Dropout3d"``.

    Raises:
        ValueError: ``conv_op`` is not a ``Conv1d`` / ``Conv2d`` / ``Conv3d``.

    Example:
        >>> dropout_op_for("torch.nn.modules.conv.Conv3d"), dropout_op_for(nn.Conv2d)
        ('torch.nn.Dropout3d', 'torch.nn.Dropout2d')
    """
    if not isinstance(conv_op, (str, type)):  # a plans file's number or null: it was an AttributeError (__module__)
        raise ValueError(f"conv_op must be a Conv1d/Conv2d/Conv3d class or its dotted name, got {conv_op!r}")
    name = conv_op if isinstance(conv_op, str) else f"{conv_op.__module__}.{conv_op.__qualname__}"
    short = name.rsplit(".", 1)[-1]
    if short not in _DROPOUT_FOR_CONV:
        raise ValueError(f"conv_op must be a Conv1d/Conv2d/Conv3d, got {name!r}")
    return _DROPOUT_FOR_CONV[short]


def dropout_arch_kwargs(arch_kwargs: Mapping[str, Any], p: float = DEFAULT_TRAINING_DROPOUT) -> dict[str, Any]:
    """Copy of a plans ``arch_kwargs`` with ``dropout_op`` (matching ``conv_op``) and ``dropout_op_kwargs`` of ``p``.

    ``conv_op`` may be a dotted name (as in plans files) or a class (as after nnU-Net imported it); the dropout
    op is given in the same form. The input is not changed.

    Args:
        arch_kwargs: the ``architecture.arch_kwargs`` of a plans configuration.
        p: the dropout rate, in (0, 1).

    Returns:
        The new kwargs, with ``dropout_op_kwargs={"p": p, "inplace": False}``.

    Raises:
        ValueError: ``p`` is not in (0, 1), ``arch_kwargs`` has no ``conv_op``, or ``conv_op`` is not a convolution.

    Example:
        >>> out = dropout_arch_kwargs({"conv_op": "torch.nn.modules.conv.Conv3d"}, p=0.2)
        >>> out["dropout_op"], out["dropout_op_kwargs"]
        ('torch.nn.Dropout3d', {'p': 0.2, 'inplace': False})
    """
    p = check_dropout_rate(p)
    if "conv_op" not in arch_kwargs:
        raise ValueError("arch_kwargs has no 'conv_op': not the architecture kwargs of an nnU-Net plans file")
    out = copy.deepcopy(dict(arch_kwargs))
    op = dropout_op_for(out["conv_op"])
    if isinstance(out["conv_op"], str):
        out["dropout_op"] = op
    else:
        out["dropout_op"] = getattr(nn, op.rsplit(".", 1)[-1])
    out["dropout_op_kwargs"] = {"p": p, "inplace": False}
    return out


def dropout_plans(
    plans: Mapping[str, Any],
    p: float = DEFAULT_TRAINING_DROPOUT,
    plans_name: str = "nnUNetPlansDropout",
    configurations: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A copy of an nnU-Net plans dict whose configurations build their network with dropout (rate ``p``).

    Every configuration that defines an ``architecture`` (configurations that only ``inherits_from`` another
    get it from there) is changed, or only those named in ``configurations``. ``data_identifier`` is kept so
    that the preprocessed data is shared with the source plans. ``plans_name`` becomes the new identifier.

    Args:
        plans: the plans dict (``nnUNetPlans.json``).
        p: the dropout rate, in (0, 1).
        plans_name: the new plans identifier (a file stem).
        configurations: restrict the change to these configurations (a name or names; default: all with an
            architecture and those inheriting it). A configuration left out that inherits its architecture from a
            changed one (``3d_cascade_fullres`` from ``3d_fullres``) is given its former architecture explicitly,
            so that it keeps building its network without dropout.

    Returns:
        The new plans dict (the input is not changed).

    Raises:
        ValueError: not a plans dict, a bad ``plans_name`` or ``p``, an unknown configuration, a named
            configuration that inherits its architecture, no configuration with an architecture, or a malformed
            field of the plans (configurations, ``architecture``, ``arch_kwargs``, ``conv_op``,
            ``_kw_requires_import``; the message names it).
        TypeError: ``configurations`` is neither a name nor an iterable of names.

    Example:
        >>> arch = {"network_class_name": "PlainConvUNet", "arch_kwargs": {"conv_op": "torch.nn.modules.conv.Conv3d"},
        ...         "_kw_requires_import": ["conv_op"]}
        >>> plans = {"plans_name": "nnUNetPlans", "configurations": {"3d_fullres": {"architecture": arch},
        ...          "3d_lowres": {"inherits_from": "3d_fullres"}}}
        >>> out = dropout_plans(plans, p=0.2)
        >>> out["plans_name"], out["configurations"]["3d_fullres"]["architecture"]["_kw_requires_import"]
        ('nnUNetPlansDropout', ['conv_op', 'dropout_op'])
    """
    if not isinstance(plans, Mapping) or "configurations" not in plans:
        raise ValueError("plans has no 'configurations': not an nnU-Net plans dict")
    _check_plans_name(plans_name)
    out = copy.deepcopy(dict(plans))
    confs = out["configurations"]
    if not isinstance(confs, Mapping) or not all(isinstance(c, Mapping) for c in confs.values()):
        raise ValueError("plans 'configurations' must map each configuration name to its settings (a JSON object)")
    if isinstance(configurations, str):  # one name, not its characters
        configurations = [configurations]
    if configurations is not None:  # 3 was "'int' object is not iterable", b"3d" the names 51 and 100
        names = list(configurations) if isinstance(configurations, Iterable) and not isinstance(configurations, bytes) \
            else None
        if names is None or not all(isinstance(c, str) for c in names):
            raise TypeError(f"configurations must be a configuration name or a list of names, got {configurations!r}")
        configurations = names
    wanted = list(confs) if configurations is None else list(configurations)
    unknown = [c for c in wanted if c not in confs]
    if unknown:
        raise ValueError(f"configurations {unknown} are not in the plans (available: {sorted(confs)})")
    changed = 0
    for name in wanted:
        arch = confs[name].get("architecture")
        if arch is None:
            if configurations is not None:
                raise ValueError(
                    f"configuration {name!r} inherits its architecture from {confs[name].get('inherits_from')!r}; "
                    "change that one instead"
                )
            continue
        where = f"plans configurations.{name}.architecture"
        if not isinstance(arch, Mapping) or not isinstance(arch.get("arch_kwargs"), Mapping):
            raise ValueError(f"{where} must be a JSON object with an 'arch_kwargs' object")
        if not isinstance(arch.get("_kw_requires_import", []), list):
            raise ValueError(f"{where}._kw_requires_import must be a list of argument names")
        if not isinstance(arch["arch_kwargs"].get("conv_op"), (str, type)):
            raise ValueError(f"{where}.arch_kwargs.conv_op must name a convolution class (e.g. "
                             f"'torch.nn.modules.conv.Conv3d'), got {arch['arch_kwargs'].get('conv_op')!r}")
        arch["arch_kwargs"] = dropout_arch_kwargs(arch["arch_kwargs"], p)
        req = arch.setdefault("_kw_requires_import", [])
        if "dropout_op" not in req:
            req.append("dropout_op")
        changed += 1
    if changed == 0:
        raise ValueError("no configuration with an 'architecture' entry was found to add dropout to")
    if configurations is not None:
        _keep_inherited_architectures(plans["configurations"], confs, set(wanted))
    out["plans_name"] = plans_name
    return out


def _keep_inherited_architectures(source: Mapping[str, Any], confs: dict[str, Any], changed: set[str]) -> None:
    """Give the configurations left out of a restricted change the architecture they had, in place.

    nnU-Net resolves a configuration without an ``architecture`` from the one it ``inherits_from`` (recursively), so
    a change restricted to ``3d_fullres`` also reached ``3d_cascade_fullres`` (found by a review of the dropout
    plans): each such configuration now states its former (source) architecture itself.

    Args:
        source: the source plans' configurations (unchanged).
        confs: the new plans' configurations (changed in place).
        changed: the names of the configurations given dropout.
    """
    for name, conf in confs.items():
        if name in changed or "architecture" in conf:
            continue
        seen, parent = {name}, conf.get("inherits_from")
        while isinstance(parent, str) and parent in source and parent not in seen:
            seen.add(parent)
            if "architecture" in source[parent]:
                if parent in changed:
                    conf["architecture"] = copy.deepcopy(source[parent]["architecture"])
                break
            parent = source[parent].get("inherits_from")


def write_dropout_plans(
    dataset: str | int,
    p: float = DEFAULT_TRAINING_DROPOUT,
    source_plans: str = "nnUNetPlans",
    target_plans: str = "nnUNetPlansDropout",
    configurations: Sequence[str] | None = None,
    preprocessed_dir: str | os.PathLike | None = None,
    overwrite: bool = False,
    *,
    command_line: bool = False,
) -> Path:
    """Write ``<target_plans>.json`` next to ``<source_plans>.json`` in nnU-Net's preprocessed dataset folder.

    The new plans are :func:`dropout_plans` of the source plans. Train with ``nnUNetv2_train DATASET CONFIG FOLD -p
    <target_plans>``.

    Args:
        dataset: dataset id (``990``) or name (``"Dataset990_UncToy"``).
        p: the dropout rate.
        source_plans: plans identifier (file stem) to read.
        target_plans: plans identifier (file stem) to write.
        configurations: restrict the change to these configurations (default: all with an architecture).
        preprocessed_dir: ``nnUNet_preprocessed`` (default: the environment variable).
        overwrite: replace an existing target file.
        command_line: how the refusal of an existing target names the way to replace it: the command's option
            (``--overwrite``, set by ``monai-unc nnunet-dropout-plans``); False (a Python caller): ``overwrite=True``.
            Keyword only.

    Returns:
        The path of the written plans file.

    Raises:
        ValueError: no preprocessed folder is known, ``target_plans`` or ``source_plans`` is no file stem or they
            are equal, ``p`` is not in (0, 1) (all checked before the target's existence), ``dataset`` is neither an
            integer id (a bool or a float is none) nor a dataset name without path separators, the dataset is unknown,
            the source plans are not a JSON object (one line naming the file), or :func:`dropout_plans` refuses the
            plans.
        TypeError: ``overwrite`` is not a bool.
        FileNotFoundError: the source plans file is missing.
        FileExistsError: the target exists and ``overwrite`` is False.

    Example:
        >>> import tempfile
        >>> arch = {"arch_kwargs": {"conv_op": "torch.nn.modules.conv.Conv3d"}, "_kw_requires_import": ["conv_op"]}
        >>> with tempfile.TemporaryDirectory() as d:
        ...     (Path(d) / "Dataset990_UncToy").mkdir()
        ...     _ = (Path(d) / "Dataset990_UncToy" / "nnUNetPlans.json").write_text(
        ...         json.dumps({"configurations": {"3d_fullres": {"architecture": arch}}}))
        ...     write_dropout_plans(990, p=0.2, preprocessed_dir=d).name
        'nnUNetPlansDropout.json'
    """
    from nnunetv2.utilities.dataset_name_id_conversion import maybe_convert_to_dataset_name

    base = preprocessed_dir if preprocessed_dir is not None else os.environ.get("nnUNet_preprocessed")
    if base is None:
        # said as the command line's user can mend it (found by a probe: it began "preprocessed_dir is not given")
        raise ValueError("nnU-Net's environment variable nnUNet_preprocessed is not set (nor preprocessed_dir given): "
                         "set it as for nnUNetv2_plan_and_preprocess")
    # the names of nnunet-dropout-plans' flags too: its errors are printed as they are (found by hostile testing: a
    # target with a slash failed in pathlib with "Invalid name", and the CLI said "pass overwrite=True")
    _check_plans_name(target_plans, "target_plans (--target)")
    # found by hostile testing: source_plans="../../x" read and wrote beside a file outside the dataset folder, and
    # overwrite="no" (truthy) replaced an existing target
    _check_plans_name(source_plans, "source_plans (-p)")
    overwrite = check_bool(overwrite, "overwrite")
    check_dropout_rate(p, "p (--rate)")
    if source_plans == target_plans:
        raise ValueError(f"target_plans (--target) must differ from source_plans (-p), got {target_plans!r} for both")
    if isinstance(dataset, str) and dataset.startswith("Dataset"):
        if Path(dataset).name != dataset or "\\" in dataset:  # "Dataset990_X/../..": a folder outside base
            raise ValueError(f"dataset (-d) must be an id or a 'DatasetXXX_Name' without path separators, got "
                             f"{dataset!r}")
        name = dataset
    else:
        name = _dataset_name(Path(base), dataset, maybe_convert_to_dataset_name)
    src = Path(base) / name / f"{source_plans}.json"
    if not src.is_file():
        raise FileNotFoundError(f"source plans {src} not found; run nnUNetv2_plan_and_preprocess first")
    dst = src.with_name(f"{target_plans}.json")
    if dst.exists() and not overwrite:
        # in the caller's words (found by review 63: each was told of the other's name too)
        raise FileExistsError(f"{dst} exists; pass {'--overwrite' if command_line else 'overwrite=True'} to replace it")
    from monai_unc.nnunet.predictor import read_model_json

    # as a model folder's plans are read: a file that is no JSON object (deeply nested ones included, a RecursionError
    # traceback before; found by a review of the nested-JSON fix) is one ValueError naming it
    plans = dropout_plans(read_model_json(src), p=p, plans_name=target_plans, configurations=configurations)
    return atomic_write_text(dst, json.dumps(plans, indent=4))


def _check_plans_name(plans_name: Any, name: str = "plans_name") -> None:
    """Refuse a plans identifier that is no file stem (``<identifier>.json`` beside the source plans)."""
    if not isinstance(plans_name, str) or not plans_name or plans_name in (".", "..") or "/" in plans_name \
            or os.sep in plans_name:
        raise ValueError(f"{name} must be a file stem without path separators, got {plans_name!r}")


def _dataset_name(base: Path, dataset: str | int, convert: Callable) -> str:
    # found by hostile testing: True was dataset 1 and 990.7 dataset 990 (int() of a bool, a float)
    if not (is_int(dataset) or (isinstance(dataset, str) and dataset.isascii() and dataset.isdigit())):
        raise ValueError(f"dataset (-d) must be an id or a 'DatasetXXX_Name', got {dataset!r}")
    ident = int(dataset)
    matches = sorted(d.name for d in base.glob(f"Dataset{ident:03d}_*") if d.is_dir())
    if len(matches) == 1:
        return matches[0]
    try:
        return convert(ident)
    except RuntimeError:  # nnU-Net's "Could not find a dataset with the ID ...": one line naming the id
        raise ValueError(f"no dataset with the id {ident} in {base} (nor in nnU-Net's raw or results folders): run "
                         "nnUNetv2_plan_and_preprocess first, or give the dataset name DatasetXXX_Name") from None


def add_posthoc_dropout(
    target: Any,
    p: float = 0.1,
    after: str | Sequence[str] | Callable[[str, nn.Module], bool] = "auto",
) -> list[str]:
    """Insert dropout into a trained nnU-Net network without retraining.

    By default dropout (channel-wise, rate ``p``) follows every ``encoder.stages.*`` and ``decoder.stages.*`` module
    of ``PlainConvUNet`` / ``ResidualEncoderUNet``, i.e. every stage but the segmentation output (Zeevi et al.,
    Sec. 4), see :func:`monai_unc.inferers.add_dropout`. The dropout is a forward hook: inactive in eval mode,
    switched on by :func:`monai_unc.inferers.enable_mc_dropout`; weights and checkpoint keys are unchanged.

    Args:
        target: an ``nnUNetPredictor`` (its ``network``) or the network itself (a ``torch.compile`` wrapper too).
        p: the dropout rate, in (0, 1).
        after: where to put the dropout: ``"auto"`` (the stages above), module names, or a predicate
            ``(name, module) -> bool``.

    Returns:
        The names of the modules followed by dropout.

    Raises:
        ValueError: ``p`` is not in (0, 1), or the predictor has no network yet.
        TypeError: ``target`` is neither a predictor nor a module.

    Example:
        >>> from dynamic_network_architectures.architectures.unet import PlainConvUNet
        >>> net = PlainConvUNet(input_channels=1, n_stages=2, features_per_stage=(4, 8), conv_op=nn.Conv3d,
        ...                     kernel_sizes=3, strides=(1, 2), n_conv_per_stage=1, num_classes=3,
        ...                     n_conv_per_stage_decoder=1)
        >>> add_posthoc_dropout(net, p=0.1)
        ['encoder.stages.0', 'encoder.stages.1', 'decoder.stages.0']
    """
    p = check_dropout_rate(p)
    network = getattr(target, "network", target)
    if network is None:
        raise ValueError("the predictor has no network yet: initialise it from a trained model folder first")
    if not isinstance(network, nn.Module):
        raise TypeError(f"target must be an nnUNetPredictor or a torch.nn.Module, got {type(target).__name__}")
    # a torch.compile wrapper: add_dropout puts the hooks into its module and drops the compiled code that predates them
    return add_dropout(network, p=p, after=after, channelwise=True)
