"""The cohort-product protocol: a capability of ``monai-unc evaluate`` as one unit of code.

A *cohort product* is everything one capability adds to an evaluation (calibration, failure detection, risk-controlled
masks, lesion-wise evaluation, a site's own measure, ...), supplied by one class:

==========================  ==========================================================================================
per case                    :meth:`CohortProduct.case_state`: a :class:`~monai_unc.state.MergeableState` of the case
                            (from its loaded files and its tasks: one class task, or one binary task per region),
                            and :meth:`CohortProduct.case_columns`: optional columns of ``metrics.csv``
fit                         :meth:`CohortProduct.fit`: the cohort's states (in case-id order) to an artifact, JSON
                            data written to ``<output>/<artifact_file>`` with a sha256 digest
                            (:func:`monai_unc.evaluation.products.write_artifact`, read back with
                            :func:`~monai_unc.evaluation.products.read_artifact`)
summary                     :meth:`CohortProduct.summarize`: a typed summary (a dataclass or a mapping), written to
                            ``summary.json`` under the product's :attr:`~CohortProduct.name`
apply                       :meth:`CohortProduct.apply`: the artifact applied to a new case; with
                            :attr:`~CohortProduct.command`, a command of its own that applies the artifact to a folder
                            of new predictions (:meth:`CohortProduct.apply_cases`), which ``monai-unc triage`` runs too
                            (``--<command>-rule``) and whose per-case table ``dicom-export`` puts into the SR
command line                :meth:`CohortProduct.add_arguments` / :meth:`CohortProduct.from_arguments` (its options of
                            ``monai-unc evaluate``) and :meth:`CohortProduct.summary_lines` (what the command prints)
report                      :meth:`CohortProduct.report_section`: a :class:`ReportSection` (title, text, cards, a
                            table) that ``report.html`` renders, every string escaped;
                            :meth:`CohortProduct.case_overlays`: contours of the product's case files in the figures
==========================  ==========================================================================================

The engine does the rest for every product alike: the per-case state is saved with the case's resume state and
gathered from every rank of a ``torchrun`` job through the one state protocol (:func:`monai_unc.state.pack_states`),
added in case-id order, and the product's options enter the per-case fingerprint, so a resumed folder never mixes
settings. A product class is registered with :func:`register_product`; the command line offers the options of every
registered product, and ``monai-unc report`` finds the product of a ``summary.json`` block by its name.

This module is light on purpose (no torch, no MONAI): the command line builds its parser from the registered
products before it imports what the chosen command runs on.
"""

from __future__ import annotations

import argparse
import importlib
import math
import numbers
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, ROUND_CEILING, ROUND_FLOOR, Context, Decimal, localcontext
from pathlib import Path
from typing import Any, ClassVar

__all__ = [
    "CohortProduct",
    "Overlay",
    "ReportSection",
    "ReportTable",
    "SCORE_DIGITS",
    "ThresholdText",
    "format_cell",
    "format_fraction",
    "format_level",
    "format_target",
    "format_interval",
    "format_estimate",
    "format_score",
    "format_share",
    "separating_digits",
    "register_product",
    "unregister_product",
    "registered_products",
    "product_type",
    "command_products",
    "command_product",
    "products_from_arguments",
    "RESERVED_NAMES",
    "RESERVED_FILES",
    "RESERVED_COMMANDS",
]

_REGISTRY: dict[str, type[CohortProduct]] = {}
#: the package's own products (:mod:`monai_unc.products`): imported, so registered, on the first lookup of the registry
#: (a plug-in discovery: this light module does not import them at its top)
_BUILTIN_MODULES = ("monai_unc.products",)
_builtins: list[bool] = []


#: the arithmetic of the writings of numbers below: exact (no rounding to Decimal's default 28 digits). In earlier
#: versions, in the default context ``1 - 1e-30`` rounded to 1, so :func:`format_level` wrote a level of
#: ``1 - 1e-30`` as "1", and :func:`format_interval` raised ``decimal.InvalidOperation`` for an end of 1e26 or 40
#: decimals. Only exact operations run in it (subtraction, scaling, quantizing a finite float's decimal).
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)


def _load_builtins() -> None:
    """Import the package's own product modules once (they register their classes)."""
    if not _builtins:
        _builtins.append(True)
        for module in _BUILTIN_MODULES:
            importlib.import_module(module)


def format_cell(value: Any, digits: int = 3, threshold: float | None = None, missing: str = "–") -> str:
    """The text of a report cell: ``digits`` decimals for a finite float, an en dash for a missing or non-finite one.

    The one formatting of numbers on the pages (``monai_unc.report.html.format_value``) and of the cohort numbers in
    the commands' lines; a product may format its cells with it before it puts them in a :class:`ReportTable`. Fixed
    decimals never change what a number says:

    - a finite non-zero value whose decimals would read zero (``0.0000`` for an E-AURC of ``2.4e-05``, ``-0.000``
      for ``-0.0001``) is written with ``digits`` significant digits instead (``2.401e-05``), and a zero as ``0``
      with its decimals, never ``-0.000``;
    - with a ``threshold`` the value is judged against (a Dice against the failure Dice, a bound against the target
      risk), a value whose decimals would read equal to the threshold or on its other side (Dice ``0.79988`` as
      ``0.800`` next to "Dice below 0.8 is marked as failed") is written with the significant digits that keep it
      on its own side (:func:`separating_digits`: ``0.7999``).

    Every other value keeps its ``digits`` decimals.

    Args:
        value: the value (None and ``""`` are missing).
        digits: decimals of a float (and the fewest significant digits where decimals would mislead).
        threshold: the number the value is compared with where it is shown, or None.
        missing: the text of a missing or non-finite value (``"n/a"`` in the commands' lines).

    Returns:
        The text (other values as ``str(value)``).

    Example:
        >>> format_cell(0.12345), format_cell(float("nan")), format_cell(None), format_cell(3), format_cell(0.5, 6)
        ('0.123', '–', '–', '3', '0.500000')
        >>> format_cell(2.400875e-05, 4), format_cell(-0.0001), format_cell(0.79988, threshold=0.8)
        ('2.401e-05', '-0.0001', '0.7999')
        >>> format_cell(0.8, threshold=0.8), format_cell(0.80012, threshold=0.8), format_cell(0.75, threshold=0.8)
        ('0.800', '0.8001', '0.750')
        >>> format_cell(0.00039996, threshold=0.0004), format_cell(0.0001236, threshold=0.00012399)
        ('0.00039996', '0.0001236')
    """
    if value is None or (isinstance(value, str) and value == ""):
        return missing
    if not isinstance(value, numbers.Real) or isinstance(value, numbers.Integral):
        return str(value)
    v = float(value)
    if not math.isfinite(v):
        return missing
    if v == 0.0:
        return f"{0.0:.{digits}f}"
    text = f"{v:.{digits}f}"
    if float(text) == 0.0:  # a non-zero value the decimals would write as zero
        text = f"{v:.{max(digits, 1)}g}"
    shown = float(text)
    if threshold is not None and math.isfinite(float(threshold)):  # judged after the zero rule (found by hostile
        t = float(threshold)  # testing: 0.00039996 next to 0.0004 was written 0.0004)
        if (shown > t) - (shown < t) != (v > t) - (v < t):  # the text reads it equal to t or beyond it
            if v == t:  # the threshold itself: the fewest significant digits that write it exactly
                return next(f"{v:.{d}g}" for d in range(max(digits, 1), 18) if float(f"{v:.{d}g}") == v)
            return f"{v:.{separating_digits(v, t, max(digits, 1))}g}"
    return text


