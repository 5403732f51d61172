"""Review 65 (clinical-scale cohorts): the lesion product joins the per-case states once, linear in the cohort.

Merging the per-case :class:`LesionState` one after another copied every array gathered so far at each case: the
work grew with the square of the number of cases (2000 cases of 50 lesions: benchmarks/bench_lesion_states.py).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from monai_unc.evaluation.lesions import LesionState
from monai_unc.products.lesions import LesionMetrics


def _case_state(i: int, n_lesions: int) -> LesionState:
    rng = np.random.default_rng(i)
    return LesionState({
        "n_cases": np.array([1], np.int64), "samples": np.array([0], np.int64),
        "case.1.lesion_dice": [rng.random()], "case.1.lesion_hd95": [1.0], "case.1.lesion_tp": [n_lesions],
        "case.1.lesion_fp": [1.0], "case.1.lesion_fn": [0.0], "case.1.lesion_f1": [0.9], "case.1.ndsc": [0.8],
        "case.1.ndsc_raac": [0.1],
        "lesion.1.case_index": np.zeros(n_lesions), "lesion.1.lesion": np.arange(1.0, n_lesions + 1),
        "lesion.1.volume_mm3": rng.random(n_lesions) * 100,
        "lesion.1.false_positive": (np.arange(n_lesions) == 0) * 1.0,
        "lesion.1.dice": rng.random(n_lesions), "lesion.1.score.predictive_entropy_mean": rng.random(n_lesions),
        **{f"lesion.1.center_{d}": rng.random(n_lesions) for d in range(3)},
        **{f"lesion.1.center_mm_{d}": rng.random(n_lesions) for d in range(3)},
    })


def test_concatenate_equals_merging_case_by_case() -> None:
    states = [_case_state(i, n) for i, n in enumerate((3, 0, 5, 2))]
    one = LesionState.concatenate(states)
    # the reference, case by case as merging joined them before review 65 (merge itself now calls concatenate)
    seq = LesionState(dict(states[0].arrays))
    for s in states[1:]:
        n = int(seq.arrays["n_cases"][0])
        for k, v in s.arrays.items():
            seq.arrays[k] = (seq.arrays[k] + v if k == "n_cases" else
                             np.concatenate([seq.arrays[k], v + n if k.endswith(".case_index") else v]))
    assert set(one.arrays) == set(seq.arrays)
    for k in seq.arrays:
        np.testing.assert_array_equal(one.arrays[k], seq.arrays[k], err_msg=k)
    assert one.arrays["lesion.1.case_index"].tolist() == [0, 0, 0, 2, 2, 2, 2, 2, 3, 3]
    assert int(one.arrays["n_cases"][0]) == 4
    assert states[0].arrays["n_cases"].tolist() == [1]  # the inputs left unchanged
    merged = LesionState(dict(states[0].arrays)).merge(states[1]).merge(states[2])  # merge: the same join, in place
    assert merged.arrays["lesion.1.case_index"].tolist() == [0, 0, 0, 2, 2, 2, 2, 2]
    assert LesionState.concatenate([]) is None
    with pytest.raises(ValueError, match="different tasks or maps"):
        LesionState.concatenate([states[0], LesionState({"n_cases": [1], "case.2.ndsc": [0.5]})])


def _copied_by_summary(monkeypatch: pytest.MonkeyPatch, n_cases: int) -> int:
    """Array elements that ``np.concatenate`` produced while the product summarized ``n_cases`` cases."""
    copied = [0]
    real = np.concatenate

    def counting(arrays, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = real(arrays, *args, **kwargs)
        copied[0] += out.size
        return out

    states = {f"case{i:04d}": _case_state(i, 20) for i in range(n_cases)}
    with monkeypatch.context() as m:
        m.setattr(np, "concatenate", counting)
        block = LesionMetrics("gli", min_volume=0.0).summarize(states, [], None, SimpleNamespace(measure=None))
    assert block["n_cases"] == n_cases and block["per_task"]["1"]["lesion_fp"] == n_cases
    return copied[0]


def test_summary_joins_the_cases_once(monkeypatch: pytest.MonkeyPatch) -> None:
    small, double = _copied_by_summary(monkeypatch, 40), _copied_by_summary(monkeypatch, 80)
    # linear: twice the cases, twice the copies (case by case it was about 4x: every case copied all before it)
    assert double <= 2.2 * small, (small, double)
