"""Review 68: metrics that say a callee's warning in their own words do so without filtering warnings by text.

Until review 68, ``area_under_referral_curve``, ``failure_detection``, ``au_arc``, ``QUBraTSMetric``
(``uncertainty_max``) and ``compare_metric_values`` called a public metric inside ``warnings.catch_warnings()`` with
an ``ignore`` filter on the callee's text (``compare``: on everything). That is process-wide state: the caller's own
filters (and another thread's warnings) saw the extra filter meanwhile, leaving the context reset every "once per
location" registry, and ``compare`` silenced warnings unrelated to the one meant. Each callee now has a core that does
not warn.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from monai_unc.metrics import (
    QUBraTSMetric,
    area_under_referral_curve,
    au_arc,
    cohens_d,
    compare_metric_values,
    failure_detection,
    qu_brats_regions,
    referral_curve,
)


def _probe() -> None:
    warnings.warn("review 68 probe", UserWarning, stacklevel=1)  # one location: shown once under "default"


def _qu_brats_metric() -> None:
    y = torch.zeros(1, 1, 4, 4, dtype=torch.bool)
    y[..., :2, :] = True
    u = torch.zeros(1, 1, 4, 4, dtype=torch.float64)
    u[..., 0, 0] = 0.01  # a confident map on [0, 1]: rescaled from uncertainty_max, not ungraded
    QUBraTSMetric(uncertainty_max=1.0, reduction="none")(y.float(), y, uncertainty=u)


TIED = [0.5, 0.5, 0.5, 0.5]
CALLS = {
    "area_under_referral_curve": lambda: area_under_referral_curve([0.1, 0.4, 0.2, 0.8], [0.9, 0.6, 0.8, 0.3]),
    "failure_detection": lambda: failure_detection([0.1, 0.4, 0.2, 0.8], [0.9, 0.6, 0.8, 0.3]),
    "au_arc": lambda: au_arc(np.array([0.1, 0.4, 0.2, 0.8]), np.array([0, 1, 0, 1]), per_case=False),
    "QUBraTSMetric": _qu_brats_metric,
    "compare_metric_values": lambda: compare_metric_values({"m": [0.1, 0.5, 0.3]}, {"m": [0.2, 0.1, 0.4]}, True),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_a_metric_leaves_the_once_per_location_registry_alone(name):
    """A warning shown once under the "default" action stays shown once when the metric runs in between (leaving a
    ``catch_warnings`` context marks every registry stale, so it was shown again after each call)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(2):
            _probe()
            CALLS[name]()
    assert sum(str(w.message) == "review 68 probe" for w in caught) == 1


def test_a_callable_of_the_referral_area_sees_the_callers_filters():
    """The cohort metric runs with the caller's warning filters, not with one more (which any other thread also
    saw meanwhile)."""
    seen = []

    def metric(kept):
        seen.append(list(warnings.filters))
        return float(len(kept))

    outside = list(warnings.filters)
    area_under_referral_curve([0.1, 0.4, 0.2, 0.8], metric, taus=[0.0, 0.5], ties="order")
    assert seen and all(f == outside for f in seen)


def test_compare_lets_the_warnings_it_does_not_reword_through():
    """Cohen's d of values whose variance overflows float64 is not a number anybody can read; numpy's overflow warning
    reaches the caller (``simplefilter("ignore")`` silenced it and every other warning of the computation)."""
    big = [1e200, -1e200, 1e200]  # the squares of the deviations overflow; the means and differences do not
    direct = _said(lambda: cohens_d(big, [1.0, 2.0, 3.0]))
    compared = _said(lambda: compare_metric_values({"m": big}, {"m": [1.0, 2.0, 3.0]}, True))
    overflow = [str(w.message) for w in direct if issubclass(w.category, RuntimeWarning)]
    assert overflow and overflow == [str(w.message) for w in compared if issubclass(w.category, RuntimeWarning)]


def _said(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return caught


def test_the_callers_own_words_only():
    """Each caller says its own warning once, and the callee's is not said (behaviour kept)."""
    fd = _said(lambda: failure_detection(TIED, [0.9, 0.6, 0.8, 0.3]))
    assert [str(w.message).split(":")[0] for w in fd] == ["failure_detection"]
    arc = _said(lambda: au_arc(np.full(4, 0.5), np.array([0, 1, 0, 1]), per_case=False))
    assert [str(w.message).split(":")[0] for w in arc] == ["au_arc"]
    area = _said(lambda: area_under_referral_curve([0.1, 0.4, 0.2, 0.8], [0.9, 0.6, 0.8, 0.3], taus=[0, 0.5, 1]))
    assert [str(w.message).split(":")[0] for w in area] == ["area_under_referral_curve"]
    # the tie warning of the curve is the area's too
    tied = _said(lambda: area_under_referral_curve(TIED, [0.9, 0.6, 0.8, 0.3]))
    assert [str(w.message).split(":")[0] for w in tied] == ["referral_curve"]
    assert all(w.filename == __file__ for w in fd + arc + area + tied)
    assert _said(_qu_brats_metric) == []
    d = _said(lambda: compare_metric_values({"m": [0.1, 0.1, 0.1]}, {"m": [0.2, 0.2, 0.2]}, True))
    assert len(d) == 1 and "compare: Cohen's d of metric 'm' is undefined" in str(d[0].message)


def test_the_warnings_of_a_direct_call_point_at_the_callers_line():
    """``referral_curve``'s tie warning pointed one frame above its caller (the depth of the area's call), and
    ``qu_brats_regions``' warning of an ungraded map at its own loop inside the library."""
    y = np.zeros((4, 4), dtype=bool)
    y[:2] = True
    u = np.where(y, 0.5, 0.0)  # a [0, 1] map given for [0, 100]: ungraded
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        referral_curve(TIED, [0.9, 0.6, 0.8, 0.3])  # called here, not through a helper: the frame above is pytest's
        qu_brats_regions({"r": u}, {"r": y}, {"r": y}, regions={"r": [1]})
    assert [str(w.message).split(":")[0] for w in caught] == ["referral_curve", "qu_brats"]
    assert [w.filename for w in caught] == [__file__] * 2
