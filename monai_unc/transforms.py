"""Dictionary transforms (MONAI ``MapTransform`` conventions) for uncertainty maps in pre/post-processing chains.

They act on one item of a decollated batch (channel first, no batch axis), like every MONAI dictionary transform:

- :class:`UncertaintyMeasuresd`: samples ``(S, C, *spatial)`` or mean probabilities ``(C, *spatial)`` (plus, when
  known, the expected entropy) -> the maps of :class:`~monai_unc.keys.UncertaintyKeys`, ``(1, *spatial)`` each.
  The moments are accumulated by :class:`~monai_unc.stats.SampleStats` and the measures derived by
  :func:`~monai_unc.stats.derive_measures`, the same code the inferers use.
- :class:`ErrorMapd`: the voxel error ``[argmax pred != label]`` ``(1, *spatial)`` (:func:`error_map`).
- :class:`AggregateUncertaintyd`: one score per case from a map (:func:`monai_unc.aggregation.aggregate`),
  stored in the data dict and in the map's ``meta``.
- :class:`UncertaintyToDiscreted`: a map -> binary "uncertain" mask (``u >= t``, fixed ``t`` or a per-case
  quantile).
- :class:`SamplesToLabelsd`: samples ``(S, C, *spatial)`` -> sampled label maps ``(S, *spatial)`` (argmax per
  sample), the input of the GED metrics.

Geometry and inversion: none of these transforms changes the grid; every new map is a ``MetaTensor`` carrying a
copy of the source's ``meta`` (affine, ``filename_or_obj``) and ``applied_operations``. So ``SaveImaged`` writes
the map with the input's affine and file name, and ``Invertd(keys=<map>, orig_keys="image", transform=
<preprocessing>)`` resamples it back to the original image grid like the prediction. They are not
``InvertibleTransform`` s themselves because they only add keys (their inverse is to drop the key); put them after
``Invertd`` or invert their outputs through ``orig_keys``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from copy import deepcopy
from typing import Any

import numpy as np
import torch
from monai.config import KeysCollection
from monai.data import MetaTensor
from monai.transforms import MapTransform

from ._utils import check_finite, check_labels, check_probabilities, to_tensor
from .aggregation import METHODS, aggregate
from .keys import UncertaintyKeys
from .stats import SampleStats, derive_measures

__all__ = [
    "error_map",
    "UncertaintyMeasuresd",
    "ErrorMapd",
    "AggregateUncertaintyd",
    "UncertaintyToDiscreted",
    "SamplesToLabelsd",
]

K = UncertaintyKeys
#: measures a transform can produce (``samples`` is an input, never an output; ``window_disagreement`` only comes
#: from sliding-window stitching inside an inferer)
_MEASURES = tuple(k.value for k in K if k not in (K.SAMPLES, K.WINDOW_DISAGREEMENT))


# ------------------------------------------------------------------------------------------------ helpers
def _like_source(result: torch.Tensor, source: Any) -> Any:
    """``result`` in the container of ``source``: MetaTensor (with a copy of its meta and applied operations),
    numpy array, or plain tensor."""
    if isinstance(source, MetaTensor):
        out = MetaTensor(result, meta=deepcopy(source.meta))
        out.applied_operations = deepcopy(source.applied_operations)
        return out
    if isinstance(source, np.ndarray):
        return result.detach().cpu().numpy()
    return result


def _key_name(template: str, key: Hashable, what: str) -> str:
    try:
        return template.format(key=key, measure=what, method=what)
    except (KeyError, IndexError) as e:
        raise ValueError(f"output key template {template!r} may only use {{key}} and {{measure}}/{{method}}") from e


def _labels_from(x: torch.Tensor, name: str) -> torch.Tensor:
    """Channel-first label map ``(1, *spatial)``: one channel is a label map, ``C >= 2`` channels (probabilities or
    one-hot) are reduced by argmax."""
    if x.ndim < 2:
        raise ValueError(f"{name} must be channel first (C, *spatial), got shape {tuple(x.shape)}")
    if x.shape[0] == 1:
        return check_labels(x, name)
    check_finite(x, name)
    return x.argmax(dim=0, keepdim=True)


def error_map(pred: Any, label: Any) -> Any:
    """Voxel error ``e(x) = [argmax_c pred(x) != label(x)]`` of one case, ``(1, *spatial)`` float32 in {0, 1}.

    Args:
        pred: channel-first prediction ``(C, *spatial)``: probabilities or one-hot (``C >= 2``, reduced by argmax;
            the first maximum wins on ties) or a label map ``(1, *spatial)``.
        label: reference ``(1, *spatial)`` label map or one-hot ``(C, *spatial)``.

    Returns numpy for numpy ``pred``, torch otherwise. This is the error the spatial metrics (seed 003, Sec. 3) and
    the calibration "accuracy" use. Raises ``ValueError`` when the spatial shapes differ or the labels are not
    integral.
    """
    p = to_tensor(pred, "pred")
    t = to_tensor(label, "label")
    if p.shape[1:] != t.shape[1:]:
        raise ValueError(
            f"pred and label must have the same spatial shape, got {tuple(p.shape[1:])} and {tuple(t.shape[1:])}"
        )
    lp = _labels_from(p, "pred")
    lt = _labels_from(t, "label").to(lp.device)
    err = (lp != lt).to(torch.float32)
    return err.cpu().numpy() if isinstance(pred, np.ndarray) else err


# ------------------------------------------------------------------------------------------------ transforms
class UncertaintyMeasuresd(MapTransform):
    """Uncertainty maps from samples or from (mean) probabilities of one case.

    ``input_type="samples"``: ``d[key]`` is ``(S, C, *spatial)`` probabilities of ``S`` samples (e.g. the
    ``samples`` an inferer returns with ``keep_samples=True``, or ``TestTimeAugmentation`` outputs). Every measure
    is available: ``pred`` (mean), ``predictive_entropy``, ``expected_entropy``, ``mutual_information``,
    ``max_softmax``, ``variance``.

    ``input_type="probs"``: ``d[key]`` is ``(C, *spatial)`` probabilities (a deterministic softmax, or the mean of
    samples). ``predictive_entropy`` and ``max_softmax`` are always available; ``expected_entropy`` and
    ``mutual_information`` need ``expected_entropy_key`` (the per-voxel mean of ``H(p_s)``), ``variance`` needs
    ``mean_sq_key`` (the per-voxel mean of ``p_s^2``, ``C`` channels): the statistics an inferer streams.

    Formulas (ValUES, seed 000, eq. 1): PE = H(mean p), EE = mean H(p_s), MI = PE - EE (clamped at 0),
    max-softmax = 1 - max_c mean p, variance = mean_c Var_s p_c (population). Natural log; ``normalize=True``
    divides the entropies by ``log C``.

    Args:
        keys: source key(s).
        measures: names from :class:`~monai_unc.keys.UncertaintyKeys` (default: all available for the input, without
            ``pred`` for ``input_type="probs"``, since that is the input).
        input_type: ``"samples"`` or ``"probs"``.
        expected_entropy_key, mean_sq_key: extra statistics for ``input_type="probs"``.
        normalize: divide entropies by ``log C``.
        output_key: template of the output keys, with ``{measure}`` and optionally ``{key}`` (default
            ``"{measure}"``; with several source keys it must contain ``{key}``).
        allow_missing_keys: skip absent source keys instead of raising ``KeyError``.

    Outputs are ``(1, *spatial)`` maps (``pred`` ``(C, *spatial)``) in the source's dtype and container; a
    MetaTensor source gives MetaTensors with a copy of its meta, so ``SaveImaged`` and ``Invertd`` work on them.
    """

    def __init__(
        self,
        keys: KeysCollection,
        measures: Sequence[str] | str | None = None,
        input_type: str = "samples",
        expected_entropy_key: str | None = None,
        mean_sq_key: str | None = None,
        normalize: bool = False,
        output_key: str = "{measure}",
        allow_missing_keys: bool = False,
    ) -> None:
        super().__init__(keys, allow_missing_keys)
        if input_type not in ("samples", "probs"):
            raise ValueError(f"input_type must be 'samples' or 'probs', got {input_type!r}")
        self.input_type = input_type
        self.expected_entropy_key = expected_entropy_key
        self.mean_sq_key = mean_sq_key
        if input_type == "samples" and (expected_entropy_key is not None or mean_sq_key is not None):
            raise ValueError("expected_entropy_key and mean_sq_key only apply to input_type='probs'")
        available = self._available()
        if measures is None:
            wanted = [m for m in available if not (input_type == "probs" and m == K.PRED.value)]
        else:
            wanted = [measures] if isinstance(measures, str) else list(measures)
            unknown = [m for m in wanted if m not in _MEASURES]
            if unknown:
                raise ValueError(f"measures must be among {_MEASURES}, got {unknown}")
            missing = [m for m in wanted if m not in available]
            if missing:
                need = {
                    K.EXPECTED_ENTROPY.value: "expected_entropy_key",
                    K.MUTUAL_INFORMATION.value: "expected_entropy_key",
                    K.VARIANCE.value: "mean_sq_key",
                }
                hints = sorted({need[m] for m in missing if m in need})
                raise ValueError(
                    f"measures {missing} cannot be derived from input_type='probs' without {' and '.join(hints)}"
                )
        if not wanted:
            raise ValueError("measures selects nothing")
        self.measures = wanted
        self.normalize = bool(normalize)
        if len(self.keys) > 1 and "{key}" not in output_key:
            raise ValueError(
                f"output_key {output_key!r} must contain '{{key}}' when several source keys are given "
                "(otherwise their maps would overwrite each other)"
            )
        if "{measure}" not in output_key and len(self.measures) > 1:
            raise ValueError(f"output_key {output_key!r} must contain '{{measure}}' when several measures are asked")
        self.output_key = output_key

    def _available(self) -> list[str]:
        if self.input_type == "samples":
            return list(_MEASURES)
        out = [K.PRED.value, K.PREDICTIVE_ENTROPY.value, K.MAX_SOFTMAX.value]
        if self.expected_entropy_key is not None:
            out += [K.EXPECTED_ENTROPY.value, K.MUTUAL_INFORMATION.value]
        if self.mean_sq_key is not None:
            out.append(K.VARIANCE.value)
        return out

    def _moments(self, d: Mapping, key: Hashable) -> tuple[dict[str, torch.Tensor], torch.dtype]:
        x = to_tensor(d[key], str(key))
        if not x.is_floating_point():
            raise TypeError(f"{key} must hold floating point probabilities, got dtype {x.dtype}")
        if self.input_type == "samples":
            if x.ndim < 3:
                raise ValueError(f"{key} must be samples (S, C, *spatial), got shape {tuple(x.shape)}")
            check_probabilities(x, str(key), channel_dim=1, min_ndim=3)
            stats = SampleStats(track_variance=K.VARIANCE.value in self.measures, validate=False)
            for s in range(x.shape[0]):
                stats.update(x[s : s + 1])  # (1, C, *spatial): one sample
            return stats.moments(), x.dtype
        if x.ndim < 2:
            raise ValueError(f"{key} must be probabilities (C, *spatial), got shape {tuple(x.shape)}")
        probs = x[None]
        check_probabilities(probs, str(key))
        moments = {K.PRED.value: probs.to(torch.float64)}
        if self.expected_entropy_key is not None:
            ee = to_tensor(d[self.expected_entropy_key], self.expected_entropy_key)
            if tuple(ee.shape) != (1, *x.shape[1:]):
                raise ValueError(
                    f"{self.expected_entropy_key} must have shape {(1, *x.shape[1:])} (one channel), got "
                    f"{tuple(ee.shape)}"
                )
            check_finite(ee, self.expected_entropy_key)
            moments[K.EXPECTED_ENTROPY.value] = ee[None].to(torch.float64)
        else:  # placeholder never read: PE and max-softmax do not use it
            moments[K.EXPECTED_ENTROPY.value] = torch.zeros_like(probs[:, :1], dtype=torch.float64)
        if self.mean_sq_key is not None:
            sq = to_tensor(d[self.mean_sq_key], self.mean_sq_key)
            if tuple(sq.shape) != tuple(x.shape):
                raise ValueError(
                    f"{self.mean_sq_key} must have the shape of {key} {tuple(x.shape)}, got {tuple(sq.shape)}"
                )
            check_finite(sq, self.mean_sq_key)
            moments["mean_sq"] = sq[None].to(torch.float64)
        return moments, x.dtype

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        d = dict(data)
        for key in self.key_iterator(d):
            moments, dtype = self._moments(d, key)
            maps = derive_measures(moments, self.measures, normalize=self.normalize, out_dtype=dtype)
            for measure, value in maps.items():
                d[_key_name(self.output_key, key, measure)] = _like_source(value[0], d[key])
        return d


class ErrorMapd(MapTransform):
    """Adds the voxel error map ``[argmax pred != label]`` ``(1, *spatial)`` (see :func:`error_map`).

    Args:
        pred_key: prediction: probabilities / one-hot ``(C, *spatial)`` or a label map ``(1, *spatial)``.
        label_key: reference label map ``(1, *spatial)`` or one-hot.
        output_key: where the map goes (default ``"error"``); a MetaTensor with the prediction's meta.
        allow_missing_keys: do nothing when either key is absent instead of raising ``KeyError``.
    """

    def __init__(
        self,
        pred_key: str = "pred",
        label_key: str = "label",
        output_key: str = "error",
        allow_missing_keys: bool = False,
    ) -> None:
        super().__init__([pred_key, label_key], allow_missing_keys)
        self.pred_key, self.label_key, self.output_key = pred_key, label_key, output_key

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        d = dict(data)
        present = list(self.key_iterator(d))  # raises KeyError for a missing key unless allowed
        if len(present) < 2:
            return d
        err = to_tensor(error_map(to_tensor(d[self.pred_key], self.pred_key), d[self.label_key]), "error")
        d[self.output_key] = _like_source(err, d[self.pred_key])
        return d


class AggregateUncertaintyd(MapTransform):
    """One uncertainty score per case from each map (ValUES, seed 000, Sec. 4.3), via
    :func:`monai_unc.aggregation.aggregate`.

    The score (0-dim float64 tensor) is stored in the data dict under ``output_key`` (default ``"{key}_{method}"``,
    e.g. ``"mutual_information_mean"``) and, when the map is a MetaTensor, in its ``meta`` under the same name, so
    it travels with the map (e.g. into ``MetricsSaver``'s ``batch_transform``).

    Args:
        keys: uncertainty map keys, each ``(1, *spatial)``.
        method: ``"mean"``, ``"sum"``, ``"patch"`` or ``"threshold"`` (see :func:`~monai_unc.aggregation.aggregate`).
        mask_key: optional key of a mask ``(1, *spatial)`` restricting the voxels (non-zero = inside), e.g. the
            predicted foreground; a probability / one-hot ``(C, *spatial)`` mask with ``C >= 2`` means "argmax > 0".
        patch_size, threshold, patch_reduction, empty_value: as in :func:`~monai_unc.aggregation.aggregate`.
        output_key: template with ``{key}`` and ``{method}``.
        allow_missing_keys: skip absent keys.
    """

    def __init__(
        self,
        keys: KeysCollection,
        method: str = "mean",
        mask_key: str | None = None,
        patch_size: int | Sequence[int] = 10,
        threshold: float | None = None,
        patch_reduction: str = "sum",
        empty_value: float = 0.0,
        output_key: str = "{key}_{method}",
        allow_missing_keys: bool = False,
    ) -> None:
        super().__init__(keys, allow_missing_keys)
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if method == "threshold" and threshold is None:
            raise ValueError("method='threshold' needs threshold=t (fit it with monai_unc.aggregation.fit_threshold)")
        if len(self.keys) > 1 and "{key}" not in output_key:
            raise ValueError(f"output_key {output_key!r} must contain '{{key}}' when several keys are given")
        self.method = method
        self.mask_key = mask_key
        self.kwargs = {
            "patch_size": patch_size,
            "threshold": threshold,
            "patch_reduction": patch_reduction,
            "empty_value": empty_value,
        }
        self.output_key = output_key

    def _mask(self, d: Mapping) -> torch.Tensor | None:
        if self.mask_key is None:
            return None
        if self.mask_key not in d:
            raise KeyError(f"mask_key {self.mask_key!r} is not in the data (keys: {sorted(map(str, d))})")
        m = to_tensor(d[self.mask_key], self.mask_key)
        if m.ndim >= 2 and m.shape[0] > 1:
            return _labels_from(m, self.mask_key) > 0
        return m != 0

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        d = dict(data)
        mask = None
        for key in self.key_iterator(d):
            if mask is None:
                mask = self._mask(d)
            u = to_tensor(d[key], str(key))
            if u.ndim < 3 or u.shape[0] != 1:
                raise ValueError(
                    f"{key} must be a one-channel map (1, *spatial) with 2 or 3 axes, got {tuple(u.shape)}"
                )
            if mask is not None and mask.shape[1:] != u.shape[1:]:
                raise ValueError(
                    f"mask {self.mask_key!r} has spatial shape {tuple(mask.shape[1:])}, {key} has {tuple(u.shape[1:])}"
                )
            score = aggregate(
                u[None], method=self.method, mask=None if mask is None else mask[None], **self.kwargs
            )
            value = torch.as_tensor(score, dtype=torch.float64).reshape(())
            name = _key_name(self.output_key, key, self.method)
            d[name] = value
            if isinstance(d[key], MetaTensor):
                d[key].meta[name] = float(value)
        return d


class UncertaintyToDiscreted(MapTransform):
    """Binary "uncertain" mask ``u >= t`` of each map ``(1, *spatial)`` (e.g. to flag voxels for review).

    Exactly one of ``threshold`` (a fixed ``t``; for a cohort-level choice see
    :func:`monai_unc.aggregation.fit_threshold`) or ``quantile`` (``t`` = that per-case quantile of the map, e.g.
    0.95 flags the 5 % most uncertain voxels) is given. The output (uint8 in {0, 1}) replaces the map unless
    ``output_key`` (template with ``{key}``) names another key.
    """

    def __init__(
        self,
        keys: KeysCollection,
        threshold: float | None = None,
        quantile: float | None = None,
        output_key: str = "{key}",
        allow_missing_keys: bool = False,
    ) -> None:
        super().__init__(keys, allow_missing_keys)
        if (threshold is None) == (quantile is None):
            raise ValueError("give exactly one of threshold= or quantile=")
        if threshold is not None and not np.isfinite(float(threshold)):
            raise ValueError(f"threshold must be finite, got {threshold}")
        if quantile is not None and not 0.0 <= float(quantile) <= 1.0:
            raise ValueError(f"quantile must be in [0, 1], got {quantile}")
        if len(self.keys) > 1 and "{key}" not in output_key:
            raise ValueError(f"output_key {output_key!r} must contain '{{key}}' when several keys are given")
        self.threshold = threshold
        self.quantile = quantile
        self.output_key = output_key

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        d = dict(data)
        for key in self.key_iterator(d):
            u = to_tensor(d[key], str(key))
            if u.ndim < 2 or u.shape[0] != 1:
                raise ValueError(f"{key} must be a one-channel map (1, *spatial), got shape {tuple(u.shape)}")
            check_finite(u, str(key))
            if self.threshold is not None:
                t = float(self.threshold)
            else:
                t = float(torch.quantile(u.reshape(-1).to(torch.float64), float(self.quantile)))
            d[_key_name(self.output_key, key, "")] = _like_source((u >= t).to(torch.uint8), d[key])
        return d


class SamplesToLabelsd(MapTransform):
    """Sampled label maps ``(S, *spatial)`` int64 from sample probabilities ``(S, C, *spatial)`` (argmax over
    ``C`` per sample): the ``y_pred`` of :class:`~monai_unc.metrics.ambiguity.GEDMetric` after collation.

    ``output_key`` (template with ``{key}``) names the output; by default it replaces the samples.
    """

    def __init__(self, keys: KeysCollection, output_key: str = "{key}", allow_missing_keys: bool = False) -> None:
        super().__init__(keys, allow_missing_keys)
        if len(self.keys) > 1 and "{key}" not in output_key:
            raise ValueError(f"output_key {output_key!r} must contain '{{key}}' when several keys are given")
        self.output_key = output_key

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        d = dict(data)
        for key in self.key_iterator(d):
            s = to_tensor(d[key], str(key))
            if s.ndim < 3 or s.shape[1] < 2:
                raise ValueError(f"{key} must be samples (S, C>=2, *spatial), got shape {tuple(s.shape)}")
            check_finite(s, str(key))
            d[_key_name(self.output_key, key, "")] = _like_source(s.argmax(dim=1), d[key])
        return d