#: significant digits of a case score on the pages and in the command's lines (:func:`format_score`)
SCORE_DIGITS = 4


def format_score(value: Any, digits: int = SCORE_DIGITS) -> str:
    """The text of a case score: ``digits`` significant digits, an en dash for a missing or non-finite one.

    The one formatting of triage scores (the report's and the triage page's tables, the case figures, the reasons of
    ``monai-unc triage``): significant digits, so that small scores (``3.3e-06``) stay distinct where fixed decimals
    would show them all as ``0.0000``. Next to a threshold, :class:`ThresholdText` adds the digits that keep a score
    on the other side of it from printing equal to it.

    Args:
        value: the score (None and ``""`` are missing).
        digits: significant digits.

    Returns:
        The text (a value that is not a number as ``str(value)``).

    Example:
        >>> format_score(3.263803819208988e-06), format_score(0.47227907), format_score(None), format_score(2)
        ('3.264e-06', '0.4723', '–', '2')
    """
    if value is None or (isinstance(value, str) and value == ""):
        return "–"
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        v = float(value)
        return f"{v:.{digits}g}" if math.isfinite(v) else "–"
    return str(value)


def separating_digits(value: float, reference: float, digits: int = SCORE_DIGITS) -> int:
    """The fewest significant digits, at least ``digits``, at which ``value`` and ``reference`` print differently.

    Two different floats always differ at 17 significant digits; equal or non-finite values get ``digits``.

    Args:
        value: a number.
        reference: the number it must not print equal to (a threshold).
        digits: the fewest digits.

    Returns:
        The number of significant digits.

    Example:
        >>> separating_digits(0.0010210456093773246, 0.0010210456093773244), separating_digits(0.2, 0.25)
        (16, 4)
    """
    value, reference = float(value), float(reference)
    if value == reference or not (math.isfinite(value) and math.isfinite(reference)):
        return digits
    for d in range(digits, 17):
        if f"{value:.{d}g}" != f"{reference:.{d}g}":
            return d
    return max(digits, 17)


def _bound_text(bound: float, digits: int) -> str:
    """``bound`` with ``digits`` significant digits, rounded toward referral: the number read never exceeds ``bound``.

    The nearest ``digits``-digit text when its value is at most ``bound`` (``1e-07`` for the double just below 1e-7),
    else the text one unit in the last digit below it (the exact decimal value rounded toward minus infinity). Beyond
    16 digits the shortest text that reads back as ``bound`` itself.
    """
    if digits >= 17 or not math.isfinite(bound):
        return format_score(bound, 17) if float(format_score(bound, 17)) <= bound else repr(bound)
    text = format_score(bound, digits)
    if float(text) <= bound:
        return text
    exact = Decimal(bound)
    floor = exact.quantize(Decimal(1).scaleb(exact.adjusted() - digits + 1), rounding=ROUND_FLOOR)
    text = f"{float(floor):.{digits}g}"
    return text if float(text) <= bound else repr(bound)


@dataclass(frozen=True)
class ThresholdText:
    """How a threshold on a score is written so that the rule as printed is the rule, for the scores shown with it.

    A rule "accept ``score <= threshold``" is the same rule as "accept ``score < cut``" with ``cut`` the next float
    above the threshold: a risk-controlled threshold is the float just below the lowest calibration score it refuses
    (:func:`~monai_unc.metrics.risk_control.risk_controlled_threshold`), so that calibration case prints equal to the
    threshold at any precision but 17 digits, and exactly equal to the cut. The bound is printed rounded toward
    referral (:attr:`printed`, never above the bound), so that the printed statement read as a rule on any score never
    accepts a score the rule refers (it may refer a few the rule accepts, in the last printed digit); :meth:`choose`
    takes the digits at which the printed statement decides every score shown with it as the rule does, and whichever
    of the two statements needs fewer of them. Each score is then written with the digits that separate it from the
    printed bound (:meth:`score`); rounding keeps order, so every score reads on its own side of the printed bound.

    Attributes:
        strict: True: the statement is ``score < bound``; False: ``score <= bound``.
        bound: the number of the rule (the threshold, or the cut).
        digits: the significant digits of the printed bound.
        base: the fewest significant digits of a score.

    Example:
        >>> t = ThresholdText.choose(0.0010210456093773244, [0.0010210456093773246, 0.00044505915])
        >>> t.strict, t.bound_text(), t.score(0.0010210456093773246), t.score(0.00044505915)
        (True, '0.001021', '0.001021', '0.0004451')
        >>> t.accepts(0.00044505915), t.accepts(0.0010210456093773246), t.relation(True), t.relation(False)
        (True, False, '<', '>=')
        >>> ThresholdText.choose(0.21696).bound_text()  # rounded down: "<= 0.217" would accept 0.21697
        '0.2169'
    """

    strict: bool
    bound: float
    digits: int
    base: int = SCORE_DIGITS

    @classmethod
    def choose(cls, threshold: float, scores: Sequence[float] = (), digits: int = SCORE_DIGITS) -> ThresholdText:
        """The statement of ``score <= threshold`` that needs the fewest digits for ``scores``.

        Args:
            threshold: the finite threshold of the rule "accept ``score <= threshold``".
            scores: the scores written with it (non-finite ones are ignored).
            digits: the fewest significant digits.

        Returns:
            The :class:`ThresholdText` (the non-strict one when both need as few digits for the bound and the scores).
        """
        threshold = float(threshold)
        finite = [float(s) for s in scores if s is not None and math.isfinite(float(s))]
        accepted = [s <= threshold for s in finite]
        options = []
        for strict, bound in ((False, threshold), (True, math.nextafter(threshold, math.inf))):
            d = digits
            while d < 17:
                printed = float(_bound_text(bound, d))
                if all((s < printed if strict else s <= printed) == a for s, a in zip(finite, accepted)):
                    break
                d += 1
            options.append(cls(strict, bound, d, digits))
        # fewest digits of the bound, then of the longest score (a score equal to the printed bound is written as it)
        return min(options, key=lambda t: (t.digits, max((len(t.score(s)) for s in finite), default=0)))

    @property
    def printed(self) -> float:
        """The value of the printed bound (:meth:`bound_text`): at most :attr:`bound`."""
        return float(self.bound_text())

    def bound_text(self) -> str:
        """The bound with :attr:`digits` significant digits, rounded toward referral (never above the bound)."""
        return _bound_text(self.bound, self.digits)

    def score(self, value: Any) -> str:
        """A score, with the digits that keep it from printing equal to the printed bound when it differs from it.

        Args:
            value: the score (None or non-finite: an en dash).

        Returns:
            The text: a score equal to the bound or to the printed bound is written exactly as the bound is.
        """
        if value is None or isinstance(value, bool) or not isinstance(value, numbers.Real):
            return format_score(value, self.base)
        v, printed = float(value), self.printed
        if v in (printed, self.bound):  # the bound itself (a strict statement's lowest refused score) reads as printed
            return self.bound_text()
        return format_score(v, separating_digits(v, printed, self.base))

    def accepts(self, value: float) -> bool:
        """Whether the rule accepts ``value`` (the statement holds for it)."""
        return value < self.bound if self.strict else value <= self.bound

    def relation(self, accepted: bool, ascii_only: bool = True) -> str:
        """The comparison a score has to the bound: ``<=`` / ``>`` (``<`` / ``>=`` for a strict statement).

        Args:
            accepted: the relation of an accepted score (else of a refused one).
            ascii_only: ``<=`` and ``>=`` (False: ``≤`` and ``≥``).

        Returns:
            The operator's text.
        """
        op = ("<" if accepted else ">=") if self.strict else ("<=" if accepted else ">")
        return op if ascii_only else op.replace("<=", "≤").replace(">=", "≥")


