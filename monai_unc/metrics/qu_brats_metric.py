"""The MONAI metric class of QU-BraTS (:mod:`.qu_brats`): the score per region and case, buffered across ranks.

The formula is :func:`~monai_unc.metrics.qu_brats` (Mehta et al., MELBA 2022); this module is its thin MONAI adapter,
apart so that the functional core imports without MONAI.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from monai.metrics import CumulativeIterationMetric
from monai.utils import MetricReduction

from .._utils import (
    check_bool,
    check_call_keywords,
    check_finite,
    check_metric_reduction,
    exceeds,
    main_rank_warnings,
    reduce_case_values,
    sync_case_buffers,
    to_tensor,
)
from ..regions import RegionSpec, label_to_regions, parse_regions
from .cumulative import counted_call
from .qu_brats_score import (
    QU_BRATS_COMPONENTS,
    binary_mask_of,
    check_claimed_labels,
    check_grid,
    check_grid_args,
    check_scale,
    checked_uncertainty,
    real_brain_mask,
    say_ungraded,
    score_region,
    to_qu_brats_range,
)

__all__ = ["QUBraTSMetric"]


class QUBraTSMetric(CumulativeIterationMetric):
    """MONAI metric for :func:`qu_brats` per region and case (QU-BraTS, Mehta et al., MELBA 2022).

    Call as ``metric(y_pred=pred, y=label, uncertainty=u, brain_mask=mask)`` with batch tensors
    ``(B, R, *spatial)`` (or decollated lists of ``(R, *spatial)``, whose cases may differ in shape, e.g. after
    ``Invertd``): ``y_pred`` the binary region masks (or
    probabilities, binarised with ``> threshold``: at the default 0.5 the one foreground decision of region
    probabilities, :func:`~monai_unc.activation.foreground_masks`, as nnU-Net and ``monai-unc evaluate`` take it;
    MONAI's ``AsDiscrete(threshold=0.5)`` writes ``>= 0.5``, and differs only at exactly 0.5), ``y`` the binary
    reference regions, ``uncertainty`` ``R`` maps in ``[0, max_uncertainty]`` (or in ``[0, uncertainty_max]`` when
    that is given, rescaled with :func:`to_qu_brats_range`), ``brain_mask`` ``(B, 1, *spatial)`` (values > 0, e.g.
    the T1 image; optional). With ``regions``, one-channel ``y_pred`` / ``y`` are label maps converted with
    :func:`~monai_unc.regions.label_to_regions` (so leave ``regions`` out for one-region masks). Each case
    buffers ``(1, R)`` values of ``component`` (``"score"``, ``"dice_auc"``, ``"ftp_auc"`` or ``"ftn_auc"``);
    ``aggregate`` reduces them as MONAI's ``do_metric_reduction`` does, in float64 (default ``"mean"``: the mean
    over cases and regions, the challenge's ranking score; ``"mean_batch"``: per region). Without any case
    ``aggregate`` returns NaN with a ``UserWarning``.

    Args:
        num_points: number of thresholds (40 in the challenge).
        max_uncertainty: top of the challenge's scale (100).
        uncertainty_max: the largest value of the given maps, when they are not on the challenge's scale (e.g.
            ``measure_max("predictive_entropy", multilabel=True)``).
        regions: region spec for label-map inputs (see :func:`~monai_unc.regions.parse_regions`).
        threshold: binarisation threshold of probabilities in ``y_pred`` (``p > threshold`` on the exact values: a
            float32 0.30000001 is above 0.3; a voxel at exactly ``threshold`` is background).
        component: the buffered value.
        reduction: as in MONAI's metrics.
        get_not_nans: also return the number of non-NaN values from :meth:`aggregate`.
        grid: the threshold grid, as in :func:`qu_brats`: ``"numpy2"`` (default) or ``"numpy1"`` (the 2020
            challenge's grid, to compare with its published scores).
        ignore_unclaimed_labels: with ``regions``, count non-zero labels of label-map inputs that no region holds as
            background; by default they are refused (``ValueError`` naming the label and the case, as
            :func:`~monai_unc.metrics.qu_brats_regions` does: BraTS 2023 labels with ``"brats"`` lost the enhancing
            tumour from every region).

    Example:
        >>> import torch
        >>> from monai_unc.metrics import QUBraTSMetric
        >>> label = torch.zeros(1, 1, 6, 6, 6, dtype=torch.long)
        >>> label[..., 1:5, 1:5, 1:5] = 2
        >>> label[..., 2:4, 2:4, 2:4] = 4
        >>> metric = QUBraTSMetric(regions="brats", reduction="mean_batch")
        >>> metric(y_pred=label, y=label, uncertainty=torch.zeros(1, 3, 6, 6, 6)).shape
        torch.Size([1, 3])
        >>> metric.aggregate().round(decimals=4)  # TC, WT, ET
        tensor([0.9917, 0.9917, 0.9917], dtype=torch.float64)
        >>> metric1 = QUBraTSMetric(regions="brats", reduction="mean_batch", grid="numpy1")  # the 2020 grid
        >>> _ = metric1(y_pred=label, y=label, uncertainty=torch.zeros(1, 3, 6, 6, 6))
        >>> metric1.aggregate()
        tensor([1., 1., 1.], dtype=torch.float64)
    """

    def __init__(
        self,
        num_points: int = 40,
        max_uncertainty: float = 100.0,
        uncertainty_max: float | None = None,
        regions: RegionSpec | str | None = None,
        threshold: float = 0.5,
        component: str = "score",
        reduction: MetricReduction | str = MetricReduction.MEAN,
        get_not_nans: bool = False,
        grid: str = "numpy2",
        ignore_unclaimed_labels: bool = False,
    ) -> None:
        super().__init__()
        self.num_points, self.max_uncertainty = check_grid_args(num_points, max_uncertainty)
        self.grid = check_grid(grid)
        if uncertainty_max is not None:
            uncertainty_max = check_scale(uncertainty_max, "uncertainty_max")
        if component not in QU_BRATS_COMPONENTS:
            raise ValueError(f"component must be one of {QU_BRATS_COMPONENTS}, got {component!r}")
        self.uncertainty_max = uncertainty_max
        self.regions = None if regions is None else parse_regions(regions)
        self.ignore_unclaimed_labels = check_bool(ignore_unclaimed_labels, "ignore_unclaimed_labels")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)) \
                or not 0.0 < float(threshold) < 1.0:  # NaN fails the comparison
            raise ValueError(f"threshold must be a probability in (0, 1) to binarise y_pred, got {threshold!r}")
        self.threshold = float(threshold)
        self.component = component
        self.reduction = check_metric_reduction(reduction)  # here, not at aggregate() after an epoch
        self.get_not_nans = check_bool(get_not_nans, "get_not_nans")

    def _masks(self, x: torch.Tensor, name: str, probabilities: bool = True, first: int = 0) -> torch.Tensor:
        """Batch ``(B, R, *spatial)`` of bool region masks from masks, probabilities or label maps.

        Probabilities in [0, 1] are binarised with ``threshold`` only when ``probabilities`` (``y_pred``); a soft
        ``y`` is refused as :func:`qu_brats` refuses a soft ``target``. Label maps need ``regions``; a label that no
        region holds is refused, naming the case by its index ``first + i`` in the call.
        """
        if self.regions is not None and x.shape[1] == 1:
            masks = label_to_regions(x, self.regions, channel_dim=1)
            check_claimed_labels(x, masks.any(dim=1, keepdim=True), self.regions,
                                 [f"{name}[{first + i}]" for i in range(x.shape[0])], self.ignore_unclaimed_labels)
            return masks
        if x.dtype == torch.bool:
            return x
        if probabilities and x.is_floating_point():
            check_finite(x, name)
            if not bool(((x == 0) | (x == 1)).all()):
                if bool(((x < 0) | (x > 1)).any()):
                    raise ValueError(f"{name} must hold binary masks or probabilities in [0, 1]")
                # p > threshold, as foreground_masks, nnU-Net and evaluate (review 67: p >= 0.5 made a voxel at
                # exactly 0.5 foreground here and background in evaluate's QU-BraTS of the same probabilities)
                return exceeds(x, self.threshold, inclusive=False)
        return binary_mask_of(x, name)

    def __call__(  # type: ignore[override]
        self, y_pred: Any, y: Any = None, uncertainty: Any = None, brain_mask: Any = None, **kwargs: Any
    ) -> Any:
        """Add a batch: one ``(1, R)`` row of ``component`` per case.

        Args:
            y_pred: binary region masks or probabilities ``(B, R, *spatial)`` (label maps ``(B, 1, *spatial)`` with
                ``regions``).
            y: the reference, in the form of ``y_pred``.
            uncertainty: ``(B, R, *spatial)`` maps.
            brain_mask: optional ``(B, 1, *spatial)``; values > 0 are brain.
            **kwargs: none is read: a keyword (e.g. a mistyped ``brainmask``) raises ``TypeError``.

        Returns:
            The per-case values ``(B, R)`` of the batch.

        Warns:
            UserWarning: once for the call, naming the regions (or channels) of the maps that are positive somewhere
                but nowhere above the smallest positive threshold (:func:`qu_brats`' warning; not with
                ``uncertainty_max``, whose maps the metric rescales itself). In earlier versions it came once per
                case and region, at a line of MONAI's ``CumulativeIterationMetric``. Made an error by a warnings
                filter, the call raises before the batch enters the buffer.
        """
        check_call_keywords(self, kwargs)  # a mistyped brainmask= scored the whole volume without a word
        if uncertainty is None:
            raise ValueError("QUBraTSMetric needs uncertainty=... (R maps per case)")
        if isinstance(y_pred, (list, tuple)):
            n = len(y_pred)
            if n == 0:
                raise ValueError("y_pred is an empty list: give at least one case")
            for arg, what in ((y, "y"), (uncertainty, "uncertainty")):
                if not isinstance(arg, (list, tuple)) or len(arg) != n:
                    raise ValueError(f"{what} must be a list of {n} items like y_pred (decollated)")
            if brain_mask is not None and (not isinstance(brain_mask, (list, tuple)) or len(brain_mask) != n):
                raise ValueError(f"brain_mask must be a list of {n} items like y_pred (decollated)")

            def case(item: Any, name: str) -> torch.Tensor:
                return _plain(to_tensor(item, name))[None]

            # one case at a time: decollated cases may differ in shape (each inverted to its own original grid)
            packed: Any = [
                self._pack(case(y_pred[i], "y_pred"), case(y[i], "y"), case(uncertainty[i], "uncertainty"),
                           None if brain_mask is None else case(brain_mask[i], "brain_mask"), first=i)[0]
                for i in range(n)
            ]
        else:
            packed = self._pack(y_pred, y, uncertainty, brain_mask)
        # the ungraded maps' warnings held and said once for the call, naming the regions, at the user's line, not
        # MONAI's (found by review 70: one warning per case and region, at a line of MONAI's CumulativeIterationMetric)
        return counted_call(self, packed, None, **kwargs)

    def _pack(self, y_pred: Any, y: Any, uncertainty: Any, brain_mask: Any, first: int = 0) -> torch.Tensor:
        p = _plain(to_tensor(y_pred, "y_pred"))
        t = _plain(to_tensor(y, "y")) if y is not None else None
        if t is None:
            raise ValueError("QUBraTSMetric needs the reference regions y")
        u = _plain(to_tensor(uncertainty, "uncertainty"))
        if p.ndim < 3:
            raise ValueError(f"y_pred must be (B, R, *spatial), got shape {tuple(p.shape)}")
        if p.numel() == 0:
            raise ValueError(f"y_pred is empty (shape {tuple(p.shape)}): give at least one case with voxels")
        # the checks of qu_brats: uncertainty non-empty, finite, in range; the reference binary
        if self.uncertainty_max is None:  # else to_qu_brats_range checks the range below
            u = checked_uncertainty(u, self.max_uncertainty)
        pm = self._masks(p, "y_pred", first=first)
        tm = self._masks(t.to(p.device), "y", probabilities=False, first=first)
        if not (pm.shape == tm.shape == u.shape):
            raise ValueError(
                f"y_pred, y and uncertainty must have the same shape (B, R, *spatial) after region conversion, got "
                f"{tuple(pm.shape)}, {tuple(tm.shape)} and {tuple(u.shape)}"
            )
        if self.uncertainty_max is not None:
            u = to_qu_brats_range(u, self.uncertainty_max, self.max_uncertainty)
        # on the uncertainty's device, as qu_brats computes (found by the review of the GPU paths: probabilities on
        # the GPU beside a CPU map raised torch.cat's "Expected all tensors to be on the same device")
        parts = [u.to(torch.float64), pm.to(u.device, torch.float64), tm.to(u.device, torch.float64)]
        if brain_mask is not None:
            bm = _plain(real_brain_mask(brain_mask)).to(u.device)
            if bm.is_floating_point():  # as qu_brats: NaN left the brain (and the FTP / FTN counts) without a word
                check_finite(bm, "brain_mask")
            if bm.ndim == u.ndim - 1:
                bm = bm.unsqueeze(1)
            if bm.shape[0] != u.shape[0] or tuple(bm.shape[2:]) != tuple(u.shape[2:]):
                raise ValueError(f"brain_mask must be (B, 1, *spatial) like uncertainty, got {tuple(bm.shape)}")
            parts.append((bm > 0).any(dim=1, keepdim=True).to(torch.float64))
        return torch.cat(parts, dim=1)

    def _compute_tensor(self, y_pred: torch.Tensor, y: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:  # type: ignore[override]
        n = y_pred.shape[1]
        r = n // 3
        has_mask = n % 3 == 1
        out = torch.empty(y_pred.shape[0], r, dtype=torch.float64)
        # rescaled here from the declared scale: a map nowhere above the first threshold is confident, not a slip
        warn = self.uncertainty_max is None
        names = list(self.regions) if self.regions is not None and len(self.regions) == r else None
        for i in range(y_pred.shape[0]):
            mask = y_pred[i, 3 * r] if has_mask else None
            for j in range(r):
                res, ungraded = score_region(y_pred[i, j], y_pred[i, r + j] > 0.5, y_pred[i, 2 * r + j] > 0.5, mask,
                                             self.num_points, self.max_uncertainty, self.grid)
                out[i, j] = getattr(res, self.component)
                if warn and ungraded:  # held by __call__ and said once for the call
                    say_ungraded(res.thresholds, self.max_uncertainty, j, None if names is None else names[j])
        return out.to(y_pred.device)

    def _sync(self) -> None:
        """Gather the per-case buffers across ranks, a rank without cases included (:func:`sync_case_buffers`)."""
        sync_case_buffers(self)

    def aggregate(self, reduction: MetricReduction | str | None = None) -> Any:
        """Reduce the buffered ``(N, R)`` values (NaN ignored); ``"none"`` returns them all.

        Args:
            reduction: as in MONAI's metrics; default the constructor's.

        Returns:
            The reduced values (and the number of non-NaN values with ``get_not_nans``). No case: NaN with a
            ``UserWarning`` (with ``"none"`` the empty table ``(0, 1)``, as the other metric classes give).

        Raises:
            ValueError: naming ``reduction`` when it is not one of MONAI's reductions (``"foo"`` escaped as MONAI's
                error without the argument's name and ``""`` fell back to the constructor's; found by hostile
                testing).
        """
        reduction = self.reduction if reduction is None else check_metric_reduction(reduction)
        data = self.get_buffer()
        if data is not None and not isinstance(data, torch.Tensor):
            raise ValueError(f"the data to aggregate must be a torch.Tensor, got {type(data)}")
        with main_rank_warnings():  # the same gathered values on every rank: rank 0 warns
            f, not_nans = reduce_case_values(data, reduction, "QUBraTSMetric")
        return (f, not_nans) if self.get_not_nans else f


def _plain(t: torch.Tensor) -> torch.Tensor:
    return t.as_tensor() if hasattr(t, "as_tensor") else t
