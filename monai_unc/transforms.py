"""Array and dictionary transforms (MONAI conventions) for uncertainty maps in pre/post-processing chains.

They act on one item of a decollated batch (channel first, no batch axis, 2 or 3 spatial axes), like every
MONAI transform; a batched MetaTensor (``is_batch``, an inferer's output before ``decollate_batch``) raises
``ValueError``. Each
computation exists once, as an array transform (``Transform``) that calls the functional core
(:mod:`monai_unc.stats`, :mod:`monai_unc.aggregation`); the dictionary version (``MapTransform``, name ending in
``d``) reads its inputs from the data dict, calls the array version and stores the result:

=================================  =================================  ==============================================
array                              dictionary                         what
=================================  =================================  ==============================================
:class:`UncertaintyMeasures`       :class:`UncertaintyMeasuresd`      samples ``(S, C, *spatial)`` or mean
                                                                      probabilities ``(C, *spatial)`` -> the maps of
                                                                      :class:`~monai_unc.keys.UncertaintyKeys`,
                                                                      ``(1, *spatial)`` each
:class:`ErrorMap`                  :class:`ErrorMapd`                 voxel error ``[argmax pred != label]``
                                                                      ``(1, *spatial)`` (:func:`error_map`)
:class:`AggregateUncertainty`      :class:`AggregateUncertaintyd`     one score per case from a map
                                                                      (:func:`monai_unc.aggregation.aggregate`)
:class:`UncertaintyToDiscrete`     :class:`UncertaintyToDiscreted`    a map -> binary "uncertain" mask ``u >= t``
                                                                      (fixed ``t`` or a per-case quantile)
:class:`SamplesToLabels`           :class:`SamplesToLabelsd`          samples ``(S, C, *spatial)`` -> sampled label
                                                                      maps ``(S, *spatial)`` (argmax per sample)
:func:`invert_samples`             :class:`InvertSamplesd`            samples ``(S, C, *spatial)`` on the network's
                                                                      grid -> on the original grid (``Invertd`` for
                                                                      a stack of samples)
=================================  =================================  ==============================================

The moments of :class:`UncertaintyMeasures` are accumulated by :class:`~monai_unc.stats.SampleStats` and the
measures derived by :func:`~monai_unc.stats.derive_measures`, the same code the inferers use.

Geometry and inversion: none of these transforms changes the grid; two MetaTensors they compare voxel by voxel (a
prediction and its label, a map and its mask) must lie on one grid when they have one shape (``ValueError``
otherwise, :func:`~monai_unc.io.grid_mismatch`); every new map is a ``MetaTensor`` carrying a
copy of the source's ``meta`` (affine, ``filename_or_obj``) and ``applied_operations`` (numpy in gives numpy out,
a plain tensor a plain tensor). So ``SaveImaged`` writes the map with the input's affine and file name, and
``Invertd(keys=<map>, orig_keys="image", transform=<preprocessing>)`` resamples it back to the original image grid
like the prediction. They are not ``InvertibleTransform`` s themselves because they only add keys (their inverse
is to drop the key); put them after ``Invertd`` or invert their outputs through ``orig_keys``. MONAI's ``Invertd``
cannot invert samples ``(S, C, *spatial)`` (an inferer's ``samples`` with ``keep_samples=True``): its spatial
transforms read the sample axis as the channels and the classes as a spatial axis; :class:`InvertSamplesd` does.
"""

from __future__ import annotations

import string
import warnings
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from monai.config import KeysCollection
from monai.data import MetaTensor
from monai.transforms import Invertd, MapTransform, Transform
from monai.utils import TransformBackends

from ._utils import (
    argmax,
    check_bool,
    check_class_space,
    check_exclusive_channels,
    check_finite,
    check_labels,
    check_probabilities,
    check_unit_interval,
    exceeds,
    keep_meta,
    real_number,
    stated_affine,
    to_tensor,
)
from .aggregation import aggregate, canonical_method, check_method_options, check_threshold
from .io import grid_mismatch
from .keys import UncertaintyKeys, canonical_measure
from .measures import mutual_information_from_entropies, predictive_entropy, variance_from_moments
from .stats import SampleStats, derive_measures

__all__ = [
    "error_map",
    "invert_samples",
    "UncertaintyMeasures",
    "ErrorMap",
    "AggregateUncertainty",
    "UncertaintyToDiscrete",
    "SamplesToLabels",
    "UncertaintyMeasuresd",
    "ErrorMapd",
    "AggregateUncertaintyd",
    "UncertaintyToDiscreted",
    "SamplesToLabelsd",
    "InvertSamplesd",
]

K = UncertaintyKeys
#: measures a transform can produce (``samples`` is an input, never an output; ``window_disagreement`` only comes
#: from sliding-window stitching inside an inferer)
_MEASURES = tuple(k.value for k in K if k not in (K.SAMPLES, K.WINDOW_DISAGREEMENT))
_BACKENDS = [TransformBackends.TORCH, TransformBackends.NUMPY]


# ------------------------------------------------------------------------------------------------ helpers
def _like_source(result: torch.Tensor, source: Any) -> Any:
    """``result`` in the container of ``source``: MetaTensor (with a copy of its meta and applied operations),
    numpy array, or plain tensor."""
    if isinstance(source, MetaTensor):
        return keep_meta(result, source)
    if isinstance(source, np.ndarray):
        return result.detach().cpu().numpy()
    return result


def _item(x: Any, name: str) -> torch.Tensor:
    """``x`` (one item of a decollated batch) as a tensor (:func:`~monai_unc._utils.to_tensor`).

    A batched MetaTensor (``is_batch``, e.g. the output of an inferer before ``decollate_batch``) raises
    ``ValueError`` naming ``name``: found by hostile testing, the probabilities ``(B, C, *spatial)`` of two patients
    were read as two samples of one case and averaged into one map, and a batch of one gave maps with a batch axis
    and the batch's meta.
    """
    if isinstance(x, MetaTensor) and x.is_batch:
        affine = x.affine
        hint = ""
        if affine.ndim == 3 and affine.shape[0] == 1 and x.ndim >= 1 and x.shape[0] != 1:
            # found by hostile review: samples of one case stacked from a loader's batch of one keep is_batch and its
            # meta of one case, as do the outputs of several batches of one concatenated; the two look alike, and
            # decollate_batch, the only way out named, split the samples into one "case" per sample
            hint = (f"; its meta is that of one case over {x.shape[0]} entries: the samples of one case stacked from "
                    f"a batch of one keep is_batch (pass {name}.as_tensor(), or stack the decollated item's outputs), "
                    "the outputs of several batches concatenated are several cases (decollate them)")
        raise ValueError(
            f"{name} is a batch (MetaTensor with is_batch=True, shape {tuple(x.shape)}): these transforms act on one "
            f"case; apply them after decollate_batch (e.g. as post-transforms of an engine), not to a batch{hint}"
        )
    return to_tensor(x, name)