def format_share(count: int, total: int, digits: int = 3) -> str:
    """A share of cases as a percentage with its counts, never rounded to 0 % or 100 % unless it is one.

    Args:
        count: the cases counted.
        total: all cases.
        digits: the fewest significant digits of the percentage.

    Returns:
        ``"<percent>% (<count> of <total>)"``; ``"– (0 of 0)"`` without cases.

    Example:
        >>> format_share(299, 300), format_share(1, 250), format_share(1, 8), format_share(3, 3)
        ('99.7% (299 of 300)', '0.4% (1 of 250)', '12.5% (1 of 8)', '100% (3 of 3)')
    """
    if total <= 0:
        return f"– ({count} of {total})"
    return f"{format_fraction(count / total, digits)} ({count} of {total})"


def format_interval(low: Any, high: Any, decimals: int = 2) -> str:
    """An interval ``[low, high]`` in fixed decimals, its ends rounded outward so the text never drops a covered value.

    A confidence or prediction interval covers its truth with the stated probability; rounding its ends to the nearest
    decimal can move them inward (``[0.7851, 0.9149]`` read ``[0.79, 0.91]``), and the interval as printed then misses
    truths the computed one covers (the 90 % expected-Dice interval of ``monai-unc triage`` read as covering 88.5 % in
    simulation). The lower end is rounded down and the upper end up, from the shortest decimal of each float, so the
    printed interval contains the computed one.

    Args:
        low: the lower end (a number; None or NaN: undefined).
        high: the upper end.
        decimals: the decimals shown, ``>= 0``.

    Returns:
        ``"[low, high]"``; ``"[–, –]"`` for an undefined interval.

    Example:
        >>> format_interval(0.7851, 0.9149), format_interval(0.78, 1.0), format_interval(0.29, 0.3)
        ('[0.78, 0.92]', '[0.78, 1.00]', '[0.29, 0.30]')
    """
    if isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0:
        raise ValueError(f"decimals must be a non-negative integer, got {decimals!r}")
    step = Decimal(1).scaleb(-decimals)

    def end(value: Any, rounding: str) -> str:
        if value is None or isinstance(value, bool) or not isinstance(value, numbers.Real) \
                or not math.isfinite(float(value)):
            return "–"
        # from the float's shortest decimal (repr), so 0.29 stays 0.29 rather than flooring 0.28999999999999998
        with localcontext(_EXACT):
            q = Decimal(repr(float(value))).quantize(step, rounding=rounding)
            return f"{abs(q) if q == 0 else q:f}"  # no "-0.00"

    return f"[{end(low, ROUND_FLOOR)}, {end(high, ROUND_CEILING)}]"


def format_estimate(value: Any, low: Any = None, high: Any = None, decimals: int = 2,
                    threshold: float | None = None) -> str:
    """An estimate and, when both ends are known, its interval: ``"0.93 [0.78, 1.00]"``, in the same decimals.

    The estimate is rounded to the nearest (:func:`format_cell`), the interval's ends outward
    (:func:`format_interval`), so the printed estimate of a value inside its interval is inside the printed interval,
    and the two are shown with one precision (a third decimal on the estimate alone would claim a precision the
    interval denies), except a non-zero estimate whose decimals would read zero, which :func:`format_cell` writes
    with significant digits (``0.0049 [0.00, 0.02]``, never ``0.00`` for a Dice above 0). The triage table of the
    CLI and the triage page show a case's expected Dice with it.

    Args:
        value: the estimate (None or NaN: an en dash).
        low: the interval's lower end (None: no interval shown).
        high: its upper end (None: no interval shown).
        decimals: the decimals of the estimate and of the interval, ``>= 0``.
        threshold: the number the estimate is judged against where it is shown (the failure Dice of a rule whose
            risk is "dice < 0.8"), or None: an estimate whose decimals would read equal to it or on its other side
            gets the significant digits that keep it on its own side (:func:`format_cell`: ``0.795``, never ``0.80``
            under "dice < 0.8", as earlier versions wrote it).

    Returns:
        The text.

    Example:
        >>> format_estimate(0.9312, 0.7851, 0.9999), format_estimate(0.9312), format_estimate(None)
        ('0.93 [0.78, 1.00]', '0.93', '–')
        >>> format_estimate(0.795, 0.70, 0.85, threshold=0.8), format_estimate(0.8049, threshold=0.8)
        ('0.795 [0.70, 0.85]', '0.805')
    """
    if isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0:
        raise ValueError(f"decimals must be a non-negative integer, got {decimals!r}")
    text = format_cell(value, decimals, threshold)
    if low is None or high is None:
        return text
    return f"{text} {format_interval(low, high, decimals)}"


def format_fraction(value: float, digits: int = 3) -> str:
    """A fraction in [0, 1] as a percentage with significant digits, never 0 % or 100 % unless it is exactly that.

    Args:
        value: the fraction (a budget, a rate).
        digits: the fewest significant digits.

    Returns:
        The text, e.g. ``"12.5%"``.

    Example:
        >>> format_fraction(0.004), format_fraction(0.125), format_fraction(0.2), format_fraction(0.99999)
        ('0.4%', '12.5%', '20%', '99.999%')
    """
    v = float(value)
    if not math.isfinite(v):
        return "–"
    pct = 100.0 * v
    for d in range(digits, 18):
        text = f"{pct:.{d}g}"
        if (float(text) != 100.0 or v == 1.0) and (float(text) != 0.0 or v == 0.0):
            return f"{text}%"
    return f"{pct!r}%"


