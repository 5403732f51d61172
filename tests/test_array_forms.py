"""Array forms entering the public metrics and statistics (review 64).

Users pass numpy arrays straight from nibabel (read-only memmaps, big-endian ``>f4``, Fortran order) and torch tensors
in every memory layout (non-contiguous views, ``permute``, channels_last_3d, ``expand``'s zero strides, MetaTensor,
``requires_grad``, float16 / bfloat16, narrow integer and bool labels). Each public function and metric class must
give on every form the result it gives on the plain C-contiguous float64 (int64 for labels) numpy copy: exactly for
counts, within the input precision's rounding for sums; or refuse the form with a ``TypeError`` / ``ValueError`` naming
the argument. The values are multiples of 1/64 (exact in bfloat16) so that every form holds the same numbers.
"""

from __future__ import annotations

import dataclasses
import re
import warnings

import numpy as np
import pytest
import torch
from monai.data import MetaTensor

import monai_unc.measures as measures
import monai_unc.metrics as metrics
from monai_unc._utils import to_numpy, to_tensor
from monai_unc.scores import case_scores
from monai_unc.stats import SampleStats, check_moments, derive_measures, window_disagreement_from_stitched


def test_to_tensor_copies_a_read_only_array():
    """Found by hostile testing (review 64): a read-only numpy array (``np.broadcast_to``, a memmap opened ``'r'``, an
    array a caller froze) became a tensor sharing its buffer, which torch does not support (its "not writable ...
    undefined behavior" ``UserWarning``, then silence): an in-place operation on the tensor wrote through the frozen
    array, and on a read-only memmap it would crash the process. The tensor now holds a copy; writable arrays still
    share their memory."""
    a = np.arange(6.0).reshape(2, 3)
    a.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = to_tensor(a, "x")
    assert torch.equal(t, torch.arange(6.0, dtype=torch.float64).reshape(2, 3))
    assert not np.shares_memory(t.numpy(), a)
    t.add_(1.0)
    assert a[0, 0] == 0.0  # the frozen array is unchanged
    writable = np.arange(4.0)
    assert np.shares_memory(to_tensor(writable, "x").numpy(), writable)


def test_a_zero_dimensional_array_keeps_its_shape():
    """Found by the review of review 64: ``np.ascontiguousarray`` returns at least one axis, so a 0-d array (``np.array
    (0.5)``, what ``np.mean`` of an array gives back with ``keepdims`` dropped, a number read from a ``.npy``) became
    a tensor of shape ``(1,)``, unlike the same number given as a float or a 0-d tensor; read-only ones too."""
    frozen = np.array(0.5)
    frozen.setflags(write=False)
    for a in (np.array(0.5), np.array(3, dtype=np.int16), np.array(0.5, dtype=">f8"), frozen):
        t = to_tensor(a, "x")
        assert t.shape == torch.Size([]) == to_tensor(a.item(), "x").shape, a
        assert t.item() == a.item()


def test_a_flip_along_a_length_one_axis_is_read():
    """Found by hostile testing (review 64): a numpy array flipped along an axis of length 1 (``u[..., ::-1]`` of a
    one-slice map, ``np.flip`` of a one-channel map) has a negative stride yet counts as C-contiguous, so it reached
    ``torch.from_numpy`` uncopied and every tensor-based function (the measures, the ECE family, ``SampleStats``)
    refused the valid input with torch's "negative strides are not currently supported", naming no argument."""
    p = np.full((1, 2, 3, 1), 0.5)
    flipped = p[..., ::-1]
    assert flipped.strides[-1] < 0 and flipped.flags.c_contiguous
    assert torch.equal(to_tensor(flipped, "probs"), torch.from_numpy(p))
    np.testing.assert_allclose(measures.entropy(flipped), measures.entropy(p))
    target = np.zeros((1, 3, 1), dtype=np.int64)
    assert metrics.ece(flipped, target, n_fine_bins=120) == metrics.ece(p, target, n_fine_bins=120)


# ------------------------------------------------------------------------------------------------ the forms

_RNG = np.random.default_rng(64)
_B, _C, _SP = 2, 3, (3, 4, 5)


