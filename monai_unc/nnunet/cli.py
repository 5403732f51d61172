r"""``monai-unc nnunet-predict``, ``nnunet-dropout-plans`` and ``nnunet-calibrate``.

``nnUNetv2_predict`` cannot choose a predictor class, so this entry point takes the same flags (``-i -o -d -c
-tr -p -f -chk --save_probabilities -device -step_size --disable_tta --continue_prediction -npp -nps
-num_parts -part_id -prev_stage_predictions --disable_progress_bar --not_on_device``, or ``-m MODEL_FOLDER`` as
in ``nnUNetv2_predict_from_modelfolder``) plus the uncertainty options, and runs
:class:`~monai_unc.nnunet.predictor.UncertaintyPredictor`::

    monai-unc nnunet-predict -i imagesTs -o pred -d 990 -c 3d_fullres -f 0 1 2 3 4 \
        --sources folds mirroring -device cuda

Wiring (``monai_unc/cli.py``): ``add_parser(subparsers)`` registers the three sub-commands; ``run(args)`` executes
whichever was chosen and returns the exit status. Parsing needs neither torch nor nnU-Net's predictor: each
sub-command imports what it runs on when it runs, so ``--help`` and argument errors answer at once. This module
uses absolute imports only (nnU-Net imports the modules of the ``nnUNet_extTrainer`` folder as top-level modules).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from monai_unc.keys import (
    DEFAULT_MEASURES,
    MAX_OPTION_INT,
    RATEIN_LOSS_NAMES,
    check_dicom_options,
    float_option,
    int_option,
    option_number,
    sample_batch_size_value,
)
from monai_unc.nnunet.names import MAP_MEASURES, SOURCES

__all__ = ["add_parser", "run", "check_predict_flags", "check_device", "stage_dicom_input", "PREDICT_COMMAND",
           "PLANS_COMMAND", "CALIBRATE_COMMAND"]

PREDICT_COMMAND = "nnunet-predict"
#: the integer flags, in plain decimal syntax and at most an int32 (found by a probe: ``--num_samples 10**20`` and
#: ``-num_parts 10**20`` passed every check, ``-step_size 0_5`` read 5.0, ``-f 1_0`` fold 10); seeds are 64-bit
_COUNT = int_option(0, MAX_OPTION_INT, "a non-negative integer")
_POSITIVE = int_option(1, MAX_OPTION_INT, "a positive integer")
_SEED = int_option(0, 2**64 - 1, "a non-negative integer")
PLANS_COMMAND = "nnunet-dropout-plans"
CALIBRATE_COMMAND = "nnunet-calibrate"


def _env_int(name: str, default: int) -> int:
    try:
        value = int(option_number(os.environ.get(name) or str(default), integer=True))
    except ValueError:
        return default
    return value if 0 <= value <= MAX_OPTION_INT else default


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``nnunet-predict``, ``nnunet-dropout-plans`` and ``nnunet-calibrate`` on ``subparsers``.

    Parsing needs neither torch nor nnU-Net's predictor. Each sub-parser sets ``nnunet_command`` (one of
    :data:`PREDICT_COMMAND`, :data:`PLANS_COMMAND`, :data:`CALIBRATE_COMMAND`) for :func:`run`.

    Args:
        subparsers: the ``add_subparsers()`` object of the ``monai-unc`` parser.

    Returns:
        The ``nnunet-predict`` parser.

    Example:
        >>> parser = argparse.ArgumentParser(prog="monai-unc")
        >>> _ = add_parser(parser.add_subparsers())
        >>> args = parser.parse_args(["nnunet-predict", "-i", "imagesTs", "-o", "pred", "-m", "model", "-f", "0"])
        >>> args.nnunet_command, args.sources, args.num_samples
        ('nnunet-predict', ['folds', 'mirroring'], 10)
    """
    p = subparsers.add_parser(
        PREDICT_COMMAND,
        help="nnU-Net v2 prediction with uncertainty maps (folds, mirroring, MC dropout, Rate-In, SSN)",
        description="nnUNetv2_predict with uncertainty: the segmentations nnU-Net writes, plus "
        "uncertainty/<case>_<measure><ending> maps in the image geometry, uncertainty/<case>.json scores and "
        "uncertainty_scores.csv. Same flags as nnUNetv2_predict.",
    )
    p.set_defaults(nnunet_command=PREDICT_COMMAND)
    p.add_argument("-i", required=True, help="input folder (files named like nnU-Net's imagesTs: CASE_0000<ending>; or "
                   "DICOM series folders: one per case, or per channel, CASE_0000/, CASE_0001/, ...)")
    p.add_argument("-o", required=True, help="output folder (created if missing)")
    _add_model_options(p, trainer="trainer class used for training", configuration="configuration, e.g. 3d_fullres",
                       checkpoint="checkpoint name (default: checkpoint_final.pth)")
    p.add_argument("-step_size", type=float_option, default=0.5, help="sliding-window step as a fraction of the patch")
    p.add_argument("--disable_tta", action="store_true", help="no mirroring (not allowed with --sources mirroring)")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--save_probabilities", action="store_true",
                   help="also write <case>.npz (the probabilities whose argmax is the segmentation, in nnU-Net's "
                   "layout) and <case>.pkl")
    p.add_argument("--continue_prediction", action="store_true",
                   help="skip cases whose segmentation, uncertainty maps and record already exist and whose record "
                   "names the current settings; a case made with other settings (sources, samples, folds, model, "
                   "Rate-In values, ...) is predicted again, and the log says which settings differ")
    p.add_argument("-npp", type=_COUNT, default=_env_int("nnUNet_npp", 3),
                   help="preprocessing processes (0: in this process)")
    p.add_argument("-nps", type=_COUNT, default=_env_int("nnUNet_nps", 3), help="export processes (0: in this process)")
    p.add_argument("-prev_stage_predictions", default=None, help="folder with the previous stage (cascade)")
    p.add_argument("-num_parts", type=_POSITIVE, default=1, help="split the cases over this many calls")
    p.add_argument("-part_id", type=_COUNT, default=0, help="which part this call predicts (0-based)")
    p.add_argument("-device", default="cuda", choices=("cuda", "cpu", "mps"), help="device (default: cuda)")
    p.add_argument("--disable_progress_bar", action="store_true")
    p.add_argument("--not_on_device", action="store_true", help="keep the stitching buffers in CPU memory")
    u = p.add_argument_group("uncertainty")
    u.add_argument("--sources", nargs="+", default=["folds", "mirroring"], choices=SOURCES, metavar="SOURCE",
                   help="uncertainty sources: any of folds, mirroring and one of dropout, rate_in; ssn (latent "
                   "draws of an nnUNetTrainerSSN model: alone, with folds, mirroring or dropout, not with rate_in) "
                   "(default: folds mirroring)")
    u.add_argument("--num_samples", type=_POSITIVE, default=10,
                   help="stochastic passes per window: MC dropout masks / Rate-In passes / SSN latent draws "
                   "(default: 10; used only with dropout, rate_in or ssn)")
    u.add_argument("--dropout_p", type=float_option, default=None,
                   help="insert post-hoc dropout with this rate (no retraining); default: the trained dropout")
    u.add_argument("--measures", nargs="+", default=list(DEFAULT_MEASURES), metavar="MEASURE",
                   help=f"maps to write, any of {', '.join(MAP_MEASURES)} (default: {' '.join(DEFAULT_MEASURES)})")
    u.add_argument("--window_disagreement", choices=("separate", "mutual_information"), default="separate",
                   help="separate (default): disagreement between overlapping sliding windows is its own part of "
                   "the predictive entropy (map window_disagreement), not mutual information; mutual_information: "
                   "count it in MI (the behaviour before window disagreement existed)")
    u.add_argument("--segmentation_from", choices=("logits", "probabilities"), default="logits",
                   help="argmax of the mean logits (stock nnU-Net, default) or of the mean probabilities")
    u.add_argument("--seed", type=_SEED, default=None, help="seed for the dropout masks")
    u.add_argument("--rate_in_target", type=float_option, default=None,
                   help="Rate-In: information loss per layer to reach (default 0.1)")
    u.add_argument("--rate_in_loss", default=None, choices=RATEIN_LOSS_NAMES,
                   help=f"Rate-In: information loss, one of {', '.join(RATEIN_LOSS_NAMES)} (default mi)")
    d = p.add_argument_group("DICOM (the dicom extra; docs/dicom.md)")
    d.add_argument("--output-format", default="nifti", choices=("nifti", "dicom", "both"),
                   help="nifti (default): nnU-Net's files; both: also each case's DICOM SEG, FRACTIONAL SEG (with "
                   "--save_probabilities), Parametric Maps and SR in <output>/dicom/<case>/; dicom: only the DICOM "
                   "objects, in <output>/<case>/ (the NIfTI files are made in a temporary folder; no resume). "
                   "dicom and both need -i of DICOM series folders, one per case")
    d.add_argument("--uid-root", default=None, help="root of the new DICOM UIDs (with --output-format dicom/both)")
    d.add_argument("--segments", default=None, help="JSON segment descriptions (with --output-format dicom/both)")
    d.add_argument("--study-uid", default="source", choices=("source", "new"),
                   help="the study of the DICOM objects: source (default: the source series' study, as the IHE AI "
                   "Results profile keeps them) or new (a new study per case)")
    u.add_argument("--no_share_passes", action="store_true",
                   help="dropout / rate_in: one full network pass per sample, instead of computing once per window, "
                   "mirror and fold what the passes share (shared passes give the same distribution of maps; with "
                   "--seed, other draws)")
    u.add_argument("--sample_batch_size", type=sample_batch_size_value, default="auto", metavar="K",
                   help="dropout / rate_in with shared passes: a window's passes per chunk (one traced pass per "
                   "window, the others replayed K - 1 at a time along the batch axis), a positive integer or auto "
                   "(default: no more memory than the first pass or a tenth of the case's buffers)")

    q = subparsers.add_parser(
        PLANS_COMMAND,
        help="write an nnU-Net plans variant whose networks have dropout (train with -p NAME)",
        description="Copy nnUNet_preprocessed/DATASET/<source>.json to <target>.json with dropout_op/"
        "dropout_op_kwargs set in every configuration's architecture; the preprocessed data is reused.",
    )
    q.set_defaults(nnunet_command=PLANS_COMMAND)
    q.add_argument("-d", required=True, help="dataset name or id")
    q.add_argument("--rate", type=float_option, default=0.2,
                   help="dropout rate (default 0.2; where the network places it: docs/nnunet.md)")
    q.add_argument("-p", default="nnUNetPlans", help="plans identifier to copy (default: nnUNetPlans)")
    q.add_argument("--target", default="nnUNetPlansDropout", help="new plans identifier (default: nnUNetPlansDropout)")
    q.add_argument("-c", nargs="+", default=None, help="only these configurations")
    q.add_argument("--overwrite", action="store_true")

    c = subparsers.add_parser(
        CALIBRATE_COMMAND,
        help="fit a temperature per fold on its nnU-Net validation cases; write a calibrated copy of the model",
        description="For every fold, predict its validation cases (splits_final.json) from nnU-Net's preprocessed "
        "data, fit temperature scaling (Kock et al. protocol) and fold it into the segmentation layer of a copy of the "
        "model folder, written to OUT only when every fold is done. Predict from the copy with nnunet-predict -m OUT.",
    )
    c.set_defaults(nnunet_command=CALIBRATE_COMMAND)
    c.add_argument("-o", required=True, help="folder for the calibrated copy of the model")
    _add_model_options(c, trainer="trainer class", configuration="configuration", checkpoint="checkpoint name")
    c.add_argument("--mode", choices=("scalar", "vector"), default="scalar",
                   help="one t, or one per class (per region for a region-based model)")
    c.add_argument("--loss", choices=("nll", "ece"), default="nll", help="fitting objective (default nll)")
    c.add_argument("--max_steps", type=_POSITIVE, default=1000,
                   help="at most this many steps of the temperature fit (default 1000; a warning says when a fold's "
                   "fit did not converge in them)")
    c.add_argument("--disable_tta", action="store_true", help="validation logits without mirroring")
    c.add_argument("-device", default="cuda", choices=("cuda", "cpu", "mps"), help="device (default: cuda)")
    c.add_argument("--threads", type=_POSITIVE, default=None,
                   help="torch CPU threads for the prediction and the fit (default: torch's; on a CPU shared with "
                   "other work, 1 is faster and steadier for small cases)")
    c.add_argument("--overwrite", action="store_true",
                   help="replace the calibrated copy an earlier run wrote to -o, whole (without it an existing "
                   "copy is refused; a folder holding anything else is never replaced)")
    return p