def _check_two_classes(x: torch.Tensor, dim: int, multilabel: bool, name: str, layout: str) -> None:
    """``ValueError`` for one channel without ``multilabel``, in the user's layout and with the way out.

    Found by hostile testing: a one-channel sigmoid map ``(1, H, W)`` with ``input_type="probs"`` was refused as
    "at least 2 classes along dim 1, got shape (1, 1, H, W)", a dimension and a shape the user never passed.
    """
    if not multilabel and x.shape[dim] < 2:
        raise ValueError(
            f"{name} must be {layout} with at least 2 classes, got shape {tuple(x.shape)}: a one-channel sigmoid "
            "probability is a region of its own, pass multilabel=True"
        )


def _check_spatial_axes(x: torch.Tensor, lead: int, name: str, layout: str, hint: str) -> None:
    """``ValueError`` unless ``x`` has ``lead`` leading axes and 2 or 3 spatial axes (MONAI's 2D / 3D images).

    Found by hostile testing: the sigmoid probabilities ``(3, H, W)`` of one 2D slice, given with
    ``multilabel=True`` and the default ``input_type="samples"``, were read as 3 samples of ``H`` regions over a 1D
    image and gave ``(H, W)`` "maps" (the average of the three regions), which look like a 2D map without its
    channel axis.
    """
    if x.ndim - lead not in (2, 3):
        raise ValueError(
            f"{name} must be {layout} with 2 or 3 spatial axes, got shape {tuple(x.shape)} "
            f"({x.ndim - lead} spatial axes; {hint})"
        )


def _check_same_grid(a: Any, b: Any, name_a: str, name_b: str) -> None:
    """``ValueError`` when two MetaTensors of one spatial shape lie on different grids.

    The rule of :func:`~monai_unc.io.grid_mismatch`.

    Found by hostile testing: a prediction left on the ``Orientationd`` grid of a cubic scan and the label on the
    file's grid have the same shape, and the error map of a perfect prediction counted 28 % of the voxels as
    errors. Only ``(4, 4)`` affines are compared, and not MONAI's default identity affine (a MetaTensor built without
    geometry, which says nothing about the grid).
    """
    if not (isinstance(a, MetaTensor) and isinstance(b, MetaTensor)) or a.shape[1:] != b.shape[1:]:
        return
    aa, ab = stated_affine(a.affine), stated_affine(b.affine)
    if aa is None or ab is None:
        return
    problem = grid_mismatch(aa, ab, tuple(int(n) for n in a.shape[1:]))
    if problem is not None:
        raise ValueError(
            f"{name_a} and {name_b} have the same shape but different affines ({problem}): they are not on the same "
            f"grid; invert the preprocessing first (Invertd) or resample one onto the other"
        )


def _key_name(template: str, key: Hashable, what: str) -> str:
    try:
        return template.format(key=key, measure=what, method=what)
    except (KeyError, IndexError) as e:
        raise ValueError(f"output key template {template!r} may only use {{key}} and {{measure}}/{{method}}") from e


def _check_template(template: str, keys: Sequence[Hashable], fields: Sequence[str] = ("key", "measure", "method")
                    ) -> None:
    """``output_key`` must be a string template using only ``fields``; with several source keys it must contain
    ``{key}``.

    A non-string (``None``, a number, a list of keys) was accepted when built and failed at the first case with
    ``AttributeError: ... has no attribute 'format'`` (found by hostile testing): ``TypeError`` naming the argument.
    A field the transform does not fill (``{measure}`` in :class:`UncertaintyToDiscreted`, which silently became an
    empty string and stored the mask under ``"mi_"``), an attribute or index (``{key.x}``, an ``AttributeError`` at
    the first case) or a malformed template raise ``ValueError`` when built (found by hostile testing).
    """
    if not isinstance(template, str):
        raise TypeError(f"output_key must be a string template such as '{{key}}', got {type(template).__name__}")
    allowed = " and ".join("{" + f + "}" for f in fields)
    try:
        used = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    except ValueError as e:
        raise ValueError(f"output_key {template!r} is not a valid template ({e}); it may use {allowed}") from e
    bad = [f for f in used if f not in fields]
    if bad:
        raise ValueError(f"output_key {template!r} may only use {allowed}, got {{{bad[0]}}}")
    if len(keys) > 1 and "{key}" not in template:
        raise ValueError(
            f"output_key {template!r} must contain '{{key}}' when several source keys are given "
            "(otherwise their outputs would overwrite each other)"
        )


def _labels_from(x: torch.Tensor, name: str) -> torch.Tensor:
    """Channel-first label map ``(1, *spatial)``: one channel is a label map, ``C >= 2`` channels (probabilities,
    their logarithm, logits or one-hot) are reduced by argmax.

    Channels with values in ``[0, 1]`` that do not sum to 1 at some voxel (the zero padding of inverted class
    probabilities aside, but not of a one-hot map, which one without its background channel looks like), and
    integer channels other than a one-hot map (stacked label maps) have no class to take the argmax of:
    ``ValueError`` (:func:`~monai_unc._utils.check_exclusive_channels`,
    the check of the spatial metrics; found by hostile review: only overlapping channels were refused, and the
    sigmoid probabilities of regions without a background channel were reduced with channel 0 as the background).
    """
    if x.ndim < 2:
        raise ValueError(f"{name} must be channel first (C, *spatial), got shape {tuple(x.shape)}")
    if x.shape[0] == 1:
        return check_labels(x, name)
    check_finite(x, name)
    check_exclusive_channels(x, name, 0)
    return argmax(x, dim=0, keepdim=True)


def error_map(pred: Any, label: Any) -> Any:
    """Voxel error ``e(x) = [argmax_c pred(x) != label(x)]`` of one case, ``(1, *spatial)`` float32 in {0, 1}.

    Args:
        pred: channel-first prediction ``(C, *spatial)``: probabilities or one-hot (``C >= 2``, reduced by argmax;
            the first maximum wins on ties) or a label map ``(1, *spatial)``.
        label: reference ``(1, *spatial)`` label map or one-hot ``(C, *spatial)``.

    Returns numpy for numpy ``pred``, torch otherwise. This is the error the spatial metrics (Zeevi et al., Sec. 3) and
    the calibration "accuracy" use. Raises ``ValueError`` when the spatial shapes differ, the labels are not
    integral, or ``pred`` and ``label`` are MetaTensors on different grids.
    """
    _check_same_grid(pred, label, "pred", "label")
    p = _item(pred, "pred")
    t = _item(label, "label")
    if p.shape[1:] != t.shape[1:]:
        raise ValueError(
            f"pred and label must have the same spatial shape, got {tuple(p.shape[1:])} and {tuple(t.shape[1:])}"
        )
    lp = _labels_from(p, "pred")
    lt = _labels_from(t, "label").to(lp.device)
    # labels outside the classes of C >= 2 channels (an ignore label 255) are refused, not counted as errors
    check_class_space(tuple(int(x.shape[0]) if x.shape[0] >= 2 else None for x in (p, t)), (lp, lt),
                      names=("pred", "label"),
                      hint="an ignore label? the error map scores every voxel: mask such voxels out of what reads it")
    err = (lp != lt).to(torch.float32)
    return err.cpu().numpy() if isinstance(pred, np.ndarray) else err


