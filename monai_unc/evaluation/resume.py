"""Per-case resume state of an evaluation.

A case's row and histogram are saved under ``<output>/state/cases/`` with a fingerprint of everything the row depends
on, and reused by a rerun only while the fingerprint is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from ..engine import CaseCache
from ..engine.records import record_cache_hooks
from ..io import INFER_RECORD, CaseFiles, check_volume_entry, file_sha256, is_seg_label, volume_files
from .case import CaseResult
from .config import UNREPEATABLE, EvaluationConfig, dice_columns
from .rows import DERIVED_MEASURES, derived_map_path

__all__ = ["CASE_FIELDS", "CASES_DIR", "file_signature", "map_signature", "case_fingerprint", "case_config_fingerprint",
           "case_cache", "save_case_state", "load_case_state", "input_signatures", "check_inputs_unchanged",
           "map_digest_hooks"]

#: fields of :class:`EvaluationConfig` that :func:`evaluate_case` reads (the per-case resume state is reused only
#: while they, the case's shift label and its input files are unchanged); keep in sync with evaluate_case
CASE_FIELDS = ("measure", "n_bins", "min_bin_count", "patch_size", "spatial", "num_classes", "class_names",
               "regions", "case_metric_names")

CASES_DIR = "cases"

_CASE_FORMAT = 5  # 2: the 1 - max p map is named one_minus_max_prob (was max_softmax); 3: one record per case;
# 4: the row has expected_dice (the referral rule records it for the expected-Dice interval); 5: expected_dice of
# classes is the mean over the classes (was the merged foreground), and a region the segmentation does not hold scores
# prod (1 - p) (was 0): rows of format 4 are computed again, so that no evaluation (nor the rule it certifies, which
# records them as "class_mean" / "region_mean") mixes the two; both changes came in one release, so one format


def file_signature(path: Path | None) -> list[Any] | None:
    """``[resolved path, size, mtime_ns, ctime_ns, inode]`` of a file: what resume checks.

    A folder (a DICOM series, :func:`monai_unc.io.dicom_series_folders`) gives ``[resolved path, number of files,
    sha256 of its files' signatures, ctime_ns, inode]``. A header whose voxels lie in other files (a NIfTI pair's
    ``.hdr``, a MetaImage ``.mhd``: :func:`monai_unc.io.volume_files`) has the signatures of those files appended.

    ctime and inode are part of it so that a copy with a preserved mtime (``cp -p``, ``rsync -a``) still differs.

    Args:
        path: the file (None for an absent input).

    Returns:
        The signature as a JSON-ready list, or None when ``path`` is None.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CaseError: ``path`` is a symbolic link to nothing or a folder named like a volume file
            (:func:`monai_unc.io.check_volume_entry`).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     p = Path(d) / "a.txt"
        ...     _ = p.write_text("abc")
        ...     sig = file_signature(p)
        >>> len(sig), sig[1], file_signature(None)
        (5, 3, None)
    """
    if path is None:
        return None
    check_volume_entry(path)  # a link to nothing, a folder x.nii.gz: the case fails with the reason
    st = Path(path).stat()  # ctime and inode too: a copy with preserved mtime (cp -p, rsync -a) still differs
    if Path(path).is_dir():  # a DICOM series folder: the signatures of its files (a slice edited in place counts)
        files = sorted(f for f in Path(path).iterdir() if f.is_file())
        inner = hashlib.sha256(json.dumps([file_signature(f) for f in files]).encode()).hexdigest()
        return [str(Path(path).resolve()), len(files), inner, int(st.st_ctime_ns), int(st.st_ino)]
    sig = [str(Path(path).resolve()), int(st.st_size), int(st.st_mtime_ns), int(st.st_ctime_ns), int(st.st_ino)]
    data = volume_files(path)[1:]  # a header's data files (NIfTI pair, MetaImage): where the voxels are
    if data:  # found by hostile testing: a label whose .raw was emptied kept its Dice, its .mhd being unchanged
        sig.append([file_signature(f) for f in data])
    return sig


#: the run records of a prediction folder whose settings a command reads with the cases (``infer``,
#: ``nnunet-predict``)
_RUN_RECORDS = (INFER_RECORD, "uncertainty_config.json")


def map_signature(path: Path | tuple[Path, ...]) -> list[Any]:
    """:func:`file_signature` of a case's map (:attr:`~monai_unc.io.CaseFiles.maps`), a list for per-region files.

    Args:
        path: the map's file, or its files one per region.

    Returns:
        The signature, or the list of the files' signatures.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "c1_variance_WT.nii.gz").write_bytes(b"x")
        ...     len(map_signature((Path(d) / "c1_variance_WT.nii.gz",)))
        1
    """
    if isinstance(path, tuple):
        return [file_signature(p) for p in path]
    return file_signature(path)


def _signature_or_none(path: Path) -> list[Any] | None:
    """:func:`file_signature`, None for a file that is gone (or no longer a file a case can read)."""
    try:
        return file_signature(path)
    except (OSError, ValueError):  # CaseError is a ValueError
        return None


def _content_digest(path: Path) -> str | None:
    """The sha256 of what a command reads of a run record, None when it is absent or unreadable.

    For ``infer.json`` its ``settings`` (in canonical JSON): ``infer`` writes the file twice, its settings at the start
    and what the network's outputs turned out to be (``multilabel``, ``regions``) at the end, so an ``infer`` of other
    cases with the same settings, running beside a reader, left the record without ``multilabel`` meanwhile (found by
    hostile review: ``evaluate`` refused its untouched cases as "written again"); the version fields name the last
    run, not how the cases were made (each case's record does). Any other record (``uncertainty_config.json``, written
    once, whole), or an ``infer.json`` without a ``settings`` object: the bytes.
    """
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    if path.name == INFER_RECORD:
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("settings"), dict):
            # tagged: never the digest of a record whose bytes happen to read as these settings
            raw = b"settings " + json.dumps(doc["settings"], sort_keys=True, allow_nan=True).encode()
    return hashlib.sha256(raw).hexdigest()


def input_signatures(cases: Sequence[CaseFiles], predictions: str | os.PathLike | None = None) -> dict[str, Any]:
    """The :func:`file_signature` of every input file of the cases, and of the run record of their prediction folder.

    What :func:`check_inputs_unchanged` compares at the end of a run: taken when the cases are listed, before any is
    read. The files are each case's label, segmentation, probabilities, image and maps; the run record is the
    ``infer.json`` (or nnU-Net's ``uncertainty_config.json``) of ``predictions``, whose settings a command reads into
    its outputs (the fingerprint of a rule, of a triage): what is read of it (``infer.json``'s settings), so that a run
    of the same settings that only adds other cases to the folder changes nothing, while it runs or once it ended.

    Args:
        cases: the cases of the run.
        predictions: the prediction folder (None: no run record).

    Returns:
        ``{case id: {role: signature}}``, and ``{"": {record name: sha256 of what is read of it}}`` for the run records
        (JSON-ready; None for a file that is absent).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "c1_seg.nii.gz").write_bytes(b"x")
        ...     sig = input_signatures([CaseFiles("c1", Path(d) / "c1_seg.nii.gz")], d)
        >>> sorted(sig), sorted(sig["c1"]), sig[""]["infer.json"]
        (['', 'c1'], ['label'], None)
    """
    out: dict[str, Any] = {}
    for c in cases:
        roles = {"label": c.label, "segmentation": c.seg, "probabilities": c.probs, "image": c.image,
                 **{f"map {m}" + (f" {i}" if isinstance(f, tuple) else ""): p  # per-region files: each
                    for m, f in sorted(c.maps.items()) for i, p in enumerate(f if isinstance(f, tuple) else (f,))}}
        out[c.case_id] = {role: _signature_or_none(Path(p)) for role, p in roles.items() if p is not None}
    if predictions is not None:
        folder = Path(predictions)
        out[""] = {name: _content_digest(folder / name) for name in _RUN_RECORDS}
    return out


def check_inputs_unchanged(before: Mapping[str, Any], cases: Sequence[CaseFiles],
                           predictions: str | os.PathLike | None = None, command: str = "monai-unc evaluate") -> None:
    """Refuse a run whose input files were written again while it read them (another run into the input folder).

    ``evaluate``, ``triage`` and the commands of the cohort products check their predictions once, when they list
    the cases (another ``infer`` holding the folder, unfinished cases, two settings). A run started into the folder
    after that check
    (``infer --overwrite`` with other settings, an nnU-Net rerun) replaced the files of some cases while they were
    read: the outputs mixed the cases of two runs and named the settings of the later one (found by hostile testing:
    a certified referral rule fitted on three cases of ``--samples 2`` and three of ``--samples 3``, exit 0). At the
    end of the run, before its cohort files are written, the signatures of :func:`input_signatures` are taken again
    and compared with those of the listing.

    Args:
        before: :func:`input_signatures` of the cases when they were listed.
        cases: the cases of the run.
        predictions: the prediction folder (its run record is compared too).
        command: the command's name, for the message.

    Raises:
        ValueError: one line naming the cases (or the run record) whose files changed and the remedy: the command
            again once the other run has ended (the changed cases are computed again; the others are reused).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     seg = Path(d) / "c1_seg.nii.gz"
        ...     _ = seg.write_bytes(b"x")
        ...     cases = [CaseFiles("c1", seg)]
        ...     before = input_signatures(cases, d)
        ...     check_inputs_unchanged(before, cases, d)  # nothing changed: no error
        ...     seg.unlink()
        ...     _ = seg.write_bytes(b"yy")
        ...     try:
        ...         check_inputs_unchanged(before, cases, d)
        ...     except ValueError as e:
        ...         print(str(e)[:46])
        the input files of case(s) ['c1'] were written
    """
    now = input_signatures(cases, predictions)
    changed = sorted(k for k in set(before) | set(now) if k and before.get(k) != now.get(k))
    records = sorted(n for n in set(before.get("", {})) | set(now.get("", {}))
                     if before.get("", {}).get(n) != now.get("", {}).get(n))
    if not changed and not records:
        return
    what = []
    if changed:
        shown = f"{changed[:5]}" + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        what.append(f"the input files of case(s) {shown}")
    if records:
        what.append(f"{' and '.join(str(Path(predictions) / n) for n in records)}" if predictions is not None
                    else "the run record")
    raise ValueError(f"{' and '.join(what)} were written again while {command} read them (another run into "
                     f"{'the input folder' if predictions is None else Path(predictions)}, e.g. infer --overwrite): "
                     "its outputs would mix two versions of the cases (no cohort file written); run the command "
                     "again once that run has ended (the changed cases are computed again)")


def case_fingerprint(files: CaseFiles, config: EvaluationConfig) -> dict[str, Any]:
    """What a case's metric row depends on, as JSON data.

    That is the package version, the per-case options (:data:`CASE_FIELDS`, fine bins, the region spec, the
    products' case options, the QU-BraTS grid and the DICOM SEG segments' label values when set), the case's shift
    label and the :func:`file_signature` of its label, segmentation, probabilities and maps, and with regions or a
    DICOM SEG label of its image too (the QU-BraTS brain mask; the series folder the SEG is read on), and of the files
    the products read themselves
    (:meth:`~monai_unc.product.CohortProduct.case_input_files`).

    Args:
        files: the case's files.
        config: the evaluation options.

    Returns:
        The fingerprint (a JSON round trip of it, so that it compares equal to one read back from disk).

    Raises:
        FileNotFoundError: an input file of the case does not exist.
    """
    fp = {
        "format": _CASE_FORMAT,
        "version": __version__,
        "config": case_config_fingerprint(config),
        "shift": None if config.shifts is None else config.shifts.get(files.case_id, ""),
        "inputs": {
            "label": file_signature(files.label),
            "seg": file_signature(files.seg),
            "probs": file_signature(files.probs),
            "maps": {m: map_signature(p) for m, p in sorted(files.maps.items())},
        },
    }
    if config.products:  # the files a product reads itself (CohortProduct.case_input_files)
        own = {p.name: {k: file_signature(Path(v)) for k, v in sorted(p.case_input_files(files.case_id).items())}
               for p in config.products}
        if any(own.values()):
            fp["inputs"]["products"] = {k: v for k, v in own.items() if v}
    # the QU-BraTS brain mask; the series a DICOM SEG label is read on (its grid, and whether the SEG is of it: found
    # by hostile review 58, a class evaluation resumed with --images of another series kept the rows read on the first)
    if config.regions is not None or is_seg_label(files.label):
        fp["inputs"]["image"] = file_signature(files.image)
    return json.loads(json.dumps(fp))


def case_config_fingerprint(config: EvaluationConfig) -> dict[str, Any]:
    """The per-case options of an evaluation, as JSON data: the ``config`` entry of :func:`case_fingerprint`.

    That is :data:`CASE_FIELDS`, the fine bins, and where set the DICOM SEG segments' label values, the products
    (name, class, case options), a QU-BraTS grid other than the default and the region spec. A case's row depends on
    them (and on its files and shift label), so the ranks of a ``torchrun`` job must agree on them: a rank started
    with another ``--patch-size`` would put rows of other numbers into the cohort (:func:`~monai_unc.evaluation.
    run_evaluate` compares them across ranks).

    Args:
        config: the evaluation options.

    Returns:
        The options (a JSON round trip of them).

    Example:
        >>> from monai_unc.evaluation import EvaluationConfig
        >>> case_config_fingerprint(EvaluationConfig(patch_size=5))["patch_size"]
        5
    """
    out: dict[str, Any] = {**{k: getattr(config, k) for k in CASE_FIELDS}, "n_fine_bins": config.n_fine_bins}
    if config.seg_label_values is not None:  # read into the label map (load_evaluation_case); only when given, so
        # that the fingerprint of an evaluation without it is unchanged
        out["seg_label_values"] = [int(v) for v in config.seg_label_values]
    if config.seg_regions:  # likewise: the SEG's segments read as the regions
        out["seg_regions"] = True
    if config.ignore_label is not None:  # likewise: the voxels left out
        out["ignore_label"] = int(config.ignore_label)
    if config.products:  # only when asked: the fingerprint of an evaluation without products is unchanged
        # in order (it is the order of the columns), with each product's class: another implementation under the
        # same name is another product
        out["products"] = [[p.name, f"{type(p).__module__}.{type(p).__qualname__}", p.case_options()]
                           for p in config.products]
    if config.qu_brats_grid != "numpy2":  # only when not the default: earlier fingerprints stay valid
        out["qu_brats_grid"] = config.qu_brats_grid
    names = config.class_names
    if config.regions is None and names and not all(str(n).isascii() for n in names):
        # the class columns of a name with non-ASCII characters are named otherwise than by earlier versions
        # ("Ödem": dice_ödem, not dice_dem): such a case's saved row is computed again, not mixed into the new
        # columns; only then, so that the fingerprint of ASCII names is unchanged
        out["class_columns"] = dice_columns(len(names), names)
    if config.regions is not None:  # as [name, labels] pairs: the channel order matters (dicts compare unordered)
        out["regions"] = [[k, list(v)] for k, v in dict(config.regions).items()]
        if not all(str(k).isascii() for k in dict(config.regions)):
            # likewise a region's columns ("Ödem": dice_Ödem, not dice_dem as earlier versions named them)
            out["region_columns"] = dice_columns(0, regions=list(dict(config.regions)))
    return json.loads(json.dumps(out))


def _attach_files(result: CaseResult, files: CaseFiles | None) -> CaseResult:
    """A resumed result with the case's current files (the listing's, not the saved copy).

    The maps evaluate derived for the case are kept when the listing has none; when they are gone, a
    ``FileNotFoundError`` makes the cache compute the case again.
    """
    missing = [p for p in result.derived.values() if not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(f"derived maps are gone: {missing[:2]}")
    if files is not None:
        result.files = files
    return result


def map_digest_hooks(dump: Callable[[Path, str, Any], dict[str, Any]],
                     restore: Callable[[Path, dict[str, Any], Any], Any],
                     derived_of: Callable[[dict[str, Any]], Mapping[str, Any]],
                     folder: str | os.PathLike | None = None,
                     digests_of: Callable[[dict[str, Any]], Mapping[str, str]] | None = None,
                     ) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``dump`` / ``restore`` hooks of a case cache that also record, and check, the sha256 of each derived map.

    The one check of ``evaluate``'s and ``triage``'s resume state (:class:`~monai_unc.engine.CaseCache`).

    Both commands write the maps they derive from the probabilities of a case without map files to ``<output>/maps``
    and name them in the saved state (``derived``: ``{measure: file}``); the report and the triage page draw them
    beside the case's row. Found by review: a map edited by hand or replaced by another case's was kept on a resume,
    as only the state's JSON was digested. ``dump`` adds ``maps_sha256`` (``{file as named: sha256 hex}``) to the
    fields of the wrapped ``dump``; ``restore`` raises, so that the cache computes the case again:

    - ``KeyError``: the state records no ``maps_sha256`` (written by an earlier version), or its files differ from
      those ``derived_of`` names (``derived_of`` may raise ``KeyError`` / ``TypeError`` itself for a state that names
      no maps);
    - ``FileNotFoundError``: a named map is gone, or its sha256 differs (edited or replaced).

    The format on disk is that both commands wrote before (no resume version changes): the keys of ``maps_sha256``
    are the names as recorded (``evaluate``: the map's path; ``triage``: its file name in ``folder``).

    Args:
        dump: ``dump(folder, case_id, result) -> dict`` of the result's JSON fields (e.g.
            :func:`~monai_unc.engine.records.record_cache_hooks`).
        restore: ``restore(folder, doc, item) -> result``, called once the maps are checked.
        derived_of: ``derived_of(doc) -> {measure: file}``: the derived maps a state's JSON fields name (the fields
            ``dump`` returned, or those read back); ``{}`` for a case that has map files of its own.
        folder: the folder the names are relative to (``triage``: ``<output>/maps``), or None: the names are paths.
        digests_of: ``digests_of(doc) -> {file as named: sha256 hex}`` of the maps whose digest the result already
            carries (``evaluate``'s record: taken when the maps were written), which ``dump`` takes instead of
            reading those files again; None: ``dump`` reads every map.

    Returns:
        ``(dump, restore)``.

    Example:
        >>> import tempfile
        >>> from monai_unc.engine import CaseCache
        >>> tmp = tempfile.TemporaryDirectory()
        >>> d = Path(tmp.name)
        >>> _ = (d / "a_map.nii.gz").write_bytes(b"map")
        >>> hooks = map_digest_hooks(lambda f, c, r: {"row": r}, lambda f, doc, item: doc["row"],
        ...                          lambda doc: doc["row"]["derived"], folder=d)
        >>> cache = CaseCache(d / "state", dump=hooks[0], restore=hooks[1])
        >>> _ = cache.save("a", {"derived": {"pe": "a_map.nii.gz"}})
        >>> cache.load("a")
        {'derived': {'pe': 'a_map.nii.gz'}}
        >>> _ = (d / "a_map.nii.gz").write_bytes(b"edited")
        >>> cache.load("a") is None  # computed again
        True
        >>> tmp.cleanup()
    """
    base = None if folder is None else Path(folder)

    def files(doc: dict[str, Any]) -> dict[str, Path]:
        named = derived_of(doc)
        if not isinstance(named, Mapping):
            raise TypeError(f"the saved state of case {doc.get('case')!r} names its derived maps as "
                            f"{type(named).__name__}, not an object")
        return {str(v): Path(str(v)) if base is None else base / str(v) for v in named.values()}

    def dump_with_maps(state_folder: Path, case_id: str, result: Any) -> dict[str, Any]:
        doc = dump(state_folder, case_id, result)
        known = {} if digests_of is None else digests_of(doc)
        doc["maps_sha256"] = {name: known[name] if name in known else file_sha256(p) for name, p in files(doc).items()}
        return doc

    def restore_checking_maps(state_folder: Path, doc: dict[str, Any], item: Any) -> Any:
        digests = doc["maps_sha256"]  # KeyError for a state without them: computed again
        named = files(doc)
        if not isinstance(digests, dict) or set(digests) != set(named):
            raise KeyError(f"the saved state of case {doc.get('case')!r} does not record the digests of its derived "
                           "maps")
        gone = [n for n, p in named.items() if not p.is_file()]
        if gone:
            raise FileNotFoundError(f"derived maps are gone: {gone[:2]}")
        changed = [n for n, p in named.items() if file_sha256(p) != digests[n]]
        if changed:
            raise FileNotFoundError(f"derived maps changed since they were written: {changed[:2]}")
        return restore(state_folder, doc, item)

    return dump_with_maps, restore_checking_maps


