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

``--part review66`` runs only the settings review 66 added, for LTT with the exact binomial p-value of 0/1 losses
(``p_value="binomial"``): the p-value against ``scipy.stats.binom.cdf`` and a term-by-term binomial sum, the
referral settings above with it, and its power against the Hoeffding-Bentkus p-value on the same draws (a single
test at the boundary, computed exactly, and the coverage of the whole procedure). Written to
``benchmarks/results/guarantees_review66.md``.

    python benchmarks/validate_guarantees.py                   # about 2 minutes on one core
    python benchmarks/validate_guarantees.py --quick           # 10x fewer draws
    python benchmarks/validate_guarantees.py --part review66   # the binomial p-value's settings only
"""

from __future__ import annotations

import argparse
import math
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
from monai_unc.metrics.risk_control import (  # noqa: E402
    _risk_control_batch,
    binomial_pvalue,
    clopper_pearson_upper,
    hoeffding_bentkus_pvalue,
)

ROWS: list[tuple[str, str, str, str, str]] = []


def cp_interval(k: int, n: int) -> str:
    """The exact 95 % interval of a binomial rate ``k / n``."""
    lo = stats.beta.ppf(0.025, k, n - k + 1) if k else 0.0
    hi = stats.beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return f"[{lo:.4f}, {hi:.4f}]"


def add(section: str, setting: str, nominal: str, observed: str, ci: str) -> None:
    ROWS.append((section, setting, nominal, observed, ci))
    print(f"{section:12s} {setting:70s} {nominal:>10s} {observed:>16s} {ci}", flush=True)


def _label(method: str, p_value: str) -> str:
    return "ltt-binomial" if p_value == "binomial" else method


def referral_discrete(rng, levels, probs, risks, n, alpha, delta, method, reps, p_value="hoeffding_bentkus") -> None:
    """Tied scores: the true risk of "accept u < cut" is a finite sum."""
    levels, probs, risks = (np.asarray(v, float) for v in (levels, probs, risks))
    idx = rng.choice(len(levels), size=(reps, n), p=probs)
    loss = (rng.random((reps, n)) < risks[idx]).astype(float)
    res = _risk_control_batch(levels[idx], loss, alpha, delta, method, 20, with_bound=False, p_value=p_value)
    acc = levels[None, :] < res["cut"][:, None]
    mass = (acc * probs).sum(1)
    true = np.where(mass > 0, (acc * probs * risks).sum(1) / np.maximum(mass, 1e-300), 0.0)
    feas = res["n_accepted"] > 0
    k = int((feas & (true > alpha + 1e-12)).sum())
    shares, rates = [float(v) for v in probs], [float(v) for v in risks]
    add("referral", f"{_label(method, p_value)}, n={n}, {len(levels)} tied levels p={shares} risk={rates}, "
        f"target {alpha}",
        f"<= {delta}", f"{k / reps:.4f} (feasible {feas.mean():.2f})", cp_interval(k, reps))


def referral_continuous(rng, n, alpha, delta, method, c, reps, continuous_loss=False,
                        p_value="hoeffding_bentkus") -> None:
    """``u ~ U(0, 1)``, ``E[risk | u] = c u^2`` (``c u^2 <= 1``): true selective risk ``c t^2 / 3``."""
    u = rng.random((reps, n))
    p = c * u**2
    if continuous_loss:
        loss = np.clip(rng.beta(p * 4 + 1e-9, (1 - p) * 4 + 1e-9), 0, 1)
    else:
        loss = (rng.random((reps, n)) < p).astype(float)
    res = _risk_control_batch(u, loss, alpha, delta, method, 20, with_bound=False, p_value=p_value)
    t = np.clip(res["cut"], 0, 1)
    feas = res["n_accepted"] > 0
    k = int((feas & (c * t**2 / 3 > alpha)).sum())
    oracle = min(1.0, float(np.sqrt(3 * alpha / c)))
    add("referral", f"{_label(method, p_value)}, n={n}, continuous u, {'Beta' if continuous_loss else '0/1'} loss, "
        f"c={c}, target {alpha}", f"<= {delta}",
        f"{k / reps:.4f} (cov {(res['n_accepted'] / n).mean():.2f}/{oracle:.2f})", cp_interval(k, reps))


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


def pvalue_brute_force() -> None:
    """``binomial_pvalue`` against ``scipy.stats.binom.cdf`` and a term-by-term sum, every count of ``n <= 60``."""
    worst, worst_hb, checked = 0.0, 0.0, 0
    for n in range(1, 61):
        e = np.arange(n + 1)
        for a in (0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.9):
            got = binomial_pvalue(e / n, np.full(n + 1, n), a)
            brute = np.cumsum([math.comb(n, j) * a**j * (1 - a) ** (n - j) for j in e])
            worst = max(worst, float(np.abs(got - stats.binom.cdf(e, n, a)).max()), float(np.abs(got - brute).max()))
            worst_hb = max(worst_hb, float((got - hoeffding_bentkus_pvalue(e / n, np.full(n + 1, n), a)).max()))
            checked += n + 1
    add("p-value", f"binomial_pvalue vs scipy binom.cdf and the term-by-term sum, {checked} (count, n, alpha)",
        "0", f"{worst:.1e}", f"max(p - HB p-value) {worst_hb:.1e}")


def single_test_power(n, alpha, delta) -> None:
    """Exact P(certify) of one test on ``n`` Bernoulli losses at true risk ``alpha`` (the boundary) and below it."""
    e = np.arange(n + 1)
    for true in (alpha, 0.75 * alpha, 0.5 * alpha):
        pmf = stats.binom.pmf(e, n, true)
        hb = pmf[hoeffding_bentkus_pvalue(e / n, np.full(n + 1, n), alpha) <= delta].sum()
        ex = pmf[binomial_pvalue(e / n, np.full(n + 1, n), alpha) <= delta].sum()
        cp = pmf[clopper_pearson_upper(e, np.full(n + 1, n), delta) <= alpha].sum()
        add("power", f"one test, n={n}, target {alpha}, true risk {true:g}: P(certify) HB / binomial (CP)",
            f"<= {delta}" if true == alpha else "-", f"{hb:.4f} / {ex:.4f}", f"CP {cp:.4f} (exact)")


def procedure_power(rng, n, alpha, delta, c, reps) -> None:
    """Mean coverage of LTT (fallback) with each p-value on the same draws; ``E[risk | u] = c u^2``."""
    u = rng.random((reps, n))
    loss = (rng.random((reps, n)) < c * u**2).astype(float)
    hb = _risk_control_batch(u, loss, alpha, delta, "ltt", 20, with_bound=False)
    ex = _risk_control_batch(u, loss, alpha, delta, "ltt", 20, with_bound=False, p_value="binomial")
    sgr = _risk_control_batch(u, loss, alpha, delta, "sgr", 20, with_bound=False)
    cov = [r["n_accepted"].mean() / n for r in (hb, ex, sgr)]
    feas = [(r["n_accepted"] > 0).mean() for r in (hb, ex, sgr)]
    worse = int((ex["n_accepted"] < hb["n_accepted"]).sum())
    oracle = min(1.0, float(np.sqrt(3 * alpha / c)))
    add("power", f"LTT coverage, n={n}, c={c}, target {alpha}, delta {delta}: HB / binomial / SGR (oracle "
        f"{oracle:.2f})", "-", f"{cov[0]:.3f} / {cov[1]:.3f} / {cov[2]:.3f}",
        f"feasible {feas[0]:.3f} / {feas[1]:.3f} / {feas[2]:.3f}; binomial < HB in {worse} of {reps} draws")


def review66(rng, f) -> None:
    """The settings review 66 added: LTT with the exact binomial p-value (``p_value="binomial"``)."""
    pvalue_brute_force()
    for n in (50, 100, 400):
        referral_discrete(rng, [0, 1], [0.9, 0.1], [0.05, 0.6], n, 0.1, 0.1, "ltt", 20000 // f, "binomial")
        referral_discrete(rng, [0, 1, 2], [0.5, 0.3, 0.2], [0.02, 0.12, 0.5], n, 0.1, 0.1, "ltt", 20000 // f,
                          "binomial")
    referral_discrete(rng, [0, 1, 2], [0.3, 0.4, 0.3], [0.25, 0.0, 0.5], 1000, 0.1, 0.1, "ltt", 10000 // f, "binomial")
    referral_discrete(rng, [0], [1.0], [0.1], 400, 0.1, 0.1, "ltt", 20000 // f, "binomial")
    referral_discrete(rng, [0], [1.0], [0.102], 400, 0.1, 0.1, "ltt", 20000 // f, "binomial")
    referral_discrete(rng, [0], [1.0], [0.11], 2000, 0.1, 0.1, "ltt", 5000 // f, "binomial")
    for n, a, d, c in ((10, 0.5, 0.1, 1.0), (20, 0.5, 0.1, 1.0), (50, 0.3, 0.1, 1.0), (20, 0.9, 0.05, 1.0),
                       (400, 0.02, 0.1, 0.2), (1000, 0.01, 0.2, 0.1), (400, 0.1, 0.5, 0.6)):
        referral_continuous(rng, n, a, d, "ltt", c, 20000 // f, p_value="binomial")
    for n in (100, 400, 2000):
        single_test_power(n, 0.1, 0.1)
    for n, a, d, c in ((100, 0.1, 0.1, 0.6), (400, 0.1, 0.1, 0.6), (2000, 0.1, 0.1, 0.6), (400, 0.05, 0.1, 0.3),
                       (200, 0.2, 0.1, 1.0)):
        procedure_power(rng, n, a, d, c, 5000 // f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10x fewer draws")
    ap.add_argument("--part", choices=("all", "review66"), default="all",
                    help="'review66': only the settings of LTT's binomial p-value (review 66)")
    ap.add_argument("--out", default=None, help="the table (default benchmarks/results/guarantees_review65.md, "
                    "guarantees_review66.md with --part review66)")
    args = ap.parse_args()
    f = 10 if args.quick else 1
    warnings.simplefilter("ignore")
    t0 = time.time()
    if args.part == "review66":
        rng = np.random.default_rng(66)
        review66(rng, f)
        out = args.out or str(ROOT / "benchmarks" / "results" / "guarantees_review66.md")
        lines = ["# Statistical guarantees by simulation: LTT with the exact binomial p-value (review 66)", "",
                 f"`python benchmarks/validate_guarantees.py --part review66{' --quick' if args.quick else ''}`, "
                 f"seed 66, {time.time() - t0:.0f} s. 95 % intervals: Clopper-Pearson for rates. `ltt-binomial`: "
                 "`risk_controlled_threshold(..., method=\"ltt\", p_value=\"binomial\")` (Wiens' fallback, 20 "
                 "candidates). Power rows: exact for one test; mean coverage over the same draws for the "
                 "procedure.", "",
                 "| part | setting | nominal | observed | 95 % interval |", "| --- | --- | --- | --- | --- |"]
        lines += [f"| {' | '.join(r)} |" for r in ROWS]
        atomic_write_text(out, "\n".join(lines) + "\n")
        print(f"wrote {out}")
        return
    rng = np.random.default_rng(65)
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
    out = args.out or str(ROOT / "benchmarks" / "results" / "guarantees_review65.md")
    atomic_write_text(out, "\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