def _add_model_options(parser: argparse.ArgumentParser, *, trainer: str, configuration: str, checkpoint: str) -> None:
    """The options that name a trained nnU-Net model (``-d -p -tr -c -m -f -chk``), read by :func:`_model_folder`.

    ``trainer``, ``configuration`` and ``checkpoint`` are the help texts of ``-tr``, ``-c`` and ``-chk``.
    """
    parser.add_argument("-d", default=None, help="dataset name or id (with -c; or give -m)")
    parser.add_argument("-p", default="nnUNetPlans", help="plans identifier (default: nnUNetPlans)")
    parser.add_argument("-tr", default="nnUNetTrainer", help=f"{trainer} (default: nnUNetTrainer)")
    parser.add_argument("-c", default=None, help=configuration)
    parser.add_argument("-m", default=None, help="trained model folder (instead of -d/-tr/-p/-c)")
    parser.add_argument("-f", nargs="+", default=["0", "1", "2", "3", "4"], help="folds (default: 0 1 2 3 4)")
    parser.add_argument("-chk", default="checkpoint_final.pth", help=checkpoint)


def _model_folder(args: argparse.Namespace) -> str:
    if args.m is not None:
        if args.d is not None or args.c is not None:
            raise ValueError("give either -m MODEL_FOLDER or -d DATASET -c CONFIGURATION, not both")
        return args.m
    if args.d is None or args.c is None:
        raise ValueError("-d DATASET and -c CONFIGURATION are required (or -m MODEL_FOLDER)")
    from nnunetv2.utilities.file_path_utilities import get_output_folder

    names = ("nnUNet_raw", "nnUNet_preprocessed", "nnUNet_results")
    where = ", ".join(f"{k}={os.environ.get(k) or 'unset'}" for k in names)
    if not os.environ.get("nnUNet_results"):
        raise ValueError(f"-d/-c need nnU-Net's environment variables ({where}): set nnUNet_results (and nnUNet_raw, "
                         "nnUNet_preprocessed) as for nnUNetv2_predict, or give the model folder with -m")
    try:
        return get_output_folder(args.d, args.tr, args.p, args.c)
    except RuntimeError:  # nnU-Net's multi-line "Could not find a dataset with the ID ..." or "... is not defined"
        raise ValueError(f"no dataset {args.d!r} in nnU-Net's folders ({where}): check -d and nnU-Net's environment "
                         "variables, or give the model folder with -m") from None


