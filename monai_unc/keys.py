"""Output names of every uncertainty inferer, what their mutual information means, the measure groups, the
file naming of prediction folders (:data:`LAYOUTS`), the sample sources of ``monai-unc infer --method``
(:data:`METHOD_TOKENS`, :func:`method_tokens`), and how the command lines read numbers (:func:`option_number`,
:func:`int_option`, :func:`float_option`: plain decimal syntax, integers at most :data:`MAX_OPTION_INT`; standard
library only, so that the options of ``monai-unc``, of the products and of the ``nnunet-*`` commands parse without
torch).

This module is the one place where the names of the uncertainty maps are spelled out: inferers, transforms,
file layouts, the command line and the nnU-Net predictor all take their lists from here (``docs/design.md``).
"""

from __future__ import annotations

import argparse
import difflib
import math
import numbers
import re
import warnings
from collections.abc import Callable, Iterable
from enum import Enum, EnumMeta
from typing import Any

__all__ = [
    "UncertaintyKeys",
    "MIMeaning",
    "combine_mi_meanings",
    "MEASURES",
    "ENTROPY_MEASURES",
    "DEFAULT_MEASURES",
    "DEPRECATED_MEASURES",
    "canonical_measure",
    "LAYOUTS",
    "sample_batch_size_value",
    "MAX_OPTION_INT",
    "EXPLICIT_OPTIONS",
    "FLOAT32_MAX",
    "noise_std_limit",
    "code_target_name",
    "NUMBER_SYNTAX",
    "option_number",
    "int_option",
    "float_option",
    "check_dicom_options",
    "METHOD_TOKENS",
    "DROPOUT_TOKENS",
    "SAMPLES_TOKENS",
    "DEFAULT_RATEIN_TARGET",
    "RATEIN_LOSS_NAMES",
    "DEFAULT_OVERLAP",
    "method_tokens",
    "canonical_method",
    "draws_at_random",
    "EXPECTED_DICE_ESTIMATES",
    "LEGACY_REGION_ESTIMATE",
    "close_names",
    "did_you_mean",
]

#: What a case's label-free ``expected_dice`` estimates: the ``calibration.expected_dice_estimate`` of a referral rule
#: (docs/triage.md). ``class_mean``: the mean over the foreground classes of each class's expected Dice, the quantity
#: of the case's ``dice`` (``evaluate`` and the rules it certifies, for classes); ``merged_foreground``: the expected
#: Dice of every foreground class as one mask (rules of classes certified before the field, which records it; with
#: two classes the same quantity); ``region_mean``: the mean over the regions of each region's binary expected Dice,
#: the quantity of the case's ``dice`` (a region the segmentation ``p > 0.5`` does not hold: ``prod (1 - p)``, as for a
#: class; region-based rules of ``format_version`` 5). The monitoring store reads them without torch, hence here.
EXPECTED_DICE_ESTIMATES: tuple[str, ...] = ("class_mean", "merged_foreground", "region_mean")
#: The estimate of a region-based rule certified before ``format_version`` 5: the mean over the regions of each
#: region's soft Dice against its own segmentation, 0 for a region the segmentation does not hold as soon as the
#: model gives it any probability (while ``dice`` scores a region absent from both maps 1). Derived from such rules
#: only (``ReferralRule.expected_dice_estimate``, the monitoring store), so that triage computes their new cases'
#: estimates as their calibration cases' were; never recorded in a rule (not one of :data:`EXPECTED_DICE_ESTIMATES`).
LEGACY_REGION_ESTIMATE = "region_mean_soft"

#: deprecated measure names (one release) -> current names; files and options with the old name are still read
DEPRECATED_MEASURES: dict[str, str] = {"max_softmax": "one_minus_max_prob"}
_DEPRECATED_MEMBERS = {"MAX_SOFTMAX": "ONE_MINUS_MAX_PROB"}


