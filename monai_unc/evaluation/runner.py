"""Running an evaluation: a shard of cases, their cohort state and the whole of ``monai-unc evaluate``.

The pieces are a shard of cases with per-case resume (:func:`evaluate_shard`), their cohort state in case-id order
(:func:`assemble_state`), and the whole of ``monai-unc evaluate`` on one process or under ``torchrun``
(:func:`run_evaluate`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._utils import keep_user_warnings, parameter_error, reemit_warning
from ..engine import (
    CaseFailure,
    CasesFailed,
    CohortRun,
    DistContext,
    error_line,
    get_dist_context,
    process_cases,
    run_cases,
)
from ..engine.records import record_gather_hooks
from ..io import (
    CaseError,
    CaseFiles,
    case_files_digest,
    case_id_hint,
    check_output_kind,
    check_reference_folder,
    clean_partial_files,
    file_sha256,
    is_seg_label,
    load_case,
    match_cases,
)
from ..io.provenance import check_finished_predictions
from ..product import registered_products
from ..regions import unclaimed_labels_message
from .case import CaseResult, derived_maps, evaluate_case, load_evaluation_case
from .cohort import CohortState, remove_cohort_files, summarize, write_evaluation
from .config import DERIVED_MAPS_DIR, STATE_DIR, EvaluationConfig
from .products import (
    artifact_paths,
    check_products,
    command_output_markers,
    fit_products,
    remove_case_files,
    write_artifacts,
    write_case_files,
)
from .resume import CASES_DIR, case_cache, case_config_fingerprint, check_inputs_unchanged, input_signatures
from .rows import (
    check_class_count,
    check_measure_options,
    check_probability_cases,
    check_scored_cases,
    has_score_source,
    remove_stale_maps,
    write_derived_maps,
)
from .triage import prediction_regions, region_differences

__all__ = ["evaluate_files", "evaluate_shard", "assemble_state", "check_unclaimed_labels",
           "check_recorded_regions", "evaluate_cases", "run_evaluate"]


def evaluate_files(files: CaseFiles, config: EvaluationConfig) -> tuple[CaseResult, CaseFiles, int]:
    """Load and evaluate one case: ``(result, files, num_classes)``, the per-case step of ``evaluate``.

    Args:
        files: the case's files.
        config: the evaluation's options; region-based with ``config.regions`` (the image is loaded for the brain
            mask). Cases are loaded with ``config.num_classes`` only: agreement on the number of classes across
            cases is checked by :func:`assemble_state`, so shards evaluated apart give the same verdict as one
            process.

    Returns:
        The case's :class:`CaseResult`, its files and its number of classes (regions).
    """
    loaded, read = _load_recording(files, config)
    result = evaluate_case(loaded, config)
    result.warnings = sorted(set(result.warnings) | set(read))
    return result, files, _num_classes(loaded, config)


def _load_recording(files: CaseFiles, config: EvaluationConfig) -> tuple[Any, list[str]]:
    """:func:`load_evaluation_case`, and the ``UserWarning`` messages raised while the case's files were read.

    They are the case's warnings (``"<case>: <message>"``) as those of its metrics are, re-emitted as they were raised.
    In earlier versions a NIfTI file whose spatial unit is microns (every distance computed in microns,
    labelled mm) or whose sform and qform disagree (another affine read) was said on stderr alone, never in
    summary.json.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = load_evaluation_case(files, config)
    for w in caught:
        reemit_warning(w)
    return loaded, sorted({f"{files.case_id}: {w.message}" for w in caught if issubclass(w.category, UserWarning)})


def _num_classes(loaded: Any, config: EvaluationConfig) -> int:
    """The number of classes (regions) of a loaded case."""
    if config.regions is not None:  # region-based: R = the spec's regions
        n_cls = len(config.regions)
    else:
        n_cls = loaded.probs.shape[0] if loaded.probs is not None else config.num_classes
    assert n_cls is not None
    return int(n_cls)


