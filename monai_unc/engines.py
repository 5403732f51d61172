"""MONAI engines for uncertainty inferers: :class:`UncertaintyEvaluator` and the :class:`CaseScoresHandler`.

Every monai-unc inferer returns a dict ``{pred, predictive_entropy, mutual_information, ...}``
(:class:`~monai_unc.inferers.UncertaintyOutput`). A stock ``SupervisedEvaluator`` would store that dict under
``engine.state.output["pred"]``, where ``Activationsd(keys="pred")``, ``Invertd``, ``AsDiscreted`` and
``from_engine(["pred", "label"])`` no longer find a tensor. :class:`UncertaintyEvaluator` spreads it instead:

    engine.state.output = {"image": ..., "label": ..., "pred": <mean probabilities>,
                           "predictive_entropy": ..., "mutual_information": ..., ...}

before any postprocessing, decollation or handler sees the iteration. Each map is a ``MetaTensor`` carrying the
input's metadata, so after decollation ``SaveImaged(keys="mutual_information", ...)`` writes it with the input's
affine and file name, and ``Invertd(keys=[..., "mutual_information"], orig_keys="image", ...)`` resamples it to
the original grid. In an existing bundle, swapping ``inferer`` and ``evaluator#_target_`` is therefore enough
(docs/add_uncertainty_to_bundle.md).

``pred`` and the bundle's activation. Model Zoo postprocessing usually starts with
``Activationsd(keys="pred", softmax=True)`` because a plain inferer returns logits. Softmax applied to
probabilities would flatten them (argmax, and so the label map, is unchanged, but the saved probabilities and any
calibration metric would be wrong). With ``pred_format="auto"`` (default) the evaluator looks at its
postprocessing (the ``postprocessing`` argument, then MONAI ``PostProcessing`` handlers given in
``val_handlers``): if an ``Activationsd`` applies softmax to ``pred`` (or to a copy of it, ``CopyItemsd``) it
stores ``log(mean p)`` (clamped at the
smallest normal float), so that the bundle's softmax returns exactly the mean probabilities (``softmax(log p) =
p / sum p = p``); a sigmoid gets ``log(p_1 / p_0)`` (two-class outputs), so that sigmoid returns ``p_1``;
otherwise ``pred`` is the mean probabilities. Without such an ``Activationsd``, a ``Lambda`` or ``Lambdad`` acting on
``pred`` (or an ``Activationsd`` whose ``other`` function does, or a plain function in the postprocessing) runs a
function the evaluator cannot read: it stores
the probabilities and warns, since a softmax inside that function would flatten them; pass ``pred_format``
explicitly then.

Region-based (multi-label) models, e.g. the Model Zoo's BraTS bundle (``Activationsd(sigmoid=True)`` then
``AsDiscreted(threshold=0.5)`` on three channels TC, WT, ET): an inferer run with ``activation="sigmoid"`` on
``C >= 2`` channels returns per-channel mean probabilities (``UncertaintyOutput.multilabel``). With a sigmoid in
the postprocessing ``pred`` is then the per-channel logit of the mean, ``log p_c - log(1 - p_c)`` (each clamped at
the smallest normal float, so finite), which the bundle's sigmoid maps back to ``p_c``: the threshold, label
remapping and ``SaveImaged`` that follow run unchanged on the mean probabilities. A softmax in the postprocessing
of a multi-label output is refused (it would renormalise the regions against each other).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from monai.data import MetaTensor
from monai.engines import SupervisedEvaluator
from monai.engines.utils import IterationEvents
from monai.utils import CommonKeys as Keys

from ._utils import distributed_world, label_text, main_rank_warnings, require_ignite, warn_nan
from .io import write_csv
from .keys import UncertaintyKeys
from .metrics.casewise import IID_SHIFTS, ood_auroc_by_shift

__all__ = ["PRED_FORMATS", "UncertaintyEvaluator", "CaseScoresHandler", "find_pred_activation", "format_pred"]

K = UncertaintyKeys
#: accepted values of ``UncertaintyEvaluator(pred_format=...)``
PRED_FORMATS = ("auto", "probabilities", "log_probabilities", "binary_logit")


def _transforms_in_order(postprocessing: Any) -> Iterator[Any]:
    """``postprocessing`` and every transform it holds (a ``Compose``, possibly nested), in the order they run."""
    if postprocessing is None:
        return
    yield postprocessing
    for sub in getattr(postprocessing, "transforms", ()) or ():
        yield from _transforms_in_order(sub)


def _with_copies(postprocessing: Any, key: str) -> Iterator[tuple[Any, set[str]]]:
    """Each transform of ``postprocessing`` in order (:func:`_transforms_in_order`) with the keys that hold ``key``'s
    value when it runs: ``key`` and the copies ``CopyItemsd`` made of it (or of a copy) before.

    In earlier versions a postprocessing that keeps ``pred`` for the label map and applies the softmax to a
    copy (``CopyItemsd("pred", names="prob")``, ``Activationsd("prob", softmax=True)``) was read as applying no
    activation; the evaluator stored the mean probabilities and the softmax flattened them (1.0 became 0.708).
    """
    holders = {key}
    for t in _transforms_in_order(postprocessing):
        yield t, holders
        holders = _after_copies(t, holders)


def _after_copies(t: Any, keys: set[str]) -> set[str]:
    """The keys holding the values of ``keys`` after ``t``: a ``CopyItemsd`` adds the copies of ``keys`` (in the
    order its ``__call__`` names them: ``names[i * len(keys) + j]`` is copy ``i`` of ``keys[j]``) and drops the
    keys it overwrites with anything else; other transforms change nothing."""
    from monai.transforms import CopyItemsd

    if not isinstance(t, CopyItemsd):
        return keys
    sources, names = list(t.keys), list(t.names)
    copied = {names[i * len(sources) + j]: k for i in range(t.times) for j, k in enumerate(sources)
              if i * len(sources) + j < len(names)}
    return (keys - set(copied)) | {new for new, k in copied.items() if k in keys}


def find_pred_activation(postprocessing: Any, key: str = Keys.PRED) -> str | None:
    """The activation the first ``Activationsd`` acting on ``key`` applies in ``postprocessing`` (a ``Compose``,
    possibly nested, or a single transform): ``"softmax"``, ``"sigmoid"`` or ``None``.

    An ``Activationsd`` that lists ``key`` but applies nothing to it (no softmax, sigmoid or ``other``) is passed
    over: found by hostile review, ``Activationsd("pred")`` before ``Activationsd("pred", softmax=True)`` ended the
    search with ``None``, the evaluator stored probabilities, and the softmax flattened them (0.9 became 0.69).
    An ``Activationsd`` acting on a copy of ``key`` (``CopyItemsd``) counts as acting on ``key``.
    """
    from monai.transforms import Activationsd

    for t, holders in _with_copies(postprocessing, key):
        if isinstance(t, Activationsd):
            others = getattr(t, "other", (None,) * len(t.keys))
            for k, softmax, sigmoid, other in zip(t.keys, t.softmax, t.sigmoid, others):
                if k in holders and (softmax or sigmoid or other is not None):
                    return "softmax" if softmax else "sigmoid" if sigmoid else None
            # applies nothing to key: keep looking
    return None


def _opaque_pred_transform(postprocessing: Any, key: str = Keys.PRED) -> str | None:
    """The name of the first ``Lambda`` / ``Lambdad`` of ``postprocessing`` that may change ``key``, else None.

    Such a transform runs a function nobody can read from the outside: where :func:`find_pred_activation` finds no
    activation, it may apply the softmax or sigmoid that ``pred_format="auto"`` looks for, and then the stored
    probabilities would go through it a second time. So may an ``Activationsd`` whose ``other`` function acts on
    ``key``. A ``Lambdad`` whose result is dropped (``overwrite=False``) changes nothing; once an ``AsDiscreted``
    has made ``key`` a label map (``argmax``, ``threshold`` or ``rounding``), later functions see no probabilities.
    Copies of ``key`` (``CopyItemsd``) are read as ``key``: each until it is made a label map.
    A plain function (not a MONAI ``Transform``) counts as a ``Lambda``.
    """
    from monai.transforms import Activationsd, AsDiscreted, Lambda, Lambdad, Transform

    labelled: set[str] = set()
    for t, holders in _with_copies(postprocessing, key):
        live = holders - labelled
        if not live:
            return None
        if isinstance(t, AsDiscreted):
            # found by hostile review 58: a label remapping Lambdad after the argmax was warned about
            labelled |= {k for k, argmax, threshold, rounding in zip(t.keys, t.argmax, t.threshold, t.rounding)
                         if k in live and (argmax or threshold is not None or rounding is not None)}
            continue
        if isinstance(t, Activationsd) and any(
                k in live and other is not None for k, other in zip(t.keys, getattr(t, "other", ()))):
            # found by hostile review 58: Activationsd(other=softmax) flattened the probabilities without a word
            return f"Activationsd(keys={list(t.keys)}, other=...)"
        if isinstance(t, Lambdad) and any(k in live and not (isinstance(overwrite, bool) and not overwrite)
                                          for k, overwrite in zip(t.keys, t.overwrite)):
            return f"Lambdad(keys={list(t.keys)})"
        if isinstance(t, Lambda):  # a whole-dictionary function
            return "Lambda"
        if callable(t) and not isinstance(t, Transform):
            # found by hostile review 60: a plain function (MONAI runs any callable as postprocessing or in a Compose)
            # is as opaque as a Lambda, and its softmax flattened the stored probabilities without a word
            return f"function {getattr(t, '__name__', type(t).__name__)}"
        labelled = _after_copies(t, labelled)  # a copy of a label map is a label map
    return None


def _postprocessing_chain(arguments: Mapping[str, Any]) -> Any:
    """The transforms that run on ``engine.state.output`` in order: the evaluator's ``postprocessing``, then those of
    MONAI ``PostProcessing`` handlers among its ``val_handlers`` (attached after it), as one ``transforms`` holder
    for :func:`find_pred_activation`."""
    from types import SimpleNamespace

    from monai.handlers import PostProcessing

    handlers = arguments.get("val_handlers") or ()
    extra = [h.transform for h in handlers if isinstance(h, PostProcessing)]
    return SimpleNamespace(transforms=[arguments.get("postprocessing"), *extra])


def format_pred(probs: torch.Tensor, pred_format: str, multilabel: bool = False) -> torch.Tensor:
    """Mean probabilities ``(B, C, *spatial)`` in the form a bundle's postprocessing expects.

    ``"probabilities"``: unchanged. ``"log_probabilities"``: ``log(max(p, tiny))`` (``tiny`` the smallest normal
    number of the dtype), which softmax maps back to ``p``. ``"binary_logit"``: ``log(p_1) - log(p_0)``
    ``(B, 1, *spatial)`` for ``C = 2``, which sigmoid maps back to ``p_1``. With ``multilabel=True`` (per-channel
    Bernoulli probabilities of a region-based model, any ``C >= 1``) ``"binary_logit"`` is the per-channel logit
    ``log(max(p_c, tiny)) - log(max(1 - p_c, tiny))`` ``(B, C, *spatial)``, which sigmoid maps back to ``p_c``, and
    ``"log_probabilities"`` raises ``ValueError`` (softmax would renormalise the channels against each other).
    MetaTensors stay MetaTensors.
    """
    if pred_format == "probabilities":
        return probs
    if not probs.is_floating_point():
        raise TypeError(f"pred must be floating point probabilities, got dtype {probs.dtype}")
    tiny = torch.finfo(probs.dtype).tiny
    if multilabel and pred_format == "log_probabilities":
        raise ValueError(
            "the inferer's output is multi-label (one sigmoid probability per region) but pred_format is "
            "'log_probabilities' (the postprocessing applies softmax to 'pred'): use Activationsd(sigmoid=True), "
            "as region-based bundles do, or pred_format='probabilities'"
        )
    if pred_format == "log_probabilities":
        return torch.log(probs.clamp_min(tiny))
    if pred_format == "binary_logit" and multilabel:
        return torch.log(probs.clamp_min(tiny)) - torch.log1p(-probs).clamp_min(math.log(tiny))
    if pred_format == "binary_logit":
        if probs.shape[1] != 2:
            raise ValueError(
                f"pred_format='binary_logit' needs two-class probabilities (B, 2, *spatial), got {tuple(probs.shape)}"
            )
        logp = torch.log(probs.clamp_min(tiny))
        return logp[:, 1:2] - logp[:, 0:1]
    raise ValueError(f"pred_format must be one of {PRED_FORMATS}, got {pred_format!r}")


def _names(value: Any, name: str) -> list[str]:
    """One name or a sequence of names (numbers allowed, as group labels of a datalist) as a list of strings.

    Raises:
        TypeError: ``value`` is neither a string nor an iterable of names (naming ``name``).
    """
    if isinstance(value, str):
        return [value]
    if isinstance(value, (Mapping, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a string or a sequence of strings, got {type(value).__name__}")
    return [str(v) for v in value]


def _plain(x: Any) -> Any:
    return x.as_tensor() if isinstance(x, MetaTensor) else x


class UncertaintyEvaluator(SupervisedEvaluator):
    """``SupervisedEvaluator`` that spreads an uncertainty inferer's dict output into ``engine.state.output``.

    Takes every argument of :class:`monai.engines.SupervisedEvaluator` (``device``, ``val_data_loader``,
    ``network``, ``inferer``, ``postprocessing``, ``val_handlers``, ``amp``, ...) plus:

    Args:
        pred_format: how ``pred`` is stored: ``"auto"`` (default; see the module docstring), ``"probabilities"``,
            ``"log_probabilities"`` or ``"binary_logit"``.
        uncertainty_keys: inferer outputs to spread besides ``pred`` (default: every key the inferer returns).
            ``samples`` ``(S, B, C, *spatial)`` is stored batch first, ``(B, S, C, *spatial)``, so that decollation
            gives each case its ``(S, C, *spatial)`` samples.

    The network runs in eval mode under ``no_grad`` as in MONAI; MC-dropout and Rate-In inferers switch their own
    dropout layers on. The inferer receives the image batch as a plain tensor and every output it returns is given
    the input batch's metadata (``copy_meta_from``), so any inferer, including a stock MONAI one that returns a
    tensor (stored as ``pred``, as in ``SupervisedEvaluator``), yields MetaTensors that decollate per case.
    After each iteration ``engine.state.uncertainty`` holds ``{"mi_meaning", "num_samples", "extras"}`` of the
    last call (``extras``: per-call outputs such as Rate-In's searched rates). ``amp`` autocasts on CUDA only (as
    MONAI does, whose autocast is CUDA's); on CPU it is a no-op. ``additional_metrics`` given without a
    ``key_val_metric`` are attached too (before the ``val_handlers``), where MONAI drops them without a word.
    """

    def __init__(
        self,
        *args: Any,
        pred_format: str = "auto",
        uncertainty_keys: Sequence[str] | str | None = None,
        **kwargs: Any,
    ) -> None:
        require_ignite("monai_unc.engines.UncertaintyEvaluator")
        if pred_format not in PRED_FORMATS:
            raise ValueError(f"pred_format must be one of {PRED_FORMATS}, got {pred_format!r}")
        if uncertainty_keys is not None:
            uncertainty_keys = _names(uncertainty_keys, "uncertainty_keys")
            clash = [k for k in uncertainty_keys if k in (Keys.IMAGE, Keys.LABEL, Keys.PRED)]
            if clash:
                raise ValueError(f"uncertainty_keys must not contain 'image', 'label' or 'pred', got {clash}")
        # SupervisedEvaluator's arguments may come by position: bind them to find the postprocessing and the metrics
        given = inspect.signature(SupervisedEvaluator.__init__).bind_partial(self, *args, **kwargs).arguments
        extra = given.get("additional_metrics") if given.get("key_val_metric") is None else None
        if extra is not None and not isinstance(extra, Mapping):
            raise TypeError(f"additional_metrics must be None or a dict of metrics, got {type(extra).__name__}")
        # found by hostile review 60: MONAI attaches additional_metrics only beside a key_val_metric, and dropped them
        # without a word otherwise; they are attached here, before the val_handlers as MONAI attaches its metrics
        self._unattached_metrics: dict[str, Any] = dict(extra or {})
        super().__init__(*args, **kwargs)
        self._attach_unattached_metrics()  # without val_handlers, _register_handlers did not run
        if pred_format == "auto":
            activation = find_pred_activation(_postprocessing_chain(given))
            pred_format = {"softmax": "log_probabilities", "sigmoid": "binary_logit"}.get(activation, "probabilities")
            # found by hostile testing: the choice was logged here as if pred were converted, also for a stock
            # inferer whose raw output is stored unchanged; spread() now says it when it converts
            self._auto_activation: str | None = activation if pred_format != "probabilities" else None
            opaque = None if activation is not None else _opaque_pred_transform(_postprocessing_chain(given))
            if opaque is not None:  # found by review: a Lambdad softmax saw probabilities, 0.9 became 0.69
                warnings.warn(
                    f"UncertaintyEvaluator: the postprocessing's {opaque} may change 'pred' and no Activationsd "
                    "applies softmax or sigmoid to it, so pred_format='auto' stores the mean probabilities as they "
                    "are; if that function applies an activation, the probabilities go through it again: pass "
                    "pred_format='log_probabilities' (softmax) or 'binary_logit' (sigmoid), or use Activationsd",
                    stacklevel=2)
        else:
            self._auto_activation = None
        self._format_logged = False
        self.pred_format = pred_format
        self.uncertainty_keys = uncertainty_keys

    def _attach_unattached_metrics(self) -> None:
        """Attach the ``additional_metrics`` given without a ``key_val_metric`` (MONAI attaches none of them then)."""
        metrics, self._unattached_metrics = getattr(self, "_unattached_metrics", {}), {}
        for name, metric in metrics.items():
            metric.attach(self, name)

    def _register_handlers(self, handlers: Any) -> None:
        """MONAI's registration of ``val_handlers``, after the ``additional_metrics`` given without a
        ``key_val_metric``: a ``MetricsSaver`` among them then finds their values at the end of the epoch."""
        self._attach_unattached_metrics()
        super()._register_handlers(handlers)

    # ------------------------------------------------------------------------------------------------------------
    def spread(self, result: Any, reference: torch.Tensor | None = None) -> dict[str, Any]:
        """Inferer output -> ``{pred, <map>, ...}`` for ``engine.state.output`` (see the class docstring).

        ``reference``: the input MetaTensor whose metadata plain-tensor maps receive.
        """

        def meta(t: Any) -> Any:
            if reference is None or not isinstance(t, torch.Tensor):
                return t
            out = MetaTensor(_plain(t))
            out.copy_meta_from(reference)  # meta, applied operations and the batch flag of the input batch
            return out

        if not isinstance(result, Mapping):
            return {Keys.PRED: meta(result)}
        if K.PRED.value not in result:
            raise ValueError(
                f"the inferer returned a dict without 'pred' (keys: {sorted(map(str, result))}); "
                "UncertaintyEvaluator needs the mean probabilities under 'pred'"
            )
        keys = self.uncertainty_keys
        if keys is None:
            keys = [str(k) for k in result if str(k) != K.PRED.value]
        missing = [k for k in keys if k not in result]
        if missing:
            raise ValueError(
                f"uncertainty_keys asks for {missing} but the inferer returned {sorted(map(str, result))} "
                "(configure the inferer's keys=, track_variance= or keep_samples=)"
            )
        clash = [k for k in keys if k in (Keys.IMAGE, Keys.LABEL)]
        if clash:
            raise ValueError(f"the inferer returned keys that would overwrite the batch: {clash}")

        multilabel = bool(getattr(result, "multilabel", False))
        pred = result[K.PRED.value]
        auto = getattr(self, "_auto_activation", None)
        if auto is not None and self.pred_format == "binary_logit" and not multilabel and pred.shape[1] != 2:
            # found by hostile testing: the error named pred_format='binary_logit', which the user never set
            raise ValueError(
                f"the postprocessing applies sigmoid to 'pred' (pred_format='auto' therefore stores a binary logit) "
                f"but the inferer returned {pred.shape[1]}-class softmax probabilities {tuple(pred.shape)}: use "
                "Activationsd(softmax=True), an inferer with activation='sigmoid' for a region-based network, or "
                "pred_format='probabilities'"
            )
        out: dict[str, Any] = {Keys.PRED: meta(format_pred(pred, self.pred_format, multilabel))}
        if auto is not None and not getattr(self, "_format_logged", True):
            self._format_logged = True
            self.logger.info(
                f"UncertaintyEvaluator: postprocessing applies {auto} to 'pred'; storing the inferer's mean "
                f"probabilities as {self.pred_format} so that it yields them"
            )
        for k in keys:
            v = result[k]
            if k == K.SAMPLES.value and isinstance(v, torch.Tensor):
                v = _plain(v).movedim(0, 1)  # (S, B, C, ...) -> (B, S, C, ...): decollates per case
            out[k] = meta(v)
        return out

    def _iteration(self, engine: SupervisedEvaluator, batchdata: dict[str, torch.Tensor]) -> dict:  # type: ignore[override]
        """One evaluation step: forward with the inferer, spread its dict, then fire MONAI's iteration events
        (postprocessing and decollation run on ``MODEL_COMPLETED``, after the spread)."""
        if batchdata is None:
            raise ValueError("Must provide batch data for current iteration.")
        batch = engine.prepare_batch(batchdata, engine.state.device, engine.non_blocking, **engine.to_kwargs)
        if len(batch) == 2:
            inputs, targets = batch
            args: tuple = ()
            kwargs: dict = {}
        else:
            inputs, targets, args, kwargs = batch
        # the inferer gets a plain tensor (monai-unc inferers compute on plain tensors anyway); every output is
        # given the input batch's metadata in spread(), whatever inferer produced it
        reference = inputs if isinstance(inputs, MetaTensor) else None
        net_inputs = _plain(inputs)
        engine.state.output = {Keys.IMAGE: inputs, Keys.LABEL: targets}
        device = torch.device(engine.state.device) if engine.state.device is not None else net_inputs.device
        autocast = (
            torch.autocast("cuda", **engine.amp_kwargs)
            if engine.amp and device.type == "cuda"
            else contextlib.nullcontext()
        )
        with engine.mode(engine.network), autocast:
            result = engine.inferer(net_inputs, engine.network, *args, **kwargs)
        engine.state.output.update(self.spread(result, reference))
        engine.state.uncertainty = {
            "mi_meaning": str(getattr(result, "mi_meaning", "none")),
            "num_samples": int(getattr(result, "num_samples", 1)),
            "extras": dict(getattr(result, "extras", {}) or {}),
        }
        engine.fire_event(IterationEvents.FORWARD_COMPLETED)
        engine.fire_event(IterationEvents.MODEL_COMPLETED)
        return engine.state.output


# ---------------------------------------------------------------------------------------------------------------
def _items(x: Any, keys: Sequence[str]) -> list:
    """The cases of an engine's output or batch: a decollated list as it is; a batch dict (``decollate=False``) split
    along the batch axis, its entries among ``keys`` only (tensors by MONAI's ``decollate_batch``, so that a batch
    MetaTensor gives each case its metadata; arrays, lists and tuples by their rows).

    Found by hostile testing: the batch size was read from the dict's first entry and every entry indexed by case, so
    a datalist entry that is not a batch row raised a bare ``KeyError: 0`` (a nested dict such as a meta dict) or, a
    per-case list (collated as one list per position), set the batch size to its length and silently dropped the
    other cases of each batch from the CSV and the AUROC.

    Raises:
        ValueError: the entries read hold different numbers of cases, or one is not split by case.
    """
    if isinstance(x, list):
        return x
    if isinstance(x, Mapping):
        from monai.data import decollate_batch

        columns: dict[str, list] = {}
        for k in dict.fromkeys(keys):
            if k not in x:
                continue
            v = x[k]
            if isinstance(v, torch.Tensor) and v.ndim > 0:
                columns[k] = decollate_batch(v, detach=False)
            elif isinstance(v, (list, tuple, np.ndarray)) and np.ndim(v) > 0:
                columns[k] = list(v)
            else:
                raise ValueError(f"{k!r} of a batch dict (decollate=False) must hold one row per case, got "
                                 f"{type(v).__name__}")
        sizes = {k: len(v) for k, v in columns.items()}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"the entries of a batch dict (decollate=False) hold different numbers of cases: {sizes}")
        n = next(iter(sizes.values()), 0)
        return [{k: v[i] for k, v in columns.items()} for i in range(n)]
    raise TypeError(f"engine output must be a list of dicts or a dict of batches, got {type(x).__name__}")


def _case_id(item: Mapping, batch_item: Mapping, image_key: str) -> str:
    for src in (item, batch_item):
        img = src.get(image_key) if isinstance(src, Mapping) else None
        if isinstance(img, MetaTensor):
            name = img.meta.get("filename_or_obj")
            if name:
                return str(name)
    return ""


def _group_label(value: Any) -> str:
    """The text of a case's group label, whether the batch was decollated or not.

    A number of the datalist (e.g. ``"shift": 0``) reaches a decollated case as the Python number, but with
    ``decollate=False`` as its row of the collated tensor (``tensor(0)``, whose text matches no ``iid_groups``): a
    one-element tensor or array is read as its number, as decollation reads it. A missing label (None, or the NaN of
    an empty cell of a table read by pandas) is ``""``, as ``monai-unc evaluate`` reads an empty cell of its shift
    table.
    """
    if isinstance(value, (torch.Tensor, np.ndarray, np.generic)) and int(np.prod(value.shape)) == 1:
        value = value.reshape(()).item() if isinstance(value, torch.Tensor) else np.asarray(value).reshape(()).item()
    return label_text(value)  # a missing label (None, or pandas' NaN of an empty cell) is "", as evaluate reads it


def _case_score(value: Any, key: str) -> float:
    """The one number of a per-case score; ``ValueError`` naming ``key`` for anything else (e.g. a whole map)."""
    t = torch.as_tensor(value.as_tensor() if isinstance(value, MetaTensor) else value)
    if t.numel() != 1:
        raise ValueError(
            f"CaseScoresHandler: score_keys entry {key!r} must be one number per case, got shape {tuple(t.shape)}; "
            f"name a case score such as '{key}_mean' (AggregateUncertaintyd), not a map"
        )
    return float(t.reshape(()))


#: the default name of :class:`CaseScoresHandler`'s CSV
_CASE_SCORES_FILE = "case_scores.csv"


class CaseScoresHandler:
    """Ignite handler: per-case uncertainty scores, grouped by a shift label, into a CSV and OoD AUROC metrics.

    Each iteration it reads the case scores (e.g. ``mutual_information_mean`` from
    :class:`~monai_unc.transforms.AggregateUncertaintyd`) from the decollated ``engine.state.output`` and the
    group label (e.g. ``"shift"``, a string of the datalist) from ``engine.state.batch``. At the end of the epoch
    the rows of every rank are gathered (``torch.distributed.all_gather_object``) and sorted by case id (stable), so
    the table does not depend on the number of ranks or on which rank saw which case; rank 0 writes
    ``<output_dir>/<filename>`` (columns ``case, <group_key>, <scores...>``; :func:`monai_unc.io.write_csv`, scores at
    full precision) and alone issues the warnings (non-finite scores, a NaN AUROC), and every rank stores
    ``engine.state.metrics["ood_auroc_<score>"]``: :func:`monai_unc.metrics.ood_auroc_by_shift`, the OoD AUROC of
    ``monai-unc evaluate --shifts``, of the scores of cases outside ``iid_groups`` against those inside (NaN with a
    warning when either side is empty): a group label is in-distribution when, stripped of surrounding whitespace
    and lower-cased, it is one of ``iid_groups`` (:func:`monai_unc.metrics.is_in_distribution`; by default
    :data:`monai_unc.metrics.IID_SHIFTS`: ``""``, ``none``, ``iid``, ``id``, ``clean``, ``in-distribution``), and
    a case without a defined score (NaN or inf, e.g. ``fg_mean`` of an empty predicted foreground) ranks as the most
    uncertain, with a warning (:func:`monai_unc.metrics.fill_undefined_scores`), so
    ``MetricsSaver(metrics=["ood_auroc_<score>"])`` can write it when it is listed after this handler (ignite runs an
    event's handlers in the order they were attached). A case id met twice (after the gather) is a ``ValueError``
    naming it: torch's ``DistributedSampler`` pads the data by repeating cases so that every rank gets as many, and a
    repeated case would count twice; evaluate with ``monai.data.DistributedSampler(even_divisible=False)``.

    Args:
        score_keys: keys of per-case scalars in ``engine.state.output`` (one number each; a key holding more, such
            as a map, raises ``ValueError``).
        group_key: key of the group label in ``engine.state.batch``.
        iid_groups: labels of in-distribution cases, compared case-insensitively and without surrounding whitespace
            (default :data:`monai_unc.metrics.IID_SHIFTS`, the labels ``monai-unc evaluate --shifts`` reads as
            in-distribution).
        output_dir: the folder of the CSV (``None``: no file).
        filename: the name of the CSV in ``output_dir``, a relative path inside it; another name than the default
            needs ``output_dir`` (``ValueError``).
        image_key: whose MetaTensor ``filename_or_obj`` names the case.
    """

    def __init__(
        self,
        score_keys: Sequence[str] | str,
        group_key: str = "shift",
        iid_groups: Sequence[str] | str = IID_SHIFTS,
        output_dir: str | os.PathLike | None = None,
        filename: str | os.PathLike = _CASE_SCORES_FILE,
        image_key: str = Keys.IMAGE,
    ) -> None:
        require_ignite("monai_unc.engines.CaseScoresHandler")
        self.score_keys = _names(score_keys, "score_keys")
        if not self.score_keys:
            raise ValueError("score_keys must name at least one per-case score")
        if not isinstance(group_key, str):  # a CSV column name: refused at the end of the run otherwise (write_csv)
            raise TypeError(f"group_key must be a string (a key of the batch), got {type(group_key).__name__}")
        self.group_key = group_key
        columns = ["case", group_key, *self.score_keys]
        if len(set(columns)) != len(columns):
            raise ValueError(f"score_keys and group_key must be distinct and not 'case' (the CSV's columns), got "
                             f"{columns}")
        self.iid_groups = set(_names(iid_groups, "iid_groups"))
        if not self.iid_groups:
            raise ValueError("iid_groups must name at least one in-distribution group (the OoD AUROC compares the "
                             "cases outside them with the cases inside)")
        # found by hostile testing: a filename without output_dir wrote nothing, without a word, and an absolute
        # filename (or one with "..") wrote outside output_dir
        # a path object is a name as well (accepted before the check; found by hostile review)
        name = os.fspath(filename) if isinstance(filename, (str, os.PathLike)) else filename
        inside = isinstance(name, str) and name and not Path(name).is_absolute()
        if not inside or ".." in Path(name).parts:
            raise ValueError(f"filename must be a relative file name inside output_dir, got {filename!r}")
        if output_dir is None and name != _CASE_SCORES_FILE:
            raise ValueError(f"filename={filename!r} needs output_dir (without it no CSV is written)")
        self.output_dir = None if output_dir is None else Path(output_dir)
        self.filename = name
        self.image_key = image_key
        self._rows: list[tuple[str, str, list[float]]] = []

    def attach(self, engine: Any) -> None:
        """Collect the cases of ``engine``'s epochs; attaching again to the same engine changes nothing.

        Args:
            engine: the evaluator.
        """
        from ignite.engine import Events

        if engine.has_event_handler(self._collect, Events.ITERATION_COMPLETED):
            return  # attached already (e.g. in val_handlers and by hand): every case once
        engine.add_event_handler(Events.EPOCH_STARTED, self._reset)
        engine.add_event_handler(Events.ITERATION_COMPLETED, self._collect)
        engine.add_event_handler(Events.EPOCH_COMPLETED, self._complete)

    def _reset(self, engine: Any) -> None:
        self._rows = []

    def _check_scores(self, item: Mapping) -> None:
        """``KeyError`` naming the score keys that ``item`` (a case, or a batch dict) lacks."""
        missing = [k for k in self.score_keys if k not in item]
        if missing:
            raise KeyError(f"CaseScoresHandler: engine.state.output has no {missing} (add AggregateUncertaintyd)")

    def _collect(self, engine: Any) -> None:
        output, batch = engine.state.output, engine.state.batch
        if isinstance(output, Mapping):  # a batch dict (decollate=False): its keys checked before it is split
            # (found by review36: without any score key it split into one case, and a batch of several cases was
            # refused as "the output holds 1 case(s) but the batch 2" instead of naming the missing keys)
            self._check_scores(output)
        outputs = _items(output, [*self.score_keys, self.image_key])
        batches = [{}] * len(outputs) if batch is None else _items(batch, [self.group_key, self.image_key])
        if isinstance(batch, Mapping) and not batches:
            batches = [{}] * len(outputs)
        if len(batches) != len(outputs):
            raise ValueError(f"CaseScoresHandler: the output holds {len(outputs)} case(s) but the batch "
                             f"{len(batches)}: {self.score_keys} of the output and {self.group_key!r} of the batch "
                             "must hold one row per case")
        for item, b in zip(outputs, batches):
            self._check_scores(item)
            if self.group_key not in b:
                raise KeyError(f"CaseScoresHandler: the batch has no group key {self.group_key!r}")
            scores = [_case_score(item[k], k) for k in self.score_keys]
            self._rows.append((_case_id(item, b, self.image_key), _group_label(b[self.group_key]), scores))

    def _gathered(self) -> list[tuple[str, str, list[float]]]:
        import torch.distributed as dist

        if distributed_world() < 2:
            rows = list(self._rows)
        else:
            parts: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(parts, self._rows)  # rank order, so every rank builds the same table
            rows = [row for part in parts for row in part]
        # case-id order (stable): the same table as one process, whichever rank saw which case
        rows = sorted(rows, key=lambda row: row[0])
        # a case scored twice would count twice in the cohort's AUROC: torch's DistributedSampler pads the data by
        # repeating cases so that every rank gets as many (a case without a name, "", cannot be told apart)
        twice = sorted({a[0] for a, b in zip(rows, rows[1:]) if a[0] and a[0] == b[0]})
        if twice:
            raise ValueError(
                f"CaseScoresHandler: {len(twice)} case(s) were scored more than once, e.g. {twice[0]!r}, and would "
                "count more than once in the cohort numbers: a DistributedSampler that pads the data so that every "
                "rank gets as many cases repeats some; evaluate with monai.data.DistributedSampler(dataset, "
                "even_divisible=False, shuffle=False), and list each case once"[:600])
        return rows

    def _complete(self, engine: Any) -> None:
        import ignite.distributed as idist  # pytorch-ignite is optional (engines need it, the package does not)

        rows = self._gathered()
        scores = np.array([s for _, _, s in rows], dtype=np.float64).reshape(len(rows), len(self.score_keys))
        with main_rank_warnings():  # every rank has the same rows: rank 0 alone reports them
            self._ood_aurocs(engine, [g for _, g, _ in rows], scores)
        if self.output_dir is not None and idist.get_rank() == 0:
            columns = ["case", self.group_key, *self.score_keys]
            write_csv(self.output_dir / self.filename,
                      [dict(zip(columns, (case, group, *s))) for case, group, s in rows], columns)

    def _ood_aurocs(self, engine: Any, groups: Sequence[str], scores: np.ndarray) -> None:
        """``engine.state.metrics["ood_auroc_<score>"]`` of each score: :func:`~monai_unc.metrics.ood_auroc_by_shift`
        (non-finite scores rank as the most uncertain, with a warning)."""
        for j, key in enumerate(self.score_keys):
            bad = int((~np.isfinite(scores[:, j])).sum())
            if bad:
                warnings.warn(f"CaseScoresHandler: {bad} case(s) have a non-finite {key}; ranked as the most "
                              "uncertain (as monai-unc evaluate ranks them)")
            res = ood_auroc_by_shift(scores[:, j], groups, self.iid_groups)
            if "auroc" not in res:
                value = warn_nan(
                    f"ood_auroc_{key}: needs cases inside and outside iid_groups {sorted(self.iid_groups)}, "
                    f"got {res['n_iid']} and {res['n_ood']}"
                )
            else:
                value = float(res["auroc"])
            engine.state.metrics[f"ood_auroc_{key}"] = value

