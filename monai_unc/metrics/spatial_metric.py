"""MONAI metric classes of the spatial uncertainty metrics (:mod:`.spatial`): BUC, BA-ECE and SPACE per case.

Each class packs ``cat([uncertainty, pred], channel)`` into the single ``y_pred`` MONAI's metric machinery carries,
reads the voxel spacing from a MetaTensor's affine when none is given, buffers one float64 value per case across
iterations and ranks, and reduces them ignoring NaN (a reduced value without any valid case is NaN with a
``UserWarning``, not MONAI's 0). The formulas are :func:`~monai_unc.metrics.boundary_uncertainty_concentration`,
:func:`~monai_unc.metrics.boundary_aware_ece` and :func:`~monai_unc.metrics.spatial_calibration_error` (Zeevi et al.);
this module is their thin MONAI adapter, apart so that the functional core imports without MONAI.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from monai.metrics import CumulativeIterationMetric
from monai.utils import MetricReduction

from .._utils import (
    check_bool,
    check_call_keywords,
    check_case_grid,
    check_metric_reduction,
    check_same_cases,
    main_rank_warnings,
    probability_tolerance,
    reduce_case_values,
    stated_affine,
    sync_case_buffers,
    to_tensor,
)
from .boundary import check_backend_name
from .cumulative import counted_call
from .spatial import (
    SpacingLike,
    boundary_aware_ece,
    boundary_uncertainty_concentration,
    check_bands,
    check_sigma_values,
    check_spacing_option,
    check_truncate,
    check_width,
    spatial_calibration_error,
)

__all__ = ["BoundaryUncertaintyConcentrationMetric", "BoundaryAwareECEMetric", "SpatialCalibrationErrorMetric"]


def _pack(uncertainty: Any, pred: Any) -> Any:
    """``cat([uncertainty, pred], channel)``: the single ``y_pred`` MONAI's metric machinery carries."""
    if isinstance(uncertainty, (list, tuple)) or isinstance(pred, (list, tuple)):
        if not (isinstance(uncertainty, (list, tuple)) and isinstance(pred, (list, tuple))):
            raise ValueError("uncertainty and y_pred must both be lists (decollated) or both batch tensors")
        if len(uncertainty) != len(pred):
            raise ValueError(f"uncertainty has {len(uncertainty)} items but y_pred has {len(pred)}")
        return [_pack_one(u, p, batched=False) for u, p in zip(uncertainty, pred)]
    return _pack_one(uncertainty, pred, batched=True)


def _exact_float_dtype(x: torch.Tensor, name: str) -> torch.dtype:
    """The floating dtype that holds every value of ``x``.

    Its own for a floating ``x``; for integers and bools float32, or float64 for integers beyond ``2**24`` in magnitude
    (float32 would merge label ``2**24 + 1`` with ``2**24``).

    Raises:
        TypeError: a complex ``x``.
        ValueError: an integer beyond ``2**53`` in magnitude (no floating dtype of torch holds it).
    """
    if x.is_complex():
        raise TypeError(f"{name} must be real-valued, got dtype {x.dtype}")
    if x.is_floating_point():
        return x.dtype
    if x.dtype.itemsize < 4 or x.numel() == 0:  # bool, (u)int8, (u)int16: float32 holds them all
        return torch.float32
    if x.dtype in (torch.uint32, torch.uint64):
        # torch has no aminmax for these (found by hostile review 59: NotImplementedError for a uint32 label map, which
        # the functions take): read as int64, uint64 by its bits, whose values of 2**63 and more come out negative
        x = x.view(torch.int64) if x.dtype == torch.uint64 else x.to(torch.int64)
        if bool((x < 0).any()):
            raise ValueError(f"{name} holds the integer {int(x[x < 0].max()) + 2**64}, beyond 2**53: no floating dtype "
                             "holds it")
    lo, hi = (int(v) for v in torch.aminmax(x))
    for dtype in (torch.float32, torch.float64):
        if max(-lo, hi) <= 2 / torch.finfo(dtype).eps:  # every integer up to 2**(mantissa bits + 1)
            return dtype
    raise ValueError(f"{name} holds the integer {max(hi, lo, key=abs)}, beyond 2**53: no floating dtype holds it")


