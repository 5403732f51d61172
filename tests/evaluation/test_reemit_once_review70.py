"""A warning recorded and issued again is shown as the filters say across calls (review 70).

Found by review 70: ``evaluate_case`` (and ``summarize``, ``triage_case``, the evaluation's reading, matching and
fitting, ``dicom-export``'s matching) records a step's warnings in ``warnings.catch_warnings(record=True)`` and
issues the ones it does not list again (``_utils.reemit_warning``), with a registry per place meant to show a warning
once per location under the ``"default"`` action. But entering or leaving ``catch_warnings`` clears every registry
(Python's ``_filters_mutated``), so a case metric's ``RuntimeWarning`` at one line was shown once per case: three
lines for three cases, 500 for a cohort of 500, where plain Python shows one.
"""

from __future__ import annotations

import itertools
import threading
import warnings
from pathlib import Path

import pytest

import monai_unc._utils as utils
from monai_unc._utils import reemit_warning
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, evaluate_case
from monai_unc.io import match_cases

#: a text no other test says: the record of the locations said is the process's
_N = itertools.count()


def _text(what: str) -> str:
    return f"review 70 reemit {what} {next(_N)}"


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> list:
    data = write_toy_cohort(Path(tmp_path_factory.mktemp("toy")) / "toy", n_cases=3, shape=(8, 8, 8), seed=3)
    return match_cases(data["labels"], data["predictions"])


def _evaluate(cases: list, action: str) -> list[str]:
    """The texts shown of a case metric's ``RuntimeWarning`` (one line) over ``cases`` under ``action``."""
    text = _text("case metric")

    def noisy(task) -> float:
        warnings.warn(text, RuntimeWarning)
        return 1.0

    config = EvaluationConfig(spatial=False, case_metrics={"noisy": noisy})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter(action)
        for f in cases:
            evaluate_case(f, config)
    return [str(w.message) for w in caught if str(w.message) == text]


def test_a_case_metrics_warning_is_shown_once_under_the_default_action(cases):
    assert len(_evaluate(cases, "default")) == 1  # 3 before: once per case
    assert len(_evaluate(cases, "module")) == 1


def test_always_shows_it_per_case_and_error_raises(cases):
    assert len(_evaluate(cases, "always")) == 3
    with pytest.raises(RuntimeWarning, match="review 70 reemit case metric"):
        _evaluate(cases, "error")
    assert _evaluate(cases, "ignore") == []


def _recorded(text: str, category: type[Warning] = RuntimeWarning, lines: int = 1) -> list[warnings.WarningMessage]:
    """``text`` warned at ``lines`` distinct lines of this file, recorded."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        warnings.warn(text, category)
        if lines > 1:
            warnings.warn(text, category)
    return got


def _shown(got: list[warnings.WarningMessage], times: int, setup) -> list[tuple[str, int]]:
    """Each of ``got`` issued again ``times`` times, each inside a ``catch_warnings`` of its own (as a caller
    records one step); the filters set by ``setup`` outside. What was shown."""
    with warnings.catch_warnings(record=True) as shown:
        setup()
        for _ in range(times):
            with warnings.catch_warnings():  # clears Python's registries, as a recording step does
                pass
            for w in got:
                reemit_warning(w)
    return [(str(w.message), w.lineno) for w in shown]


def test_each_action_across_calls():
    text = _text("actions")
    got = _recorded(text, lines=2)
    assert len({w.lineno for w in got}) == 2
    assert len(_shown(got, 3, lambda: warnings.simplefilter("default"))) == 2  # once per line
    got = _recorded(_text("module"), lines=2)
    assert len(_shown(got, 3, lambda: warnings.simplefilter("module"))) == 1  # once per file
    got = _recorded(_text("once"), lines=2)
    assert len(_shown(got, 3, lambda: warnings.simplefilter("once"))) == 1
    got = _recorded(_text("always"), lines=2)
    assert len(_shown(got, 3, lambda: warnings.simplefilter("always"))) == 6
    assert _shown(got, 3, lambda: warnings.simplefilter("ignore")) == []


def test_the_filter_that_applies_is_found_as_python_finds_it():
    text = _text("matched")
    got = _recorded(text)

    def setup(**kwargs) -> None:
        warnings.simplefilter("default")
        warnings.filterwarnings("always", **kwargs)

    # a filter of the message (from its start), of the category (a subclass), of the module, of the line: "always"
    for match in ({"message": "review 70 reemit matched"}, {"category": Warning}, {"module": __name__[:5]},
                  {"lineno": got[0].lineno}, {"module": __name__, "lineno": got[0].lineno}):
        assert len(_shown(got, 2, lambda m=match: setup(**m))) == 2, match
    # filters that do not match it: the default action, said once over both calls
    for other in ({"message": "matched"}, {"category": UserWarning}, {"module": "numpy"}, {"lineno": 1}):
        assert len(_shown(got, 2, lambda m=other: setup(**m))) <= 1, other
    with pytest.raises(RuntimeWarning):
        _shown(got, 1, lambda: warnings.filterwarnings("error", message="review 70"))


def test_a_change_of_the_filters_shows_it_again():
    got = _recorded(_text("changed"))
    assert len(_shown(got, 2, lambda: warnings.simplefilter("default"))) == 1
    assert _shown(got, 2, lambda: warnings.simplefilter("default")) == []  # the same filters: said already
    other = _shown(got, 2, lambda: (warnings.simplefilter("default"), warnings.filterwarnings("ignore", "x")))
    assert len(other) == 1


def test_the_record_is_bounded(monkeypatch):
    monkeypatch.setattr(utils, "_SAID_LIMIT", 2)
    first, second, third = (_recorded(_text("bounded")) for _ in range(3))

    def default() -> None:
        warnings.simplefilter("default")

    with warnings.catch_warnings(record=True) as shown:
        default()
        for got in (first, second, first, third, first):  # the third drops the first, said again after
            reemit_warning(got[0])
    assert [str(w.message) for w in shown] == [str(first[0].message), str(second[0].message),
                                              str(third[0].message), str(first[0].message)]
    assert len(utils._SAID) <= 2


def test_threads_show_it_once():
    got = _recorded(_text("threads"))
    start = threading.Barrier(8)

    def say() -> None:
        start.wait()
        for _ in range(20):
            reemit_warning(got[0])

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")
        threads = [threading.Thread(target=say) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(shown) == 1