def _folds(values: list[str]) -> list[int | str]:
    """``-f``: fold numbers >= 0 or ``all``, each once (a repeated fold would count as two ensemble members)."""
    folds: list[int | str] = []
    for v in values:
        if v == "all":
            folds.append(v)
            continue
        try:
            k = int(option_number(v, integer=True))
        except ValueError:
            k = -1
        if not 0 <= k <= MAX_OPTION_INT:
            raise ValueError(f"-f takes fold numbers (0, 1, ...) or all, got {v!r}")
        folds.append(k)
    if len(set(folds)) != len(folds):
        raise ValueError(f"-f names a fold more than once (-f {' '.join(values)}): each fold counts once")
    return folds


def check_predict_flags(args: argparse.Namespace) -> None:
    """Refuse combinations of ``nnunet-predict`` flags that contradict each other.

    The message names the flags and how to fix it (the predictor's own checks speak in its Python argument names;
    these run first, before the model loads).

    Args:
        args: the parsed ``nnunet-predict`` arguments.

    Raises:
        ValueError: naming the conflicting flags.

    Example:
        >>> parser = argparse.ArgumentParser(prog="monai-unc")
        >>> _ = add_parser(parser.add_subparsers())
        >>> check_predict_flags(parser.parse_args(["nnunet-predict", "-i", "in", "-o", "out", "-m", "model"]))
        >>> check_predict_flags(parser.parse_args(["nnunet-predict", "-i", "in", "-o", "out", "-m", "model",
        ...                                        "--sources", "folds", "--dropout_p", "0.1"]))
        Traceback (most recent call last):
            ...
        ValueError: --dropout_p needs dropout in --sources (e.g. --sources folds dropout), got --sources folds
    """
    check_dicom_options(getattr(args, "output_format", "nifti"), getattr(args, "uid_root", None),
                        getattr(args, "segments", None), getattr(args, "study_uid", "source"))
    sources = list(args.sources)
    given = " ".join(sources)
    if "mirroring" in sources and args.disable_tta:
        rest = " ".join(s for s in sources if s != "mirroring")
        fix = f"drop mirroring from --sources (--sources {rest})" if rest else "choose other --sources"
        raise ValueError(f"--disable_tta turns mirroring off, but --sources {given} samples mirrored predictions"
                         f"{' (the default sources)' if sources == ['folds', 'mirroring'] else ''}: {fix}, or "
                         "drop --disable_tta")
    if "dropout" in sources and "rate_in" in sources:
        raise ValueError(f"--sources {given} names two dropout schemes: keep either dropout or rate_in")
    if "ssn" in sources and "rate_in" in sources:
        raise ValueError(f"--sources {given}: ssn cannot be combined with rate_in (combine ssn with dropout)")
    rate_in_flags = [f for f, v in (("--rate_in_target", args.rate_in_target), ("--rate_in_loss", args.rate_in_loss))
                     if v is not None]
    if rate_in_flags and "rate_in" not in sources:
        raise ValueError(f"{' and '.join(rate_in_flags)} need rate_in in --sources (e.g. --sources folds rate_in), "
                         f"got --sources {given}")
    if args.dropout_p is not None and "dropout" not in sources:
        raise ValueError(f"--dropout_p needs dropout in --sources (e.g. --sources folds dropout), got --sources "
                         f"{given}")
    if "rate_in" in sources and "folds" not in sources and len(args.f) > 1:
        raise ValueError(f"--sources {given} with several folds (-f {' '.join(args.f)}): Rate-In tunes one network, "
                         "so add folds to --sources or predict from one fold")
    if "window_disagreement" in args.measures and args.window_disagreement != "separate":
        raise ValueError("--measures window_disagreement needs --window_disagreement separate (with "
                         "mutual_information it is counted in the mutual information map)")
    shared = [s for s in ("dropout", "rate_in") if s in sources]
    if args.no_share_passes and not shared:
        raise ValueError(f"--no_share_passes concerns the passes of dropout or rate_in, got --sources {given}")
    if args.sample_batch_size != "auto" and (args.no_share_passes or not shared):
        why = "drop it or drop --no_share_passes" if shared else f"add dropout or rate_in to --sources {given}"
        raise ValueError(f"--sample_batch_size batches the shared passes of dropout or rate_in: {why}")
    if args.num_samples < 1:
        raise ValueError(f"--num_samples must be >= 1, got {args.num_samples}")
    if args.num_samples == 1 and shared and (args.no_share_passes or args.sample_batch_size != "auto"):
        # found by hostile testing: accepted and recorded in uncertainty_config.json and every case record (a
        # --continue_prediction with another value predicted the cases again), yet one pass has nothing to share
        given = "--no_share_passes" if args.no_share_passes else f"--sample_batch_size {args.sample_batch_size}"
        raise ValueError(f"{given} concerns several dropout / rate_in passes per window, but --num_samples 1 runs "
                         "one: drop it")
    if not 0.0 < args.step_size <= 1.0:
        raise ValueError(f"-step_size must be in (0, 1] (a fraction of the patch), got {args.step_size}")
    if args.dropout_p is not None and not 0.0 < args.dropout_p < 1.0:
        raise ValueError(f"--dropout_p must be in (0, 1), got {args.dropout_p}")
    if args.rate_in_target is not None and not 0.0 <= args.rate_in_target <= 1.0:
        # found by hostile testing: nan was refused by the predictor as "p (the initial rate) must be > 0", -1 as
        # "target_loss must be in [0, 1]": neither names the flag
        raise ValueError(f"--rate_in_target must be in [0, 1] (an information loss per layer), got "
                         f"{args.rate_in_target}")


