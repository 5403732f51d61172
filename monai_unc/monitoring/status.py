"""The statistics of ``monai-unc monitor status`` and ``monitor report``: per rule, per site and pooled.

For each rule digest, each site and all sites pooled, :func:`monitor_status` computes from the store's rows (in
recording order):

- the **score alarm** (label-free): the rule's case score of every case with a defined score, as online conformal
  p-values against the rule's calibration scores and the earlier cases of the stream, and the Simple Jumper
  conformal test martingale (:func:`monai_unc.metrics.monitoring.score_martingale`);
- the **image alarm** (label-free): the same on ``image_z_max`` (the largest robust z-score of the image
  statistics against the rule's image reference), ranked against the rule's calibration images' own ``image_z_max``
  (each against the reference of the other calibration images:
  :meth:`~monai_unc.evaluation.triage.ImageReference.leave_one_out_z_max`) and the stream's earlier cases. A rule
  certified before it recorded its calibration images' statistics gives only the stream's earlier cases to rank
  against: the alarm then tests that the images stay exchangeable over time, not that they match the calibration
  images (:attr:`GroupStatus.image_note` says so);
- the **risk alarm** (audited labels): the betting e-process of the losses of the *accepted* cases that were
  audited, in the order their labels were recorded (:func:`labelled_in_order`), against the rule's target risk
  (:func:`monai_unc.metrics.monitoring.risk_test`). Referred cases are left out: the guarantee is about accepted
  cases, and the referred ones that are audited are not a sample of them;
- the acceptance and referral rates, overall and over the last :data:`RECENT` cases.

Each alarm has a false-alarm probability of at most ``alpha`` over the whole stream on its own; with several sites
and statistics the chance that *some* alarm is false grows with their number (docs/monitoring.md).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np

from ..evaluation.triage.rule import ImageReference
from ..metrics.monitoring import MartingaleResult, RiskTestResult, risk_test, score_martingale
from ..product import format_cell, format_share, format_target, separating_digits
from .store import ALL_SITES

__all__ = ["ALL_SITES", "RECENT", "IMAGE_REFERENCE_MIN", "GroupStatus", "monitor_status", "status_table", "any_alarm",
           "printable", "stream_seed", "image_reference_scores", "labelled_in_order", "exp_text",
           "martingale_peak_text", "alarm_level_text"]

#: the number of latest cases of the recent rates
RECENT = 50
#: calibration images below which the image alarm's false-alarm rate is only approximately ``alpha`` (the calibration
#: images' values come from references of ``N - 1`` images, a new case's from all ``N``): in simulation without a
#: change, 9.2 % of 500-case streams raised it at ``alpha = 0.05`` with 10 images, 8 % with 20, 3.7 % with 50
#: (docs/monitoring.md)
IMAGE_REFERENCE_MIN = 50


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
        image_against_calibration: whether the image martingale ranked the cases against the rule's calibration
            images (:func:`image_reference_scores`) as well as the stream's earlier cases; False when the rule
            records no statistics of its calibration images (the stream's earlier cases only).
        pooled: whether this is the pooled stream of all the rule's sites (its ``site`` is :data:`ALL_SITES`).
        image_reference_size: the calibration images the image martingale ranked against (0: none).
        score_reference_size: the rule's calibration scores the score martingale ranked against (0: none, the
            stream's earlier cases only; None: not said).

    Example:
        >>> import tempfile
        >>> from monai_unc.monitoring.store import CaseRecord, MonitorStore, rule_body_digest
        >>> rule = {"score": "s", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8,
        ...         "calibration": {"case_scores": [i / 100 for i in range(100)]}}
        >>> rule["digest"] = rule_body_digest(rule)
        >>> def case(i, site, score):  # a decision as triage records it
        ...     return CaseRecord(f"c{i}", site, None, "2026-02-28T00:00:00+00:00", score, float("nan"),
        ...                       float("nan"), "review", "above_threshold", "high", rule["digest"], None)
        >>> shifted = [case(i, "A", 2.0 + i / 100) for i in range(30)] + [case(30, "B", 0.5)]  # A: a new scanner
        >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
        ...     _ = store.record_run(rule, shifted, source_digest="feb", folder="triage_02",
        ...                          triaged_at="2026-02-28T00:00:00+00:00", model_digest=None)
        ...     groups = monitor_status(store.cases(), store.rules(), alpha=0.05)
        >>> [(g.site, g.n_cases, g.pooled) for g in groups]
        [('A', 30, False), ('B', 1, False), ('(all sites)', 31, True)]
        >>> site_a = groups[0]
        >>> site_a.score.alarm is not None, site_a.image is None, site_a.risk is None  # no images, no labels
        (True, True, True)
    """

    rule_digest: str
    site: str
    cases: tuple[Mapping[str, Any], ...]
    score: MartingaleResult | None
    image: MartingaleResult | None
    risk: RiskTestResult | None
    target_risk: float
    alpha: float
    image_against_calibration: bool = False
    pooled: bool = False
    image_reference_size: int = 0
    score_reference_size: int | None = None

    @property
    def image_note(self) -> str | None:
        """What the image alarm cannot see when it has no calibration images to rank against, or how approximate its
        false-alarm level is with fewer than :data:`IMAGE_REFERENCE_MIN` of them (else None)."""
        if self.image is None:
            return None
        if self.image_against_calibration:
            n = self.image_reference_size
            if n >= IMAGE_REFERENCE_MIN:
                return None
            return (f"the image martingale ranks each case against {n} calibration images, whose values come from "
                    f"references of {n - 1} images and a new case's from all {n}: with so few its false-alarm "
                    f"probability is only approximately alpha (in simulation without a change, 9 % of streams "
                    f"alarmed at alpha 0.05 with 10 images, 8 % with 20, under 5 % from {IMAGE_REFERENCE_MIN}); "
                    "certify the rule on more images (monai-unc evaluate --target-risk --images) for its level")
        return ("the image martingale ranks each case against the stream's earlier cases only: the rule records no "
                "statistics of its calibration images (certified before monai-unc recorded them), so it detects a "
                "change within the stream, not a stream whose images differ from the calibration images from its "
                "start; certify the rule again (monai-unc evaluate --target-risk --images) to test against them")

    @property
    def score_reference_note(self) -> str | None:
        """That the score martingale had no calibration scores to rank against (the rule records none), or None."""
        if self.score is None or self.score_reference_size != 0:
            return None
        return ("the score martingale ranks each case against the stream's earlier cases only: the rule records no "
                "defined calibration scores (a rule certified by an earlier monai-unc), so it detects a change within "
                "the stream, not a stream whose scores differ from the calibration cases' from its start; certify "
                "the rule again (monai-unc evaluate --target-risk) to test against them")

    @property
    def n_undefined_scores(self) -> int:
        """The number of cases without a defined score (NaN): the score martingale skips them."""
        return sum(1 for c in self.cases if math.isnan(c["score"]))

    @property
    def score_note(self) -> str | None:
        """What the score alarm did not see: the cases without a defined score (None when every score is defined)."""
        k = self.n_undefined_scores
        if not k:
            return None
        return (f"{k} of {self.n_cases} case(s) have no defined score: the score martingale skips them (the score "
                "alarm cannot see them; an undefined score usually means an empty or failed prediction)")

    @property
    def n_retriaged(self) -> int:
        """The case rows whose case id (at its site) an earlier row of the stream holds from another model.

        A triage run that repeats an earlier decision is recorded once (:meth:`MonitorStore.record
        <monai_unc.monitoring.store.MonitorStore.record>`); the same scans triaged again with another model (the
        digest of its weight files differs; ``triage --allow-mismatch`` after a model update) are rows of their own,
        which every alarm counts. A case id reused by a later batch with the same model is another scan, not counted
        here; rows without a model digest are not compared.
        """
        seen: dict[tuple[str, str], set[str]] = {}
        n = 0
        for c in self.cases:
            key, model = (str(c["site"]), str(c["case_id"])), c.get("model_digest")
            if model is None:
                continue
            earlier = seen.setdefault(key, set())
            n += bool(earlier) and model not in earlier
            earlier.add(model)
        return n

    @property
    def retriage_note(self) -> str | None:
        """That some scans count more than once in the stream, once per model (:attr:`n_retriaged`), or None."""
        k = self.n_retriaged
        if not k:
            return None
        return (f"{k} of {self.n_cases} case row(s) triage again a case id the stream recorded with another model "
                "(e.g. triage --allow-mismatch after a model update): each row counts in the alarms and rates, so "
                "those scans weigh once per model; certify a rule on the new model (monai-unc evaluate "
                "--target-risk) to monitor it in streams of its own")

    @property
    def n_relabelled(self) -> int:
        """The audited accepted cases of the risk test labelled again with another loss (``loss_changed``; a label
        that confirms the earlier one changes nothing the risk test saw)."""
        return sum(1 for c in self.labelled_accepted if c.get("loss_changed"))

    @property
    def relabel_note(self) -> str | None:
        """That the risk test's losses of cases labelled again changed in place (:attr:`n_relabelled`), or None.

        A case labelled again keeps the place its first label gave it in the risk test and takes its latest label:
        the losses an earlier ``status`` tested changed, so the checks are no longer one e-process, and an alarm an
        earlier check raised can be gone (found by the monitorstats review: one failure of eight relabelled a
        success silenced an alarm without a word, where the documentation promised that an alarm once raised stays
        raised).
        """
        k = self.n_relabelled
        if not k:
            return None
        return (f"{k} of the {len(self.labelled_accepted)} audited accepted case(s) were labelled again with another "
                "loss: the risk test takes each one's latest label at the place its first label arrived, so the losses "
                "that earlier checks tested changed and an alarm they raised may no longer show; check the "
                "corrections (monai-unc monitor report lists the audit log)")

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
    def n_accepted(self) -> int:
        """The number of accepted cases."""
        return sum(c["decision"] == "accept" for c in self.cases)

    @property
    def recent_accepted(self) -> tuple[int, int]:
        """``(accepted, cases)`` among the last :data:`RECENT` cases."""
        last = self.cases[-RECENT:]
        return sum(c["decision"] == "accept" for c in last), len(last)

    @property
    def labelled_accepted(self) -> list[Mapping[str, Any]]:
        """The accepted cases with an audited label, in the risk test's order (:func:`labelled_in_order`)."""
        return labelled_in_order(self.cases)

    def martingale_positions(self, kind: str) -> list[int]:
        """The positions in :attr:`cases` of the cases a martingale ran over: those with a defined value, in order.

        Index ``k`` of the martingale (its value, its ``alarm``, its ``change_point``) is the case
        ``cases[martingale_positions(kind)[k]]``.

        Args:
            kind: ``"score"`` (the case score's martingale) or ``"image"`` (the image statistics').

        Returns:
            The 0-based positions, ascending.

        Example:
            >>> g = GroupStatus("r", "A", ({"score": 0.1}, {"score": float("nan")}, {"score": 0.3}), None, None, None,
            ...                 0.1, 0.05)
            >>> g.martingale_positions("score")
            [0, 2]
        """
        field = {"score": "score", "image": "image_z_max"}.get(kind)
        if field is None:
            raise ValueError(f"kind must be 'score' or 'image', got {kind!r}")
        return [i for i, c in enumerate(self.cases) if not math.isnan(c[field])]

    def alarm_positions(self, kind: str) -> tuple[int, int] | None:
        """The positions in :attr:`cases` of a martingale's alarm and of its estimated change point, or None.

        The martingale runs over the cases with a defined value only (:meth:`martingale_positions`): its ``alarm``
        and ``change_point`` count those, not the stream's cases.

        Args:
            kind: ``"score"`` or ``"image"``.

        Returns:
            ``(alarm, change)``, 0-based positions in :attr:`cases`; None without an alarm.

        Example:
            >>> from monai_unc.metrics.monitoring import score_martingale
            >>> rows = tuple({"score": float("nan") if i < 3 else float(i > 30)} for i in range(60))
            >>> m = score_martingale([c["score"] for c in rows[3:]], [0.0] * 20)
            >>> g = GroupStatus("r", "A", rows, m, None, None, 0.1, 0.05)
            >>> (m.alarm, m.change_point), g.alarm_positions("score")
            ((46, 28), (49, 31))
        """
        positions = self.martingale_positions(kind)
        m = self.score if kind == "score" else self.image
        if m is None or m.alarm is None:
            return None
        return positions[m.alarm], positions[m.change_point or 0]

    def alarms(self) -> list[str]:
        """One line per alarm raised (empty when none).

        Returns:
            For the score and the image martingale, where it crossed ``1 / alpha`` and the estimated change point
            (case ids and times); for the risk test, the lower confidence bound and the audited case at the alarm.

        Example:
            >>> import tempfile
            >>> from monai_unc.monitoring.store import CaseRecord, MonitorStore, rule_body_digest
            >>> rule = {"score": "s", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8,
            ...         "calibration": {"case_scores": [i / 100 for i in range(100)]}}
            >>> rule["digest"] = rule_body_digest(rule)
            >>> def case(i, site, score):  # a decision as triage records it
            ...     return CaseRecord(f"c{i}", site, None, "2026-02-28T00:00:00+00:00", score, float("nan"),
            ...                       float("nan"), "review", "above_threshold", "high", rule["digest"], None)
            >>> shifted = [case(i, "A", 2.0 + i / 100) for i in range(30)] + [case(30, "B", 0.5)]  # A: a new scanner
            >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
            ...     _ = store.record_run(rule, shifted, source_digest="feb", folder="triage_02",
            ...                          triaged_at="2026-02-28T00:00:00+00:00", model_digest=None)
            ...     groups = monitor_status(store.cases(), store.rules(), alpha=0.05)
            >>> [line[:54] for line in groups[0].alarms()], groups[1].alarms()
            (["score distribution changed: martingale >= 20 at case '"], [])
        """
        out = []
        for name in ("score", "image"):
            found = self.alarm_positions(name)
            if found is not None:
                at, start = self.cases[found[0]], self.cases[found[1]]
                out.append(f"{name} distribution changed: martingale >= {alarm_level_text(self.alpha)} at case "
                           f"{at['case_id']!r} ({at['triaged_at']}), change estimated from case "
                           f"{start['case_id']!r} ({start['triaged_at']})")
        if self.risk is not None and self.risk.alarm is not None:
            lab = self.labelled_accepted
            bound = format_cell(float(self.risk.lower_bound[-1]), 3, self.target_risk)  # never reads as the target
            out.append(f"harmful shift: the accepted cases' risk exceeds the target {format_target(self.target_risk)} "
                       "(lower "
                       f"confidence bound {bound}), alarm at audited case "
                       f"{lab[self.risk.alarm]['case_id']!r}")
        return out


