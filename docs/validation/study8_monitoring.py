"""Validation study 8: the monitoring alarms' false alarms and detection delays, beside a fixed-window baseline.

Claims checked (docs/monitoring.md): the label-free alarm (online conformal p-values and the Simple Jumper conformal
test martingale: Vovk, Nouretdinov, Gammerman, "Testing exchangeability on-line", ICML 2003; Vovk et al., "Retrain
or not retrain: Conformal test martingales for change-point detection", COPA 2021) and the risk alarm (a betting
e-process on audited losses against the certified target: Waudby-Smith and Ramdas, "Estimating means of bounded
random variables by betting", JRSSB 2023; Podkopaev and Ramdas, "Tracking the risk of a deployed model and
detecting harmful distribution shifts", ICLR 2022) each raise a false alarm with probability at most ``alpha`` over
a whole stream, however long; they detect a change; the risk alarm stays quiet on a benign shift (the risk moves
but stays under the target).

Protocol (``alpha = 0.05``; ``--streams`` streams of ``--cases`` cases each, default 1000 x 500):

- **no shift** (label-free): calibration scores (200) and every case of the stream drawn from N(0, 1), i.e.
  exchangeably; the share of streams with any alarm, for the case-score martingale (against the calibration scores);
- **images** (label-free): 50 calibration images and every case's image statistics (mean, std, p01, p50, p99) drawn
  from one scanner; the rule's image reference (median and robust scale) fitted on the calibration images; each
  case's ``image_z_max`` as triage records it; the image martingale against the calibration images' leave-one-out
  ``image_z_max`` (what ``monitor status`` does with a rule that records them) and against the stream alone (a rule
  certified before they were recorded), without a shift, with a new scanner (intensities 5 % higher) from the first
  case, and with that scanner from case 200;
- **scanner change** (label-free): from case 200 on, the scores move up by 1 (a new scanner): share detected by case
  500 and the median delay (alarm - 200);
- **risk at the target** (labels): every accepted case fails with probability 0.1 = the target (the edge of the
  null): share of streams with any risk alarm;
- **benign shift** (labels): failure rate 0.03 up to case 200, 0.08 after (the score distribution moves, the risk
  stays under the target): share with any risk alarm;
- **harmful shift** (labels): failure rate 0.05 up to case 200, 0.2 (2x the target) after: share detected by case
  500 and the median delay, in audited accepted cases (every accepted case audited here);
- **baseline**: a fixed-window test per "month" of 50 cases, as a monthly report would run it: a one-sided exact
  binomial test of the window's failures against the target at level ``alpha`` (labels), and a two-sample
  Kolmogorov-Smirnov test of the window's scores against the calibration scores at level ``alpha`` (label-free),
  each window on its own (no correction for the ten looks): its false-alarm share and its delay (the end of the
  first rejecting window - 200).

Run (from the repository root)::

    python docs/validation/study8_monitoring.py                      # ~1 CPU minute
    python docs/validation/study8_monitoring.py --tiny --output /tmp/s8   # smoke test, seconds

Writes ``study8.md`` and ``study8.json`` to ``--output``.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from monai_unc.evaluation.triage import ImageReference
from monai_unc.io import atomic_write_json, atomic_write_text, json_safe
from monai_unc.metrics.monitoring import first_alarm, risk_eprocess, score_martingale

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results"
ALPHA = 0.05
TARGET = 0.1
CHANGE = 200
WINDOW = 50
N_CAL = 200
#: image statistics (mean, std, p01, p50, p99) of the calibration scanner: centre and spread
IMAGE_CENTRE = np.array([100.0, 20.0, 60.0, 100.0, 140.0])
IMAGE_SPREAD = np.array([5.0, 2.0, 4.0, 5.0, 6.0])
#: the intensity gain of the new scanner
IMAGE_GAIN = 1.05
N_CAL_IMAGES = 50
#: image scenario -> the first case of the new scanner (500: none)
IMAGE_SCENARIOS = {"no shift": None, "new scanner from case 1": 0, "scanner change": CHANGE}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="results folder (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the streams (default 0)")
    p.add_argument("--streams", type=int, default=None, help="streams per scenario (default 1000; tiny 40)")
    p.add_argument("--cases", type=int, default=500, help="cases per stream (default 500)")
    p.add_argument("--tiny", action="store_true", help="40 streams per scenario: smoke test")
    p.add_argument("--render-only", action="store_true", help="only re-write study8.md from study8.json")
    return p.parse_args(argv)


def _windows(n: int) -> list[tuple[int, int]]:
    return [(a, min(a + WINDOW, n)) for a in range(0, n, WINDOW)]


def _binomial_alarm(fails: np.ndarray) -> int | None:
    """End (exclusive) of the first window whose failures reject ``rate <= TARGET`` at ``ALPHA``, or None."""
    for a, b in _windows(len(fails)):
        k, n = int(fails[a:b].sum()), b - a
        if stats.binom.sf(k - 1, n, TARGET) <= ALPHA:
            return b
    return None


def _ks_alarm(scores: np.ndarray, cal: np.ndarray) -> int | None:
    for a, b in _windows(len(scores)):
        if stats.ks_2samp(scores[a:b], cal).pvalue <= ALPHA:
            return b
    return None


def _share(xs: list[Any]) -> float:
    return float(np.mean([x is not None for x in xs])) if xs else math.nan


def _delays(xs: list[Any], change: int = CHANGE) -> list[float]:
    return [x - change for x in xs if x is not None]


def _images(rng: np.random.Generator, n: int) -> np.ndarray:
    return IMAGE_CENTRE + rng.normal(size=(n, len(IMAGE_CENTRE))) * IMAGE_SPREAD


def _image_streams(rng: np.random.Generator, n_streams: int, n: int) -> dict[str, dict[str, list]]:
    """Per image scenario and reference, the alarm case (1-based) of every stream, or None."""
    out: dict[str, dict[str, list]] = {s: {"against the calibration images": [], "stream alone": []}
                                       for s in IMAGE_SCENARIOS}
    for _ in range(n_streams):
        ref = ImageReference.fit(_images(rng, N_CAL_IMAGES))
        loo = ref.leave_one_out_z_max()
        for scenario, start in IMAGE_SCENARIOS.items():
            x = _images(rng, n)
            if start is not None:
                x[start:] *= IMAGE_GAIN
            z = ref.z_scores(x).max(axis=1)  # image_z_max, as triage records it
            seed = int(rng.integers(1 << 31))
            for name, against in (("against the calibration images", loo), ("stream alone", ())):
                m = score_martingale(z, against, alpha=ALPHA, seed=seed)
                out[scenario][name].append(None if m.alarm is None else m.alarm + 1)
    return out


def _summary(alarms: list[int | None], detection: bool, change: int = CHANGE) -> dict[str, Any]:
    out: dict[str, Any] = {"alarm_share": _share(alarms), "n": len(alarms)}
    if detection:
        d = _delays(alarms, change)
        early = sum(1 for x in alarms if x is not None and x < change)
        out.update(median_delay=float(np.median(d)) if d else math.nan, early_alarms=early,
                   detected=float(np.mean([x is not None and x >= change for x in alarms])))
    out["mc_se"] = math.sqrt(max(out["alarm_share"] * (1 - out["alarm_share"]), 1e-12) / max(len(alarms), 1))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    n_streams = args.streams or (40 if args.tiny else 1000)
    n = args.cases
    rng = np.random.default_rng(args.seed)
    t0, c0 = time.perf_counter(), time.process_time()
    label_free: dict[str, dict[str, list]] = {"no shift": {"score": [], "ks": []},
                                              "scanner change": {"score": [], "ks": []}}
    for _ in range(n_streams):
        cal = rng.normal(size=N_CAL)
        for scenario, shift in (("no shift", 0.0), ("scanner change", 1.0)):
            s = rng.normal(size=n)
            s[CHANGE:] += shift
            seed = int(rng.integers(1 << 31))
            r = score_martingale(s, cal, alpha=ALPHA, seed=seed)
            label_free[scenario]["score"].append(None if r.alarm is None else r.alarm + 1)
            label_free[scenario]["ks"].append(_ks_alarm(s, cal))
    images = _image_streams(np.random.default_rng([args.seed, 8]), n_streams, n)
    risk: dict[str, dict[str, list]] = {}
    scenarios = {"risk at the target": (TARGET, TARGET), "benign shift": (0.03, 0.08), "harmful shift": (0.05, 0.2)}
    for name, (before, after) in scenarios.items():
        rates = np.where(np.arange(n) < CHANGE, before, after)
        risk[name] = {"eprocess": [], "binomial": []}
        for _ in range(n_streams):
            fails = (rng.uniform(size=n) < rates).astype(np.float64)
            a = first_alarm(risk_eprocess(fails, TARGET), ALPHA)
            risk[name]["eprocess"].append(None if a is None else a + 1)
            risk[name]["binomial"].append(_binomial_alarm(fails))
    result = {
        "alpha": ALPHA, "target": TARGET, "change_at": CHANGE, "window": WINDOW, "streams": n_streams, "cases": n,
        "calibration_cases": N_CAL, "seed": args.seed,
        "label_free": {
            "no shift": {"score martingale": _summary(label_free["no shift"]["score"], False),
                         "window KS test": _summary(label_free["no shift"]["ks"], False)},
            "scanner change": {"score martingale": _summary(label_free["scanner change"]["score"], True),
                               "window KS test": _summary(label_free["scanner change"]["ks"], True)},
        },
        "images": {scenario: {name: _summary(alarms, start is not None, start or 0)
                              for name, alarms in images[scenario].items()}
                   for scenario, start in IMAGE_SCENARIOS.items()},
        "calibration_images": N_CAL_IMAGES, "image_gain": IMAGE_GAIN,
        "risk": {name: {"risk e-process": _summary(v["eprocess"], name == "harmful shift"),
                        "window binomial test": _summary(v["binomial"], name == "harmful shift")}
                 for name, v in risk.items()},
        "seconds": {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0},
    }
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "study8.json", json_safe(result))
    md = render_markdown(result)
    atomic_write_text(out / "study8.md", md)
    print(md)
    return result


def _fmt(v: float, digits: int = 3) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def render_markdown(r: dict[str, Any]) -> str:
    """The results fragment of docs/validation.md."""
    n, a = r["streams"], r["alpha"]
    lines = [
        "## Study 8: monitoring alarms, anytime-valid vs a fixed-window test",
        "",
        f"{n} simulated streams of {r['cases']} cases per scenario; alpha = {a}; change at case {r['change_at']}; "
        f"baseline: a test per window of {r['window']} cases at level alpha, no correction for the repeated looks. "
        "Alarm share: the share of streams with any alarm (Monte Carlo standard error in brackets); delay: alarm "
        f"case - {r['change_at']}, median over the streams that detected the change.",
        "",
        f"Runtime: {r['seconds']['wall']:.0f} s wall, {r['seconds']['cpu']:.0f} s CPU.",
        "",
        "### Label-free (case scores against 200 calibration cases)",
        "",
        "| scenario | statistic | alarm share | detected after the change | median delay (cases) | alarms before "
        "the change |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for scen, stats_ in r["label_free"].items():
        for name, s in stats_.items():
            lines.append(f"| {scen} | {name} | {_fmt(s['alarm_share'])} ({_fmt(s['mc_se'])}) | "
                         f"{_fmt(s.get('detected', float('nan')))} | {_fmt(s.get('median_delay', float('nan')), 0)} | "
                         f"{s.get('early_alarms', '-')} |")
    if r.get("images"):
        lines += ["", f"### Label-free: image statistics against {r['calibration_images']} calibration images "
                  f"(new scanner: intensities x {r['image_gain']})", "",
                  "| scenario | image martingale | alarm share | detected after the change | median delay (cases) | "
                  "alarms before the change |", "|---|---|---:|---:|---:|---:|"]
        for scen, stats_ in r["images"].items():
            for name, s in stats_.items():
                lines.append(f"| {scen} | {name} | {_fmt(s['alarm_share'])} ({_fmt(s['mc_se'])}) | "
                             f"{_fmt(s.get('detected', float('nan')))} | "
                             f"{_fmt(s.get('median_delay', float('nan')), 0)} | {s.get('early_alarms', '-')} |")
    lines += ["", f"### With audited labels (failure of the accepted cases; target risk {r['target']})", "",
              "| scenario | statistic | alarm share | detected after the change | median delay (audited cases) | "
              "alarms before the change |", "|---|---|---:|---:|---:|---:|"]
    for scen, stats_ in r["risk"].items():
        for name, s in stats_.items():
            lines.append(f"| {scen} | {name} | {_fmt(s['alarm_share'])} ({_fmt(s['mc_se'])}) | "
                         f"{_fmt(s.get('detected', float('nan')))} | {_fmt(s.get('median_delay', float('nan')), 0)} | "
                         f"{s.get('early_alarms', '-')} |")
    return "\n".join(lines) + "\n"


def render_only(out_dir: Path) -> dict[str, Any]:
    """Re-write ``study8.md`` from ``study8.json``."""
    import json

    path = out_dir / "study8.json"
    if not path.is_file():
        raise FileNotFoundError(f"no study8.json in {out_dir}: run the study first")
    result = json.loads(path.read_text(), parse_constant=lambda c: float("nan"))

    def nan(o: Any) -> Any:
        if o is None:
            return float("nan")
        if isinstance(o, dict):
            return {k: nan(v) for k, v in o.items()}
        return o

    result = nan(result)
    md = render_markdown(result)
    atomic_write_text(out_dir / "study8.md", md)
    print(md)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    return render_only(Path(args.output)) if args.render_only else run(args)


if __name__ == "__main__":
    main()