def _grid_probs(shape_lead: tuple[int, ...]) -> np.ndarray:
    """Softmax-like probabilities ``(*lead, C, *spatial)`` in multiples of 1/64 (exact in every float dtype) summing
    exactly to 1 over C."""
    k0 = _RNG.integers(0, 65, size=(*shape_lead, *_SP))
    k1 = _RNG.integers(0, 65, size=k0.shape) * (64 - k0) // 64
    k = np.stack([k0, k1, 64 - k0 - k1], axis=len(shape_lead))
    return k / 64.0


_PROBS = _grid_probs((_B,))  # (B, C, *spatial)
_SAMPLES = np.stack([_PROBS, _grid_probs((_B,))])  # (S=2, B, C, *spatial)
_LABELS = _RNG.integers(0, _C, size=(_B, *_SP))  # (B, *spatial) int64
_PRED = _PROBS.argmax(1)
_UNC = _RNG.integers(0, 65, size=(_B, 1, *_SP)) / 64.0  # (B, 1, *spatial) in [0, 1]
_ERR = (_PRED != _LABELS)[:, None].astype(np.int64)  # (B, 1, *spatial) 0 / 1
_MASKS = (_RNG.random((3, *_SP)) > 0.5).astype(np.int64)  # (R, *spatial) binary
_CASE_U = _RNG.integers(0, 64, size=12) / 64.0  # per-case scores (N,)
_CASE_R = _RNG.integers(0, 64, size=12) / 64.0


def _memmap(a: np.ndarray, folder, dtype) -> np.ndarray:
    path = folder / f"a{len(list(folder.iterdir()))}.npy"
    np.save(path, a.astype(dtype))
    return np.load(path, mmap_mode="r")  # read-only, as nibabel's dataobj of a file opened read-only


def _neg_strides(a: np.ndarray) -> np.ndarray:
    out = a[..., ::-1].copy()[..., ::-1]  # a torch.flip / np.flip view: negative strides, the same values
    assert out.strides[-1] < 0
    return out


def _strided_np(a: np.ndarray) -> np.ndarray:
    return np.repeat(a, 2, axis=-1)[..., ::2]  # every other element of a larger buffer


def _strided_t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.repeat(a, 2, axis=-1))[..., ::2]


def _permuted(a: np.ndarray) -> torch.Tensor:
    order = list(range(a.ndim))[::-1]
    t = torch.from_numpy(a.copy()).permute(order).contiguous().permute(order)
    assert not t.is_contiguous() or a.ndim < 2
    return t


def _offset_t(a: np.ndarray) -> torch.Tensor:
    t = torch.from_numpy(np.concatenate([a[:1], a]))[1:]  # a contiguous view starting inside its storage
    assert t.storage_offset() > 0 and t.is_contiguous()
    return t


def _channels_last(a: np.ndarray) -> torch.Tensor | None:
    if a.ndim != 5:
        return None
    return torch.from_numpy(a.copy()).contiguous(memory_format=torch.channels_last_3d)


#: float forms: id -> (a, folder) -> the form holding ``a``'s values, or None where it does not apply. ``a`` holds
#: multiples of 1/64, exact in every dtype below.
FLOAT_FORMS = {
    "np_float32": lambda a, d: a.astype(np.float32),
    "np_float16": lambda a, d: a.astype(np.float16),
    "np_big_endian_f4": lambda a, d: a.astype(">f4"),
    "np_big_endian_f8": lambda a, d: a.astype(">f8"),
    "np_fortran": lambda a, d: np.asfortranarray(a),
    "np_read_only_memmap_f4": lambda a, d: _memmap(a, d, ">f4"),
    "np_negative_strides": lambda a, d: _neg_strides(a),
    "np_strided": lambda a, d: _strided_np(a),
    "t_float64": lambda a, d: torch.from_numpy(a.copy()),
    "t_float32": lambda a, d: torch.from_numpy(a.astype(np.float32)),
    "t_float16": lambda a, d: torch.from_numpy(a).to(torch.float16),
    "t_bfloat16": lambda a, d: torch.from_numpy(a).to(torch.bfloat16),
    "t_permuted": lambda a, d: _permuted(a),
    "t_strided": lambda a, d: _strided_t(a),
    "t_channels_last_3d": lambda a, d: _channels_last(a),
    "t_metatensor": lambda a, d: MetaTensor(torch.from_numpy(a.copy())),
    "t_requires_grad": lambda a, d: torch.from_numpy(a.astype(np.float32)).requires_grad_(True),
    "t_parameter": lambda a, d: torch.nn.Parameter(torch.from_numpy(a.copy())),
    "t_storage_offset": lambda a, d: _offset_t(a),
    "np_offset": lambda a, d: np.concatenate([a[:1], a])[1:],
}