def labelled_in_order(cases: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The accepted cases with an audited label, in the order their labels were recorded (then in case order).

    Audits lag: a batch of labels often covers cases triaged before those of an earlier batch. In triage order a
    later batch would be inserted *before* losses already seen, so each ``status`` would test another sequence: an
    alarm raised yesterday could vanish today (a false all-clear), and the looks together would no longer be one
    e-process under Ville's inequality. In the order the labels arrived (``label_seq``: the audit entry of a case's
    first label) the sequence only grows, and every check continues the same e-process.

    Args:
        cases: the stream's case rows in recording order; ``label_seq`` (from
            :meth:`~monai_unc.monitoring.store.MonitorStore.cases`) may be absent: then triage order.

    Returns:
        The accepted cases with a ``loss``, ordered by ``label_seq`` (stable: triage order within a batch).

    Example:
        >>> rows = [{"case_id": "a", "decision": "accept", "loss": 0.0, "label_seq": 3},
        ...         {"case_id": "b", "decision": "accept", "loss": 1.0, "label_seq": 2},
        ...         {"case_id": "c", "decision": "review", "loss": 1.0, "label_seq": 1}]
        >>> [c["case_id"] for c in labelled_in_order(rows)]
        ['b', 'a']
    """
    lab = [c for c in cases if c["decision"] == "accept" and c.get("loss") is not None]
    return sorted(lab, key=lambda c: c.get("label_seq") or 0)


def stream_seed(*parts: str) -> int:
    """The seed of a stream's p-value draws: a hash of the rule, the site and the statistic (status is reproducible).

    Example:
        >>> stream_seed("sha256:ab", "site A", "score") == stream_seed("sha256:ab", "site A", "score")
        True
    """
    return int.from_bytes(hashlib.sha256("\x00".join(parts).encode()).digest()[:8], "little")


def image_reference_scores(rule: Mapping[str, Any], source: str = "rule") -> np.ndarray | None:
    """The calibration images' ``image_z_max`` that the image martingale ranks new cases against, or None.

    Each calibration image's largest robust z-score against the reference of the other calibration images
    (:meth:`~monai_unc.evaluation.triage.ImageReference.leave_one_out_z_max`), from the statistics the rule's image
    reference records. The rule came from a triage folder a user may edit: its ``image_reference`` is read with
    every check of :meth:`~monai_unc.evaluation.triage.ImageReference.from_json`.

    Args:
        rule: the rule's JSON (or the store's record of it) with its ``image_reference`` object, null or absent.
        source: how error messages name the rule.

    Returns:
        ``(N,)`` the calibration images' ``image_z_max``; None when the rule has no image reference, records no
        statistics of its calibration images (a rule certified before they were recorded) or fewer than two.

    Raises:
        ValueError: a malformed ``image_reference`` (the field named).

    Example:
        >>> from monai_unc.evaluation.triage import ImageReference
        >>> ref = ImageReference.fit(np.array([[10., 2, 0, 10, 20], [12, 2, 0, 12, 22], [11, 3, 0, 11, 21]]))
        >>> image_reference_scores({"image_reference": ref.to_json()}).round(2)
        array([2.02, 2.02, 2.38])
        >>> image_reference_scores({"image_reference": None}) is None
        True
    """
    d = rule.get("image_reference")
    if d is None:
        return None
    try:
        ref = ImageReference.from_json(d, "image_reference")
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None
    return ref.leave_one_out_z_max()


def _group(rule_digest: str, site: str, cases: Sequence[Mapping[str, Any]], rule: Mapping[str, Any],
           alpha: float, image_reference: np.ndarray | None, pooled: bool = False) -> GroupStatus:
    scores = np.array([c["score"] for c in cases], dtype=np.float64)
    defined = scores[~np.isnan(scores)]
    score = (score_martingale(defined, rule["calibration_scores"], alpha=alpha,
                              seed=stream_seed(rule_digest, site, "score")) if defined.size else None)
    z = np.array([c["image_z_max"] for c in cases], dtype=np.float64)
    z = z[~np.isnan(z)]
    against = () if image_reference is None else image_reference
    image = (score_martingale(z, against, alpha=alpha, seed=stream_seed(rule_digest, site, "image"))
             if z.size else None)
    target = rule["target_risk"]
    losses = [c["loss"] for c in labelled_in_order(cases)]
    risk = risk_test(losses, target, alpha) if losses and target is not None else None
    return GroupStatus(rule_digest, site, tuple(cases), score, image, risk,
                       math.nan if target is None else float(target), alpha, image_reference is not None, pooled,
                       0 if image_reference is None else len(image_reference), len(rule["calibration_scores"]))


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
        ValueError: ``alpha`` outside ``(0, 1)``, or a rule whose ``image_reference`` is malformed
            (:func:`image_reference_scores`).

    Example:
        >>> import tempfile
        >>> from monai_unc.monitoring.store import CaseRecord, MonitorStore, rule_body_digest
        >>> rule = {"score": "s", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8,
        ...         "calibration": {"case_scores": [i / 100 for i in range(100)]}}
        >>> rule["digest"] = rule_body_digest(rule)
        >>> def case(i, site, score):  # a decision as triage records it
        ...     return CaseRecord(f"c{i}", site, None, "2026-02-28T00:00:00+00:00", score, float("nan"),
        ...                       float("nan"), "review", "above_threshold", "high", rule["digest"], None)
        >>> shifted = [case(i, "A", 2.0 + i / 100) for i in range(30)] + [case(30, "B", 0.5)]  # A: a new scanner
        >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
        ...     _ = store.record_run(rule, shifted, source_digest="feb", folder="triage_02",
        ...                          triaged_at="2026-02-28T00:00:00+00:00", model_digest=None)
        ...     groups = monitor_status(store.cases(), store.rules(), alpha=0.05)
        >>> [(g.site, g.n_cases, bool(g.alarms())) for g in groups]
        [('A', 30, True), ('B', 1, False), ('(all sites)', 31, True)]
    """
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, Real) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    # the rows grouped by rule and site in one pass, each group in recording order (filtering them once per rule and
    # per site cost sites x cases: 2000 sites of a teleradiology service took 11 s for 10^5 cases, not 0.8 s)
    pooled: dict[str, list[Mapping[str, Any]]] = {}
    streams: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    for c in cases:
        digest = c["rule_digest"]
        pooled.setdefault(digest, []).append(c)
        streams.setdefault(digest, {}).setdefault(c["site"], []).append(c)
    out = []
    for digest, rule in rules.items():
        by_site = streams.get(digest)
        if not by_site:
            continue
        ref = image_reference_scores(rule, f"rule {digest}")
        for site in sorted(by_site):
            out.append(_group(digest, site, by_site[site], rule, alpha, ref))
        if len(by_site) > 1:
            out.append(_group(digest, ALL_SITES, pooled[digest], rule, alpha, ref, pooled=True))
    return out


