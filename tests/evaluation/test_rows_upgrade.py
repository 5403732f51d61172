"""Upgrade: the helpers of ``monai_unc.evaluation.rows`` that CHANGELOG.md lists as deprecated still work.

Found by the upgrade review: ``region_histograms_state``, ``region_histograms_from_state`` and
``load_region_histograms`` were public names of 0.1.0 (``rows.__all__``); CHANGELOG.md ("Deprecated") says they
still work, but they had been deleted (``AttributeError``). Each is back, warns once naming its replacement and
gives the result of the old code (the layouts below are written by hand, as 0.1.0 wrote them).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from monai_unc.evaluation import rows
from monai_unc.metrics.calibration import ConfidenceHistogram
from monai_unc.state import StateGroup


def _hists() -> dict[str, ConfidenceHistogram]:
    rng = np.random.default_rng(0)
    out = {}
    for name in ("WT", "TC"):
        p1 = rng.uniform(size=(2, 1, 5))
        probs = np.concatenate([1 - p1, p1], axis=1)
        out[name] = ConfidenceHistogram(num_classes=2).update(probs, (rng.uniform(size=(2, 5)) < 0.5).astype(int),
                                                              case_ids=["a", "b"])
    return out


def _old_layout(hists: dict[str, ConfidenceHistogram]) -> dict[str, np.ndarray]:
    """The arrays 0.1.0's ``region_histograms_state`` wrote (by hand)."""
    out = {"regions": np.array(list(hists), dtype=np.str_)}
    for i, h in enumerate(hists.values()):
        for k, v in h.state_dict().items():
            out[f"r{i}__{k}"] = v
    return out


def _same(a: dict[str, ConfidenceHistogram], b: dict[str, ConfidenceHistogram]) -> None:
    assert list(a) == list(b)
    for name in a:
        sa, sb = a[name].state_dict(), b[name].state_dict()
        assert sa.keys() == sb.keys()
        for k in sa:
            np.testing.assert_array_equal(np.asarray(sa[k]), np.asarray(sb[k]))


def _call_warns_once(fn, *args, name: str, new: str):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args)
    dep = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(dep) == 1, [str(w.message) for w in caught]
    assert name in str(dep[0].message) and new in str(dep[0].message)
    assert dep[0].filename == __file__  # points at the caller
    return out


def test_region_histograms_state_writes_the_old_layout():
    hists = _hists()
    state = _call_warns_once(rows.region_histograms_state, hists, name="region_histograms_state", new="StateGroup")
    expected = _old_layout(hists)
    assert state.keys() == expected.keys()
    for k in state:
        np.testing.assert_array_equal(np.asarray(state[k]), np.asarray(expected[k]))


@pytest.mark.parametrize("layout", ["old", "state_group"])
def test_region_histograms_from_state_and_load_read_both_layouts(tmp_path, layout):
    hists = _hists()
    arrays = _old_layout(hists) if layout == "old" else StateGroup(hists).state_dict()
    _same(_call_warns_once(rows.region_histograms_from_state, arrays, name="region_histograms_from_state",
                           new="region_histograms_of"), hists)
    path = tmp_path / "region_histograms.npz"
    np.savez(path, **arrays)
    _same(_call_warns_once(rows.load_region_histograms, path, name="load_region_histograms",
                           new="region_histograms_of"), hists)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the replacement does not warn
        _same(rows.region_histograms_of(arrays), hists)