def _available_measures(input_type: str, has_expected_entropy: bool, has_mean_sq: bool) -> list[str]:
    """The measures that ``input_type`` (plus the optional statistics) determines."""
    if input_type == "samples":
        return list(_MEASURES)
    out = [K.PRED.value, K.PREDICTIVE_ENTROPY.value, K.ONE_MINUS_MAX_PROB.value]
    if has_expected_entropy:
        out += [K.EXPECTED_ENTROPY.value, K.MUTUAL_INFORMATION.value]
    if has_mean_sq:
        out.append(K.VARIANCE.value)
    return out


def _missing_statistics(missing: Sequence[str], ee_name: str, sq_name: str) -> ValueError:
    need = {
        K.EXPECTED_ENTROPY.value: ee_name,
        K.MUTUAL_INFORMATION.value: ee_name,
        K.VARIANCE.value: sq_name,
    }
    hints = sorted({need[m] for m in missing if m in need})
    return ValueError(
        f"measures {list(missing)} cannot be derived from input_type='probs' without {' and '.join(hints)}"
    )


def _check_statistic(check: Any, what: str) -> None:
    """Run ``check`` (a validating function of :mod:`monai_unc.measures`); its ``ValueError`` is raised again
    prefixed with ``what``, which names the user's argument or key.

    The statistics ``expected_entropy`` and ``mean_sq`` of ``input_type="probs"`` must belong to the probabilities:
    ``0 <= EE <= PE`` and ``mean^2 <= mean_sq <= mean`` (found by hostile testing: a negative EE gave an MI above
    PE, a variance passed as ``mean_sq`` a variance clamped to 0, an EE above PE an MI of 0, all silently).
    """
    try:
        check()
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from e


# ------------------------------------------------------------------------------------------------ array transforms

def _current_measures(measures: str | Sequence[str]) -> list[str]:
    """The measures of a transform's ``measures`` argument, deprecated names replaced (:func:`canonical_measure`).

    The warning points at the line constructing the transform (called from its ``__init__``). A loop, not a list
    comprehension: before Python 3.12 a comprehension is a frame of its own, which pointed the warning into this
    module, where Python's default filters hide a ``DeprecationWarning`` (found by the upgrade review).
    """
    out = []
    for m in [measures] if isinstance(measures, str) else list(measures):
        out.append(canonical_measure(m, stacklevel=4))
    return out