def format_level(alpha: float, percent: bool = False, digits: int = 6) -> str:
    """The level ``1 - alpha`` of a guarantee, never written above it: ``"0.9"``, ``"97.5%"``.

    A guarantee holds with probability (or covers) at least ``1 - alpha``; the number printed must not claim more.
    Rounded to the nearest, a 97.5 % interval read "98 %" (``f"{0.975:.0%}"``) and ``delta = 1e-7`` "with
    probability 1" (``f"{1 - 1e-7:g}"``). The level is computed exactly from the shortest decimal of ``alpha``
    (``1 - 0.1`` is ``0.9``), written with the fewest significant digits, at most ``digits``, that write it exactly,
    and rounded down at ``digits`` when none do. The one writing of the level of a guarantee (the risk-controlled
    rule's ``1 - delta``, the expected-Dice interval's ``1 - alpha``, a high-probability mask rule's).

    Args:
        alpha: the miscoverage or failure probability, in (0, 1).
        percent: write a percentage (``"90%"``) instead of a fraction (``"0.9"``).
        digits: the most significant digits, ``>= 1``.

    Returns:
        The text.

    Raises:
        ValueError: ``alpha`` is not a number in (0, 1), or ``digits`` is not a positive integer.

    Example:
        >>> format_level(0.1), format_level(0.1, percent=True), format_level(0.025, percent=True)
        ('0.9', '90%', '97.5%')
        >>> format_level(1e-7), format_level(1 / 3, percent=True)
        ('0.999999', '66.6666%')
    """
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError(f"digits must be a positive integer, got {digits!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0.0 < float(alpha) < 1.0:
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    with localcontext(_EXACT):
        exact = (Decimal(1) - Decimal(repr(float(alpha)))) * (100 if percent else 1)
        for d in range(1, digits + 1):
            shown = exact.quantize(Decimal(1).scaleb(exact.adjusted() - d + 1), rounding=ROUND_FLOOR)
            if shown == exact:
                break
        return f"{shown.normalize():f}" + ("%" if percent else "")


def format_target(target: float, digits: int = 6) -> str:
    """The target of a guarantee (a mean risk it bounds), never written below it: ``"0.2"``, ``"0.333334"``.

    A guarantee says the risk is at most its target; the number printed must not claim a smaller one. Found by hostile
    testing: ``f"{target:g}"`` wrote a target of ``1/3`` as ``0.333333`` and ``0.1234564`` as ``0.123456``, below the
    target certified ("risk <= 0.123456"). The target is written with the fewest significant digits, at most
    ``digits``, that write it exactly, and rounded up at ``digits`` when none do (the one writing of a target risk on
    the pages and in the commands' lines; :func:`format_level` is its counterpart for ``1 - delta``).

    Args:
        target: the target, a finite number.
        digits: the most significant digits, ``>= 1``.

    Returns:
        The text.

    Raises:
        ValueError: ``target`` is not a finite number, or ``digits`` is not a positive integer.

    Example:
        >>> format_target(0.2), format_target(1 / 3), format_target(0.1234564), format_target(0.05)
        ('0.2', '0.333334', '0.123457', '0.05')
    """
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError(f"digits must be a positive integer, got {digits!r}")
    if isinstance(target, bool) or not isinstance(target, numbers.Real) or not math.isfinite(float(target)):
        raise ValueError(f"target must be a finite number, got {target!r}")
    v = float(target)
    for d in range(1, digits + 1):
        text = f"{v:.{d}g}"
        if float(text) == v:
            return text
    exact = Decimal(v)
    up = exact.quantize(Decimal(1).scaleb(exact.adjusted() - digits + 1), rounding=ROUND_CEILING)
    text = f"{float(up):.{digits}g}"
    return text if float(text) >= v else repr(v)


@dataclass(frozen=True)
class ReportTable:
    """A table of a product's report section: plain data, every string escaped by the report.

    Args:
        head: the header cells (the first column is left-aligned).
        rows: the body rows: plain values (strings as they are, numbers through :func:`format_cell`).
        title: a sub-heading above the table (none when empty).
        note: a paragraph between the sub-heading and the table (none when empty).
        key: the table's id within the section (``<section id>-<key>``, a digest of the key after it where another
            table's or banner's key of the section gives that id; none when empty).
        row_data: per row, ``{name: value}`` written as the row's ``data-<name>`` attributes (e.g. the exact numbers
            behind rounded cells, for tools that read the page).

    Example:
        >>> ReportTable(["class", "bias"], [["1", 0.25]], title="Volume bias", key="bias").rows[0][1]
        0.25
    """

    head: Sequence[str]
    rows: Sequence[Sequence[Any]] = ()
    title: str = ""
    note: str = ""
    key: str = ""
    row_data: Sequence[Mapping[str, Any]] = ()


@dataclass(frozen=True)
class Overlay:
    """A contour drawn beside the prediction's in a case figure (a product's case file, e.g. a mask of a rule).

    Args:
        label: the legend's text.
        mask: bool ``(X, Y, Z)``, the case's grid.
        color: a matplotlib colour.
        linestyle: a matplotlib line style (``"solid"``, ``"dashed"``, ``"dotted"``, ...).

    Example:
        >>> import numpy as np
        >>> Overlay("outer mask", np.ones((2, 2, 2), bool), "#ffffff", "dashed").label
        'outer mask'
    """

    label: str
    mask: Any
    color: str = "#ffffff"
    linestyle: str = "solid"


@dataclass(frozen=True)
class ReportSection:
    """What a product shows in ``report.html``: plain data that the report renders, every string escaped.

    Args:
        title: the section's heading.
        paragraphs: text paragraphs (plain text, never HTML).
        cards: ``(label, value)`` pairs shown as cards.
        table_head: the header of an optional table.
        table_rows: its rows (plain values: strings and numbers, formatted by the report).
        tables: more tables (:class:`ReportTable`), each with its sub-heading and note, after the first.
        anchor: the section's id (default ``product-<name>``); letters, digits, ``-`` and ``_``. Where another
            section of the page, or the page itself, has that id, the report writes it with ``-`` and a digest of the
            product's name after it (``product-`` before it for an id beginning ``fig-`` or ``viewer-``).
        items: a bulleted list after the paragraphs (plain text).
        banners: warnings shown as banners after the tables: ``(key, heading, text)``, the banner's id
            ``<anchor>-<key>`` (a digest of the key after it where another table's or banner's key gives that id).

    Example:
        >>> ReportSection("Volume error", ["Predicted minus true volume."], cards=[("mean bias", "1.2 ml")]).title
        'Volume error'
    """

    title: str
    paragraphs: Sequence[str] = ()
    cards: Sequence[tuple[str, str]] = ()
    table_head: Sequence[str] = ()
    table_rows: Sequence[Sequence[Any]] = field(default_factory=tuple)
    tables: Sequence[ReportTable] = ()
    anchor: str = ""
    items: Sequence[str] = ()
    banners: Sequence[tuple[str, str, str]] = ()


class CohortProduct:
    """Base class of a cohort product (module docstring).

    Subclass it, set :attr:`name` and :attr:`title`, override what the capability needs, and register the class with
    :func:`register_product`.

    Every method has a default that does nothing, so a product supplies only its own parts. An instance holds the
    product's options (those of :meth:`from_arguments`); :meth:`options` returns them as JSON data, recorded in
    ``summary.json`` and in the per-case resume fingerprint.

    Example:
        >>> import numpy as np
        >>> from monai_unc.state import register_state_type
        >>> @register_state_type("doc.voxel_count")
        ... class VoxelCount:
        ...     def __init__(self, n): self.n = np.asarray(n, dtype=np.int64)
        ...     def merge(self, other): self.n = self.n + other.n; return self
        ...     def state_dict(self): return {"n": self.n}
        ...     @classmethod
        ...     def from_state_dict(cls, state): return cls(state["n"])
        >>> class Voxels(CohortProduct):
        ...     name, title = "voxels", "Foreground voxels"
        ...     def case_state(self, case, tasks, config):
        ...         return VoxelCount([int((t.pred > 0).sum()) for t in tasks])
        ...     def summarize(self, states, rows, artifact, config):
        ...         return {"mean": float(np.mean([s.n.sum() for s in states.values()]))}
        >>> Voxels().summarize({"a": VoxelCount([3]), "b": VoxelCount([5])}, [], None, None)
        {'mean': 4.0}
    """

    #: identifier: the ``summary.json`` key, the name of its per-case state and of its options group
    name: ClassVar[str] = ""
    #: human title: the report section and the command line's option group
    title: ClassVar[str] = ""
    #: one paragraph on what the product computes (the command line's group description)
    description: ClassVar[str] = ""
    #: the file of :meth:`fit`'s artifact in the evaluation folder (default ``<name>.json``)
    artifact_file: ClassVar[str | None] = None
    #: True: :meth:`fit` gets every case's state and row and picks the calibration cases itself
    #: (``config.calibration_ids``), e.g. to decide every case of the cohort by the rule fitted on the calibration cases
    #: (an undefined score counted as referred); False (default): it gets those of the calibration cases only
    fit_sees_cohort: ClassVar[bool] = False
    #: True: the product needs every voxel of the reference (connected components, distances, voxel sets), so an
    #: evaluation with an ignore label (``EvaluationConfig.ignore_label``, whose voxels it would count) refuses it;
    #: False (default): its case state is computed from the tasks on the voxels outside the ignore label
    needs_whole_reference: ClassVar[bool] = False
    #: the ``format`` field of the artifact file (a rule file that records how its calibration predictions were made:
    #: ``infer --settings-from`` reads it through :meth:`artifact_fingerprint`), or None
    artifact_format: ClassVar[str | None] = None
    #: True: the artifact is applied to the new cases' probabilities (``<case>_probs``), so ``infer --settings-from``
    #: refuses ``--no-probs`` with it (found by hostile testing: the run finished, and its command then refused every
    #: case for lack of probabilities)
    artifact_needs_probabilities: ClassVar[bool] = False
    #: the command that applies the artifact to a folder of new predictions (``monai-unc <command>``; ``monai-unc
    #: triage --<command>-rule`` runs it too, into ``<triage output>/<command>/``), or None (no command)
    command: ClassVar[str | None] = None
    #: the command's one-line help and its description (``monai-unc <command> --help``)
    command_help: ClassVar[str] = ""
    command_description: ClassVar[str] = ""
    #: the per-case table the command writes in its output folder (a CSV with a ``case`` column), or None: its
    #: columns go into the triage page's table and, with ``dicom-export --<command>``, into each case's DICOM SR
    applied_table: ClassVar[str | None] = None
    #: the sentence a case figure's caption gets when the figure draws the product's :meth:`case_overlays`
    overlay_note: ClassVar[str] = ""

    # -- command line ------------------------------------------------------------------------------------------
    @classmethod
    def add_arguments(cls, group: Any) -> None:
        """Add the product's options to ``monai-unc evaluate`` (an ``argparse`` argument group).

        Args:
            group: the group (``parser.add_argument_group(cls.title, cls.description)``).

        Returns:
            None. Options should be off by default, so that an evaluation without them is unchanged.
        """

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> CohortProduct | None:
        """The product configured by parsed options, or None when they do not ask for it (the default).

        Args:
            args: the parsed command line.

        Returns:
            An instance, or None.
        """
        return None

    @classmethod
    def from_config(cls, config: Any) -> CohortProduct | None:
        """The product that the evaluation's own options turn on, or None (the default).

        A product whose options are fields of the evaluation options (e.g. the risk-controlled referral rule:
        ``target_risk``, which ``monai-unc report`` may change to refit it) returns an instance here instead of being
        listed in ``config.products``. It must have no per-case state: ``monai-unc report`` refits it from the saved
        rows (:func:`monai_unc.evaluation.resummarize`).

        Args:
            config: the evaluation options.

        Returns:
            An instance, or None.
        """
        return None

    def options(self) -> dict[str, Any]:
        """The product's options as JSON data (recorded in ``summary.json``; part of each case's fingerprint).

        Returns:
            A dict (default empty).
        """
        return {}

    def case_options(self) -> dict[str, Any]:
        """The options that a case's state depends on: they enter the per-case resume fingerprint.

        Options that only the fit reads (a target, a level) may be left out, so that changing them refits without
        evaluating the cases again.

        Returns:
            A dict of JSON data (default :meth:`options`).
        """
        return self.options()

    def case_input_files(self, case_id: str) -> dict[str, Path]:
        """Files of a case that the product reads itself, beyond the evaluation's inputs (default none).

        Their signatures (path, size, times, inode) enter the case's resume fingerprint, so that a case whose file
        changed is evaluated again instead of resumed (e.g. the per-sample masks of ``--lesion-samples``).

        Args:
            case_id: the case.

        Returns:
            ``{role: path}`` (each must exist when the case is evaluated).
        """
        return {}

    def input_folders(self) -> tuple[str, ...]:
        """Folders the product reads itself, beyond the evaluation's inputs (default none).

        The evaluation's output folder may not be one of them or lie inside one (inputs are never written to; in earlier
        versions ``evaluate --lesion-samples S -o S/eval`` wrote into the per-sample masks' folder).

        Returns:
            The folders' paths.
        """
        return ()

    def check(self, case_ids: Sequence[str], config: Any) -> None:
        """Refuse, before any work, a cohort the product cannot handle (``ValueError`` naming the option).

        Args:
            case_ids: the ids of the cohort's cases.
            config: the evaluation options (:class:`~monai_unc.evaluation.EvaluationConfig`).

        Returns:
            None.
        """

    def check_inputs(self, cases: Sequence[Any], inputs: Mapping[str, Any], config: Any) -> None:
        """Refuse, before any work, input files the product cannot use (default: no check).

        Args:
            cases: the matched cases (:class:`~monai_unc.io.CaseFiles`: segmentation, probabilities, maps).
            inputs: the evaluation's inputs: ``predictions`` (folder), ``layout``, ``uncertainty`` (folder or None)
                and ``probs_suffix`` (None: the layout's).
            config: the evaluation options.

        Returns:
            None; a ``ValueError`` naming the file or option otherwise.
        """

    # -- per case ----------------------------------------------------------------------------------------------
    def case_state(self, case: Any, tasks: Sequence[Any], config: Any) -> Any:
        """The product's state of one case.

        Args:
            case: the loaded case (:class:`~monai_unc.io.LoadedCase`: label, segmentation, probabilities, maps,
                spacing in mm).
            tasks: its tasks (:class:`~monai_unc.activation.TaskView`: one class task, or one binary task per region
                with ``task.name`` the region).
            config: the evaluation options.

        Returns:
            A :class:`~monai_unc.state.MergeableState` of a registered class
            (:func:`monai_unc.state.register_state_type`), or None (the product has nothing for this case).
        """
        return None

    def case_columns(self, state: Any, config: Any) -> dict[str, float]:
        """Columns of ``metrics.csv`` from the case's state (default none).

        Args:
            state: what :meth:`case_state` returned (never None here).
            config: the evaluation options.

        Returns:
            ``{column: value}``; the names must not clash with the evaluation's own columns. An ``int`` (a count)
            is written as an integer, every other value as a float.
        """
        return {}

    # -- cohort ------------------------------------------------------------------------------------------------
    def fit(self, states: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], config: Any) -> Any:
        """Fit the product's artifact on the cohort (default: nothing to fit).

        Args:
            states: ``{case id: state}`` in case-id order (cases whose state was None are left out).
            rows: the cases' ``metrics.csv`` rows, in case-id order.
            config: the evaluation options (``config.calibration_cases``: the cases to fit on, None for all).

        Returns:
            JSON data (written by :func:`monai_unc.evaluation.products.write_artifact`), or None.
        """
        return None

    def summarize(self, states: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], artifact: Any,
                  config: Any) -> Any:
        """The product's block of ``summary.json`` (default: none).

        Args:
            states: as for :meth:`fit`.
            rows: as for :meth:`fit`.
            artifact: what :meth:`fit` returned.
            config: the evaluation options.

        Returns:
            A dataclass instance or a mapping of JSON data (NaN becomes ``null``), or None for no block.
        """
        return None

    def write_artifact(self, path: str | os.PathLike, artifact: Any, calibration_cases: Sequence[str],
                       inputs: Mapping[str, Any], config: Any) -> Path | None:
        """Write the artifact of :meth:`fit` in a format of the product's own (default: None, the generic one).

        By default the evaluation writes the checked document of :func:`monai_unc.evaluation.products.write_artifact`.
        A product overrides this to write a file of its own format instead (e.g. a rule file that records the
        fingerprint of the predictions it was fitted on); the file must be written atomically (:mod:`monai_unc.io`)
        and carry a digest.

        Args:
            path: the file (:meth:`artifact_path`).
            artifact: what :meth:`fit` returned.
            calibration_cases: the ids of the cases it was fitted on.
            inputs: the evaluation's inputs (as for :meth:`check_inputs`).
            config: the evaluation options.

        Returns:
            The path written, or None to let the evaluation write the generic document.
        """
        return None

    def write_case_files(self, case: Any, artifact_path: Path, folder: Path) -> list[Path]:
        """Files of one evaluated case made with the fitted artifact (default: none).

        When a product overrides this, ``evaluate`` calls it once its artifact is written, for every case in case-id
        order, so that the report draws these files instead of computing them (e.g. the masks a fitted rule gives the
        case). The files go to ``folder`` (``<output>/products/<name>/``) through :mod:`monai_unc.io`; an earlier
        run's files there are removed first.

        Args:
            case: the loaded case (:class:`~monai_unc.io.LoadedCase`).
            artifact_path: the file :meth:`write_artifact` (or the generic writer) wrote.
            folder: the product's folder of case files (it exists).

        Returns:
            The paths written.
        """
        return []

    def apply(self, case: Any, artifact: Any) -> Any:
        """Apply the fitted artifact to a new case (default: the product has nothing to apply).

        Args:
            case: the new case, loaded.
            artifact: the artifact of :meth:`fit` (e.g. the ``artifact`` of
                :func:`monai_unc.evaluation.products.read_artifact`).

        Returns:
            The product's output for the case.
        """
        raise NotImplementedError(f"the {self.name!r} product has nothing to apply")

    # -- presentation ------------------------------------------------------------------------------------------
    @classmethod
    def summary_lines(cls, block: Mapping[str, Any]) -> list[str]:
        """What ``monai-unc evaluate`` prints for the product (default nothing); from the summary block alone.

        Args:
            block: the product's block of ``summary.json``.

        Returns:
            Lines of text.
        """
        return []

    @classmethod
    def artifact_lines(cls, path: Path) -> list[str]:
        """What ``monai-unc evaluate`` prints about the artifact file it wrote (default: its path).

        Args:
            path: the file.

        Returns:
            Lines of text.
        """
        return [f"wrote {path}"]

    @classmethod
    def report_section(cls, block: Mapping[str, Any]) -> ReportSection | None:
        """The product's section of ``report.html`` (default none).

        It is built from the summary block alone, as the report reads it from ``summary.json``.

        Args:
            block: the product's block of ``summary.json``, as read back from the file.

        Returns:
            A :class:`ReportSection`, or None.
        """
        return None

    @classmethod
    def artifact_fingerprint(cls, path: Path, trust: Any = None) -> tuple[str, dict[str, Any]]:
        """The prediction fingerprint an artifact file of :attr:`artifact_format` recorded, read with its checks.

        Args:
            path: the artifact file (untrusted: read by the product's checked reader).
            trust: a :class:`~monai_unc.io.signing.Trust`: the signature must verify as the apply command checks it
                (``infer --settings-from`` passes the command's ``--trusted-keys`` / ``--allow-unsigned``), or None
                (not checked).

        Returns:
            ``(source, fingerprint)``: a name of the file for messages (``"<kind> <path>"``) and the fingerprint
            (:func:`monai_unc.io.provenance.prediction_fingerprint`).

        Raises:
            ValueError: a malformed file, or (with ``trust``) one whose signature does not verify;
            NotImplementedError: the product's artifact records no fingerprint.
        """
        raise NotImplementedError(f"the {cls.name!r} product's artifact records no prediction fingerprint")

    # -- the command that applies the artifact to new cases ---------------------------------------------------
    @classmethod
    def add_command_arguments(cls, parser: Any) -> None:
        """Add the command's own options (:attr:`command`) besides those every such command has.

        Every apply command has ``--predictions``, ``--rule``, ``--output``, ``--images``, ``--layout``,
        ``--uncertainty``, ``--allow-mismatch``, ``--trusted-keys``, ``--allow-unsigned`` and ``--quiet``
        (``monai_unc.workflows.arguments``); this adds the others (default none).

        Args:
            parser: the command's ``argparse`` parser.

        Returns:
            None.
        """

    @classmethod
    def command_options(cls, args: argparse.Namespace) -> dict[str, Any]:
        """The keyword arguments of :meth:`apply_cases` from the options :meth:`add_command_arguments` added.

        Args:
            args: the parsed command line.

        Returns:
            A dict (default empty).
        """
        return {}

    @classmethod
    def read_command_artifact(cls, artifact: Any, trust: Any = None) -> Any:
        """The command's artifact read and verified once: what :meth:`check_apply` and :meth:`apply_cases` receive.

        A command checks its artifact before any work (:meth:`check_apply`, beside a triage) and applies it
        (:meth:`apply_cases`); both get what this returns, so that they act on the one version of the file read here
        (a file rewritten between two reads gave two different rules in earlier versions). A product whose reader
        verifies the file returns a :class:`~monai_unc.io.provenance.RuleRead` of a path, which keeps a refusal of
        the file for the step that refuses it. The default returns ``artifact`` unchanged (each step reads it).

        Args:
            artifact: the fitted file (its path) or the loaded artifact.
            trust: the signatures the command accepts (:class:`~monai_unc.io.signing.Trust`), as for
                :meth:`apply_cases`, or None.

        Returns:
            The ``artifact`` to give :meth:`check_apply` and :meth:`apply_cases` (with the same ``trust``).
        """
        return artifact

    @classmethod
    def check_apply(cls, predictions: str | os.PathLike, artifact: Any, output: str | os.PathLike,
                    **options: Any) -> None:
        """Refuse, before any work, an artifact or predictions :meth:`apply_cases` would refuse (default: no check).

        ``monai-unc triage --<command>-rule`` calls it before the triage writes anything.

        Args:
            predictions: the folder of the new predictions.
            artifact: the fitted file (its path) or the loaded artifact.
            output: where :meth:`apply_cases` will write.
            **options: as for :meth:`apply_cases`.

        Returns:
            None; a ``ValueError`` naming the file otherwise.
        """

    @classmethod
    def apply_cases(cls, predictions: str | os.PathLike, artifact: Any, output: str | os.PathLike, *,
                    dist: Any = None, **options: Any) -> Any:
        """Apply the artifact to every case of a prediction folder: the body of :attr:`command`.

        Args:
            predictions: the folder of the new predictions.
            artifact: the fitted file (its path) or the loaded artifact.
            output: the output folder.
            dist: the process group's rank context (:class:`~monai_unc.engine.DistContext`), or None.
            **options: ``images``, ``layout``, ``uncertainty``, ``allow_mismatch``, ``progress``, ``trust`` and
                those of :meth:`command_options`.

        Returns:
            The command's result (what :meth:`command_lines` prints).
        """
        raise NotImplementedError(f"the {cls.name!r} product has no command")

    @classmethod
    def command_lines(cls, result: Any) -> list[str]:
        """What the command prints after a run (default nothing).

        Args:
            result: what :meth:`apply_cases` returned.

        Returns:
            Lines of text.
        """
        return []

    @classmethod
    def applied_lines(cls, folder: Path) -> list[str]:
        """What ``monai-unc triage`` prints about the outputs of the command it ran into ``folder``.

        Args:
            folder: the output folder of :meth:`apply_cases`.

        Returns:
            Lines of text (default: the folder).
        """
        return [f"wrote the outputs of 'monai-unc {cls.command}' to {folder}"]

    @classmethod
    def applied_rows(cls, folder: Path) -> dict[str, dict[str, Any]]:
        """The per-case numbers of the command's outputs in ``folder``, for the triage page (default none).

        Args:
            folder: the output folder of :meth:`apply_cases`.

        Returns:
            ``{case id: {column: value}}``.
        """
        return {}

    @classmethod
    def applied_columns(cls, rows: Sequence[Mapping[str, Any]],
                        class_names: Sequence[str] | None) -> list[tuple[str, str, int]]:
        """The columns of :attr:`applied_table` the triage page shows (default none).

        Args:
            rows: the table's rows (``case`` and the numbers).
            class_names: the referral rule's class names, or None.

        Returns:
            ``(column, header, decimals)`` per column shown.
        """
        return []

    @classmethod
    def applied_section(cls, folder: Path) -> ReportSection | None:
        """The triage page's section on the command's outputs in ``folder`` (default none).

        Args:
            folder: the output folder of :meth:`apply_cases`.

        Returns:
            A :class:`ReportSection`, or None.
        """
        return None

    @classmethod
    def case_overlays(cls, folder: Path, case_id: str) -> list[Overlay]:
        """Contours of a case's files in ``folder`` for its figure (default none).

        The folder is the product's folder of an evaluation (``<output>/products/<name>/``, written by
        :meth:`write_case_files`) or the output folder of its :attr:`command`; the report draws what is there and
        computes nothing.

        Args:
            folder: the folder of the case files.
            case_id: the case.

        Returns:
            The :class:`Overlay` list (empty when the case has no file there).
        """
        return []

    def artifact_path(self, output: str | os.PathLike) -> Path:
        """Where the artifact of :meth:`fit` is written in an evaluation folder.

        Args:
            output: the evaluation folder.

        Returns:
            ``<output>/<artifact_file>`` (default ``<name>.json``).
        """
        return Path(output) / (self.artifact_file or f"{self.name}.json")