def any_alarm(groups: Sequence[GroupStatus]) -> bool:
    """Whether some stream raised an alarm (``monai-unc monitor status`` then exits with status 1).

    Args:
        groups: :func:`monitor_status`'s streams.

    Returns:
        True when some stream's :meth:`GroupStatus.alarms` is not empty.

    Example:
        >>> import tempfile
        >>> from monai_unc.monitoring.store import CaseRecord, MonitorStore, rule_body_digest
        >>> rule = {"score": "s", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8,
        ...         "calibration": {"case_scores": [i / 100 for i in range(100)]}}
        >>> rule["digest"] = rule_body_digest(rule)
        >>> def case(i, site, score):  # a decision as triage records it
        ...     return CaseRecord(f"c{i}", site, None, "2026-02-28T00:00:00+00:00", score, float("nan"),
        ...                       float("nan"), "review", "above_threshold", "high", rule["digest"], None)
        >>> shifted = [case(i, "A", 2.0 + i / 100) for i in range(30)] + [case(30, "B", 0.5)]  # A: a new scanner
        >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
        ...     _ = store.record_run(rule, shifted, source_digest="feb", folder="triage_02",
        ...                          triaged_at="2026-02-28T00:00:00+00:00", model_digest=None)
        ...     groups = monitor_status(store.cases(), store.rules(), alpha=0.05)
        >>> any_alarm(groups), any_alarm([g for g in groups if g.site == "B"]), any_alarm([])
        (True, False, False)
    """
    return any(g.alarms() for g in groups)