def check_device(device: str) -> None:
    """Refuse a ``-device`` this machine does not have, in one line naming the flag (before anything is written).

    ``-device cuda`` is the default, as in ``nnUNetv2_predict``; on a machine without CUDA torch failed with a
    traceback once the model was moved to the device, after ``-o`` had been created and its JSON files written.

    Args:
        device: the value of ``-device`` (``cuda``, ``cpu`` or ``mps``).

    Raises:
        ValueError: ``cuda`` without a usable CUDA device, or ``mps`` without Apple's Metal backend.

    Example:
        >>> check_device("cpu")
    """
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("-device cuda (the default): no CUDA device is available on this machine (torch.cuda."
                         "is_available() is False); pass -device cpu, or run on a machine with a GPU")
    if device == "mps" and not torch.backends.mps.is_available():
        raise ValueError("-device mps: Apple's Metal backend is not available on this machine "
                         "(torch.backends.mps.is_available() is False); pass -device cpu")


def _predict(args: argparse.Namespace) -> int:
    check_predict_flags(args)
    import torch

    from monai_unc.io import (
        check_output_folder,
        input_folder,
        refuse_dataset_root,
        remove_dead_scratch,
        scratch_folder,
    )
    from monai_unc.nnunet.predictor import UncertaintyPredictor, check_checkpoint_name

    if not 0 <= args.part_id < args.num_parts:
        raise ValueError(f"-part_id must be in [0, -num_parts), got {args.part_id} with -num_parts {args.num_parts}")
    world = os.environ.get("WORLD_SIZE", "").strip()
    if world not in ("", "0", "1"):
        # found by the review of the session's change: under torchrun every rank predicted every case into the same
        # folder at once (nnU-Net's predictor knows no process group); nnU-Net splits a cohort with -num_parts
        raise ValueError(f"nnunet-predict runs as one process (WORLD_SIZE={world} is set: torchrun or a job script): "
                         "split the cases over processes or GPUs as nnUNetv2_predict does, one call each with "
                         "-num_parts N -part_id K (and CUDA_VISIBLE_DEVICES), or unset WORLD_SIZE")
    if args.npp < 0 or args.nps < 0:
        raise ValueError("-npp and -nps must be >= 0")
    model = _model_folder(args)
    # the folder named as given (review 63: a missing -m said "trained model folder not found", naming no option)
    input_folder(model, "m" if args.m is not None else None,
                 "-m trained model folder" if args.m is not None else "trained model folder of -d/-tr/-p/-c")
    input_folder(args.i, "i", "-i folder")
    refuse_dataset_root(args.i, "i", "-i folder")  # a dataset's root (imagesTs/ inside): name the sub-folder
    folds = _folds(args.f)
    check_checkpoint_name(args.chk)
    check_device(args.device)  # before anything is loaded or written (the default is cuda)
    # stock nnUNetv2_predict's thread settings for the prediction; the caller's intra-op thread count is restored
    # afterwards (run() is also called in-process: nnU-Net's CPU logits depend on the thread count, so a leaked
    # setting would change every later prediction of the process)
    threads = torch.get_num_threads()
    try:
        if args.device == "cpu":
            import multiprocessing

            torch.set_num_threads(multiprocessing.cpu_count())
        elif args.device == "cuda":
            torch.set_num_threads(1)
            try:
                torch.set_num_interop_threads(1)
            except RuntimeError:
                # torch sets it once per process: a second run() in one process (monai_unc.cli.main called twice)
                # failed here with torch's traceback (found by hostile review 58); the setting stays as it was set
                pass
        rate_in = {k: v for k, v in (("target_loss", args.rate_in_target), ("loss", args.rate_in_loss))
                   if v is not None}
        predictor = UncertaintyPredictor(
            uncertainty_sources=args.sources,
            num_samples=args.num_samples,
            dropout_p=args.dropout_p,
            measures=args.measures,
            segmentation_from=args.segmentation_from,
            rate_in=rate_in or None,
            seed=args.seed,
            window_disagreement=args.window_disagreement,
            tile_step_size=args.step_size,
            use_gaussian=True,
            use_mirroring=not args.disable_tta,
            perform_everything_on_device=not args.not_on_device,
            device=torch.device(args.device),
            verbose=args.verbose,
            verbose_preprocessing=args.verbose,
            allow_tqdm=not args.disable_progress_bar,
            share_passes=not args.no_share_passes,
            sample_batch_size=args.sample_batch_size,
        )
        # before the model is loaded: -o is a writable folder outside the images, the model and the previous stage
        check_output_folder(args.o, args.i, model, args.prev_stage_predictions, what="-o folder")
        predictor.initialize_from_trained_model_folder(model, folds, checkpoint_name=args.chk)
        # a DICOM input is staged (as NIfTI: the patients' scans) in a scratch folder inside -o,
        # .images.partial-dicom-input-<random>.dir: not in the system's temporary folder, where a killed run left them
        # for good (found by review 75); the next run into -o removes what a killed one left, and what a killed
        # --output-format dicom run left (its predictions' scratch folder). Inside -o (made here, as nnU-Net would,
        # and removed again with the parents made with it when the run fails before writing anything), not beside
        # it: -o's parent may be no folder the user can write (a container's /output)
        output = Path(args.o)
        made = []  # -o and the parents made with it, innermost first
        folder = output
        while not folder.exists() and not folder.is_symlink() and folder.parent != folder:
            made.append(folder)
            folder = folder.parent
        output.mkdir(parents=True, exist_ok=True)
        remove_dead_scratch(output / "predictions", "nnunet")
        try:
            with scratch_folder(output / "images", "dicom-input") as staging:
                # DICOM input: only this part's cases are read and staged, but nnU-Net gets every case (their file
                # lists), so that it splits them as it splits a folder and the output checks count every part
                images = stage_dicom_input(args.i, str(staging), predictor.dataset_json,
                                           reader=predictor.plans_manager.plans.get("image_reader_writer"),
                                           num_parts=args.num_parts, part_id=args.part_id)
                predictor.predict_from_files(
                    images, args.o, save_probabilities=args.save_probabilities,
                    overwrite=not args.continue_prediction, num_processes_preprocessing=args.npp,
                    num_processes_segmentation_export=args.nps,
                    folder_with_segs_from_prev_stage=args.prev_stage_predictions, num_parts=args.num_parts,
                    part_id=args.part_id,
                )
        finally:
            for folder in made:  # only when empty: a run that failed before nnU-Net wrote anything
                try:
                    folder.rmdir()
                except OSError:
                    break
    finally:
        torch.set_num_threads(threads)
    return 0


