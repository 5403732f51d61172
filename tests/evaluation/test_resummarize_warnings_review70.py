"""``resummarize`` says a warning of the recorded options once (review 70).

Found by review 70: with a budget or another option, ``resummarize`` read the recorded options twice (the summary
with the options given, and the one with the recorded options, whose warnings it compares), so the warning that
``summary.json`` records an empty class name was said twice.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest

import monai_unc.evaluation.cohort as cohort


@pytest.mark.parametrize("options", [{"budget": 0.3}, {"n_bins": 8}, {}])
def test_an_empty_recorded_class_name_is_said_once(monkeypatch, options):
    monkeypatch.setattr(cohort, "summarize", lambda state, config, **kwargs: {"warnings": []})
    state = SimpleNamespace(n_fine_bins=160, rows=[])
    saved = {"config": {"n_bins": 10, "class_names": ["bg", " "]}, "warnings": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cohort.resummarize(state, saved, **options)
    said = [w for w in caught if "records an empty class name" in str(w.message)]
    assert len(said) == 1, [str(w.message) for w in caught]
    assert said[0].filename == cohort.__file__  # at resummarize's call of config_from_summary, as before


def test_config_from_summary_still_says_it_at_its_caller():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = cohort.config_from_summary({"config": {"n_bins": 10, "class_names": ["bg", ""]}}, [], budget=0.3)
    assert config.class_names == ["bg", "class"] and config.budget == 0.3
    assert [(w.category, w.filename) for w in caught] == [(UserWarning, __file__)]
