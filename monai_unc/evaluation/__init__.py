"""Cohort evaluation: per-case metric rows and cohort summaries, the engine behind ``monai-unc evaluate``.

Every number is computed by the metric functions of :mod:`monai_unc.metrics` and :mod:`monai_unc.aggregation`;
this package only loads cases, calls them and keeps the results.

Per case (one row of ``metrics.csv``, :func:`evaluate_case`):

- ``dice`` (mean over the foreground classes) and ``dice_<class>``: :func:`monai_unc.metrics.overlap.dice` on the
  label maps with ``empty_score=1`` (a class absent from both maps scores 1, absent from one of them 0; equal to
  MONAI's ``compute_dice`` with ``ignore_empty=False``, and rounded to float32 as that is);
- calibration, when probabilities are given: ``ece``, ``classwise_ece``, ``all_label_ece``, ``ace``, ``mce``,
  ``uce``, ``nll``, ``brier`` (:func:`monai_unc.metrics.calibration.calibration_metrics` on the case's
  :class:`~monai_unc.metrics.calibration.ConfidenceHistogram`);
- for the primary uncertainty measure: ``buc``, ``ba_ece``, ``space`` (:mod:`monai_unc.metrics.spatial`, spacing
  from the affine, mm) and ``error_auroc``, ``error_auprc`` (:mod:`monai_unc.metrics.discrimination`). BA-ECE and
  SPACE compare uncertainty with error rates, so entropies and mutual information are divided by ``log C``
  first (:func:`unit_scale`); BUC and the AUROC/AUPRC do not depend on the scale;
- case scores for every measure ``m`` (:func:`~monai_unc.scores.case_scores`, the one definition shared
  with ``nnunet-predict`` and the report): ``m_mean`` (whole volume), ``m_fg_mean`` (inside the predicted
  foreground, ValUES Appendix F.1) and ``m_patch_mean`` (largest mean over ``patch_size``-voxel boxes, ValUES
  Sec. 4.3; called ``m_patch`` before, a name still accepted by the ``score`` option, which picks the triage
  column).

Cohort (``summary.json``, :func:`summarize`), from additive state (:class:`CohortState`):

- pooled calibration: the per-case histograms are kept side by side in one per-case
  :class:`~monai_unc.metrics.calibration.ConfidenceHistogram` and every ECE-family value of the cohort is computed
  once on their sum (counts and sums add), never as an average of per-case ECEs; the all-label reliability curve
  of the pooled histogram (the report adds the per-case spread from the same histogram). The histograms use
  ``16 * n_bins`` fine bins: every coarse bin is a union of fine bins and the binned sums are exact float64, so
  the values equal those of a finer grid for this ``n_bins`` while a case costs at most ``384 (C + 2) n_bins``
  bytes (its dense tables), and keeps only its non-empty bins (at most 32 bytes each) in the cohort state;
- failure detection with risk ``1 - Dice`` (:func:`~monai_unc.metrics.casewise.failure_detection`: AURC,
  E-AURC, AUGRC), the Dice referral curve and its normalised area (:mod:`monai_unc.metrics.selective`),
  the triage at a referral budget (expected Dice of the retained cases), and OoD AUROC
  (:func:`~monai_unc.metrics.casewise.ood_auroc`) when a shift label per case is given;
- with ``target_risk``: the referral threshold with a statistical guarantee
  (:func:`~monai_unc.metrics.selective.risk_controlled_threshold`, SGR for the failure risk ``dice <
  failure_dice``, Learn-then-Test for ``1 - dice``) fitted on the calibration cases, and which cases it accepts.

Cases whose score is undefined (e.g. ``fg_mean`` with an empty predicted foreground) are ranked as the most
uncertain: they are referred first. Sharding: :func:`evaluate_cases` takes any list of cases and returns a
:class:`CohortState`; states of disjoint shards :meth:`~CohortState.merge` into the state of the whole cohort.
:func:`run_evaluate` runs on one process or under ``torchrun`` (each rank evaluates a shard, rank 0 adds the
per-case results in case-id order, so the cohort numbers equal the single-process ones bit for bit), keeps a
per-case resume state under ``state/cases/`` and reports failing cases without stopping the others
(docs/distributed.md).

Region-based (multi-label sigmoid) predictions, ``EvaluationConfig(regions=...)`` (``monai-unc evaluate --regions``):
every metric per region, each region a binary task, with the columns ``<metric>_<region>``, QU-BraTS per region and
its mean, and a combined case score (the mean over the regions) for ranking, triage and risk control; see
:mod:`.region_case` and docs/regions.md.

Modules: :mod:`.config` (options, column groups, ``case_metrics``), :mod:`.case` (one case's row, for classes and
regions: one task per class set or region, :mod:`monai_unc.activation`), :mod:`.rows` (its pieces: the split into
tasks, Dice, region masks, combined region scores), :mod:`.region_case` (the region-evaluation entry point and its
column reference), :mod:`monai_unc.scores` (the case scores of a map), :mod:`.cohort` (additive state, summary,
files), :mod:`.resume` (per-case resume state), :mod:`.runner` (shards, ``torchrun``, the command), :mod:`.triage`
(the referral rule of ``--target-risk`` and ``monai-unc triage`` of new unlabelled cases).
"""

