"""Property-based sweep of the public functional API with malformed arrays (hostile input).

For every function in :data:`API` and every mutator in :data:`MUTATORS`, hypothesis builds valid inputs, breaks one
array argument (wrong ndim, NaN / inf, empty, wrong dtype, a shape that does not match the others) and calls the
function. The contract:

1. the only exceptions are ``ValueError`` and ``TypeError``, and their message names an argument of the function
   (its parameter names, or the extra names listed in its :class:`ApiCase`);
2. a call whose input holds NaN (or inf) never returns a finite number without a ``UserWarning``.

To cover another module, add :class:`ApiCase` rows to :data:`API`: a name, the function (a lambda for methods and
fixed options), a builder of valid keyword arguments from a numpy ``Generator``, and which of those arguments hold
arrays. Keep the arrays small: the sweep runs every (function, mutator) pair.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monai_unc.aggregation import aggregate, fit_threshold, max_patch
from monai_unc.metrics.boundary import (
    distance_to_boundary,
    distance_to_mask,
    foreground_edges,
    hausdorff_distance,
    hd95,
    label_boundary,
)
from monai_unc.metrics.calibration import (
    ConfidenceHistogram,
    ace,
    all_label_ece,
    brier,
    classwise_ece,
    ece,
    mce,
    nll,
    reliability_curve,
    uce,
)
from monai_unc.metrics.spatial import (
    boundary_aware_ece,
    boundary_uncertainty_concentration,
    spatial_calibration_error,
)
from monai_unc.temperature import TemperatureScaler

# ---------------------------------------------------------------------------------------------------------------
# valid inputs
# ---------------------------------------------------------------------------------------------------------------
B, C, H, W = 2, 3, 9, 8


def _probs(rng: np.random.Generator) -> np.ndarray:
    z = rng.normal(size=(B, C, H, W)) * 2
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _labels(rng: np.random.Generator, n_cls: int = C) -> np.ndarray:
    return rng.integers(0, n_cls, (B, H, W))


def _blobs(rng: np.random.Generator) -> np.ndarray:
    """Label maps ``(B, H, W)`` with a foreground box per case (so that boundaries exist)."""
    out = np.zeros((B, H, W), np.int64)
    for b in range(B):
        r, c = rng.integers(1, 4), rng.integers(1, 4)
        out[b, r : r + 4, c : c + 3] = 1
    return out


def _unit_map(rng: np.random.Generator) -> np.ndarray:
    return rng.random((B, 1, H, W))


def probs_target(rng: np.random.Generator) -> dict[str, Any]:
    return {"probs": _probs(rng), "target": _labels(rng)}


def spatial_inputs(rng: np.random.Generator) -> dict[str, Any]:
    return {"uncertainty": _unit_map(rng), "pred": _blobs(rng), "target": _blobs(rng), "spacing": (1.5, 1.0)}


def _fitted_scaler() -> TemperatureScaler:
    rng = np.random.default_rng(0)
    z = torch.from_numpy(rng.normal(size=(1, C, 6, 6)) * 2)
    return TemperatureScaler(max_steps=3).fit(z, torch.from_numpy(rng.integers(0, C, (1, 6, 6))))


_SCALER = _fitted_scaler()


@dataclass(frozen=True)
class ApiCase:
    """One function under test.

    ``fn`` is called with the keyword arguments ``make(rng)`` returns; ``arrays`` names those a mutator may break;
    ``names`` are the names an error message may use besides ``fn``'s parameters (``signature_of`` when ``fn`` is a
    wrapper lambda).
    """

    name: str
    fn: Callable[..., Any]
    make: Callable[[np.random.Generator], dict[str, Any]]
    arrays: tuple[str, ...]
    signature_of: Callable[..., Any] | None = None
    names: tuple[str, ...] = field(default=())

    def argument_names(self) -> set[str]:
        params = set(inspect.signature(self.signature_of or self.fn).parameters) - {"self", "args", "kwargs"}
        return params | set(self.names)

    def __repr__(self) -> str:  # the test id
        return self.name


#: a coarse fine grid keeps the sweep fast (validation does not depend on it); plain ``ece`` keeps the default
FAST = {"n_fine_bins": 60}


def _calibration_case(fn: Callable[..., Any], **options: Any) -> ApiCase:
    shown = {k: v for k, v in options.items() if k != "n_fine_bins"}
    return ApiCase(
        fn.__name__ + ("" if not shown else f"[{','.join(f'{k}={v}' for k, v in shown.items())}]"),
        (lambda **kw: fn(**kw, **options)) if options else fn,
        probs_target,
        ("probs", "target"),
        signature_of=fn,
    )


API: list[ApiCase] = [
    # ---- monai_unc.metrics.calibration
    _calibration_case(ece),
    *(_calibration_case(f, **FAST) for f in (classwise_ece, all_label_ece, ace, mce, nll, brier, reliability_curve)),
    _calibration_case(ece, per_case=True, **FAST),
    ApiCase(
        "ece[weights,mask]",
        lambda **kw: ece(**kw, **FAST),
        # every voxel inside the mask with a positive weight: voxels left out are never read (NaN allowed there)
        lambda rng: probs_target(rng) | {"weights": 0.1 + rng.random((B, H, W)), "mask": np.ones((B, H, W), bool)},
        ("probs", "target", "weights", "mask"),
        signature_of=ece,
    ),
    _calibration_case(uce, **FAST),
    ApiCase(
        "uce[map]",
        lambda **kw: uce(**kw, **FAST),
        lambda rng: {"probs": _unit_map(rng), "target": rng.random((B, H, W)) > 0.5},
        ("probs", "target"),
        signature_of=uce,
        names=("uncertainty", "errors"),
    ),
    ApiCase(
        "ConfidenceHistogram.update",
        lambda **kw: ConfidenceHistogram(C, **FAST).update(**kw),
        lambda rng: probs_target(rng) | {"weights": rng.random((B, H, W))},
        ("probs", "target", "weights"),
        signature_of=ConfidenceHistogram.update,
    ),
    # ---- monai_unc.metrics.spatial
    *(
        ApiCase(f.__name__, f, spatial_inputs, ("uncertainty", "pred", "target", "spacing"))
        for f in (boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error)
    ),
    # ---- monai_unc.metrics.boundary
    ApiCase("label_boundary", label_boundary, lambda rng: {"label": _blobs(rng)[0]}, ("label",)),
    ApiCase("foreground_edges", foreground_edges, lambda rng: {"mask": _blobs(rng)[0]}, ("mask",)),
    ApiCase(
        "distance_to_boundary",
        distance_to_boundary,
        lambda rng: {"label": _blobs(rng), "spacing": (1.0, 2.0), "spatial_dims": 2},
        ("label", "spacing"),
    ),
    ApiCase(
        "distance_to_mask", distance_to_mask, lambda rng: {"mask": _blobs(rng)[0], "spacing": 1.5}, ("mask",)
    ),
    ApiCase(
        "hd95",
        hd95,
        lambda rng: {"pred": _blobs(rng), "target": _blobs(rng), "spacing": (1.0, 2.0), "spatial_dims": 2},
        ("pred", "target", "spacing"),
    ),
    ApiCase(
        "hausdorff_distance",
        hausdorff_distance,
        lambda rng: {"pred_mask": _blobs(rng)[0], "target_mask": _blobs(rng)[1]},
        ("pred_mask", "target_mask"),
    ),
    # ---- monai_unc.aggregation
    *(
        ApiCase(
            f"aggregate[{method}]",
            functools.partial(aggregate, method=method, **({"threshold": 0.5} if method == "threshold" else {})),
            lambda rng: {"uncertainty": _unit_map(rng), "mask": _blobs(rng)},
            ("uncertainty", "mask"),
            signature_of=aggregate,
        )
        for method in ("mean", "sum", "patch_sum", "patch_mean", "threshold")
    ),
    ApiCase(
        "max_patch",
        max_patch,
        lambda rng: {"uncertainty": _unit_map(rng), "patch_size": 3, "mask": _blobs(rng)},
        ("uncertainty", "mask"),
    ),
    ApiCase(
        "fit_threshold",
        fit_threshold,
        lambda rng: {"uncertainty": _unit_map(rng), "pred": _blobs(rng)[:, None]},
        ("uncertainty", "pred"),
    ),
    # ---- monai_unc.temperature
    ApiCase(
        "TemperatureScaler.fit",
        lambda **kw: TemperatureScaler(max_steps=2).fit(**kw),
        lambda rng: {"logits": rng.normal(size=(B, C, H, W)) * 2, "target": _labels(rng)},
        ("logits", "target"),
        signature_of=TemperatureScaler.fit,
    ),
    ApiCase(
        "TemperatureScaler.loss_and_grad",
        lambda **kw: TemperatureScaler().loss_and_grad(**kw),
        lambda rng: {"logits": rng.normal(size=(B, C, H, W)) * 2, "target": _labels(rng)},
        ("logits", "target"),
        signature_of=TemperatureScaler.loss_and_grad,
    ),
    ApiCase(
        "TemperatureScaler.transform",
        _SCALER.transform,
        lambda rng: {"logits": rng.normal(size=(B, C, H, W))},
        ("logits",),
    ),
]


# ---------------------------------------------------------------------------------------------------------------
# mutators: each breaks one array (numpy array or sequence); ``None`` when it does not apply
# ---------------------------------------------------------------------------------------------------------------
class NotApplicable(Exception):
    pass


def _float_copy(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype.kind != "f" else a.copy()


def add_axis(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return a[None] if rng.random() < 0.5 else a[..., None]


def drop_axis(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if a.ndim == 0:
        raise NotApplicable
    return a[0] if rng.random() < 0.5 else a[..., 0]


def to_scalar(a: np.ndarray, rng: np.random.Generator) -> Any:
    return float(rng.random()) if rng.random() < 0.5 else np.float64(0.5)


def non_finite(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    b = _float_copy(a)
    if b.size == 0:
        raise NotApplicable
    b.reshape(-1)[rng.integers(0, b.size)] = rng.choice([np.nan, np.inf, -np.inf], p=[0.6, 0.2, 0.2])
    return b


def all_nan(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.full(a.shape, np.nan)


def empty(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if a.ndim == 0:
        raise NotApplicable
    axis = int(rng.integers(0, a.ndim))
    return np.take(a, np.arange(0), axis=axis)


def mismatched_shape(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if a.ndim == 0 or a.shape[-1] < 2:
        raise NotApplicable
    return a[..., :-1]


def complex_dtype(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return a.astype(np.complex128) + 1j


def string_dtype(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return a.astype(str)


def object_dtype(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return a.astype(object)


def bool_dtype(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return a > 0.5


def as_torch_float16(a: np.ndarray, rng: np.random.Generator) -> torch.Tensor:
    """A valid-looking tensor of another dtype (must work or fail cleanly)."""
    return torch.from_numpy(np.ascontiguousarray(_float_copy(a))).to(torch.float16)


MUTATORS: dict[str, Callable[[np.ndarray, np.random.Generator], Any]] = {
    "add_axis": add_axis,
    "drop_axis": drop_axis,
    "scalar": to_scalar,
    "non_finite": non_finite,
    "all_nan": all_nan,
    "empty": empty,
    "mismatched_shape": mismatched_shape,
    "complex": complex_dtype,
    "string": string_dtype,
    "object": object_dtype,
    "bool": bool_dtype,
    "float16_tensor": as_torch_float16,
}
NAN_MUTATORS = {"non_finite", "all_nan"}


# ---------------------------------------------------------------------------------------------------------------
# the contract
# ---------------------------------------------------------------------------------------------------------------
def _numbers(out: Any) -> list[float]:
    """Every number in a result (arrays, tensors, tuples, dicts, dataclasses, named tuples, a fitted scaler)."""
    if isinstance(out, torch.nn.Module):
        return [float(v) for v in out.temperature.detach().reshape(-1)]
    if isinstance(out, torch.Tensor):
        return [float(v) for v in out.detach().cpu().double().reshape(-1)] if out.dtype != torch.bool else []
    if isinstance(out, np.ndarray):
        return [float(v) for v in out.reshape(-1)] if out.dtype.kind in "iuf" else []
    if isinstance(out, (bool, np.bool_)) or out is None or isinstance(out, str):
        return []
    if isinstance(out, (int, float, np.integer, np.floating)):
        return [float(out)]
    if isinstance(out, dict):
        return [x for v in out.values() for x in _numbers(v)]
    if dataclasses.is_dataclass(out):
        return [x for f in dataclasses.fields(out) for x in _numbers(getattr(out, f.name))]
    if isinstance(out, (tuple, list)):
        return [x for v in out for x in _numbers(v)]
    if isinstance(out, ConfidenceHistogram):
        return [float(v) for v in out.scalars.reshape(-1)]
    return []


def _names_an_argument(message: str, names: set[str]) -> bool:
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", message) for n in names)


def check_call(case: ApiCase, kwargs: dict[str, Any], mutator: str, arg: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = case.fn(**kwargs)
        except (ValueError, TypeError) as err:
            message = str(err)
            assert _names_an_argument(message, case.argument_names()), (
                f"{case.name}({arg} <- {mutator}): {type(err).__name__} does not name an argument "
                f"{sorted(case.argument_names())}: {message!r}"
            )
            return
        except Exception as err:  # noqa: BLE001 - the point of the test
            pytest.fail(f"{case.name}({arg} <- {mutator}) raised {type(err).__name__}, not ValueError/TypeError: {err}")
    if mutator in NAN_MUTATORS:
        finite = [x for x in _numbers(out) if math.isfinite(x)]
        warned = [w for w in caught if issubclass(w.category, UserWarning)]
        assert not finite or warned, (
            f"{case.name}({arg} <- {mutator}) returned finite numbers for non-finite input without a UserWarning"
        )


def _mutate(value: Any, mutator: str, rng: np.random.Generator) -> Any:
    return MUTATORS[mutator](np.asarray(value), rng)


def sweep(case: ApiCase, mutator: str) -> None:
    """Four hypothesis draws of ``mutator`` applied to one of ``case``'s arrays, each checked by :func:`check_call`."""

    @settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(seed=st.integers(0, 2**31 - 1), which=st.integers(0, len(case.arrays) - 1))
    def run(seed: int, which: int) -> None:
        rng = np.random.default_rng(seed)
        kwargs = case.make(rng)
        arg = case.arrays[which]
        try:
            kwargs[arg] = _mutate(kwargs[arg], mutator, rng)
        except NotApplicable:
            return
        check_call(case, kwargs, mutator, arg)

    run()


@pytest.mark.parametrize("mutator", sorted(MUTATORS))
@pytest.mark.parametrize("case", API, ids=repr)
def test_hostile_input(case: ApiCase, mutator: str) -> None:
    sweep(case, mutator)


@pytest.mark.parametrize("case", API, ids=repr)
def test_valid_input_passes(case: ApiCase) -> None:
    """The builders give valid input (so that the sweep tests the mutation, not a broken baseline)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # e.g. aggregate(method="sum") warns by design
        case.fn(**case.make(np.random.default_rng(0)))
