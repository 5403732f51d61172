"""What a command checks before its first case, for the command line and for Python callers alike.

:func:`check_infer_output` and :func:`prepare_evaluate` do the checks of ``infer`` and ``evaluate`` that come before
any work; the helpers :func:`resolve_device`, :func:`read_region_spec` and :func:`read_case_list` turn the values of
``--device``, ``--regions`` and ``--calibration-cases`` into what the workflows take, and :func:`error_text` makes an
error the one line the command line prints.

This module imports no MONAI, so that the commands that only read and compute (``evaluate``, ``report``, ``triage``,
``dicom-export``, ...) start without it. The plan of an ``infer`` run and the whole ``infer`` command
(:class:`~monai_unc.workflows.infer_plan.InferPlan`, :func:`~monai_unc.workflows.infer_plan.prepare_infer`,
:func:`~monai_unc.workflows.infer_plan.infer_command`, :func:`~monai_unc.workflows.infer_plan.check_region_channels`,
:func:`~monai_unc.workflows.infer_plan.infer_from_arguments`), which load the model and MONAI's inferers, are in
:mod:`monai_unc.workflows.infer_plan`; they are still names of this module, imported on first access
(``from monai_unc.workflows.prepare import prepare_infer`` works as before).
"""

from __future__ import annotations

import csv
import io
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

import torch

from .._lazy import lazy_attributes
from .._utils import listed, refusing
from ..evaluation import EvaluationConfig, read_shifts
from ..evaluation.triage import RULE_FILE
from ..io import (
    VOLUME_EXTENSIONS,
    CaseError,
    check_entry_kind,
    check_inputs_not_written,
    check_output_file,
    check_output_folder,
    check_reference_folder,
    input_folder,
    list_files,
    list_image_cases,
    refuse_dataset_root,
    unescape_cell,
)
from ..keys import DEFAULT_MEASURES, MEASURES, canonical_measure, close_names, did_you_mean
from ..regions import RegionSpec, parse_regions
from .options import FAILURES_FILE

__all__ = [
    "ACTIVATIONS",
    "SOFTMAX_MEASURES",
    "resolve_device",
    "read_region_spec",
    "read_case_list",
    "infer_measures",
    "checkpoint_list",
    "infer_written_files",
    "check_infer_output",
    "check_infer_case_outputs",
    "EVALUATE_WRITES",
    "DICOM_FOLDER",
    "check_dicom_input",
    "infer_summary",
    "prepare_evaluate",
    "error_text",
]

#: values of ``--activation`` of ``infer`` (``"none"``: the network outputs probabilities already)
ACTIVATIONS = ("softmax", "sigmoid", "none")

#: what ``monai-unc evaluate`` writes (or removes) in its output folder (patterns of
#: :func:`monai_unc.io.check_inputs_not_written`)
EVALUATE_WRITES = ("metrics.csv", "summary.json", FAILURES_FILE, RULE_FILE, "state", "state/*", "maps", "maps/*",
                   ".*.partial*", "products", "products/*", "products/*/*")
_EVALUATE_FILES = EVALUATE_WRITES[:4]

#: the maps of one deterministic pass (``--method softmax``): no expected entropy, mutual information or variance
SOFTMAX_MEASURES = ("predictive_entropy", "one_minus_max_prob")


def error_text(e: BaseException) -> str:
    """The first line of an error for a one-line message.

    ``OSError`` as ``what: path`` (without ``[Errno n]``; of an error with two paths, e.g. a copy or a rename, the
    second: the destination), the package's own ``ValueError`` s as their message, other errors as ``Type: message``.

    Args:
        e: the exception.

    Returns:
        One line of text.
    """
    if isinstance(e, OSError) and e.strerror and (e.filename2 or e.filename):
        # found by hostile testing: a copy onto a full disk named its source, a file inside the package
        return f"{e.strerror}: {e.filename2 or e.filename}"
    text = str(e).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(e, ValueError) or (isinstance(e, OSError) and e.errno is None):  # our own messages
        return first or type(e).__name__
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def _device_hint(name: str) -> str:
    """``"; did you mean 'cuda'?"`` for an unknown ``--device`` name (``gpu``, ``gpu:1``, ``cude``), else ``""``.

    ``gpu`` is no alias (torch has no device of that name, and no option of the command line has aliases): the
    refusal names the device that is meant.
    """
    base, sep, index = name.lower().partition(":")
    if base in ("gpu", "nvidia"):
        return f"; did you mean {'cuda' + sep + index!r}?"
    close = close_names(base, ("cpu", "cuda"), n=1)
    return f"; did you mean {close[0] + sep + index!r}?" if close else ""


