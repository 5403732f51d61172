"""Streaming, mergeable sufficient statistics of N probability samples.

Memory does not grow with the number of samples: per voxel we keep the running (weighted) sums

    sum_w            total weight (a scalar)
    sum_p[c]         sum_s w_s p_s[c]            -> mean probabilities (C channels)
    sum_h            sum_s w_s H(p_s)            -> expected entropy (1 channel)
    sum_p2[c]        sum_s w_s p_s[c]^2          -> variance (C channels, only if ``track_variance``)

and derive every measure at the end: PE = H(mean p), EE = sum_h / sum_w, MI = PE - EE, max-softmax =
1 - max_c mean p, variance = mean_c (E[p^2] - E[p]^2). Merging two SampleStats adds the sums; the result equals
the statistics of the pooled samples.

Multi-label (region-based, sigmoid) models, ``multilabel=True``: every channel is an independent Bernoulli
variable; ``sum_h`` then has C channels (the per-channel binary entropies ``H_b(p_s[c])``) and every measure is
per channel (:mod:`monai_unc.measures`), so memory stays flat in the number of samples as for softmax models.

Precision choice: the sums are kept in float64 by default (``accum_dtype``); each sample's entropy is
evaluated in the precision of its probabilities before it is added. MI and variance are
differences of nearly equal quantities (PE - EE; E[p^2] - E[p]^2): in float32 the cancellation leaves
relative noise of ~1e-7 * S in regions where MI or the variance is tiny, which shows as speckle in maps
and breaks exact identities (MI ~ 0 for identical ensemble members). Float64 sums cost 2x the memory of
float32 sums for the statistics only (never for the samples); pass ``accum_dtype=torch.float32`` on
memory-bound GPUs. Measures are returned in the dtype of the probabilities that were fed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from ._utils import check_finite, check_probabilities, check_unit_interval, to_tensor
from .keys import UncertaintyKeys
from .measures import (
    entropy_map_t,
    max_prob_uncertainty_t,
    mutual_information_from_entropies,
    variance_from_moments,
)

__all__ = ["SampleStats", "ALL_MEASURES"]

K = UncertaintyKeys

#: every measure SampleStats can derive (``variance`` needs ``track_variance=True``)
ALL_MEASURES = (
    K.PRED,
    K.PREDICTIVE_ENTROPY,
    K.EXPECTED_ENTROPY,
    K.MUTUAL_INFORMATION,
    K.ONE_MINUS_MAX_PROB,
    K.VARIANCE,
)


class SampleStats:
    """Running weighted sums of probability samples ``(B, C, *spatial)``; see the module docstring.

    Args:
        track_variance: also keep the sum of squares (C more channels) to report ``variance``.
        accum_dtype: dtype of the running sums (float64 by default, see the module docstring).
        validate: check every update is a finite probability map summing to 1 over classes (in [0, 1] for
            ``multilabel``).
        multilabel: channels are independent Bernoulli variables (sigmoid per region, ``C >= 1``); every measure
            is then per channel, ``(B, C, *spatial)``.

    Example::

        stats = SampleStats()
        for _ in range(30):
            stats.update(torch.softmax(net(x), 1))
        maps = stats.measures()      # dict keyed by UncertaintyKeys
    """

    def __init__(
        self,
        track_variance: bool = True,
        accum_dtype: torch.dtype = torch.float64,
        validate: bool = True,
        multilabel: bool = False,
    ) -> None:
        if not accum_dtype.is_floating_point:
            raise TypeError(f"accum_dtype must be a floating point dtype, got {accum_dtype}")
        self.multilabel = bool(multilabel)
        self.track_variance = bool(track_variance)
        self.accum_dtype = accum_dtype
        self.validate = bool(validate)
        self.sum_w: float = 0.0
        self.num_updates: int = 0
        self.sum_p: torch.Tensor | None = None
        self.sum_h: torch.Tensor | None = None
        self.sum_p2: torch.Tensor | None = None
        self.out_dtype: torch.dtype | None = None

    # ------------------------------------------------------------------ accumulation
    def update(self, probs: torch.Tensor, weight: float = 1.0) -> SampleStats:
        """Add one sample ``(B, C, *spatial)`` of probabilities with a positive scalar ``weight``."""
        p = to_tensor(probs, "probs")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise TypeError(f"weight must be a positive number, got {type(weight).__name__}")
        if not (weight > 0 and weight < float("inf")):
            raise ValueError(f"weight must be positive and finite, got {weight}")
        if self.validate:
            (check_unit_interval if self.multilabel else check_probabilities)(p, "probs")
        elif p.ndim < 3 or p.shape[1] < (1 if self.multilabel else 2):
            c = "C>=1" if self.multilabel else "C>=2"
            raise ValueError(f"probs must have shape (B, {c}, *spatial), got {tuple(p.shape)}")
        if self.sum_p is not None and p.shape != self.sum_p.shape:
            raise ValueError(
                f"probs shape {tuple(p.shape)} does not match the shape of earlier samples {tuple(self.sum_p.shape)}"
            )
        pa = p.to(self.accum_dtype)
        # the per-sample entropy is evaluated in the input's precision (relative error ~1e-7 in float32, the
        # precision of the probabilities themselves) and summed in accum_dtype: the log is the costliest step
        h = entropy_map_t(p if p.is_floating_point() else pa, 1, False, self.multilabel)
        w = float(weight)
        if self.sum_p is None:
            self.out_dtype = p.dtype
            self.sum_p = pa * w if w != 1.0 else pa.clone()
            self.sum_h = h.to(self.accum_dtype) * w
            if self.track_variance:
                self.sum_p2 = pa * pa * w
        else:
            self.sum_p.add_(pa, alpha=w)
            self.sum_h.add_(h, alpha=w)
            if self.track_variance:
                self.sum_p2.addcmul_(pa, pa, value=w)
        self.sum_w += w
        self.num_updates += 1
        return self

    def merge(self, other: SampleStats) -> SampleStats:
        """Add the sums of ``other`` into ``self`` (pooled statistics); returns ``self``."""
        if not isinstance(other, SampleStats):
            raise TypeError(f"other must be a SampleStats, got {type(other).__name__}")
        if other.multilabel != self.multilabel:
            raise ValueError(
                f"cannot merge multilabel={other.multilabel} statistics into multilabel={self.multilabel} statistics"
            )
        if other.sum_p is None:
            return self
        if self.sum_p is None:
            self.track_variance = self.track_variance and other.track_variance
            self.sum_w, self.num_updates, self.out_dtype = other.sum_w, other.num_updates, other.out_dtype
            self.sum_p = other.sum_p.to(self.accum_dtype).clone()
            self.sum_h = other.sum_h.to(self.accum_dtype).clone()
            self.sum_p2 = other.sum_p2.to(self.accum_dtype).clone() if self.track_variance else None
            return self
        if other.sum_p.shape != self.sum_p.shape:
            raise ValueError(
                f"cannot merge statistics of shape {tuple(other.sum_p.shape)} into {tuple(self.sum_p.shape)}"
            )
        self.sum_p.add_(other.sum_p.to(self.sum_p))
        self.sum_h.add_(other.sum_h.to(self.sum_h))
        if self.track_variance:
            if other.sum_p2 is None:
                self.track_variance, self.sum_p2 = False, None
            else:
                self.sum_p2.add_(other.sum_p2.to(self.sum_p2))
        self.sum_w += other.sum_w
        self.num_updates += other.num_updates
        return self

    @classmethod
    def from_moments(
        cls,
        mean: torch.Tensor,
        mean_entropy: torch.Tensor,
        mean_sq: torch.Tensor | None = None,
        count: float = 1.0,
        num_updates: int | None = None,
        out_dtype: torch.dtype | None = None,
        multilabel: bool = False,
    ) -> SampleStats:
        """Rebuild statistics from per-voxel means (e.g. after sliding-window stitching).

        ``mean`` ``(B, C, *spatial)``, ``mean_entropy`` ``(B, 1, *spatial)`` (``(B, C, *spatial)`` for
        ``multilabel``), optional ``mean_sq`` like ``mean``; ``count`` is the total weight the means stand for, so
        that merging stays exact.
        """
        if not count > 0:
            raise ValueError(f"count must be positive, got {count}")
        check_finite(mean, "mean")
        stats = cls(
            track_variance=mean_sq is not None,
            accum_dtype=torch.promote_types(mean.dtype, torch.float32),
            multilabel=multilabel,
        )
        stats.out_dtype = out_dtype or mean.dtype
        stats.sum_w = float(count)
        stats.num_updates = int(num_updates if num_updates is not None else round(count))
        stats.sum_p = mean.to(stats.accum_dtype) * count
        stats.sum_h = mean_entropy.to(stats.accum_dtype) * count
        stats.sum_p2 = mean_sq.to(stats.accum_dtype) * count if mean_sq is not None else None
        return stats

    # ------------------------------------------------------------------ results
    @property
    def count(self) -> float:
        """Total weight of the samples seen (equals the number of samples for unit weights)."""
        return self.sum_w

    def _require(self) -> None:
        if self.sum_p is None:
            raise ValueError("SampleStats is empty: call update() with at least one sample first")

    @property
    def mean(self) -> torch.Tensor:
        """Mean probabilities ``(B, C, *spatial)`` in the accumulation dtype."""
        self._require()
        return self.sum_p / self.sum_w

    def moments(self) -> dict[str, torch.Tensor]:
        """Per-voxel means: ``pred`` (C), ``expected_entropy`` (1; C for ``multilabel``) and, if tracked,
        ``mean_sq`` (C).

        These are what a sliding-window callable returns: convex combinations of them stay valid.
        """
        self._require()
        out = {K.PRED.value: self.sum_p / self.sum_w, K.EXPECTED_ENTROPY.value: self.sum_h / self.sum_w}
        if self.track_variance:
            out["mean_sq"] = self.sum_p2 / self.sum_w
        return out

    def measures(self, keys: Iterable[str] | None = None, normalize: bool = False) -> dict[str, torch.Tensor]:
        """Derive the requested measures (default: all available) as ``dict[str, Tensor]``.

        ``pred`` is ``(B, C, *spatial)``, every other map ``(B, 1, *spatial)`` (``(B, C, *spatial)`` for
        ``multilabel``). ``normalize=True`` divides the entropies by ``log C`` (``log 2`` for ``multilabel``).
        Raises ``ValueError`` for unknown keys or ``variance`` without ``track_variance``.
        """
        self._require()
        wanted = [K(k).value for k in (keys if keys is not None else self.available_keys())]
        if K.SAMPLES.value in wanted:
            raise ValueError("SampleStats does not keep samples; use an inferer with keep_samples=True")
        if K.VARIANCE.value in wanted and not self.track_variance:
            raise ValueError("variance was requested but these statistics were built with track_variance=False")
        return derive_measures(
            self.moments(), wanted, normalize=normalize, out_dtype=self.out_dtype, multilabel=self.multilabel
        )

    def available_keys(self) -> list[str]:
        return [k.value for k in ALL_MEASURES if k != K.VARIANCE or self.track_variance]

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Sums and counts, e.g. for ``torch.distributed.all_reduce`` of the tensors (sum)."""
        self._require()
        state = {"sum_w": self.sum_w, "num_updates": self.num_updates, "sum_p": self.sum_p, "sum_h": self.sum_h,
                 "out_dtype": str(self.out_dtype).replace("torch.", ""), "multilabel": self.multilabel}
        if self.track_variance:
            state["sum_p2"] = self.sum_p2
        return state

    def load_state_dict(self, state: Mapping) -> SampleStats:
        self.sum_w = float(state["sum_w"])
        self.num_updates = int(state["num_updates"])
        self.sum_p = state["sum_p"].to(self.accum_dtype)
        self.sum_h = state["sum_h"].to(self.accum_dtype)
        self.track_variance = "sum_p2" in state
        self.sum_p2 = state["sum_p2"].to(self.accum_dtype) if self.track_variance else None
        self.out_dtype = getattr(torch, state.get("out_dtype", "float32"))
        self.multilabel = bool(state.get("multilabel", False))
        return self

    def __repr__(self) -> str:
        shape = None if self.sum_p is None else tuple(self.sum_p.shape)
        return (
            f"SampleStats(count={self.sum_w:g}, shape={shape}, track_variance={self.track_variance}, "
            f"multilabel={self.multilabel})"
        )