def printable(text: str) -> str:
    """Text for a terminal: control characters (an escape sequence in a site name) shown as ``?``.

    Example:
        >>> printable("site\x1b[31mA")
        'site?[31mA'
    """
    return "".join(ch if ch.isprintable() else "?" for ch in str(text))


def exp_text(log_value: float, digits: int = 3) -> str:
    """``exp(log_value)`` as text with ``digits`` significant digits, also beyond the range of a float.

    A test martingale of a strongly shifted stream grows past ``exp(709)``, where ``exp`` overflows to ``inf`` (or
    raises); its value is written from its logarithm instead.

    Args:
        log_value: the natural logarithm of the value.
        digits: significant digits.

    Returns:
        The text, e.g. ``"2.5"`` or ``"1.97e+347"``.

    Example:
        >>> exp_text(math.log(2.5)), exp_text(800.0), exp_text(float("-inf"))
        ('2.5', '1.97e+347', '0')
    """
    v = float(log_value)
    if math.isnan(v):
        return "nan"
    if v < 700.0:
        return f"{math.exp(v):.{digits}g}"
    if math.isinf(v):
        return "inf"
    e10 = v / math.log(10.0)
    k = math.floor(e10)
    mantissa = f"{10.0 ** (e10 - k):.{digits}g}"
    if mantissa.startswith("10"):  # rounded up to the next power of ten
        mantissa, k = "1", k + 1
    return f"{mantissa}e+{k}"