class UncertaintyMeasures(Transform):
    """Uncertainty maps of one case from its samples or from its (mean) probabilities.

    ``input_type="samples"``: ``img`` is ``(S, C, *spatial)`` probabilities of ``S`` samples (e.g. the ``samples``
    an inferer returns with ``keep_samples=True``, or ``TestTimeAugmentation`` outputs). Every measure is
    available: ``pred`` (mean), ``predictive_entropy``, ``expected_entropy``, ``mutual_information``,
    ``one_minus_max_prob``, ``variance``.

    ``input_type="probs"``: ``img`` is ``(C, *spatial)`` probabilities (a deterministic softmax, or the mean of
    samples). ``predictive_entropy`` and ``one_minus_max_prob`` are always available; ``expected_entropy`` and
    ``mutual_information`` need the ``expected_entropy`` argument (the per-voxel mean of ``H(p_s)``,
    ``(1, *spatial)``), ``variance`` needs ``mean_sq`` (the per-voxel mean of ``p_s^2``, ``(C, *spatial)``): the
    statistics an inferer streams. They must belong to ``img`` up to rounding: ``0 <= expected_entropy <= H(img)``
    and ``img^2 <= mean_sq <= img``, else ``ValueError`` naming the argument (a variance passed as ``mean_sq``).

    Formulas (ValUES, eq. 1): PE = H(mean p), EE = mean H(p_s), MI = PE - EE (clamped at 0),
    one_minus_max_prob = 1 - max_c mean p, variance = mean_c Var_s p_c (population). Natural log;
    ``normalize=True`` divides the entropies by ``log C``.

    ``multilabel=True`` (region-based sigmoid models, e.g. BraTS TC/WT/ET): every channel of ``img`` is the
    foreground probability of an independent Bernoulli variable (values in ``[0, 1]``, no sum constraint,
    ``C >= 1``) and every measure is computed per channel with the binary entropy ``H_b``: PE_c = H_b(mean p_c),
    EE_c = mean H_b(p_s,c), MI_c = PE_c - EE_c, one_minus_max_prob_c = 1 - max(mean p_c, 1 - mean p_c),
    variance_c = Var_s p_c; maps are ``(C, *spatial)``, one per region, and ``normalize`` divides by ``log 2``.
    ``expected_entropy`` is then ``(C, *spatial)``.

    Args:
        measures: names from :class:`~monai_unc.keys.UncertaintyKeys` (default: all available for the input,
            without ``pred`` for ``input_type="probs"``, since that is the input). The deprecated name
            ``"max_softmax"`` is accepted (with a ``DeprecationWarning``) and gives ``"one_minus_max_prob"``.
        input_type: ``"samples"`` or ``"probs"``.
        normalize: divide entropies by ``log C`` (``log 2`` with ``multilabel``).
        multilabel: channels are independent Bernoulli variables (see above).

    ``__call__(img, expected_entropy=None, mean_sq=None)`` returns ``{measure: map}``: ``(1, *spatial)`` maps
    (``pred`` and every ``multilabel`` map ``(C, *spatial)``) in the dtype and container of ``img``; a MetaTensor
    gives MetaTensors with a copy of its meta and applied operations.
    """

    backend = _BACKENDS

    def __init__(
        self,
        measures: Sequence[str] | str | None = None,
        input_type: str = "samples",
        normalize: bool = False,
        multilabel: bool = False,
    ) -> None:
        if input_type not in ("samples", "probs"):
            raise ValueError(f"input_type must be 'samples' or 'probs', got {input_type!r}")
        self.input_type = input_type
        if measures is not None:
            measures = _current_measures(measures)
            unknown = [m for m in measures if m not in _MEASURES]
            if unknown:
                raise ValueError(f"measures must be among {_MEASURES}, got {unknown}")
            if not measures:
                raise ValueError("measures selects nothing")
        self.measures: list[str] | None = measures
        self.normalize = check_bool(normalize, "normalize")  # a bundle override "false" is a truthy string
        if not isinstance(multilabel, (bool, np.bool_)):
            raise TypeError(f"multilabel must be a bool, got {type(multilabel).__name__}")
        self.multilabel = bool(multilabel)

    def _wanted(self, has_ee: bool, has_sq: bool, ee_name: str, sq_name: str) -> list[str]:
        available = _available_measures(self.input_type, has_ee, has_sq)
        if self.measures is None:
            return [m for m in available if not (self.input_type == "probs" and m == K.PRED.value)]
        missing = [m for m in self.measures if m not in available]
        if missing:
            raise _missing_statistics(missing, ee_name, sq_name)
        return list(self.measures)

    def _moments(
        self, img: Any, expected_entropy: Any, mean_sq: Any, wanted: Sequence[str], names: tuple[str, str, str]
    ) -> tuple[dict[str, torch.Tensor], torch.dtype]:
        name, ee_name, sq_name = names
        x = _item(img, name)
        if not x.is_floating_point():
            raise TypeError(f"{name} must hold floating point probabilities, got dtype {x.dtype}")
        if self.input_type == "samples":
            _check_spatial_axes(x, 2, name, "samples (S, C, *spatial)",
                                "probabilities (C, *spatial) of one case? pass input_type='probs'")
            _check_two_classes(x, 1, self.multilabel, name, "samples (S, C, *spatial)")
            (check_unit_interval if self.multilabel else check_probabilities)(x, name, channel_dim=1, min_ndim=3)
            stats = SampleStats(track_variance=K.VARIANCE.value in wanted, validate=False, multilabel=self.multilabel)
            for s in range(x.shape[0]):
                stats.update(x[s : s + 1])  # (1, C, *spatial): one sample
            return stats.moments(), x.dtype
        _check_spatial_axes(x, 1, name, "probabilities (C, *spatial)",
                            "samples (S, C, *spatial)? pass input_type='samples'")
        probs = x[None]
        _check_two_classes(x, 0, self.multilabel, name, "probabilities (C, *spatial)")
        (check_unit_interval if self.multilabel else check_probabilities)(probs, name)
        moments = {K.PRED.value: probs.to(torch.float64)}
        ee_channels = x.shape[0] if self.multilabel else 1
        if expected_entropy is not None:
            ee = _item(expected_entropy, ee_name)
            if tuple(ee.shape) != (ee_channels, *x.shape[1:]):
                what = "one channel per region" if self.multilabel else "one channel"
                raise ValueError(
                    f"{ee_name} must have shape {(ee_channels, *x.shape[1:])} ({what}), got {tuple(ee.shape)}"
                )
            check_finite(ee, ee_name)
            _check_statistic(
                lambda: mutual_information_from_entropies(
                    predictive_entropy(probs[None], validate=False, multilabel=self.multilabel), ee[None]
                ),
                f"{ee_name} is not the expected entropy of the samples whose mean is {name}",
            )
            moments[K.EXPECTED_ENTROPY.value] = ee[None].to(torch.float64)
        else:  # placeholder never read: PE and one_minus_max_prob do not use it
            moments[K.EXPECTED_ENTROPY.value] = torch.zeros_like(probs[:, :ee_channels], dtype=torch.float64)
        if mean_sq is not None:
            sq = _item(mean_sq, sq_name)
            if tuple(sq.shape) != tuple(x.shape):
                raise ValueError(f"{sq_name} must have the shape of {name} {tuple(x.shape)}, got {tuple(sq.shape)}")
            check_finite(sq, sq_name)
            _check_statistic(
                lambda: variance_from_moments(probs, sq[None], multilabel=self.multilabel),
                f"{sq_name} is not the mean of p_s^2 of the samples whose mean is {name}",
            )
            moments["mean_sq"] = sq[None].to(torch.float64)
        return moments, x.dtype

    def _compute(
        self,
        img: Any,
        expected_entropy: Any = None,
        mean_sq: Any = None,
        names: tuple[str, str, str] = ("img", "expected_entropy", "mean_sq"),
    ) -> dict[str, Any]:
        if self.input_type == "samples" and (expected_entropy is not None or mean_sq is not None):
            raise ValueError("expected_entropy and mean_sq only apply to input_type='probs'")
        wanted = self._wanted(expected_entropy is not None, mean_sq is not None, names[1], names[2])
        moments, dtype = self._moments(img, expected_entropy, mean_sq, wanted, names)
        maps = derive_measures(moments, wanted, normalize=self.normalize, out_dtype=dtype, multilabel=self.multilabel)
        return {measure: _like_source(value[0], img) for measure, value in maps.items()}

    def __call__(self, img: Any, expected_entropy: Any = None, mean_sq: Any = None) -> dict[str, Any]:
        return self._compute(img, expected_entropy, mean_sq)


class ErrorMap(Transform):
    """The voxel error map ``[argmax pred != label]`` ``(1, *spatial)`` float32 (see :func:`error_map`).

    ``__call__(pred, label)``: ``pred`` probabilities / one-hot ``(C, *spatial)`` or a label map ``(1, *spatial)``,
    ``label`` a label map ``(1, *spatial)`` or one-hot. The result is in the container of ``pred`` (a MetaTensor with
    a copy of its meta, numpy, or a tensor).
    """

    backend = _BACKENDS

    def __call__(self, pred: Any, label: Any) -> Any:
        _check_same_grid(pred, label, "pred", "label")
        return _like_source(error_map(_item(pred, "pred"), label), pred)


