"""Ignite handler for the QU-BraTS uncertainty score (Mehta et al., "QU-BraTS: MICCAI BraTS 2020 Challenge on
Quantifying Uncertainty in Brain Tumor Segmentation", MELBA 2022).

Wraps :class:`~monai_unc.metrics.QUBraTSMetric` in MONAI's ``IgniteMetricHandler``; with ``save_details=True`` the
per-case, per-region values land in ``engine.state.metric_details[name]`` (``(N, R)``).

By default the handler reads from ``engine.state.output`` (a decollated list of dicts, or one dict of batch tensors):
``uncertainty_key`` (default ``"predictive_entropy"``: for a multi-label inferer one binary entropy map per region,
in nats, so pass ``uncertainty_max=math.log(2)`` to map it to ``[0, 100]``), ``pred_key`` (``"pred"``: region
masks or mean probabilities, binarised with ``> threshold``), ``label_key`` (``"label"``: region masks, or a label
map with ``regions``) and, if given, ``brain_mask_key`` (e.g. ``"image"``: voxels where any channel is > 0). A custom
``output_transform`` may return ``(uncertainty, pred, label)`` or ``(uncertainty, pred, label, brain_mask)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from monai.handlers.utils import from_engine
from monai.utils import MetricReduction

from .._utils import require_ignite
from ..keys import UncertaintyKeys
from ..metrics.qu_brats_metric import QUBraTSMetric
from ..regions import RegionSpec
from ._base import MetricHandler, check_output_grids, output_keys

__all__ = ["QUBraTS"]


class QUBraTS(MetricHandler):
    """Mean QU-BraTS score over cases and regions (higher is better); see :class:`~monai_unc.metrics.QUBraTSMetric`.

    Args:
        num_points: as in :class:`~monai_unc.metrics.QUBraTSMetric`.
        max_uncertainty: as in :class:`~monai_unc.metrics.QUBraTSMetric`.
        uncertainty_max: as in :class:`~monai_unc.metrics.QUBraTSMetric`.
        regions: as in :class:`~monai_unc.metrics.QUBraTSMetric`.
        threshold: as in :class:`~monai_unc.metrics.QUBraTSMetric`.
        component: as in :class:`~monai_unc.metrics.QUBraTSMetric`.
        reduction: as in :class:`~monai_unc.metrics.QUBraTSMetric`.
        uncertainty_key: key of the uncertainty map in ``engine.state.output`` (read by the default transform).
        pred_key: key of the prediction in ``engine.state.output``.
        label_key: key of the label in ``engine.state.output``.
        brain_mask_key: key of the brain mask in ``engine.state.output`` (``None``: every voxel counts for FTP /
            FTN).
        output_transform: returns ``(uncertainty, pred, label[, brain_mask])``.
        save_details: keep per-case values in ``engine.state.metric_details``.
        grid: as in :class:`~monai_unc.metrics.QUBraTSMetric`: ``"numpy2"`` (default) or ``"numpy1"`` (the 2020
            challenge's threshold grid, to compare with its published scores).
        ignore_unclaimed_labels: as in :class:`~monai_unc.metrics.QUBraTSMetric` (label maps with a label that no
            region holds are refused by default).
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
        uncertainty_key: str = UncertaintyKeys.PREDICTIVE_ENTROPY.value,
        pred_key: str = "pred",
        label_key: str = "label",
        brain_mask_key: str | None = None,
        output_transform: Callable | None = None,
        save_details: bool = True,
        grid: str = "numpy2",
        ignore_unclaimed_labels: bool = False,
    ) -> None:
        require_ignite(f"monai_unc.handlers.{type(self).__name__}")
        metric_fn = QUBraTSMetric(
            num_points=num_points, max_uncertainty=max_uncertainty, uncertainty_max=uncertainty_max, regions=regions,
            threshold=threshold, component=component, reduction=reduction, grid=grid,
            ignore_unclaimed_labels=ignore_unclaimed_labels,
        )  # fmt: skip
        if output_transform is None:
            keys = output_keys(uncertainty_key=uncertainty_key, pred_key=pred_key, label_key=label_key)
            if brain_mask_key is not None:
                keys += output_keys(brain_mask_key=brain_mask_key)
            output_transform = from_engine(keys)
        super().__init__(metric_fn=metric_fn, output_transform=output_transform, save_details=save_details)
        # ignite would split a decollated (y_pred, y) pair per sample and rejects longer tuples; the metric takes
        # whole batches and lists itself
        self._skip_unrolling = True

    def update(self, output: Sequence[Any]) -> None:
        """``output`` is ``(uncertainty, pred, label)`` or ``(uncertainty, pred, label, brain_mask)``."""
        if len(output) not in (3, 4):
            raise ValueError(
                f"output must be (uncertainty, pred, label) or (uncertainty, pred, label, brain_mask), got "
                f"{len(output)} items"
            )
        check_output_grids(output, ("uncertainty", "pred", "label", "brain_mask")[: len(output)], reference=2)
        uncertainty, y_pred, y = output[:3]
        brain_mask = output[3] if len(output) == 4 else None
        self.metric_fn(y_pred, y, uncertainty=uncertainty, brain_mask=brain_mask)