from ..scores import CASE_SCORES, PATCH_SIZE, case_score_columns, case_scores, resolve_score_column
from .case import CaseResult, class_dice, derived_maps, evaluate_case, primary_measure
from .cohort import (
    CohortState,
    calibration_risks,
    case_risk,
    config_from_summary,
    dice_as_recorded,
    dice_failed,
    failure_dice_text,
    fill_undefined_scores,
    load_evaluation,
    remove_cohort_files,
    resummarize,
    summarize,
    triage_order,
    write_evaluation,
)
from .config import (
    CALIBRATION_COLUMNS,
    IID_SHIFTS,
    MAX_BINS,
    RISKS,
    SPATIAL_COLUMNS,
    EvaluationConfig,
    check_risk_options,
    read_shifts,
    region_suffix,
    unit_scale,
)
from .conformal import CONFORMAL_RULE_FILE, ConformalRuleFile, fit_conformal_rules, run_conformal
from .products import command_output_markers, read_artifact, write_artifact
from .region_case import QU_BRATS_COLUMNS, combined_score, evaluate_region_case, region_score_columns
from .resume import (
    case_cache,
    case_config_fingerprint,
    case_fingerprint,
    check_inputs_unchanged,
    input_signatures,
    load_case_state,
    save_case_state,
)
from .rows import (
    DERIVED_MEASURES,
    check_class_count,
    check_measure_options,
    check_probability_cases,
    check_scored_cases,
    first_class_count,
    has_score_source,
    region_histograms_of,
)
from .runner import assemble_state, evaluate_cases, evaluate_files, evaluate_shard, run_evaluate
from .triage import (
    ReferralRule,
    certify_referral_rule,
    check_triage_summary,
    mismatch_fields,
    run_triage,
    write_triage_summary,
)

__all__ = [
    "CONFORMAL_RULE_FILE",
    "ConformalRuleFile",
    "fit_conformal_rules",
    "run_conformal",
    "read_artifact",
    "command_output_markers",
    "write_artifact",
    "CALIBRATION_COLUMNS",
    "SPATIAL_COLUMNS",
    "IID_SHIFTS",
    "RISKS",
    "MAX_BINS",
    "EvaluationConfig",
    "CaseResult",
    "CohortState",
    "unit_scale",
    "CASE_SCORES",
    "PATCH_SIZE",
    "case_scores",
    "case_score_columns",
    "resolve_score_column",
    "class_dice",
    "derived_maps",
    "evaluate_case",
    "evaluate_region_case",
    "region_score_columns",
    "region_histograms_of",
    "combined_score",
    "region_suffix",
    "primary_measure",
    "check_class_count",
    "check_measure_options",
    "check_probability_cases",
    "check_scored_cases",
    "has_score_source",
    "first_class_count",
    "DERIVED_MEASURES",
    "QU_BRATS_COLUMNS",
    "evaluate_cases",
    "evaluate_files",
    "evaluate_shard",
    "assemble_state",
    "case_fingerprint",
    "case_config_fingerprint",
    "case_cache",
    "save_case_state",
    "load_case_state",
    "input_signatures",
    "check_inputs_unchanged",
    "summarize",
    "resummarize",
    "config_from_summary",
    "dice_failed",
    "dice_as_recorded",
    "failure_dice_text",
    "calibration_risks",
    "case_risk",
    "triage_order",
    "fill_undefined_scores",
    "read_shifts",
    "check_risk_options",
    "write_evaluation",
    "load_evaluation",
    "remove_cohort_files",
    "run_evaluate",
    "ReferralRule",
    "certify_referral_rule",
    "run_triage",
    "check_triage_summary",
    "write_triage_summary",
    "mismatch_fields",
]