class AggregateUncertainty(Transform):
    """One uncertainty score per case from a map (ValUES, Sec. 4.3), via :func:`monai_unc.aggregation.aggregate`.

    Args:
        method: ``"mean"``, ``"sum"``, ``"patch_sum"`` (largest box sum), ``"patch_mean"`` (largest box mean) or
            ``"threshold"`` (see :func:`~monai_unc.aggregation.aggregate`). The former ``"patch"`` is deprecated:
            it becomes ``"patch_sum"`` (``"patch_mean"`` with ``patch_reduction="mean"``) with a
            ``DeprecationWarning``, and ``self.method`` holds the new name.
        patch_size: as in :func:`~monai_unc.aggregation.aggregate`.
        threshold: as in :func:`~monai_unc.aggregation.aggregate` (``method="threshold"`` only: ``ValueError``
            with another method).
        empty_value: as in :func:`~monai_unc.aggregation.aggregate` (a value other than 0 with another method than
            ``"threshold"``: ``ValueError`` when built).
        patch_reduction: deprecated, as in :func:`~monai_unc.aggregation.aggregate` (the method names the box
            reduction).

    ``__call__(img, mask=None)``: ``img`` a one-channel map ``(1, *spatial)`` (2 or 3 spatial axes), ``mask`` an
    optional ``(1, *spatial)`` binary mask or label map restricting the voxels (non-zero = inside; one-channel
    probabilities raise ``ValueError``, threshold them first; a probability / one-hot ``(C, *spatial)`` mask with
    ``C >= 2`` means "argmax > 0", and channels in ``[0, 1]`` that do not sum to 1, such as the sigmoid outputs of a
    region-based model, raise ``ValueError``). Returns the score as a 0-dim float64 tensor (NaN
    with a ``UserWarning`` for an empty mask).
    """

    backend = _BACKENDS

    def __init__(
        self,
        method: str = "mean",
        patch_size: int | Sequence[int] = 10,
        threshold: float | None = None,
        patch_reduction: str | None = None,
        empty_value: float = 0.0,
    ) -> None:
        method = canonical_method(method, patch_reduction, stacklevel=3)
        if method == "threshold" and threshold is None:
            raise ValueError("method='threshold' needs threshold=t (fit it with monai_unc.aggregation.fit_threshold)")
        check_method_options(method, threshold, empty_value, patch_size)  # refused now, not at the first case
        self.method = method
        self.kwargs = {"patch_size": patch_size, "threshold": threshold, "empty_value": empty_value}

    @staticmethod
    def _mask(mask: Any, name: str, spatial: Sequence[int] | None = None) -> torch.Tensor:
        """Boolean ``(1, *spatial)`` mask: ``C >= 2`` channels by argmax > 0, one channel by non-zero.

        A one-channel mask must be binary or a label map: probabilities (non-integral values) are non-zero almost
        everywhere and would select the whole volume, so they raise ``ValueError``. ``spatial``: the spatial shape
        of the map, checked first (found by hostile testing: a binary mask ``(H, W, D)`` without its channel axis
        was read as ``H`` overlapping channels and refused as "sigmoid probabilities").
        """
        m = _item(mask, name)
        if spatial is not None and tuple(m.shape[1:]) != tuple(spatial):
            raise ValueError(
                f"mask {name!r} must be channel first (1 or C, *spatial) with the map's spatial shape "
                f"{tuple(spatial)}, got shape {tuple(m.shape)}"
            )
        if m.ndim >= 2 and m.shape[0] > 1:
            return _labels_from(m, name) > 0
        if m.is_floating_point():
            check_finite(m, name)
            if not bool((m == m.round()).all()):
                raise ValueError(
                    f"mask {name!r} must be binary or a label map (non-zero = inside), got non-integral values (e.g. "
                    "probabilities, which are non-zero almost everywhere): threshold it first, e.g. "
                    "AsDiscreted(threshold=0.5)"
                )
        return m != 0

    def _score(self, img: Any, mask: torch.Tensor | None, name: str, mask_name: str) -> torch.Tensor:
        u = _item(img, name)
        # checked here, not left to ``aggregate``: found by hostile testing, a NaN map or a 4D map was refused as
        # "uncertainty contains ..." / "got (1, 1, ...)", a name and a batch axis the user never passed
        if u.ndim not in (3, 4) or u.shape[0] != 1:
            raise ValueError(f"{name} must be a one-channel map (1, *spatial) with 2 or 3 axes, got {tuple(u.shape)}")
        check_finite(u, name)
        if mask is not None and mask.shape[1:] != u.shape[1:]:
            raise ValueError(
                f"mask {mask_name!r} has spatial shape {tuple(mask.shape[1:])}, {name} has {tuple(u.shape[1:])}"
            )
        score = aggregate(u[None], method=self.method, mask=None if mask is None else mask[None], **self.kwargs)
        return torch.as_tensor(score, dtype=torch.float64).reshape(())

    def __call__(self, img: Any, mask: Any = None) -> torch.Tensor:
        if mask is not None:
            _check_same_grid(img, mask, "img", "mask")
            mask = self._mask(mask, "mask", _item(img, "img").shape[1:])
        return self._score(img, mask, "img", "mask")


def _scalar(value: Any) -> Any:
    """The number a 0-d tensor or numpy array of a real (not bool) dtype holds; anything else unchanged.

    Found by hostile review: the check that refuses a bool or a string as ``threshold`` refused the 0-d tensor of
    ``UncertaintyToDiscrete(threshold=torch.quantile(u, 0.95))`` too, which had been read as the number it holds.
    """
    if isinstance(value, torch.Tensor) and value.ndim == 0 and value.dtype != torch.bool and not value.is_complex():
        return value.item()
    if isinstance(value, np.ndarray) and value.ndim == 0 and (np.issubdtype(value.dtype, np.floating)
                                                              or np.issubdtype(value.dtype, np.integer)):
        return value[()]
    return value


class UncertaintyToDiscrete(Transform):
    """Binary "uncertain" mask ``u >= t`` (uint8 in {0, 1}) of a map ``(1, *spatial)``, e.g. to flag voxels for review.

    Exactly one of ``threshold`` (a fixed real number ``t``, also as a 0-d real tensor or array, not a bool, a string
    or an array of one or more axes: ``TypeError``; checked by :func:`monai_unc.aggregation.check_threshold`, as
    ``aggregate``'s; for a cohort-level choice see :func:`monai_unc.aggregation.fit_threshold`) or ``quantile``
    (``t`` = that per-case quantile of the map, e.g. 0.95 flags the 5 % most uncertain voxels; ties at ``t`` are
    flagged, so when the quantile falls on the map's
    minimum, shared by most voxels, every voxel is flagged, with a ``UserWarning``) is given. The mask is in the
    container of the map. ``u >= t`` compares the exact values (``_utils.exceeds``): a float32 map's
    0.69999999 (float32 0.7) is not flagged at ``threshold=0.7``, as it would be after rounding ``t`` to float32.
    """

    backend = _BACKENDS

    def __init__(self, threshold: float | None = None, quantile: float | None = None) -> None:
        if (threshold is None) == (quantile is None):
            raise ValueError("give exactly one of threshold= or quantile=")
        # a bool or a string ("0.5" of a bundle override) is refused, not read as 1.0 / 0.5 (found by hostile
        # testing: threshold=True flagged nothing, quantile=True everything, silently); a 0-d tensor or array of a
        # real dtype (``torch.quantile(u, 0.95)``, a cohort threshold) is the number it holds, as before that check
        # the threshold through aggregate's own check (review 67: aggregate refused the 0-d tensor this accepted)
        threshold = None if threshold is None else check_threshold(threshold, "threshold", error=TypeError)
        quantile = _scalar(quantile)
        if quantile is not None and not 0.0 <= real_number(quantile, "quantile") <= 1.0:
            raise ValueError(f"quantile must be in [0, 1], got {quantile}")
        self.threshold = threshold
        self.quantile = quantile

    def _discretize(self, img: Any, name: str) -> Any:
        u = _item(img, name)
        if u.ndim < 2 or u.shape[0] != 1:
            raise ValueError(f"{name} must be a one-channel map (1, *spatial), got shape {tuple(u.shape)}")
        check_finite(u, name)
        if self.threshold is not None:
            t = float(self.threshold)
        else:
            flat = u.reshape(-1).to(torch.float64)
            t = float(torch.quantile(flat, float(self.quantile)))
            if float(self.quantile) > 0 and t <= float(flat.min()):
                warnings.warn(
                    f"{name}: quantile={self.quantile} falls on the map's minimum {t:.6g}, which at least "
                    f"{float(self.quantile):.0%} of the voxels share (e.g. a mutual information clamped at 0): every "
                    "voxel is flagged; use threshold= instead",
                    UserWarning,
                    stacklevel=3,
                )
        return _like_source(exceeds(u, t, inclusive=True).to(torch.uint8), img)

    def __call__(self, img: Any) -> Any:
        return self._discretize(img, "img")


