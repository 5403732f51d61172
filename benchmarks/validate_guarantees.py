"""Monte Carlo check of the statistical guarantees, on distributions whose truth is known exactly (review 65).

Each row draws many calibration sets (or monitored streams) from a cohort whose true risk, coverage or null is known
in closed form, applies the library's rule and counts how often the promise fails:

- **referral threshold** (``risk_controlled_threshold``, SGR and LTT): a violation is a draw whose chosen threshold
  has a true selective risk above the target; the promise is a rate ``<= delta``. Settings: small calibration sets,
  heavily tied scores (3 levels, risk not monotone in the score), constant scores, targets near 0 and 1,
  continuous scores with ``E[risk | u] = c u^2`` (true selective risk of ``u < t``: ``c t^2 / 3``);
- **conformal masks** (``crc_lambda``, ``high_probability_lambda``): per-case loss curves on a 21-point grid (a
  0/1 step at a random index, heavy ties, or a ramp), so ``E[L_new(lambda)]`` and ``P(L_new(lambda) > tol)`` are
  exact; the promise is a mean ``<= alpha`` over the calibration draws;
- **expected-Dice interval** (``conformal_interval``): coverage of a new case, Dice recorded to 2 or 1 decimals;
- **monitoring** (``risk_eprocess``, ``risk_lower_bound``, ``score_martingale``): streams checked after *every*
  case (continuous peeking); a false alarm is any crossing; the promise is a rate ``<= alpha``.

Intervals are exact Clopper-Pearson 95 % intervals of the observed rate (a mean's interval is +- 1.96 SE). The
table is written to ``benchmarks/results/guarantees_review65.md``.

    python benchmarks/validate_guarantees.py             # about 2 minutes on one core
    python benchmarks/validate_guarantees.py --quick     # 10x fewer draws
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monai_unc.io import atomic_write_text  # noqa: E402
from monai_unc.metrics.conformal import crc_lambda, high_probability_lambda  # noqa: E402
from monai_unc.metrics.monitoring import first_alarm, risk_eprocess, risk_lower_bound, score_martingale  # noqa: E402
from monai_unc.metrics.quality import conformal_interval  # noqa: E402
from monai_unc.metrics.risk_control import _risk_control_batch  # noqa: E402

ROWS: list[tuple[str, str, str, str, str]] = []


def cp_interval(k: int, n: int) -> str:
    """The exact 95 % interval of a binomial rate ``k / n``."""
    lo = stats.beta.ppf(0.025, k, n - k + 1) if k else 0.0
    hi = stats.beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return f"[{lo:.4f}, {hi:.4f}]"


def add(section: str, setting: str, nominal: str, observed: str, ci: str) -> None:
    ROWS.append((section, setting, nominal, observed, ci))
    print(f"{section:12s} {setting:70s} {nominal:>10s} {observed:>16s} {ci}", flush=True)


def referral_discrete(rng, levels, probs, risks, n, alpha, delta, method, reps) -> None:
    """Tied scores: the true risk of "accept u < cut" is a finite sum."""
    levels, probs, risks = (np.asarray(v, float) for v in (levels, probs, risks))
    idx = rng.choice(len(levels), size=(reps, n), p=probs)
    loss = (rng.random((reps, n)) < risks[idx]).astype(float)
    res = _risk_control_batch(levels[idx], loss, alpha, delta, method, 20, with_bound=False)
    acc = levels[None, :] < res["cut"][:, None]
    mass = (acc * probs).sum(1)
    true = np.where(mass > 0, (acc * probs * risks).sum(1) / np.maximum(mass, 1e-300), 0.0)
    feas = res["n_accepted"] > 0
    k = int((feas & (true > alpha + 1e-12)).sum())
    shares, rates = [float(v) for v in probs], [float(v) for v in risks]
    add("referral", f"{method}, n={n}, {len(levels)} tied levels p={shares} risk={rates}, target {alpha}",
        f"<= {delta}", f"{k / reps:.4f} (feasible {feas.mean():.2f})", cp_interval(k, reps))


def referral_continuous(rng, n, alpha, delta, method, c, reps, continuous_loss=False) -> None:
    """``u ~ U(0, 1)``, ``E[risk | u] = c u^2`` (``c u^2 <= 1``): true selective risk ``c t^2 / 3``."""
    u = rng.random((reps, n))
    p = c * u**2
    if continuous_loss:
        loss = np.clip(rng.beta(p * 4 + 1e-9, (1 - p) * 4 + 1e-9), 0, 1)
    else:
        loss = (rng.random((reps, n)) < p).astype(float)
    res = _risk_control_batch(u, loss, alpha, delta, method, 20, with_bound=False)
    t = np.clip(res["cut"], 0, 1)
    feas = res["n_accepted"] > 0
    k = int((feas & (c * t**2 / 3 > alpha)).sum())
    oracle = min(1.0, float(np.sqrt(3 * alpha / c)))
    add("referral", f"{method}, n={n}, continuous u, {'Beta' if continuous_loss else '0/1'} loss, c={c}, target "
        f"{alpha}", f"<= {delta}", f"{k / reps:.4f} (cov {(res['n_accepted'] / n).mean():.2f}/{oracle:.2f})",
        cp_interval(k, reps))


def conformal(rng, n, alpha, shape, reps, tol=None) -> None:
    """Loss curves on a 21-point grid: a 0/1 step at a random index (ties), or a ramp."""
    grid = np.arange(21)
    if shape == "step":
        tv, tp = np.array([0, 5, 10, 20]), np.array([0.5, 0.2, 0.2, 0.1])
    else:
        tv, tp = np.arange(21), np.full(21, 1 / 21)

    def curves(t):
        if shape == "step":
            return (grid[None, :] < t[:, None]).astype(float)
        return np.clip(1 - grid[None, :] / np.maximum(t[:, None], 1), 0, 1) * (t[:, None] > 0)

    table = curves(tv)
    truth = (tp[:, None] * (table if tol is None else table > tol)).sum(0)
    lam = np.empty(reps, dtype=int)
    for r in range(reps):
        loss = curves(rng.choice(tv, size=n, p=tp))
        lam[r] = int(crc_lambda(loss, alpha) if tol is None else high_probability_lambda(loss, tol, alpha))
    v = truth[lam]
    what = "E[L_new]" if tol is None else f"P(L_new > {tol})"
    add("conformal", f"{'CRC' if tol is None else 'high-probability'}, n={n}, {shape} losses, {what}",
        f"<= {alpha}", f"{v.mean():.4f}", f"+- {1.96 * v.std() / np.sqrt(reps):.4f}")


def interval(rng, n, decimals, reps) -> None:
    hit = 0
    for _ in range(reps):
        e = rng.uniform(0.6, 1.0, n + 1)
        d = np.clip(e - np.abs(rng.normal(0, 0.05, n + 1)), 0, 1)
        if decimals:
            e, d = np.round(e, decimals), np.round(d, decimals)
        iv = conformal_interval(e[-1], e[:-1], d[:-1], alpha=0.1)
        hit += bool(iv.low <= d[-1] <= iv.high)
    add("interval", f"expected-Dice interval, n={n}, Dice to {decimals or 'full'} decimals, coverage", ">= 0.9",
        f"{hit / reps:.4f}", cp_interval(hit, reps))


def monitor_risk(rng, rate, target, alpha, length, reps, continuous=False) -> None:
    k = 0
    for _ in range(reps):
        if continuous:
            x = rng.beta(1.0, (1 - rate) / rate, length)
        else:
            x = (rng.random(length) < rate).astype(float)
        k += first_alarm(risk_eprocess(x, target), alpha) is not None
    add("monitor", f"risk alarm, {'Beta' if continuous else '0/1'} losses at risk {rate} = target {target}, "
        f"{length} cases, every case checked", f"<= {alpha}", f"{k / reps:.4f}", cp_interval(k, reps))


def monitor_bound(rng, rate, target, alpha, length, reps) -> None:
    k = sum(bool((risk_lower_bound((rng.random(length) < rate).astype(float), target, alpha, 400) > rate).any())
            for _ in range(reps))
    add("monitor", f"lower confidence sequence ever above the true risk {rate} (target {target}), {length} cases",
        f"<= {alpha}", f"{k / reps:.4f}", cp_interval(k, reps))


def monitor_score(rng, m, levels, length, reps) -> None:
    k = 0
    for r in range(reps):
        ref = rng.integers(0, levels, m).astype(float)
        s = rng.integers(0, levels, length).astype(float)
        k += score_martingale(s, ref, alpha=0.05, seed=r).alarm is not None
    add("monitor", f"score alarm, {m} calibration scores, {levels} distinct values, {length} cases", "<= 0.05",
        f"{k / reps:.4f}", cp_interval(k, reps))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10x fewer draws")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "guarantees_review65.md"))
    args = ap.parse_args()
    f = 10 if args.quick else 1
    rng = np.random.default_rng(65)
    warnings.simplefilter("ignore")
    t0 = time.time()
    for method in ("sgr", "ltt"):
        for n in (50, 100, 400):
            referral_discrete(rng, [0, 1], [0.9, 0.1], [0.05, 0.6], n, 0.1, 0.1, method, 20000 // f)
            referral_discrete(rng, [0, 1, 2], [0.5, 0.3, 0.2], [0.02, 0.12, 0.5], n, 0.1, 0.1, method, 20000 // f)
        referral_discrete(rng, [0, 1, 2], [0.3, 0.4, 0.3], [0.25, 0.0, 0.5], 1000, 0.1, 0.1, method, 10000 // f)
        referral_discrete(rng, [0], [1.0], [0.1], 400, 0.1, 0.1, method, 20000 // f)
        referral_discrete(rng, [0], [1.0], [0.11], 2000, 0.1, 0.1, method, 5000 // f)
        for n, a, d, c in ((10, 0.5, 0.1, 1.0), (20, 0.5, 0.1, 1.0), (50, 0.3, 0.1, 1.0), (20, 0.9, 0.05, 1.0),
                           (400, 0.02, 0.1, 0.2), (1000, 0.01, 0.2, 0.1), (400, 0.1, 0.5, 0.6)):
            referral_continuous(rng, n, a, d, method, c, 20000 // f)
    referral_continuous(rng, 200, 0.2, 0.1, "ltt", 1.0, 20000 // f, continuous_loss=True)
    for n in (10, 20, 50):
        for a in (0.1, 0.2, 0.5):
            conformal(rng, n, a, "step", 4000 // f)
            conformal(rng, n, a, "ramp", 4000 // f)
            conformal(rng, n, a, "step", 4000 // f, tol=0.5)
            conformal(rng, n, a, "ramp", 4000 // f, tol=0.2)
    for n in (10, 20, 50):
        for dec in (None, 2, 1):
            interval(rng, n, dec, 5000 // f)
    for rate, alpha, length in ((0.1, 0.05, 500), (0.02, 0.05, 1000), (0.5, 0.05, 300), (0.9, 0.1, 300),
                                (0.1, 0.05, 2000)):
        monitor_risk(rng, rate, rate, alpha, length, 2000 // f)
    monitor_risk(rng, 0.1, 0.1, 0.05, 500, 2000 // f, continuous=True)
    for rate, target, alpha in ((0.2, 0.1, 0.05), (0.1, 0.1, 0.05), (0.5, 0.1, 0.1)):
        monitor_bound(rng, rate, target, alpha, 300, 1000 // f)
    for m, levels in ((10, 3), (20, 2), (50, 1000), (0, 2), (10, 1)):
        monitor_score(rng, m, levels, 1000, 1000 // f)
    lines = ["# Statistical guarantees by simulation (review 65)", "",
             f"`python benchmarks/validate_guarantees.py{' --quick' if args.quick else ''}`, seed 65, "
             f"{time.time() - t0:.0f} s. 95 % intervals: Clopper-Pearson for rates, +- 1.96 SE for means.", "",
             "| part | setting | nominal | observed | 95 % interval |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {' | '.join(r)} |" for r in ROWS]
    atomic_write_text(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