def _record_derived(doc: dict[str, Any]) -> Mapping[str, Any]:
    """The derived maps an evaluation state names: its record's ``derived`` (``{}``: the case has map files)."""
    record = doc["record"]
    if not isinstance(record, dict):
        raise TypeError(f"the saved record of case {doc.get('case')!r} is not an object")
    return record.get("derived") or {}


def _record_derived_digests(doc: dict[str, Any]) -> dict[str, str]:
    """``{path: sha256 hex}`` of the derived maps whose digest an evaluation record carries.

    Its ``derived_sha256``, taken when evaluate wrote the maps: the state's ``maps_sha256`` need not read them again.
    """
    record = doc["record"]
    digests = record.get("derived_sha256") or {}
    return {str(path): str(digests[m]) for m, path in (record.get("derived") or {}).items() if m in digests}


def _resumable(restore: Callable[[Path, dict[str, Any], Any], Any]) -> Callable[[Path, dict[str, Any], Any], Any]:
    """``restore`` refusing a state saved under a case metric whose name no run can repeat.

    Such a name ends in :data:`~monai_unc.evaluation.config.UNREPEATABLE` (a bound argument whose text holds a memory
    address): it cannot tell its argument from another one, so the state is refused (``KeyError``: the case is
    computed again) whatever the current fingerprint.
    """

    def restore_repeatable(state_folder: Path, doc: dict[str, Any], item: Any) -> Any:
        config = (doc.get("fingerprint") or {}).get("config") or {}
        names = config.get("case_metric_names") if isinstance(config, dict) else None
        if isinstance(names, dict) and any(str(n).endswith(UNREPEATABLE) for n in names.values()):
            raise KeyError(f"the saved state of case {doc.get('case')!r} was computed with a case metric whose "
                           "arguments no run can repeat")
        return restore(state_folder, doc, item)

    return restore_repeatable


