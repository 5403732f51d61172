"""MONAI ``CumulativeIterationMetric`` for the calibration metrics: a thin adapter over the confidence histogram."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from monai.metrics import CumulativeIterationMetric
from monai.utils import evenly_divisible_all_gather

from ..._utils import (
    buffer_device,
    check_bool,
    check_call_keywords,
    check_case_grid,
    check_integer,
    check_same_cases,
    distributed_world,
    main_rank_warnings,
    say_warning,
    sync_case_buffers,
    user_stacklevel,
    warn_nan,
)
from ..cumulative import counted_call
from .functional import CALIBRATION_METRICS, calibration_metrics_core, check_metric_names
from .histogram import DEFAULT_FINE_BINS, ConfidenceHistogram

__all__ = ["CalibrationMetric"]

#: values of ``y_pred`` looked at before the full check for a discretised prediction (one cheap pass decides)
_DISCRETE_PROBE = 4096


def _warn_if_discretised(y_pred: torch.Tensor) -> None:
    """Warn when every value of ``y_pred`` is 0 or 1: a discretised prediction, not probabilities.

    The habit of MONAI postprocessing, ``AsDiscreted(keys="pred", argmax=True, to_onehot=C)`` before ``MeanDice``,
    hands the metric one-hot masks, which pass as probabilities: the ECE becomes the error rate and the NLL
    ``-log(1e-15) = 34.5`` times it, without a word (found by hostile review). MONAI's ``compute_dice`` warns about the
    converse ("y_pred should be a binarized tensor"). A strided sample of the values decides first, so probabilities
    cost one small pass.
    """
    t = y_pred.detach()
    if t.numel() == 0:
        return

    def binary(x: torch.Tensor) -> bool:
        return bool(((x == 0) | (x == 1)).all())

    # views only (a reshape of a non-contiguous batch would copy it): every k-th value of the last axis, then, only
    # when the probe holds nothing but 0 and 1, every case in turn
    probe = t[..., :: max(1, min(t.shape[-1], t.numel() // _DISCRETE_PROBE))]
    if not binary(probe) or not all(binary(case) for case in t):
        return
    say_warning(  # held by CalibrationMetric.__call__ (said_once_per_call): once per call, at the user's line
        "CalibrationMetric: y_pred holds only 0 and 1 (a discretised prediction, e.g. after AsDiscreted(argmax=True, "
        "to_onehot=C)), not probabilities: the ECE family then measures the error rate and the NLL is 34.5 times it. "
        "Give the softmax probabilities (copy them before discretising, e.g. CopyItemsd('pred', names='seg'))",
        UserWarning,
        stacklevel=user_stacklevel(),
    )


class CalibrationMetric(CumulativeIterationMetric):
    """MONAI metric for the ECE family, NLL and Brier, a thin wrapper of :class:`ConfidenceHistogram`.

    Call it with ``y_pred`` probabilities ``(B, C, *spatial)`` (apply softmax first, e.g. with
    ``monai.transforms.Activations(softmax=True)``; a discretised ``y_pred`` holding only 0 and 1, such as the output of
    ``AsDiscrete(argmax=True, to_onehot=C)``, is scored as it is with a ``UserWarning``) and ``y`` labels
    ``(B, 1, *spatial)`` / ``(B, *spatial)`` or one-hot ``(B, C, *spatial)`` (one-hot exactly when ``y`` has the
    shape of ``y_pred``; reduced by argmax; a ``y`` of that shape that is not one-hot, such as overlapping region
    masks, soft labels or a voxel without a class, raises ``ValueError``).
    Each call adds the batch to a pooled histogram (constant memory:
    ``24 (C + 2) F`` bytes, 1.8 MiB for 3 classes) and buffers one row of per-case values ``(B, K)`` (``K =
    len(metrics)``, in the order of ``metrics``) that :meth:`get_buffer` gathers across ranks.

    :meth:`aggregate` returns ``{name: 0-dim float64 tensor}``. ``reduction="pooled"`` (default) computes each
    metric on the histogram pooled over all cases and ranks (the pooled histograms are all-gathered with
    MONAI's ``evenly_divisible_all_gather`` and summed); ``"mean"`` averages the per-case values (NaN cases
    skipped, with a ``UserWarning`` counting them). :attr:`histogram` gives the pooled :class:`ConfidenceHistogram`
    after :meth:`aggregate`.

    Args:
        num_classes: ``C``; inferred from the first ``y_pred`` when None.
        metrics: names from :data:`CALIBRATION_METRICS`.
        n_bins: equal-width bins of the ECE family (see :func:`ece`).
        min_bin_count: bins with fewer voxels are dropped (see :func:`ece`).
        n_fine_bins: fine bins of the histogram.
        reduction: ``"pooled"`` or ``"mean"``.
        include_background: ``False`` leaves channel 0 (the background) out of ``classwise_ece``: the mean of the
            per-class ECEs of classes ``1 ... C - 1``, per case and pooled, as MONAI's ``DiceMetric`` reads
            ``include_background``. The other metrics score every voxel's confidence as before.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import CalibrationMetric
        >>> _ = torch.manual_seed(0)
        >>> metric = CalibrationMetric(num_classes=3, metrics=("ece", "nll"), n_bins=5)
        >>> for _ in range(2):
        ...     probs = torch.softmax(torch.randn(1, 3, 4, 4, 4), dim=1)
        ...     _ = metric(y_pred=probs, y=torch.randint(0, 3, (1, 1, 4, 4, 4)))
        >>> {k: round(float(v), 4) for k, v in metric.aggregate().items()}
        {'ece': 0.2702, 'nll': 1.3811}
        >>> metric.get_buffer().shape
        torch.Size([2, 2])
    """

    def __init__(
        self,
        num_classes: int | None = None,
        metrics: Sequence[str] | str = CALIBRATION_METRICS,
        n_bins: int = 15,
        min_bin_count: int = 0,
        n_fine_bins: int = DEFAULT_FINE_BINS,
        reduction: str = "pooled",
        include_background: bool = True,
    ) -> None:
        super().__init__()
        check_integer(n_bins, "n_bins", 1)
        self.include_background = check_bool(include_background, "include_background")
        check_integer(min_bin_count, "min_bin_count", 0)
        if reduction not in ("pooled", "mean"):
            raise ValueError(f"reduction must be 'pooled' or 'mean', got {reduction!r}")
        self.metrics = check_metric_names(metrics)
        # found by hostile testing: num_classes=0 was read as "infer it" without a word, and a num_classes or
        # n_fine_bins of the wrong kind failed only at the first case, after its inference
        num_classes, n_fine_bins = ConfidenceHistogram.check_layout(num_classes, n_fine_bins)
        self.num_classes = num_classes
        self.n_bins, self.min_bin_count, self.n_fine_bins = n_bins, min_bin_count, n_fine_bins
        self.reduction = reduction
        self._hist: ConfidenceHistogram | None = None
        #: the histogram of the call being evaluated and its device, merged into ``_hist`` once its warnings are said
        self._staged: tuple[ConfidenceHistogram, torch.device] | None = None
        self.histogram: ConfidenceHistogram | None = None
        self._device: torch.device | None = None  # of the inputs: where the buffers and the gathered tables live
        # the warning that n_bins does not divide the fine bins is said once per metric object (review 68: it came at
        # the first update and again at aggregation); reset() keeps it, the binning does not change
        self._rounding_said = False

    def reset(self) -> None:
        """Clear the buffered per-case values and the histogram."""
        super().reset()
        self._hist = None
        self.histogram = None
        self._device = None

    def _table_device(self) -> torch.device:
        """The device of the reduced tables and values.

        The inputs' device; before any input, the current CUDA device when NCCL reduces across ranks (NCCL gathers
        CUDA tensors only), else the CPU (:func:`~monai_unc._utils.buffer_device`: also under a group of several
        backends such as ``cpu:gloo,cuda:nccl``, torch's default on a GPU machine and the package's own, whose
        backend name is not ``"nccl"``: a rank without data gathered CPU tables with the others' CUDA ones).
        """
        if self._device is not None:
            return self._device
        return buffer_device()

    @staticmethod
    def _labels(y: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        """``y`` as labels: one-hot (MONAI's ``(B, C, *spatial)``, the shape of ``y_pred``) reduced by argmax.

        Only a ``y`` of ``y_pred``'s shape is one-hot: a label map ``(B, *spatial)`` whose first spatial size happens
        to equal ``C`` is a label map (``(B, 1, *spatial)`` and ``(B, *spatial)`` are labels as they are).
        """
        if y.ndim >= 3 and tuple(y.shape) == tuple(y_pred.shape) and y.shape[1] > 1:
            # one-hot; torch has no argmax of a bool tensor (a bool one-hot raised from here; found by hostile testing)
            oh = y.to(torch.uint8) if y.dtype == torch.bool else y
            # exactly one 1 per voxel: the argmax of overlapping region masks (BraTS TC / WT / ET), of soft labels
            # or of an all-zero (unlabelled) voxel is no class, and merged the background with the first class
            # without a word (found by hostile review)
            binary = bool(((oh == 0) | (oh == 1)).all())
            if not binary or not bool((oh.sum(dim=1) == 1).all()):
                raise ValueError(
                    f"y has the shape of y_pred {tuple(y_pred.shape)} but is not one-hot (exactly one 1 per voxel, "
                    "the rest 0): " + ("values other than 0 and 1 (soft labels or probabilities)" if not binary
                                       else "voxels with no class or several (overlapping region masks such as BraTS "
                                       "TC / WT / ET, or unlabelled voxels)")
                    + "; give a label map (B, 1, *spatial), or score each region of a region-based model as a binary "
                    "task (monai_unc.regions.per_region)")
            return oh.argmax(dim=1)
        return y

    def __call__(self, y_pred: Any, y: Any = None, **kwargs: Any) -> Any:
        """Add a batch (see the class); a keyword argument raises ``TypeError``.

        None is read: ``mask=`` or ``weights=`` were ignored without a word, every voxel scored.

        Args:
            y_pred: probabilities ``(B, C, *spatial)`` (or a decollated list of ``(C, *spatial)``).
            y: labels ``(B, 1, *spatial)`` / ``(B, *spatial)`` or one-hot ``(B, C, *spatial)`` (or a list).
            **kwargs: none is read: a keyword raises ``TypeError``.

        Returns:
            The per-case values ``(B, K)`` of the batch.

        Warns:
            UserWarning: once for the call, at the caller's line: a discretised ``y_pred`` (only 0 and 1), and, once
                per metric object, ``n_bins`` not dividing the fine bins. In earlier versions they came at a line of
                MONAI's ``CumulativeIterationMetric`` (the discretised one once per item of a decollated list).
                Made an error by a warnings filter, the call raises before the batch enters the buffer and the
                pooled histogram.
        """
        check_call_keywords(self, kwargs)
        self._staged = None
        try:
            # the call's histogram enters the pooled one with its rows, after its warnings are said: a warning made
            # an error (warnings.simplefilter("error")) leaves both untouched (counted_call)
            out = counted_call(self, y_pred, y, on_count=self._add_staged)
        finally:
            self._staged = None
        # said now that the call went through (a refused call's warning is dropped with it, and said next time)
        self._rounding_said = self._rounding_said or self.n_fine_bins % self.n_bins != 0
        return out

    def _compute_list(self, y_pred: Any, y: Any = None, **kwargs: Any) -> torch.Tensor:
        """MONAI's evaluation of decollated lists, item by item, the whole call entering the histogram or none of it.

        Lists that hold different numbers of cases (MONAI's ``zip`` dropped the extra items of the longer one without a
        word) or none (an ``IndexError`` escaped) are refused (:func:`check_same_cases`). Every item is checked before
        any enters the pooled histogram: a refused item left the items before it in the histogram but not in the
        per-case buffer, so that ``reduction="pooled"`` counted cases of a failed call (found by hostile testing).
        """
        check_same_cases(y_pred, y)
        if y is None:
            raise ValueError("CalibrationMetric needs y (labels or one-hot labels)")
        parts = [self._evaluate(p.detach().unsqueeze(0), t.detach().unsqueeze(0)) for p, t in zip(y_pred, y)]
        call = self._pooled_table(parts[0][0].num_classes)
        for batch, _ in parts:  # a layout that differs between the items is refused here, before self._hist changes
            call.merge(batch)
        self._stage(call, parts[-1][1].device)
        return torch.cat([rows for _, rows in parts], dim=0)

    def _compute_tensor(self, y_pred: torch.Tensor, y: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        batch, rows = self._evaluate(y_pred, y)
        self._stage(batch, rows.device)
        return rows

    def _pooled_table(self, num_classes: int) -> ConfidenceHistogram:
        """An empty pooled histogram of this metric's layout."""
        return ConfidenceHistogram(
            num_classes, n_fine_bins=self.n_fine_bins, per_case=False, uncertainty="uce" in self.metrics
        )

    def _evaluate(self, y_pred: torch.Tensor, y: torch.Tensor | None) -> tuple[ConfidenceHistogram, torch.Tensor]:
        """The per-case histogram of a batch and its rows of per-case values ``(B, K)``; the metric is not changed."""
        if y is None:
            raise ValueError("CalibrationMetric needs y (labels or one-hot labels)")
        check_same_cases(y_pred, y)
        if y_pred.ndim < 3:
            raise ValueError(f"y_pred must have shape (B, C, *spatial), got {tuple(y_pred.shape)}")
        check_case_grid(y_pred, y)
        _warn_if_discretised(y_pred)
        n_cls = self.num_classes if self.num_classes is not None else int(y_pred.shape[1])
        batch = ConfidenceHistogram(
            n_cls, n_fine_bins=self.n_fine_bins, per_case=True, uncertainty="uce" in self.metrics
        )
        batch.update(y_pred, self._labels(y, y_pred))
        # NaN cases are reported at aggregation; the other warnings (n_bins not dividing the fine bins) reach the
        # caller (review 68: every UserWarning was silenced inside catch_warnings, a process-wide filter)
        vals = calibration_metrics_core(
            batch, self.metrics, n_bins=self.n_bins, min_bin_count=self.min_bin_count, per_case=True,
            include_background=self.include_background, nan_warning=False, rounding_warning=not self._rounding_said,
        )
        # the histogram's tables live on the CPU; the per-case rows follow the inputs' device (MONAI gathers the
        # buffers across ranks, and NCCL gathers CUDA tensors only)
        rows = [torch.as_tensor(vals[k], dtype=torch.float64) for k in self.metrics]
        return batch, torch.stack(rows, dim=1).to(y_pred.device)

    def _stage(self, table: ConfidenceHistogram, device: torch.device) -> None:
        """Keep the histogram of a call for :meth:`_add_staged`, once its warnings are said.

        A layout that differs from the pooled one's is refused here, before anything changes (and before the warnings
        are said).
        """
        if self._hist is not None:
            self._hist.check_mergeable(table)  # merge's own check, made before the warnings
        self._staged = (table, device)

    def _add_staged(self) -> None:
        """Merge the staged histogram of the call into the pooled one (run by :func:`counted_call`)."""
        if self._staged is None:  # a subclass that evaluates without staging: nothing to add
            return
        table, device = self._staged
        self._staged = None
        if self._hist is None:
            self._hist = self._pooled_table(table.num_classes)
        self._hist.merge(table)
        self._device = device

    def _synced_histogram(self) -> ConfidenceHistogram | None:
        """The pooled histogram of every rank, its tables on :meth:`_table_device`.

        Each table all-gathered (MONAI's ``evenly_divisible_all_gather``) and summed; a rank without data adds zeros
        (of the number of classes of the other ranks' cases when ``num_classes`` is not given). Ranks whose cases
        have different numbers of classes raise the same ``ValueError`` on every rank. None when no rank has a case
        (also with ``num_classes`` given: its tables of zeros scored NaN with one warning per metric about empty bins,
        not the warning that no case was evaluated).
        """
        device = self._table_device()
        has_data = self._hist is not None and len(self._hist) > 0
        n_classes = self._hist.num_classes if self._hist is not None and has_data else self.num_classes
        world = distributed_world()
        known = [n_classes] if has_data else []
        if world > 1:  # every rank learns the number of classes of the others' cases, before any table is gathered
            found: list[Any] = [None] * world
            dist.all_gather_object(found, n_classes if has_data else None)
            known = sorted({int(n) for n in found if n is not None})
            if len(known) > 1:
                raise ValueError(f"CalibrationMetric: the ranks' cases have different numbers of classes (by rank: "
                                 f"{found})")
            if not has_data and known:
                n_classes = known[0]
        if not known:  # no case on any rank (every rank knows it): no table to build
            return None
        if not has_data:
            n_rows, f = n_classes + 2, self.n_fine_bins
            counts = torch.zeros(1, n_rows, 2, f, dtype=torch.int64, device=device)
            sums = torch.zeros(1, n_rows, f, dtype=torch.float64, device=device)
            scalars = torch.zeros(1, 3, dtype=torch.float64, device=device)
            wc = counts.to(torch.float64)
        else:
            views = self._hist.views(per_case=False)  # (1, R, 2, F) ... (1, 3)
            counts, wc, sums, scalars = (t.to(device) for t in views)

        def gather_sum(t: torch.Tensor) -> torch.Tensor:
            return evenly_divisible_all_gather(t.contiguous(), concat=True).sum(0, keepdim=True)

        counts, sums, scalars, wcounts = gather_sum(counts), gather_sum(sums), gather_sum(scalars), gather_sum(wc)
        state: dict[str, Any] = {
            "num_classes": counts.shape[1] - 2, "n_fine_bins": self.n_fine_bins, "per_case": False,
            "uncertainty": "uce" in self.metrics, "case_ids": ["pooled"], "case_id_is_int": [False],
            "counts": counts, "sums": sums, "scalars": scalars,
        }  # fmt: skip
        if not torch.equal(wcounts, counts.to(torch.float64)):
            state["weighted_counts"] = wcounts
        hist = ConfidenceHistogram(
            counts.shape[1] - 2, self.n_fine_bins, per_case=False, uncertainty="uce" in self.metrics
        )
        return hist.load_state_dict(state)

    def _sync(self) -> None:
        """Gather the per-case buffers across ranks, a rank without cases included (:func:`sync_case_buffers`)."""
        sync_case_buffers(self)

    def _no_case(self) -> dict[str, torch.Tensor]:
        """``{name: NaN}`` with one ``UserWarning`` (rank 0): no case on any rank, e.g. after an empty epoch."""
        with main_rank_warnings():  # every rank knows that no rank has a case: rank 0 warns
            warn_nan("CalibrationMetric: no case was evaluated; every metric is undefined (NaN)", stacklevel=4)
        device = self._table_device()
        return {k: torch.tensor(math.nan, dtype=torch.float64, device=device) for k in self.metrics}

    def aggregate(self, reduction: str | None = None) -> dict[str, torch.Tensor]:
        """``{name: value}`` pooled over all cases and ranks, or the mean of per-case values.

        Args:
            reduction: ``"pooled"`` or ``"mean"``; default the constructor's.

        Returns:
            ``{name: 0-dim float64 tensor}`` in the order of ``metrics``. No case on any rank (before any update,
            e.g. after an empty epoch): NaN for every metric, with a ``UserWarning``.
        """
        # found by hostile testing: ``""`` fell back to the constructor's reduction without a word
        reduction = self.reduction if reduction is None else reduction
        if not isinstance(reduction, str) or reduction not in ("pooled", "mean"):
            raise ValueError(f"reduction must be 'pooled' or 'mean', got {reduction!r}")
        if reduction == "mean":
            data = self.get_buffer()
            if data is None:
                return self._no_case()
            with main_rank_warnings():  # the same gathered values on every rank: rank 0 warns
                out = {}
                for j, k in enumerate(self.metrics):
                    col = data[:, j]
                    ok = ~torch.isnan(col)
                    n_ok = int(ok.sum())
                    if 0 < n_ok < col.numel():  # the per-case warnings were held back for this (found by hostile
                        # testing: the mean of the defined cases was returned as the cohort's without a word)
                        warnings.warn(f"CalibrationMetric: {k} is NaN (undefined) for {col.numel() - n_ok} of "
                                      f"{col.numel()} cases; the mean is over the other {n_ok}", UserWarning,
                                      stacklevel=2)
                    out[k] = (col[ok].mean() if n_ok else
                              torch.tensor(warn_nan(f"{k}: every case is NaN"), dtype=col.dtype, device=col.device))
            return out
        self.histogram = self._synced_histogram()
        if self.histogram is None:
            return self._no_case()
        with main_rank_warnings():  # the same pooled histogram on every rank: rank 0 warns
            vals = calibration_metrics_core(
                self.histogram, self.metrics, n_bins=self.n_bins, min_bin_count=self.min_bin_count, per_case=False,
                include_background=self.include_background, rounding_warning=not self._rounding_said,
            )
        self._rounding_said = self._rounding_said or self.histogram.n_fine_bins % self.n_bins != 0
        device = self._table_device()  # the device of the inputs, as with reduction="mean"
        return {k: torch.tensor(v, dtype=torch.float64, device=device) for k, v in vals.items()}