def _evaluate_record(files: CaseFiles, config: EvaluationConfig, maps: Path | None = None,
                     before_write: Callable[[], None] | None = None) -> CaseResult:
    """The per-case step of the engine: :func:`evaluate_files` as one :class:`CaseResult`.

    The files and number of classes are attached, so the result is a
    :class:`~monai_unc.engine.records.CaseRecord`. With ``maps`` (a folder) the maps derived from the probabilities
    of a case without map files are written there (:func:`write_derived_maps`, ``before_write()`` called first) and
    recorded in ``result.derived``, with the sha256 of each file in ``result.derived_sha256``.
    """
    loaded, read = _load_recording(files, config)
    written: dict[str, Path] = {}
    if maps is not None and not loaded.maps and loaded.probs is not None:
        derived = derived_maps(loaded)  # once: the row scores these maps (as given maps) and the report draws them
        if before_write is not None:
            before_write()
        written = write_derived_maps(loaded, maps, derived)
        loaded = dataclasses.replace(loaded, maps=derived, derived=tuple(derived))
    result = evaluate_case(loaded, config)
    result.warnings = sorted(set(result.warnings) | set(read))
    result.derived = {m: str(p) for m, p in written.items()}
    result.derived_sha256 = {m: file_sha256(p) for m, p in written.items()}
    result.files, result.num_classes = files, _num_classes(loaded, config)
    return result


def _load_for_products(entry: tuple[CaseFiles, int], config: EvaluationConfig) -> Any:
    """A case loaded again for the products' case files: its own files, the number of classes the cohort has."""
    files, n = entry
    return load_case(files, n, multilabel=config.regions is not None, seg_regions=config.seg_region_spec())


def _check_shift_cases(cases: Sequence[CaseFiles], config: EvaluationConfig) -> None:
    """Refuse cases that ``config.shifts`` has no label for, before any work.

    In earlier versions :func:`evaluate_cases` and :func:`evaluate_shard` gave such a case the label ``""``
    (in-distribution) without a word, so that the OoD AUROC counted 3 of 5 cases as in-distribution that the table did
    not name, where ``run_evaluate`` refused them.

    Raises:
        CaseError: naming the first cases without a row.
    """
    if config.shifts is not None:
        ids = {c.case_id for c in cases}
        unknown = sorted(ids - set(config.shifts))
        if unknown:  # with the row it may have been meant as: an NFD id from macOS looks the same (review 62)
            raise CaseError(f"the shift table has no row for case(s) {unknown[:5]}"
                            + case_id_hint(unknown[0], set(config.shifts) - ids, "the shift table's rows"))


def _as_tuple(result: CaseResult) -> tuple[CaseResult, CaseFiles, int]:
    assert result.files is not None and result.num_classes is not None
    return result, result.files, int(result.num_classes)


def evaluate_shard(
    cases: Sequence[CaseFiles],
    config: EvaluationConfig,
    *,
    cache: str | os.PathLike | None = None,
    failures: list[tuple[str, BaseException]] | None = None,
    on_failure: Any = None,
    progress: bool = False,
    desc: str = "evaluate",
) -> list[tuple[CaseResult, CaseFiles, int]]:
    """Evaluate ``cases`` one by one: ``[(result, files, num_classes)]`` in the order given.

    With ``cache`` (a folder), a case whose saved state matches its :func:`case_fingerprint` is loaded instead of
    recomputed, and every computed case is saved there (resume after an interruption or a failure). With
    ``failures`` (a list), a case that raises is appended as ``(case_id, exception)``, ``on_failure(case_id,
    exception)`` is called, and the loop goes on; otherwise the first error propagates. The loop is
    :func:`monai_unc.engine.process_cases` with :func:`evaluate_files` and :func:`case_cache`.

    Args:
        cases: the cases' files (any subset of a cohort).
        config: the evaluation options (validated here).
        cache: the per-case resume folder (``<output>/state/cases``), or None for no resume. The shard writes no
            derived map: a case without map files of its own but with probabilities is saved without the maps
            :func:`run_evaluate` derives into ``<output>/maps``, so a later :func:`run_evaluate` into ``<output>``
            computes it again (:func:`case_cache`) rather than reuse it without its maps.
        failures: a list to collect ``(case_id, exception)`` of failing cases in, or None to raise the first error.
        on_failure: called as ``on_failure(case_id, exception)`` for each failing case (with ``failures``).
        progress: show a progress bar.
        desc: the progress bar's label.

    Returns:
        ``[(result, files, num_classes)]`` of the cases that succeeded, in the order given.

    Raises:
        CaseError: a case has no label in ``config.shifts`` (before any work).
    """
    config.validate()
    _check_shift_cases(cases, config)
    check_products(cases, config)
    done = process_cases(cases, lambda f: _evaluate_record(f, config),
                         cache=None if cache is None else case_cache(cache, config), failures=failures,
                         on_failure=on_failure, progress=progress, desc=desc)
    return [_as_tuple(r) for _, r in done]