def _same_maps(saved: Mapping[str, str], expected: Mapping[str, str]) -> bool:
    """Whether the derived maps a state names are those a run writing them to the expected paths needs.

    A path is the same spelled the same, or where both name one existing file (the output folder reached through a
    symbolic link or ``..``: :func:`os.path.samefile`).
    """
    if set(saved) != set(expected):
        return False
    for measure, path in expected.items():
        if saved[measure] == path:
            continue
        try:
            if not os.path.samefile(saved[measure], path):
                return False
        except OSError:  # a file that does not exist (or cannot be read): not the same
            return False
    return True


def _with_derived_maps(restore: Callable[[Path, dict[str, Any], Any], Any],
                       maps: Path) -> Callable[[Path, dict[str, Any], Any], Any]:
    """``restore`` refusing a state that does not name the derived maps a run writing them to ``maps`` needs.

    A case without map files of its own but with probabilities has its maps derived and written to ``maps``
    (``<output>/maps``: :func:`~monai_unc.evaluation.rows.derived_map_path`, one per
    :data:`~monai_unc.evaluation.rows.DERIVED_MEASURES`); a state saved without them (by
    :func:`~monai_unc.evaluation.runner.evaluate_shard`, which writes no map, or naming another folder's) is refused
    (``KeyError``: the case is computed again, and its maps written), never reused without its maps. A map path is
    the same where it is spelled the same or names the same existing file (the output folder reached through a
    symbolic link or ``..``: :func:`_same_maps`).
    """
    def restore_with_maps(state_folder: Path, doc: dict[str, Any], item: Any) -> Any:
        if isinstance(item, CaseFiles) and not item.maps and item.probs is not None:
            expected = {m: str(derived_map_path(maps, item.case_id, m)) for m in DERIVED_MEASURES}
            saved = _record_derived(doc)
            if not isinstance(saved, Mapping) or not _same_maps({str(k): str(v) for k, v in saved.items()}, expected):
                raise KeyError(f"the saved state of case {item.case_id!r} does not name the maps derived into {maps}")
        return restore(state_folder, doc, item)

    return restore_with_maps


