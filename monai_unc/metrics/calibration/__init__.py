"""Calibration of voxel-wise probabilities from confidence histograms (Kock et al.), exact and constant-memory.

Every metric here reads one additive intermediate, the :class:`ConfidenceHistogram` (Kock, Thielke et al.,
"Confidence histograms for model reliability analysis and temperature calibration", MIDL, Kock et al., Sec.
2.2). For every case ``k`` it holds, over a fine grid of ``F`` equal-width bins on [0, 1]:

- the *label confidence histogram* ``ch[k, l, r, i]``: voxels whose probability ``p_l`` of label ``l`` falls
  in fine bin ``i``, split by ``r = [y == l]`` (one row per label, ``C`` rows);
- the *prediction confidence histogram* (row ``C``): the same for the predicted (top) label only,
  ``p_top = max_l p_l``, ``r = [argmax_l p_l == y]`` (the first maximum wins on ties);
- the *uncertainty histogram* (row ``C + 1``): normalised entropy ``H(p) / log C``
  (:func:`monai_unc.measures.entropy` with ``normalize=True``) split by ``r`` = the top label is correct;
  UCE reads it (Laves et al. 2019; Kock et al. Appendix D; Zeevi et al.).

Counts are int64. Next to them the histogram keeps, per fine bin, the float64 sum of the binned values
(``sum p``), and per case float64 sums of voxel weights, of ``-log p_y`` and of the Brier term. Because the
value sums are exact, means per bin do not suffer the quantisation of Kock et al.'s bin centres: every metric
equals the float64 computation on the raw voxels up to rounding (|error| < 1e-9 on 8.4 M voxels, tested).
Histograms add across cases, batches and ranks, so memory does not grow with the number of voxels.

Binning. Value ``v`` (clipped to [0, 1]) falls in fine bin ``floor(v * F)`` computed in float64;
``v = 1`` goes to the last bin. The metrics re-bin to ``n_bins`` equal-width bins ``[b / n, (b + 1) / n)``
(the last one closed). The default ``F = 15 * 2**10 = 15360`` (Kock et al. uses ``2**14 = 16384``; the
resolution is the same) makes the coarse bins unions of fine bins for every ``n_bins`` that divides ``F``
(2, 3, 4, 5, 6, 8, 10, 12, 15 (default), 16, 20 (Kock et al.'s loss), 24, 30, 32, 40, 48, 60, 64, ...), so
coarse binning is exact and identical to ``floor(v * n_bins)``; with ``F = 2**14`` only powers of two
are. For other ``n_bins`` the coarse edges are rounded to the fine grid (shift < 1 / F) with a warning.
:func:`confidence_bins` gives the coarse bin of a value exactly as the metrics count it (the temperature scaler's
ECE loss bins with it), :func:`coarse_bin_index` the coarse bin of a fine bin.

Metrics (per case or pooled over all cases; ``M_b`` = voxel weight in coarse bin ``b``, ``a_b`` = weighted
frequency of ``r = 1``, ``c_b`` = weighted mean binned value; bins with fewer than ``min_bin_count`` voxels
are dropped, Kock et al. uses 50; empty bins are always dropped):

- ``ece``      top label, ``sum_b M_b |a_b - c_b| / sum_b M_b`` (Kock et al. eq. 2; Guo et al. 2017);
- ``classwise_ece``: the mean over labels of the ECE of ``p_l`` against ``[y == l]`` (Kull et al. 2019);
- ``all_label_ece``: every label's ``p_l`` against ``[y == l]`` pooled into one histogram, Kock et al.'s
  "multiclass ECE" (the reliability diagram covers [0, 1] instead of [1/C, 1]);
- ``ace``      every kept bin weighted equally, ``mean_b |a_b - c_b|`` (ValUES, Appendix A.5, eq. 11);
- ``mce``      ``max_b |a_b - c_b|`` (Naeini et al. 2015);
- ``uce``      ``sum_b M_b |err_b - u_b| / sum_b M_b`` over normalised entropy ``u`` and error rate ``err``;
- ``nll``      ``sum w (-log max(p_y, 1e-15)) / sum w`` (exact, not from bin centres);
- ``brier``    ``sum w sum_l (p_l - [y == l])^2 / sum w`` (sum over labels, range [0, 2]; scikit-learn's
  multiclass ``brier_score_loss``; twice its binary value).

Shapes (docs/design.md): probabilities ``probs`` ``(B, C, *spatial)`` with ``C >= 2``, reference labels
``target`` ``(B, *spatial)`` or ``(B, 1, *spatial)``, optional voxel ``weights`` and boolean ``mask`` of the label
shape. Each function takes either a :class:`ConfidenceHistogram` or the arrays (a histogram is built on the fly).
Pooled results are
floats; with ``per_case=True`` one value per case (per batch item for arrays), numpy for numpy input or a
histogram, torch for torch input. Degenerate input (no voxel, no bin left) gives NaN with a ``UserWarning``.

Layout: :mod:`.histogram` (the binning core and :class:`ConfidenceHistogram`), :mod:`.functional` (the metrics
above, :func:`reliability_curve`, :func:`calibration_metrics`), :mod:`.metric` (:class:`CalibrationMetric`, the
MONAI adapter, imported on first access: it imports MONAI). Every public name is importable from this package.
"""

from typing import TYPE_CHECKING

from ..._lazy import lazy_attributes
from .functional import (
    CALIBRATION_METRICS,
    ReliabilityCurve,
    ace,
    all_label_ece,
    brier,
    calibration_metrics,
    check_metric_names,
    classwise_ece,
    ece,
    mce,
    nll,
    reliability_curve,
    uce,
)
from .histogram import (
    DEFAULT_FINE_BINS,
    NLL_EPS,
    ConfidenceHistogram,
    coarse_bin_index,
    confidence_bins,
    top_label,
)

if TYPE_CHECKING:  # imported on first access (it imports MONAI), for type checkers and the API reference
    from .metric import CalibrationMetric

__getattr__, __dir__ = lazy_attributes(__name__, {"CalibrationMetric": "metric"}, ("metric",), globals())

__all__ = [
    "DEFAULT_FINE_BINS",
    "NLL_EPS",
    "ConfidenceHistogram",
    "ReliabilityCurve",
    "ece",
    "classwise_ece",
    "all_label_ece",
    "ace",
    "mce",
    "uce",
    "nll",
    "brier",
    "reliability_curve",
    "calibration_metrics",
    "check_metric_names",
    "CalibrationMetric",
    "CALIBRATION_METRICS",
    "top_label",
    "confidence_bins",
    "coarse_bin_index",
]
