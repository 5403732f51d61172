"""Which uncertainty map is better? The evaluation protocol of Zeevi et al., Sec. 4.3 / Table 1.

Two sets of uncertainty maps over the same cases (``maps_a``, e.g. from a new method, and ``maps_b``, the
reference, e.g. plain MC dropout) are scored with several metrics against the same prediction and reference
segmentation. For every metric and case the metric *prefers a* when its value for map a is better (larger
when ``higher_is_better``, smaller otherwise; ties do not count as a preference). Values that agree to a relative
``1e-12`` are a tie: they differ only by floating-point rounding (BUC of a map and of the same map in other units, e.g.
entropy in nats and divided by ``log 3``, agrees to about 1e-14), which is no preference. Per metric:

- ``accuracy``: the fraction of cases where the metric prefers map a (Zeevi et al.: "percentage of cases where a
  metric correctly favored the high quality map" when ``maps_a`` are the known-better maps);
- ``cohens_d``: ``(mean_a - mean_b) / s_pooled`` with ``s_pooled = sqrt((s_a^2 + s_b^2) / 2)`` (sample
  standard deviations, ddof = 1), signed so that positive favours map a;
- ``mean_relative_difference``: the mean over cases of ``100 (a_i - b_i) / |b_i|`` (percent, relative to map b,
  signed so that positive favours map a; cases with ``b_i = 0`` are left out with a warning).

Across metrics, the per-case 0/1 preference outcomes are compared with pairwise McNemar tests (exact binomial
test on the discordant pairs by default, or the continuity-corrected chi-square), Holm-corrected over all
pairs, and with Cochran's Q (chi-square with ``k - 1`` degrees of freedom) over the cases valid for every metric.
Cases where a metric is NaN are left out of that metric's statistics and of the tests involving it, with a warning;
a metric NaN on every case is left out of Cochran's Q (``k`` counts the others), with a warning.

Metric functions take ``fn(uncertainty, pred, target, spacing=...) -> float`` for one case. The built-in
registry (:func:`uncertainty_map_metrics`) holds the spatial metrics and the voxel-wise baselines of Zeevi et al.
Table 1, named as there; UCE comes from :mod:`monai_unc.metrics.calibration` when that module provides ``uce``. ECE and
MCE of Zeevi et al. need class probabilities, not just an uncertainty map: compute them per case yourself and pass
the values to :func:`compare_metric_values`, which runs the same statistics on precomputed values.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .._deprecation import deprecated_arg_names
from .._utils import check_bool, check_case_labels, holds_bool, real_array, to_numpy
from . import discrimination as _disc
from . import spatial as _spatial
from .calibration import uce

__all__ = [
    "MetricSpec",
    "MetricComparison",
    "UncertaintyComparison",
    "uncertainty_map_metrics",
    "seed003_metrics",
    "compare_uncertainty_maps",
    "compare_metric_values",
    "cohens_d",
    "mcnemar_test",
    "holm_correction",
    "cochrans_q",
]

MetricFn = Callable[..., float]


def _host(x: Any, name: str) -> Any:
    """A torch tensor (any device, requiring grad or bfloat16) as a numpy array (:func:`to_numpy`); else ``x`` as is.

    The package's per-case metrics return tensors on the input's device (``error_auroc(..., per_case=True)`` of CUDA
    maps); ``numpy.asarray`` refuses those (and tensors requiring grad, and bfloat16).
    """
    return to_numpy(x, name) if isinstance(x, torch.Tensor) else x


def _real(x: Any, name: str) -> np.ndarray:
    """``x`` (:func:`_host`) as a float64 array; ``TypeError`` naming ``name`` for complex values or text.

    The cast dropped the imaginary part of a complex value with only numpy's ``ComplexWarning`` (in earlier
    versions); ``None`` in a list still reads as NaN, as before.
    """
    return real_array(np.asarray(_host(x, name)), name)


def _outcomes(x: Any, name: str) -> np.ndarray:
    """``x`` as a bool array of paired 0/1 outcomes (bool, or numbers that are all 0 or 1; ValueError otherwise).

    A cast to bool or int would read NaN and 0.3 as True, or truncate 0.5 to 0, and test other data silently.
    """
    a = np.asarray(_host(x, name))
    if a.dtype == bool:
        return a
    if not np.issubdtype(a.dtype, np.number):
        raise TypeError(f"{name} must hold 0/1 outcomes (bool or numbers), got dtype {a.dtype}")
    b = a != 0
    if not np.array_equal(a, b):  # NaN compares unequal, so it lands here too
        raise ValueError(f"{name} must hold 0/1 outcomes only (bool, or numbers 0 and 1; no NaN)")
    return b


def _sample(x: Any, name: str) -> np.ndarray:
    """``x`` as a 1-D float64 sample of finite values (ValueError naming ``name``; TypeError for complex or text).

    The cast to float64 parsed text (``["1.0", "2.0"]`` was the sample 1, 2, which :func:`compare_metric_values`
    refuses) and would drop the imaginary part of a complex value; ``None`` in a list still reads as NaN, as before.
    """
    a = _real(x, name)
    if a.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sample, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} contains {int((~np.isfinite(a)).sum())} non-finite value(s) (NaN or inf)")
    return a


def _check_alpha(alpha: Any) -> float:
    """``alpha`` as a float in (0, 1) (ValueError naming it otherwise)."""
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, (int, float, np.integer, np.floating)) or not (
        0 < float(alpha) < 1
    ):
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    return float(alpha)


def _direction(value: Any, name: str) -> bool:
    """A metric's direction: a bool (numpy's too); TypeError naming ``higher_is_better`` otherwise.

    ``bool("False")`` is True, so a string (e.g. from a configuration file) would silently flip a metric.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"higher_is_better for metric {name!r} must be a bool, got {value!r}")
    return bool(value)


def _directions(
    names: Sequence[str], higher_is_better: Any, defaults: Mapping[str, Any], missing: str
) -> dict[str, bool]:
    """The direction of each metric of ``names``: one bool for all, a mapping's entry, else its default.

    A mapping's key that names none of the metrics (a typo, ``{"AUCROC": False}`` for ``AUC-ROC``) is refused: it
    was ignored, and the metric kept its default direction without a word (found by hostile review). ``missing``
    is the message of a metric with neither an entry nor a default (``{name!r}`` in it is the metric).
    """
    if isinstance(higher_is_better, (bool, np.bool_)):
        return {n: bool(higher_is_better) for n in names}
    if not isinstance(higher_is_better, Mapping):
        raise TypeError(f"higher_is_better must be a bool or a mapping name -> bool, got {higher_is_better!r}")
    unknown = [k for k in higher_is_better if k not in names]
    if unknown:
        raise ValueError(f"higher_is_better names metric(s) not compared: {unknown} (compared: {list(names)})")
    out = {}
    for n in names:
        if n in higher_is_better:
            out[n] = _direction(higher_is_better[n], n)
        elif defaults.get(n) is not None:
            out[n] = _direction(defaults[n], n)
        else:
            raise ValueError(missing.format(name=n))
    return out


