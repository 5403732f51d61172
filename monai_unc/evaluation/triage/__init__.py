"""Deployment triage: certify a referral rule on labelled cases, then apply it to new unlabelled scans.

Two steps (docs/triage.md):

1. ``monai-unc evaluate ... --target-risk A --delta D`` fits the risk-controlled threshold
   (:func:`monai_unc.metrics.risk_control.risk_controlled_threshold`: SGR, Geifman & El-Yaniv, "Selective
   classification for deep neural networks"; Learn-then-Test, Angelopoulos et al., "Learn then Test: calibrating
   predictive algorithms to achieve risk control") on the calibration cases' triage score and writes it, with
   everything needed to apply it elsewhere, as ``referral_rule.json`` (:class:`ReferralRule`,
   :func:`certify_referral_rule`).
2. ``monai-unc triage`` (:func:`run_triage`) reads the predictions of new cases (``infer`` or ``nnunet-predict``
   outputs; no labels), computes the same case score as ``evaluate`` (:func:`case_score_columns`), the label-free
   quality estimate ``expected_dice`` when probabilities exist (:func:`monai_unc.metrics.quality.expected_dice`) and
   intensity statistics of the images when given (:func:`image_statistics` of every channel,
   :func:`read_image_channels`), and applies the rule (:meth:`ReferralRule.apply`): ``accept`` or ``review``, with
   the reason.

Region-based (multi-label sigmoid) models: ``evaluate --regions`` certifies a rule that records the region spec
(:attr:`ReferralRule.regions`, ``format_version`` 2); triage reads the predictions per region and scores them with
:func:`monai_unc.evaluation.region_case.region_score_columns`, the function ``evaluate --regions`` uses (the combined
case score is the mean over the regions of the per-region scores), and refuses predictions whose recorded regions
differ from the rule's (:func:`prediction_regions`, :func:`region_differences`).

The guarantee (with probability at least ``1 - delta`` over the calibration draw, the mean risk of the new cases
the threshold accepts is at most ``target_risk``; the range and image checks below refer some of those too, see
docs/triage.md for what that does to the bound) holds only for new cases exchangeable with the calibration cases:
the same model and prediction settings, the same kind of scans. Two cheap guards catch the most common ways to break it:

- **prediction fingerprint** (:func:`prediction_fingerprint`): how the predictions were made, read from the
  records ``infer`` writes (``infer.json``, ``<case>.json``) or ``nnunet-predict`` writes
  (``uncertainty_config.json``, ``uncertainty/<case>.json``): model / checkpoint / trainer identity, sampling
  method, number of samples, measures, sliding-window size and overlap, activation, temperature. Triage refuses
  predictions whose fingerprint differs from the rule's (:class:`FingerprintMismatch`) unless told otherwise;
- **out-of-range guard** in :meth:`ReferralRule.apply`: a case whose score lies outside the range of the
  calibration scores, or whose image statistics are far from the calibration images' (robust z-score
  ``|x - median| / (1.4826 MAD)`` above :data:`IMAGE_Z_MAX` for any statistic, :class:`ImageReference`), is marked
  ``review`` with the reason, never accepted.

:func:`run_triage` runs on one process or under ``torchrun`` (each rank triages a shard of the cases, rank 0 applies
the rule and writes the files), keeps a per-case state under ``<output>/state/cases/`` (an interrupted run resumes;
a rerun with another rule reuses the per-case work) and reports failing cases without stopping the others, like
:func:`monai_unc.evaluation.run_evaluate`. The HTML page is written by
:func:`monai_unc.report.triage.build_triage_page`.
"""

from __future__ import annotations

from ...io.provenance import (
    FingerprintMismatch,
    check_prediction_fingerprint,
    compare_fingerprints,
    list_prediction_cases,
    prediction_fingerprint,
    prediction_regions,
    recorded_temperature,
    region_differences,
)
from ...scores import case_score_columns
from .certify import certify_referral_rule, write_referral_rule
from .images import (
    IMAGE_CHANNEL_FILES,
    IMAGE_FEATURES,
    SCORE_AGGREGATIONS,
    image_statistics,
    parse_score_column,
    read_image_channels,
)
from .rule import (
    IMAGE_Z_MAX,
    RULE_FILE,
    RULE_FORMAT,
    RULE_VERSION,
    Decision,
    ImageReference,
    ReferralRule,
    check_triage_summary,
    write_triage_summary,
)
from .runner import (
    TRIAGE_FILES,
    TRIAGE_WRITES,
    TriageResult,
    find_prediction_cases,
    mismatch_fields,
    remove_stale_maps,
    remove_triage_files,
    run_triage,
    triage_case,
    untriaged_cases,
)

__all__ = [
    "RULE_FILE",
    "RULE_FORMAT",
    "RULE_VERSION",
    "SCORE_AGGREGATIONS",
    "IMAGE_FEATURES",
    "IMAGE_Z_MAX",
    "IMAGE_CHANNEL_FILES",
    "TRIAGE_FILES",
    "TRIAGE_WRITES",
    "Decision",
    "ImageReference",
    "ReferralRule",
    "FingerprintMismatch",
    "TriageResult",
    "case_score_columns",
    "parse_score_column",
    "image_statistics",
    "read_image_channels",
    "prediction_fingerprint",
    "recorded_temperature",
    "compare_fingerprints",
    "prediction_regions",
    "region_differences",
    "certify_referral_rule",
    "write_referral_rule",
    "find_prediction_cases",
    "list_prediction_cases",
    "check_prediction_fingerprint",
    "triage_case",
    "run_triage",
    "untriaged_cases",
    "remove_triage_files",
    "remove_stale_maps",
    "mismatch_fields",
    "check_triage_summary",
    "write_triage_summary",
]
