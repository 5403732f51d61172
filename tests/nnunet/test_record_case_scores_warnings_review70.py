"""``nnunet-predict``'s case scores put no process-wide warning filter around the scores (review 70).

``record_case_scores`` ignored every ``UserWarning`` inside ``warnings.catch_warnings()`` to record an empty
prediction's ``fg_mean`` as null without a word: process-wide state that hid every other warning of the call (and of
other threads). It calls the scores' core (``scores.case_scores_core``), which does not warn, now.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("nnunetv2")

from monai_unc import scores as scores_module  # noqa: E402
from monai_unc.nnunet.export import record_case_scores  # noqa: E402

_OWN = "a warning of a function deep in the call (review 70)"


def test_record_case_scores_lets_other_warnings_through(monkeypatch):
    real, seen = scores_module.aggregate, []

    def aggregate(*args, **kwargs):  # a function deep in the call warns a line of its own
        seen.append(list(warnings.filters))
        warnings.warn(_OWN, UserWarning, stacklevel=2)
        return real(*args, **kwargs)

    monkeypatch.setattr(scores_module, "aggregate", aggregate)
    u = np.linspace(0.0, 1.0, 64).reshape(4, 4, 4)
    empty = np.zeros((4, 4, 4), np.uint8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outer = list(warnings.filters)
        got = record_case_scores({"predictive_entropy": u}, empty, patch_size=2)["predictive_entropy"]
    messages = [str(w.message) for w in caught]
    assert seen and all(f == outer for f in seen)  # the caller's filters, none installed around the scores
    assert _OWN in messages, messages
    assert not any("empty mask" in m for m in messages), messages  # recorded as null without a word, as documented
    assert np.isnan(got["fg_mean"])
    assert got["mean"] == pytest.approx(float(u.mean()))
    assert got["patch_mean"] == pytest.approx(float(u[2:, 2:, 2:].mean()))