def assemble_state(
    results: Iterable[tuple[CaseResult, CaseFiles, int]],
    n_fine_bins: int,
    failures: list[tuple[str, BaseException]] | None = None,
    regions: dict[str, list[int]] | None = None,
) -> CohortState | None:
    """The :class:`CohortState` of per-case results, added in case-id order whatever order (or shard) they came in.

    The fixed order makes the pooled float64 sums the same bits as for one process. The number of classes is that of
    the first case.

    Args:
        results: ``(result, files, num_classes)`` per case (:func:`evaluate_shard`, possibly gathered from ranks).
        n_fine_bins: fine bins of the histograms (:attr:`EvaluationConfig.n_fine_bins`).
        failures: a list to append ``(case_id, CaseError)`` of a case with another number of classes to, or None
            to raise.
        regions: the region spec of a region evaluation (kept in the state), or None.

    Returns:
        The cohort state, or None when no case is left.

    Raises:
        CaseError: a case has another number of classes than the first (without ``failures``).
    """
    state: CohortState | None = None
    for result, files, n_cls in sorted(results, key=lambda t: str(t[0].row["case"])):
        cid = str(result.row["case"])
        if state is None:
            state = CohortState(int(n_cls), n_fine_bins, regions=regions)
        elif n_cls != state.num_classes:
            err = CaseError(f"case {cid!r} has {n_cls} classes, the cohort {state.num_classes}")
            if failures is None:
                raise err
            failures.append((cid, err))
            continue
        state.add(result, files)
    return state


def check_unclaimed_labels(results: Iterable[tuple[CaseResult, CaseFiles, int]], config: EvaluationConfig) -> None:
    """Refuse a cohort whose label maps hold non-zero labels that no region of ``config.regions`` claims.

    The label maps are the references and the predicted label maps
    (:func:`~monai_unc.evaluation.rows.unclaimed_case_labels`). Such labels would silently count as background (e.g.
    BraTS 2023 labels, enhancing tumour 3, under ``"brats"``).

    Args:
        results: the per-case results (their ``unclaimed_labels``, found while each case was evaluated).
        config: the evaluation options.

    Returns:
        None; with ``config.ignore_unclaimed_labels`` one ``UserWarning`` instead of the error.

    Raises:
        ValueError: naming the labels, the number of cases and the likely fix
            (:func:`monai_unc.regions.unclaimed_labels_message`); for labels read from a DICOM SEG, that they are
            its segment numbers.
    """
    found: dict[int, list[str]] = {}
    from_seg = False  # labels read from a DICOM SEG are its segment numbers
    for result, files, _ in results:
        for label in result.unclaimed_labels:
            found.setdefault(int(label), []).append(str(result.row["case"]))
        from_seg |= bool(result.unclaimed_labels) and is_seg_label(getattr(files, "label", None))
    if not found or config.regions is None:
        return
    if not config.ignore_unclaimed_labels:
        hint = (" (the labels of a DICOM SEG are its segment numbers, which DICOM numbers 1, 2, 3, ...: e.g. the BraTS "
                "labels 1, 2, 4 stored as segments 1, 2, 3 need --seg-label-values 1,2,4, or a spec in segment "
                "numbers such as 'brats2023')"
                if from_seg else "")
        raise ValueError("--regions: " + unclaimed_labels_message(
            {k: sorted(v) for k, v in found.items()}, config.regions,
            "--ignore-unclaimed-labels / ignore_unclaimed_labels=True") + hint
            + "; the label maps of the references and the predicted label maps are both checked")
    n = len({c for ids in found.values() for c in ids})
    warnings.warn(f"--regions: label(s) {sorted(found)} of {n} case(s) are in no region and count as background "
                  "(--ignore-unclaimed-labels)", UserWarning, stacklevel=2)


