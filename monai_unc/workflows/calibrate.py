"""``monai-unc calibrate``.

The logits of labelled validation cases (:func:`collect_logits`) and the whole command (:func:`run_calibrate`); the
temperature itself is fitted by :func:`monai_unc.temperature.calibrate_network`.

Region-based (multi-label sigmoid) networks (``activation="sigmoid"``): the targets are binary region masks, built
from label maps with a region spec (``regions``, e.g. ``"brats"``; :func:`monai_unc.regions.label_to_regions`) or
read directly from label files with one 0/1 channel per region (4D NIfTI ``(X, Y, Z, R)``); the temperatures are
fitted per region (``mode="vector"``: one per region, ``"scalar"``: one shared) by
:class:`~monai_unc.temperature.TemperatureScaler` with ``activation="sigmoid"``, and ``monai-unc infer
--activation sigmoid`` applies them like a softmax temperature (folded into the last layer, or stored beside the
weights and applied by :func:`~monai_unc.workflows.models.load_network`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from monai.inferers import SimpleInferer, SlidingWindowInferer
from monai.transforms import ResizeWithPadOrCrop
from torch import nn
from tqdm.auto import tqdm

from ..engine import error_line
from ..inferers import align_fused_attention, check_network_logits
from ..io import (
    REORIENT_REMEDY,
    CaseError,
    CaseFiles,
    ImageCase,
    MappedArrays,
    atomic_torch_save,
    atomic_write_json,
    case_id_hint,
    check_label_map,
    check_output_file,
    grid_mismatch,
    input_folder,
    list_files,
    output_lock,
    read_label,
    refuse_dataset_root,
    reoriented_grid,
    scratch_folder,
    smallest_int_dtype,
)
from ..regions import RegionSpec, label_to_regions, unclaimed_labels, unclaimed_labels_message
from ..temperature import (
    calibrate_network,
    convergence_said_by_caller,
    nll_flat_at_zero,
    nll_slope_terms,
    non_convergence_warning,
)
from .factory import check_roi, normalize_roi
from .infer import check_case_dims, load_image_case, network_image_cases, normalize_intensity
from .infer_plan import check_window_options
from .models import LoadedModel, check_model_activation, load_network, warn_bundle_window
from .prepare import read_region_spec, resolve_device
from .session import CommandResult

__all__ = ["collect_logits", "check_fit_is_defined", "run_calibrate", "calibrate_summary", "calibrate_from_arguments"]

#: voxels per chunk of :func:`check_fit_is_defined` (its float64 copies are a chunk's, not a case's)
_CHECK_CHUNK = 1 << 20

#: seconds a finished fit waits for another run's hold of the output's folder before it is refused: a calibrate
#: writing its checkpoint and record (a short step) is waited for
_WRITE_WAIT_S = 60.0


def collect_logits(
    cases: Sequence[ImageCase],
    labels: Sequence[str | os.PathLike],
    model: LoadedModel,
    intensity: str,
    roi: int | Sequence[int] | None = None,
    overlap: float = 0.25,
    device: str | torch.device = "cpu",
    progress: bool = True,
    activation: str = "softmax",
    regions: RegionSpec | str | os.PathLike | None = None,
    ignore_unclaimed_labels: bool = False,
    store: str | os.PathLike | None = None,
) -> tuple[Sequence[torch.Tensor], Sequence[torch.Tensor]]:
    """Deterministic logits and checked labels of validation cases, on the CPU.

    Without ``store`` every case's logits and labels are returned in memory (lists): ``4 C + 8`` bytes per voxel of
    every case (428 at 105 classes), so only for a few small cases. With ``store`` (a folder, e.g. a temporary one)
    each case is written there as soon as the network has run on it and dropped from memory: the result is two
    :class:`~monai_unc.io.MappedArrays` that map one case at a time back from disk (float32 logits, labels in the
    smallest integer dtype that holds them: uint8 up to 256 classes), so memory holds one case whatever the number of
    cases, and the folder ``4 C + 1`` bytes per voxel of every case (``monai-unc calibrate`` does this,
    :func:`run_calibrate`).

    ``activation="sigmoid"``: the targets are binary region masks ``(1, R, *spatial)`` (uint8), one per output
    channel: from a label map with ``regions`` (a spec as for :func:`monai_unc.regions.parse_regions`, one region
    per channel), or from a label file with ``R`` 0/1 channels; a single-channel (binary) network takes a 0/1
    label map as is.

    Args:
        cases: the image cases (:func:`~monai_unc.workflows.infer.load_image_case` reads them).
        labels: one label file per case, in the same order.
        model: the loaded network (run in eval mode, no dropout; MONAI's fused attention without attention dropout
            either, :func:`~monai_unc.inferers.align_fused_attention`).
        intensity: the intensity normalisation (:func:`~monai_unc.workflows.infer.normalize_intensity`).
        roi: the sliding-window size (None: the whole image in one pass).
        overlap: the sliding-window overlap fraction.
        device: where the network runs.
        progress: a progress bar on stderr.
        activation: ``"softmax"`` (label maps) or ``"sigmoid"`` (region masks).
        regions: the region spec that turns label maps into region masks (``"sigmoid"`` only).
        ignore_unclaimed_labels: accept label values that no region holds (``"sigmoid"`` with ``regions``).
        store: a folder to keep the cases in on disk (None: in memory); the caller removes it.

    Returns:
        ``(logits, labels)``: per case, logits ``(1, C, *spatial)`` (float, CPU) and a label map ``(1, *spatial)``
        (softmax: int64, or with ``store`` the smallest integer dtype) or region masks ``(1, R, *spatial)`` (uint8,
        sigmoid); lists, or with ``store`` :class:`~monai_unc.io.MappedArrays`.

    Raises:
        ValueError: a label that does not match its image or the network's classes / regions.
    """
    spec = _region_spec(activation, regions)
    roi = normalize_roi(roi)

    if model.preprocessing is not None:
        raise ValueError("calibrate cannot apply a bundle's preprocessing to the labels; pass "
                         "--no-bundle-preprocessing and preprocess the images beforehand")
    base = SimpleInferer() if roi is None else SlidingWindowInferer(roi, sw_batch_size=1, overlap=overlap,
                                                                    mode="gaussian")
    net = model.network.eval()
    logits: list[torch.Tensor] | MappedArrays
    targets: list[torch.Tensor] | MappedArrays
    if store is None:
        logits, targets = [], []
    else:  # one case in memory at a time (the network's output); the others wait on disk
        logits, targets = MappedArrays(Path(store) / "logits"), MappedArrays(Path(store) / "labels")
    unclaimed: dict[int, list[str]] = {}
    for case, label_path in tqdm(list(zip(cases, labels)), desc="logits", unit="case", disable=not progress,
                                 file=sys.stderr):
        image, affine = load_image_case(case)
        check_case_dims(case, image.shape[1:], model.spatial_dims)
        _check_finite_image(case, image)
        # the stored integers, NIfTI scaling restored, as every label reader reads them (read_volume's float32 copy
        # refused a label file stored with an intercept: background read as -4.5e-08; review 63)
        lab, lab_aff = read_label(CaseFiles(case.case_id, Path(label_path)))
        if (order := reoriented_grid(lab_aff, lab.shape[1:], affine, image.shape[1:])) is not None:
            raise ValueError(f"case {case.case_id!r}: label {Path(label_path).name} holds the image's grid with "
                             f"{order}: {REORIENT_REMEDY.format(what='the image')}")
        if lab.shape[1:] != image.shape[1:]:
            raise ValueError(f"case {case.case_id!r}: label {Path(label_path).name} does not share the image's grid "
                             f"(spatial shape {tuple(lab.shape[1:])}, the image's {tuple(image.shape[1:])})")
        if (problem := grid_mismatch(lab_aff, affine, image.shape[1:])) is not None:
            raise ValueError(f"case {case.case_id!r}: label {Path(label_path).name} does not share the image's grid "
                             f"({problem})")
        x = torch.from_numpy(normalize_intensity(image, intensity))[None].to(device)
        try:
            # MONAI's fused attention (use_flash_attention=True) drew attention dropout in eval mode too: the
            # temperature was fitted to randomly dropped attention (review 66)
            with torch.no_grad(), align_fused_attention(net):
                z = base(x, net)
        except (RuntimeError, ValueError, IndexError) as e:  # shape errors deep inside the network / inferer
            raise CaseError(f"case {case.case_id!r}: the network failed on the input of shape {tuple(x.shape)} "
                            f"(batch, channels, *spatial): {error_line(e)}") from e
        z = (z[0] if isinstance(z, (tuple, list)) else z).float().cpu()
        z = z.as_tensor() if hasattr(z, "as_tensor") else z
        if not len(logits):  # the inferers' check, on the first case: a temperature fitted to probabilities taken for
            # logits (a softmax / sigmoid in the network's forward) is no calibration (found by hostile review)
            check_network_logits(z, activation)
        what = f"case {case.case_id!r}: label {Path(label_path).name}"
        if activation == "sigmoid":
            targets.append(_region_target(lab, int(z.shape[1]), spec, what))
            if spec is not None and lab.shape[0] == 1:
                for label in unclaimed_labels(lab[0], spec):
                    unclaimed.setdefault(label, []).append(case.case_id)
        else:
            y = check_label_map(lab[0], what, int(z.shape[1]))
            if isinstance(targets, MappedArrays):
                targets.append(y[None], dtype=smallest_int_dtype(0, int(z.shape[1]) - 1))
            else:
                targets.append(torch.from_numpy(y)[None])
        del lab, image, x  # this case's arrays go before the next case is read
        logits.append(z)
        del z
    if unclaimed and not ignore_unclaimed_labels:
        assert spec is not None
        raise ValueError("--regions: " + unclaimed_labels_message(unclaimed, spec, "--ignore-unclaimed-labels"))
    return logits, targets


def _check_finite_image(case: ImageCase, image: np.ndarray) -> None:
    """Refuse an image with NaN or infinite values, naming the case and the channel file.

    One NaN voxel would otherwise spread through the network into thousands of non-finite logits, reported without
    a case.
    """
    for path, channel in zip(case.channels, image):
        if not np.isfinite(channel).all():
            n = int(channel.size - np.isfinite(channel).sum())
            raise CaseError(f"case {case.case_id!r}: image {path.name} holds {n} NaN or infinite value(s)")


def _region_spec(activation: str, regions: RegionSpec | str | os.PathLike | None
                 ) -> dict[str, tuple[int, ...]] | None:
    """The parsed region spec of a calibration, or None without one.

    A ``.json`` file is read, as ``--regions`` does (:func:`~monai_unc.workflows.prepare.read_region_spec`);
    ``ValueError`` for an unknown activation or regions without ``activation="sigmoid"``.
    """
    if activation not in ("softmax", "sigmoid"):
        raise ValueError(f"activation must be 'softmax' or 'sigmoid', got {activation!r}")
    spec = read_region_spec(regions)
    if spec is not None and activation != "sigmoid":
        raise ValueError("--regions describes the sigmoid channels of a region-based network: add --activation "
                         "sigmoid")
    return spec


def _region_target(lab: np.ndarray, num_regions: int, spec: dict[str, tuple[int, ...]] | None,
                   what: str) -> torch.Tensor:
    """Binary region masks ``(1, R, *spatial)`` uint8 from a label volume ``(C_label, *spatial)``.

    See :func:`collect_logits`.
    """
    if spec is not None and len(spec) != num_regions:
        raise ValueError(f"--regions names {len(spec)} regions ({', '.join(spec)}) but the network outputs "
                         f"{num_regions} sigmoid channels")
    if lab.shape[0] == 1 and spec is not None:
        y = check_label_map(lab[0], what)
        return torch.from_numpy(label_to_regions(y, spec).astype(np.uint8))[None]
    if lab.shape[0] == 1 and num_regions > 1:
        raise ValueError(f"{what} is a label map but the network has {num_regions} sigmoid channels: give --regions "
                         "to build the region masks from it, or label files with one 0/1 channel per region")
    if lab.shape[0] != num_regions:
        raise ValueError(f"{what} has {lab.shape[0]} channels; expected a label map or {num_regions} region masks")
    y = check_label_map(lab, what, 2)  # 0/1 masks
    return torch.from_numpy(y.astype(np.uint8))[None]


def check_fit_is_defined(logits: Sequence[torch.Tensor], targets: Sequence[torch.Tensor],
                         activation: str = "softmax", mode: str = "scalar",
                         region_names: Sequence[str] | None = None) -> int:
    """Refuse calibration cases on which no temperature minimises the NLL: one at 0, or one growing without end.

    With ``b = 1 / t`` the NLL of ``softmax(b z)`` (or of ``sigmoid(b z)``) is convex in ``b``, so a temperature fits
    exactly when the NLL falls as ``b`` leaves 0 and rises again as ``b`` grows:

    - it keeps falling as the temperature goes to 0 when every voxel is predicted right (the reference holds the
      largest logit, or each region's logit has the sign of its mask; a tie or a logit 0 bounds nothing);
    - it keeps falling as the temperature grows without end (uniform probabilities fit best) when its slope at
      ``b = 0`` is not negative: ``sum_i (mean_c z_ic - z_iy) >= 0`` (softmax), ``sum_i (1/2 - y_i) z_i >= 0``
      (a region). Every voxel wrong implies it for two classes and for regions, but not for more classes (the
      reference second of three logits can still fit a temperature), and a network whose right voxels are outweighed
      by confident wrong ones meets it with many voxels right. ``mode="vector"`` with softmax is refused when the
      slope along every class's ``b_c`` is not negative.

    The "fitted" temperature is otherwise only where the optimiser stopped (0.2 after 192 steps, say, or 29 at the step
    limit, with advice to allow more steps that never converge), and a checkpoint scaled by it makes the network as
    over- or under-confident as that number happens to be on new cases.

    A region-based network calibrated per region (``activation="sigmoid"``, ``mode="vector"``) fits each region's
    temperature on that region's voxels alone, so each region is checked: a region without a temperature is refused by
    name (``mode="scalar"`` fits one temperature shared by the regions, checked on the pooled voxels).

    Args:
        logits: per case ``(1, C, *spatial)`` (:func:`collect_logits`).
        targets: per case a label map ``(1, *spatial)`` (softmax) or region masks ``(1, R, *spatial)`` (sigmoid).
        activation: ``"softmax"`` or ``"sigmoid"``.
        mode: ``"scalar"`` (one temperature) or ``"vector"`` (one per class or region).
        region_names: the regions' names in the messages (sigmoid; default: the channel indices ``0, 1, ...``).

    Returns:
        The number of voxels (region voxels for sigmoid) predicted wrong (the reference's logit below the largest, or
        a region's logit of the other sign).

    Raises:
        ValueError: naming ``--labels``, when no temperature fits (for ``"sigmoid"`` with ``mode="vector"``: one
            region's, named).

    Example:
        >>> z = torch.tensor([[[3.0, -1.0], [0.0, 1.0]]])  # (1, C=2, 2 voxels)
        >>> check_fit_is_defined([z], [torch.tensor([[0, 0]])])  # right by 3, wrong by 2
        1
        >>> check_fit_is_defined([z], [torch.tensor([[1, 1]])])  # wrong by 3, right by 2; doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: --labels: on the 1 calibration case(s) the network's logits do no better than uniform ...
    """
    sigmoid = activation == "sigmoid"
    per_region = sigmoid and mode == "vector"
    per_class = not sigmoid and mode == "vector"
    wrong_r: torch.Tensor | None = None  # wrong voxels per task (one task, or one per region)
    total_r: torch.Tensor | None = None
    slope_r: torch.Tensor | None = None  # the NLL's slope in b = 1/t at b = 0, summed over voxels (per class: (C,))
    size_r: torch.Tensor | None = None  # the sum of its terms' magnitudes (the rounding scale of slope_r)
    for z_in, y_in in zip(logits, targets):
        z_case, y_case = torch.as_tensor(z_in), torch.as_tensor(y_in)
        n_ch = int(z_case.shape[1])
        zf = z_case.reshape(z_case.shape[0], n_ch, -1)  # (B, C, n)
        yf = y_case.reshape(z_case.shape[0], n_ch, -1) if sigmoid else y_case.reshape(z_case.shape[0], 1, -1)
        w = torch.zeros(n_ch if per_region else 1, dtype=torch.long)
        sl = torch.zeros(n_ch if (per_region or per_class) else 1, dtype=torch.float64)
        sz = torch.zeros_like(sl)
        for start in range(0, zf.shape[-1], _CHECK_CHUNK):  # float64 copies of a chunk, not of a case
            z = zf[..., start : start + _CHECK_CHUNK].double()
            y = yf[..., start : start + _CHECK_CHUNK]
            for b in range(z.shape[0]):  # the terms of nll_slope_terms, per region or pooled, per class or summed
                if sigmoid:
                    for r in range(n_ch):
                        wr, slr, szr = nll_slope_terms(z[b, r], y[b, r], multilabel=True)
                        task = r if per_region else 0
                        w[task] += wr
                        sl[task] += slr
                        sz[task] += szr
                else:
                    wr, slr, szr = nll_slope_terms(z[b], y[b, 0])
                    w += wr
                    sl += slr if per_class else slr.sum()
                    sz += szr if per_class else szr.sum()
        n = torch.full_like(w, (zf.shape[0] * zf.shape[-1]) if (per_region or not sigmoid) else zf.numel())
        wrong_r = w if wrong_r is None else wrong_r + w
        total_r = n if total_r is None else total_r + n
        slope_r = sl if slope_r is None else slope_r + sl
        size_r = sz if size_r is None else size_r + sz
    n_cases = len(logits)
    if wrong_r is None or total_r is None or slope_r is None or size_r is None:  # no case: refused as without an error
        wrong_r = total_r = torch.zeros(1, dtype=torch.long)
        slope_r = size_r = torch.zeros(1, dtype=torch.float64)
        per_region = per_class = False
    # not falling at b = 0 (up to the sum's rounding): uniform probabilities fit best
    # the vector fit has no temperature only when no class's b_c lowers the NLL
    flat = nll_flat_at_zero(slope_r, size_r, per_class).reshape(-1)
    names = [str(r) for r in range(len(wrong_r))] if region_names is None else [str(r) for r in region_names]
    fallback = ("; --mode scalar fits one temperature shared by the regions" if per_region else "")
    # first the tasks never wrong (the plainer case), then the others
    for r, (wrong, total, grows) in enumerate(zip(wrong_r.tolist(), total_r.tolist(), flat.tolist())):
        what = f"region {names[r]!r} of " if per_region else ""
        if wrong == 0 and grows and total:
            # none wrong and not falling at 1 / t = 0: every voxel's logits are equal (an untrained or unloaded head),
            # which was reported as a network that "predicts every voxel right" (found by hostile review 60)
            equal = "0" if sigmoid else "equal for every class"
            raise ValueError(f"--labels: the network's logits are {equal} at every voxel of {what}the {n_cases} "
                             "calibration case(s) (no voxel is predicted right or wrong), so the NLL does not depend "
                             "on the temperature; is the checkpoint trained and loaded?")
        if wrong == 0:
            raise ValueError(f"--labels: the network predicts every voxel of {what}the {n_cases} calibration case(s) "
                             "right, so no temperature fits them (the NLL keeps falling as it goes to 0); calibrate "
                             f"on cases where the network makes errors{fallback}")
    for r, (wrong, total, grows) in enumerate(zip(wrong_r.tolist(), total_r.tolist(), flat.tolist())):
        what = f"region {names[r]!r} of " if per_region else ""
        if grows and wrong == total:
            raise ValueError(f"--labels: the network predicts every voxel of {what}the {n_cases} calibration case(s) "
                             "wrong, so no temperature fits them (the NLL keeps falling as it grows); are these the "
                             f"network's labels?{fallback}")
        if grows:
            raise ValueError(f"--labels: on {what}the {n_cases} calibration case(s) the network's logits do no better "
                             f"than uniform probabilities ({wrong} of {total} voxels predicted wrong, the confident "
                             "errors outweighing the right voxels), so no temperature fits them (the NLL keeps falling "
                             f"as it grows); are these the network's labels?{fallback}")
    return int(wrong_r.sum())


def run_calibrate(
    images: str | os.PathLike,
    labels: str | os.PathLike,
    output: str | os.PathLike,
    *,
    model: str | None = None,
    bundle: str | os.PathLike | None = None,
    network: str | os.PathLike | dict | None = None,
    checkpoint: str | os.PathLike | None = None,
    unsafe_load: bool = False,
    allow_code: Sequence[str] = (),
    device: str | torch.device = "cpu",
    intensity: str = "auto",
    roi: int | Sequence[int] | None = None,
    overlap: float = 0.25,
    mode: str = "scalar",
    loss: str = "nll",
    max_steps: int = 1000,
    progress: bool = True,
    activation: str = "softmax",
    regions: RegionSpec | str | os.PathLike | None = None,
    ignore_unclaimed_labels: bool = False,
) -> tuple[Path, dict]:
    """Fit a temperature on labelled cases and write the calibrated checkpoint and its record.

    The cases are those of ``images`` / ``labels``; the checkpoint ``output`` (``.pt`` / ``.pth``) and its record
    ``output.with_suffix(".json")`` are written atomically. Temperature scaling is that of Guo et al., "On
    Calibration of Modern Neural Networks" (ICML 2017), :func:`~monai_unc.temperature.calibrate_network`. Neither may be
    an input file (the checkpoint, a network spec file; also not as a link) nor lie inside an input folder, and
    their folder must be writable: checked before any work (:func:`monai_unc.io.check_output_file`). The two are
    written as one step under the lock of their folder (:func:`monai_unc.io.output_lock`): a run that finishes while
    another writes the same folder waits for it (up to a minute), then is refused, so a checkpoint never lies beside
    another run's record.

    The validation cases' logits wait on disk until the fit, in a temporary folder beside ``output``
    (``.<name>.partial-logits-*.dir``, e.g. ``.cal.pt.partial-logits-*.dir``, :func:`monai_unc.io.scratch_folder`:
    removed at the end, even on an error; it takes ``4 C + 1`` bytes per voxel of every case, ``C`` the network's
    channels), and are mapped back one case at a time at every step of the fit
    (:func:`collect_logits` with ``store``): memory holds about one case (its logits, labels and the fit's float64
    chunks), whatever the number of cases.

    The model is named as for :func:`~monai_unc.workflows.models.load_network` (one of ``model``, ``bundle``,
    ``network``); the bundle's preprocessing is not applied (labels could not follow it). ``intensity="auto"`` uses
    the model's default normalisation. Returns ``(output path, record)`` (the record of
    :func:`~monai_unc.temperature.calibrate_network` plus the model's description and checkpoint).

    ``activation="sigmoid"`` calibrates a region-based network per region (module docstring; ``regions`` builds
    the region masks from label maps and names the regions in the record: ``record["regions"]`` is the spec
    ``{name: [label, ...]}``, or the channel names ``["0", "1", ...]`` without one; a ``.json`` path is read as
    ``--regions`` reads it). Label values that no region holds are refused unless ``ignore_unclaimed_labels``
    (:func:`collect_logits`).

    The options take what the command line's flags give: ``device="auto"`` (CUDA when available,
    :func:`~monai_unc.workflows.prepare.resolve_device`), ``roi=[64]`` (one size for every axis, as ``64``).

    Args:
        images: the folder of validation images.
        labels: the folder of their labels (matched by case id).
        output: the calibrated checkpoint to write (``.pt`` / ``.pth``).
        model: a built-in model name (one of ``model``, ``bundle``, ``network``).
        bundle: a MONAI bundle folder.
        network: a network spec (dict or JSON file).
        checkpoint: the weights to calibrate.
        unsafe_load: load the checkpoint with ``weights_only=False`` (trusted files only).
        allow_code: names a ``network`` spec may build besides the allowed networks (they run code: trusted specs
            only; :func:`~monai_unc.workflows.models.check_network_spec`).
        device: where the network runs (``"auto"``: CUDA when available).
        intensity: the intensity normalisation (``"auto"``: the model's default).
        roi: the sliding-window size (None: the whole image in one pass).
        overlap: the sliding-window overlap fraction.
        mode: ``"scalar"`` (one temperature) or ``"vector"`` (one per class or region).
        loss: the fitted objective, ``"nll"`` or ``"ece"``.
        max_steps: at most this many optimisation steps.
        progress: progress bars on stderr.
        activation: ``"softmax"`` or ``"sigmoid"`` (region-based network).
        regions: the region spec (``"sigmoid"``): a spec, or a ``.json`` file.
        ignore_unclaimed_labels: accept label values that no region holds.

    Returns:
        ``(output path, record)``: the record of :func:`~monai_unc.temperature.calibrate_network` plus the
        model's description and checkpoint (also written to ``output.with_suffix(".json")``).

    Raises:
        ValueError: an invalid option (``overlap`` out of [0, 1), or other than the default without ``roi``:
            :func:`~monai_unc.workflows.infer_plan.check_window_options`), an output over an input, a checkpoint
            calibrated already (one that holds a temperature), labels that do not fit, cases on which the network
            is never (or always) wrong (:func:`check_fit_is_defined`), or an ``output`` ``cal.pt`` beside an existing
            ``cal.pth`` (or the reverse: both would have the record ``cal.json``).
        FileNotFoundError: a missing input folder.
    """
    spec = _region_spec(activation, regions)
    if ignore_unclaimed_labels and spec is None:  # found by hostile testing: ignored without a word
        raise ValueError("--ignore-unclaimed-labels needs --regions (it counts the label values that no region "
                         "holds as background)")
    device = resolve_device(device)
    roi = normalize_roi(roi)
    check_window_options(roi, overlap)  # found by hostile testing: --overlap without --roi was ignored silently
    out = Path(output)
    if not out.name.endswith((".pt", ".pth")):
        raise ValueError(f"--output must be a .pt or .pth file, got {out}")
    for folder, parameter, kind in ((images, "input", "images"), (labels, "labels", "labels")):
        input_folder(folder, parameter, f"--{parameter} folder")
        refuse_dataset_root(folder, parameter, f"--{parameter} folder", kind)  # imagesTr/, labelsTr/: the sub-folder
    # nothing is written over an input: the checkpoint, a network spec file, the bundle, the image / label folders
    spec_file = network if isinstance(network, (str, os.PathLike)) and Path(network).is_file() else None
    regions_file = regions if isinstance(regions, (str, os.PathLike)) and Path(regions).is_file() else None
    inputs = (images, labels, checkpoint, spec_file, bundle, regions_file)
    check_output_file(out, *inputs, what="--output")
    check_output_file(out.with_suffix(".json"), *inputs, what="record of --output")
    twin = out.with_suffix(".pth" if out.suffix == ".pt" else ".pt")
    if twin.is_file():  # found by review: cal.pth's record replaced cal.pt's (cal.json), cal.pt kept its own
        raise ValueError(f"--output {out}: its record {out.with_suffix('.json').name} is also the record of {twin}, "
                         f"which is there; choose another name, or remove {twin.name} first")
    loaded = load_network(model=model, bundle=bundle, network=network,
                          checkpoints=[checkpoint] if checkpoint else [], unsafe_load=unsafe_load,
                          device=device, bundle_preprocessing=False, allow_code=allow_code)
    check_model_activation(loaded, activation)
    warn_bundle_window(loaded, roi)
    if loaded.temperature is not None:  # found by hostile testing: the new checkpoint nested the old one's state dict
        # ({"state_dict": {"temperature": ..., "network.*": ...}, ...}), which no later command could load
        raise ValueError(f"--checkpoint {loaded.checkpoints[0]} is calibrated already (temperature "
                         f"{loaded.temperature}, written by monai-unc calibrate); calibrate the original weights")
    check_output_file(out, *loaded.checkpoints, what="--output")  # e.g. the example model's shipped weights
    check_roi(roi, loaded.spatial_dims)
    cases = network_image_cases(images, loaded.network)  # DICOM: one series folder per input channel
    label_files = list_files(labels)
    missing = [c.case_id for c in cases if c.case_id not in label_files]
    if missing:
        raise ValueError(f"no label in {labels} for case(s) {missing[:5]}"
                         + case_id_hint(missing[0], set(label_files) - {c.case_id for c in cases}, "the labels"))
    intensity = loaded.default_intensity if intensity == "auto" else intensity
    out.parent.mkdir(parents=True, exist_ok=True)
    # the cases' logits wait on disk beside the output (not in an input folder; a ".partial...dir" name, which
    # clean_partial_files removes should a killed run leave it) and are mapped back one case at a time
    with scratch_folder(out, "logits") as store:
        logits, targets = collect_logits(cases, [label_files[c.case_id] for c in cases], loaded, intensity, roi,
                                         overlap, device, progress=progress, activation=activation, regions=spec,
                                         ignore_unclaimed_labels=ignore_unclaimed_labels, store=store)
        names = list(spec) if spec is not None else None
        check_fit_is_defined(logits, targets, activation, mode=mode, region_names=names)
        example = torch.from_numpy(normalize_intensity(load_image_case(cases[0])[0], intensity))
        if roi is not None:  # one window, a size the network accepts
            size = [roi] * (example.ndim - 1) if isinstance(roi, int) else roi
            example = torch.as_tensor(ResizeWithPadOrCrop(size)(example))
        net: nn.Module = loaded.network.cpu()
        # the fold check compares the network's outputs before and after the fold: MONAI's fused attention drew
        # attention dropout in both (eval mode too), and the exact fold of a UNETR was refused (review 66)
        # the command prints its own line for a fit that did not converge: the fit leaves out its warning (review 68:
        # not filtered by its text inside catch_warnings, a process-wide filter)
        with convergence_said_by_caller(), align_fused_attention(net):
            state, record = calibrate_network(logits, targets, net, mode=mode, loss=loss, max_steps=max_steps,
                                              example_input=example[None], activation=activation,
                                              region_names=None if spec is None else list(spec))
        del logits, targets  # no mapping of the store's files outlives it
    record.update({"source": loaded.description,
                   "checkpoint": loaded.checkpoints[0] if loaded.checkpoints else None})
    if spec is not None:
        record["regions"] = {k: list(v) for k, v in spec.items()}
    # the two writes are one step under the output folder's lock: two runs into the same --output that finish
    # together would otherwise leave one run's checkpoint beside the other's record (another temperature). A run
    # finishing meanwhile is waited for (its step is short); a longer hold (another command writing the folder) is
    # refused in one line, and this run's files are then not written
    with output_lock(out.parent, "monai-unc calibrate", wait=_WRITE_WAIT_S):
        # the record of an earlier run goes first: interrupted between the two writes, the new checkpoint is then
        # never left beside a record of another temperature
        out.with_suffix(".json").unlink(missing_ok=True)
        atomic_torch_save(out, state)
        atomic_write_json(out.with_suffix(".json"), record)
    return out, record


def calibrate_summary(out: Path, record: dict[str, Any]) -> list[str]:
    """What ``monai-unc calibrate`` prints after a run.

    Args:
        out: the calibrated checkpoint written (its record is ``out.with_suffix(".json")``).
        record: the record :func:`run_calibrate` returns.

    Returns:
        The lines: the temperature and where it went, NLL / ECE before and after (and per region), the files; first
        a ``warning:`` line when the fit did not converge (``record["converged"]`` false), worded by
        ``record["not_converged"]``: still moving at the step limit, or stalled (see :func:`_non_convergence_lines`).
    """
    b, a = record["before"], record["after"]
    where = "folded into the last layer" if record["folded_into_last_layer"] else "stored beside the weights"
    lines = [f"temperature {[round(t, 4) for t in record['temperature']]} after {record['steps']} steps ({where})",
             f"validation NLL {b['nll']:.4f} -> {a['nll']:.4f}, ECE {b['ece']:.4f} -> {a['ece']:.4f}, "
             f"all-label ECE {b['all_label_ece']:.4f} -> {a['all_label_ece']:.4f}"
             + (" (means over the regions)" if "regions" in b else "")]
    for name, before in (b.get("regions") or {}).items():
        after = a["regions"][name]
        lines.append(f"  region {name}: NLL {before['nll']:.4f} -> {after['nll']:.4f}, "
                     f"ECE {before['ece']:.4f} -> {after['ece']:.4f}")
    return [*_non_convergence_lines(record), *lines, f"wrote {out} and {out.with_suffix('.json')}"]


def _non_convergence_lines(record: dict[str, Any]) -> list[str]:
    """A ``warning:`` line when the temperature fit of a :func:`run_calibrate` record did not converge.

    The line is :func:`monai_unc.temperature.non_convergence_warning`'s (``nnunet-calibrate`` prints the same).

    Args:
        record: the record :func:`run_calibrate` returns (or its ``.json`` file holds).

    Returns:
        One line, or none when the fit converged (or the record does not say).

    Example:
        >>> _non_convergence_lines({"converged": False, "steps": 50})[0][:60]
        'warning: the temperature fit did not converge in 50 steps (t'
        >>> _non_convergence_lines({"converged": True, "steps": 12})
        []
    """
    line = non_convergence_warning(record)
    return [] if line is None else [line]


def calibrate_from_arguments(args: argparse.Namespace) -> CommandResult[tuple[Path, dict[str, Any]]]:
    """``monai-unc calibrate`` on its parsed arguments (:func:`monai_unc.workflows.arguments.add_command_parsers`).

    Args:
        args: the parsed arguments of ``monai-unc calibrate``.

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of :func:`run_calibrate`'s ``(checkpoint, record)``,
        with the lines of :func:`calibrate_summary` (with ``--quiet`` only its warning that the fit did not
        converge, :func:`_non_convergence_lines`).
    """
    out, record = run_calibrate(
        args.input, args.labels, args.output, model=args.model, bundle=args.bundle, network=args.network,
        checkpoint=args.checkpoint, unsafe_load=args.unsafe_load, device=args.device, intensity=args.intensity,
        allow_code=getattr(args, "allow_code_target", ()),
        roi=args.roi, overlap=args.overlap, mode=args.mode, loss=args.loss, max_steps=args.max_steps,
        progress=not args.quiet, activation=args.activation, regions=args.regions,
        ignore_unclaimed_labels=args.ignore_unclaimed_labels,
    )  # fmt: skip
    # --quiet drops the summary, not the warning that the temperature written is not a fitted one
    lines = tuple(_non_convergence_lines(record)) if args.quiet else tuple(calibrate_summary(out, record))
    return CommandResult((out, record), True, Path(out).resolve().parent, lines)