def _with_map_digests(restore: Callable[[Path, dict[str, Any], Any], Any]
                      ) -> Callable[[Path, dict[str, Any], Any], Any]:
    """``restore`` giving a resumed result the sha256 of its derived maps where its record has none.

    A record written before ``derived_sha256`` was kept gets those of the state's ``maps_sha256``, which
    :func:`map_digest_hooks` checked against the files before.
    """

    def restore_with_digests(state_folder: Path, doc: dict[str, Any], item: Any) -> Any:
        result = restore(state_folder, doc, item)
        digests = doc.get("maps_sha256")
        if isinstance(result, CaseResult) and result.derived and not result.derived_sha256 and isinstance(digests,
                                                                                                        dict):
            result.derived_sha256 = {m: str(digests[p]) for m, p in result.derived.items() if p in digests}
        return result

    return restore_with_digests


def _hooks(maps: str | os.PathLike | None = None) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The ``dump`` / ``restore`` hooks of an evaluation's per-case states (``maps``: the folder of derived maps)."""
    dump, restore = map_digest_hooks(*record_cache_hooks(CaseResult, _attach_files), _record_derived,
                                     digests_of=_record_derived_digests)
    restore = _with_map_digests(restore)
    if maps is not None:
        restore = _with_derived_maps(restore, Path(maps))
    return dump, _resumable(restore)