class SamplesToLabels(Transform):
    """Sampled label maps ``(S, *spatial)`` int64 from sample probabilities ``(S, C, *spatial)`` (argmax over ``C``
    per sample): the ``y_pred`` of :class:`~monai_unc.metrics.ambiguity.GEDMetric` after collation. The result is in
    the container of the samples. Channels with values in ``[0, 1]`` that do not sum to 1 (per-region sigmoid samples
    of a region-based model: summing to more than 1 where regions overlap, to less than 1 without a background
    channel) have no argmax class and raise ``ValueError``."""

    backend = _BACKENDS

    def _labels(self, img: Any, name: str) -> Any:
        s = _item(img, name)
        _check_spatial_axes(s, 2, name, "samples (S, C>=2, *spatial)", "a label map needs no argmax")
        if s.shape[1] < 2:
            raise ValueError(f"{name} must be samples (S, C>=2, *spatial), got shape {tuple(s.shape)}")
        check_finite(s, name)
        check_exclusive_channels(s, name, 1)
        return _like_source(argmax(s, dim=1), img)

    def __call__(self, img: Any) -> Any:
        return self._labels(img, "img")


# ------------------------------------------------------------------------------------------------ dict transforms
class UncertaintyMeasuresd(MapTransform):
    """Dictionary version of :class:`UncertaintyMeasures`: the uncertainty maps of ``d[key]`` into the data dict.

    Args:
        keys: source key(s): samples ``(S, C, *spatial)`` or probabilities ``(C, *spatial)``.
        measures: as in :class:`UncertaintyMeasures`.
        input_type: as in :class:`UncertaintyMeasures`.
        normalize: as in :class:`UncertaintyMeasures`.
        multilabel: as in :class:`UncertaintyMeasures` (``True``: per-region maps of a sigmoid region-based model,
            ``(C, *spatial)`` each).
        expected_entropy_key: key of the per-voxel mean of ``H(p_s)`` for ``input_type="probs"``, which makes
            ``expected_entropy`` and ``mutual_information`` available.
        mean_sq_key: key of the per-voxel mean of ``p_s^2`` for ``input_type="probs"``, which makes ``variance``
            available.
        output_key: template of the output keys, with ``{measure}`` and optionally ``{key}`` (default
            ``"{measure}"``; with several source keys it must contain ``{key}``).
        allow_missing_keys: skip absent source keys instead of raising ``KeyError``.

    Outputs are ``(1, *spatial)`` maps (``pred`` ``(C, *spatial)``) in the source's dtype and container; a
    MetaTensor source gives MetaTensors with a copy of its meta, so ``SaveImaged`` and ``Invertd`` work on them.
    The mean probabilities (``pred``, in the default measures of samples) never replace another entry of the data:
    an engine's ``pred`` holds logits (or ``log(mean p)``) that a later ``Activationsd`` reads, so ``ValueError``
    (leave ``pred`` out of ``measures`` or put ``{key}`` in ``output_key``).
    """

    backend = _BACKENDS

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
        multilabel: bool = False,
    ) -> None:
        super().__init__(keys, allow_missing_keys)
        if measures is not None:
            measures = _current_measures(measures)
        self.transform = UncertaintyMeasures(
            measures, input_type=input_type, normalize=normalize, multilabel=multilabel
        )
        if input_type == "samples" and (expected_entropy_key is not None or mean_sq_key is not None):
            raise ValueError("expected_entropy_key and mean_sq_key only apply to input_type='probs'")
        self.expected_entropy_key = expected_entropy_key
        self.mean_sq_key = mean_sq_key
        # checked here, before any data: which measures the configured keys determine
        self.measures = self.transform._wanted(
            expected_entropy_key is not None, mean_sq_key is not None, "expected_entropy_key", "mean_sq_key"
        )
        if not self.measures:
            raise ValueError("measures selects nothing")
        _check_template(output_key, self.keys)
        if "{measure}" not in output_key and len(self.measures) > 1:
            raise ValueError(f"output_key {output_key!r} must contain '{{measure}}' when several measures are asked")
        self.output_key = output_key

    @property
    def input_type(self) -> str:
        return self.transform.input_type

    @property
    def normalize(self) -> bool:
        return self.transform.normalize

    @property
    def multilabel(self) -> bool:
        return self.transform.multilabel

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        d = dict(data)
        ee_key, sq_key = self.expected_entropy_key, self.mean_sq_key
        for key in self.key_iterator(d):
            for arg, stat in (("expected_entropy_key", ee_key), ("mean_sq_key", sq_key)):
                if stat is not None and stat not in d:  # was a bare KeyError('ee') (found by hostile testing)
                    raise KeyError(f"{arg} {stat!r} is not in the data (keys: {sorted(map(str, d))})")
            maps = self.transform._compute(
                d[key],
                None if ee_key is None else d[ee_key],
                None if sq_key is None else d[sq_key],
                names=(str(key), str(ee_key), str(sq_key)),
            )
            for measure in self.measures:
                out_key = _key_name(self.output_key, key, measure)
                if measure == K.PRED.value and out_key in d and out_key not in self.keys:
                    # found by hostile testing: the engine's "pred" (log(mean p) or logits, read by the bundle's
                    # Activationsd) was replaced by probabilities, and Activationsd(sigmoid=True) + AsDiscreted
                    # then labelled every voxel foreground
                    raise ValueError(
                        f"{type(self).__name__}: the mean probabilities of {key!r} would replace the data's "
                        f"{out_key!r} (e.g. the network output that Activationsd reads as logits); leave 'pred' out "
                        "of measures= or choose output_key='{key}_{measure}'"
                    )
                d[out_key] = maps[measure]
        return d


class ErrorMapd(MapTransform):
    """Dictionary version of :class:`ErrorMap`: adds the voxel error map ``[argmax pred != label]``
    ``(1, *spatial)``.

    Args:
        pred_key: prediction: probabilities / one-hot ``(C, *spatial)`` or a label map ``(1, *spatial)``.
        label_key: reference label map ``(1, *spatial)`` or one-hot.
        output_key: where the map goes (default ``"error"``); a MetaTensor with the prediction's meta.
        allow_missing_keys: do nothing when either key is absent instead of raising ``KeyError``.
    """

    backend = _BACKENDS

    def __init__(
        self,
        pred_key: str = "pred",
        label_key: str = "label",
        output_key: str = "error",
        allow_missing_keys: bool = False,
    ) -> None:
        super().__init__([pred_key, label_key], allow_missing_keys)
        self.pred_key, self.label_key, self.output_key = pred_key, label_key, output_key
        self.transform = ErrorMap()

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        d = dict(data)
        present = list(self.key_iterator(d))  # raises KeyError for a missing key unless allowed
        if len(present) < 2:
            return d
        d[self.output_key] = self.transform(d[self.pred_key], d[self.label_key])
        return d