def _check_product_class(cls: Any) -> None:
    if not (isinstance(cls, type) and issubclass(cls, CohortProduct)):
        raise TypeError(f"a product must be a subclass of CohortProduct, got {cls!r}")
    name = cls.name
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"{cls.__name__}.name must be an identifier (letters, digits, '_'), got {name!r}")
    if not isinstance(cls.title, str) or not cls.title:
        raise ValueError(f"{cls.__name__}.title must be a non-empty string")


#: summary.json keys of the evaluation itself and the stems of its files: no product may use them as its name
RESERVED_NAMES = ("n_cases", "num_classes", "class_names", "measure", "score", "dice", "calibration", "reliability",
                  "spatial", "case_metrics", "failure_detection", "referral", "triage", "failures", "ood",
                  "regions", "qu_brats", "warnings", "config", "histogram",
                  "region_histograms", "products", "summary", "metrics", "referral_rule", "state",
                  "report", "infer", "rows")
#: the package's own commands (and ``help``), and the options of ``dicom-export`` that a command's ``--<command>``
#: option there would clash with: no product's :attr:`~CohortProduct.command` may take these names
RESERVED_COMMANDS = ("infer", "evaluate", "report", "calibrate", "demo", "triage", "dicom-export", "monitor", "keys",
                     "nnunet-predict", "nnunet-dropout-plans", "nnunet-calibrate", "help", "predictions", "series",
                     "output", "layout", "measures", "segments", "uid-root", "algorithm-name", "evaluation",
                     "study-uid", "quiet", "no-probabilities")