def _pack_one(uncertainty: Any, pred: Any, batched: bool) -> torch.Tensor:
    """``cat([uncertainty, pred])`` along the channel axis; a MetaTensor result when either input is one.

    The packed dtype holds every value of both (:func:`_exact_float_dtype`; at least float32): a float16 uncertainty
    map does not round float32 probabilities (0.5001 and 0.4999 would tie and the argmax change) nor large label
    indices, so the class computes what its function computes on the two inputs.

    The packed tensor keeps the metadata (affine, batch flag) of the first MetaTensor among ``uncertainty`` and
    ``pred``, so that the metric can still read the voxel spacing from it when ``y`` is a plain tensor.
    """
    from monai.data import MetaTensor

    u = to_tensor(uncertainty, "uncertainty")
    p = to_tensor(pred, "y_pred")
    ch = 1 if batched else 0
    if p.ndim == u.ndim - 1:
        p = p.unsqueeze(ch)
    if u.shape[ch] != 1:
        raise ValueError(f"uncertainty must have one channel, got shape {tuple(u.shape)}")
    # found by hostile testing: another batch size or grid escaped as torch.cat's RuntimeError ("Sizes of tensors
    # must match except in dimension 1")
    if u.ndim != p.ndim or u.shape[:ch] + u.shape[ch + 1:] != p.shape[:ch] + p.shape[ch + 1:]:
        axes = "(B, 1, *spatial)" if batched else "(1, *spatial)"
        raise ValueError(f"uncertainty {tuple(u.shape)} and y_pred {tuple(p.shape)} must hold the same cases on the "
                         f"same grid: uncertainty {axes}, y_pred with the same {'batch size and ' if batched else ''}"
                         "spatial shape")
    dtype = torch.promote_types(
        torch.promote_types(_exact_float_dtype(u, "uncertainty"), _exact_float_dtype(p, "y_pred")), torch.float32
    )
    packed = torch.cat([u.to(dtype=dtype), p.to(device=u.device, dtype=dtype)], dim=ch)
    source = next((x for x in (uncertainty, pred) if isinstance(x, MetaTensor)), None)
    if source is None:
        return packed
    out = MetaTensor(packed)
    out.copy_meta_from(source)  # affine and batch flag: the spacing of the maps' grid
    return out


def _states_a_grid(x: Any) -> bool:
    """Whether a MetaTensor's affine (a case's ``(4, 4)``, a batch's ``(B, 4, 4)``) states a grid for some case.

    MONAI's default identity, which a MetaTensor built without geometry carries, states none
    (:func:`~monai_unc._utils.stated_affine`).
    """
    affine = torch.as_tensor(x.affine)
    cases = affine if affine.ndim == 3 else [affine]
    return any(stated_affine(a) is not None for a in cases)


def _spacing_from_meta(*tensors: Any) -> Any:
    """Voxel spacing from the first MetaTensor among ``tensors`` whose affine states a grid (per case for a batch).

    Else from the first MetaTensor (MONAI's default identity: 1 mm), else 1 mm.

    In earlier versions a label MetaTensor without geometry (a ``.npy`` label map through ``LoadImaged``, or
    ``EnsureTyped`` of an array) carries MONAI's default identity affine, which the same-grid checks read as no grid;
    its 1 mm was taken over the 2 x 1 x 3 mm that the uncertainty map and the prediction state (SPACE 0.408 instead of
    0.428 in the test).
    """
    from monai.data import MetaTensor

    metas = [x for x in tensors if isinstance(x, MetaTensor)]
    if not metas:
        return 1.0
    x = next((t for t in metas if _states_a_grid(t)), metas[0])
    nsp = x.ndim - 2
    pix = x.pixdim
    if isinstance(pix, (list, tuple)):
        return np.stack([np.asarray(torch.as_tensor(q).cpu(), dtype=float)[:nsp] for q in pix])
    return np.asarray(torch.as_tensor(pix).cpu(), dtype=float)[:nsp]