def derive_measures(
    moments: Mapping[str, torch.Tensor],
    keys: Iterable[str],
    normalize: bool = False,
    out_dtype: torch.dtype | None = None,
    multilabel: bool = False,
) -> dict[str, torch.Tensor]:
    """Measures from per-voxel means ``{pred, expected_entropy[, mean_sq][, window_disagreement]}`` (see
    :meth:`SampleStats.moments`).

    This is where the decomposition is evaluated once for every inferer, stitched or not:
    PE = H(pred), EE = expected_entropy, MI = max(PE - EE, 0), one_minus_max_prob = 1 - max_c pred,
    variance = mean_c (mean_sq - pred^2). When ``moments`` holds ``window_disagreement`` (WD, the part of PE
    that comes from overlapping sliding windows disagreeing, computed by the inferer), MI = max(PE - EE - WD, 0)
    and WD can be asked for as a map. ``multilabel``: per-channel Bernoulli measures (:mod:`monai_unc.measures`),
    every map ``(B, C, *spatial)``; ``normalize`` divides by ``log 2`` instead of ``log C``.
    """
    mean = moments[K.PRED.value]
    ee = moments[K.EXPECTED_ENTROPY.value]
    wd = moments.get(K.WINDOW_DISAGREEMENT.value)
    n_classes = 2 if multilabel else mean.shape[1]
    keys = [K(k).value for k in keys]
    out: dict[str, torch.Tensor] = {}
    pe = None
    if K.PREDICTIVE_ENTROPY.value in keys or K.MUTUAL_INFORMATION.value in keys:
        pe = entropy_map_t(mean, 1, False, multilabel)
    for key in keys:
        if key == K.PRED.value:
            val = mean
        elif key == K.PREDICTIVE_ENTROPY.value:
            val = pe
        elif key == K.EXPECTED_ENTROPY.value:
            val = ee
        elif key == K.MUTUAL_INFORMATION.value:
            val = mutual_information_from_entropies(pe, ee, wd, validate=False)
        elif key == K.WINDOW_DISAGREEMENT.value:
            if wd is None:
                raise ValueError(
                    "window_disagreement is only available from an inferer with window_disagreement='separate'"
                )
            val = wd
        elif key == K.ONE_MINUS_MAX_PROB.value:
            val = max_prob_uncertainty_t(mean, multilabel)
        elif key == K.VARIANCE.value:
            if "mean_sq" not in moments:
                raise ValueError("variance needs the second moment 'mean_sq'")
            val = variance_from_moments(mean, moments["mean_sq"], multilabel, validate=False)
        else:
            raise ValueError(f"unknown measure {key!r}")
        if normalize and key in (
            K.PREDICTIVE_ENTROPY.value,
            K.EXPECTED_ENTROPY.value,
            K.MUTUAL_INFORMATION.value,
            K.WINDOW_DISAGREEMENT.value,
        ):
            val = val / torch.log(torch.tensor(float(n_classes), dtype=val.dtype, device=val.device))
        out[key] = val.to(out_dtype) if out_dtype is not None else val
    return out