def check_recorded_regions(predictions: str | os.PathLike, layout: str, regions: Mapping[str, Sequence[int]] | None
                           ) -> None:
    """Refuse a region spec other than the one recorded with region-based predictions, before any work.

    The record is that of ``infer --regions``, or the regions of an nnU-Net model. Refused are another label set in some
    channel, another number of regions, or no spec at all (as ``monai-unc triage`` compares a rule's regions:
    :func:`monai_unc.evaluation.triage.region_differences`; the names may differ). Class-based predictions and
    predictions without a record are not checked.

    Args:
        predictions: the predictions folder.
        layout: its file naming (``monai-unc`` or ``nnunet``).
        regions: the evaluation's region spec (None: class-based).

    Returns:
        None.

    Raises:
        ValueError: naming ``--regions`` and both specs on a mismatch.
    """
    found = prediction_regions(predictions, layout)
    if found is None or found is False:
        return
    spec = None if regions is None else {k: list(v) for k, v in dict(regions).items()}
    if region_differences(spec, found):
        recorded = "region-based predictions" if found is True else f"the regions {found}"
        raise ValueError(f"--regions: the predictions in {predictions} were made with {recorded}, but the evaluation "
                         f"uses {spec if spec is not None else 'no region spec'}: give the predictions' spec (every "
                         "label of a channel must match)")


def _warn_absent_classes(results: Sequence[tuple[CaseResult, CaseFiles, int]], config: EvaluationConfig
                         ) -> str | None:
    """Warn about the foreground classes that no reference and no segmentation of the cohort holds; the text or None.

    Each such class scores ``dice_<c> = 1`` (absent from both maps) in every case and counts in ``dice``, the mean
    over the foreground classes that failure detection, the referral curve, triage and risk control read: a label
    space with gaps (the ids of a TotalSegmentator subset, BraTS 0, 1, 2, 4 under ``--num-classes 5``) raised every
    case's Dice towards 1 without a word (found by hostile review). A region evaluation warns likewise about the regions
    of the spec that no reference and no prediction holds (a label of the spec that the label maps do not use, e.g.
    ``ET: [5]`` for the enhancing tumour 4, scored ``dice_ET = 1`` in every case without a word). None for an empty
    cohort, or when a case's record (an earlier version's) does not say which classes or regions it holds.
    """
    if not results:
        return None
    present: set[int] = set()
    n_cls = 0
    for result, _, n in results:
        if result.present_classes is None:
            return None
        present.update(result.present_classes)
        n_cls = max(n_cls, int(n))
    regions = _regions(config)
    if regions is not None:
        absent_regions = [name for r, name in enumerate(regions) if r not in present]
        if not absent_regions:
            return None
        text = (f"region(s) {', '.join(absent_regions)} of the {len(regions)} regions "
                f"{({k: list(v) for k, v in regions.items()})} are in no reference and no segmentation of the "
                f"{len(results)} case(s): each scores dice_<region> = 1 in every case and counts in 'dice', the mean "
                "over the regions that failure detection, the referral curve, triage and risk control read; check "
                "that the spec's labels are those of the label maps")
        warnings.warn(text, UserWarning, stacklevel=3)
        return text
    absent = [c for c in range(1, n_cls) if c not in present]
    if not absent:
        return None
    names = config.class_names
    shown = [f"{c} ({names[c]})" if names and c < len(names) else str(c) for c in absent[:8]]
    more = f" and {len(absent) - 8} more" if len(absent) > 8 else ""
    text = (f"class(es) {', '.join(shown)}{more} of {n_cls - 1} foreground classes are in no reference and no "
            f"segmentation of the {len(results)} case(s): each scores dice_<class> = 1 in every case and counts in "
            "'dice', the mean over the foreground classes that failure detection, the referral curve, triage and "
            "risk control read; a label space with gaps (ids kept from a larger dataset, e.g. BraTS 0, 1, 2, 4) "
            "needs relabelling to consecutive labels 0 .. K-1 first")
    warnings.warn(text, UserWarning, stacklevel=3)
    return text


