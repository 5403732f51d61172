"""Training of the example network on the MNI152 tissue task (left hemisphere only).

Protocol (docs/data.md): patches are drawn from the left hemisphere (world
x < 0) with augmentation (small affine, bias field, Gaussian noise, contrast, blur); the right hemisphere is
never seen in training and is where Dice is reported. Soft Dice + cross-entropy (default; ``loss=`` also takes
soft Dice or cross-entropy alone, for the calibration study of Kock et al.), Adam.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np
import torch
from monai.inferers import SlidingWindowInferer
from monai.losses import DiceCELoss, DiceLoss, NACLLoss
from monai.transforms import (
    Compose,
    RandAdjustContrastd,
    RandAffined,
    RandBiasFieldd,
    RandGaussianNoised,
    RandGaussianSmoothd,
    RandSpatialCropd,
    SpatialPadd,
)
from tqdm.auto import tqdm

from .._utils import check_bool, check_integer, check_seed, is_finite_real, is_int
from ..losses import DiceCEL1ACELoss, DiceCEMarginLoss, DiceSVLSLoss, check_finite_loss
from ..metrics.lesions import binary_mask
from ..metrics.overlap import dice
from .mni152 import TISSUE_CLASSES, load_mni152_tissue
from .model import EXAMPLE_NETWORK, build_example_network, check_trained_network_path, save_trained_network

__all__ = ["train_tissue_model", "hemisphere_dice", "dice_per_class", "make_training_loss"]

PATCH = (48, 64, 64)
ROI = (64, 64, 64)

#: training losses accepted by :func:`train_tissue_model` (MONAI's soft Dice includes the background class)
TRAINING_LOSSES = ("dice_ce", "dice", "ce")
#: the calibration losses of :mod:`monai_unc.losses` (and MONAI's NACL) that ``train_tissue_model`` also takes
#: (docs/training.md), each composed with Dice as its paper trains it; name -> the name in the record
CALIBRATION_LOSSES = {
    "dice_svls": "Dice+SVLS",
    "dice_ce_mbls": "DiceCE+MbLS",
    "dice_ce_hard_l1ace": "DiceCE+hL1-ACE",
    "dice_ce_soft_l1ace": "DiceCE+sL1-ACE",
    "dice_nacl": "Dice+NACL",
}


def _cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Categorical cross-entropy of logits ``(B, C, *spatial)`` against labels ``(B, 1, *spatial)``."""
    return torch.nn.functional.cross_entropy(logits, target[:, 0])