def resolve_device(device: str | torch.device = "auto", *, world_size: int = 1, local_rank: int = 0) -> torch.device:
    """The torch device of ``--device``: ``"auto"`` is CUDA when available, else the CPU.

    Args:
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ... or a ``torch.device``.
        world_size: processes of a ``torchrun`` job; with more than one, ``"auto"`` and ``"cuda"`` give every local
            rank its own GPU (``cuda:<local_rank mod the GPU count>``).
        local_rank: this process's rank on its node.

    Returns:
        The device. ``ValueError`` naming ``--device`` for an unknown name, a device other than the CPU or a CUDA
        GPU (found by hostile testing: ``--device mps`` ended in a traceback once the model was moved, ``--device
        meta`` failed every case, each with an error naming no option), CUDA asked for where none is available, or
        a GPU index the machine does not have.

    Example:
        >>> resolve_device("cpu")
        device(type='cpu')
        >>> resolve_device("meta")
        Traceback (most recent call last):
        ...
        ValueError: --device meta: monai-unc runs on cpu, cuda or cuda:<index>, not meta
    """
    if isinstance(device, torch.device):
        dev, name = device, str(device)
    else:
        name = str(device).strip()
        if name == "auto":
            dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        else:
            try:
                dev = torch.device(name)
            except RuntimeError:
                raise ValueError(f"--device: unknown device {name!r}{_device_hint(name)}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"--device {name}: monai-unc runs on cpu, cuda or cuda:<index>, not {dev.type}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        why = (f"this torch build ({torch.__version__}) has no CUDA support" if torch.version.cuda is None
               else f"this torch build (CUDA {torch.version.cuda}) finds no CUDA GPU or driver")
        raise ValueError(f"--device {name} asked for, but CUDA is not available: {why}; --device cpu works "
                         "(slower)")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        n = torch.cuda.device_count()
        raise ValueError(f"--device {name}: this machine has {n} CUDA device(s), cuda:0 to cuda:{n - 1}")
    if world_size > 1 and dev.type == "cuda" and name in ("auto", "cuda"):
        dev = torch.device("cuda", local_rank % torch.cuda.device_count())  # one GPU per local rank
    return dev


def read_region_spec(spec: RegionSpec | str | os.PathLike | None) -> dict[str, tuple[int, ...]] | None:
    """The region spec of ``--regions``.

    A name (``"brats"``, ``"brats2023"``), a JSON object, a mapping, or the path of a ``.json`` file holding one
    (:func:`monai_unc.regions.parse_regions`).

    Args:
        spec: the spec, or None (no regions).

    Returns:
        ``{region: (label, ...)}`` in channel order, or None for None. ``FileNotFoundError`` for a ``.json`` path
        that does not exist, ``ValueError`` naming ``--regions`` for any other problem (a file that is not UTF-8
        text included).
    """
    if spec is None:
        return None
    if isinstance(spec, os.PathLike) or (isinstance(spec, str) and spec.strip().lower().endswith(".json")
                                         and not spec.lstrip().startswith("{")):
        path = Path(spec)
        if not path.is_file():
            check_entry_kind(path, "--regions file", folder=False)
            raise FileNotFoundError(f"--regions: file not found: {path}")
        try:
            spec = path.read_text(encoding="utf-8-sig")  # a byte-order mark (Notepad) skipped
        except UnicodeDecodeError as e:  # found by hostile testing: the codec's words alone, no option, no file
            raise ValueError(f"--regions: {path} is not UTF-8 text ({e.reason} at byte {e.start}): save it as "
                             "UTF-8") from None
    try:
        return parse_regions(spec)
    except (ValueError, TypeError) as e:
        raise ValueError(f"--regions: {str(e).splitlines()[0]}") from None


def read_case_list(path: str | os.PathLike | None) -> list[str] | None:
    """The case ids of ``--calibration-cases``.

    The file is UTF-8 (a leading byte-order mark skipped), whatever the locale. A CSV with a ``case`` column (comment
    lines only before its header; cells stripped of spaces, the formula escaping of :func:`monai_unc.io.write_csv`
    undone), or a plain list: one id per line, ``#`` comments. The file is
    a CSV when its name ends in ``.csv`` (any letter case) or its first line that is no comment holds a comma; any
    other file is a plain list, whose every line is an id (a first line ``case`` too: a case may be named so). A
    one-column CSV is read as a CSV only under a ``.csv`` name.

    Args:
        path: the file, or None.

    Returns:
        The ids in file order, or None for None. ``FileNotFoundError`` for a missing file, ``ValueError`` naming
        ``--calibration-cases`` and the file for a CSV without a ``case`` column in its header (a ``.csv`` plain
        list included: rename it, e.g. ``.txt``) or with two, a file that lists no case, or one
        that lists a case twice (a typo for another case: the run would fit on fewer cases than the file lists, and
        record the file's list).
    """
    if path is None:
        return None
    f = Path(path)
    if not f.is_file():
        check_entry_kind(f, "--calibration-cases file", folder=False)
        raise FileNotFoundError(f"--calibration-cases: file not found: {f}")
    try:  # UTF-8 whatever the locale, a spreadsheet's or Notepad's byte-order mark skipped (else part of the first id)
        with open(f, newline="", encoding="utf-8-sig") as fh:  # as written: a quoted carriage return is part of an id
            text = fh.read()
    except UnicodeDecodeError as e:  # the codec's message names neither the option nor the file
        raise ValueError(f"--calibration-cases: {f} is not UTF-8 text ({e.reason} at byte {e.start}): save it as "
                         "UTF-8") from None
    lines = [ln.strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    if lines and ("," in lines[0] or f.name.lower().endswith(".csv")):  # a CSV: by its name or its header
        # a CSV (a table of ours: metrics.csv, case_scores.csv, triage.csv): parsed from its header on as the csv
        # module reads it, so that ids keep a leading "#", quoted line breaks and characters that str.splitlines
        # takes for line ends (cells are stripped, as in a hand-written list); only comment and blank lines before
        # the header are skipped
        raw = text.split("\n")
        start = next(i for i, ln in enumerate(raw) if ln.strip() and not ln.strip().startswith("#"))
        reader = csv.DictReader(io.StringIO("\n".join(raw[start:]), newline=""))
        try:
            header = reader.fieldnames
        except csv.Error as e:  # a header cell over the csv module's limit
            raise ValueError(f"--calibration-cases: {f} is not a readable CSV table (line 1: {e})") from None
        names = [h.strip() for h in header or ()]
        if "case" not in names:
            raise ValueError(f"--calibration-cases: {f} is a CSV without a 'case' column (a plain list of ids, one a "
                             "line, is read as such under a name that does not end in .csv)")
        if names.count("case") > 1:  # the csv module keeps the last one's cells, silently
            raise ValueError(f"--calibration-cases: {f}: the column 'case' is given twice in the header: keep one")
        key = next(h for h in header if h.strip() == "case")
        # ids a spreadsheet would evaluate are written escaped (monai_unc.io.write_csv)
        cells = (row.get(key) for row in reader)
        try:
            lines = [unescape_cell(c.strip()) for c in cells if isinstance(c, str) and c.strip()]
        except csv.Error as e:  # e.g. a cell over the csv module's limit (found by hostile testing: a traceback)
            raise ValueError(f"--calibration-cases: {f} is not a readable CSV table (line {reader.line_num + 1}: {e})"
                             ) from None
    if not lines:
        raise ValueError(f"--calibration-cases: {f} lists no case")
    twice = [c for c, n in Counter(lines).items() if n > 1]  # in file order
    if twice:
        shown = listed(twice, 5)
        raise ValueError(f"--calibration-cases: {f} lists {len(twice)} case(s) more than once: {shown}")
    return lines


def infer_measures(method: str, measures: Sequence[str] | None = None) -> list[str]:
    """The maps a run of ``method`` writes.

    ``measures`` (default :data:`~monai_unc.keys.DEFAULT_MEASURES`) in their current names (a deprecated name such as
    ``max_softmax`` becomes its replacement, with a ``DeprecationWarning``); ``--method softmax`` keeps only
    :data:`SOFTMAX_MEASURES`.

    Args:
        method: the ``+``-joined ``--method`` string.
        measures: the ``--measures`` asked for, or None for the default set.

    Returns:
        The measures, in the given order. ``ValueError`` naming ``--measures`` for an unknown name, or naming
        ``--method softmax`` when ``measures`` asks explicitly for a map that one deterministic pass does not give.
    """
    if isinstance(measures, str):
        measures = [measures]
    names = [canonical_measure(m, stacklevel=3) for m in (measures or DEFAULT_MEASURES)]
    unknown = [m for m in names if m not in MEASURES]
    if unknown:
        raise ValueError(f"--measures: unknown measure(s) {', '.join(map(repr, unknown))}; choose from {MEASURES}"
                         + did_you_mean(unknown[0], MEASURES))
    if method.strip().lower() == "softmax":
        bad = [m for m in names if m not in SOFTMAX_MEASURES]
        if measures and bad:
            raise ValueError(f"--method softmax gives only {' and '.join(SOFTMAX_MEASURES)}, not {', '.join(bad)}")
        names = [m for m in names if m in SOFTMAX_MEASURES]
    return names


def _spec_file(network: str | os.PathLike | Mapping | None) -> str | None:
    """The file of a ``--network`` spec given as a path (None for inline JSON, a mapping or no spec)."""
    if network is None or isinstance(network, Mapping):
        return None
    text = os.fspath(network)
    if text.lstrip().startswith("{") or not Path(text).is_file():
        return None
    return text


def checkpoint_list(checkpoint: str | os.PathLike | Sequence[str | os.PathLike] | None) -> list[str]:
    """The ``--checkpoint`` file(s) as a list of paths.

    Args:
        checkpoint: one file, several, or None.

    Returns:
        The paths as strings, in the given order (empty for None).

    Example:
        >>> checkpoint_list("a.pt"), checkpoint_list(["a.pt", Path("b.pt")]), checkpoint_list(None)
        (['a.pt'], ['a.pt', 'b.pt'], [])
    """
    if checkpoint is None:
        return []
    if isinstance(checkpoint, (str, os.PathLike)):
        return [os.fspath(checkpoint)]
    return [os.fspath(c) for c in checkpoint]


def _regions_file(regions: RegionSpec | str | os.PathLike | None) -> str | None:
    """The file of a ``--regions`` spec given as a path (None for a name, inline JSON, a mapping or no spec)."""
    if regions is None or isinstance(regions, Mapping):
        return None
    text = os.fspath(regions)
    if text.lstrip().startswith("{") or not Path(text).is_file():
        return None
    return text


def infer_written_files(case_ids: Sequence[str]) -> list[str]:
    """What ``monai-unc infer`` writes in its output folder for the cases ``case_ids``.

    The patterns are those of :func:`monai_unc.io.check_inputs_not_written`.

    Args:
        case_ids: the ids of the input images.

    Returns:
        ``infer.json``, ``failures.json``, the partial files of atomic writes and per case ``<case>.json`` and
        ``<case>_*`` (segmentation, probabilities, maps).
    """
    return ["infer.json", FAILURES_FILE, ".*.partial*",
            *(p for cid in map(glob_escape, case_ids) for p in (f"{cid}.json", f"{cid}_*"))]


def check_infer_output(
    output: str | os.PathLike,
    input: str | os.PathLike,
    *,
    checkpoint: str | os.PathLike | Sequence[str | os.PathLike] | None = (),
    network: str | os.PathLike | Mapping | None = None,
    bundle: str | os.PathLike | None = None,
    regions: RegionSpec | str | os.PathLike | None = None,
) -> Path:
    """The checks of ``infer`` that come before any work.

    The ``input`` folder exists, ``output`` is a writable folder outside it and outside the bundle, and none of the
    run's files (``infer.json``, ``failures.json``, the per-case files) would replace a checkpoint, the network spec
    file or the regions file.

    Args:
        output: the ``--output`` folder.
        input: the ``--input`` folder of images.
        checkpoint: the ``--checkpoint`` file(s).
        network: the ``--network`` spec (a path, inline JSON or a mapping).
        bundle: the ``--bundle`` folder.
        regions: the ``--regions`` spec (a path, a name, inline JSON or a mapping).

    Returns:
        The resolved output folder. ``FileNotFoundError`` naming ``--input``; ``ValueError`` for a bad output.
    """
    input_folder(input, "input", "--input folder")
    refuse_dataset_root(input, "input", "--input folder")  # an nnU-Net / MSD dataset's root: name imagesTs/
    # each output check names the option on the command line (found by a probe of every command: "output folder ...
    # is a file, not a folder" named none)
    inputs = [*checkpoint_list(checkpoint), _spec_file(network), _regions_file(regions)]
    with refusing("output"):
        out = check_output_folder(output, input, bundle)  # not inside the input or the bundle, writable
        for name in ("infer.json", FAILURES_FILE):  # the run's own files never replace an input file (hard links too)
            check_output_file(out / name, *inputs, what="output")
    try:
        ids = [c.case_id for c in list_image_cases(input)]
    except ValueError:  # no image: prepare_infer says so
        ids = []
    check_infer_case_outputs(out, ids, checkpoint=checkpoint, network=network, regions=regions)
    return out


def check_infer_case_outputs(
    output: str | os.PathLike,
    case_ids: Sequence[str],
    *,
    checkpoint: str | os.PathLike | Sequence[str | os.PathLike] | None = (),
    network: str | os.PathLike | Mapping | None = None,
    regions: RegionSpec | str | os.PathLike | None = None,
    **_: Any,
) -> None:
    """Check that the files ``infer`` writes for ``case_ids`` in ``output`` replace no checkpoint, spec or regions file.

    :func:`check_infer_output` checks the cases of the input folder as listed before the network loads; DICOM series
    named by channel (``<case>_0000/``, ``<case>_0001/``) are the case ``<case>`` of a network of several input
    channels, known once it loads, and are checked again then (found by hostile testing: ``--network OUT/br01.json``
    was overwritten by the record of the case ``br01`` read from ``br01_0000/`` and ``br01_0001/``, while the same
    case given as NIfTI channel files was refused).

    Args:
        output: the ``--output`` folder.
        case_ids: the cases of the run.
        checkpoint: the ``--checkpoint`` file(s).
        network: the ``--network`` spec (a path, inline JSON or a mapping).
        regions: the ``--regions`` spec (a path, a name, inline JSON or a mapping).
        **_: the other options of :func:`~monai_unc.workflows.infer_plan.prepare_infer` (ignored).

    Raises:
        ValueError: naming ``--output`` and the input file a case's output would replace.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     spec = Path(d) / "br01.json"  # a network spec kept in the output folder
        ...     _ = spec.write_text("{}")
        ...     check_infer_case_outputs(d, ["br02"], network=spec)  # br02.json replaces nothing
        ...     try:
        ...         check_infer_case_outputs(d, ["br01"], network=spec)
        ...     except ValueError as e:
        ...         print(str(e).startswith("--output"))
        True
    """
    inputs = [*checkpoint_list(checkpoint), _spec_file(network), _regions_file(regions)]
    with refusing("output"):
        check_inputs_not_written(output, infer_written_files(case_ids), *inputs, what="--output")


#: the sub-folder of ``infer --output-format both`` that holds the DICOM objects (``<output>/dicom/<case>/``)
DICOM_FOLDER = "dicom"


def check_dicom_input(input: str | os.PathLike, uid_root: str | None, option: str = "--input",
                      output_format: str = "both") -> None:
    """Check, before any work, that ``infer --output-format both`` (or ``nnunet-predict``'s) can write DICOM objects.

    Args:
        input: ``infer``'s ``--input``: it must hold one DICOM series folder per case.
        uid_root: the root of the new UIDs.
        option: how the message names the input option (``-i`` for ``nnunet-predict``).
        output_format: how the message names the output format.

    Raises:
        ImportError: without the ``dicom`` extra (one line naming it).
        ValueError: an input of volume files, or a bad ``uid_root``.
    """
    from ..io.dicom import check_uid_root

    try:
        check_uid_root(uid_root)
    except ValueError as e:  # named as both command lines name it (found by a probe: infer said uid_root must ...)
        raise ValueError(f"--uid-root{str(e).removeprefix('uid_root')}") from None
    try:
        volumes = not all(p.is_dir() for c in list_image_cases(input) for p in c.channels)
    except CaseError:  # found by hostile testing: series named by channel beside NIfTI channel files were refused
        # as "cases ... have different numbers of channels", not for the volume files
        volumes = bool(list_files(input, "", VOLUME_EXTENSIONS))
        if not volumes:
            raise
    if volumes:
        raise ValueError(f"--output-format {output_format} needs DICOM input: {option} {input} must hold one DICOM "
                         "series folder per case (DICOM objects are written on the grid of their source series)")


def infer_summary(results: Sequence[dict[str, Any]], output: Path) -> list[str]:
    """What ``monai-unc infer`` prints after a run.

    Args:
        results: the per-case statuses (:func:`~monai_unc.workflows.infer.run_infer`).
        output: the output folder.

    Returns:
        One line: the number of cases written and already finished, and the folder.

    Example:
        >>> infer_summary([{"status": "written"}, {"status": "skipped"}], Path("out"))
        ['2 case(s): 1 written, 1 already finished; outputs in out']
    """
    written = sum(r["status"] == "written" for r in results)
    return [f"{len(results)} case(s): {written} written, {len(results) - written} already finished; "
            f"outputs in {output}"]


def prepare_evaluate(
    labels: str | os.PathLike,
    predictions: str | os.PathLike,
    output: str | os.PathLike,
    *,
    uncertainty: str | os.PathLike | None = None,
    images: str | os.PathLike | None = None,
    shifts: str | os.PathLike | Mapping[str, str] | None = None,
    calibration_cases: str | os.PathLike | Sequence[str] | None = None,
    regions: RegionSpec | str | os.PathLike | None = None,
    **options: Any,
) -> EvaluationConfig:
    """The checks of ``monai-unc evaluate`` that come before any work, and its configuration.

    ``labels`` must not be ``predictions`` (:func:`monai_unc.io.check_reference_folder`), ``output`` must be a
    writable folder outside the input folders, and its files (:data:`EVALUATE_WRITES`) must not
    replace the shifts, calibration-cases or regions file nor fill an input folder; the files named by
    ``shifts``, ``calibration_cases`` and ``regions`` are read; the configuration is validated.

    Args:
        labels: folder of reference label maps.
        predictions: folder of predictions (``monai-unc infer`` or nnU-Net).
        output: the evaluation folder.
        uncertainty: folder of ``<case>_<measure>`` maps, when not the layout's.
        images: folder of the input images (for the report's overlays).
        shifts: a CSV with columns ``case,shift`` (:func:`monai_unc.evaluation.read_shifts`) or ``{case: shift}``.
        calibration_cases: a file of case ids (:func:`read_case_list`) or the ids.
        regions: region spec of region-based predictions (:func:`read_region_spec`).
        **options: the other fields of :class:`~monai_unc.evaluation.EvaluationConfig` (``measure``, ``budget``,
            ``target_risk``, ...), with its defaults.

    Returns:
        The validated :class:`~monai_unc.evaluation.EvaluationConfig`. ``ValueError`` naming the option for a bad
        value or output folder.
    """
    shifts_file = None if shifts is None or isinstance(shifts, Mapping) else shifts
    cases_file = calibration_cases if isinstance(calibration_cases, (str, os.PathLike)) else None
    check_reference_folder(labels, predictions)  # every prediction scored against itself: refused first
    with refusing("output"):  # the command line names the option (monai_unc._utils.parameter_error)
        out = check_output_folder(output, labels, predictions, uncertainty, images)
    files = (shifts_file, cases_file, _regions_file(regions))
    for name in _EVALUATE_FILES:  # hard links too
        check_output_file(out / name, *files, what="output")
    check_inputs_not_written(out, EVALUATE_WRITES, *files, labels, predictions, uncertainty, images, what="--output")
    with refusing("shifts"):
        shift_table = read_shifts(shifts_file) if shifts_file is not None else None
    config = EvaluationConfig(
        shifts=shift_table if shifts_file is not None else (None if shifts is None else dict(shifts)),
        calibration_cases=read_case_list(cases_file) if cases_file is not None else (
            None if calibration_cases is None else [str(c) for c in calibration_cases]),
        regions=read_region_spec(regions), **options,
    )  # fmt: skip
    config.validate()  # a bad --regions spec: one line before any work
    with refusing("output"):  # nor inside a folder that a product reads (--lesion-samples)
        check_output_folder(output, *(f for p in config.products for f in p.input_folders()), writable=False)
    for product in config.products:  # a product's artifact file must not replace an input either
        check_output_file(product.artifact_path(out), *files, what="output")
    return config


#: the plan and the whole of ``monai-unc infer`` (:mod:`monai_unc.workflows.infer_plan`, which loads MONAI): names of
#: this module as before, imported on first access
__getattr__, __dir__ = lazy_attributes(
    __package__, dict.fromkeys(("InferPlan", "check_region_channels", "prepare_infer", "infer_command",
                                "infer_from_arguments"), "infer_plan"), (), globals(), owner=__name__)