#: label forms (values in [0, C) or 0 / 1): as FLOAT_FORMS
LABEL_FORMS = {
    "np_int8": lambda a, d: a.astype(np.int8),
    "np_uint8": lambda a, d: a.astype(np.uint8),
    "np_big_endian_i2": lambda a, d: a.astype(">i2"),
    "np_uint16": lambda a, d: a.astype(np.uint16),
    "np_uint64": lambda a, d: a.astype(np.uint64),
    "np_bool": lambda a, d: a.astype(bool) if a.max() <= 1 else None,
    "np_fortran": lambda a, d: np.asfortranarray(a),
    "np_read_only_memmap_u1": lambda a, d: _memmap(a, d, np.uint8),
    "np_negative_strides": lambda a, d: _neg_strides(a),
    "t_int8": lambda a, d: torch.from_numpy(a).to(torch.int8),
    "t_uint8": lambda a, d: torch.from_numpy(a).to(torch.uint8),
    "t_int16": lambda a, d: torch.from_numpy(a).to(torch.int16),
    "t_bool": lambda a, d: torch.from_numpy(a).bool() if a.max() <= 1 else None,
    "t_float32_labels": lambda a, d: torch.from_numpy(a).float(),
    "t_permuted": lambda a, d: _permuted(a),
    "t_strided": lambda a, d: _strided_t(a),
    "t_channels_last_3d": lambda a, d: _channels_last(a),
    "t_metatensor": lambda a, d: MetaTensor(torch.from_numpy(a.copy())),
    "t_storage_offset": lambda a, d: _offset_t(a),
}

#: zero-stride forms: the first batch item repeated (the reference is its plain copy)
BROADCAST_FORMS = {
    "np_broadcast_to": lambda a: np.broadcast_to(a[:1], a.shape),
    "t_expand": lambda a: torch.from_numpy(a[:1].copy()).expand(*a.shape),
}


def _values(r):
    """A result as nested lists / float64 arrays (tensors detached), for comparison."""
    if hasattr(r, "_asdict"):
        r = r._asdict()
    elif dataclasses.is_dataclass(r):
        r = {f.name: getattr(r, f.name) for f in dataclasses.fields(r)}
    if isinstance(r, dict):
        return {k: _values(v) for k, v in r.items()}
    if isinstance(r, (tuple, list)):
        return [_values(v) for v in r]
    if isinstance(r, torch.Tensor):
        return r.detach().to(torch.float64).cpu().numpy()
    if isinstance(r, (np.ndarray, np.generic, float, int, bool)) and np.asarray(r).dtype.kind in "biuf":
        return np.asarray(r, dtype=np.float64)
    return r


def _assert_close(want, got, tol: float, where: str = "") -> None:
    if isinstance(want, dict):
        assert want.keys() == got.keys(), where
        for k in want:
            _assert_close(want[k], got[k], tol, f"{where}.{k}")
    elif isinstance(want, list):
        assert len(want) == len(got), where
        for i, (w, g) in enumerate(zip(want, got)):
            _assert_close(w, g, tol, f"{where}[{i}]")
    elif isinstance(want, np.ndarray):
        g = np.asarray(got)
        assert g.shape == want.shape, (where, g.shape, want.shape)
        np.testing.assert_allclose(g, want, rtol=tol, atol=tol, equal_nan=True, err_msg=where)
    else:
        assert want == got, (where, want, got)


def _tolerance(form) -> float:
    """Results of a form compared within its precision: the functions may compute in the input's dtype."""
    if isinstance(form, torch.Tensor):
        dtype = form.dtype
    else:
        dtype = torch.from_numpy(np.zeros(0, np.dtype(form.dtype).newbyteorder("="))).dtype
    if dtype in (torch.float16, torch.bfloat16):
        return 2e-2
    if dtype == torch.float32:
        return 1e-5
    return 1e-10


# ------------------------------------------------------------------------------------------------ the functions

_FINE = 120  # fine bins of the calibration histograms: the forms' path is the default's, the tables small (fast)


def _calibration(probs, target):
    h = metrics.ConfidenceHistogram(num_classes=_C, n_fine_bins=_FINE).update(probs, target)
    out = metrics.calibration_metrics(h)
    out["ece_functional"] = metrics.ece(probs, target, n_fine_bins=_FINE)
    out["nll_functional"] = metrics.nll(probs, target, n_fine_bins=_FINE)
    return out


