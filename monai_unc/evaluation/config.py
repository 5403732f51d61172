"""Options of a cohort evaluation (:class:`EvaluationConfig`), the column groups and the shift table reader.

The column groups are those of ``metrics.csv``. The metrics themselves are described in :mod:`monai_unc.evaluation`
(package docstring).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
import os
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._utils import check_integer, check_text, label_text, listed, parameter_error
from ..io import case_id_hint, check_entry_kind, read_table
from ..keys import ENTROPY_MEASURES, MEASURES, canonical_measure
from ..metrics.casewise import IID_SHIFTS
from ..metrics.qu_brats_score import QU_BRATS_GRIDS
from ..metrics.risk_control import P_VALUES as RISK_P_VALUES
from ..product import CohortProduct
from ..regions import parse_regions
from ..scores import CASE_SCORES, region_suffix, region_suffixes

__all__ = [
    "CALIBRATION_COLUMNS",
    "SPATIAL_COLUMNS",
    "IID_SHIFTS",
    "RISKS",
    "STATE_DIR",
    "MAX_BINS",
    "DERIVED_MAPS_DIR",
    "EvaluationConfig",
    "unit_scale",
    "slug",
    "dice_columns",
    "region_suffix",
    "read_shifts",
    "parse_score_column",
    "check_risk_options",
    "check_ignore_label",
    "callable_name",
    "UNREPEATABLE",
]

CALIBRATION_COLUMNS = ("ece", "classwise_ece", "all_label_ece", "ace", "mce", "uce", "nll", "brier")

SPATIAL_COLUMNS = ("buc", "ba_ece", "space", "error_auroc", "error_auprc")


#: per-case risks for the risk-controlled threshold: ``[dice < failure_dice]`` or ``1 - dice``
RISKS = ("failure", "1-dice")
#: the most ECE bins of an evaluation (``n_bins``): every case keeps fine histograms of ``16 * n_bins`` bins per class
MAX_BINS = 4096
#: sub-folder of an evaluation output holding the cohort state (and the per-case resume states)
STATE_DIR = "state"
#: sub-folder of an evaluation output holding the maps derived from the probabilities of cases without map files
DERIVED_MAPS_DIR = "maps"


#: the end of a :func:`callable_name` that no other run can repeat (an argument whose text holds a memory address): a
#: per-case state saved under it is never reused (:func:`monai_unc.evaluation.case_cache`)
UNREPEATABLE = " [unrepeatable argument: never resumed]"

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _argument_text(value: Any) -> str:
    """The text of a bound argument in :func:`callable_name`: its repr, a function by its name, an array by content."""
    if isinstance(value, np.ndarray):  # its repr elides the middle of a long array: the bytes instead
        data = np.ascontiguousarray(value)
        digest = hashlib.sha256(data.tobytes() if data.dtype != object else repr(data.tolist()).encode()).hexdigest()
        return f"ndarray(shape={tuple(value.shape)}, dtype={value.dtype}, sha256={digest})"
    torch = sys.modules.get("torch")  # an argument can only be a tensor or a module where torch was imported
    if torch is not None and isinstance(value, torch.Tensor):  # subclasses too: Parameter, MetaTensor (reprs elide)
        data = value.detach().cpu().contiguous()
        digest = hashlib.sha256(data.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
        dtype = str(value.dtype).removeprefix("torch.")  # as numpy's: the name of a float32 tensor stays as it was
        return f"torch.ndarray(shape={tuple(value.shape)}, dtype={dtype}, sha256={digest})"
    if torch is not None and isinstance(value, torch.nn.Module):  # its repr omits its weights
        digest = hashlib.sha256()
        for key, tensor in value.state_dict().items():
            digest.update(f"{key}:{_argument_text(tensor)};".encode())
        return f"{type(value).__module__}.{type(value).__qualname__}(state_dict sha256={digest.hexdigest()})"
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(value, (pandas.Series, pandas.DataFrame)):  # its repr elides rows
        try:
            data = np.ascontiguousarray(pandas.util.hash_pandas_object(value, index=True).to_numpy()).tobytes()
        except TypeError:  # unhashable cells (lists): their text, cell by cell
            data = _argument_text(value.to_dict()).encode()
        labels = value.columns.tolist() if isinstance(value, pandas.DataFrame) else value.name
        digest = hashlib.sha256(data + repr(labels).encode()).hexdigest()
        return f"pandas.{type(value).__name__}(shape={value.shape}, sha256={digest})"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_argument_text(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})" if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_argument_text(k)}: {_argument_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({sorted(_argument_text(v) for v in value)})"
    if callable(value) and not isinstance(value, (str, bytes, int, float, complex, np.generic)):
        return _callable_text(value)
    return repr(value)


def _callable_text(fn: Any) -> str:
    """:func:`callable_name` without the check for an address."""
    if isinstance(fn, functools.partial):  # nested ones too (those Python does not flatten itself)
        parts = [_callable_text(fn.func), *(_argument_text(a) for a in fn.args),
                 *(f"{k}={_argument_text(v)}" for k, v in sorted(fn.keywords.items()))]
        return f"{type(fn).__module__}.{type(fn).__qualname__}({', '.join(parts)})"
    if inspect.ismethod(fn):  # a bound method: what it is bound to counts
        return f"{fn.__func__.__module__}.{fn.__func__.__qualname__} of {_argument_text(fn.__self__)}"
    if isinstance(fn, type) or inspect.isroutine(fn):
        return f"{getattr(fn, '__module__', None)}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(fn, torch.nn.Module):  # by its weights: its repr omits them
        return _argument_text(fn)
    # an object with __call__: its class and its state as its repr gives it
    return f"{type(fn).__module__}.{type(fn).__qualname__} {fn!r}"


def callable_name(fn: Callable[..., Any]) -> str:
    """The name of a user function that the resume fingerprint records (:attr:`EvaluationConfig.case_metric_names`).

    A function (or class, or builtin) is named by its qualified name ``module.qualname``; a
    :class:`functools.partial` by its class and the name of what it wraps followed by its positional arguments and
    its keywords in name order (``functools.partial(mod.fn, 0.3, threshold=0.7)``; nested partials likewise); a bound
    method by its function and what it is bound to (``mod.Class.method of <repr>``); any other callable object by its
    class and its ``repr`` (a :class:`torch.nn.Module` by its class and the sha256 of its ``state_dict``, which its
    repr omits). An argument is written as its ``repr``, a function by its name, a numpy array or a torch tensor (any
    subclass: a ``Parameter``, a MONAI ``MetaTensor``; any dtype, bfloat16 included) by its shape, dtype and the
    sha256 of its bytes (its repr elides the middle of a long one), a pandas ``Series`` or ``DataFrame`` by its shape
    and the sha256 of :func:`pandas.util.hash_pandas_object` (index included) with its name or columns, a
    :class:`torch.nn.Module` as above, and tuples, lists, dicts and sets element by element.

    Arguments whose text holds a memory address (``' at 0x'``: an object with the default ``repr``) name nothing
    another run can repeat: the address is left out (ranks of one job still compare the function and the argument's
    type) and the name ends in :data:`UNREPEATABLE`, so that a per-case state saved under it is never reused (every
    case is computed again, and :func:`~monai_unc.evaluation.resume.case_cache` warns once per run naming the
    metric). So is a callable object or a bound method of an object with the default ``repr``: a function, or a
    :class:`functools.partial` of one over plain values, is resumed. The body of a function is not part of its name:
    changing it under the same name is not seen.

    Args:
        fn: the callable.

    Returns:
        Its name.

    Example:
        >>> import functools, math
        >>> callable_name(functools.partial(math.isclose, rel_tol=0.1))
        'functools.partial(math.isclose, rel_tol=0.1)'
        >>> callable_name(functools.partial(math.isclose, b=object())).endswith(UNREPEATABLE)
        True
    """
    text = _callable_text(fn)
    if _ADDRESS.search(text):
        return _ADDRESS.sub("", text) + UNREPEATABLE
    return text


def _kept(char: str) -> bool:
    """Whether :func:`slug` keeps ``char``: a letter or digit of any script, or a mark (an accent, a vowel sign)."""
    return char.isalnum() or unicodedata.category(char).startswith("M")


def slug(name: str) -> str:
    """``name`` as a lower-case identifier for column names (``dice_<slug>``).

    Letters and digits of every script are kept, so that class names in a hospital's own language (``"Ödem"``,
    ``"水肿"``, ``"Отёк"``) name distinct columns; an ASCII name gives the column of earlier versions. The name is
    NFKC-normalised first (one spelling of ``"é"``, full-width ``"Ｔ２"`` as ``"t2"``) and lower-cased with
    :meth:`str.lower`, not :meth:`str.casefold`: casefolding also changes letters that have no case (``"ß"`` to
    ``"ss"``), giving a column spelled otherwise than the name, while ``lower`` only changes case, as the ASCII rule
    always did.

    Args:
        name: a class name (any object; ``str()`` is applied).

    Returns:
        ``name`` NFKC-normalised, with every run of characters other than letters, digits and their marks (accents,
        vowel signs) replaced by ``_`` (``_`` itself included), stripped of leading and trailing ``_`` and
        lower-cased; ``"class"`` when nothing is left.

    Example:
        >>> slug("Left Atrium"), slug("ET-2"), slug("--"), slug("Ödem"), slug("水肿 2")
        ('left_atrium', 'et_2', 'class', 'ödem', '水肿_2')
    """
    text = unicodedata.normalize("NFKC", str(name))
    out = re.sub(r"_+", "_", "".join(c if _kept(c) and c != "_" else "_" for c in text)).strip("_").lower()
    return out or "class"


def _former_slug(name: str) -> str:
    """The :func:`slug` of versions that kept ASCII letters and digits only (``"Ödem"`` -> ``"dem"``).

    What the columns of an evaluation written by such a version are named after; read back by :func:`dice_columns`.
    """
    return (former_region_suffix(name) or "").lower() or "class"  # one ASCII rule for both (and the report's ids)


def former_region_suffix(name: str) -> str | None:
    """The :func:`region_suffix` of versions that kept ASCII letters and digits only (``"Ödem 2"`` -> ``"dem_2"``).

    None where they refused the name (no ASCII letter or digit). What an evaluation written by such a version named
    the region's columns after; read back by :func:`dice_columns`.
    """
    return re.sub(r"[^0-9a-zA-Z]+", "_", str(name)).strip("_") or None


def dice_columns(num_classes: int, class_names: Sequence[Any] | None = None,
                 regions: Iterable[str] | None = None, columns: Collection[str] | None = None) -> list[str]:
    """The per-class (or per-region) Dice columns of ``metrics.csv``: what ``dice.per_class`` of the summary reads.

    Args:
        num_classes: the number of classes ``C`` (background included); ignored with ``regions``.
        class_names: the names of the classes, background first (default ``0``, ``1``, ...).
        regions: the region names of a region evaluation, in channel order (None: classes).
        columns: the columns of a table read back (None: the columns an evaluation writes). A class whose column is
            not among them, but whose column under the naming of earlier versions (ASCII letters and digits only:
            ``"Ödem"`` -> ``dice_dem``) is, gets that one: an evaluation written by such a version is read as written.
            Likewise a region's (:func:`region_suffix`).

    Returns:
        ``dice_<slug(class)>`` of classes ``1 .. C-1``, or ``dice_<region_suffix(R)>`` of each region.

    Example:
        >>> dice_columns(3), dice_columns(3, ["bg", "Left Atrium", "scar"]), dice_columns(0, regions=["WT", "ET"])
        (['dice_1', 'dice_2'], ['dice_left_atrium', 'dice_scar'], ['dice_WT', 'dice_ET'])
        >>> dice_columns(2, ["bg", "Ödem"]), dice_columns(2, ["bg", "Ödem"], columns=["case", "dice", "dice_dem"])
        (['dice_ödem'], ['dice_dem'])
    """
    if regions is not None:
        regions = [str(r) for r in regions]
        out = [f"dice_{region_suffix(r)}" for r in regions]
        if columns is not None:
            present = set(columns)
            former = [f"dice_{f}" if (f := former_region_suffix(r)) is not None else c for r, c in zip(regions, out)]
            out = [f if c not in present and f in present and former.count(f) == 1 else c for c, f in zip(out, former)]
        return out
    names = [str(n) for n in class_names] if class_names else [str(c) for c in range(num_classes)]
    out = [f"dice_{slug(names[c])}" for c in range(1, num_classes)]
    if columns is not None:
        present = set(columns)
        former = [f"dice_{_former_slug(names[c])}" for c in range(1, num_classes)]
        # the former column only where it is one class's: two names of one former column cannot be told apart
        out = [f if c not in present and f in present and former.count(f) == 1 else c for c, f in zip(out, former)]
    return out


@dataclass
class EvaluationConfig:
    """Options of an evaluation (see the module docstring).

    Args:
        measure: primary uncertainty measure for the spatial / discrimination metrics (default:
            ``predictive_entropy`` when present, else the first measure available).
        score: the triage score column, e.g. ``"predictive_entropy_fg_mean"`` (default ``<measure>_fg_mean``).
        n_bins: number of bins of the ECE family (1 to :data:`MAX_BINS`).
        min_bin_count: fewest voxels of a counted bin (Kock et al. uses ``min_bin_count=50``).
        failure_dice: a case with Dice below this counts as failed (histograms, failure list).
        budget: referral budget: fraction of the cases referred for review (most uncertain first).
        patch_size: box size (voxels per axis) of the ``_patch`` scores.
        spatial: compute BUC, BA-ECE and SPACE (distance transforms and a Gaussian filter per case).
        num_classes: number of classes (default: from the probabilities).
        class_names: names of the classes, background first, for the ``dice_<class>`` columns (default ``1``,
            ``2``, ...): one per class, of distinct columns (:func:`slug`: ``"Left Atrium"`` and ``"left-atrium"``
            would both be ``dice_left_atrium``); a name listed twice, or an empty one, is refused.
        shifts: ``{case: shift label}`` for OoD detection; in-distribution labels are :data:`IID_SHIFTS`. The labels
            are kept as text (:meth:`validate`: ``str`` of a number, ``""`` for None or NaN).
        target_risk: when set, the referral threshold with a guarantee
            (:func:`monai_unc.metrics.selective.risk_controlled_threshold`): with probability at least
            ``1 - delta`` over the draw of the calibration cases, the mean risk of the accepted new cases is at
            most ``target_risk`` (cases exchangeable with the calibration cases; docs/referral_threshold.md).
        delta: allowed probability that the guarantee fails (default 0.1).
        risk: ``"failure"`` (0/1 risk ``dice < failure_dice``) or ``"1-dice"`` (continuous risk ``1 - dice``).
        risk_method: ``"sgr"`` (binomial bound, 0/1 risk only) or ``"ltt"`` (Hoeffding-Bentkus, any risk in
            [0, 1]); default ``"sgr"`` for ``"failure"`` and ``"ltt"`` for ``"1-dice"``.
        risk_p_value: the p-value of LTT's tests (:func:`monai_unc.metrics.risk_control.risk_controlled_threshold`'s
            ``p_value``): ``"hoeffding_bentkus"`` (default, any risk) or ``"binomial"`` (exact, more powerful; needs
            ``risk="failure"`` and ``risk_method="ltt"``). Recorded in ``summary.json`` only when not the default.
        calibration_cases: ids of the cases the threshold is fitted on (default: every case, and the threshold is
            meant for new cases); the other cases are reported as a held-out check. Distinct ids (compared as text):
            a list naming a case twice is refused, as ``--calibration-cases`` refuses such a file.
        regions: region spec of a region-based (multi-label sigmoid) prediction: a mapping ``{region: [labels]}``,
            ``"brats"``, ``"brats2023"`` or a JSON object (:func:`monai_unc.regions.parse_regions`); every metric is
            then computed per region (:mod:`monai_unc.evaluation.region_case`). Stored parsed, as
            ``{region: [labels]}`` in channel order. A non-zero label that no region holds is refused, naming the
            labels and cases (another spec, e.g. ``brats2023``, is likely meant), unless ``ignore_unclaimed_labels``.
        ignore_unclaimed_labels: with ``regions``, count label values that no region holds as background (one
            warning) instead of refusing the cohort (``--ignore-unclaimed-labels``).
        ignore_label: nnU-Net's ignore label (``--ignore-label``; the ``"ignore"`` entry of ``dataset.json``'s
            ``labels``, above every class): the reference voxels holding it are left out of every voxel-wise metric
            (Dice, calibration, error rate and detection, QU-BraTS, user case metrics), as nnU-Net's own evaluation
            leaves them out of TP / FP / FN; with ``regions`` they are left out of every region. BUC / BA-ECE /
            SPACE need the whole reference: NaN (one warning) for a case that holds the ignore label. Products that
            need it (``CohortProduct.needs_whole_reference``) are refused. None (default): every voxel is scored.
        seg_label_values: the label value of each segment of reference labels given as DICOM SEG
            (``--seg-label-values``): segment ``s`` becomes label ``seg_label_values[s - 1]`` (DICOM numbers the
            segments 1, 2, 3, ..., so e.g. the BraTS labels 1, 2, 4 are ``[1, 2, 4]``); None: segment ``s`` is label
            ``s``. Distinct non-negative integers in a list or tuple (an array or a set, which has no order, is
            refused); NIfTI labels are read as they are.
        seg_regions: with ``regions``, reference labels given as DICOM SEG hold the regions themselves, one segment
            per region named as it (``SegmentLabel``; e.g. BraTS WT, TC, ET, nested, so overlapping), instead of the
            disjoint labels (``--seg-regions``; :func:`monai_unc.io.dicom.read_segmentation_regions`). NIfTI labels
            are read as they are.
        case_metrics: user-defined per-case metrics ``{name: fn}``: ``fn`` receives the case's
            :class:`~monai_unc.activation.TaskView` of one task (the class task, or one region) and returns a
            float, written into the column ``<name>`` (classes) or ``<name>_<region>`` (regions) of ``metrics.csv``
            (a column of the evaluation's own, e.g. ``dice`` or ``voxels``, is refused, never overwritten)
            and summarised as the mean over the cases of its finite values (cases left out counted in a warning;
            ``summary.json``, ``case_metrics``; per region under
            ``regions.per_region.<name>.case_metrics``). A name is letters, digits and ``_``; the functions'
            qualified names, with the arguments a :class:`functools.partial` binds, are part of the resume fingerprint
            (:attr:`case_metric_names`, :func:`callable_name`), so changing the metric set or a bound argument
            recomputes the cases (changing a function's body under the same name does not). A callable object or a
            bound method of an object with the default repr, or a metric bound to an argument whose repr holds a
            memory address, is never resumed: its cases are computed again on every run, with one warning per run
            naming the metric; a function, or a :class:`functools.partial` of one over plain values (numbers,
            strings, arrays, tensors), or a class whose ``__repr__`` names its state is resumed.
        products: the cohort products to compute besides the evaluation's own metrics (:mod:`monai_unc.product`):
            instances of registered :class:`~monai_unc.product.CohortProduct` subclasses, with distinct names. Each
            one's per-case state is computed and resumed with the case, its artifact fitted on the calibration cases
            and its summary written under its name in ``summary.json``.
        qu_brats_grid: the QU-BraTS threshold grid of a region evaluation (``--qu-brats-grid``;
            :func:`monai_unc.metrics.qu_brats_thresholds`): ``"numpy2"`` (default: 40 thresholds ``97.5 ... 0``) or
            ``"numpy1"`` (the grid of the 2020 challenge, run under numpy 1.x: 41 thresholds ``100 ... 0``; use it to
            compare with the published 2020 challenge scores). Only with ``regions`` (QU-BraTS is computed per
            region); part of the resume fingerprint and recorded in ``summary.json`` when not the default.

    Raises:
        ValueError: ``calibration_cases``, ``class_names`` or ``seg_label_values`` lists an entry more than once (the
            message names the field and the entries); the other options are checked by :meth:`validate`.

    Example:
        >>> from monai_unc.evaluation import EvaluationConfig
        >>> def volume_error(task):
        ...     return float(task.pred.sum() - task.target.sum())
        >>> config = EvaluationConfig(case_metrics={"volume_error": volume_error})
        >>> config.validate()
        >>> config.case_metric_names
        {'volume_error': 'monai_unc.evaluation.config.volume_error'}
    """

    measure: str | None = None
    score: str | None = None
    n_bins: int = 15
    min_bin_count: int = 0
    failure_dice: float = 0.8
    budget: float = 0.2
    patch_size: int = 10
    spatial: bool = True
    num_classes: int | None = None
    class_names: list[str] | None = None
    shifts: dict[str, str] | None = None
    target_risk: float | None = None
    delta: float = 0.1
    risk: str = "failure"
    risk_method: str | None = None
    risk_p_value: str = "hoeffding_bentkus"
    calibration_cases: list[str] | None = None
    regions: dict[str, list[int]] | str | None = None
    case_metrics: Mapping[str, Callable[[Any], float]] | None = None
    ignore_unclaimed_labels: bool = False
    ignore_label: int | None = None
    seg_label_values: list[int] | None = None
    seg_regions: bool = False
    products: Sequence[CohortProduct] = ()
    qu_brats_grid: str = "numpy2"

    def __post_init__(self) -> None:
        # a deprecated measure name ("max_softmax" of older versions) warns at the line constructing the config:
        # validate() runs inside the evaluation, where the warning pointed into the package and Python's default
        # filters hid it (found by the upgrade review)
        if isinstance(self.measure, str):
            self.measure = canonical_measure(self.measure, stacklevel=4)
        self._refuse_repeated_entries()

    def _refuse_repeated_entries(self) -> None:
        """Refuse a case id, class name or segment label value listed twice, or class names of the same columns.

        Run at construction and in :meth:`validate`.

        Earlier versions accepted ``calibration_cases=["a", "b", "a"]``, although the command line refuses
        such a ``--calibration-cases`` file: the rules were fitted on fewer cases than the list gave (a typo for
        another case is the likely cause). Ids and names are
        compared as text, as the evaluation matches them (``1`` and ``"1"`` are the same case). A value of another
        type (a string, a number) is left to :meth:`validate`, whose message says what is expected.
        """
        for name, what in (("calibration_cases", "case"), ("class_names", "name"), ("seg_label_values", "value")):
            values = getattr(self, name)
            if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, set, frozenset)):
                continue
            if name != "seg_label_values":
                keys: list[Any] = [str(v) for v in values]
            elif all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
                keys = [int(v) for v in values]
            else:
                continue
            twice = [k for k, n in Counter(keys).items() if n > 1]  # in list order
            if twice:
                raise parameter_error(
                    ValueError(f"{name} lists {len(twice)} {what}(s) more than once: {listed(twice, 5)}"), name)
            if name == "class_names":  # found by review 67: "Left Atrium" and "left-atrium" passed construction
                self._refuse_same_columns(keys)

    @staticmethod
    def _refuse_same_columns(names: Sequence[str]) -> None:
        """Refuse class names of which two give the same columns (``dice_<slug>``; :func:`slug`)."""
        slugs = [slug(n) for n in names]
        if len(set(slugs)) != len(slugs):  # one column (dice_<class>, ...) would overwrite another's
            # each column of two or more names, with the names and their classes (found by review 69: the message
            # listed every name and column, and said neither which two met nor why "T2" and "Ｔ２" do)
            by_column: dict[str, list[int]] = {}
            for i, s in enumerate(slugs):
                by_column.setdefault(s, []).append(i)
            groups = [idx for idx in by_column.values() if len(idx) > 1]
            shared = [" and ".join(f"{names[i]!r} (class {i})" for i in idx)
                      + f" are {'both' if len(idx) == 2 else 'all'} dice_{slugs[idx[0]]}" for idx in groups]
            wide = any(not str(names[i]).isascii() for idx in groups for i in idx)
            why = ("letters and digits, NFKC-normalised and lower-cased: full-width 'Ｔ２' is 't2'" if wide else
                   "letters and digits, lower-cased, every other run of characters one '_'")
            raise parameter_error(
                ValueError(f"class_names: the names {list(names)} give the same column names {slugs}: "
                           + "; ".join(shared[:3]) + (f"; and {len(shared) - 3} more" if len(shared) > 3 else "")
                           + f" (a column keeps a name's {why}); give each class a name of its own"), "class_names")

    @property
    def n_fine_bins(self) -> int:
        """Fine bins of the confidence histograms: ``16 * n_bins`` (coarse binning exact, see the module)."""
        return 16 * self.n_bins

    def validate(self) -> None:
        """Check the options and normalise them in place.

        ``measure`` becomes its canonical name, ``regions`` the parsed ``{region: [labels]}``, ``products`` a
        tuple, ``calibration_cases`` a list (a set sorted), and the integer options (numpy integers accepted) and
        ``spatial`` Python ``int`` and ``bool``.

        Raises:
            ValueError: a case id, class name or segment label value listed twice, or two class names of the same
                column (as at construction); an option is
                out of range, of the wrong type (a string where a number or a list is meant, a
                float where an integer is) or inconsistent with another (the message names it).
            TypeError: ``case_metrics``, ``products``, ``ignore_unclaimed_labels`` or ``qu_brats_grid`` has the
                wrong type.

        Example:
            >>> config = EvaluationConfig(measure="max_softmax", regions="brats")
            >>> import warnings
            >>> with warnings.catch_warnings():
            ...     warnings.simplefilter("ignore")
            ...     config.validate()
            >>> config.measure, config.regions["WT"]
            ('one_minus_max_prob', [1, 2, 4])
        """
        self._refuse_repeated_entries()  # again: a field may have been set after construction
        for name in ("budget", "failure_dice", "delta", "target_risk"):
            value = getattr(self, name)
            # a bool is an int to Python: failure_dice=True (every case failed) or budget=False passed silently
            if not (value is None and name == "target_risk") and (
                    isinstance(value, (str, bytes, bool, np.bool_))
                    or not isinstance(value, (int, float, np.integer, np.floating))):
                raise parameter_error(
                    ValueError(f"{name} must be a number, got {type(value).__name__} {value!r}"),
                    name)
        if not 0.0 <= self.budget < 1.0:
            raise parameter_error(
                ValueError(f"budget must be a referral fraction in [0, 1), got {self.budget}"),
                "budget")
        if not 0.0 <= self.failure_dice <= 1.0:
            raise parameter_error(
                ValueError(f"failure_dice must be in [0, 1], got {self.failure_dice}"),
                "failure_dice")
        for name, minimum in (("n_bins", 1), ("min_bin_count", 0), ("patch_size", 1)):
            # stored as an int: a numpy integer reached the resume fingerprint's JSON (hostile review 58)
            setattr(self, name, check_integer(getattr(self, name), name, minimum))
        if self.n_bins > MAX_BINS:
            raise parameter_error(
                ValueError(f"n_bins must be at most {MAX_BINS} (the cases' fine histograms hold 16 * n_bins bins "
                           f"per class), got {self.n_bins}"),
                "n_bins")
        if not isinstance(self.spatial, (bool, np.bool_)):
            raise parameter_error(ValueError(f"spatial must be True or False, got {self.spatial!r}"), "spatial")
        self.spatial = bool(self.spatial)
        if self.num_classes is not None:
            self.num_classes = check_integer(self.num_classes, "num_classes", 1 if self.regions is not None else 2)
        if self.shifts is not None and not isinstance(self.shifts, Mapping):
            raise parameter_error(
                ValueError(f"shifts must be a mapping {{case: shift label}}, got {type(self.shifts).__name__}"),
                "shifts")
        if self.shifts is not None:  # labels as text, a missing one (None, NaN) "" (hostile review 58: a severity 0 ..
            # 4 or pandas' NaN was written into state/rows.json as a number, which report then refused)
            self.shifts = {k: label_text(v) for k, v in self.shifts.items()}
        self._validate_class_names()
        if self.calibration_cases is not None and (isinstance(self.calibration_cases, (str, bytes))
                                                   or not isinstance(self.calibration_cases, (Sequence, set))):
            # a bare string would be read as one case id per character
            raise parameter_error(
                ValueError(f"calibration_cases must be a list of case ids, got {self.calibration_cases!r}"),
                "calibration_cases")
        if self.calibration_cases is not None:  # a list, as summary.json records it (found by hostile review 60: a set
            # was accepted here, and every case evaluated, then writing summary.json failed in a TypeError traceback)
            cases = self.calibration_cases
            self.calibration_cases = sorted(cases, key=str) if isinstance(cases, set) else list(cases)
        if self.score is not None and not isinstance(self.score, str):
            raise parameter_error(
                ValueError(f"score must be a column name, got {type(self.score).__name__} {self.score!r}"),
                "score")
        if self.measure is not None:
            self.measure = canonical_measure(self.measure, stacklevel=3)  # "max_softmax" of older versions
        if self.measure is not None and self.measure not in MEASURES:
            raise parameter_error(ValueError(f"measure must be one of {MEASURES}, got {self.measure!r}"), "measure")
        if self.patch_size < 1:
            raise parameter_error(ValueError(f"patch_size must be positive, got {self.patch_size}"), "patch_size")
        if self.n_bins < 1:
            raise parameter_error(ValueError(f"n_bins must be positive, got {self.n_bins}"), "n_bins")
        if self.target_risk is not None and not 0.0 < self.target_risk < 1.0:
            raise parameter_error(ValueError(f"target_risk must be in (0, 1), got {self.target_risk}"), "target_risk")
        if not 0.0 < self.delta < 1.0:
            raise parameter_error(ValueError(f"delta must be in (0, 1), got {self.delta}"), "delta")
        if self.risk not in RISKS:
            raise parameter_error(ValueError(f"risk must be one of {RISKS}, got {self.risk!r}"), "risk")
        if self.risk_method is not None and self.risk_method not in ("sgr", "ltt"):
            raise parameter_error(
                ValueError(f"risk_method must be 'sgr' or 'ltt', got {self.risk_method!r}"),
                "risk_method")
        if self.risk == "1-dice" and self.risk_method == "sgr":
            raise parameter_error(
                ValueError("risk_method='sgr' needs the 0/1 risk (risk='failure'); use 'ltt' for risk='1-dice'"),
                "risk_method")
        if not isinstance(self.risk_p_value, str) or self.risk_p_value not in RISK_P_VALUES:
            raise parameter_error(ValueError(f"risk_p_value must be one of {RISK_P_VALUES}, got "
                                             f"{self.risk_p_value!r:.80}"), "risk_p_value")
        # the exact binomial p-value holds for a 0/1 risk only, and is a p-value of LTT's tests (SGR's bound is the
        # binomial one already); a default risk_method is not taken as asking for LTT
        if self.risk_p_value == "binomial" and self.risk != "failure":
            raise parameter_error(ValueError(
                f"risk_p_value='binomial' is exact for the 0/1 risk (risk='failure') only, got risk={self.risk!r}; use "
                "risk_p_value='hoeffding_bentkus'"), "risk_p_value")
        if self.risk_p_value == "binomial" and self.risk_method != "ltt":
            raise parameter_error(ValueError(
                f"risk_p_value='binomial' is a p-value of Learn-then-Test's tests: it needs risk_method='ltt', got "
                f"{self.risk_method!r} (SGR's bound is the binomial one already)"), "risk_p_value")
        if not isinstance(self.ignore_unclaimed_labels, bool):
            raise parameter_error(
                TypeError(f"ignore_unclaimed_labels must be True or False, got {self.ignore_unclaimed_labels!r}"),
                "ignore_unclaimed_labels")
        if self.ignore_unclaimed_labels and self.regions is None:  # found by hostile testing: ignored without a word
            raise parameter_error(ValueError("ignore_unclaimed_labels needs regions: it counts the label values that "
                                             "no region holds as background"), "ignore_unclaimed_labels",
                                  others=("regions",))
        if self.ignore_label is not None:
            classes = self.num_classes if self.regions is None else None
            self.ignore_label = check_ignore_label(self.ignore_label, classes)
            refused = [p.name for p in self.products if p.needs_whole_reference]
            if refused:
                raise parameter_error(ValueError(
                    f"ignore_label: the {refused[0]} product needs the whole reference (connected components, voxel "
                    "sets), which the ignore label's voxels leave incomplete; evaluate without it"), "ignore_label")
        if self.seg_label_values is not None:
            values = self.seg_label_values
            if not isinstance(values, (list, tuple)):
                # found by hostile review 68: an array failed with numpy's "truth value ... is ambiguous", and a set
                # (no order) gave segment s the s-th value of its iteration order without a word
                raise parameter_error(
                    ValueError("seg_label_values must be a list of distinct non-negative integers, one per segment in "
                               f"the order of the segments, got {type(values).__name__} {values!r:.80}"),
                    "seg_label_values")
            if (not values
                    or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 for v in values)
                    or len(set(values)) != len(values)):
                raise parameter_error(
                    ValueError(f"seg_label_values must be distinct non-negative integers, one per segment, got "
                               f"{values!r}"),
                    "seg_label_values")
            self.seg_label_values = [int(v) for v in values]
            if self.regions is None and self.num_classes is not None and max(values) >= self.num_classes:
                # found by hostile review: a value beyond the classes failed each case with "target holds class 4
                # but only 4 classes are present", naming neither the option nor the SEG
                raise parameter_error(
                    ValueError(f"seg_label_values {list(values)} holds label {max(values)}, outside the "
                               f"{self.num_classes} classes 0 .. {self.num_classes - 1} of num_classes"),
                    "seg_label_values", others=("num_classes",))  # the command line names both options
        if not isinstance(self.seg_regions, bool):
            raise parameter_error(TypeError(f"seg_regions must be True or False, got {self.seg_regions!r}"),
                                  "seg_regions")
        if self.seg_regions and self.regions is None:
            raise parameter_error(ValueError("seg_regions needs regions: the segments are read as the regions of the "
                                             "region spec"), "seg_regions", others=("regions",))
        if self.seg_regions and self.seg_label_values is not None:
            raise parameter_error(ValueError("seg_regions and seg_label_values exclude each other: the segments are "
                                             "either the regions or labels"), "seg_regions",
                                  others=("seg_label_values",))
        if not isinstance(self.qu_brats_grid, str):
            raise parameter_error(
                TypeError(f"qu_brats_grid must be a string, one of {QU_BRATS_GRIDS}, got "
                          f"{type(self.qu_brats_grid).__name__} {self.qu_brats_grid!r}"),
                "qu_brats_grid")
        if self.qu_brats_grid not in QU_BRATS_GRIDS:
            raise parameter_error(
                ValueError(f"qu_brats_grid must be one of {QU_BRATS_GRIDS}, got {self.qu_brats_grid!r}"),
                "qu_brats_grid")
        self.qu_brats_grid = str(self.qu_brats_grid)
        if self.qu_brats_grid != "numpy2" and self.regions is None:
            raise parameter_error(
                ValueError(f"qu_brats_grid={self.qu_brats_grid!r} applies only with regions: QU-BraTS is computed "
                           "per region of a region evaluation"),
                "qu_brats_grid")
        if self.calibration_cases is not None and not self.calibration_cases:
            raise parameter_error(
                ValueError("calibration_cases must name at least one case (or be None for every case)"),
                "calibration_cases")
        if self.regions is not None:
            self.regions = {k: list(v) for k, v in parse_regions(self.regions).items()}
            region_suffixes(self.regions)
            if self.class_names is not None:
                raise parameter_error(
                    ValueError("class_names does not apply with regions: the columns are named after the regions"),
                    "class_names")
            if self.num_classes is not None and self.num_classes != len(self.regions):
                raise parameter_error(
                    ValueError(f"num_classes ({self.num_classes}) must be the number of regions "
                               f"({len(self.regions)}) or None with regions"),
                    "num_classes")

        if self.case_metrics is not None:
            if not isinstance(self.case_metrics, Mapping):
                raise parameter_error(
                    TypeError("case_metrics must be a mapping {name: function}, got "
                              f"{type(self.case_metrics).__name__}"),
                    "case_metrics")
            for name, fn in self.case_metrics.items():
                if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                    raise parameter_error(
                        ValueError(f"case_metrics: the name {name!r} must be letters, digits and _ (a column name)"),
                        "case_metrics")
                if not callable(fn):
                    raise parameter_error(
                        TypeError(f"case_metrics: {name!r} must be a function of a task, got {type(fn).__name__}"),
                        "case_metrics")

        self._validate_products()

    def _validate_class_names(self) -> None:
        """``class_names``: names (made strings), one per class when ``num_classes`` is given, of distinct columns."""
        names = self.class_names
        if names is None:
            return
        if isinstance(names, (str, bytes)) or not isinstance(names, Sequence) or not names:
            raise parameter_error(
                ValueError(f"class_names must be a list of names, one per class, got {names!r}"),
                "class_names")
        # as a rule file reads them (a tab or 300 characters were evaluated, then the certified rule was refused)
        names = [check_text(str(n), f"class_names[{i}]") for i, n in enumerate(names)]
        blank = [i for i, n in enumerate(names) if not n.strip()]
        if blank:  # found by hostile review 68: its column was dice_class, named after no name; dicom-export refused it
            raise parameter_error(
                ValueError(f"class_names[{blank[0]}] is empty: give every class a name (its dice_<class> column is "
                           "named after it)"), "class_names")
        if self.num_classes is not None and len(names) != self.num_classes:
            raise parameter_error(
                ValueError(f"class_names has {len(names)} names for num_classes={self.num_classes}"),
                "class_names")
        self._refuse_same_columns(names)  # as at construction (a field may have been set after it)
        self.class_names = names

    def _validate_products(self) -> None:
        if isinstance(self.products, CohortProduct) or not isinstance(self.products, Sequence):
            raise parameter_error(
                TypeError("products must be a sequence of CohortProduct instances, got "
                          f"{type(self.products).__name__}"),
                "products")
        names = []
        for p in self.products:
            if not isinstance(p, CohortProduct):
                raise parameter_error(TypeError(f"products: {p!r} is not a CohortProduct instance"), "products")
            names.append(p.name)
        if len(set(names)) != len(names):
            raise parameter_error(ValueError(f"products: two products share a name ({names})"), "products")
        self.products = tuple(self.products)

    def product_options(self) -> dict[str, Any]:
        """``{product name: options}`` of :attr:`products` (:meth:`~monai_unc.product.CohortProduct.options`).

        This is what ``summary.json`` and the per-case fingerprint record.

        Returns:
            The options by product, in the order of :attr:`products`.
        """
        return {p.name: p.options() for p in self.products}

    @property
    def case_metric_names(self) -> dict[str, str] | None:
        """``{name: name of the function}`` of :attr:`case_metrics` (None without), as :func:`callable_name` gives it.

        This is what the resume fingerprint and ``summary.json`` record: a function's qualified name; a
        :class:`functools.partial` with the arguments it binds (another threshold is another metric); a name ending in
        :data:`UNREPEATABLE` (an argument whose text holds a memory address) is never resumed.
        """
        if self.case_metrics is None:
            return None
        return {name: callable_name(fn) for name, fn in self.case_metrics.items()}

    @property
    def region_names(self) -> list[str]:
        """The region names in channel order (empty without regions); call :meth:`validate` first."""
        return [] if self.regions is None else list(parse_regions(self.regions))

    def check_calibration_cases(self, case_ids: Iterable[str]) -> set[str]:
        """The calibration case ids, checked against the evaluated cases.

        Args:
            case_ids: the ids of the evaluated cases.

        Returns:
            ``calibration_cases`` as a set of strings (empty when ``calibration_cases`` is None).

        Raises:
            ValueError: a calibration case is not among ``case_ids``.

        Example:
            >>> EvaluationConfig(calibration_cases=["a", "b"]).check_calibration_cases(["a", "b", "c"]) == {"a", "b"}
            True
        """
        if self.calibration_cases is None:
            return set()
        wanted = {str(c) for c in self.calibration_cases}
        unknown = sorted(wanted - set(case_ids))
        if unknown:
            # marked: the command line names --calibration-cases, and an id that differs only in Unicode form or
            # spaces (a list typed on macOS) is shown in both spellings (found by the end-to-end run of review 62)
            raise parameter_error(ValueError(
                f"calibration_cases: {len(unknown)} case(s) not in the evaluation, e.g. {unknown[:5]}"
                + case_id_hint(unknown[0], set(case_ids) - wanted, "the evaluated cases")), "calibration_cases")
        return wanted

    def calibration_ids(self, case_ids: Sequence[str]) -> list[str]:
        """The cases that rules and products are fitted on, in the order of ``case_ids``.

        Args:
            case_ids: the ids of the evaluated cases.

        Returns:
            The ids of ``calibration_cases`` (every id when it is None).

        Raises:
            ValueError: a calibration case is not among ``case_ids``.

        Example:
            >>> EvaluationConfig(calibration_cases=["c", "a"]).calibration_ids(["a", "b", "c"])
            ['a', 'c']
        """
        if self.calibration_cases is None:
            return list(case_ids)
        wanted = self.check_calibration_cases(case_ids)
        return [c for c in case_ids if c in wanted]

    @property
    def resolved_risk_method(self) -> str:
        """``risk_method``, or its default for ``risk`` (SGR for failures, LTT for ``1 - dice``)."""
        return self.risk_method or ("sgr" if self.risk == "failure" else "ltt")

    def seg_region_spec(self) -> dict[str, list[int]] | None:
        """The region spec whose regions the segments of DICOM SEG labels are (``seg_regions``), else None.

        What :func:`~monai_unc.io.load_case` takes as ``seg_regions`` wherever this evaluation's labels are read.

        Example:
            >>> EvaluationConfig(regions={"WT": [1, 2], "TC": [2]}, seg_regions=True).seg_region_spec()
            {'WT': [1, 2], 'TC': [2]}
            >>> EvaluationConfig(regions={"WT": [1, 2], "TC": [2]}).seg_region_spec() is None
            True
        """
        if not self.seg_regions or self.regions is None:
            return None
        return {k: list(v) for k, v in parse_regions(self.regions).items()}

    def to_json(self) -> dict[str, Any]:
        """The options as a JSON-serialisable dict (what ``summary.json`` records).

        Returns:
            The dataclass fields without ``shifts``, ``case_metrics`` and ``products``; ``case_metric_names``
            (:attr:`case_metric_names`) and ``products`` (:meth:`product_options`) are added when set.

        Example:
            >>> d = EvaluationConfig(n_bins=10).to_json()
            >>> d["n_bins"], "shifts" in d
            (10, False)
        """
        d = dict(self.__dict__)
        d.pop("shifts", None)
        d.pop("case_metrics", None)  # functions; their names instead, when there are any
        d.pop("products", None)  # objects; their options instead, when there are any
        if self.seg_label_values is None:  # recorded only when given (summaries of earlier runs stay as they were)
            d.pop("seg_label_values", None)
        if not self.seg_regions:  # likewise
            d.pop("seg_regions", None)
        if self.ignore_label is None:  # likewise
            d.pop("ignore_label", None)
        if self.qu_brats_grid == "numpy2":  # recorded only when not the default, likewise
            d.pop("qu_brats_grid", None)
        if self.risk_p_value == RISK_P_VALUES[0]:  # likewise
            d.pop("risk_p_value", None)
        if self.case_metrics is not None:
            d["case_metric_names"] = self.case_metric_names
        if self.products:
            d["products"] = self.product_options()
        return d


def check_ignore_label(value: Any, num_classes: int | None = None, name: str = "ignore_label") -> int:
    """Check nnU-Net's ignore label: an integer of at least 1, above the classes ``0 .. C-1`` when ``C`` is known.

    Args:
        value: the ignore label (``--ignore-label``, or the ``"ignore"`` entry of ``dataset.json``'s ``labels``).
        num_classes: the number of classes ``C`` (background included), or None when unknown (regions, or taken from
            the probabilities: then each case checks it).
        name: how messages name the value.

    Returns:
        The label as a Python ``int``.

    Raises:
        TypeError: ``value`` is no integer (a bool, a float, text).
        ValueError: ``value`` is below 1, or one of the classes ``0 .. C-1``.

    Example:
        >>> check_ignore_label(3, num_classes=3)
        3
        >>> check_ignore_label(2, num_classes=3)
        Traceback (most recent call last):
            ...
        ValueError: ignore_label 2 is one of the classes 0 .. 2: nnU-Net's ignore label lies above every class
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise parameter_error(TypeError(f"{name} must be an integer label, got {value!r}"), name)
    if value < 1:
        raise parameter_error(ValueError(f"{name} must be a label of at least 1 (0 is the background), got {value}"),
                              name)
    if num_classes is not None and value < num_classes:
        raise parameter_error(ValueError(f"{name} {int(value)} is one of the classes 0 .. {num_classes - 1}: nnU-Net's "
                                         "ignore label lies above every class"), name)
    return int(value)


def unit_scale(u: np.ndarray, measure: str, num_classes: int) -> np.ndarray:
    """Uncertainty on the [0, 1] scale of an error rate.

    Entropies and mutual information (nats) are divided by ``log C``; ``one_minus_max_prob`` and ``variance`` are
    already in [0, 1] and returned as they are. The ``variance`` (mean over classes) never fills that scale: it is at
    most ``(C - 1) / C**2`` (0.25 for two classes) and shrinks with ``C`` (samples split 9 to 1 between two labels give
    0.09 with two classes, 0.045 with four), so its BA-ECE and SPACE compare variance maps of one number of classes
    with each other, not with the entropy's (docs/spatial_metrics.md).

    Args:
        u: uncertainty values of any shape (nats for the entropy measures).
        measure: the measure of ``u`` (a name of :data:`~monai_unc.keys.MEASURES`).
        num_classes: the number of classes ``C`` (at least 2).

    Returns:
        ``u`` on the [0, 1] scale, same shape.

    Example:
        >>> import math
        >>> unit_scale(np.array([math.log(2)]), "predictive_entropy", 2)
        array([1.])
    """
    if measure in ENTROPY_MEASURES:
        return u / math.log(num_classes)
    return u


def read_shifts(path: str | os.PathLike) -> dict[str, str]:
    r"""``{case: shift}`` from a CSV with columns ``case`` and ``shift``.

    Args:
        path: the CSV file (UTF-8, a header row naming at least ``case`` and ``shift``), read by
            :func:`monai_unc.io.read_table` (a spreadsheet's byte-order mark skipped).

    Returns:
        ``{case id: shift label}`` in file order; in-distribution labels are :data:`IID_SHIFTS`.

    Raises:
        FileNotFoundError: ``path`` is not a file.
        ValueError: the file is not a UTF-8 CSV with columns ``case`` and ``shift``, names a column twice, has a row
            with more cells than the header, or lists a case twice (which of its rows holds would be a guess;
            ``--sites`` and ``--calibration-cases`` refuse it too).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "shifts.csv").write_text("case,shift\na,iid\nb,noise\n")
        ...     read_shifts(Path(d) / "shifts.csv")
        {'a': 'iid', 'b': 'noise'}
    """
    path = Path(path)
    if not path.is_file():
        check_entry_kind(path, "shift table", folder=False)
        raise FileNotFoundError(f"shift table not found: {path}")
    try:  # the one reader of a table a person may edit: a byte-order mark skipped, misread rows refused
        columns, rows, lines = read_table(path, return_lines=True)
    except ValueError as e:
        raise ValueError(f"cannot read the shift table {path} (not a UTF-8 CSV file): {e}") from None
    if not {"case", "shift"} <= set(columns):
        raise ValueError(f"{path} must be a CSV with columns 'case' and 'shift', got {columns or None}")
    out: dict[str, str] = {}
    for line, row in zip(lines, rows):  # the file's lines (a blank line skipped by read_table counts)
        cid = row["case"]
        if cid in out:
            raise ValueError(f"shift table {path}: case {cid!r} is listed twice (line {line}): keep one row per "
                             "case")
        out[cid] = row["shift"]
    return out


def parse_score_column(column: str, regions: Sequence[str] | None = None,
                       option: str = "score") -> tuple[str, str, str | None]:
    """Split a case score column that needs no labels into ``(measure, score, region)``.

    The columns are ``<measure>_<score>`` with ``score`` one of :data:`~monai_unc.scores.CASE_SCORES`
    (:func:`~monai_unc.scores.case_score_columns`; for regions the mean over the regions) and, for a region
    evaluation, ``<measure>_<score>_<R>`` of one region (:func:`region_suffix`). They are computed from the
    prediction alone (the map of ``measure``, or the map derived from the probabilities, and the predicted mask), so
    a new unlabelled case has them too.

    Args:
        column: the column, e.g. ``"predictive_entropy_fg_mean"``.
        regions: the region names of a region evaluation (None: classes).
        option: the option named by the error.

    Returns:
        ``(measure, score, region)`` with ``region`` None for the combined (or class) score; ``ValueError`` naming
        the column otherwise (e.g. ``dice``, which needs labels).

    Example:
        >>> parse_score_column("mutual_information_patch_mean")
        ('mutual_information', 'patch_mean', None)
        >>> parse_score_column("predictive_entropy_fg_mean_WT", ["WT", "TC"])
        ('predictive_entropy', 'fg_mean', 'WT')
    """
    text = str(column)
    suffixes = {region_suffix(r): str(r) for r in regions} if regions is not None else {}
    for measure in sorted(MEASURES, key=len, reverse=True):
        if not text.startswith(measure + "_"):
            continue
        rest = text[len(measure) + 1:]
        for score in sorted(CASE_SCORES, key=len, reverse=True):
            if rest == score:
                return measure, score, None
            if rest.startswith(score + "_") and rest[len(score) + 1:] in suffixes:
                return measure, score, suffixes[rest[len(score) + 1:]]
    scores = "|".join(CASE_SCORES)
    raise ValueError(f"{option}: {column!r} is not a case score computed without labels: use "
                     f"<measure>_<{scores}>" + ("[_<region>]" if regions is not None else "")
                     + f" with a measure of {tuple(MEASURES)}")



def check_risk_options(target_risk: float | None, given: Iterable[str]) -> None:
    """Refuse options of the risk-controlled threshold given without a target risk: they would be ignored.

    Found by hostile testing: ``monai-unc evaluate --delta 0.05`` without ``--target-risk`` (and ``monai-unc report
    --delta`` / ``--risk`` / ``--risk-method`` of an evaluation without one) exited 0, the option ignored without a
    word, although its user expected a guarantee at that level.

    Args:
        target_risk: the target risk in effect (given, or the evaluation's), or None.
        given: the names of the options given (``"delta"``, ``"risk"``, ``"risk_method"``, ``"risk_p_value"``;
            others are ignored).

    Raises:
        ValueError: ``delta``, ``risk``, ``risk_method`` or ``risk_p_value`` given and ``target_risk`` None, naming
            the options.

    Example:
        >>> check_risk_options(0.1, ["delta"])
        >>> try:
        ...     check_risk_options(None, ["delta", "budget"])
        ... except ValueError as e:
        ...     print(str(e)[:40])
        --delta sets the risk-controlled thresho
    """
    stray = [f"--{name.replace('_', '-')}" for name in ("delta", "risk", "risk_method", "risk_p_value")
             if name in set(given)]
    if target_risk is None and stray:
        raise ValueError(f"{', '.join(stray)} {'sets' if len(stray) == 1 else 'set'} the risk-controlled threshold, "
                         "which needs --target-risk (none is given, nor recorded by the evaluation): add "
                         f"--target-risk, or drop {', '.join(stray)}")