@dataclass(frozen=True)
class MetricSpec:
    """A per-case metric ``fn(uncertainty, pred, target, spacing=...) -> float`` and its direction.

    Attributes:
        fn: the metric of one case (maps ``(*spatial)``, spacing in mm).
        higher_is_better: the metric's direction.
        spatial: whether the metric uses the voxel spacing.

    Example:
        >>> from monai_unc.metrics import uncertainty_map_metrics
        >>> spec = uncertainty_map_metrics()["BUC"]
        >>> spec.higher_is_better, spec.spatial
        (True, True)
    """

    fn: MetricFn
    higher_is_better: bool
    spatial: bool = False

    def __post_init__(self) -> None:
        """Refuse a direction that is not a bool (``"False"`` would read as True) and a ``fn`` that is no function.

        Raises:
            TypeError: naming ``fn``, ``higher_is_better`` or ``spatial``.
        """
        if not callable(self.fn):
            raise TypeError(f"fn must be callable, got {type(self.fn).__name__}")
        if not isinstance(self.higher_is_better, (bool, np.bool_)):
            raise TypeError(f"higher_is_better must be a bool, got {self.higher_is_better!r}")
        if not isinstance(self.spatial, (bool, np.bool_)):
            raise TypeError(f"spatial must be a bool, got {self.spatial!r}")
        object.__setattr__(self, "higher_is_better", bool(self.higher_is_better))  # numpy's bool as Python's
        object.__setattr__(self, "spatial", bool(self.spatial))


def _error(pred: Any, target: Any) -> np.ndarray:
    return to_numpy(pred, "pred") != to_numpy(target, "target")


def _voxelwise(fn: Callable[..., Any], **kwargs: Any) -> MetricFn:
    def metric(uncertainty: Any, pred: Any, target: Any, spacing: Any = 1.0) -> float:
        # one case's map: every voxel pooled into one value
        return float(fn(to_numpy(uncertainty, "uncertainty"), _error(pred, target), per_case=False, **kwargs))

    return metric


def _spatial_fn(fn: Callable[..., Any], **kwargs: Any) -> MetricFn:
    def metric(uncertainty: Any, pred: Any, target: Any, spacing: Any = 1.0) -> float:
        return float(fn(uncertainty, pred, target, spacing=spacing, **kwargs)[0])  # one case: (1,)

    return metric


def _uce_metric() -> MetricFn:
    """UCE (:func:`monai_unc.metrics.calibration.uce`) of an uncertainty map against the error map."""

    def metric(uncertainty: Any, pred: Any, target: Any, spacing: Any = 1.0) -> float:
        return float(uce(to_numpy(uncertainty, "uncertainty"), _error(pred, target)))

    return metric


def uncertainty_map_metrics(
    threshold: float = 0.5, sigma: float = 2.0, n_bands: int = 10, include_uce: bool = True
) -> dict[str, MetricSpec]:
    """The metrics of Zeevi et al., Table 1, that work on an uncertainty map, in the paper's order.

    Zeevi, Lieffrig, Staib, Onofrey: *Spatially-Aware Evaluation of Segmentation Uncertainty*. Spatial: ``SPACE``
    (``sigma`` mm), ``BUC``, ``BA-ECE`` (``n_bands``); voxel-wise: ``UCE`` (if available), ``VOXEL_ACC``,
    ``AUC-PR``, ``AUC-ROC``, ``PAvPU(w=5)``, ``AU-ARC``, ``PAvPU(w=11)``, ``AvU``, ``Correct Certain Ratio``,
    ``Uncertain Incorrect Ratio`` (``threshold`` for the thresholded ones).

    Args:
        threshold: uncertainty threshold of the thresholded metrics (AvU, PAvPU, the ratios).
        sigma: Gaussian smoothing of SPACE in mm.
        n_bands: distance bands of BA-ECE.
        include_uce: include ``UCE``.

    Returns:
        ``{name: MetricSpec}`` in the paper's order.

    Raises:
        TypeError: ``include_uce`` is not a bool.

    Example:
        >>> from monai_unc.metrics import uncertainty_map_metrics
        >>> list(uncertainty_map_metrics())[:4]
        ['SPACE', 'BUC', 'BA-ECE', 'UCE']
    """
    include_uce = check_bool(include_uce, "include_uce")  # found by hostile testing: "no" included UCE
    reg: dict[str, MetricSpec] = {
        "SPACE": MetricSpec(_spatial_fn(_spatial.spatial_calibration_error, sigma=sigma), False, True),
        "BUC": MetricSpec(_spatial_fn(_spatial.boundary_uncertainty_concentration), True, True),
        "BA-ECE": MetricSpec(_spatial_fn(_spatial.boundary_aware_ece, n_bands=n_bands), False, True),
    }
    if include_uce:
        reg["UCE"] = MetricSpec(_uce_metric(), False)
    reg.update(
        {
            "VOXEL_ACC": MetricSpec(_voxelwise(_disc.voxel_accuracy), True),
            "AUC-PR": MetricSpec(_voxelwise(_disc.error_auprc), True),
            "AUC-ROC": MetricSpec(_voxelwise(_disc.error_auroc), True),
            "PAvPU(w=5)": MetricSpec(_voxelwise(_disc.pavpu, window=5, threshold=threshold), True),
            "AU-ARC": MetricSpec(_voxelwise(_disc.au_arc), True),
            "PAvPU(w=11)": MetricSpec(_voxelwise(_disc.pavpu, window=11, threshold=threshold), True),
            "AvU": MetricSpec(_voxelwise(_disc.avu, threshold=threshold), True),
            "Correct Certain Ratio": MetricSpec(_voxelwise(_disc.correct_certain_ratio, threshold=threshold), True),
            "Uncertain Incorrect Ratio": MetricSpec(
                _voxelwise(_disc.uncertain_incorrect_ratio, threshold=threshold), True
            ),
        }
    )
    return reg