#: files of an evaluation folder (and of the folders of infer and triage) that no artifact may replace; nor may it
#: replace another registered product's artifact
RESERVED_FILES = ("summary.json", "metrics.csv", "failures.json", "triage.json", "triage.csv",
                  "infer.json", "report.html")


def register_product(cls: type[CohortProduct]) -> type[CohortProduct]:
    """Class decorator: make a product known to ``monai-unc evaluate`` (its options) and to the report.

    Args:
        cls: a subclass of :class:`CohortProduct` with an identifier :attr:`~CohortProduct.name` that is not one of
            the evaluation's own ``summary.json`` keys (:data:`RESERVED_NAMES`).

    Returns:
        ``cls``. Registering a class again under its name replaces the earlier one (a reloaded module); a
        package product (:mod:`monai_unc.products`) is replaced only by its own class reloaded.

    Raises:
        TypeError: ``cls`` is not a product class.
        ValueError: a malformed or reserved name, the name of a package product taken by another class, or the
            artifact file, :attr:`~CohortProduct.artifact_format`, command or :attr:`~CohortProduct.applied_table`
            of another product (a table may not be a file of the package's own commands either).
    """
    _load_builtins()  # the package's own products first: no other product may take their names or files
    _check_product_class(cls)
    if cls.name in RESERVED_NAMES:
        raise ValueError(f"{cls.__name__}.name {cls.name!r} is a key or file of the evaluation itself")
    artifact = cls.artifact_file or f"{cls.name}.json"
    if (not isinstance(artifact, str) or artifact in RESERVED_FILES or "/" in artifact or "\\" in artifact
            or artifact.startswith(".") or not artifact.endswith(".json")):
        raise ValueError(f"{cls.__name__}.artifact_file must be a '<name>.json' file name that is not one of the "
                         f"evaluation's own files {RESERVED_FILES}, got {artifact!r}")
    taken = [other.__name__ for other in _REGISTRY.values() if other.name != cls.name
             and (other.artifact_file or f"{other.name}.json") == artifact]
    if taken:
        raise ValueError(f"{cls.__name__}.artifact_file {artifact!r} is the artifact file of product {taken[0]}")
    own = _REGISTRY.get(cls.name)
    if (own is not None and own.__module__.startswith(_BUILTIN_MODULES)
            and (own.__module__, own.__qualname__) != (cls.__module__, cls.__qualname__)):
        raise ValueError(f"{cls.__name__}.name {cls.name!r} is the name of the package's product {own.__name__}: "
                         "another class may not take its place (its options, rule files and command)")
    fmt = cls.artifact_format
    if fmt is not None:
        if not isinstance(fmt, str) or not fmt.strip():
            raise ValueError(f"{cls.__name__}.artifact_format must be None or a non-empty string, got {fmt!r}")
        taken = [other.__name__ for other in _REGISTRY.values() if other.name != cls.name
                 and other.artifact_format == fmt]
        if taken:
            raise ValueError(f"{cls.__name__}.artifact_format {fmt!r} is the format of product {taken[0]}'s rule "
                             "files: their reader would be this product's")
    if cls.command is not None:
        _check_command(cls)
    _REGISTRY[cls.name] = cls
    return cls


