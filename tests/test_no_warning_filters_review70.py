"""Library code puts no process-wide warning filter around the package's own functions (review 70).

The strata score of the conformal masks (``ConformalStrata.case_score``), ``nnunet-predict``'s case scores
(``record_case_scores``: ``tests/nnunet/test_record_case_scores_warnings_review70.py``) and the report's histogram
plot (``plot_uncertainty_histograms``) ignored every ``UserWarning`` inside ``warnings.catch_warnings()`` to leave
out one warning they say otherwise (an empty prediction's ``fg_mean``, an empty group of cases): process-wide
state, which hid every other warning of the call (and of other threads). They call the functions' cores now
(``scores.case_scores_core``, ``metrics.casewise.uncertainty_histograms_core``). Each test makes a function deep in
the call warn a line of its own, which must reach the caller, and checks that the filters in force there are the
caller's.

The re-emissions of recorded warnings go through one mechanism, ``_utils.reemit_warning`` (the module of the line
that raised it, so a filter naming the module applies); ``warnings.warn_explicit`` without the module was used at
four places.

The last filters: ``image_channel_files`` of a NIfTI pair listed its folder under ``simplefilter("ignore")`` (now
``list_image_cases``' listing without its warnings), ``quality_estimates`` of region outputs ignored a
``RuntimeWarning`` that ``torch.nanmean`` never raises, and ``dicom-export`` of some cases dropped every
``UserWarning`` of the matching (now ``match_cases(..., say_missing=False)``). A scan of the package's code keeps new
filters out (:data:`WARNING_FILTERS_ALLOWED`, each site with its reason).
"""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from monai_unc import scores as scores_module
from monai_unc.evaluation import conformal
from monai_unc.evaluation import runner as evaluation_runner
from monai_unc.evaluation.conformal import ConformalStrata
from monai_unc.io import cases as cases_module
from monai_unc.metrics import casewise, quality
from monai_unc.report.plots import plot_uncertainty_histograms
from monai_unc.scores import case_scores, case_scores_core
from monai_unc.workflows import dicom as dicom_workflow

_OWN = "a warning of a function deep in the call (review 70)"
_PACKAGE = Path(__file__).resolve().parents[1] / "monai_unc"


def _deep_warning(monkeypatch, module, name):
    """``module.name`` warns :data:`_OWN` and records the filters in force each time it is called."""
    real, seen = getattr(module, name), []

    def warning(*args, **kwargs):
        seen.append(list(warnings.filters))
        warnings.warn(_OWN, UserWarning, stacklevel=2)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, warning)
    return seen


