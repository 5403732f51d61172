"""One case of a region-based (multi-label sigmoid) prediction: every metric per region, each region a binary task.

This applies with ``EvaluationConfig.regions`` set, e.g. ``monai-unc evaluate --regions brats``. The row is written by
:func:`monai_unc.evaluation.case.evaluate_case`, the same function as for classes (one binary task per region,
:mod:`monai_unc.activation`); :func:`evaluate_region_case` is that call, kept for its callers, and the region pieces
live in :mod:`.rows`.

Inputs (:func:`monai_unc.io.load_case` with ``multilabel=True``): the reference is a label map (e.g. BraTS labels 0,
1, 2, 4) whose region masks come from the spec (:func:`monai_unc.regions.label_to_regions`); the prediction is either
``R`` region masks (``<case>_seg`` of ``monai-unc infer --activation sigmoid``, ``R`` = number of regions of the spec,
any other count is an error) or a label map (nnU-Net converts its regions back to labels with
``regions_class_order``), converted with the same spec; probabilities ``(R, *spatial)`` are per-region foreground
probabilities and every uncertainty map has one channel per region. Label values in no region count as background
(with a warning: e.g. BraTS 2023 labels read with the ``brats`` spec).

Columns of ``metrics.csv`` (``<R>`` is the region's column suffix, :func:`~monai_unc.evaluation.config.region_suffix`,
e.g. ``WT``):

- ``dice_<R>``: Dice of the region masks (:func:`~monai_unc.evaluation.rows.class_dice` with two classes: 1 when the
  region is empty in both); ``dice``: the mean over the regions (what failure detection, referral, triage and risk
  control use);
- calibration per region, from one binary :class:`~monai_unc.metrics.calibration.ConfidenceHistogram` per region
  (probabilities ``(1 - p_r, p_r)`` against the region mask): ``ece_<R>`` (top label ``max(p_r, 1 - p_r)``),
  ``classwise_ece_<R>``, ``all_label_ece_<R>``, ``ace_<R>``, ``mce_<R>``, ``uce_<R>`` (binary entropy / log 2),
  ``nll_<R>`` (binary cross-entropy), ``brier_<R>`` (summed over the two labels: twice the binary Brier score); the
  cohort values pool each region's histograms over the cases (``summary.json``, ``regions.per_region.<name>``);
- for the primary measure: ``error_rate_<R>``, ``buc_<R>``, ``ba_ece_<R>``, ``space_<R>`` (the map of region ``r``
  against the error ``pred_r != target_r``; entropies divided by ``log 2``), ``error_auroc_<R>``, ``error_auprc_<R>``;
- case scores (:func:`~monai_unc.scores.case_scores`) of every measure ``m`` per region, ``<m>_<score>_<R>``
  (``fg_mean`` inside the predicted region), and the **combined case score** ``<m>_<score>``: the mean over the
  regions of ``<m>_<score>_<R>``, over the regions where it is defined (``fg_mean`` is undefined for a region absent
  from the prediction; NaN when it is undefined for every region). The combined columns carry the names of the
  class-based evaluation, so the triage score (default ``<measure>_fg_mean``), the ranking and risk control work
  unchanged;
- QU-BraTS of the primary measure (Mehta et al., "QU-BraTS: MICCAI BraTS 2020 Challenge on Quantifying Uncertainty
  in Brain Tumor Segmentation", MELBA 2022; :func:`monai_unc.metrics.qu_brats_regions`): the map is
  put on the challenge's ``[0, 100]`` scale by :func:`~monai_unc.metrics.to_qu_brats_range` with its largest value
  :func:`~monai_unc.metrics.measure_max` (``log 2`` for the binary entropies, 0.5 for ``one_minus_max_prob``, 0.25
  for ``variance``); the brain mask (voxels counted by FTP and FTN) is ``image > 0`` on any channel of the case's
  image when ``--images`` is given (the ``_0000`` file for nnU-Net channel files), else every voxel. The threshold
  grid is ``EvaluationConfig.qu_brats_grid`` (``--qu-brats-grid``): ``"numpy2"`` by default, ``"numpy1"`` for the
  2020 challenge's grid (to compare with its published scores).
- the user metrics of ``EvaluationConfig.case_metrics`` per region, ``<name>_<R>``.
  Columns ``qu_brats_score_<R>``, ``qu_brats_dice_auc_<R>``,
  ``qu_brats_ftp_auc_<R>``, ``qu_brats_ftn_auc_<R>`` and their means over the regions ``qu_brats_score`` (the
  challenge's ranking score), ``qu_brats_dice_auc``, ``qu_brats_ftp_auc``, ``qu_brats_ftn_auc``. The case's curves
  (filtered Dice, FTP, FTN at each threshold) are kept in the evaluation state for the report.
"""

from __future__ import annotations

from ..io import CaseFiles, LoadedCase
from .case import evaluate_case
from .config import EvaluationConfig
from .rows import QU_BRATS_COLUMNS, CaseResult, combined_score, predicted_regions, region_score_columns

__all__ = ["QU_BRATS_COLUMNS", "evaluate_region_case", "combined_score", "predicted_regions", "region_score_columns"]


def evaluate_region_case(files: CaseFiles | LoadedCase, config: EvaluationConfig) -> CaseResult:
    """Metrics of one case of a region-based prediction, per region (module docstring).

    This is :func:`evaluate_case` with ``config.regions`` set.

    Args:
        files: the case's files, or the case loaded with ``load_case(..., multilabel=True)`` (and ``load_image=True``
            for the QU-BraTS brain mask).
        config: the evaluation options, with ``regions``.

    Returns:
        The case's row, its per-region histograms, QU-BraTS curves and warnings.

    Raises:
        ValueError: ``config.regions`` is None.
    """
    if config.regions is None:
        raise ValueError("config.regions must name the region spec of a region evaluation")
    return evaluate_case(files, config)