def case_cache(folder: str | os.PathLike, config: EvaluationConfig,
               maps: str | os.PathLike | None = None) -> CaseCache:
    """The resume state of an evaluation in ``folder`` (``<output>/state/cases/``).

    It is meant for :func:`monai_unc.engine.run_cases`, keyed by :func:`case_fingerprint`; a result is a
    :class:`CaseResult` (with its files and number of classes), saved as its record (:meth:`CaseResult.to_record`):
    ``<case>.npz``, every state of the case (histograms, the products' states), then ``<case>.json``
    (row, warnings, fingerprint; written last, it marks the case finished). A state saved under a case metric whose
    name ends in :data:`~monai_unc.evaluation.config.UNREPEATABLE` (a bound argument no run can repeat) is never
    reused, and building the cache warns once naming each such metric (its cases are computed again on every run).

    Which derived maps a case's state names is part of what makes it reusable: with ``maps`` (the folder the run
    writes the maps derived from the probabilities of a case without map files to, ``<output>/maps`` of
    :func:`~monai_unc.evaluation.run_evaluate`), the state of such a case is reused only when it names exactly those
    maps in that folder (each still there with the sha256 recorded, :func:`map_digest_hooks`); a state saved without
    them (:func:`~monai_unc.evaluation.runner.evaluate_shard`, which writes no map, into the same folder) is computed
    again and its maps written. Without ``maps`` (a run that writes none) a state with or without derived maps is
    reused.

    Args:
        folder: the folder of the per-case states.
        config: the evaluation's options (the per-case ones enter the fingerprint).
        maps: the folder of the derived maps the run writes, or None (it writes none).

    Returns:
        The :class:`~monai_unc.engine.CaseCache`.
    """
    for metric, name in sorted((config.case_metric_names or {}).items()):
        if str(name).endswith(UNREPEATABLE):
            warnings.warn(f"case metric {metric!r} is not resumable: it is a callable object, a bound method or a "
                          "functools.partial whose text holds a memory address (the default repr), so no run can "
                          "tell it from another one, and its cases are computed again on every run; to resume them "
                          "give a function, or a functools.partial of one over plain values (numbers, strings, "
                          "arrays, tensors), or a class with a __repr__ that names its state", UserWarning,
                          stacklevel=2)
    dump, restore = _hooks(maps)
    return CaseCache(folder, lambda files: case_fingerprint(files, config), dump=dump, restore=restore)


