"""Consistent argument names (``uncertainty``, ``pred``, ``target``): every renamed keyword still works for one release,
with a DeprecationWarning naming the old and the new name, and gives the same result."""

from __future__ import annotations

import inspect
import re
import warnings

import numpy as np
import pytest
import torch

from monai_unc._deprecation import deprecated_arg_names
from monai_unc.aggregation import fit_threshold
from monai_unc.metrics.ambiguity import ncc
from monai_unc.metrics.calibration import ConfidenceHistogram, ece
from monai_unc.metrics.casewise import ood_auroc
from monai_unc.metrics.compare import compare_uncertainty_maps
from monai_unc.metrics.selective import augrc, aurc, eaurc, risk_coverage_curve
from monai_unc.temperature import TemperatureScaler
from tests._cases import softmax_case


def test_decorator_forwards_warns_and_refuses_both():
    @deprecated_arg_names({"scores": "uncertainty", "y": "target"})
    def f(uncertainty, target=0, *, extra=1):
        """Doc."""
        return uncertainty, target, extra

    assert f.__doc__ == "Doc." and list(inspect.signature(f).parameters) == ["uncertainty", "target", "extra"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f(1, 2, extra=3) == (1, 2, 3) and f(uncertainty=1) == (1, 0, 1)
    with pytest.warns(DeprecationWarning, match="argument '(scores|y)' is deprecated") as rec:
        assert f(scores=5, y=6) == (5, 6, 1)
    messages = sorted(str(w.message) for w in rec)
    assert len(messages) == 2 and "'scores' is deprecated, use 'uncertainty'" in messages[0]
    assert "'y' is deprecated, use 'target'" in messages[1]
    assert rec[0].filename == __file__  # the warning points at the caller
    with pytest.raises(TypeError, match="got both 'scores' \\(deprecated\\) and 'uncertainty'"):
        f(scores=1, uncertainty=2)
    with pytest.raises(TypeError, match="has no parameter 'new'"):
        deprecated_arg_names({"old": "new"})(lambda x: x)
    with pytest.raises(TypeError, match="'x' is still a parameter"):
        deprecated_arg_names({"x": "y"})(lambda x, y: x)


def _same(old_call, new_call):
    with pytest.warns(DeprecationWarning, match="is deprecated, use"):
        old = old_call()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new = new_call()
    return old, new


def test_selective_scores_is_uncertainty():
    rng = np.random.default_rng(0)
    u, r = rng.random(20), (rng.random(20) < 0.3).astype(float)
    for fn in (aurc, augrc, eaurc):
        old, new = _same(lambda fn=fn: fn(scores=u, risk=r), lambda fn=fn: fn(uncertainty=u, risk=r))
        assert old == new == fn(u, r)
    old, new = _same(lambda: risk_coverage_curve(scores=u, risk=r), lambda: risk_coverage_curve(uncertainty=u, risk=r))
    for a, b in zip(old, new):
        np.testing.assert_array_equal(a, b)


def test_ood_auroc_scores_are_uncertainty():
    iid, ood = np.array([0.1, 0.4, 0.4]), np.array([0.4, 0.9])
    old, new = _same(lambda: ood_auroc(scores_iid=iid, scores_ood=ood),
                     lambda: ood_auroc(uncertainty_iid=iid, uncertainty_ood=ood))
    assert old == new == ood_auroc(iid, ood)


def test_ncc_names():
    rng = np.random.default_rng(1)
    a, b = rng.random((1, 6, 5)), rng.random((1, 6, 5))
    old, new = _same(lambda: ncc(pred_uncertainty=a, reference=b), lambda: ncc(uncertainty=a, target=b))
    assert old == new == ncc(a, b)


def test_compare_pred_and_target():
    rng = np.random.default_rng(2)
    pred = [(rng.random((12, 10)) < 0.5).astype(int) for _ in range(4)]
    target = [(rng.random((12, 10)) < 0.5).astype(int) for _ in range(4)]
    a = [rng.random((12, 10)) for _ in range(4)]
    b = [rng.random((12, 10)) for _ in range(4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        old, new = _same(lambda: compare_uncertainty_maps(["AUC-ROC", "AvU"], a, b, preds=pred, targets=target),
                         lambda: compare_uncertainty_maps(["AUC-ROC", "AvU"], a, b, pred=pred, target=target))
    for name in ("AUC-ROC", "AvU"):
        np.testing.assert_array_equal(old.metrics[name].values_a, new.metrics[name].values_a)


# ---------------------------------------------------------------------------------------------------------------
# issue 16: renamed arguments with deprecated aliases
# ---------------------------------------------------------------------------------------------------------------
def test_deprecated_arg_names_decorator():
    @deprecated_arg_names({"old": "new"})
    def f(a, new=None):
        return a, new

    assert f(1, new=2) == (1, 2)
    with pytest.warns(DeprecationWarning, match="'old'.*'new'"):
        assert f(1, old=3) == (1, 3)
    with pytest.raises(TypeError, match="'old'.*'new'"):
        f(1, old=3, new=4)
    with pytest.raises(TypeError, match="'new'"):
        f(1, 4, old=3)
    with pytest.raises(TypeError, match="no parameter 'missing'"):
        deprecated_arg_names({"old": "missing"})(lambda a: a)


def test_renamed_arguments_keep_their_old_keywords():
    z, p, y = softmax_case()
    with pytest.warns(DeprecationWarning, match="deprecated") as caught:
        assert ece(x=p, labels=y) == ece(p, y) == ece(probs=p, target=y)
    assert {"'x'", "'labels'"} <= {m.group(1) for w in caught if (m := re.search(r"argument ('\w+')", str(w.message)))}
    with pytest.raises(TypeError):
        ece(p, labels=y, target=y)
    with pytest.warns(DeprecationWarning, match="labels"):
        hist = ConfidenceHistogram(3).update(p, labels=y)
    assert torch.equal(hist.counts, ConfidenceHistogram(3).update(p, target=y).counts)
    maps, preds = np.random.default_rng(0).random((2, 1, 5, 5)), np.zeros((2, 1, 5, 5), int)
    preds[:, :, 1:3, 1:3] = 1
    with pytest.warns(DeprecationWarning, match="deprecated"):  # both old names warn
        assert fit_threshold(val_uncertainty_maps=maps, val_predictions=preds) == fit_threshold(maps, preds)
    with pytest.warns(DeprecationWarning, match="labels"):
        a = TemperatureScaler(max_steps=3).fit(z, labels=y)
    assert a.temperature.item() == TemperatureScaler(max_steps=3).fit(z, target=y).temperature.item()