def _check_command(cls: type[CohortProduct]) -> None:
    """A product's command: a lower-case name of its own, and a plain CSV file name for its table."""
    command = cls.command
    if not isinstance(command, str) or re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", command) is None:
        raise ValueError(f"{cls.__name__}.command must be a lower-case command name such as 'apply-masks', "
                         f"got {command!r}")
    if command in RESERVED_COMMANDS:
        raise ValueError(f"{cls.__name__}.command {command!r} is a command of the package itself")
    taken = [other.__name__ for other in _REGISTRY.values() if other.name != cls.name and other.command == command]
    if taken:
        raise ValueError(f"{cls.__name__}.command {command!r} is the command of product {taken[0]}")
    table = cls.applied_table
    if table is not None and (not isinstance(table, str) or re.fullmatch(r"[A-Za-z0-9][\w.-]*\.csv", table) is None):
        raise ValueError(f"{cls.__name__}.applied_table must be a '<name>.csv' file name, got {table!r}")
    if table in RESERVED_FILES:  # the table marks the command's folder (monai_unc.io.check_output_kind)
        raise ValueError(f"{cls.__name__}.applied_table {table!r} is a file of the package's own commands")
    taken = [other.__name__ for other in _REGISTRY.values() if other.name != cls.name and other.command
             and table is not None and other.applied_table == table]
    if taken:
        raise ValueError(f"{cls.__name__}.applied_table {table!r} is the table of product {taken[0]}'s command")