def _check_packed(y_pred: Any) -> None:
    """Refuse class probabilities or a one-hot map given where a packed ``cat([uncertainty, prediction])`` is expected.

    A packed ``y_pred`` has the uncertainty in channel 0. Class probabilities ``(C, *spatial)`` (what
    ``from_engine(["pred", "label"])`` returns, the habit of ``MeanDice`` and ``CalibrationHandler``) or the one-hot
    map of ``AsDiscrete(argmax=True, to_onehot=C)`` would be read with channel 0 as the uncertainty map and scored
    without any error (two classes: the background channel as the uncertainty and the foreground as the label map;
    found by hostile testing of the metric classes, which the handlers guarded and the classes did not): they are
    recognised by their channels summing to 1 at every voxel while channels ``1..C-1`` alone do not (a packed map with
    zero uncertainty passes).

    Args:
        y_pred: a batch ``(B, K, *spatial)`` or a list of decollated cases ``(K, *spatial)``.

    Raises:
        ValueError: ``y_pred`` holds class probabilities or a one-hot map.
    """
    items, ch = (list(y_pred), 0) if isinstance(y_pred, (list, tuple)) else ([y_pred], 1)
    for item in items:
        t = to_tensor(item, "y_pred").detach()
        if t.is_complex() or t.ndim <= ch + 1 or t.shape[ch] < 2 or t.numel() == 0:
            continue
        tol = probability_tolerance(t.dtype) if t.is_floating_point() else 0.0
        in_unit = bool(((t >= -tol) & (t <= 1 + tol)).all())
        sums_to_one = in_unit and bool(((t.sum(ch, dtype=torch.float64) - 1).abs() <= tol).all())
        rest = t.narrow(ch, 1, t.shape[ch] - 1)
        rest_sums_to_one = sums_to_one and bool(((rest.sum(ch, dtype=torch.float64) - 1).abs() <= tol).all())
        if in_unit and sums_to_one and not rest_sums_to_one:
            raise ValueError(
                f"y_pred of shape {tuple(t.shape)} holds class probabilities or a one-hot map (its channels sum to 1), "
                "not a packed cat([uncertainty, prediction]): channel 0 would be read as the uncertainty map. Pass "
                "the map as uncertainty=... (a handler: let output_transform return (uncertainty, pred, label), e.g. "
                "from_engine(['predictive_entropy', 'pred', 'label']), or leave it out and set uncertainty_key)"
            )