def evaluate_cases(
    cases: Sequence[CaseFiles],
    config: EvaluationConfig,
    progress: bool = False,
    desc: str = "evaluate",
    cache: str | os.PathLike | None = None,
) -> CohortState:
    """Evaluate ``cases`` (any subset of a cohort) into a :class:`CohortState` (cases in id order).

    The first failing case raises; labels that no region claims are refused (:func:`check_unclaimed_labels`);
    foreground classes that none of ``cases`` holds give a ``UserWarning``, as in :func:`run_evaluate` (each scores
    Dice 1 in every case and counts in ``dice``). A thin
    call of the engine: :func:`monai_unc.engine.run_cases` in this process alone (``stop_on_error``), with
    :func:`evaluate_files` as the per-case step and the cohort state as the summary step.

    Args:
        cases: the cases' files.
        config: the evaluation options.
        progress: show a progress bar.
        desc: the progress bar's label.
        cache: per-case resume folder (:func:`evaluate_shard`), or None.

    Returns:
        The cohort state (summarise it with :func:`~monai_unc.evaluation.cohort.summarize`).

    Raises:
        ValueError: ``cases`` is empty, labels that no region claims, or cases without a map and probabilities beside
            cases with them (:func:`~monai_unc.evaluation.rows.check_scored_cases`).
        CaseError: a case cannot be read, has another number of classes or no label in ``config.shifts``.
    """
    config.validate()
    _check_shift_cases(cases, config)
    check_products(cases, config)
    # before any work, as run_evaluate (check_measure_options); found by review 61: this API path evaluated a case with
    # a segmentation alone beside scored cases and referred it first as an undefined score, without a word
    check_scored_cases([(files.case_id, has_score_source(files)) for files in cases])
    check_probability_cases(cases, config)  # one case without the others' probabilities: named (review 63)

    def cohort(run: CohortRun) -> CohortState | None:
        results = [_as_tuple(r) for r in run.results]
        check_unclaimed_labels(results, config)
        # as run_evaluate: the cases' classes that none of them holds (found by hostile review: this API path, the
        # one of sharded evaluations, scored them Dice 1 in every case without the warning)
        _warn_absent_classes(results, config)
        return assemble_state(results, config.n_fine_bins, regions=_regions(config))

    run = run_cases(list(cases), lambda f: _evaluate_record(f, config), command="monai-unc evaluate",
                    ctx=DistContext(), cache=None if cache is None else case_cache(cache, config), summarize=cohort,
                    progress=progress, desc=desc, stop_on_error=True)
    if run.summary is None:
        raise ValueError("no case to evaluate")
    return run.summary


def _regions(config: EvaluationConfig) -> dict[str, list[int]] | None:
    config.validate()  # parses the spec
    return None if config.regions is None else {k: list(v) for k, v in dict(config.regions).items()}