class AggregateUncertaintyd(MapTransform):
    """Dictionary version of :class:`AggregateUncertainty`: one uncertainty score per case from each map.

    The score (0-dim float64 tensor) is stored in the data dict under ``output_key`` (default ``"{key}_{method}"``,
    e.g. ``"mutual_information_mean"``, ``"mutual_information_patch_sum"``) and, when the map is a MetaTensor, in its
    ``meta`` under the same name, so it travels with the map (e.g. into ``MetricsSaver``'s ``batch_transform``).
    ``"{key}_patch_mean"`` without a mask is the ``<measure>_patch_mean`` column of ``monai-unc evaluate``.

    Deprecated: ``method="patch"`` (a box sum by default) stored its score as ``"{key}_patch"``, the name that the
    score columns give the box *mean*. It still computes the same score, with a ``DeprecationWarning`` that names
    the new method and key, and stores it under the new key (``"{key}_patch_sum"``, or ``"{key}_patch_mean"`` with
    ``patch_reduction="mean"``): read the score from there.

    Args:
        keys: uncertainty map keys, each ``(1, *spatial)``.
        method: ``"mean"``, ``"sum"``, ``"patch_sum"``, ``"patch_mean"`` or ``"threshold"`` (see
            :func:`~monai_unc.aggregation.aggregate`); ``"patch"`` is deprecated (above).
        mask_key: optional key of a binary mask or label map ``(1, *spatial)`` restricting the voxels (non-zero =
            inside), e.g. the predicted foreground; a probability / one-hot ``(C, *spatial)`` mask with ``C >= 2``
            means "argmax > 0"; one-channel probabilities raise ``ValueError`` (threshold them first).
        patch_size: as in :func:`~monai_unc.aggregation.aggregate`.
        threshold: as in :func:`~monai_unc.aggregation.aggregate` (``method="threshold"`` only: ``ValueError``
            with another method).
        empty_value: as in :func:`~monai_unc.aggregation.aggregate` (a value other than 0 with another method than
            ``"threshold"``: ``ValueError`` when built).
        patch_reduction: deprecated, as in :func:`~monai_unc.aggregation.aggregate`.
        output_key: template with ``{key}`` and ``{method}``.
        allow_missing_keys: skip absent keys.
    """

    backend = _BACKENDS

    def __init__(
        self,
        keys: KeysCollection,
        method: str = "mean",
        mask_key: str | None = None,
        patch_size: int | Sequence[int] = 10,
        threshold: float | None = None,
        patch_reduction: str | None = None,
        empty_value: float = 0.0,
        output_key: str = "{key}_{method}",
        allow_missing_keys: bool = False,
    ) -> None:
        super().__init__(keys, allow_missing_keys)
        _check_template(output_key, self.keys)
        note = ""
        if method == "patch" and "{method}" in output_key and self.keys:
            first = self.keys[0]
            note = (f"{type(self).__name__} now stores the score under {_key_name(output_key, first, '{method}')!r} "
                    f"instead of {_key_name(output_key, first, 'patch')!r}")
        method = canonical_method(method, patch_reduction, note=note, stacklevel=3)
        self.transform = AggregateUncertainty(method, patch_size, threshold, None, empty_value)
        self.mask_key = mask_key
        self.output_key = output_key

    @property
    def method(self) -> str:
        return self.transform.method

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        d = dict(data)
        mask = None
        for key in self.key_iterator(d):
            if mask is None and self.mask_key is not None:
                if self.mask_key not in d:
                    raise KeyError(f"mask_key {self.mask_key!r} is not in the data (keys: {sorted(map(str, d))})")
                mask = self.transform._mask(d[self.mask_key], self.mask_key, _item(d[key], str(key)).shape[1:])
            if self.mask_key is not None:
                _check_same_grid(d[key], d[self.mask_key], str(key), str(self.mask_key))
            value = self.transform._score(d[key], mask, str(key), str(self.mask_key))
            name = _key_name(self.output_key, key, self.method)
            d[name] = value
            if isinstance(d[key], MetaTensor):
                d[key].meta[name] = float(value)
        return d


class UncertaintyToDiscreted(MapTransform):
    """Dictionary version of :class:`UncertaintyToDiscrete`: binary "uncertain" mask ``u >= t`` of each map
    ``(1, *spatial)``.

    Exactly one of ``threshold`` or ``quantile`` is given (see :class:`UncertaintyToDiscrete`). The output (uint8 in
    {0, 1}) replaces the map unless ``output_key`` (template with ``{key}``) names another key.
    """

    backend = _BACKENDS

    def __init__(
        self,
        keys: KeysCollection,
        threshold: float | None = None,
        quantile: float | None = None,
        output_key: str = "{key}",
        allow_missing_keys: bool = False,
    ) -> None:
        super().__init__(keys, allow_missing_keys)
        self.transform = UncertaintyToDiscrete(threshold, quantile)
        _check_template(output_key, self.keys, fields=("key",))
        self.output_key = output_key

    @property
    def threshold(self) -> float | None:
        return self.transform.threshold

    @property
    def quantile(self) -> float | None:
        return self.transform.quantile

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        d = dict(data)
        for key in self.key_iterator(d):
            d[_key_name(self.output_key, key, "")] = self.transform._discretize(d[key], str(key))
        return d


class SamplesToLabelsd(MapTransform):
    """Dictionary version of :class:`SamplesToLabels`: sampled label maps ``(S, *spatial)`` int64 from sample
    probabilities ``(S, C, *spatial)``.

    ``output_key`` (template with ``{key}``) names the output; by default it replaces the samples.
    """

    backend = _BACKENDS

    def __init__(self, keys: KeysCollection, output_key: str = "{key}", allow_missing_keys: bool = False) -> None:
        super().__init__(keys, allow_missing_keys)
        self.transform = SamplesToLabels()
        _check_template(output_key, self.keys, fields=("key",))
        self.output_key = output_key

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        d = dict(data)
        for key in self.key_iterator(d):
            d[_key_name(self.output_key, key, "")] = self.transform._labels(d[key], str(key))
        return d


# ------------------------------------------------------------------------------------------------ inversion
#: the data key under which :func:`invert_samples` hands the samples, as channels, to ``Invertd``
_FLAT_KEY = "_monai_unc_samples_as_channels"


