"""The checks of a cohort's case lists at cohort scale (``monai-unc report`` reads them three times).

``load_evaluation`` checks every case list of ``summary.json`` (the triage order, the referred cases, the accepted and
referred cases of a risk-controlled rule) against the rows of ``state/rows.json``, and ``budget_split`` finds the
cases tied at the budget's cut. Both were quadratic in the number of cases (a set rebuilt and a list counted per
case: 11.7 s for 16 000 cases); this prints their time for growing cohorts next to the floor, one ``set`` and one
``sorted`` of the ids, and the fitted exponent.

    python benchmarks/bench_case_lists.py [--cases 1000 4000 16000 64000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from monai_unc.evaluation.cohort import _id_list_problem, budget_split, triage_order


def best_of(fn, repeat: int = 3) -> float:
    """The shortest of ``repeat`` wall times of ``fn()`` (s)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, nargs="+", default=[1000, 4000, 16000, 64000])
    args = parser.parse_args()
    rows = []
    print(f"{'cases':>7} {'id-list check (s)':>18} {'budget split (s)':>17} {'floor (s)':>10} {'check / floor':>14}")
    for n in args.cases:
        rng = np.random.default_rng(0)
        ids = [f"case{i:06d}" for i in range(n)]
        scores, dice = rng.random(n), rng.random(n)
        order = [ids[i] for i in triage_order(ids, scores)]
        referred = order[: n // 5]
        check = best_of(lambda: _id_list_problem(order, ids))  # noqa: B023 - called at once
        split = best_of(lambda: budget_split(ids, dice, scores, referred))  # noqa: B023
        floor = best_of(lambda: (set(ids), sorted(order)))  # noqa: B023
        rows.append((n, check, split))
        print(f"{n:>7} {check:>18.4f} {split:>17.4f} {floor:>10.4f} {check / floor:>13.1f}x")
    if len(rows) > 1:
        ln = np.log([r[0] for r in rows])
        for j, name in ((1, "id-list check"), (2, "budget split")):
            print(f"fitted exponent, {name}: {np.polyfit(ln, np.log([r[j] for r in rows]), 1)[0]:.2f}")


if __name__ == "__main__":
    main()