def run_evaluate(
    labels: str | os.PathLike,
    predictions: str | os.PathLike,
    output: str | os.PathLike,
    config: EvaluationConfig,
    *,
    layout: str = "monai-unc",
    uncertainty: str | os.PathLike | None = None,
    images: str | os.PathLike | None = None,
    measures: Iterable[str] | None = None,
    seg_suffix: str | None = None,
    probs_suffix: str | None = None,
    allow_missing: bool = False,
    allow_missing_labels: bool = False,
    progress: bool = False,
    resume: bool = True,
    dist: Any = None,
    on_failure: Any = None,
) -> tuple[CohortState | None, dict[str, Any], dict[str, Path]]:
    """Match, evaluate, summarise and write: the whole of ``monai-unc evaluate``.

    It runs on one process or on every rank of a process group (``torchrun``; see docs/distributed.md).

    Every rank matches the cases (they must agree), evaluates its shard (:func:`monai_unc.engine.shard`:
    sorted case ids, round-robin) and, with ``resume``, saves each case's row and histogram under
    ``<output>/state/cases/`` (a rerun reuses cases whose inputs and per-case options are unchanged, see
    :func:`case_fingerprint`). The per-case results are gathered to rank 0, which adds them in case-id order
    (:func:`assemble_state`, so every cohort number equals the single-process one bit for bit), summarises and writes
    ``metrics.csv`` / ``summary.json`` / ``state/``; the summary and paths are broadcast.

    A case that raises does not stop the others: ``on_failure(CaseFailure)`` is called on its rank (default: one
    stderr line with the case id), rank 0 writes ``failures.json`` instead of the cohort files, and every rank raises
    :class:`~monai_unc.engine.CasesFailed` (a ``CaseError``) at the end; the finished cases stay saved, so the
    same call resumes after the bad cases are fixed. Errors before the per-case loop (bad folders, options) raise
    on every rank. A rank about to write its first derived map (``<output>/maps``) removes an earlier run's cohort
    files first: a run stopped before its summary step leaves no earlier summary beside its maps.

    The cohort is the cases with both a label and a prediction (:func:`monai_unc.io.match_cases`): a labelled
    case without prediction and a predicted case without label are errors before any work, unless
    ``allow_missing`` / ``allow_missing_labels`` (then a ``UserWarning`` lists the cases left out, on rank 0 only).
    ``labels`` may not be ``predictions`` (:func:`monai_unc.io.check_reference_folder`: every prediction would be its
    own label), nor a case's image its label or prediction (:func:`~monai_unc.io.match_cases`). The state records
    the case files as absolute paths (earlier versions: as given, relative to the working directory of the run).

    Args:
        labels: folder of the reference label maps.
        predictions: folder of the segmentations and/or probabilities (:data:`monai_unc.io.LAYOUTS`).
        output: the evaluation folder (created if missing).
        config: the evaluation options.
        layout: ``"monai-unc"`` or ``"nnunet"``: the file naming of ``predictions``.
        uncertainty: folder of ``<case>_<measure>.<ext>`` maps (default from the layout).
        images: folder of the input images (QU-BraTS brain mask, overlays), or None.
        measures: the measures whose maps to read (default: every one found for the first case; an empty list reads
            no map, as in :func:`monai_unc.io.match_cases`: the scores then come from the probabilities).
        seg_suffix: overrides the layout's suffix of the segmentations.
        probs_suffix: overrides the layout's suffix of the probabilities.
        allow_missing: leave out labelled cases without a prediction or map (a warning) instead of refusing.
        allow_missing_labels: leave out predicted cases without a label (a warning) instead of refusing.
        progress: show a progress bar.
        resume: keep and reuse per-case states (``False``: evaluate every case, save nothing per case).
        dist: a :class:`~monai_unc.engine.DistContext` (default :func:`~monai_unc.engine.get_dist_context`,
            which joins the initialised process group or creates one from torchrun's environment; it stays up).
        on_failure: called with a :class:`~monai_unc.engine.CaseFailure` for each failing case (default: one
            stderr line).

    Returns:
        ``(state, summary, paths)``: the :class:`CohortState` (None on ranks other than 0), the summary
        (:func:`~monai_unc.evaluation.cohort.summarize`) and ``{"metrics", "summary", "state"}`` paths.

    Raises:
        CasesFailed: one or more cases failed (``failures.json`` is written instead of the cohort files).
        ValueError: bad folders or options, or unmatched cases without ``allow_missing`` / ``allow_missing_labels``.
    """
    ctx = dist if dist is not None else get_dist_context()
    return _run_evaluate(ctx, Path(output), config, resume, progress, on_failure, dict(
        labels=labels, predictions=predictions, layout=layout, uncertainty=uncertainty, images=images,
        measures=None if measures is None else list(measures), seg_suffix=seg_suffix, probs_suffix=probs_suffix,
        allow_missing=allow_missing, allow_missing_labels=allow_missing_labels,
    ))  # fmt: skip


def _rank_agreement(cases: Sequence[CaseFiles], config: EvaluationConfig) -> dict[str, Any]:
    """What every rank of an evaluation must have in common besides the case ids (``run_cases``' ``agree``).

    The per-case options (:func:`case_config_fingerprint`), the shift labels and the names of each case's files
    (:func:`~monai_unc.io.case_files_digest`: another ``--measures``, ``--layout`` or suffix reads other files).
    """
    shifts = None if config.shifts is None else sorted((str(k), str(v)) for k, v in dict(config.shifts).items())
    return {**case_config_fingerprint(config),
            "shift labels": hashlib.sha256(json.dumps(shifts).encode()).hexdigest(),
            "input files": case_files_digest(cases)}


def _absolute_files(files: CaseFiles) -> CaseFiles:
    """The case's files as absolute paths (symbolic links kept: a link's name may carry the file's format)."""
    def a(p: Path | None) -> Path | None:
        return None if p is None else Path(p).absolute()

    return CaseFiles(files.case_id, Path(files.label).absolute(), a(files.seg), a(files.probs),
                     {m: tuple(Path(x).absolute() for x in p) if isinstance(p, tuple) else Path(p).absolute()
                      for m, p in files.maps.items()}, a(files.image))


def _check_seg_options(cases: Sequence[CaseFiles], config: EvaluationConfig) -> None:
    """``seg_label_values`` / ``seg_regions`` say how to read labels given as DICOM SEG: refused where no label is one.

    Found by hostile testing: ``--seg-label-values 1,2`` with NIfTI labels ran and exited 0, the option unused.
    """
    given = [name for name, value in (("seg_label_values", config.seg_label_values),
                                      ("seg_regions", config.seg_regions)) if value]
    if given and not any(is_seg_label(c.label) for c in cases):
        raise parameter_error(ValueError(f"{given[0]} reads labels given as DICOM SEG (<case>.dcm), but no label of "
                                         "the cohort is one"), given[0])