def unregister_product(name: str) -> None:
    """Forget the product registered under ``name`` (nothing happens when there is none).

    Args:
        name: the product's :attr:`~CohortProduct.name`.

    Returns:
        None.
    """
    _REGISTRY.pop(str(name), None)


def registered_products() -> list[type[CohortProduct]]:
    """The registered product classes, in registration order.

    Returns:
        The classes: the package's own (:mod:`monai_unc.products`) and those registered since.
    """
    _load_builtins()
    return list(_REGISTRY.values())


def product_type(name: str) -> type[CohortProduct] | None:
    """The product class registered under ``name``, or None.

    Args:
        name: a product name (a key of ``summary.json``).

    Returns:
        The class or None.
    """
    _load_builtins()
    return _REGISTRY.get(str(name))


def command_products() -> list[type[CohortProduct]]:
    """The registered product classes that have a command of their own (:attr:`CohortProduct.command`).

    Returns:
        The classes, in registration order.
    """
    return [cls for cls in registered_products() if cls.command]


def command_product(command: str) -> type[CohortProduct] | None:
    """The registered product class whose :attr:`~CohortProduct.command` is ``command``, or None.

    Args:
        command: a command name.

    Returns:
        The class or None.
    """
    return next((cls for cls in command_products() if cls.command == command), None)


def products_from_arguments(args: argparse.Namespace) -> list[CohortProduct]:
    """The products that parsed command-line options ask for, in registration order.

    Args:
        args: the parsed ``monai-unc evaluate`` options.

    Returns:
        The configured products.

    Raises:
        TypeError: a product class's :meth:`~CohortProduct.from_arguments` returned something else than a product
            or None.
    """
    out = []
    for cls in registered_products():
        product = cls.from_arguments(args)
        if product is not None:
            if not isinstance(product, CohortProduct):
                raise TypeError(f"{cls.__name__}.from_arguments must return a CohortProduct or None")
            out.append(product)
    return out