def alarm_level_text(alpha: float) -> str:
    """The alarm threshold ``1 / alpha`` of a test martingale as text, also where it overflows a float.

    ``1 / alpha`` is ``inf`` below ``alpha = 5.6e-309``, a level the alarm itself reaches (it compares logarithms);
    found by hostile review: ``alpha = 1e-310`` read "martingale >= inf". Such a level is written from ``log(alpha)``
    (:func:`exp_text`), every other one as before (``%g``).

    Args:
        alpha: the false-alarm probability, in ``(0, 1)``.

    Returns:
        The text, e.g. ``"20"`` or ``"1e+310"``.

    Example:
        >>> alarm_level_text(0.05), alarm_level_text(0.03), alarm_level_text(1e-300), alarm_level_text(1e-310)
        ('20', '33.3333', '1e+300', '1e+310')
    """
    a = float(alpha)
    level = 1.0 / a
    return f"{level:g}" if math.isfinite(level) else exp_text(-math.log(a), 6)


def martingale_peak_text(m: MartingaleResult | None) -> str:
    """The largest value of a test martingale as text (:func:`exp_text`), ``-`` without one.

    Args:
        m: the martingale (its ``log_martingale``), or None.

    A peak below the alarm threshold ``1 / alpha`` never reads as reaching it: found by hostile testing, a peak of
    19.97 without an alarm (``alpha = 0.05``) was written ``20``, the threshold, beside "alarm: 1/alpha = 20" and the
    status "ok"; it keeps the digits that hold it below (:func:`~monai_unc.product.separating_digits`).

    Returns:
        The text (``1`` for a martingale with no value yet).

    Example:
        >>> m = MartingaleResult(np.full(2, 0.5), np.log([1.0, 19.97]), 0.05, None, None)
        >>> martingale_peak_text(m), martingale_peak_text(MartingaleResult(m.pvalues, np.log([1.0, 9.87]), 0.05,
        ...                                                                 None, None))
        ('19.97', '9.87')
    """
    if m is None:
        return "-"
    if not m.log_martingale.size:
        return "1"
    peak = float(np.max(m.log_martingale))
    text, limit = exp_text(peak), 1.0 / float(m.alpha)
    if m.alarm is None and peak < 700.0 and float(text) >= limit:  # no alarm: never written at or above 1 / alpha
        value = math.exp(peak)
        text = f"{value:.{separating_digits(value, limit, 3)}g}"
    return text