#: nnU-Net's image reader/writers that read a sheared grid (nibabel's affine; ITK reads none):
#: :func:`stage_dicom_input` stages a gantry-tilted series only for them
_NIBABEL_READERS = ("NibabelIO", "NibabelIOWithReorient")


def stage_dicom_input(folder: str, staging: str, dataset_json: dict, reader: str | None = None, *,
                      num_parts: int = 1, part_id: int = 0) -> str | list[list[str]]:
    """The input nnU-Net predicts from: ``folder`` itself, or its DICOM series as NIfTI channel files.

    nnU-Net reads its own file formats only. A folder holding no image file of the model's ``file_ending`` but DICOM
    series folders is read with the series reader (:func:`monai_unc.io.read_volume`: slices ordered by position,
    real-world values such as Hounsfield units) and written to ``staging`` as ``<case>_0000<ending>``,
    ``<case>_0001<ending>``, ... with the geometry of the case's first series, so that nnU-Net's outputs
    (segmentation, probabilities, maps) land on the grid of that series. A model with one input channel takes one
    series folder per case, named by case id; a model with several takes one per channel, named as nnU-Net names
    its channel files: ``<case>_0000/``, ``<case>_0001/``, ... (:func:`monai_unc.io.dicom_channel_series`). The
    channels of a case must be series of one patient in one frame of reference and lie on one grid, as nnU-Net
    requires: each is put on channel 0's voxel order (a series stored with its axes flipped or permuted is
    reordered, no interpolation) and one on another grid is refused (resample it first).

    Only the cases of part ``part_id`` of ``num_parts`` (``-part_id`` / ``-num_parts``) are read and written: those
    nnU-Net gives that part (``_manage_input_and_output_lists``: the sorted case ids, ``[part_id::num_parts]``), so
    the parts of a run read each series once between them and each stages its own cases only (every part read and
    staged every case before). The returned lists still name every case's channel files, so that the predictor,
    given the same ``num_parts`` and ``part_id``, takes the same cases as from a folder of all of them, and its
    output checks count the cases of every part
    (:meth:`~monai_unc.nnunet.predictor.UncertaintyPredictor.check_output_settings`); nothing reads the files of the
    other parts. The names of the series folders (named by channel, every channel of
    a case) are checked for every case before anything is read; what is read from the series (a readable series,
    its grid, patient, frame of reference and shear) is checked for the part's cases only.

    A series whose voxel axes are not orthogonal (a gantry-tilted CT: :func:`monai_unc.io.sheared_grid`) is
    refused unless the model reads its images with nibabel (``reader`` ``NibabelIO`` or ``NibabelIOWithReorient``):
    ITK, hence nnU-Net's ``SimpleITKIO`` (the default of ``.nii.gz`` datasets), reads no sheared grid, and the
    prediction failed after the model was loaded with ITK's traceback (found by hostile testing).

    Args:
        folder: ``nnunet-predict``'s ``-i``.
        staging: an empty scratch folder (not inside ``folder``).
        dataset_json: the model's ``dataset.json`` (``file_ending``, ``channel_names``).
        reader: the name of the model's image reader/writer (its plans' ``image_reader_writer``); None: not known,
            a sheared series is refused.
        num_parts: the number of parts the cases are split into (``-num_parts``, at least 1).
        part_id: the part whose cases are staged (``-part_id``), in ``[0, num_parts)``.

    Returns:
        What to predict from (``predict_from_files``' ``list_of_lists_or_source_folder``, with the same
        ``num_parts`` and ``part_id``): ``folder`` when it holds image files (or no series folder: nnU-Net says that
        it found no case); for DICOM series, one list of channel files in ``staging`` per case (``<case>_0000<ending>``,
        ...), for every case in nnU-Net's order (sorted case ids), of which those of part ``part_id`` are written.

    Raises:
        ValueError: ``num_parts`` below 1 or ``part_id`` outside ``[0, num_parts)``; DICOM input for a model with a
            ``file_ending`` other than ``.nii.gz`` / ``.nii``; series folders not named by channel for a model with
            several channels, or a case without all of them (any case); for a case of the part: a channel of another
            patient or frame of reference, or on another grid, than its case's channel 0; a series refused by the
            reader (one line naming it and the problem); a sheared series for a model that does not read with
            nibabel; no ``dicom`` extra.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "case1_0000.nii.gz").write_bytes(b"")  # nnU-Net's own files: read as they are
        ...     stage_dicom_input(d, tempfile.gettempdir(), {"file_ending": ".nii.gz"}) == d
        True
    """
    from monai_unc.io import (
        dicom_channel_series,
        dicom_series_folders,
        nnunet_input_channels,
        save_nifti,
        sheared_grid,
    )

    if isinstance(num_parts, bool) or not isinstance(num_parts, int) or num_parts < 1:
        raise ValueError(f"num_parts must be a positive integer, got {num_parts!r}")
    if isinstance(part_id, bool) or not isinstance(part_id, int) or not 0 <= part_id < num_parts:
        raise ValueError(f"part_id must be in [0, num_parts), got {part_id!r} with num_parts {num_parts}")
    ending = str(dataset_json.get("file_ending", ".nii.gz"))
    if any(f.is_file() and f.name.endswith(ending) for f in os.scandir(folder)):
        return folder
    if not dicom_series_folders(folder):
        return folder  # nnU-Net says that it found no case
    if ending not in (".nii.gz", ".nii"):
        raise ValueError(f"-i {folder} holds DICOM series but the model reads {ending} files (its dataset.json "
                         "file_ending); DICOM input needs a model that reads .nii.gz or .nii")
    cases = dicom_channel_series(folder, nnunet_input_channels(dataset_json))  # every case's names, no file read
    ids = sorted(cases)  # nnU-Net's order of a folder's cases (np.unique of the file names' case ids)
    lists = [[os.path.join(staging, f"{case}_{c:04d}{ending}") for c in range(len(cases[case]))] for case in ids]

    def read(path: os.PathLike) -> Any:
        # the series with its pixels (what monai_unc.io.read_volume reads of a series folder), read once: its
        # headers, grid and volume serve every check below
        try:
            from monai_unc.io.dicom import read_series

            return read_series(path)
        except ImportError as e:
            raise ValueError(str(e).splitlines()[0]) from None

    for case, files in list(zip(ids, lists))[part_id::num_parts]:  # nnU-Net's part of the cases
        paths = cases[case]
        grid = read(paths[0])
        sheared = None if reader in _NIBABEL_READERS else sheared_grid(
            None, grid.affine, consequence=f"nnU-Net's {reader or 'image reader'} reads its images with ITK, which "
            "reads no sheared grid")
        if sheared is not None:
            raise ValueError(f"-i {folder}: series {paths[0].name}: {sheared}, or predict it with monai-unc infer")
        volumes = [grid.volume]
        for path in paths[1:]:  # the other channels on channel 0's grid, in its voxel order (as nnU-Net requires)
            from monai_unc.io.dicom import channel_on_series_grid

            # one patient, one frame of reference (found by hostile testing: a series of another patient on the same
            # grid was combined without a word)
            try:
                volumes.append(channel_on_series_grid(
                    read(path), grid, f"series {path.name}",
                    remedy=f"nnU-Net takes the channels of a case on one grid: resample it onto the grid of "
                           f"{paths[0].name}"))
            except ValueError as e:
                raise ValueError(f"-i {folder}: case {case!r}: {e}") from None
        for file, volume in zip(files, volumes):
            save_nifti(volume, grid.affine, file)
    return lists