def _finite(
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``loss`` whose non-finite value raises a ``ValueError`` (:func:`~monai_unc.losses.check_finite_loss`).

    Float16 / bfloat16 logits are computed in float32, as the losses of :mod:`monai_unc.losses` compute them (the
    gradient reaches the logits in their dtype): in earlier versions MONAI's Dice summed a patch's voxels in
    float16 (0.888 instead of 0.775 for a 48 x 64 x 64 patch; Dice + CE, CE and Dice + NACL overflowed and raised
    blaming the Dice's smoothing), and bfloat16 logits gave a bfloat16 loss 8e-3 off.
    """

    def checked(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if isinstance(logits, torch.Tensor) and logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        return check_finite_loss(loss(logits, labels), logits, labels)

    return checked


def make_training_loss(
    loss: str, classes: int = 3, spatial_dims: int = 3
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The training loss ``f(logits, labels)`` of a name of :data:`TRAINING_LOSSES` or :data:`CALIBRATION_LOSSES`.

    Every loss takes logits ``(B, C, *spatial)`` and a label map ``(B, 1, *spatial)`` (softmax, one-hot targets made
    inside); the calibration losses are composed with Dice as their papers train them (docs/training.md). Every loss
    raises a ``ValueError`` when its value is not finite (NaN or infinite logits), and computes float16 / bfloat16
    logits in float32 (a float32 loss), as the losses of :mod:`monai_unc.losses` do: MONAI's Dice, cross-entropy and
    NACL returned NaN to the optimiser, and summed a patch in float16.

    Args:
        loss: the name (``"dice_ce"``, ``"dice"``, ``"ce"``, ``"dice_svls"``, ``"dice_ce_mbls"``,
            ``"dice_ce_hard_l1ace"``, ``"dice_ce_soft_l1ace"``, ``"dice_nacl"``).
        classes: the number of classes ``C``, at least 2 (only MONAI's ``NACLLoss`` needs it; its logits must have
            ``C`` channels).
        spatial_dims: 2 or 3 (only ``NACLLoss`` needs it; its logits must have that many spatial dimensions).

    Returns:
        The loss: a callable of ``(logits, labels)`` giving a scalar tensor.

    Raises:
        ValueError: an unknown ``loss``, ``classes`` not an integer >= 2 or ``spatial_dims`` not 2 or 3; when called,
            a non-finite loss, or (``"dice_nacl"``) logits whose channels or spatial dimensions differ from
            ``classes`` / ``spatial_dims``.

    Example:
        >>> z = torch.randn(1, 2, 8, 8, 8); y = torch.randint(0, 2, (1, 1, 8, 8, 8))
        >>> loss = make_training_loss("dice_ce_mbls", classes=2)
        >>> loss(z, y).ndim
        0
    """
    # found by hostile testing: "dice_nacl" with 2-D logits and the default spatial_dims=3, or logits of another
    # number of channels than classes, failed inside MONAI (a RuntimeError of torch.permute, "Class values must be
    # smaller than num_classes"); classes=0 or "3" was taken; MONAI's losses gave a NaN loss of NaN logits
    names = TRAINING_LOSSES + tuple(CALIBRATION_LOSSES)
    if not isinstance(loss, str) or loss not in names:
        raise ValueError(f"loss must be one of {names}, got {loss!r}")
    classes = check_integer(classes, "classes", minimum=2)
    if not is_int(spatial_dims) or spatial_dims not in (2, 3):
        raise ValueError(f"spatial_dims must be 2 or 3, got {spatial_dims!r}")
    spatial_dims = int(spatial_dims)
    if loss == "dice_ce":
        return _finite(DiceCELoss(to_onehot_y=True, softmax=True))
    if loss == "dice":
        return _finite(DiceLoss(to_onehot_y=True, softmax=True))
    if loss == "ce":
        return _finite(_cross_entropy)
    if loss == "dice_svls":
        return DiceSVLSLoss(to_onehot_y=True, softmax=True)
    if loss == "dice_ce_mbls":
        return DiceCEMarginLoss(to_onehot_y=True)
    if loss in ("dice_ce_hard_l1ace", "dice_ce_soft_l1ace"):
        return DiceCEL1ACELoss(loss.split("_")[2], to_onehot_y=True)
    # "dice_nacl", the last of `names`
    dice_loss, nacl = DiceLoss(to_onehot_y=True, softmax=True), NACLLoss(classes=classes, dim=spatial_dims)

    def dice_nacl(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if z.ndim != spatial_dims + 2 or z.shape[1] != classes:
            raise ValueError(
                f"logits must be (B, {classes}, *spatial) with {spatial_dims} spatial dimensions (classes="
                f"{classes}, spatial_dims={spatial_dims}), got {tuple(z.shape)}"
            )
        return dice_loss(z, y) + nacl(z, y[:, 0])

    return _finite(dice_nacl)


def dice_per_class(pred: np.ndarray, label: np.ndarray, num_classes: int, mask: np.ndarray | None = None) -> list:
    """Dice of each foreground class 1..C-1 between two label maps, optionally inside ``mask``.

    NaN (with a warning) for a class absent from both (:func:`monai_unc.metrics.overlap.dice`, ``empty_score=nan``).

    Args:
        pred: the predicted label map (any shape).
        label: the reference label map, same shape.
        num_classes: ``C``, background included.
        mask: a boolean (or 0/1) mask of the same shape; only its voxels count (None: every voxel).

    Returns:
        ``C - 1`` floats, the Dice of classes ``1..C-1``.

    Example:
        >>> pred = np.array([0, 1, 1, 2, 2, 2])
        >>> label = np.array([0, 1, 2, 2, 2, 2])
        >>> [round(d, 4) for d in dice_per_class(pred, label, 3)]
        [0.6667, 0.8571]
        >>> dice_per_class(pred, label, 3, mask=np.array([1, 1, 0, 1, 1, 1], bool))
        [1.0, 1.0]
    """
    pred, label = np.asarray(pred), np.asarray(label)
    if pred.shape != label.shape:  # flattened, maps of one size but another shape were compared voxel by voxel
        raise ValueError(f"pred and label must have the same shape, got {pred.shape} and {label.shape}")
    if mask is not None:
        # found by hostile testing: a 0/1 uint8 mask (a NIfTI brain mask as nibabel reads it) indexed the voxels by
        # number (voxels 0 and 1, repeated) instead of selecting them, and a class's Dice came back NaN, silently
        m = binary_mask(mask, "mask")
        if m.shape != pred.shape:
            raise ValueError(f"mask must have the shape of pred {pred.shape}, got {m.shape}")
        pred, label = pred[m], label[m]
    d = dice(pred.reshape(1, -1), label.reshape(1, -1), num_classes=num_classes, empty_score=float("nan"))
    return [float(v) for v in d[0]]


def hemisphere_dice(net: torch.nn.Module, data: dict, roi: tuple = ROI, logits: torch.Tensor | None = None) -> dict:
    """Dice per tissue class of the deterministic prediction on each hemisphere.

    Args:
        net: the tissue network (put in eval mode).
        data: the MNI152 tissue volume of :func:`~monai_unc.data.mni152.load_mni152_tissue`: ``"image"``
            ``(1, X, Y, Z)``, ``"label"`` ``(1, X, Y, Z)`` and the boolean hemisphere masks ``"left"`` / ``"right"``.
        roi: the sliding-window size (overlap 0.25).
        logits: the network's logits ``(C, X, Y, Z)`` of the whole volume, when the caller has them already (the
            sliding window of ``roi``, overlap 0.25, batches of 2 windows: what this function computes otherwise);
            then ``net`` is not run.

    Returns:
        ``{"left": {class name: Dice}, "right": {...}}`` for the tissue classes (background excluded); the right
        hemisphere is the held-out one.

    Raises:
        ValueError: ``logits`` not of shape ``(C, X, Y, Z)`` with ``C = len(TISSUE_CLASSES)`` and the label's
            ``(X, Y, Z)``.

    Example:
        >>> net, record = train_tissue_model(iterations=1, progress=False, evaluate=False)  # doctest: +SKIP
        >>> hemisphere_dice(net, load_mni152_tissue(resolution=2))["right"]  # doctest: +SKIP
        {'grey matter': ..., 'white matter': ...}
    """
    label = data["label"][0]
    if logits is None:
        net.eval()
        with torch.no_grad():
            logits = SlidingWindowInferer(roi, sw_batch_size=2, overlap=0.25)(
                torch.from_numpy(data["image"][None]), net
            )[0]
    elif (not isinstance(logits, torch.Tensor) or logits.ndim != 4 or logits.shape[0] != len(TISSUE_CLASSES)
          or tuple(logits.shape[1:]) != label.shape):
        raise ValueError(
            f"logits must be a (C, X, Y, Z) tensor with C = {len(TISSUE_CLASSES)} and (X, Y, Z) = {label.shape}, got "
            f"{tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__}"
        )
    pred = logits.detach().argmax(0).cpu().numpy()
    return {
        side: dict(zip(TISSUE_CLASSES[1:], dice_per_class(pred, label, 3, data[side])))
        for side in ("left", "right")
    }


def train_tissue_model(
    out_path: str | os.PathLike | None = None,
    iterations: int = 1500,
    batch_size: int = 2,
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = True,
    loss: str = "dice_ce",
    evaluate: bool = True,
) -> tuple[torch.nn.Module, dict]:
    """Train the example UNet; optionally save the state dict to ``out_path`` (+ a ``<out_path>.json`` record).

    Deterministic for a given seed and thread count on CPU.

    Args:
        out_path: where to save the state dict (the record is written beside it as ``<out_path>.json``, e.g.
            ``model.pt.json``); None: not saved.
        iterations: Adam steps.
        batch_size: patches ``(48, 64, 64)`` per step, drawn from the left hemisphere.
        lr: Adam's learning rate.
        seed: seeds the patches, the augmentation and the initialisation.
        progress: a progress bar on stderr.
        loss: ``"dice_ce"`` (soft Dice + cross-entropy, the shipped weights), ``"dice"`` (soft Dice over all
            classes) or ``"ce"`` (cross-entropy); one of :data:`TRAINING_LOSSES`, or a calibration loss of
            :data:`CALIBRATION_LOSSES` (docs/training.md).
        evaluate: compute the hemisphere Dice of the record (a whole-volume prediction, :func:`hemisphere_dice`).
            False: the record has no ``dice_right_heldout`` / ``dice_left_train``, for a caller that predicts the
            whole volume anyway and adds them from its logits (``hemisphere_dice(net, data, logits=...)``: one
            prediction instead of two); needs ``out_path=None`` (a saved record holds the Dice).

    Returns:
        ``(network, record)``: the trained network and a dict with the settings, the losses and the hemisphere
        Dice (:func:`hemisphere_dice`; not with ``evaluate=False``).

    Raises:
        ValueError: an unknown ``loss``; ``iterations`` or ``batch_size`` not a positive integer (Python or numpy);
            ``lr`` not a positive finite number; ``seed`` outside ``[0, 2**32)``; ``out_path`` ending in ``.json``
            (a record's name) or not writable; ``evaluate=False`` with an ``out_path``. All before any data is
            loaded.
        TypeError: ``seed`` not an integer (a float, a bool), ``progress`` or ``evaluate`` not a bool.
    """
    # found by hostile testing: numpy integers (iterations=np.int64(1500)) trained, wrote the weights and then failed
    # to write the record (not JSON serialisable), leaving the .pt without its .json; a numpy float32 lr was refused;
    # seed=True trained with seed 1 and recorded True, seed=1.5 or 2**40 failed in numpy after the checks; a
    # truthy string progress="no" showed the bar. Every setting is checked and recorded as a Python value.
    iterations = check_integer(iterations, "iterations")
    batch_size = check_integer(batch_size, "batch_size")
    if not (is_finite_real(lr) and lr > 0):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    lr = float(lr)
    seed = check_seed(seed, optional=False)
    if seed >= 2**32:  # numpy's legacy seed (the augmentation) takes [0, 2**32)
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    progress = check_bool(progress, "progress")
    evaluate = check_bool(evaluate, "evaluate")
    if not evaluate and out_path is not None:
        raise ValueError("evaluate=False needs out_path=None: the saved record holds the hemisphere Dice")
    loss_fn = make_training_loss(loss, classes=len(TISSUE_CLASSES))
    if out_path is not None:  # before training: a .json path would be overwritten by the record
        out_path = check_trained_network_path(out_path)
    loss_name = {"dice_ce": "DiceCE", "dice": "Dice", "ce": "CE", **CALIBRATION_LOSSES}[loss]
    torch.manual_seed(seed)
    np.random.seed(seed)
    data = load_mni152_tissue(resolution=2)
    left = data["left"]
    n_left = int(left.any(axis=(1, 2)).sum())  # left hemisphere = the first n_left sagittal slices
    sample = {"image": data["image"][:, :n_left], "label": data["label"][:, :n_left]}
    aug = Compose(
        [
            SpatialPadd(["image", "label"], PATCH),
            RandSpatialCropd(["image", "label"], PATCH, random_size=False),
            RandAffined(
                ["image", "label"],
                prob=0.5,
                rotate_range=(0.1, 0.1, 0.1),
                scale_range=(0.1, 0.1, 0.1),
                mode=("bilinear", "nearest"),
                padding_mode="zeros",
            ),
            RandBiasFieldd("image", prob=0.3, coeff_range=(0.0, 0.3)),
            RandAdjustContrastd("image", prob=0.3, gamma=(0.7, 1.5)),
            RandGaussianSmoothd("image", prob=0.2, sigma_x=(0.25, 1.0), sigma_y=(0.25, 1.0), sigma_z=(0.25, 1.0)),
            RandGaussianNoised("image", prob=0.3, std=0.05),
        ]
    )
    aug.set_random_state(seed)
    net = build_example_network()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=iterations)
    start = time.time()
    losses = []
    net.train()
    for _ in tqdm(range(iterations), desc="train", disable=not progress):
        batch = [aug(sample) for _ in range(batch_size)]
        x = torch.stack([torch.as_tensor(b["image"]) for b in batch]).float()
        y = torch.stack([torch.as_tensor(b["label"]) for b in batch]).long()
        opt.zero_grad()
        batch_loss = loss_fn(net(x), y)
        batch_loss.backward()
        opt.step()
        sched.step()
        losses.append(batch_loss.item())
    seconds = time.time() - start
    record = {
        "network": {k: list(v) if isinstance(v, tuple) else v for k, v in EXAMPLE_NETWORK.items()},
        "task": "MNI152 2009 (nilearn, 2 mm) 3-class tissue: 0 background+CSF, 1 grey matter, 2 white matter",
        "protocol": "trained on patches of the left hemisphere (world x < 0) with affine, bias field, contrast, "
        "blur and noise augmentation; Dice reported on the held-out right hemisphere (world x >= 0)",
        "iterations": iterations,
        "batch_size": batch_size,
        "patch": list(PATCH),
        "lr": lr,
        "seed": seed,
        "loss": loss_name,
        "final_loss_mean_last_50": float(np.mean(losses[-50:])),
        "train_seconds": round(seconds, 1),
        "torch_threads": torch.get_num_threads(),
    }
    if evaluate:
        dice = hemisphere_dice(net, data)
        record.update(dice_right_heldout=dice["right"], dice_left_train=dice["left"])
    net.eval()
    if out_path is not None:
        save_trained_network(net, record, out_path)
    return net, record