def _fmt_m(m: MartingaleResult | None) -> str:
    if m is None:
        return "-"
    return f"{'ALARM ' if m.alarm is not None else ''}max {martingale_peak_text(m)}"


def status_table(groups: Sequence[GroupStatus]) -> list[str]:
    """The lines of ``monai-unc monitor status``: one row per stream, then the alarms.

    Args:
        groups: :func:`monitor_status`'s streams.

    Returns:
        The table's lines (fixed-width columns), one note per rule whose score alarm has no calibration scores to
        rank against (:attr:`GroupStatus.score_reference_note`), one per rule whose image alarm has no calibration
        images to rank against or fewer than :data:`IMAGE_REFERENCE_MIN` (:attr:`GroupStatus.image_note`), one
        warning per stream with cases without a defined score (:attr:`GroupStatus.score_note`), one note per site
        stream with case ids triaged again with another model (:attr:`GroupStatus.retriage_note`), one warning per
        site stream whose risk test has cases labelled again with another loss (:attr:`GroupStatus.relabel_note`),
        and one line per alarm.

    Example:
        >>> import tempfile
        >>> from monai_unc.monitoring.store import CaseRecord, MonitorStore, rule_body_digest
        >>> rule = {"score": "s", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8,
        ...         "calibration": {"case_scores": [i / 100 for i in range(100)]}}
        >>> rule["digest"] = rule_body_digest(rule)
        >>> def case(i, site, score):  # a decision as triage records it
        ...     return CaseRecord(f"c{i}", site, None, "2026-02-28T00:00:00+00:00", score, float("nan"),
        ...                       float("nan"), "review", "above_threshold", "high", rule["digest"], None)
        >>> shifted = [case(i, "A", 2.0 + i / 100) for i in range(30)] + [case(30, "B", 0.5)]  # A: a new scanner
        >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
        ...     _ = store.record_run(rule, shifted, source_digest="feb", folder="triage_02",
        ...                          triaged_at="2026-02-28T00:00:00+00:00", model_digest=None)
        ...     groups = monitor_status(store.cases(), store.rules(), alpha=0.05)
        >>> lines = status_table(groups)
        >>> lines[0].split()[:5], lines[-1][:48]
        (['rule', 'site', 'cases', 'accepted', 'recent'], 'ALARM [(all sites)] score distribution changed: ')
    """
    head = ("rule", "site", "cases", "accepted", "recent", "score martingale", "image martingale", "audited",
            "risk (observed / lower bound / target)")
    rows = []
    for g in groups:
        lab = g.labelled_accepted
        if g.risk is not None:
            obs = float(np.mean([c["loss"] for c in lab]))
            lb = format_cell(float(g.risk.lower_bound[-1]), 3, g.target_risk)
            risk = (f"{'ALARM ' if g.risk.alarm is not None else ''}{format_cell(obs, 3, g.target_risk)} / {lb} / "
                    f"{format_target(g.target_risk)}")
        else:
            risk = "-"
        rows.append((printable(g.rule_digest.removeprefix("sha256:")[:12]), printable(g.site[:40]), str(g.n_cases),
                     format_share(g.n_accepted, g.n_cases), format_share(*g.recent_accepted), _fmt_m(g.score),
                     _fmt_m(g.image), str(len(lab)), risk))
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in [head, *rows]]
    notes = [(g.rule_digest, n) for g in groups for n in (g.score_reference_note, g.image_note) if n is not None]
    lines += [printable(f"note: rule {d.removeprefix('sha256:')[:12]}: {n}") for d, n in dict.fromkeys(notes)]
    lines += [printable(f"warning: rule {g.rule_digest.removeprefix('sha256:')[:12]} [{g.site}]: {g.score_note}")
              for g in groups if g.score_note is not None]
    lines += [printable(f"note: rule {g.rule_digest.removeprefix('sha256:')[:12]} [{g.site}]: {g.retriage_note}")
              for g in groups if g.retriage_note is not None and not g.pooled]
    lines += [printable(f"warning: rule {g.rule_digest.removeprefix('sha256:')[:12]} [{g.site}]: {g.relabel_note}")
              for g in groups if g.relabel_note is not None and not g.pooled]
    alarms = [printable(f"ALARM [{g.site}] {a}") for g in groups for a in g.alarms()]
    lines += alarms or [f"no alarm (each alarm: false-alarm probability <= {groups[0].alpha:g} over the whole "
                        "stream)" if groups else "no cases recorded"]
    return lines