def _measures_of_probs(probs):
    return {"entropy": measures.entropy(probs, normalize=True), "max_softmax": measures.max_softmax(probs),
            "binary_entropy": measures.binary_entropy(probs[:, 1:2])}


def _measures_of_samples(samples):
    return {n: getattr(measures, n)(samples) for n in
            ("predictive_entropy", "expected_entropy", "mutual_information", "variance")}


def _sample_stats(probs):
    s = SampleStats(track_variance=True).update(probs).update(probs, weight=2.0)
    many = SampleStats(track_variance=True).update_many([probs, probs])
    return s.sum_p, s.sum_h, s.sum_p2, many.sum_p, many.sum_h, many.sum_p2


def _discrimination(uncertainty, error):
    out = {n: getattr(metrics, n)(uncertainty, error, per_case=True) for n in
           ("error_auroc", "error_auprc", "avu", "correct_certain_ratio", "uncertain_incorrect_ratio",
            "voxel_accuracy", "au_arc")}
    out["pavpu"] = metrics.pavpu(uncertainty, error, window=2, per_case=True)
    return out


def _spatial(uncertainty, pred, target):
    return {"buc": metrics.boundary_uncertainty_concentration(uncertainty, pred, target, width=1.0),
            "ba_ece": metrics.boundary_aware_ece(uncertainty, pred, target),
            "space": metrics.spatial_calibration_error(uncertainty, pred, target, sigma=1.0)}


def _overlap(pred, target):
    return {"dice": metrics.dice(pred, target, num_classes=_C), "iou": metrics.iou(pred, target, num_classes=_C),
            "counts": metrics.overlap_counts(pred, target, num_classes=_C),
            "boundary": metrics.label_boundary(target, spatial_dims=3)}


def _ambiguity(references, samples):
    return {n: getattr(metrics, n)(references, samples) for n in
            ("ged", "ged_detection", "ged_nonempty_iou", "hungarian_iou")}


def _quality(samples):
    out = {n: getattr(metrics, n)(samples) for n in ("pairwise_dice", "sample_iou", "volume_cv", "dice_to_mean")}
    out["expected_dice"] = metrics.expected_dice(samples[0])
    return out


def _cases(uncertainty, risk):
    return {"aurc": metrics.aurc(uncertainty, risk), "eaurc": metrics.eaurc(uncertainty, risk),
            "augrc": metrics.augrc(uncertainty, risk), "curve": metrics.risk_coverage_curve(uncertainty, risk),
            "failure": metrics.failure_detection(uncertainty, risk),
            "referral": metrics.referral_curve(uncertainty, risk),
            "ood_auroc": metrics.ood_auroc(uncertainty, risk), "auroc": metrics.auroc(uncertainty, risk)}


def _qu_brats(uncertainty, pred, target):
    return metrics.qu_brats(uncertainty, pred, target)


def _lesion_free(pred, target, uncertainty):
    return {"ndsc": metrics.normalized_dice(pred, target),
            "retention": metrics.ndsc_retention_area(pred, target, uncertainty, n_points=20)}


def _case_scores(uncertainty, seg):
    return case_scores(uncertainty, seg, patch_size=2)


F, L = "float", "label"
#: id -> (function, [(argument name in its errors, base value, kind)])
CASES = {
    "calibration": (_calibration, [("probs", _PROBS, F), ("target", _LABELS, L)]),
    "measures_probs": (_measures_of_probs, [("probs", _PROBS, F)]),
    "measures_samples": (_measures_of_samples, [("samples", _SAMPLES, F)]),
    "sample_stats": (_sample_stats, [("probs", _PROBS, F)]),
    "discrimination": (_discrimination, [("uncertainty", _UNC, F), ("error", _ERR, L)]),
    "spatial": (_spatial, [("uncertainty", _UNC, F), ("pred", _PRED, L), ("target", _LABELS, L)]),
    "ncc": (metrics.ncc, [("uncertainty", _UNC, F), ("target", _ERR.astype(np.float64), F)]),
    "overlap": (_overlap, [("pred", _PRED, L), ("target", _LABELS, L)]),
    "ambiguity": (_ambiguity, [("references", _MASKS[:2], L), ("samples", _MASKS, L)]),
    "quality": (_quality, [("samples", _SAMPLES, F)]),
    "cases": (_cases, [("uncertainty", _CASE_U, F), ("risk", _CASE_R, F)]),
    "qu_brats": (_qu_brats, [("uncertainty", _UNC[0] * 64, F), ("pred", _MASKS[:1], L), ("target", _MASKS[1:2], L)]),
    "lesions": (_lesion_free, [("pred", _MASKS[0], L), ("target", _MASKS[1], L), ("uncertainty", _UNC[0, 0], F)]),
    "case_scores": (_case_scores, [("uncertainty", _UNC[0, 0], F), ("seg", _PRED[0], L)]),
}