def _run_evaluate(
    ctx: Any, output: Path, config: EvaluationConfig, resume: bool, progress: bool, on_failure: Any,
    match_kwargs: dict[str, Any],
) -> tuple[CohortState | None, dict[str, Any], dict[str, Path]]:
    def listing() -> list[CaseFiles]:
        config.validate()
        check_output_kind(output, "evaluate", command_output_markers())  # not another command's folder
        check_reference_folder(match_kwargs["labels"], match_kwargs["predictions"])  # no prediction its own label
        with warnings.catch_warnings(record=True) as matching:
            warnings.simplefilter("always")
            try:
                # a region evaluation reads maps written one file per region too (<case>_<measure>_<region>; the
                # spec parsed by validate above: review 61)
                cases = match_cases(**match_kwargs, regions=None if config.regions is None else list(config.regions))
            except CaseError:  # files missing in a folder another run is writing: say that first
                check_finished_predictions(match_kwargs["predictions"], match_kwargs["layout"], ())
                raise
        for w in matching:  # every rank matches the same files: rank 0 alone reports the cases left out
            if ctx.is_main or not issubclass(w.category, UserWarning):
                reemit_warning(w)
        # and summary.json lists them (found by hostile review 60: the cases --allow-missing / --allow-missing-labels
        # left out were said on stderr alone, so summary.json and the report gave the cohort's numbers without a word
        # of the labelled cases missing from it)
        listed["matching"] = [str(w.message) for w in matching if issubclass(w.category, UserWarning)]
        # absolute paths, as the state records them: report and triage read them from any working directory
        cases = [_absolute_files(c) for c in cases]
        # an infer run still writing, interrupted or of two settings: refused before any work (the rule too)
        check_finished_predictions(match_kwargs["predictions"], match_kwargs["layout"], [c.case_id for c in cases],
                                   match_kwargs.get("uncertainty"))
        _check_shift_cases(cases, config)
        config.check_calibration_cases([c.case_id for c in cases])  # before any work, not after
        _check_seg_options(cases, config)
        # the products' refusals (e.g. probabilities they need, named with the file and how to make it) first: more
        # specific than --num-classes for segmentations alone, which a product needing probabilities cannot use
        check_products(cases, config, inputs)
        check_measure_options(cases, config)  # --measure / --score without maps: one refusal, not one per case
        check_class_count(cases, config)  # --num-classes / --class-names against the probabilities, likewise
        check_recorded_regions(match_kwargs["predictions"], match_kwargs["layout"], config.regions)
        # compared at the end: another run that writes the predictions after these checks (found by hostile testing)
        listed["cases"], listed["inputs"] = cases, input_signatures(cases, match_kwargs["predictions"])
        return cases

    listed: dict[str, Any] = {}  # the cases and their input signatures, as listed (check_inputs_unchanged)

    cohort: dict[str, CohortState] = {}  # rank 0: the assembled state, returned (not broadcast)
    #: what a product may check or record (e.g. the fingerprint of the predictions a rule is fitted on)
    inputs = {k: match_kwargs[k] for k in ("predictions", "layout", "uncertainty", "probs_suffix")}

    def finish(run: CohortRun) -> tuple[dict[str, Any], dict[str, Path]]:
        late: list[tuple[str, BaseException]] = []  # a number of classes other than the cohort's
        results = [_as_tuple(r) for r in run.results]
        try:
            # the cases read are those listed: no other run wrote the predictions meanwhile (one version of each)
            check_inputs_unchanged(listed["inputs"], listed["cases"], match_kwargs["predictions"], "monai-unc evaluate")
            check_unclaimed_labels(results, config)
        except ValueError:
            stale(run)
            raise
        absent = _warn_absent_classes(results, config)
        state = assemble_state(results, config.n_fine_bins, late, regions=_regions(config))
        if late:  # each named with the rank that evaluated it, not rank 0 that found it out (found by review 66)
            ran = dict(zip(run.cases, run.ranks))
            raise CasesFailed([CaseFailure(c, ran.get(c, ctx.rank), error_line(e)) for c, e in late])
        assert state is not None
        cohort["state"] = state

        def outputs() -> tuple[dict[str, Any], dict[str, Path]]:
            stale(run)  # first: a run stopped while writing leaves this run's files or none, never an earlier run's
            # beside this one's (report and triage would read them as one evaluation)
            # the products: fitted on the calibration cases, one summary block each
            with warnings.catch_warnings(record=True) as caught:  # listed in the summary, as summarize lists its own
                warnings.simplefilter("always")
                fitted = fit_products(state.product_states, state.sorted_rows(), config)
            summary = summarize(state, config, fitted=fitted, fit_warnings=[
                str(w.message) for w in keep_user_warnings(caught)] + ([absent] if absent else [])
                + list(listed.get("matching", [])))
            paths = write_evaluation(state, summary, output, config, inputs={
                k: None if match_kwargs[k] is None else os.path.abspath(match_kwargs[k])
                for k in ("labels", "predictions", "uncertainty", "images")} | {"layout": match_kwargs["layout"]})
            # maps/ holds the derived maps of this run's cases only (found by hostile testing: a rerun on other
            # cases, or on predictions with map files of their own, kept an earlier run's derived maps beside them)
            remove_stale_maps(maps, [{"derived": r.derived} for r, _, _ in results])
            rows = state.sorted_rows()
            ids = [str(r["case"]) for r in rows]
            # what a product's own file may record besides the inputs (the referral rule: the calibration cases'
            # rows, image files and number of classes)
            cohort_inputs = {**inputs, "rows": rows, "files": state.files, "num_classes": state.num_classes}
            written = write_artifacts(output, config, fitted, ids, cohort_inputs)
            if "risk_control" in written:  # the key run_evaluate has returned the referral rule under
                paths["rule"] = written["risk_control"]
            files = {str(r.row["case"]): (f, n) for r, f, n in results}
            write_case_files(output, config, written, lambda cid: _load_for_products(files[cid], config), ids)
            paths.update({f"product:{name}": path for name, path in written.items()})
            return summary, paths

        try:
            return outputs()
        except Exception:  # a refusal (e.g. a stratum of a product too small) or a product's error: no earlier run's
            stale(run)  # outputs may pass for this cohort's
            raise

    def stale(run: CohortRun | None, partial: bool = True) -> None:
        remove_cohort_files(output)  # an earlier run's numbers must not pass for this cohort's
        for path in artifact_paths(output, config).values():  # nor a product's artifact
            path.unlink(missing_ok=True)
        for cls in registered_products():  # nor one of a product an earlier run asked for (the referral rule too)
            (output / (cls.artifact_file or f"{cls.name}.json")).unlink(missing_ok=True)
        remove_case_files(output)  # nor the products' case files
        # nor a killed run's half-written derived map: its private folder in maps/ was removed only by the next write
        # of the same map, which a rerun on other predictions (map files of their own) never makes (found by hostile
        # testing of crash consistency)
        if partial:
            clean_partial_files(output / DERIVED_MAPS_DIR)

    invalidated: list[bool] = []  # whether this process removed an earlier run's cohort outputs (before_write)

    def before_write() -> None:
        """Before this process writes its first derived map: no earlier run's outputs beside it.

        A map written to ``maps/`` replaces an earlier run's map of the same name (a rerun on other predictions, or
        on predictions written again) at once, while the cohort files are replaced at the summary step: a run killed
        in between left the earlier summary with this run's maps, and the report drew them together (found by hostile
        testing). The earlier outputs are removed first (:func:`stale`), on every rank that writes a map (each one
        can be killed); the same command again resumes the finished cases and writes them anew.
        """
        if not invalidated:
            stale(None, partial=False)  # not the partial files of maps another rank is writing now
            invalidated.append(True)

    pack, unpack = record_gather_hooks(CaseResult)
    # absolute, as the case files: a state naming them relative to the working directory of the run had every case
    # of a resumed run started from another directory computed again (found by hostile review 60)
    maps = output.absolute() / DERIVED_MAPS_DIR

    run = run_cases(listing, lambda f: _evaluate_record(f, config, maps, before_write), command="monai-unc evaluate",
                    ctx=ctx,
                    cache=case_cache(output / STATE_DIR / CASES_DIR, config, maps) if resume else None,
                    summarize=finish, on_failed=stale, failures_file=output / "failures.json", pack=pack,
                    unpack=unpack, progress=progress, desc="evaluate", on_failure=on_failure, lock=output,
                    agree=lambda cases: _rank_agreement(cases, config))
    return cohort.get("state"), run.summary[0], run.summary[1]