def invert_samples(
    samples: Any, image: Any, transform: Any, key: Hashable = "image", nearest_interp: bool = True,
    name: str = "samples",
) -> MetaTensor:
    """Samples ``(S, C, *spatial)`` on the grid of a preprocessed ``image``, inverted onto the original grid.

    MONAI's ``Invertd`` inverts a channel-first ``(C, *spatial)`` item: given samples it reads the sample axis as the
    channels and the classes as one more spatial axis, and fails deep inside the inverse of the first spatial
    transform (found by review: ``Invertd(keys="samples")`` after ``CropForegroundd`` raised "applying transform
    <...Cropd.inverse ...>", naming neither the key nor the cause). The ``S * C`` sample-class volumes are the
    channels of one ``(S * C, *spatial)`` item here, which ``Invertd`` inverts with ``transform``'s record on
    ``image`` (each channel on its own, as every spatial transform resamples, crops and pads the channels alike), and
    become ``(S, C, *original spatial)`` again: each sample equals the sample inverted alone, as ``pred`` is.

    Args:
        samples: ``(S, C, *spatial)`` (a tensor, MetaTensor or numpy array) on ``image``'s grid.
        image: the preprocessed image ``(C_in, *spatial)``, a ``MetaTensor`` holding the applied operations of
            ``transform``.
        transform: the preprocessing applied to ``image`` (a MONAI ``InvertibleTransform``, e.g. a ``Compose``).
        key: the data key under which ``transform`` read ``image``.
        nearest_interp: invert interpolations with nearest neighbours (``Invertd``'s option; MONAI's default True).
        name: the samples' name in messages.

    Returns:
        A ``MetaTensor`` ``(S, C, *original spatial)`` with the inverted meta (affine of the original grid).

    Raises:
        TypeError: ``image`` is not a ``MetaTensor``.
        ValueError: ``samples`` is not ``(S, C, *spatial)`` on ``image``'s grid (naming ``name``).

    Example:
        >>> import torch
        >>> from monai.transforms import Compose, CropForegroundd
        >>> img = torch.zeros(1, 8, 8, 8); img[:, 2:6, 1:5, 3:7] = 1
        >>> pre = Compose([CropForegroundd("image", "image")])
        >>> cropped = pre({"image": MetaTensor(img)})["image"]
        >>> samples = torch.softmax(torch.randn(4, 3, *cropped.shape[1:]), 1)  # 4 samples, 3 classes
        >>> back = invert_samples(samples, cropped, pre)
        >>> tuple(back.shape), bool(back[:, :, 2:6, 1:5, 3:7].sum(1).sub(1).abs().max() < 1e-5)
        ((4, 3, 8, 8, 8), True)
    """
    if not isinstance(image, MetaTensor):
        raise TypeError(f"the image of key {key!r} must be a MetaTensor holding the applied operations of the "
                        f"preprocessing, got {type(image).__name__}")
    x = _item(samples, name)
    grid = tuple(image.shape[1:])
    if x.ndim != len(grid) + 2 or tuple(x.shape[2:]) != grid:
        got = tuple(x.shape)
        if x.ndim == len(grid) + 1 and tuple(x.shape[1:]) == grid:
            raise ValueError(f"{name} of shape {got} is one channel-first item (C, *spatial), not samples "
                             f"(S, C, *spatial): invert it with MONAI's Invertd")
        raise ValueError(f"{name} must be samples (S, C, *spatial) on the grid of {key!r} {grid}, got shape {got}")
    n_samples, n_classes = int(x.shape[0]), int(x.shape[1])
    if n_samples < 1 or n_classes < 1:
        raise ValueError(f"{name} holds no sample or no class (shape {tuple(x.shape)})")
    flat = MetaTensor(x.reshape(n_samples * n_classes, *grid), meta=dict(image.meta))
    inverted = Invertd(keys=_FLAT_KEY, transform=transform, orig_keys=key, nearest_interp=nearest_interp)(
        {key: image, _FLAT_KEY: flat})[_FLAT_KEY]
    if not isinstance(inverted, MetaTensor) or int(inverted.shape[0]) != n_samples * n_classes:
        raise ValueError(f"the inverse of the preprocessing changed the channels of {name} ({n_samples} samples x "
                         f"{n_classes} classes), got shape {tuple(inverted.shape)}: it is no spatial inverse")
    out = inverted.as_tensor().reshape(n_samples, n_classes, *inverted.shape[1:])
    return MetaTensor(out, meta=dict(inverted.meta), applied_operations=list(inverted.applied_operations))


class InvertSamplesd(MapTransform):
    """``Invertd`` for samples ``(S, C, *spatial)``: :func:`invert_samples` of each key.

    Put it where ``Invertd`` brings ``pred`` and the maps back to the original grid (post-transforms of an engine,
    after ``decollate_batch``), for the ``samples`` of an inferer with ``keep_samples=True``; MONAI's ``Invertd``
    fails on them (:func:`invert_samples`).

    Args:
        keys: the keys holding samples ``(S, C, *spatial)``.
        transform: the preprocessing applied to ``orig_keys`` (its inverse is applied to each key).
        orig_keys: the key of the preprocessed image (one for every key, or one per key).
        nearest_interp: invert interpolations with nearest neighbours (``Invertd``'s option, default True).
        allow_missing_keys: skip keys that are not in the data.

    Example:
        >>> import torch
        >>> from monai.transforms import Compose, CropForegroundd
        >>> img = torch.zeros(1, 8, 8, 8); img[:, 2:6, 1:5, 3:7] = 1
        >>> pre = Compose([CropForegroundd("image", "image")])
        >>> d = pre({"image": MetaTensor(img)})
        >>> d["samples"] = torch.softmax(torch.randn(4, 3, *d["image"].shape[1:]), 1)
        >>> tuple(InvertSamplesd("samples", transform=pre, orig_keys="image")(d)["samples"].shape)
        (4, 3, 8, 8, 8)
    """

    backend = [TransformBackends.TORCH]

    def __init__(self, keys: KeysCollection, transform: Any, orig_keys: KeysCollection = "image",
                 nearest_interp: bool = True, allow_missing_keys: bool = False) -> None:
        super().__init__(keys, allow_missing_keys)
        origs = [orig_keys] if isinstance(orig_keys, (str, int)) or not isinstance(orig_keys, Sequence) else list(
            orig_keys)
        if len(origs) == 1:
            origs = origs * len(self.keys)
        if len(origs) != len(self.keys):
            raise ValueError(f"orig_keys must be one key or one per key ({len(self.keys)}), got {len(origs)}")
        self.transform = transform
        self.orig_keys = origs
        self.nearest_interp = check_bool(nearest_interp, "nearest_interp")

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        d = dict(data)
        for key, orig in self.key_iterator(d, self.orig_keys):
            if orig not in d:
                raise ValueError(f"{key}: orig_keys {orig!r} is not in the data; the samples are inverted with the "
                                 "preprocessing's record on that image")
            d[key] = invert_samples(d[key], d[orig], self.transform, key=orig, nearest_interp=self.nearest_interp,
                                    name=str(key))
        return d