class _SpatialUncertaintyMetric(CumulativeIterationMetric):
    """Shared adapter: ``y_pred = cat([uncertainty, pred], dim=1)``, ``y`` = reference labels.

    Call as ``metric(y_pred=pred, y=label, uncertainty=unc)`` (batch tensors or decollated lists) or with an
    already packed ``y_pred`` (channel 0 the uncertainty, the rest the prediction: one label channel, or C
    probability / one-hot channels reduced by argmax). ``y`` is a label map ``(B, 1, *spatial)`` or one-hot.
    Per-case values (float64, NaN for degenerate cases) are buffered as ``(B, 1)``; MONAI gathers the buffers
    across ranks in ``get_buffer`` and ``aggregate`` reduces them ignoring NaN as MONAI's ``do_metric_reduction``
    does, in float64 (MONAI's own reduction averages in float32).

    Spacing: the ``spacing`` call argument, else the constructor's, else the affine of a MetaTensor ``y`` /
    ``y_pred`` (``pixdim``; the first whose affine is not MONAI's default identity of a MetaTensor built without
    geometry), else 1 mm. A spacing of one row per case gives row ``i`` to case ``i``: of the batch, or
    item ``i`` of a decollated list.
    """

    def __init__(
        self,
        spacing: SpacingLike | None = None,
        reduction: MetricReduction | str = MetricReduction.MEAN,
        get_not_nans: bool = False,
    ) -> None:
        super().__init__()
        check_spacing_option(spacing)  # here, not at the first case (after a batch of inference)
        self.spacing = spacing
        self.reduction = check_metric_reduction(reduction)  # here, not at aggregate() after an epoch
        self.get_not_nans = check_bool(get_not_nans, "get_not_nans")

    def _evaluate(self, u: torch.Tensor, pred: torch.Tensor, y: torch.Tensor, spacing: Any) -> torch.Tensor:
        raise NotImplementedError

    def __call__(self, y_pred: Any, y: Any = None, uncertainty: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
        """Add a batch: one value per case.

        Args:
            y_pred: the prediction ``(B, 1, *spatial)`` (or C probability / one-hot channels), or the packed
                ``cat([uncertainty, pred], dim=1)`` without ``uncertainty``; or a decollated list.
            y: the reference labels ``(B, 1, *spatial)`` or one-hot (or a list).
            uncertainty: the maps ``(B, 1, *spatial)`` (or a list).
            **kwargs: ``spacing`` only (see the class); another keyword raises ``TypeError``.

        Returns:
            The per-case values ``(B, 1)`` of the batch.

        Warns:
            UserWarning: each distinct warning of an undefined case (e.g. no boundary) once for the call, and an
                uncertainty off the ``[0, 1]`` scale once naming the call's most extreme value, at the caller's line.
                In earlier versions they came once per case (or item), at a line of this package. Made an error by
                a warnings filter, the call raises before the batch enters the buffer.
        """
        check_call_keywords(self, kwargs, allowed=("spacing",))  # a mistyped keyword was ignored without a word
        if uncertainty is not None:
            y_pred = _pack(uncertainty, y_pred)
        else:
            _check_packed(y_pred)
        return counted_call(self, y_pred, y, **kwargs)

    def _compute_list(self, y_pred: Any, y: Any = None, **kwargs: Any) -> torch.Tensor:  # type: ignore[override]
        """MONAI's evaluation of a decollated list, item by item, each item with its own row of a per-case spacing.

        MONAI passes the call's arguments to every item as they are: a spacing of one row per case (``(N, ndim)``)
        then met one case and was refused. Here item ``i`` gets row ``i``; lists of different lengths are refused
        (MONAI's ``zip`` dropped the extra items without a word), and so is an empty list (it escaped as
        ``torch.cat``'s error).

        Raises:
            ValueError: ``y_pred`` empty, ``y_pred`` and ``y`` of different lengths, or a spacing whose rows are not
                one per item.
        """
        check_same_cases(y_pred, y)
        if y is None:
            return super()._compute_list(y_pred, y, **kwargs)
        spacing = kwargs.get("spacing")
        spacing = self.spacing if spacing is None else spacing
        try:
            rows = np.ndim(spacing) == 2
        except ValueError:  # ragged: refused by the first case's check
            rows = False
        if rows and len(spacing) != len(y_pred):
            raise ValueError(f"spacing has {len(spacing)} rows but the decollated list has {len(y_pred)} items")
        per_item = [dict(kwargs, spacing=row) for row in spacing] if rows else [kwargs] * len(y_pred)
        return torch.cat([
            self._compute_tensor(p.detach().unsqueeze(0), t.detach().unsqueeze(0), **kw)
            for p, t, kw in zip(y_pred, y, per_item)
        ])

    def _compute_tensor(self, y_pred: torch.Tensor, y: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:  # type: ignore[override]
        if y is None:
            raise ValueError(f"{type(self).__name__} needs the reference labels y")
        if y_pred.ndim < 4 or y_pred.shape[1] < 2:
            raise ValueError(
                "y_pred must be (B, 1 + C, *spatial): the uncertainty in channel 0 and the prediction after it "
                f"(or pass uncertainty=...), got shape {tuple(y_pred.shape)}"
            )
        check_case_grid(y_pred, y)
        spacing = kwargs.get("spacing")
        if spacing is None:
            spacing = self.spacing if self.spacing is not None else _spacing_from_meta(y, y_pred)
        plain = y_pred.as_tensor() if hasattr(y_pred, "as_tensor") else y_pred
        target = y.as_tensor() if hasattr(y, "as_tensor") else y
        values = self._evaluate(plain[:, :1], plain[:, 1:], target, spacing)
        return torch.as_tensor(values, dtype=torch.float64, device=plain.device).reshape(-1, 1)

    def _sync(self) -> None:
        """Gather the per-case buffers across ranks, a rank without cases included (:func:`sync_case_buffers`)."""
        sync_case_buffers(self)

    def aggregate(self, reduction: MetricReduction | str | None = None) -> Any:
        """Reduce the buffered per-case values (``(N, 1)``), ignoring NaN; ``"none"`` returns them all.

        When no case is valid (every value NaN, e.g. no boundary in any case) the result is NaN with a
        ``UserWarning``, not MONAI's 0 (which reads as a perfect BA-ECE / SPACE); ``not_nans`` is then 0. No case at
        all (before any update, e.g. after an empty epoch) is NaN with a ``UserWarning`` as well (``"none"``: the
        empty table ``(0, 1)``).

        ``reduction`` (default the constructor's) is checked as the constructor checks it: ``"foo"`` or ``3`` escaped
        as MONAI's error without the argument's name, and ``""`` fell back to the constructor's reduction without a
        word (found by hostile testing).
        """
        reduction = self.reduction if reduction is None else check_metric_reduction(reduction)
        data = self.get_buffer()
        if data is not None and not isinstance(data, torch.Tensor):
            raise ValueError(f"the data to aggregate must be a PyTorch Tensor, got {type(data).__name__}")
        with main_rank_warnings():  # the same gathered values on every rank: rank 0 warns
            f, not_nans = reduce_case_values(data, reduction, type(self).__name__)
        return (f, not_nans) if self.get_not_nans else f


class BoundaryUncertaintyConcentrationMetric(_SpatialUncertaintyMetric):
    """MONAI metric for :func:`boundary_uncertainty_concentration` (BUC, Zeevi et al. Sec. 3.1; higher is better).

    Call as ``metric(y_pred=pred, y=label, uncertainty=unc)`` with batch tensors ``(B, 1, *spatial)`` (or
    decollated lists), or with an already packed ``y_pred`` (channel 0 the uncertainty, the rest the prediction).
    Per-case values ``(B, 1)`` float64 are buffered; :meth:`aggregate` reduces them ignoring NaN. Spacing: the
    ``spacing`` call argument, else the constructor's, else the affine of a MetaTensor ``y`` / ``y_pred``
    (``pixdim``; a label without geometry, MONAI's default identity affine, gives way to the maps'), else 1 mm.

    Args:
        spacing: voxel size in mm per axis (see above for the default).
        width: band width in mm (default from HD95, see :func:`boundary_uncertainty_concentration`).
        backend: distance-transform backend.
        reduction: as in MONAI's metrics; NaN cases are ignored.
        get_not_nans: also return the number of non-NaN cases from :meth:`aggregate`.

    Example:
        >>> from monai_unc.metrics import BoundaryUncertaintyConcentrationMetric
        >>> import torch
        >>> from monai_unc.metrics import label_boundary
        >>> target = torch.zeros(2, 1, 8, 8, dtype=torch.long)
        >>> target[:, :, 2:6, 2:6] = 1
        >>> pred = target.clone()
        >>> pred[1, :, 2:6, 6] = 1  # case 1: a wrong column
        >>> _ = torch.manual_seed(0)
        >>> uncertainty = 0.5 * label_boundary(pred, spatial_dims=2).float() + 0.1 * torch.rand(2, 1, 8, 8)
        >>> metric = BoundaryUncertaintyConcentrationMetric(spacing=(1.0, 1.0), width=1.0)
        >>> metric(y_pred=pred, y=target, uncertainty=uncertainty)
        tensor([[0.8700],
                [0.8728]], dtype=torch.float64)
        >>> round(float(metric.aggregate()), 4)
        0.8714
    """

    def __init__(
        self,
        spacing: SpacingLike | None = None,
        width: float | None = None,
        backend: str = "auto",
        reduction: MetricReduction | str = MetricReduction.MEAN,
        get_not_nans: bool = False,
    ) -> None:
        super().__init__(spacing=spacing, reduction=reduction, get_not_nans=get_not_nans)
        check_width(width)  # here, not at the first case (after a batch of inference)
        check_backend_name(backend)
        self.width = width
        self.backend = backend

    def _evaluate(self, u: torch.Tensor, pred: torch.Tensor, y: torch.Tensor, spacing: Any) -> torch.Tensor:
        return boundary_uncertainty_concentration(u, pred, y, spacing=spacing, width=self.width, backend=self.backend)


class BoundaryAwareECEMetric(_SpatialUncertaintyMetric):
    """MONAI metric for :func:`boundary_aware_ece` (BA-ECE, Zeevi et al. Sec. 3.2; lower is better).

    Call as ``metric(y_pred=pred, y=label, uncertainty=unc)`` with batch tensors ``(B, 1, *spatial)`` (or
    decollated lists), or with an already packed ``y_pred`` (channel 0 the uncertainty, the rest the prediction).
    Per-case values ``(B, 1)`` float64 are buffered; :meth:`aggregate` reduces them ignoring NaN. Spacing: the
    ``spacing`` call argument, else the constructor's, else the affine of a MetaTensor ``y`` / ``y_pred``
    (``pixdim``; a label without geometry, MONAI's default identity affine, gives way to the maps'), else 1 mm.

    Args:
        spacing: voxel size in mm per axis (see above for the default).
        n_bands: number of distance bands.
        max_distance: upper end of the bands in mm (default the largest distance in the case).
        normalize: min-max rescale each case's uncertainty to [0, 1] first.
        backend: distance-transform backend.
        reduction: as in MONAI's metrics; NaN cases are ignored.
        get_not_nans: also return the number of non-NaN cases from :meth:`aggregate`.

    Example:
        >>> from monai_unc.metrics import BoundaryAwareECEMetric
        >>> import torch
        >>> from monai_unc.metrics import label_boundary
        >>> target = torch.zeros(2, 1, 8, 8, dtype=torch.long)
        >>> target[:, :, 2:6, 2:6] = 1
        >>> pred = target.clone()
        >>> pred[1, :, 2:6, 6] = 1  # case 1: a wrong column
        >>> _ = torch.manual_seed(0)
        >>> uncertainty = 0.5 * label_boundary(pred, spatial_dims=2).float() + 0.1 * torch.rand(2, 1, 8, 8)
        >>> metric = BoundaryAwareECEMetric(n_bands=3)
        >>> metric(y_pred=pred, y=target, uncertainty=uncertainty)
        tensor([[0.3841],
                [0.2827]], dtype=torch.float64)
        >>> round(float(metric.aggregate()), 4)
        0.3334
    """

    def __init__(
        self,
        spacing: SpacingLike | None = None,
        n_bands: int = 10,
        max_distance: float | None = None,
        normalize: bool = False,
        backend: str = "auto",
        reduction: MetricReduction | str = MetricReduction.MEAN,
        get_not_nans: bool = False,
    ) -> None:
        super().__init__(spacing=spacing, reduction=reduction, get_not_nans=get_not_nans)
        check_bands(n_bands, max_distance)  # here, not at the first case (after a batch of inference)
        check_backend_name(backend)
        self.n_bands = n_bands
        self.max_distance = max_distance
        self.normalize = check_bool(normalize, "normalize")
        self.backend = backend

    def _evaluate(self, u: torch.Tensor, pred: torch.Tensor, y: torch.Tensor, spacing: Any) -> torch.Tensor:
        return boundary_aware_ece(
            u,
            pred,
            y,
            spacing=spacing,
            n_bands=self.n_bands,
            max_distance=self.max_distance,
            normalize=self.normalize,
            backend=self.backend,
        )


class SpatialCalibrationErrorMetric(_SpatialUncertaintyMetric):
    """MONAI metric for :func:`spatial_calibration_error` (SPACE, Zeevi et al. Sec. 3.3; lower is better).

    Call as ``metric(y_pred=pred, y=label, uncertainty=unc)`` with batch tensors ``(B, 1, *spatial)`` (or
    decollated lists), or with an already packed ``y_pred`` (channel 0 the uncertainty, the rest the prediction).
    Per-case values ``(B, 1)`` float64 are buffered; :meth:`aggregate` reduces them ignoring NaN. Spacing: the
    ``spacing`` call argument, else the constructor's, else the affine of a MetaTensor ``y`` / ``y_pred``
    (``pixdim``; a label without geometry, MONAI's default identity affine, gives way to the maps'), else 1 mm.

    Args:
        spacing: voxel size in mm per axis (see above for the default).
        sigma: standard deviation of the Gaussian in mm, scalar or per axis.
        truncate: kernel radius in standard deviations.
        reduction: as in MONAI's metrics; NaN cases are ignored.
        get_not_nans: also return the number of non-NaN cases from :meth:`aggregate`.

    Example:
        >>> from monai_unc.metrics import SpatialCalibrationErrorMetric
        >>> import torch
        >>> from monai_unc.metrics import label_boundary
        >>> target = torch.zeros(2, 1, 8, 8, dtype=torch.long)
        >>> target[:, :, 2:6, 2:6] = 1
        >>> pred = target.clone()
        >>> pred[1, :, 2:6, 6] = 1  # case 1: a wrong column
        >>> _ = torch.manual_seed(0)
        >>> uncertainty = 0.5 * label_boundary(pred, spatial_dims=2).float() + 0.1 * torch.rand(2, 1, 8, 8)
        >>> metric = SpatialCalibrationErrorMetric(sigma=1.0)
        >>> metric(y_pred=pred, y=target, uncertainty=uncertainty)
        tensor([[0.2658],
                [0.2365]], dtype=torch.float64)
        >>> round(float(metric.aggregate()), 4)
        0.2511
    """

    def __init__(
        self,
        spacing: SpacingLike | None = None,
        sigma: float | Sequence[float] = 2.0,
        truncate: float = 4.0,
        reduction: MetricReduction | str = MetricReduction.MEAN,
        get_not_nans: bool = False,
    ) -> None:
        super().__init__(spacing=spacing, reduction=reduction, get_not_nans=get_not_nans)
        check_sigma_values(sigma)  # here, not at the first case (after a batch of inference)
        check_truncate(truncate)
        self.sigma = sigma
        self.truncate = truncate

    def _evaluate(self, u: torch.Tensor, pred: torch.Tensor, y: torch.Tensor, spacing: Any) -> torch.Tensor:
        return spatial_calibration_error(u, pred, y, spacing=spacing, sigma=self.sigma, truncate=self.truncate)
