"""The functions of a batch say each warning of their cases once per call, at the user's line (review 70).

Found by review 70: ``boundary_uncertainty_concentration``, ``boundary_aware_ece``, ``hd95``, the per-case
discrimination metrics (``error_auroc``, ``error_auprc``, ``correct_certain_ratio``, ``au_arc``, ``pavpu``) called on
a batch said the warning of each degenerate case once per case (8 empty cases: 8 warnings), and under Python 3.11 at
a line of this package (their fixed stacklevels counted a list comprehension's frame), where a filter on the user's
module does not match. Now one warning for the call, naming how many cases (its leading words unchanged), at the
caller's line; a single case's text is as before; the values are unchanged.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from monai_unc._utils import count_cases, said_once_per_call, say_warning
from monai_unc.metrics import (
    au_arc,
    boundary_aware_ece,
    boundary_uncertainty_concentration,
    correct_certain_ratio,
    error_auprc,
    error_auroc,
    hd95,
    ncc,
    pavpu,
    qu_brats_regions,
)
from monai_unc.metrics.boundary import hausdorff_distance
from monai_unc.metrics.qu_brats_score import UNGRADED_WARNING
from tests._warning_checks import caught_warnings, quietly, said_once_each_at

said_here = functools.partial(said_once_each_at, __file__)  # at this file's lines

N = 8  # cases of a batch


def _labels(n: int, boundary: bool = True) -> torch.Tensor:
    t = torch.zeros(n, 1, 8, 8, dtype=torch.long)
    if boundary:
        t[:, :, 2:6, 2:6] = 1
    return t


def _errors(n: int) -> torch.Tensor:
    """``n`` cases of 4 x 4 error maps with errors and correct voxels."""
    return (torch.arange(16) % 3 == 0).float().reshape(1, 1, 4, 4).expand(n, 1, 4, 4)


#: name -> (a call on N degenerate cases, the same on one case, the warning's leading words)
BATCHES: dict[str, tuple[Callable[[int], Any], str]] = {
    "boundary_uncertainty_concentration": (
        lambda n: boundary_uncertainty_concentration(torch.full((n, 1, 8, 8), 0.5), _labels(n, False), _labels(n)),
        "BUC: the predicted label map has no boundary",
    ),
    "boundary_aware_ece": (
        lambda n: boundary_aware_ece(torch.full((n, 1, 8, 8), 0.5), _labels(n), _labels(n, False)),
        "BA-ECE: the target label map has no boundary",
    ),
    "hd95": (
        lambda n: hd95(np.zeros((n, 6, 6), dtype=np.int64), np.zeros((n, 6, 6), dtype=np.int64), spatial_dims=2),
        "hd95: prediction and target foregrounds are both empty",
    ),
    "hd95 (one empty)": (
        lambda n: hd95(np.zeros((n, 6, 6), dtype=np.int64), np.pad(np.ones((n, 2, 2), dtype=np.int64),
                                                                   ((0, 0), (2, 2), (2, 2))), spatial_dims=2),
        "hd95: the prediction foreground is empty; HD95 is infinite",
    ),
    "error_auroc": (
        lambda n: error_auroc(torch.rand(n, 1, 4, 4), torch.zeros(n, 1, 4, 4), per_case=True),
        "error_auroc: the case has no erroneous voxel",
    ),
    "error_auprc": (
        lambda n: error_auprc(torch.rand(n, 1, 4, 4), torch.ones(n, 1, 4, 4), per_case=True),
        "error_auprc: the case has no correct voxel",
    ),
    "correct_certain_ratio": (
        lambda n: correct_certain_ratio(torch.ones(n, 1, 4, 4), torch.zeros(n, 1, 4, 4), per_case=True),
        "correct_certain_ratio: no voxel is certain",
    ),
    "au_arc (tied)": (
        lambda n: au_arc(torch.full((n, 1, 4, 4), 0.5), _errors(n), per_case=True),
        "au_arc: all 16 scores are tied",
    ),
    "error_auroc (tied)": (
        lambda n: error_auroc(torch.full((n, 1, 4, 4), 0.5), _errors(n), per_case=True),
        "error_auroc: all 16 scores are tied",
    ),
    "pavpu": (
        lambda n: pavpu(torch.rand(n, 1, 2, 2), torch.zeros(n, 1, 2, 2), window=4, per_case=True),
        "pavpu: the map (2, 2) is smaller than one window",
    ),
}


@pytest.mark.parametrize("name", list(BATCHES))
def test_a_batch_of_degenerate_cases_says_one_warning_naming_their_number(name):
    call, start = BATCHES[name]
    (text,) = said_here(caught_warnings(lambda: call(N)), start)
    assert text.endswith(f" (in {N} cases)"), text
    (one,) = said_here(caught_warnings(lambda: call(1)), start)  # one case: the text as before, no count
    assert text == f"{one} (in {N} cases)"


def test_values_unchanged():
    g = torch.Generator().manual_seed(0)
    u = torch.rand(3, 1, 8, 8, generator=g)
    pred, target = _labels(3), _labels(3)
    pred[0] = 0  # no boundary: NaN
    target[1] = 0
    pred[2, :, 2:6, 6] = 1
    for fn in (boundary_uncertainty_concentration, boundary_aware_ece):
        batch = quietly(lambda f=fn: f(u, pred, target))
        single = torch.cat([quietly(lambda f=fn, i=i: f(u[i:i + 1], pred[i:i + 1], target[i:i + 1])) for i in range(3)])
        torch.testing.assert_close(batch, single, equal_nan=True)
    e = (torch.rand(3, 1, 4, 4, generator=g) < 0.3).float()
    e[0] = 0
    uu = torch.rand(3, 1, 4, 4, generator=g)
    for fn in (error_auroc, error_auprc, correct_certain_ratio, au_arc):
        batch = quietly(lambda f=fn: f(uu, e, per_case=True))
        single = [quietly(lambda f=fn, i=i: f(uu[i, 0], e[i, 0], per_case=False)) for i in range(3)]
        torch.testing.assert_close(batch, torch.tensor(single, dtype=torch.float64), equal_nan=True)
    a = np.zeros((3, 6, 6), dtype=np.int64)
    a[1:, 1:4, 1:4] = 1
    b = np.roll(a, 1, axis=2)
    b[2] = 0
    np.testing.assert_array_equal(quietly(lambda: hd95(a, b, spatial_dims=2)),
                                  [quietly(lambda i=i: hausdorff_distance(a[i], b[i])) for i in range(3)])


def test_two_kinds_of_warning_in_one_call_each_once():
    u = torch.full((N, 1, 8, 8), 3.0)  # off the [0, 1] scale, and no target boundary in any case
    texts = said_here(caught_warnings(lambda: boundary_aware_ece(u, _labels(N), _labels(N, False))),
                       "BA-ECE: the uncertainty reaches 3", "BA-ECE: the target label map has no boundary")
    assert sum(t.endswith(f"(in {N} cases)") for t in texts) == 1  # the off-scale one is one value of the call


def test_ncc_says_its_warning_at_the_callers_line_by_any_argument_names():
    const, ref = torch.zeros(4, 4), torch.rand(4, 4)
    said_here(caught_warnings(lambda: ncc(const, ref)), "ncc: uncertainty is constant")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ncc(pred_uncertainty=const, reference=ref)  # the deprecated names: one more frame
    caught = [w for w in caught if not issubclass(w.category, DeprecationWarning)]
    said_here(caught, "ncc: uncertainty is constant")


def test_a_function_called_by_a_metric_class_joins_its_call():
    """Inside a held call (a metric class's), a function's cases join the call's count."""

    def two_calls() -> None:
        boundary_uncertainty_concentration(torch.full((3, 1, 8, 8), 0.5), _labels(3, False), _labels(3))
        boundary_uncertainty_concentration(torch.full((2, 1, 8, 8), 0.5), _labels(2, False), _labels(2))

    (text,) = said_here(caught_warnings(lambda: said_once_per_call(two_calls)), "BUC: the predicted label map")
    assert text.endswith("(in 5 cases)"), text


def test_merge_collects_the_items_of_one_key():
    def regions() -> None:
        for name in ("WT", "TC", "WT"):
            say_warning(f"maps of {[name]}", key="maps", item=name,
                        merge=lambda m, items: f"maps of {sorted(set(items))}")

    (text,) = said_here(caught_warnings(lambda: said_once_per_call(regions)), "maps of")
    assert text == "maps of ['TC', 'WT']"
    (text,) = said_here(caught_warnings(lambda: say_warning("maps of ['ET']", key="maps", item="ET",
                                                            merge=count_cases)), "maps of")
    assert text == "maps of ['ET']"  # outside a held call: the message as is
    assert count_cases("x", [None]) == "x" and count_cases("x", [1, 2]) == "x (in 2 cases)"


def test_qu_brats_regions_in_one_held_call_merge_their_regions():
    """The ungraded-map warning of QU-BraTS is held by the one mechanism: two calls of ``qu_brats_regions`` inside
    one held call (a caller's loop over cases) say one line naming each ungraded region once, in channel order."""
    label = np.zeros((6, 6, 6), dtype=np.int64)
    label[1:5, 1:5, 1:5] = 2
    label[2:4, 2:4, 2:4] = 4
    unit = np.random.default_rng(0).random((6, 6, 6))  # on [0, 1]: ungraded on [0, 100]
    et_only, wt_only = np.zeros((3, 6, 6, 6)), np.zeros((3, 6, 6, 6))
    et_only[2], wt_only[1] = unit, unit

    def cases() -> None:
        qu_brats_regions(et_only, label, label)
        qu_brats_regions(wt_only, label, label)

    (text,) = said_here(caught_warnings(lambda: said_once_per_call(cases)), UNGRADED_WARNING)
    assert "(the maps of the regions ['WT', 'ET'])" in text, text
    assert "cases)" not in text


def test_hausdorff_distance_says_an_empty_foreground_at_its_callers_line():
    """Found by review 70: the ``inf`` warning of ``hausdorff_distance`` (one case) counted one frame too many: it
    named the caller's caller (at a script's top level, the module ``sys``)."""
    empty, mask = np.zeros((6, 6), dtype=np.int64), np.zeros((6, 6), dtype=np.int64)
    mask[2:4, 2:4] = 1

    def helper() -> list[warnings.WarningMessage]:
        return caught_warnings(lambda: hausdorff_distance(empty, mask))  # the line the warning must name

    caught = helper()
    (text,) = said_here(caught, "hd95: the prediction foreground is empty")
    assert caught[0].lineno == helper.__code__.co_firstlineno + 1, (caught[0].lineno, text)