def _plans(args: argparse.Namespace) -> int:
    from monai_unc.nnunet.dropout import write_dropout_plans

    path = write_dropout_plans(args.d, p=args.rate, source_plans=args.p, target_plans=args.target,
                               configurations=args.c, overwrite=args.overwrite, command_line=True)
    print(f"wrote {path}; train with: nnUNetv2_train {args.d} CONFIGURATION FOLD -p {args.target}")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    import json

    import torch

    from monai_unc.io import input_folder
    from monai_unc.nnunet.calibrate import calibrate_model_folder
    from monai_unc.temperature import convergence_said_by_caller, non_convergence_warning

    model = _model_folder(args)
    # the folder named as given (review 63: a missing -m said "trained model folder not found", naming no option)
    input_folder(model, "m" if args.m is not None else None,
                 "-m trained model folder" if args.m is not None else "trained model folder of -d/-tr/-p/-c")
    check_device(args.device)  # before anything is loaded or written (the default is cuda)
    # the command prints its own line for a fit that did not converge (below): the fits leave out their warning
    # (review 68: not filtered by its text inside catch_warnings, a process-wide filter)
    with convergence_said_by_caller():
        report = calibrate_model_folder(model, args.o, use_folds=_folds(args.f),
                                        checkpoint_name=args.chk, mode=args.mode, loss=args.loss,
                                        use_mirroring=not args.disable_tta, device=torch.device(args.device),
                                        overwrite=args.overwrite, command_line=True,
                                        num_threads=args.threads, max_steps=args.max_steps)
    print(json.dumps(report, indent=2))
    for fold, record in report.items():  # as monai-unc calibrate says it: the temperature is not the fitted one
        line = non_convergence_warning(record, what=f"the temperature fit of fold {fold}", option="--max_steps")
        if line is not None:
            print(line)
    print(f"calibrated model written to {args.o}; predict with: monai-unc {PREDICT_COMMAND} -m {args.o} ...")
    return 0


def run(args: argparse.Namespace) -> int:
    """Execute the sub-command parsed by :func:`add_parser`.

    Usage and input errors (``ValueError``, ``FileNotFoundError``, ``FileExistsError``, ``NotADirectoryError``:
    a file given as a folder) are printed as one line
    ``monai-unc <command>: error: ...`` on stderr instead of a traceback.

    Args:
        args: the parsed arguments (``nnunet_command`` selects the sub-command; default ``nnunet-predict``).

    Returns:
        The exit status: 0 on success, 2 on a usage or input error.
    """
    command = getattr(args, "nnunet_command", PREDICT_COMMAND)
    handlers = {PREDICT_COMMAND: _predict, PLANS_COMMAND: _plans, CALIBRATE_COMMAND: _calibrate}
    try:
        return handlers[command](args)
    except (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError) as err:
        print(f"monai-unc {command}: error: {err}", file=sys.stderr)
        return 2