def _fixed(folder: str | os.PathLike, fingerprint: Mapping[str, Any]) -> CaseCache:
    """A cache whose every case has the given fingerprint (for :func:`save_case_state`, :func:`load_case_state`)."""
    dump, restore = _hooks()
    return CaseCache(folder, lambda _: fingerprint, dump=dump, restore=restore)


def save_case_state(folder: str | os.PathLike, result: CaseResult, fingerprint: Mapping[str, Any],
                    num_classes: int) -> None:
    """Write a case's result for resuming.

    ``<case>.npz`` (its states) is written first, then ``<case>.json`` (row, warnings, fingerprint), both
    atomically; the JSON, written last, marks the case finished (:func:`case_cache`).

    Args:
        folder: the folder of the per-case states.
        result: the case's result (its ``row["case"]`` names the files).
        fingerprint: the case's :func:`case_fingerprint`.
        num_classes: the case's number of classes (regions), stored with the result.
    """
    saved = CaseResult(**{**result.__dict__, "num_classes": int(num_classes)})
    _fixed(folder, fingerprint).save(str(result.row["case"]), saved, fingerprint)


def load_case_state(folder: str | os.PathLike, case_id: str,
                    fingerprint: Mapping[str, Any]) -> tuple[CaseResult, int] | None:
    """The result saved by :func:`save_case_state`, if it is still valid.

    Args:
        folder: the folder of the per-case states.
        case_id: the case.
        fingerprint: the case's current :func:`case_fingerprint`.

    Returns:
        ``(result, num_classes)``, or None when the state is absent, unreadable or stale (its fingerprint differs
        from ``fingerprint``).
    """
    got = _fixed(folder, fingerprint).load(case_id, fingerprint)
    return None if got is None else (got, int(got.num_classes))