# --------------------------------------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------------------------------------


def seed003_metrics(
    threshold: float = 0.5, sigma: float = 2.0, n_bands: int = 10, include_uce: bool = True
) -> dict[str, MetricSpec]:
    """Deprecated alias of :func:`uncertainty_map_metrics` (the registry's former name).

    Removed in the next release.

    Args:
        threshold: as in :func:`uncertainty_map_metrics`.
        sigma: as in :func:`uncertainty_map_metrics`.
        n_bands: as in :func:`uncertainty_map_metrics`.
        include_uce: as in :func:`uncertainty_map_metrics`.

    Returns:
        ``uncertainty_map_metrics(...)``, with a ``DeprecationWarning``.

    Example:
        >>> import warnings
        >>> from monai_unc.metrics import uncertainty_map_metrics
        >>> from monai_unc.metrics.compare import seed003_metrics
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     list(seed003_metrics()) == list(uncertainty_map_metrics())
        True
    """
    warnings.warn(
        "seed003_metrics is deprecated and will be removed in the next release; use uncertainty_map_metrics",
        DeprecationWarning,
        stacklevel=2,
    )
    return uncertainty_map_metrics(threshold, sigma, n_bands, include_uce)


def _sample_variance(x: np.ndarray) -> float:
    """Sample variance (ddof = 1), exactly 0 for a sample whose values agree to rounding (a relative 1e-12).

    ``numpy.var`` of identical values is not always 0 (the mean of three copies of 0.1 is not 0.1 in floating point),
    and a pooled deviation of 1e-17 turned two constant samples into an effect size of 1e15 instead of undefined.
    Values that differ by rounding only are no spread either (found by hostile testing: ``[0.3, 0.1 + 0.2, 0.3]``
    against ``[0.3, 0.3, 0.3]``, three ties of :func:`compare_metric_values`, had Cohen's d 1.41, a "large effect");
    the tolerance is that of a tie between two values (:func:`_tied`).
    """
    if _tied(float(x.min()), float(x.max())):
        return 0.0
    return float(x.var(ddof=1))


def cohens_d(a: Any, b: Any) -> float:
    """Cohen's d of two samples: ``(mean a - mean b) / sqrt((var_a + var_b) / 2)`` (ddof = 1).

    Args:
        a: first sample, 1D.
        b: second sample, 1D.

    Returns:
        The effect size as a float; NaN with a warning for fewer than two values per sample or zero pooled variance (a
        sample whose values agree to a relative 1e-12, floating-point rounding, has none).

    Raises:
        ValueError: ``a`` or ``b`` is not 1-D or holds NaN / inf (leave such cases out first).
        TypeError: ``a`` or ``b`` holds complex numbers or text.

    Example:
        >>> from monai_unc.metrics import cohens_d
        >>> round(cohens_d([1.0, 2.0, 3.0], [0.0, 1.0, 2.0]), 4)
        1.0
    """
    d, undefined = _cohens_d(_sample(a, "a"), _sample(b, "b"))
    if undefined:
        warnings.warn(f"cohens_d: {undefined}; undefined", UserWarning, stacklevel=2)
    return d


def _cohens_d(x: np.ndarray, y: np.ndarray) -> tuple[float, str]:
    """:func:`cohens_d` of two checked samples, and why it is undefined (``""`` when it is not); warns about nothing.

    The core that :func:`_one_metric` shares with :func:`cohens_d`, so that it says an undefined d in its own words
    without silencing warnings (in earlier versions ``simplefilter("ignore")`` around :func:`cohens_d` silenced every
    warning of the computation, numpy's overflow of a variance included, process-wide).
    """
    if x.size < 2 or y.size < 2:
        return float("nan"), "fewer than two values"
    s = math.sqrt((_sample_variance(x) + _sample_variance(y)) / 2.0)
    if s == 0:
        return float("nan"), "zero variance in both samples"
    return float((x.mean() - y.mean()) / s), ""


def _discordant_pairs(x: np.ndarray, y: np.ndarray) -> tuple[int, int]:
    """``(b, c) = (#(x=1, y=0), #(x=0, y=1))`` of paired bool outcomes of one shape (ValueError otherwise).

    The discordant pairs of McNemar's test: its p-value (:func:`mcnemar_test`) and the direction of a significant
    difference (:meth:`UncertaintyComparison.significantly_better`) both come from them.
    """
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape, got {x.shape} and {y.shape}")
    return int(np.count_nonzero(x & ~y)), int(np.count_nonzero(~x & y))


def mcnemar_test(x: Any, y: Any, exact: bool = True) -> float:
    """Two-sided McNemar p-value for paired 0/1 outcomes ``x``, ``y`` (e.g. per-case correctness).

    With ``b = #(x=1, y=0)`` and ``c = #(x=0, y=1)``: exact binomial test of ``b`` among ``b + c`` at 1/2, or
    the continuity-corrected chi-square ``max(|b - c| - 1, 0)^2 / (b + c)`` on 1 degree of freedom (0, p = 1, when
    ``b = c``: the correction never turns a perfect balance into evidence, as in R's ``mcnemar.test``).

    Args:
        x: ``(n,)`` 0/1 outcomes (an array, a list, a tensor or a pandas ``Series``).
        y: ``(n,)`` paired 0/1 outcomes of the same cases in the same order (paired by position: when both are
            pandas ``Series`` their indexes must agree, which is checked, not used to align).
        exact: exact binomial test (default) or the chi-square approximation.

    Returns:
        The p-value as a float; 1.0 when there is no discordant pair; NaN with a ``UserWarning`` for no case at all
        (``n = 0``: no evidence either way, as :func:`cochrans_q` says it).

    Raises:
        ValueError: ``x`` or ``y`` is not 1-D or holds values other than 0 and 1 (NaN included), their shapes
            differ, or both are pandas ``Series`` with different indexes (other cases, or another order: align them
            first).
        TypeError: ``x`` or ``y`` holds text, or ``exact`` is not a bool.

    Example:
        >>> from monai_unc.metrics import mcnemar_test
        >>> x = [1, 1, 1, 1, 1, 1, 0, 1]
        >>> y = [0, 0, 0, 0, 0, 1, 0, 1]
        >>> round(mcnemar_test(x, y), 4), round(mcnemar_test(x, y, exact=False), 4)
        (0.0625, 0.0736)
    """
    # found by hostile testing: exact="False" (a string, e.g. from a configuration file) ran the exact test
    exact = check_bool(exact, "exact")
    check_case_labels([("x", x), ("y", y)])  # a Series' case ids would be ignored: pairing by position must be right
    xo, yo = _outcomes(x, "x"), _outcomes(y, "y")
    for name, o in (("x", xo), ("y", yo)):
        if o.ndim != 1:  # a 0-d 1 against 0 was "no discordant pair", p = 1
            raise ValueError(f"{name} must be (n,) 0/1 outcomes, got shape {o.shape}")
    b, c = _discordant_pairs(xo, yo)
    if xo.size == 0:  # no case: undefined, not "no difference" (as _compare_values and cochrans_q say it)
        warnings.warn("mcnemar_test: no case; the p-value is undefined (NaN)", UserWarning, stacklevel=2)
        return float("nan")
    if b + c == 0:
        return 1.0
    from scipy import stats  # ~1 s to import: loaded by the tests that use it, not by every command using metrics

    if exact:
        return float(stats.binomtest(b, b + c, 0.5).pvalue)
    # found by hostile testing: (|b - c| - 1)^2 is 1, not 0, for b = c, so b = c = 5 gave p = 0.75 while the weaker
    # evidence b = 6, c = 5 gave p = 1 (the p-value was not monotone in |b - c|)
    stat = max(abs(b - c) - 1.0, 0.0) ** 2 / (b + c)
    return float(stats.chi2.sf(stat, 1))


