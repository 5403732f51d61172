"""Upgrade: the deprecated shape-dependent ``per_case`` default of the discrimination metrics warns at the caller.

Found by the upgrade review: ``correct_certain_ratio`` and ``uncertain_incorrect_ratio`` attributed their
``DeprecationWarning`` to ``monai_unc/metrics/discrimination.py`` (one frame too shallow), where Python's default
filters hide it: code relying on the default, which becomes ``per_case=False`` (one pooled float instead of one value
per case) in the next release, was never told. Every metric now points it at the calling line, once.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from monai_unc.metrics import discrimination as D
from tests.test_deprecations import shown_deprecations

FNS = [D.error_auroc, D.error_auprc, D.avu, D.correct_certain_ratio, D.uncertain_incorrect_ratio, D.pavpu,
       D.voxel_accuracy, D.au_arc]


@pytest.mark.parametrize("fn", FNS, ids=lambda f: f.__name__)
def test_the_per_case_deprecation_points_at_the_caller_once(fn):
    rng = np.random.default_rng(0)
    u = rng.uniform(size=(2, 1, 8, 8))
    e = (rng.uniform(size=(2, 1, 8, 8)) < 0.3).astype(int)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        legacy = fn(u, e)
    dep = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(dep) == 1 and "per_case" in str(dep[0].message)
    assert dep[0].filename == __file__, dep[0].filename
    np.testing.assert_array_equal(legacy, fn(u, e, per_case=True))


def test_the_deprecation_is_shown_under_the_default_filters():
    code = ("import numpy as np\n"
            "from monai_unc.metrics import correct_certain_ratio, uncertain_incorrect_ratio\n"
            "u = np.full((2, 1, 4, 4), 0.2); e = np.zeros((2, 1, 4, 4)); e[:, :, 0] = 1\n"
            "correct_certain_ratio(u, e)\n"
            "uncertain_incorrect_ratio(u, e)\n")
    shown, stderr = shown_deprecations(code)
    assert len(shown) == 2 and all("per_case" in line for line in shown), stderr