_REFERENCES: dict = {}


def _call(case: str, which: int, value, ref: np.ndarray):
    fn, args = CASES[case]
    base = [np.ascontiguousarray(a) for _, a, _ in args]
    key = (case, which, ref.tobytes(), ref.dtype.str, ref.shape)
    if key not in _REFERENCES:
        given = list(base)
        given[which] = ref
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _REFERENCES[key] = _values(fn(*given))
    given = list(base)
    given[which] = value
    return _REFERENCES[key], lambda: fn(*given)


def _plain(form, kind: str) -> np.ndarray:
    """The plain C-contiguous float64 (int64 for labels) numpy copy of a form's values."""
    a = form.detach().to(torch.float64).numpy() if isinstance(form, torch.Tensor) else np.asarray(form, np.float64)
    return np.ascontiguousarray(a if kind == F else a.astype(np.int64))


_PARAMS = [
    pytest.param(case, which, form_id, id=f"{case}-{name}-{form_id}")
    for case, (_, args) in CASES.items()
    for which, (name, _, kind) in enumerate(args)
    for form_id in [*(FLOAT_FORMS if kind == F else LABEL_FORMS), *BROADCAST_FORMS]
]


@pytest.mark.parametrize("case, which, form_id", _PARAMS)
def test_every_array_form_gives_the_plain_arrays_result_or_a_named_refusal(case, which, form_id, tmp_path):
    """The property of the module docstring for each public function (grouped by the arrays they take), each of its
    array arguments and each form: the result equals the one of the plain float64 / int64 copy of the form's values
    within the form's precision (exactly for counts), or the form is refused with a TypeError / ValueError naming
    the argument; never another exception, a wrong number or a change of the caller's array."""
    name, base, kind = CASES[case][1][which]
    if form_id in BROADCAST_FORMS:
        if base.ndim < 2:
            pytest.skip("a zero-stride form repeats the first case of a batch")
        form = BROADCAST_FORMS[form_id](base)
    else:
        form = (FLOAT_FORMS if kind == F else LABEL_FORMS)[form_id](base, tmp_path)
    if form is None:
        pytest.skip("the form does not apply to these values (channels_last_3d: 5-D only; bool: 0 / 1 only)")
    ref = _plain(form, kind)
    before = ref.copy()
    want, run = _call(case, which, form, ref)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = _values(run())
    except (TypeError, ValueError) as err:
        assert name in str(err), f"refused without naming {name}: {err}"
        return
    _assert_close(want, got, _tolerance(form), case)
    assert np.array_equal(_plain(form, kind), before), "the caller's array changed"


# ------------------------------------------------------------------------------------------------ metric classes


def _calibration_metric(y_pred, y):
    m = metrics.CalibrationMetric(num_classes=_C, metrics=("ece", "uce", "nll", "brier"), n_fine_bins=_FINE)
    return m(y_pred=y_pred, y=y), m.aggregate()


def _spatial_metrics(uncertainty, y_pred, y):
    out = {}
    for cls in ("BoundaryUncertaintyConcentrationMetric", "BoundaryAwareECEMetric", "SpatialCalibrationErrorMetric"):
        m = getattr(metrics, cls)()
        out[cls] = (m(y_pred=y_pred, y=y, uncertainty=uncertainty), m.aggregate())
    return out


def _ncc_metric(y_pred, y):
    m = metrics.NCCMetric()
    return m(y_pred=y_pred, y=y), m.aggregate()


def _ged_metric(y, y_pred):
    m = metrics.GEDMetric()
    return m(y_pred=y_pred, y=y), m.aggregate()


def _qu_brats_metric(uncertainty, y_pred, y):
    m = metrics.QUBraTSMetric()
    return m(y_pred=y_pred, y=y, uncertainty=uncertainty), m.aggregate()