def holm_correction(p_values: Any) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (same order as the input; NaN entries stay NaN, not counted).

    Args:
        p_values: raw p-values, 1D.

    Returns:
        Adjusted p-values, float64 numpy array of the same length.

    Raises:
        ValueError: ``p_values`` is not 1-D, or a p-value lies outside [0, 1] (NaN is allowed).
        TypeError: ``p_values`` holds booleans (flags, not p-values), text or complex numbers.

    Example:
        >>> from monai_unc.metrics import holm_correction
        >>> holm_correction([0.01, 0.04, float("nan"), 0.03])
        array([0.03, 0.06,  nan, 0.06])
    """
    raw = _host(p_values, "p_values")
    if holds_bool(raw) or holds_bool(np.asarray(raw)):  # a list [0.01, True] is the float array [0.01, 1]
        # found by review: [False, False] read as p = 0, 0, every test "significant"
        raise TypeError("p_values must hold p-values (numbers in [0, 1] or NaN), got booleans (flags)")
    p = _real(raw, "p_values")
    if p.ndim != 1:
        raise ValueError(f"p_values must be 1-D, got shape {p.shape}")
    if bool(((p < 0) | (p > 1)).any()):  # NaN compares False: allowed
        raise ValueError(f"p_values must lie in [0, 1] (or be NaN), got values in [{np.nanmin(p)}, {np.nanmax(p)}]")
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    adjusted = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(adjusted)
    return out


def cochrans_q(outcomes: Any) -> tuple[float, float, int]:
    """Cochran's Q test of ``k`` related 0/1 outcomes, ``outcomes`` of shape ``(n_cases, k)``.

    ``Q = (k - 1) (k sum_j C_j^2 - N^2) / (k N - sum_i R_i^2)`` with column totals ``C_j``, row totals ``R_i``
    and grand total ``N``; ``p = chi2.sf(Q, k - 1)``.

    Args:
        outcomes: ``(n_cases, k)`` 0/1 outcomes.

    Returns:
        ``(Q, p, k - 1)``; NaN with a warning when every case has the same outcome under all metrics (zero
        denominator) or ``k < 2``.

    Raises:
        ValueError: ``outcomes`` is not 2-D or holds values other than 0 and 1 (NaN included).

    Example:
        >>> from monai_unc.metrics import cochrans_q
        >>> q, p, df = cochrans_q([[1, 1, 0], [1, 0, 0], [1, 1, 0], [1, 0, 1], [0, 1, 0]])
        >>> round(q, 4), round(p, 4), df
        (2.8, 0.2466, 2)
    """
    x = _outcomes(outcomes, "outcomes").astype(np.int64)
    if x.ndim != 2:
        raise ValueError(f"outcomes must be (n_cases, k), got shape {x.shape}")
    k = x.shape[1]
    if k < 2 or x.shape[0] == 0:
        warnings.warn("cochrans_q: needs at least two metrics and one case", UserWarning, stacklevel=2)
        return float("nan"), float("nan"), max(k - 1, 0)
    col = x.sum(axis=0)
    row = x.sum(axis=1)
    total = int(x.sum())
    den = k * total - int((row**2).sum())
    if den == 0:
        warnings.warn(
            "cochrans_q: every case has the same outcome for all metrics; undefined", UserWarning, stacklevel=2
        )
        return float("nan"), float("nan"), k - 1
    q = (k - 1) * (k * int((col**2).sum()) - total**2) / den
    from scipy import stats  # ~1 s to import: loaded by the tests that use it, not by every command using metrics

    return float(q), float(stats.chi2.sf(q, k - 1)), k - 1


# --------------------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------------------


@dataclass
class MetricComparison:
    """Per-metric outcome of :func:`compare_metric_values`.

    Attributes:
        name: the metric.
        higher_is_better: its direction.
        values_a: ``(n_cases,)`` values for map a.
        values_b: ``(n_cases,)`` values for map b.
        prefers_a: ``(n_cases,)`` bool: the metric prefers map a (False where a value is NaN).
        valid: ``(n_cases,)`` bool: both values finite.
        accuracy: fraction of valid cases where the metric prefers map a.
        cohens_d: Cohen's d, positive favours map a.
        mean_relative_difference: mean of ``100 (a_i - b_i) / |b_i|`` in percent, positive favours map a.
        n_ties: cases with equal values (to a relative 1e-12: rounding is no preference).

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics import compare_metric_values
        >>> rng = np.random.default_rng(0)
        >>> good = {"AUC-ROC": 0.8 + 0.1 * rng.random(20), "AvU": 0.7 + 0.1 * rng.random(20)}
        >>> poor = {"AUC-ROC": 0.7 + 0.1 * rng.random(20), "AvU": 0.72 + 0.1 * rng.random(20)}
        >>> res = compare_metric_values(good, poor, higher_is_better=True)
        >>> m = res.metrics["AUC-ROC"]
        >>> m.n_cases, m.accuracy
        (20, 1.0)
    """

    name: str
    higher_is_better: bool
    values_a: np.ndarray
    values_b: np.ndarray
    prefers_a: np.ndarray  # bool per case (False where a value is NaN)
    valid: np.ndarray  # bool per case: both values finite
    accuracy: float
    cohens_d: float
    mean_relative_difference: float
    n_ties: int

    @property
    def n_cases(self) -> int:
        """Number of cases where both values are finite."""
        return int(self.valid.sum())


@dataclass
class UncertaintyComparison:
    """Outcome of :func:`compare_uncertainty_maps`: per-metric results and the tests across metrics.

    Attributes:
        names: the metrics, in the given order.
        metrics: ``{name: MetricComparison}``.
        mcnemar_p: ``(k, k)`` symmetric matrix of McNemar p-values over ``names`` (NaN diagonal).
        mcnemar_p_holm: the same, Holm-adjusted.
        cochran_q: Cochran's Q over the metrics' preferences.
        cochran_p: its p-value.
        cochran_df: its degrees of freedom, ``k - 1`` (``k``: the metrics with a valid case).
        alpha: significance level of :meth:`significantly_better`.
        extra: further information (free-form).

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics import compare_metric_values
        >>> rng = np.random.default_rng(0)
        >>> good = {"AUC-ROC": 0.8 + 0.1 * rng.random(20), "AvU": 0.7 + 0.1 * rng.random(20)}
        >>> poor = {"AUC-ROC": 0.7 + 0.1 * rng.random(20), "AvU": 0.72 + 0.1 * rng.random(20)}
        >>> res = compare_metric_values(good, poor, higher_is_better=True)
        >>> [(row["metric"], round(row["accuracy_percent"])) for row in res.table()]
        [('AUC-ROC', 100), ('AvU', 25)]
        >>> res.significantly_better("AUC-ROC")
        ['AvU']
    """

    names: list[str]
    metrics: dict[str, MetricComparison]
    mcnemar_p: np.ndarray
    mcnemar_p_holm: np.ndarray
    cochran_q: float
    cochran_p: float
    cochran_df: int
    alpha: float = 0.05
    extra: dict[str, Any] = field(default_factory=dict)

    def significantly_better(self, name: str) -> list[str]:
        """Metrics that ``name`` beats: Holm-adjusted McNemar p <= alpha, in ``name``'s favour on the tested cases.

        The direction comes from the cases the McNemar test compared (those valid for both metrics): ``name``
        prefers map a on more of them than the other metric does (more discordant pairs in its favour). Where both
        metrics are valid on the same cases this is "higher accuracy"; where they are not, the accuracies over each
        metric's own valid cases can point the other way than the test.

        Args:
            name: one of :attr:`names`.

        Returns:
            The names of the metrics that ``name`` beats.
        """
        i = self.names.index(name)
        mine = self.metrics[name]
        out = []
        for j, other in enumerate(self.names):
            if j == i or not self.mcnemar_p_holm[i, j] <= self.alpha:
                continue
            theirs = self.metrics[other]
            both = mine.valid & theirs.valid
            # found by hostile testing: comparing the accuracies over each metric's own valid cases declared a metric
            # significantly better than another that beat it on every discordant case the McNemar test counted
            b, c = _discordant_pairs(mine.prefers_a[both], theirs.prefers_a[both])
            if b > c:
                out.append(other)
        return out

    def table(self) -> list[dict[str, Any]]:
        """One row per metric, sorted by accuracy (descending), as plain Python values.

        Returns:
            A list of dicts, one per metric.
        """
        rows = []
        for n in self.names:
            m = self.metrics[n]
            rows.append(
                {
                    "metric": n,
                    "accuracy_percent": 100.0 * m.accuracy,
                    "cohens_d": m.cohens_d,
                    "mean_relative_difference_percent": m.mean_relative_difference,
                    "n_cases": m.n_cases,
                    "n_ties": m.n_ties,
                    "higher_is_better": m.higher_is_better,
                    "significantly_better_than": self.significantly_better(n),
                }
            )
        return sorted(rows, key=lambda r: -np.nan_to_num(r["accuracy_percent"], nan=-1.0))

    def to_markdown(self) -> str:
        """A Zeevi et al. Table 1 style markdown table plus Cochran's Q.

        Returns:
            The markdown text.
        """
        lines = [
            "| Metric | Accuracy (%) | Cohen's d | Mean Diff. (%) | Cases | Significantly better than |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for r in self.table():
            better = ", ".join(r["significantly_better_than"]) or "-"
            lines.append(
                f"| {r['metric']} | {r['accuracy_percent']:.2f} | {r['cohens_d']:.2f} | "
                f"{r['mean_relative_difference_percent']:.1f} | {r['n_cases']} | {better} |"
            )
        lines.append("")
        lines.append(
            f"Cochran's Q = {self.cochran_q:.3f} (df = {self.cochran_df}, p = {self.cochran_p:.3g}); pairwise McNemar "
            f"tests with Holm correction at alpha = {self.alpha}."
        )
        return "\n".join(lines)


#: relative difference up to which two values of a metric are a tie (:func:`_one_metric`): floating-point rounding of
#: one computation in float64 (a few 1e-16 per operation, about 1e-14 after the sums of a large volume), no preference
_VALUE_TIE_RTOL = 1e-12


def _tied(a: Any, b: Any) -> Any:
    """Whether ``a`` and ``b`` agree to a relative :data:`_VALUE_TIE_RTOL`, elementwise: a tie, no difference."""
    return np.abs(a - b) <= _VALUE_TIE_RTOL * np.maximum(np.abs(a), np.abs(b))


def _one_metric(name: str, a: np.ndarray, b: np.ndarray, higher: bool, stacklevel: int) -> MetricComparison:
    """The per-metric statistics; its warnings point ``stacklevel`` frames up (at the caller of the public function)."""
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"values of metric {name!r} must be two 1-D arrays of equal length, got {a.shape}, {b.shape}")
    valid = np.isfinite(a) & np.isfinite(b)
    if not valid.all():
        warnings.warn(
            f"compare: metric {name!r} is not finite on {int((~valid).sum())} case(s); they are left out",
            UserWarning,
            stacklevel=stacklevel,
        )
    sign = 1.0 if higher else -1.0
    diff = sign * (a - b)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN / inf cases are not valid: their ties do not count
        ties = valid & _tied(a, b)
    prefers = valid & (diff > 0) & ~ties
    av, bv = a[valid], b[valid]
    accuracy = float(prefers.sum() / valid.sum()) if valid.any() else float("nan")
    if not valid.any():
        warnings.warn(f"compare: metric {name!r} has no valid case", UserWarning, stacklevel=stacklevel)
    d = _cohens_d(av, bv)[0] if av.size else float("nan")  # undefined: said below, in compare's words
    if valid.any() and math.isnan(d):
        warnings.warn(
            f"compare: Cohen's d of metric {name!r} is undefined (NaN): fewer than two valid cases or no variance "
            "in either map's values",
            UserWarning,
            stacklevel=stacklevel,
        )
    d = sign * d
    nz = bv != 0
    if valid.any() and not nz.all():
        warnings.warn(
            f"compare: metric {name!r} is 0 for map b on {int((~nz).sum())} case(s); left out of the relative "
            "difference",
            UserWarning,
            stacklevel=stacklevel,
        )
    rel = float(np.mean(100.0 * sign * (av[nz] - bv[nz]) / np.abs(bv[nz]))) if nz.any() else float("nan")
    return MetricComparison(name, higher, a, b, prefers, valid, accuracy, d, rel, int(ties.sum()))


def _check_case_labels(values_a: Mapping[str, Any], values_b: Mapping[str, Any]) -> None:
    """ValueError when labelled per-case values (a pandas ``Series``' index) name different cases, or in another order.

    The values are paired by position; a Series indexed by case id read from another table (sorted otherwise, or with
    other cases left out) would pair case ``c1`` of map a with ``c3`` of map b without a word
    (:func:`~monai_unc._utils.check_case_labels`).
    """
    check_case_labels(
        [(f"{side}[{n!r}]", v) for side, values in (("values_a", values_a), ("values_b", values_b))
         for n, v in values.items()]
    )


def compare_metric_values(
    values_a: Mapping[str, Any],
    values_b: Mapping[str, Any],
    higher_is_better: Mapping[str, bool] | bool,
    alpha: float = 0.05,
    exact: bool = True,
) -> UncertaintyComparison:
    """The Zeevi et al. statistics on precomputed per-case metric values (``name -> (n_cases,)`` arrays).

    See the module docstring for the definitions.

    Args:
        values_a: ``{name: (n_cases,) values}`` for map a (numpy arrays, lists, pandas ``Series`` or torch tensors on
            any device, as the per-case metrics return them).
        values_b: the same names for map b, the same cases in the same order (paired by position; pandas ``Series``
            must carry one index, which is checked, not used to align).
        higher_is_better: direction per name, or one bool for all.
        alpha: significance level for :meth:`UncertaintyComparison.significantly_better`.
        exact: exact binomial McNemar test (default) or the chi-square approximation.

    Returns:
        :class:`UncertaintyComparison`; a metric whose Cohen's d is undefined (fewer than two valid cases, or
        constant values) has ``cohens_d`` NaN, with a ``UserWarning``.

    Raises:
        ValueError: the two mappings hold different metrics or lengths, a value array is not 1-D, ``alpha`` is not
            in (0, 1), a metric has no direction, or labelled values (pandas ``Series``) carry different indexes (the
            cases are paired by position: align them first).
        TypeError: a direction, or ``exact``, is not a bool.

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics import compare_metric_values
        >>> rng = np.random.default_rng(0)
        >>> good = {"AUC-ROC": 0.8 + 0.1 * rng.random(20), "AvU": 0.7 + 0.1 * rng.random(20)}
        >>> poor = {"AUC-ROC": 0.7 + 0.1 * rng.random(20), "AvU": 0.72 + 0.1 * rng.random(20)}
        >>> res = compare_metric_values(good, poor, higher_is_better=True)
        >>> {name: round(m.accuracy, 2) for name, m in res.metrics.items()}
        {'AUC-ROC': 1.0, 'AvU': 0.25}
        >>> round(res.cochran_p, 4)
        0.0001
    """
    return _compare_values(values_a, values_b, higher_is_better, alpha, exact, stacklevel=3)


def _compare_values(
    values_a: Mapping[str, Any],
    values_b: Mapping[str, Any],
    higher_is_better: Mapping[str, bool] | bool,
    alpha: float,
    exact: bool,
    stacklevel: int,
) -> UncertaintyComparison:
    """:func:`compare_metric_values`; its warnings point ``stacklevel`` frames up, at the user's call.

    Found by hostile testing: the warnings (a metric not finite on some cases, Cohen's d undefined, no valid case for
    Cochran's Q) pointed into this module, not at the line of the study that called it.
    """
    names = list(values_a)
    if set(names) != set(values_b):
        raise ValueError(
            f"values_a and values_b must hold the same metrics, got {sorted(values_a)} / {sorted(values_b)}"
        )
    if not names:
        raise ValueError("no metric to compare")
    alpha = _check_alpha(alpha)
    exact = check_bool(exact, "exact")
    directions = _directions(names, higher_is_better, {}, "higher_is_better has no entry for metric {name!r}")
    _check_case_labels(values_a, values_b)
    metrics = {}
    for n in names:  # a loop, not a comprehension: a comprehension is one more frame for the warnings (Python < 3.12)
        metrics[n] = _one_metric(
            n,
            _real(values_a[n], f"values_a[{n!r}]"),
            _real(values_b[n], f"values_b[{n!r}]"),
            directions[n],
            stacklevel + 1,
        )
    sizes = {m.values_a.size for m in metrics.values()}
    if len(sizes) != 1:
        raise ValueError(f"every metric must have one value per case for the same cases, got lengths {sorted(sizes)}")
    k = len(names)
    p_raw = np.full((k, k), np.nan)
    for i in range(k):
        for j in range(i + 1, k):
            mi, mj = metrics[names[i]], metrics[names[j]]
            both = mi.valid & mj.valid
            if not both.any():  # no case to compare on: undefined, not "no difference" (p = 1)
                warnings.warn(
                    f"compare: metrics {names[i]!r} and {names[j]!r} share no valid case; their McNemar p-value is "
                    "undefined (NaN)",
                    UserWarning,
                    stacklevel=stacklevel,
                )
                continue
            p_raw[i, j] = p_raw[j, i] = mcnemar_test(mi.prefers_a[both], mj.prefers_a[both], exact=exact)
    iu = np.triu_indices(k, 1)
    p_holm = np.full((k, k), np.nan)
    if iu[0].size:
        adj = holm_correction(p_raw[iu])
        p_holm[iu] = adj
        p_holm[(iu[1], iu[0])] = adj
    # a metric without any valid case (e.g. PAvPU with windows larger than the maps) is left out of Cochran's Q
    # instead of making it undefined for every metric (found by hostile review 59)
    in_q = [n for n in names if metrics[n].valid.any()]
    if 2 <= len(in_q) < k:
        warnings.warn(f"compare: Cochran's Q is over the {len(in_q)} metrics with valid cases; left out, without any: "
                      f"{[n for n in names if n not in in_q]}", UserWarning, stacklevel=stacklevel)
    all_valid = np.logical_and.reduce([metrics[n].valid for n in in_q]) if in_q else np.zeros(0, dtype=bool)
    outcomes = np.stack([metrics[n].prefers_a[all_valid] for n in in_q], axis=1) if in_q else np.zeros((0, 0))
    if len(in_q) >= 2 and outcomes.shape[0] > 0:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            q, qp, df = cochrans_q(outcomes)
        for w in caught:  # at the user's call, not at this line
            warnings.warn(w.message, w.category, stacklevel=stacklevel)
    else:
        if len(in_q) >= 2:
            warnings.warn("compare: no case is valid for every metric; Cochran's Q is undefined (NaN)", UserWarning,
                          stacklevel=stacklevel)
        elif k >= 2:
            warnings.warn(f"compare: {len(in_q)} of the {k} metrics have a valid case; Cochran's Q needs two and is "
                          "undefined (NaN)", UserWarning, stacklevel=stacklevel)
        # one metric: no Q to compute (NaN, as the McNemar matrix is empty), nothing degenerate to warn about
        q, qp, df = float("nan"), float("nan"), max(len(in_q) - 1, 0)
    return UncertaintyComparison(names, metrics, p_raw, p_holm, q, qp, df, alpha)


# --------------------------------------------------------------------------------------------------------
# the protocol on maps
# --------------------------------------------------------------------------------------------------------


def _case_list(x: Any, name: str) -> list[Any]:
    """A batch ``(B, 1, *spatial)`` / ``(B, *spatial)`` array or a sequence of per-case arrays -> list."""
    if isinstance(x, (np.ndarray, torch.Tensor)):
        if x.ndim < 3:
            raise ValueError(
                f"{name} must be a batch (B, [1,] *spatial) or a list of per-case maps, got {tuple(x.shape)}"
            )
        return [x[i] for i in range(x.shape[0])]
    if isinstance(x, Sequence) and not isinstance(x, str):
        return list(x)
    raise TypeError(f"{name} must be a batch array or a sequence of per-case arrays, got {type(x).__name__}")


def _spacing_array(spacing: Any) -> np.ndarray | None:
    """``spacing`` as a float array (per axis, or one row per case), or None for one number (passed on as it is).

    In earlier versions the float cast parsed text rows (``[["1", "1"]] * 3`` was scored as 1 mm), dropped the
    imaginary part of complex ones with a ``ComplexWarning``, and rows of different lengths failed with numpy's
    "inhomogeneous shape", naming no argument.
    """
    if isinstance(spacing, (int, float, np.integer, np.floating)):  # a bool too: each metric checks its spacing
        return None
    try:
        raw = np.asarray(_host(spacing, "spacing"))
    except ValueError:
        raise ValueError(f"spacing must be a number, one number per axis or one row per case (mm) of one length, got "
                         f"{spacing!r}") from None
    if raw.dtype.kind not in "iuf" or holds_bool(spacing):  # [True, 1.0] is the float array [1.0, 1.0]
        raise TypeError(f"spacing must hold numbers (mm per axis), got {spacing!r}")
    return raw.astype(np.float64)


def _squeeze_channel(x: Any, spacing: Any = None) -> Any:
    """Drop a leading singleton channel: ``(1, *spatial) -> (*spatial)`` for 2D/3D maps.

    Not when ``spacing`` (the case's) holds three values and ``x`` has three axes: ``x`` is then a 3-D case of one
    slice, whose first axis is spatial (earlier versions read such a case as 2-D and refused its three spacing
    values). Four values do not make a 4-D case of ``(1, *spatial)``: the maps are 2-D or 3-D.
    """
    if x.ndim in (3, 4) and x.shape[0] == 1 and not (np.ndim(spacing) == 1 and len(spacing) == x.ndim == 3):
        return x[0]
    return x


@deprecated_arg_names({"preds": "pred", "targets": "target"})
def compare_uncertainty_maps(
    metric_fns: Mapping[str, MetricFn | MetricSpec] | Sequence[str] | None,
    maps_a: Any,
    maps_b: Any,
    higher_is_better: Mapping[str, bool] | bool | None = None,
    *,
    pred: Any,
    target: Any,
    spacing: Any = 1.0,
    alpha: float = 0.05,
    exact: bool = True,
) -> UncertaintyComparison:
    """Compare two sets of uncertainty maps of the same cases with the protocol of Zeevi et al. (Table 1).

    Args:
        metric_fns: ``None`` for every metric of :func:`uncertainty_map_metrics`; a list of names from it; or a mapping
            ``name -> fn`` (or :class:`MetricSpec`) with ``fn(uncertainty, pred, target, spacing=...) -> float``
            evaluated on one case (maps ``(*spatial)``).
        maps_a: uncertainty maps per case: a batch ``(B, 1, *spatial)`` or a list of ``(*spatial)`` /
            ``(1, *spatial)`` arrays (cases may differ in shape in a list).
        maps_b: the other set of maps of the same cases.
        higher_is_better: direction per metric name (or one bool); defaults to the registry's for built-in
            names and is required for custom functions.
        pred: predicted label maps of the same cases (batch or list), shared by both sets of maps (formerly
            ``preds``).
        target: reference label maps of the same cases (formerly ``targets``).
        spacing: voxel size in mm: one number (isotropic) or one number per spatial axis (a flat sequence, e.g.
            ``(1.0, 1.0, 2.5)``), for every case; or one row per case, ``(n_cases, ndim)`` (e.g.
            ``[(s, s, s) for s in sizes]``). A flat sequence is always one value per axis, also when its length
            equals the number of cases: a spacing per case is given as rows, never as one number per case.
        alpha: significance level for :meth:`UncertaintyComparison.significantly_better`.
        exact: exact binomial McNemar test (default) or the chi-square approximation.

    Returns:
        :class:`UncertaintyComparison` (accuracy, Cohen's d and mean relative difference per metric, McNemar
        p-values raw and Holm-adjusted, Cochran's Q); ``.to_markdown()`` prints a Table-1 style summary.

    Raises:
        TypeError: ``metric_fns`` is one string (give a list), ``higher_is_better`` is not None, a bool or a
            mapping, one of its directions is not a bool, or ``exact`` is not a bool.
        ValueError: unknown metric names, a custom metric without a direction, cases that do not match, ``alpha``
            not in (0, 1), or a ``spacing`` whose number of rows is not the number of cases, or whose values per
            axis are not one per spatial axis of a case (one number per case, for instance).

    Example:
        >>> import torch
        >>> from monai_unc.metrics import compare_uncertainty_maps
        >>> _ = torch.manual_seed(0)
        >>> target = torch.zeros(6, 8, 8, dtype=torch.long)
        >>> target[:, 2:6, 2:6] = 1
        >>> pred = target.clone()
        >>> pred[:, 2:6, 6] = 1  # a wrong column next to the object
        >>> error = (pred != target).float()[:, None]
        >>> good = 0.3 * error + 0.7 * torch.rand(6, 1, 8, 8)  # errors a little more uncertain
        >>> poor = 0.2 * error + 0.8 * torch.rand(6, 1, 8, 8)
        >>> res = compare_uncertainty_maps(["AUC-ROC", "AvU", "VOXEL_ACC"], good, poor, pred=pred, target=target)
        >>> {name: round(m.accuracy, 3) for name, m in res.metrics.items()}
        {'AUC-ROC': 0.833, 'AvU': 0.667, 'VOXEL_ACC': 1.0}
        >>> round(res.cochran_p, 4)
        0.3679
    """
    _check_alpha(alpha)  # before the metrics are computed
    if isinstance(metric_fns, (str, bytes)):
        # found by hostile testing: "BUC" was read as the names B, U, C ("unknown metric name(s) ['B', 'U', 'C']")
        raise TypeError(f"metric_fns must be None, a list of names or a mapping, got the string {metric_fns!r}; "
                        f"pass [{metric_fns!r}] for one metric")
    exact = check_bool(exact, "exact")
    # every built-in name, UCE included (found by hostile testing: {"UCE": fn} had no default direction, while
    # {"SPACE": fn} took the registry's, because the registry was built without UCE unless UCE was asked for by name)
    registry = uncertainty_map_metrics()
    specs: dict[str, MetricSpec | MetricFn]
    if metric_fns is None:
        specs = dict(registry)
    elif isinstance(metric_fns, Mapping):
        specs = dict(metric_fns)
    else:
        names = list(metric_fns)
        unknown = [n for n in names if n not in registry]
        if unknown:
            raise ValueError(f"unknown metric name(s) {unknown}; choose from {list(registry)}")
        specs = {n: registry[n] for n in names}
    if not specs:
        raise ValueError("metric_fns selects no metric")

    if higher_is_better is not None and not isinstance(higher_is_better, (bool, np.bool_, Mapping)):
        # found by hostile testing: "False", 0 or [False] fell through to the registry's directions without a word
        raise TypeError(f"higher_is_better must be None, a bool or a mapping name -> bool, got {higher_is_better!r}")
    defaults: dict[str, Any] = {}
    fns: dict[str, MetricFn] = {}
    for n, spec in specs.items():
        if isinstance(spec, MetricSpec):
            fns[n], defaults[n] = spec.fn, spec.higher_is_better
        elif callable(spec):
            fns[n] = spec
            defaults[n] = registry[n].higher_is_better if n in registry else None
        else:
            raise TypeError(f"metric_fns[{n!r}] must be callable or a MetricSpec, got {type(spec).__name__}")
    directions = _directions(list(specs), {} if higher_is_better is None else higher_is_better, defaults,
                             "higher_is_better is needed for the custom metric {name!r}")

    a_list, b_list = _case_list(maps_a, "maps_a"), _case_list(maps_b, "maps_b")
    p_list, t_list = _case_list(pred, "pred"), _case_list(target, "target")
    n_cases = len(a_list)
    if not (len(b_list) == len(p_list) == len(t_list) == n_cases):
        raise ValueError(
            f"maps_a, maps_b, pred and target must hold the same cases, got {n_cases}, {len(b_list)}, "
            f"{len(p_list)}, {len(t_list)}"
        )
    if n_cases == 0:
        raise ValueError("no case to compare")
    sp_arr = _spacing_array(spacing)
    per_case_spacing = sp_arr is not None and sp_arr.ndim == 2
    if per_case_spacing and sp_arr.shape[0] != n_cases:
        raise ValueError(f"spacing has {sp_arr.shape[0]} rows but there are {n_cases} cases")

    values_a = {n: np.empty(n_cases) for n in fns}
    values_b = {n: np.empty(n_cases) for n in fns}
    for i in range(n_cases):
        sp = tuple(sp_arr[i]) if per_case_spacing else spacing
        ua, ub = _squeeze_channel(a_list[i], sp), _squeeze_channel(b_list[i], sp)
        p, t = _squeeze_channel(p_list[i], sp), _squeeze_channel(t_list[i], sp)
        if np.ndim(sp) == 1 and len(sp) not in {x.ndim for x in (ua, ub, p, t)}:
            # found by review: one number per case was refused for 2 cases, failed on the maps' shapes for 4 and
            # was read as the spacing (1, 2, 3) of every case for 3 cases of 3-D maps: a flat spacing is per axis
            what = f"spacing row {i} has" if per_case_spacing else "spacing has"
            raise ValueError(
                f"{what} {len(sp)} values but case {i} has {p.ndim} spatial axes: give one number, one number per "
                f"spatial axis for every case, or one row per case ((n_cases, {p.ndim}), e.g. [(s,) * {p.ndim} for s "
                "in sizes] for isotropic voxels of each case's size s)"
            )
        if tuple(ua.shape) != tuple(ub.shape) or tuple(ua.shape) != tuple(p.shape) or tuple(p.shape) != tuple(t.shape):
            raise ValueError(
                f"case {i}: maps and labels must share one spatial shape, got {tuple(ua.shape)}, {tuple(ub.shape)}, "
                f"{tuple(p.shape)}, {tuple(t.shape)}"
            )
        for n, fn in fns.items():
            values_a[n][i] = float(fn(ua, p, t, spacing=sp))
            values_b[n][i] = float(fn(ub, p, t, spacing=sp))
    # four frames up: this function, its deprecated-argument wrapper, the caller
    return _compare_values(values_a, values_b, directions, alpha, exact, stacklevel=4)