def canonical_measure(name: str, stacklevel: int = 2) -> str:
    """The current name of a measure: ``name`` itself, or for a deprecated name its replacement (see
    :data:`DEPRECATED_MEASURES`) with a ``DeprecationWarning``, e.g. ``"max_softmax"`` -> ``"one_minus_max_prob"``."""
    name = str(name)
    new = DEPRECATED_MEASURES.get(name)
    if new is None:
        return name
    warnings.warn(
        f"the measure name {name!r} is deprecated and will be removed in the next release; use {new!r}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return new


class _KeysMeta(EnumMeta):
    """Resolves deprecated member names (``UncertaintyKeys.MAX_SOFTMAX``) to their new member, with a warning."""

    def _renamed(cls, name: str) -> Any:
        new = _DEPRECATED_MEMBERS[name]
        warnings.warn(
            f"{cls.__name__}.{name} is deprecated and will be removed in the next release; use {cls.__name__}.{new}",
            DeprecationWarning,
            stacklevel=3,
        )
        return super().__getitem__(new)

    def __getattr__(cls, name: str) -> Any:  # only called when the normal lookup fails
        if name not in _DEPRECATED_MEMBERS:
            raise AttributeError(name)
        return cls._renamed(name)

    def __getitem__(cls, name: str) -> Any:
        return cls._renamed(name) if name in _DEPRECATED_MEMBERS else super().__getitem__(name)


class UncertaintyKeys(str, Enum, metaclass=_KeysMeta):
    """Keys of the ``dict[str, Tensor]`` that every monai-unc inferer returns.

    - ``pred``: mean probabilities ``(B, C, *spatial)``.
    - ``predictive_entropy``: H(mean p), total uncertainty (PU), ``(B, 1, *spatial)``.
    - ``expected_entropy``: mean over samples of H(p_s), aleatoric part (AU).
    - ``mutual_information``: PE - EE (- WD under overlapping sliding windows), epistemic part (EU) for
      dropout / ensembles / TTA.
    - ``window_disagreement``: WD = H(blend of window means) - blend of H(window means) under overlapping
      sliding windows (>= 0, 0 without overlap), so that PE = EE + MI + WD; see
      :mod:`monai_unc.inferers.sampling`.
    - ``one_minus_max_prob``: 1 - max_c mean p (larger = less confident); called ``max_softmax`` before, a name
      still accepted with a ``DeprecationWarning`` for one release (``UncertaintyKeys.MAX_SOFTMAX`` and
      ``UncertaintyKeys("max_softmax")`` give this member).
    - ``variance``: mean over classes of the per-class population variance over samples.
    - ``samples``: ``(S, B, C, *spatial)``, only with ``keep_samples=True``.
    """

    PRED = "pred"
    PREDICTIVE_ENTROPY = "predictive_entropy"
    EXPECTED_ENTROPY = "expected_entropy"
    MUTUAL_INFORMATION = "mutual_information"
    WINDOW_DISAGREEMENT = "window_disagreement"
    ONE_MINUS_MAX_PROB = "one_minus_max_prob"
    VARIANCE = "variance"
    SAMPLES = "samples"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> Any:
        if isinstance(value, str) and value in DEPRECATED_MEASURES:
            return cls(canonical_measure(value, stacklevel=5))
        return None


class MIMeaning(str, Enum):
    """What the mutual information of a set of samples measures (ValUES Sec. 3 and Appendix D/E).

    Dropout, ensembles and test-time augmentation sample model (or transformation) parameters: MI is
    epistemic. Latent-variable models (SSN, probabilistic U-Net) sample a latent that explains label
    ambiguity: MI is aleatoric. A product of sources of different kinds is ``mixed``.
    """

    EPISTEMIC = "epistemic"
    ALEATORIC = "aleatoric"
    MIXED = "mixed"
    NONE = "none"

    def __str__(self) -> str:
        return self.value


def combine_mi_meanings(parts: Iterable[tuple[MIMeaning | str, int]]) -> MIMeaning:
    """What the mutual information over a product of sample sources measures.

    The one rule behind every place that states it (an inferer before and after a call, the nnU-Net predictor,
    run records, pages): only a source that draws more than one sample varies, and the MI over the product is
    I(Y; S_1, ..., S_k | x) over the varying sources. One kind of varying source gives that kind; epistemic and
    aleatoric sources together give ``mixed`` (I(Y; theta, Z | x) = I(Y; theta | x) + I(Y; Z | theta, x));
    no varying source gives ``none``. A marginalised SSN (one latent-averaged sample) therefore does not vary:
    MC dropout x marginalised SSN is ``epistemic``.

    Args:
        parts: ``(meaning, samples)`` per source: the kind of its MI and how many samples it draws.

    Returns:
        The :class:`MIMeaning` of the product.

    Example:
        >>> from monai_unc.keys import combine_mi_meanings
        >>> combine_mi_meanings([("epistemic", 4), ("aleatoric", 10)]).value
        'mixed'
        >>> combine_mi_meanings([("epistemic", 4), ("aleatoric", 1)]).value
        'epistemic'
        >>> combine_mi_meanings([]).value
        'none'
    """
    kinds = {MIMeaning(meaning) for meaning, n in parts if int(n) > 1} - {MIMeaning.NONE}
    if not kinds:
        return MIMeaning.NONE
    if MIMeaning.MIXED in kinds or len(kinds) > 1:
        return MIMeaning.MIXED
    return kinds.pop()


#: every voxel-wise uncertainty map an inferer can return (names of ``<case>_<measure>`` files), in output order.
#: ``window_disagreement`` (last) is written only on request (``--measures ... window_disagreement``): it is 0
#: without overlapping sliding windows, and under them the part of PE that is neither EE nor MI
MEASURES: tuple[str, ...] = (
    UncertaintyKeys.PREDICTIVE_ENTROPY.value,
    UncertaintyKeys.EXPECTED_ENTROPY.value,
    UncertaintyKeys.MUTUAL_INFORMATION.value,
    UncertaintyKeys.ONE_MINUS_MAX_PROB.value,
    UncertaintyKeys.VARIANCE.value,
    UncertaintyKeys.WINDOW_DISAGREEMENT.value,
)

#: the maps measured in nats (natural log), bounded by ``log C`` (``log 2`` per region of a multi-label network);
#: divided by ``log C`` to bring them to [0, 1]
ENTROPY_MEASURES: tuple[str, ...] = (*MEASURES[:3], UncertaintyKeys.WINDOW_DISAGREEMENT.value)

#: the maps written by default (``variance`` costs C more stitched channels and is opt-in)
DEFAULT_MEASURES: tuple[str, ...] = MEASURES[:4]

#: file naming of the prediction folders that ``evaluate``, ``triage`` and the products' commands read
#: (``--layout``): seg suffix, probability suffix, uncertainty sub-folder (here, importable without torch, so that
#: the command line parses its options at once; :data:`monai_unc.io.LAYOUTS` is the same object)
LAYOUTS: dict[str, dict[str, str]] = {
    "monai-unc": {"seg_suffix": "_seg", "probs_suffix": "_probs", "uncertainty_subdir": ""},
    "nnunet": {"seg_suffix": "", "probs_suffix": "", "uncertainty_subdir": "uncertainty"},
}


def close_names(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The names of ``known`` closest to a mistyped ``name``, closest first (at most ``n``; none when none is close).

    Letter case is ignored (``nnUnet`` is close to ``nnunet``); closeness is :func:`difflib.get_close_matches`'s
    (a similarity ratio of at least 0.6). The one place the command lines and the file layer find suggestions.

    Args:
        name: the name given.
        known: the names that exist.
        n: how many names at most.

    Returns:
        The close names of ``known``, as ``known`` spells them.

    Example:
        >>> close_names("mcdropot", METHOD_TOKENS), close_names("nnUnet", LAYOUTS), close_names("xyz", LAYOUTS)
        (['mcdropout'], ['nnunet'], [])
    """
    spelled: dict[str, str] = {}
    for k in known:
        spelled.setdefault(str(k).lower(), str(k))
    matches = difflib.get_close_matches(str(name).lower(), list(spelled), n=n)
    return [spelled[m] for m in matches if spelled[m] != name]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` (or ``'x' or 'y'``) for a mistyped ``name``, or ``""`` when no known name is close.

    Appended to a one-line error (an invalid ``--layout`` choice, an unknown ``--method`` source or measure name).

    Args:
        name: the name given.
        known: the names that exist.

    Returns:
        The suffix, or an empty string.

    Example:
        >>> "unknown source 'mcdropot'" + did_you_mean("mcdropot", METHOD_TOKENS)
        "unknown source 'mcdropot'; did you mean 'mcdropout'?"
        >>> did_you_mean("nifty", ("nifti", "dicom", "nifti_gz"))
        "; did you mean 'nifti' or 'nifti_gz'?"
        >>> did_you_mean("xyz", METHOD_TOKENS)
        ''
    """
    close = close_names(name, known, n=2)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


#: the sample sources of ``monai-unc infer --method`` (``+``-joined; ``softmax`` alone is the deterministic baseline)
METHOD_TOKENS: tuple[str, ...] = ("softmax", "mcdropout", "ratein", "tta", "ensemble", "ssn")
#: the sources that sample dropout masks: ``--dropout`` is sampled, and the samples share passes
#: (``--no-share-passes``, ``--sample-batch-size``), only under one of them; the one place this set is spelt out
DROPOUT_TOKENS: frozenset[str] = frozenset({"mcdropout", "ratein"})
#: the sources that draw ``--samples`` samples (an SSN's latent draws too); a method without one of them draws none
SAMPLES_TOKENS: frozenset[str] = DROPOUT_TOKENS | {"ssn"}
#: Rate-In's default target information loss (``--ratein-target``, ``RateInSource(target_loss=)``); under a method
#: without ``ratein`` the option is unused, and a recorded value is compared as this one
DEFAULT_RATEIN_TARGET: float = 0.1
#: the information-loss names Rate-In accepts (``RateInInferer(loss=)``, ``nnunet-predict --rate_in_loss``); the one
#: place they are spelt out
RATEIN_LOSS_NAMES: tuple[str, ...] = ("mi", "mi_gaussian", "mi_binned", "ssim", "mse")
#: the sliding window's default overlap (``monai-unc infer --overlap``); without ``--roi`` no window slides and another
#: value is refused
DEFAULT_OVERLAP: float = 0.25


def method_tokens(method: str) -> list[str]:
    """The lower-cased source names of a ``+``-joined ``--method`` string (not checked).

    Args:
        method: e.g. ``"MCDropout+tta"``.

    Returns:
        The names in order, e.g. ``["mcdropout", "tta"]`` (empty parts dropped).

    Example:
        >>> method_tokens("MCDropout + tta")
        ['mcdropout', 'tta']
    """
    return [t.strip().lower() for t in method.split("+") if t.strip()]


def canonical_method(method: str) -> str:
    """A ``--method`` string as it is recorded and compared: its :func:`method_tokens` joined with ``+``.

    ``infer --method MCDropout`` is accepted (the names are read in any letter case, with spaces around them) and was
    recorded as given: a rule certified on it did not match predictions of ``--method mcdropout``, and ``SSN+tta``
    hid the SSN's draws from the fingerprint (found by hostile review).

    Args:
        method: e.g. ``" SSN + tta"``.

    Returns:
        e.g. ``"ssn+tta"``.

    Example:
        >>> canonical_method(" SSN + tta"), canonical_method("mcdropout")
        ('ssn+tta', 'mcdropout')
    """
    return "+".join(method_tokens(method))


def draws_at_random(method: str, tta_noise: Any = 0.0) -> bool:
    """Whether a ``--method`` draws random samples, so that its ``--seed`` changes the outputs.

    The sources of :data:`SAMPLES_TOKENS` draw (dropout masks, Rate-In's search, SSN latents), and so does ``tta``
    with intensity noise (``--tta-noise`` > 0); flips and ensemble members are fixed, and ``softmax`` makes one
    prediction: their outputs are the same under every seed. The one place this is decided (``infer`` records the
    seed, and a resume compares it, only where it counts).

    Args:
        method: the ``+``-joined ``--method`` string (any letter case).
        tta_noise: the standard deviation of the TTA intensity noise (a value that is not a number counts as 0).

    Returns:
        True when some source of ``method`` draws at random.

    Example:
        >>> draws_at_random("ensemble"), draws_at_random("tta"), draws_at_random("tta", 0.1)
        (False, False, True)
        >>> draws_at_random("MCDropout+tta")
        True
    """
    tokens = set(method_tokens(method))
    if tokens & SAMPLES_TOKENS:
        return True
    noisy = isinstance(tta_noise, numbers.Real) and not isinstance(tta_noise, bool) and tta_noise > 0
    return "tta" in tokens and bool(noisy)


def check_dicom_options(output_format: str, uid_root: str | None = None, segments: Any = None,
                        study_uid: str = "source") -> None:
    """Refuse the DICOM options (``--uid-root``, ``--segments``, ``--study-uid new``) when no DICOM is written.

    Found by hostile testing: ``infer`` and ``nnunet-predict`` without ``--output-format both`` (or ``dicom``)
    ignored them without a word, even a ``--segments`` file that does not exist.

    Args:
        output_format: the value of ``--output-format`` (``"nifti"``: no DICOM object is written).
        uid_root: ``--uid-root`` (None: not given).
        segments: ``--segments`` (None: not given).
        study_uid: ``--study-uid`` (``"source"``: the default).

    Raises:
        ValueError: naming the options given and ``--output-format``.

    Example:
        >>> check_dicom_options("both", uid_root="1.2.3", study_uid="new")
        >>> check_dicom_options("nifti", segments="segments.json")
        Traceback (most recent call last):
            ...
        ValueError: --segments concerns the DICOM objects, and --output-format nifti (the default) writes none: add \
--output-format both, or drop --segments
    """
    if output_format != "nifti":
        return
    given = [f for f, on in (("--uid-root", uid_root is not None), ("--segments", segments is not None),
                             ("--study-uid new", study_uid != "source")) if on]
    if given:
        names = " and ".join(given)
        raise ValueError(f"{names} concern{'s' if len(given) == 1 else ''} the DICOM objects, and --output-format "
                         f"nifti (the default) writes none: add --output-format both, or drop {names}")


#: the largest value of an integer option of the command lines (samples, bins, window sizes, steps, processes,
#: cases, ...): an int32, which numpy and torch take as a count, a size or an index on every platform (found by a
#: probe: ``evaluate --min-bin-count 99999999999999999999`` failed every case with ``OverflowError``)
MAX_OPTION_INT = 2**31 - 1
#: the attribute of a command's parsed arguments that holds the destinations of the options given on the command
#: line (a frozenset; ``infer`` and ``evaluate``), so that ``--settings-from`` can tell an option given from its
#: default and a product can refuse its options given without the product
EXPLICIT_OPTIONS = "explicit_options"
#: an integer as the command lines read it: ASCII digits with an optional sign
_OPTION_INT = re.compile(r"[+-]?[0-9]+")
#: a number as monai-unc reads it from text, on the command lines (:func:`option_number`) and in table cells
#: (``io.tables.parse_float``): the syntax of JSON and CSV numbers (an optional sign, ASCII digits with an optional
#: fraction and exponent, ``.5``, ``5.``), or ``nan`` / ``inf`` / ``infinity`` (any case, for the checks to refuse or
#: keep); never ``1_000`` or digits of other scripts, which Python's ``float`` reads
NUMBER_SYNTAX = re.compile(
    r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|nan|inf|infinity)", re.IGNORECASE
)
#: the longest number text read (Python's ``int`` refuses 4300 digits and is slow well before; no option needs more)
_OPTION_CHARS = 100


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut after 40 characters (a value of thousands of digits is one line)."""
    return repr(text) if len(text) <= 40 else repr(text[:40]) + f"... ({len(text)} characters)"


def option_number(text: str, integer: bool = False) -> int | float:
    """A number given on a command line, in plain decimal syntax only.

    Python's ``int`` and ``float`` also read ``1_000`` (1000), ``0_1`` (1.0), `` 5`` (spaces around), digits of
    other scripts (``١٢``, full-width ``５``) and, for ``float``, ``1e400`` (inf): spellings that no user means as
    that number (found by a probe: ``evaluate --budget 0_1`` read 1.0, ``--n-bins ' 5'`` read 5). A number here is
    an optional sign and ASCII digits, for a float with an optional fraction and exponent (``0.5``, ``.5``,
    ``1e-3``) or ``nan`` / ``inf`` (which the option's check refuses where it takes none); an integer has no
    fraction or exponent (``4.0`` is refused: a count is written as one).

    Args:
        text: the value as given.
        integer: read an integer (``int``) instead of a float.

    Returns:
        The number.

    Raises:
        ValueError: another text (the message quotes it, cut after 40 characters), or a float beyond the range of
            a double (``1e400``).

    Example:
        >>> option_number("0.25"), option_number("-3", integer=True), option_number("1e-3")
        (0.25, -3, 0.001)
        >>> for text in ("1_000", " 5", "0x10", "4.0"):
        ...     try:
        ...         option_number(text, integer=True)
        ...     except ValueError as e:
        ...         print(e)
        expected a number in decimal digits, got '1_000'
        expected a number in decimal digits, got ' 5'
        expected a number in decimal digits, got '0x10'
        expected a number in decimal digits, got '4.0'
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    pattern = _OPTION_INT if integer else NUMBER_SYNTAX
    if len(text) > _OPTION_CHARS or pattern.fullmatch(text) is None:
        raise ValueError(f"expected a number in decimal digits, got {_shown(text)}")
    if integer:
        return int(text)
    value = float(text)
    if math.isinf(value) and text.lstrip("+-")[:1] not in ("i", "I"):  # 1e400: nobody means infinity by it
        raise ValueError(f"expected a number in the range of a double, got {_shown(text)}")
    return value


#: the largest finite float32, the dtype of the images the command lines read (``numpy.finfo(numpy.float32).max``)
FLOAT32_MAX = 3.4028234663852886e38


def noise_std_limit(largest: float = FLOAT32_MAX) -> float:
    """The largest standard deviation of additive Gaussian noise that stays finite in a dtype: ``largest / 9``.

    A standard normal draw beyond 9 happens with probability about ``2e-19`` per voxel, so noise of at most this
    standard deviation is finite in practice; larger noise turns voxels into ``inf`` (and the network's output into
    NaN). Test-time augmentation (:class:`~monai_unc.inferers.NoiseSource`, ``--tta-noise``) refuses more.

    Args:
        largest: the largest finite value of the input's dtype (``torch.finfo(x.dtype).max``); float32 by default.

    Returns:
        ``largest / 9``.

    Example:
        >>> f"{noise_std_limit():.3g}"
        '3.78e+37'
    """
    return float(largest) / 9.0


def code_target_name(name: Any, what: str = "--allow-code-target") -> str:
    """A name a network spec may build besides the allowed networks: ``*``, a dotted name, or a prefix ending in ``.``.

    Found by hostile testing: a malformed name (``''``, ``'os.*'``, ``' mypkg'``, ``'mypkg..'``) was accepted and
    silently matched nothing, so the spec was refused with a message that did not say the opt-in itself was wrong.

    Args:
        name: the name as given: ``"*"`` (trust the spec completely), a dotted Python name (``"mypkg.MyNet"``: that
            name and everything under it), or a module prefix ending with one ``"."`` (``"mypkg.nets."``).
        what: how the errors name the option.

    Returns:
        The name.

    Raises:
        TypeError: ``name`` is not a string.
        ValueError: naming ``what`` and the name, for anything else.

    Example:
        >>> code_target_name("mypkg.nets.")
        'mypkg.nets.'
        >>> try:
        ...     code_target_name("mypkg.*")
        ... except ValueError as e:
        ...     print(e)
        --allow-code-target: expected '*', a dotted Python name or a module prefix ending with '.', got 'mypkg.*'
    """
    if not isinstance(name, str):
        raise TypeError(f"{what}: expected a name (str), got {type(name).__name__}")
    parts = name[:-1].split(".") if name.endswith(".") else name.split(".")
    if name == "*" or (len(name) <= 1000 and all(part.isidentifier() for part in parts)):
        return name
    raise ValueError(f"{what}: expected '*', a dotted Python name or a module prefix ending with '.', got "
                     f"{_shown(name)}")


def int_option(low: int, high: int | None, what: str) -> Callable[[str], int]:
    """An ``argparse`` type for an integer option in ``[low, high]``, read by :func:`option_number`.

    argparse writes its ``ArgumentTypeError`` as one line naming the option (``argument --samples: expected a
    positive integer, got '1_000'``).

    Args:
        low: the smallest value.
        high: the largest value (:data:`MAX_OPTION_INT` for a count that reaches numpy or torch), or None for an
            option whose own check bounds it and names it (``--n-bins``).
        what: what the option takes, as the message says it (``"a positive integer"``).

    Returns:
        The type: text -> int, raising ``argparse.ArgumentTypeError`` (``expected <what>, got ...``; ``expected
        <what> of at most <high>, got ...`` for a value above ``high``).

    Example:
        >>> samples = int_option(1, MAX_OPTION_INT, "a positive integer")
        >>> samples("10")
        10
        >>> try:
        ...     samples("99999999999999999999")
        ... except argparse.ArgumentTypeError as e:
        ...     print(e)
        expected a positive integer of at most 2147483647, got 99999999999999999999
    """

    def parse(text: str) -> int:
        try:
            value = int(option_number(text, integer=True))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {_shown(text)}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"expected {what} of at most {high}, got {value}")
        return value

    return parse


def float_option(text: str) -> float:
    """An ``argparse`` type for a number option whose range the option's own check refuses (naming it).

    The syntax of :func:`option_number`; ``nan`` and ``inf`` are read, for that check to refuse where it takes none.

    Args:
        text: the value as given.

    Returns:
        The float.

    Raises:
        argparse.ArgumentTypeError: not a number in plain decimal syntax (``expected a number, got '0_5'``).

    Example:
        >>> float_option("0.5"), float_option("nan") != float_option("nan")
        (0.5, True)
    """
    try:
        return float(option_number(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {_shown(text)}") from None


def sample_batch_size_value(text: str) -> int | str:
    """A value of the sample batch size options: ``auto`` or a positive integer.

    An ``argparse`` type, light for the command lines: ``infer --sample-batch-size`` and ``nnunet-predict
    --sample_batch_size``.

    Args:
        text: the value given.

    Returns:
        ``"auto"`` or the integer.

    Raises:
        argparse.ArgumentTypeError: another value (argparse prints it as the option's error).

    Example:
        >>> sample_batch_size_value("auto"), sample_batch_size_value("4")
        ('auto', 4)
    """
    if text == "auto":
        return text
    try:
        value = int(option_number(text, integer=True))
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a positive integer, got {_shown(text)}")
    if value > MAX_OPTION_INT:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a positive integer of at most {MAX_OPTION_INT}, got "
                                         f"{value}")
    return value
