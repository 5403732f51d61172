"""Joining the per-case lesion states of a cohort: case by case (before review 65) against once, in one run.

    python benchmarks/bench_lesion_states.py --cases 500 1000 2000 --lesions 50

Workload: ``--cases`` synthetic per-case :class:`~monai_unc.evaluation.lesions.LesionState` of ``--lesions``
predicted lesions each, with the keys of one task and one map (the 8 case fields, the 11 lesion fields, one
score), as ``evaluate --lesions`` keeps them. **case by case**: ``merge`` in a loop, what the lesion product's
summary did; **once**: :meth:`LesionState.concatenate`, what it does now; the floor: one copy of every array
(``numpy.concatenate`` of each key's pieces, no checks). Printed: seconds (best of ``--repeat``) and the ratio
of each to the floor; doubling the cases should double the time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from monai_unc.evaluation.lesions import CASE_FIELDS, LESION_FIELDS, LesionState


def case_states(n_cases: int, n_lesions: int) -> list[LesionState]:
    """``n_cases`` states of one task (``1``) and one map, ``n_lesions`` lesions each."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n_cases):
        arrays = {"n_cases": np.array([1], np.int64), "samples": np.array([0], np.int64)}
        arrays.update({f"case.1.{f}": rng.random(1) for f in CASE_FIELDS})
        arrays.update({f"lesion.1.{f}": rng.random(n_lesions) for f in LESION_FIELDS})
        arrays["lesion.1.case_index"] = np.zeros(n_lesions)
        arrays["lesion.1.score.predictive_entropy_mean"] = rng.random(n_lesions)
        out.append(LesionState(arrays))
    return out


def case_by_case(states: list[LesionState]) -> None:
    """``merge`` in a loop (the lesion product's summary before review 65)."""
    merged = LesionState(dict(states[0].arrays))
    for s in states[1:]:
        merged.merge(s)


def floor(states: list[LesionState]) -> None:
    """One copy of every array: each key's pieces joined, no checks."""
    for k in states[0].arrays:
        np.concatenate([s.arrays[k] for s in states])


def best(fn, states: list[LesionState], repeat: int) -> float:
    """Best wall time of ``repeat`` calls of ``fn(states)``."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(states)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, nargs="+", default=[500, 1000, 2000])
    ap.add_argument("--lesions", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"{'cases':>6} {'case by case (s)':>17} {'once (s)':>9} {'floor (s)':>9} {'ratio before':>12} "
          f"{'ratio now':>9}")
    for n in args.cases:
        states = case_states(n, args.lesions)
        t_seq = best(case_by_case, states, args.repeat)
        t_once = best(LesionState.concatenate, states, args.repeat)
        t_floor = best(floor, states, args.repeat)
        print(f"{n:>6} {t_seq:>17.3f} {t_once:>9.4f} {t_floor:>9.4f} {t_seq / t_floor:>11.1f}x "
              f"{t_once / t_floor:>8.2f}x")


if __name__ == "__main__":
    main()
