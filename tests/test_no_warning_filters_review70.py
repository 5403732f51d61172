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
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from monai_unc import scores as scores_module
from monai_unc.evaluation import conformal
from monai_unc.evaluation import runner as evaluation_runner
from monai_unc.evaluation.conformal import ConformalStrata
from monai_unc.metrics import casewise
from monai_unc.report.plots import plot_uncertainty_histograms
from monai_unc.scores import case_scores, case_scores_core

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