_RATERS = np.stack([_MASKS[:2], _MASKS[1:]])  # (B=2, R=2, *spatial)
#: MONAI's metric classes take tensors: the base values are tensors and the forms the torch ones
CLASS_CASES = {
    "CalibrationMetric": (_calibration_metric, [("y_pred", _PROBS, F), ("y", _LABELS[:, None], L)]),
    "spatial_metrics": (_spatial_metrics, [("uncertainty", _UNC, F), ("y_pred", _PRED[:, None], L),
                                           ("y", _LABELS[:, None], L)]),
    "NCCMetric": (_ncc_metric, [("y_pred", _UNC, F), ("y", _ERR.astype(np.float64), F)]),
    "GEDMetric": (_ged_metric, [("y", _RATERS, L), ("y_pred", _RATERS[:, ::-1].copy(), L)]),
    "QUBraTSMetric": (_qu_brats_metric, [("uncertainty", _UNC * 64, F), ("y_pred", _RATERS[:, :1], L),
                                         ("y", _RATERS[:, 1:], L)]),
}

_CLASS_PARAMS = [
    pytest.param(case, which, form_id, id=f"{case}-{name}-{form_id}")
    for case, (_, args) in CLASS_CASES.items()
    for which, (name, _, kind) in enumerate(args)
    for form_id in [*(FLOAT_FORMS if kind == F else LABEL_FORMS), "t_expand"]
    if form_id.startswith("t_")
]


@pytest.mark.parametrize("case, which, form_id", _CLASS_PARAMS)
def test_metric_classes_take_every_tensor_form(case, which, form_id, tmp_path):
    """The property of the module docstring for the MONAI metric classes: per-case values and the aggregate on each
    tensor form equal those of the plain contiguous float64 / int64 tensor, or a refusal names the argument."""
    fn, args = CLASS_CASES[case]
    name, base, kind = args[which]
    form = BROADCAST_FORMS[form_id](base) if form_id in BROADCAST_FORMS else (
        FLOAT_FORMS if kind == F else LABEL_FORMS)[form_id](base, tmp_path)
    if form is None:
        pytest.skip("the form does not apply to these values")
    given = [torch.from_numpy(np.ascontiguousarray(a)) for _, a, _ in args]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        given[which] = torch.from_numpy(_plain(form, kind))
        want = _values(fn(*given))
        given[which] = form
        try:
            got = _values(fn(*given))
        except (TypeError, ValueError) as err:
            assert name in str(err), f"refused without naming {name}: {err}"
            return
    _assert_close(want, got, _tolerance(form), case)


# ------------------------------------------------------------------------------------------------ narrow label dtypes


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, bool, torch.uint8, torch.int8, torch.bool],
                         ids=["np_uint8", "np_int8", "np_bool", "t_uint8", "t_int8", "t_bool"])
def test_narrow_label_dtypes_count_beyond_their_range(dtype):
    """Counts over more voxels than a narrow label dtype holds (300 foreground voxels, 600 in all, in uint8 / int8 /
    bool) are exact: no count wraps in the labels' dtype (overlap counts, Dice, GED, QU-BraTS, the calibration
    histogram's NLL of 600 voxels, the discrimination metrics)."""
    mask = np.zeros((1, 20, 30), dtype=np.int64)
    mask[0, :10] = 1  # 300 foreground voxels
    other = np.zeros_like(mask)
    other[0, 5:15] = 1  # 150 shared

    def form(a):
        return torch.from_numpy(a).to(dtype) if isinstance(dtype, torch.dtype) else a.astype(dtype)

    counts = metrics.overlap_counts(form(mask.reshape(1, -1)), form(other.reshape(1, -1)), num_classes=2)  # (..., V)
    assert _values(counts.intersection).tolist() == [[150.0, 150.0]]  # background (rows 15-19), foreground (5-9)
    assert _values(counts.pred_size).tolist() == [[300.0, 300.0]]
    assert float(_values(metrics.dice(form(mask), form(other), num_classes=2)).ravel()[0]) == 0.5
    assert float(metrics.ged(form(np.concatenate([mask, other])), form(mask)).ged) == pytest.approx(
        float(metrics.ged(np.concatenate([mask, other]), mask).ged), abs=1e-12)
    u = (np.arange(600).reshape(1, 20, 30) % 64).astype(np.float64)
    _assert_close(_values(metrics.qu_brats(u, form(mask), form(other))),
                  _values(metrics.qu_brats(u, mask, other)), 1e-12)
    err = form(mask[:, None])
    _assert_close(_values(metrics.voxel_accuracy(u[:, None] / 64, err, per_case=True)),
                  _values(metrics.voxel_accuracy(u[:, None] / 64, mask[:, None], per_case=True)), 1e-12)
    probs = np.stack([1 - u / 64, u / 64], axis=1)
    _assert_close(_values(metrics.nll(probs, form(mask), n_fine_bins=_FINE)),
                  _values(metrics.nll(probs, mask, n_fine_bins=_FINE)), 1e-12)


