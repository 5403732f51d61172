"""The statistics of ``monai-unc monitor status`` and ``monitor report``: per rule, per site and pooled.

For each rule digest, each site and all sites pooled, :func:`monitor_status` computes from the store's rows (in
recording order):

- the **score alarm** (label-free): the rule's case score of every case with a defined score, as online conformal
  p-values against the rule's calibration scores and the earlier cases of the stream, and the Simple Jumper
  conformal test martingale (:func:`monai_unc.metrics.monitoring.score_martingale`);
- the **image alarm** (label-free): the same on ``image_z_max`` (the largest robust z-score of the image
  statistics), against the stream's earlier cases only (the rule keeps no per-case image statistics): it tests
  that the images stay exchangeable over time;
- the **risk alarm** (audited labels): the betting e-process of the losses of the *accepted* cases that were
  audited, against the rule's target risk (:func:`monai_unc.metrics.monitoring.risk_test`). Referred cases are
  left out: the guarantee is about accepted cases, and the referred ones that are audited are not a sample of
  them;
- the acceptance and referral rates, overall and over the last :data:`RECENT` cases.

Each alarm has a false-alarm probability of at most ``alpha`` over the whole stream on its own; with several sites
and statistics the chance that *some* alarm is false grows with their number (docs/monitoring.md).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..metrics.monitoring import MartingaleResult, RiskTestResult, risk_test, score_martingale

__all__ = ["ALL_SITES", "RECENT", "GroupStatus", "monitor_status", "status_table", "any_alarm", "printable",
           "stream_seed"]

#: the site name of the pooled stream
ALL_SITES = "(all sites)"
#: the number of latest cases of the recent rates
RECENT = 50


@dataclass(frozen=True)
class GroupStatus:
    """The statistics of one stream: one rule, one site (or all sites).

    Attributes:
        rule_digest: the rule.
        site: the site, or :data:`ALL_SITES`.
        cases: the stream's case rows (store order).
        score: the score martingale, or None without a defined score.
        image: the image martingale, or None without image statistics.
        risk: the risk test of the audited accepted cases, or None without any.
        target_risk: the rule's target risk.
        alpha: the false-alarm probability of each alarm.
    """

    rule_digest: str
    site: str
    cases: tuple[Mapping[str, Any], ...]
    score: MartingaleResult | None
    image: MartingaleResult | None
    risk: RiskTestResult | None
    target_risk: float
    alpha: float

    @property
    def n_cases(self) -> int:
        """The number of cases."""
        return len(self.cases)

    @property
    def acceptance_rate(self) -> float:
        """The share of accepted cases (NaN without cases)."""
        return float(np.mean([c["decision"] == "accept" for c in self.cases])) if self.cases else math.nan

    @property
    def recent_acceptance_rate(self) -> float:
        """The share of accepted cases among the last :data:`RECENT`."""
        last = self.cases[-RECENT:]
        return float(np.mean([c["decision"] == "accept" for c in last])) if last else math.nan

    @property
    def labelled_accepted(self) -> list[Mapping[str, Any]]:
        """The accepted cases with an audited label, in order."""
        return [c for c in self.cases if c["decision"] == "accept" and c.get("loss") is not None]

    def alarms(self) -> list[str]:
        """One line per alarm raised (empty when none)."""
        out = []
        for name, m, values in (("score", self.score, "score"), ("image", self.image, "image_z_max")):
            if m is not None and m.alarm is not None:
                stream = [c for c in self.cases if not math.isnan(c[values])]
                at, start = stream[m.alarm], stream[m.change_point or 0]
                out.append(f"{name} distribution changed: martingale >= {1 / self.alpha:g} at case "
                           f"{at['case_id']!r} ({at['triaged_at']}), change estimated from case "
                           f"{start['case_id']!r} ({start['triaged_at']})")
        if self.risk is not None and self.risk.alarm is not None:
            lab = self.labelled_accepted
            out.append(f"harmful shift: the accepted cases' risk exceeds the target {self.target_risk:g} (lower "
                       f"confidence bound {self.risk.lower_bound[-1]:.3f}), alarm at audited case "
                       f"{lab[self.risk.alarm]['case_id']!r}")
        return out


def stream_seed(*parts: str) -> int:
    """The seed of a stream's p-value draws: a hash of the rule, the site and the statistic (status is reproducible).

    Example:
        >>> stream_seed("sha256:ab", "site A", "score") == stream_seed("sha256:ab", "site A", "score")
        True
    """
    return int.from_bytes(hashlib.sha256("\x00".join(parts).encode()).digest()[:8], "little")


def _group(rule_digest: str, site: str, cases: Sequence[Mapping[str, Any]], rule: Mapping[str, Any],
           alpha: float) -> GroupStatus:
    scores = np.array([c["score"] for c in cases], dtype=np.float64)
    defined = scores[~np.isnan(scores)]
    score = (score_martingale(defined, rule["calibration_scores"], alpha=alpha,
                              seed=stream_seed(rule_digest, site, "score")) if defined.size else None)
    z = np.array([c["image_z_max"] for c in cases], dtype=np.float64)
    z = z[~np.isnan(z)]
    image = score_martingale(z, (), alpha=alpha, seed=stream_seed(rule_digest, site, "image")) if z.size else None
    target = rule["target_risk"]
    losses = [c["loss"] for c in cases if c["decision"] == "accept" and c.get("loss") is not None]
    risk = risk_test(losses, target, alpha) if losses and target is not None else None
    return GroupStatus(rule_digest, site, tuple(cases), score, image, risk,
                       math.nan if target is None else float(target), alpha)


def monitor_status(cases: Sequence[Mapping[str, Any]], rules: Mapping[str, Mapping[str, Any]],
                   alpha: float = 0.05) -> list[GroupStatus]:
    """The statistics of every stream: per rule, each site and all sites pooled.

    Args:
        cases: the store's case rows in recording order (:meth:`~monai_unc.monitoring.store.MonitorStore.cases`).
        rules: the store's rules (:meth:`~monai_unc.monitoring.store.MonitorStore.rules`).
        alpha: the false-alarm probability of each alarm, in ``(0, 1)``.

    Returns:
        One :class:`GroupStatus` per rule and site (sites sorted), then the pooled stream of the rule when it has
        more than one site.

    Raises:
        ValueError: ``alpha`` outside ``(0, 1)``.
    """
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    out = []
    for digest, rule in rules.items():
        rows = [c for c in cases if c["rule_digest"] == digest]
        if not rows:
            continue
        sites = sorted({c["site"] for c in rows})
        for site in sites:
            out.append(_group(digest, site, [c for c in rows if c["site"] == site], rule, alpha))
        if len(sites) > 1:
            out.append(_group(digest, ALL_SITES, rows, rule, alpha))
    return out


def any_alarm(groups: Sequence[GroupStatus]) -> bool:
    """Whether some stream raised an alarm."""
    return any(g.alarms() for g in groups)


def printable(text: str) -> str:
    """Text for a terminal: control characters (an escape sequence in a site name) shown as ``?``.

    Example:
        >>> printable("site\x1b[31mA")
        'site?[31mA'
    """
    return "".join(ch if ch.isprintable() else "?" for ch in str(text))


def _fmt_m(m: MartingaleResult | None) -> str:
    if m is None:
        return "-"
    peak = float(np.exp(np.max(m.log_martingale))) if m.log_martingale.size else 1.0
    return f"{'ALARM ' if m.alarm is not None else ''}max {peak:.3g}"


def status_table(groups: Sequence[GroupStatus]) -> list[str]:
    """The lines of ``monai-unc monitor status``: one row per stream, then the alarms.

    Args:
        groups: :func:`monitor_status`'s streams.

    Returns:
        The table's lines (fixed-width columns) and one line per alarm.
    """
    head = ("rule", "site", "cases", "accepted", "recent", "score martingale", "image martingale", "audited",
            "risk (observed / lower bound / target)")
    rows = []
    for g in groups:
        lab = g.labelled_accepted
        if g.risk is not None:
            obs = float(np.mean([c["loss"] for c in lab]))
            risk = (f"{'ALARM ' if g.risk.alarm is not None else ''}{obs:.3f} / {g.risk.lower_bound[-1]:.3f} / "
                    f"{g.target_risk:g}")
        else:
            risk = "-"
        rows.append((g.rule_digest.removeprefix("sha256:")[:12], printable(g.site[:40]), str(g.n_cases),
                     f"{g.acceptance_rate:.0%}", f"{g.recent_acceptance_rate:.0%}", _fmt_m(g.score),
                     _fmt_m(g.image), str(len(lab)), risk))
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in [head, *rows]]
    alarms = [printable(f"ALARM [{g.site}] {a}") for g in groups for a in g.alarms()]
    lines += alarms or [f"no alarm (each alarm: false-alarm probability <= {groups[0].alpha:g} over the whole "
                        "stream)" if groups else "no cases recorded"]
    return lines