def _call(fn):
    """``fn()``, its result and the messages of the warnings it raised; the filters in force at the call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outer = list(warnings.filters)
        out = fn()
    return out, [str(w.message) for w in caught], outer


def _strata(aggregation: str, region: str | None = None) -> ConformalStrata:
    score = f"predictive_entropy_{aggregation}" + ("" if region is None else f"_{region}")
    return ConformalStrata(score, "predictive_entropy", aggregation, region, (0.5,), "fixed", (3, 3), "file", 2)


def _case(seg):
    return SimpleNamespace(case_id="c1", seg=seg, spacing=(1.0,) * seg.ndim, maps={})


@pytest.mark.parametrize("aggregation", ["mean", "fg_mean"])
def test_conformal_case_score_lets_other_warnings_through(monkeypatch, aggregation):
    u = np.linspace(0.0, 1.0, 64).reshape(4, 4, 4)
    monkeypatch.setattr(conformal, "derived_maps", lambda case: {"predictive_entropy": u})
    seen = _deep_warning(monkeypatch, scores_module, "aggregate")
    empty = np.zeros((4, 4, 4), np.uint8)  # an empty prediction: fg_mean undefined
    value, messages, outer = _call(lambda: _strata(aggregation).case_score(_case(empty)))
    assert seen and all(f == outer for f in seen)  # no filter installed around the scores
    assert _OWN in messages, messages
    # the empty prediction: said by the strata (once) when fg_mean is the strata score, by nobody otherwise
    assert not any("empty mask" in m for m in messages), messages
    undefined = [m for m in messages if "is undefined" in m]
    if aggregation == "fg_mean":
        assert np.isnan(value) and len(undefined) == 1
    else:
        assert value == pytest.approx(float(u.mean())) and undefined == []


def test_conformal_region_case_score_lets_other_warnings_through(monkeypatch):
    u = np.stack([np.full((4, 4), 0.25), np.full((4, 4), 0.75)])
    monkeypatch.setattr(conformal, "derived_maps", lambda case: {"predictive_entropy": u})
    seen = _deep_warning(monkeypatch, scores_module, "aggregate")
    seg = np.zeros((4, 4), np.uint8)
    seg[:2] = 1  # region TC (label 2) predicted nowhere: its fg_mean is undefined
    regions = {"WT": [1, 2], "TC": [2]}
    value, messages, outer = _call(lambda: _strata("fg_mean").case_score(_case(seg), regions))
    assert seen and all(f == outer for f in seen)
    assert _OWN in messages, messages
    assert value == 0.25  # the mean over the regions where defined: WT alone
    assert not any("empty mask" in m or "is undefined" in m for m in messages), messages
    tc, messages, _ = _call(lambda: _strata("fg_mean", "TC").case_score(_case(seg), regions))
    assert np.isnan(tc) and [m for m in messages if "is undefined" in m] and _OWN in messages


def test_plot_uncertainty_histograms_lets_other_warnings_through(monkeypatch):
    seen = _deep_warning(monkeypatch, casewise, "case_pair")
    # every case good: the failed group is empty, drawn empty without a warning
    fig, messages, outer = _call(lambda: plot_uncertainty_histograms(np.array([0.1, 0.2, 0.4]),
                                                                     np.array([0.9, 0.95, 0.99]), 0.5, bins=2))
    assert seen and all(f == outer for f in seen)
    assert messages == [_OWN], messages
    bars = [p.get_height() for p in fig.axes[0].patches]
    assert bars == [2.0, 1.0, 0.0, 0.0]  # the good cases' counts, then the empty failed group


def test_case_scores_core_gives_the_numbers_of_case_scores_without_the_warning():
    u = np.linspace(0.0, 1.0, 64).reshape(4, 4, 4)
    seg = np.zeros((4, 4, 4), np.uint8)
    seg[1:3, 1:3, 1:3] = 1
    assert case_scores_core(u, seg, 2) == case_scores(u, seg, 2)
    with pytest.warns(UserWarning, match="empty mask"):
        loud = case_scores(u, 0 * seg, 2)
    quiet, messages, _ = _call(lambda: case_scores_core(u, 0 * seg, 2))
    assert messages == []
    assert np.isnan(quiet["fg_mean"]) and np.isnan(loud["fg_mean"])
    assert (quiet["mean"], quiet["patch_mean"]) == (loud["mean"], loud["patch_mean"])


def test_uncertainty_histograms_says_what_its_core_returns():
    args = ([0.1, 0.2, 0.3, 2.0], [1, 1, 1, 1])
    h, said = casewise.uncertainty_histograms_core(*args, bins=2, range=(0.0, 1.0), density=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loud = casewise.uncertainty_histograms(*args, bins=2, range=(0.0, 1.0), density=False)
    assert [str(w.message) for w in caught] == said and len(said) == 2
    assert [w.filename for w in caught] == [__file__] * 2  # at the caller's line, as before
    assert loud.correct.tolist() == h.correct.tolist() == [3.0, 0.0] and np.isnan(h.incorrect).all()


# ------------------------------------------------------------------------------------------------------------------
# re-emission: one mechanism, which keeps the module of the line that raised the warning


def test_read_warnings_issued_again_keep_their_module_for_the_filters(monkeypatch):
    """A filter naming the module of the line that raised a warning while a case was read applies to the warning
    the evaluation issues again (``warn_explicit`` without the module derived it from the file's path, which no
    module filter matches)."""

    def load(files, config):
        warnings.warn(_OWN, FutureWarning)  # raised at a line of this module
        return "loaded"

    monkeypatch.setattr(evaluation_runner, "load_evaluation_case", load)
    files = SimpleNamespace(case_id="c1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=FutureWarning, module=__name__.replace(".", r"\."))
        assert evaluation_runner._load_recording(files, None) == ("loaded", [])
    assert caught == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        evaluation_runner._load_recording(files, None)
    assert [(w.category, w.filename) for w in caught] == [(FutureWarning, __file__)]


def test_recorded_warnings_are_issued_again_by_one_mechanism():
    """No module of the package calls ``warnings.warn_explicit`` but ``_utils`` (in ``reemit_warning``)."""
    calls = [f"{path.relative_to(_PACKAGE.parent)}:{node.lineno}" for path in sorted(_PACKAGE.rglob("*.py"))
             if "warn_explicit" in (text := path.read_text(encoding="utf-8"))
             for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Attribute) and node.attr == "warn_explicit"]
    assert len(calls) == 1 and calls[0].startswith("monai_unc/_utils.py:"), calls


# ------------------------------------------------------------------------------------------------------------------
# the last filters (review 70, third part): quality_estimates of region outputs, list_image_cases' callers,
# dicom-export's matching, and a scan that keeps new ones out


def test_region_quality_mean_of_all_nan_regions_takes_no_filter(monkeypatch):
    """The mean over the regions (``torch.nanmean``) of a row NaN in every region is NaN without any warning, so
    ``quality_estimates`` puts no filter around it (it ignored a ``RuntimeWarning`` that never came)."""
    real, seen = torch.nanmean, []

    def nanmean(cols, dim):  # every region NaN: the case that the filter was for
        seen.append(list(warnings.filters))
        return real(torch.full_like(cols, float("nan")), dim=dim)

    monkeypatch.setattr(quality.torch, "nanmean", nanmean)
    pred = torch.linspace(0.05, 0.95, 32).reshape(1, 2, 4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning of the mean would fail the call
        outer = list(warnings.filters)
        out = quality.quality_estimates({"pred": pred}, multilabel=True)
    assert seen and all(f == outer for f in seen)
    assert torch.isnan(torch.as_tensor(out["expected_dice"].foreground)).all()


def _pair_folder(folder: Path) -> Path:
    """A folder of nnU-Net channel files (case c1), NIfTI pairs named so (case c2) and an atlas of one channel, which
    :func:`list_image_cases` leaves out with a warning (empty files: the listing reads no header)."""
    folder.mkdir()
    for name in ("c1_0000.nii.gz", "c1_0001.nii.gz"):
        (folder / name).write_bytes(b"")
    for stem in ("c2_0000", "c2_0001", "atlas"):
        for ext in (".hdr", ".img"):
            (folder / f"{stem}{ext}").write_bytes(b"")
    return folder


def test_image_channel_files_of_pairs_lets_other_warnings_through(tmp_path, monkeypatch):
    """The channels of a NIfTI pair come from the folder's listing without its warnings (said where the folder's
    cases are listed) and without a filter: another warning raised inside reaches the caller."""
    folder = _pair_folder(tmp_path / "pairs")
    seen = _deep_warning(monkeypatch, cases_module, "list_files")
    files, messages, outer = _call(lambda: cases_module.image_channel_files(folder / "c2_0000.hdr"))
    assert [p.name for p in files] == ["c2_0000.hdr", "c2_0001.hdr"]
    assert seen and all(f == outer for f in seen)
    assert _OWN in messages and not any("not read as cases" in m for m in messages), messages


def test_list_image_cases_says_its_warnings_at_the_callers_line(tmp_path):
    folder = _pair_folder(tmp_path / "pairs")
    (folder / "deep" / "SERIES1").mkdir(parents=True)  # a PACS export's nested layout: left out with a warning
    (folder / "deep" / "SERIES1" / "IM0001").write_bytes(b"")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cases = cases_module.list_image_cases(folder)
    assert [(c.case_id, len(c.channels)) for c in cases] == [("c1", 2), ("c2", 2)]
    said = [str(w.message) for w in caught]
    assert len(said) == 2 and "hold no file but folders of files" in said[0] and "not read as cases" in said[1]
    assert [w.filename for w in caught] == [__file__] * 2
    nested = tmp_path / "nested_only"
    (nested / "deep" / "SERIES1").mkdir(parents=True)
    (nested / "deep" / "SERIES1" / "IM0001").write_bytes(b"")
    with pytest.warns(UserWarning, match="hold no file but folders of files"):  # said with the error: why no case
        with pytest.raises(ValueError, match="no image volume"):
            cases_module.list_image_cases(nested)


class _Stop(Exception):
    """Ends an export once its cases are matched (no object written)."""


def test_dicom_export_matching_drops_only_the_other_runs_cases(tmp_path, monkeypatch):
    """``dicom-export`` of some cases (``cases``) matches with ``allow_missing`` and leaves the other runs' cases
    unsaid (``say_missing=False``); every other warning of the matching reaches the caller (in earlier versions
    every ``UserWarning`` but the unread region maps' was dropped, whatever it said)."""
    pred, src = tmp_path / "pred", tmp_path / "series"
    pred.mkdir()
    src.mkdir()
    for name in ("c1_seg.nii.gz", "c1_predictive_entropy.nii.gz", "c2_seg.nii.gz"):  # c2: another run's, no map
        (pred / name).write_bytes(b"")
    _deep_warning(monkeypatch, dicom_workflow, "match_cases")
    matched = []

    def stop(folder, layout, case_ids, *args, **kwargs):
        matched.append(case_ids)
        raise _Stop

    monkeypatch.setattr(dicom_workflow, "check_prediction_digests", stop)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(_Stop):
            dicom_workflow.dicom_export(pred, src, tmp_path / "out", measures=["predictive_entropy"], progress=False,
                                        cases=["c1"])
    messages = [str(w.message) for w in caught]
    assert matched == [["c1"]]
    assert _OWN in messages and not any("skipped for lack of files" in m for m in messages), messages
    with pytest.warns(UserWarning, match=r"1 of 2 labelled case\(s\) skipped"):  # said by default
        cases_module.match_cases(pred, pred, label_suffix="_seg", measures=["predictive_entropy"], allow_missing=True)
    with pytest.raises(TypeError, match="say_missing"):
        cases_module.match_cases(pred, pred, label_suffix="_seg", say_missing="no")


# ------------------------------------------------------------------------------------------------------------------
# the guard: every warning filter of the package is one of these, each with its reason

#: the functions of the package that may change the warning filters (``warnings.catch_warnings`` /
#: ``simplefilter`` / ``filterwarnings`` / ``resetwarnings``), keyed by module and enclosing function (a nested one
#: as ``outer.inner``): third-party noise, the command line's own display, or a record of warnings turned into a
#: list that issues the rest again. A new site needs a reason here, or better a core that returns what it would say
#: (``scores.case_scores_core``, ``metrics.casewise.uncertainty_histograms_core``, ``io.cases.list_image_cases``'s).
WARNING_FILTERS_ALLOWED: dict[tuple[str, str], str] = {
    ("monai_unc/_utils.py", "_bound_in"):
        "numpy's RuntimeWarning of a cast overflowing to inf (string to longdouble: np.errstate does not hold it)",
    ("monai_unc/_utils.py", "main_rank_warnings"):
        "ranks other than 0 of one gathered computation leave its UserWarnings to rank 0",
    ("monai_unc/cli.py", "main"):
        "the console script shows the package's DeprecationWarnings (unless the user's -W says otherwise)",
    ("monai_unc/workflows/arguments.py", "_measure_name"):
        "command-line parsing shows a deprecated --measures name's DeprecationWarning (unless -W says otherwise)",
    ("monai_unc/nnunet/environment.py", "ext_trainer_path"):
        "timm's FutureWarning under torch.jit while nnU-Net imports the trainers (third party, matched by its text)",
    ("monai_unc/io/cases.py", "_image_loader"):
        "MONAI's NvImgCodecPydicomReader UserWarning while LoadImage is built (third party, under a lock)",
    ("monai_unc/evaluation/runner.py", "_load_recording"):
        "records a case's read warnings into its row and issues every one again (reemit_warning)",
    ("monai_unc/evaluation/runner.py", "_run_evaluate.listing"):
        "records the matching's warnings for summary.json; rank 0 issues them again (others: the non-User ones)",
    ("monai_unc/evaluation/runner.py", "_run_evaluate.finish.outputs"):
        "records the products' fit warnings for summary.json and issues the others again",
    ("monai_unc/evaluation/case.py", "evaluate_case"):
        "records the case's warnings into its result (the runner lists and issues them)",
    ("monai_unc/evaluation/cohort.py", "summarize"):
        "records the cohort metrics' warnings for summary.json",
    ("monai_unc/evaluation/triage/runner.py", "triage_case"):
        "records the case's warnings into its triage row",
    ("monai_unc/metrics/compare.py", "_compare_values"):
        "records Cochran's Q's warnings and issues every one again at the user's line",
    ("monai_unc/workflows/dicom.py", "dicom_export"):
        "records the matching's warnings: the unread region maps' said in the export's words, the others issued again",
}

_FILTER_CALLS = frozenset({"catch_warnings", "simplefilter", "filterwarnings", "resetwarnings"})


def _warning_filter_sites() -> dict[tuple[str, str], list[int]]:
    """``{(module path, enclosing function): [lines]}`` of every call of :data:`_FILTER_CALLS` in the package (in
    code: a docstring's example is text, no call)."""
    sites: dict[tuple[str, str], list[int]] = {}

    def visit(node: ast.AST, scope: tuple[str, ...], module: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, (*scope, child.name), module)
                continue
            if isinstance(child, ast.Call):
                f = child.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
                if name in _FILTER_CALLS:
                    sites.setdefault((module, ".".join(scope) or "<module>"), []).append(child.lineno)
            visit(child, scope, module)

    for path in sorted(_PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if _may_call(text):  # the others hold no such call: not parsed (time)
            visit(ast.parse(text), (), path.relative_to(_PACKAGE.parent).as_posix())
    return sites


_CALL_TEXT = re.compile(rf"\b(?:{'|'.join(sorted(_FILTER_CALLS))})\(")


def _may_call(text: str) -> bool:
    """Whether a line of ``text`` may call one of :data:`_FILTER_CALLS`: none does where each name is in a doctest
    line, a comment or a ````code```` span only (Python code has no backticks)."""
    return any(not line.lstrip().startswith((">>>", "...", "#")) and _CALL_TEXT.search(re.sub(r"``[^`]*``", "", line))
               for line in text.splitlines())


def test_no_warning_filter_outside_the_allowed_sites():
    """Library code puts no process-wide warning filter around the package's own functions (docs/design.md): it
    hides other threads' warnings and disturbs the once-per-location registry."""
    sites = _warning_filter_sites()
    new = {f"{m}:{lines[0]} ({fn})" for (m, fn), lines in sites.items() if (m, fn) not in WARNING_FILTERS_ALLOWED}
    assert not new, f"warning filters outside WARNING_FILTERS_ALLOWED (call a core instead, or give a reason): {new}"
    stale = set(WARNING_FILTERS_ALLOWED) - set(sites)
    assert not stale, f"entries of WARNING_FILTERS_ALLOWED without a filter (remove them): {stale}"
    assert all(reason and "\n" not in reason for reason in WARNING_FILTERS_ALLOWED.values())


def test_the_scan_finds_filters_in_code_and_not_in_docstrings(tmp_path, monkeypatch):
    package = tmp_path / "monai_unc"
    package.mkdir()
    (package / "m.py").write_text(
        'import warnings\nfrom warnings import catch_warnings, simplefilter\n\n\n'
        'def f():\n    """>>> with warnings.catch_warnings():\n'
        '    ...     warnings.simplefilter("ignore")\n    """\n\n\n'
        'class C:\n    def g(self):\n        def h():\n            with catch_warnings():\n'
        '                simplefilter("ignore")\n        return h\n', encoding="utf-8")
    monkeypatch.setitem(globals(), "_PACKAGE", package)
    assert _warning_filter_sites() == {("monai_unc/m.py", "C.g.h"): [14, 15]}