# ------------------------------------------------------------------------------------------------ the conversions

hypothesis = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")

_DTYPES = ["<f8", ">f8", "<f4", ">f4", "<f2", ">f2", "<i8", ">i4", "<i2", ">u2", "|u1", "|i1", "|b1"]


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    dtype=st.sampled_from(_DTYPES),
    layout=st.sampled_from(["C", "F", "negative", "strided", "broadcast"]),
    read_only=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_conversions_keep_values_and_never_share_a_frozen_buffer(shape, dtype, layout, read_only, seed):
    """``to_tensor`` and ``to_numpy`` (every public function's entry) of a numpy array in any byte order, memory
    layout and writability: the same values and shape; the tensor shares memory only with a writable array, so an
    in-place operation on it never writes through a read-only one."""
    rng = np.random.default_rng(seed)
    plain = (rng.integers(0, 2, size=shape) if dtype == "|b1" else rng.integers(0, 100, size=shape)).astype(dtype)
    if layout == "F":
        a = np.asfortranarray(plain)
    elif layout == "negative":
        a = plain[..., ::-1].copy()[..., ::-1]
    elif layout == "strided":
        a = np.repeat(plain, 2, axis=-1)[..., ::2]
    elif layout == "broadcast":
        plain = np.ascontiguousarray(np.broadcast_to(plain[:1], plain.shape))
        a = np.broadcast_to(plain[:1], plain.shape)  # read-only, zero strides
    else:
        a = plain.copy()
    if read_only:
        a.setflags(write=False)
    expected = plain.astype(plain.dtype.newbyteorder("="))
    t = to_tensor(a, "x")
    assert tuple(t.shape) == a.shape and np.array_equal(t.numpy(), expected)
    if not a.flags.writeable:
        assert not np.shares_memory(t.numpy(), a)
    back = to_numpy(t, "x")
    assert np.array_equal(back, expected) and np.array_equal(to_numpy(a, "x"), expected)


# ------------------------------------------------------------------------------------------------ tensor-only entries


@pytest.mark.parametrize("call, name", [
    (lambda p, h: derive_measures({"pred": p, "expected_entropy": torch.as_tensor(h)}, ["predictive_entropy"]),
     "moments['pred']"),
    (lambda p, h: derive_measures({"pred": torch.as_tensor(p), "expected_entropy": h}, ["mutual_information"]),
     "moments['expected_entropy']"),
    (lambda p, h: check_moments(p, torch.as_tensor(h)), "mean"),
    (lambda p, h: check_moments(torch.as_tensor(p), h), "mean_entropy"),
    (lambda p, h: window_disagreement_from_stitched(p, torch.as_tensor(h)), "pred"),
    (lambda p, h: window_disagreement_from_stitched(torch.as_tensor(p), h), "window_entropy"),
], ids=["derive_pred", "derive_entropy", "check_mean", "check_entropy", "wd_pred", "wd_entropy"])
def test_tensor_only_statistics_refuse_numpy_by_name(call, name):
    """Found by hostile testing (review 64): the checked entries of the streamed statistics' moments take tensors
    only, and a numpy array (a moment saved with ``np.save`` and loaded back) raised ``AttributeError: 'numpy.ndarray'
    object has no attribute 'numel'`` (or ``'detach'``, ``'clamp_max'``), naming no argument. They refuse it with a
    ``TypeError`` naming the argument."""
    p, h = np.full((1, 2, 3), 0.5), np.full((1, 1, 3), 0.6)
    with pytest.raises(TypeError, match=f"^{re.escape(name)} must be a torch tensor"):
        call(p, h)
    call(torch.from_numpy(p), torch.from_numpy(h))  # the tensors are taken
