"""The QU-BraTS warnings are said once per call, at the user's line (review 70).

Found by review 70: ``qu_brats_regions`` said the warning of an ungraded map (a map on ``[0, 1]`` given for the
challenge's ``[0, 100]``) once per region, the same text three times for one call of WT / TC / ET maps, and
``QUBraTSMetric`` said it once per case and region at a line of MONAI's ``CumulativeIterationMetric``
(``metric.py``), so a filter on the user's module, or ``-W error::UserWarning:mymodule``, missed them.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from monai_unc.metrics import QUBraTSMetric, qu_brats, qu_brats_regions, qu_brats_thresholds
from monai_unc.metrics.qu_brats_score import UNGRADED_WARNING, qu_brats_regions_core


def _caught(call) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return caught


def _label() -> np.ndarray:
    label = np.zeros((6, 6, 6), dtype=np.int64)
    label[1:5, 1:5, 1:5] = 2
    label[2:4, 2:4, 2:4] = 4
    return label


def _unit_maps(n: int = 3) -> np.ndarray:
    """``n`` maps on ``[0, 1]``: ungraded on the challenge's ``[0, 100]`` scale."""
    return np.random.default_rng(0).random((n, 6, 6, 6))


def _one_at_this_file(caught) -> str:
    assert [w.filename for w in caught] == [__file__], [(w.filename, w.lineno, str(w.message)) for w in caught]
    assert issubclass(caught[0].category, UserWarning)
    text = str(caught[0].message)
    assert text.startswith(UNGRADED_WARNING), text  # the beginning a filter may match, as before
    return text


def test_qu_brats_regions_says_an_ungraded_map_once_per_call_naming_the_regions():
    label = _label()
    text = _one_at_this_file(_caught(lambda: qu_brats_regions(_unit_maps(), label, label)))
    assert "['TC', 'WT', 'ET']" in text, text
    maps = np.zeros((3, 6, 6, 6))
    maps[1] = _unit_maps(1)[0]  # only WT's map is ungraded
    text = _one_at_this_file(_caught(lambda: qu_brats_regions(maps, label, label)))
    assert "['WT']" in text, text
    assert _caught(lambda: qu_brats_regions(100 * _unit_maps(), label, label)) == []  # graded: no warning
    assert _caught(lambda: qu_brats_regions_core(_unit_maps(), label, label, warn=False)) == []


def test_qu_brats_says_its_warning_once_at_the_callers_line():
    label = _label()
    _one_at_this_file(_caught(lambda: qu_brats(_unit_maps(1)[0], label > 0, label > 0)))


def _batch() -> dict[str, torch.Tensor]:
    label = torch.from_numpy(np.stack([_label(), _label()]))[:, None]  # two cases
    return {"y_pred": label, "y": label, "uncertainty": torch.from_numpy(np.stack([_unit_maps(), _unit_maps()]))}


def test_metric_says_an_ungraded_map_once_per_call_at_the_callers_line():
    batch = _batch()
    metric = QUBraTSMetric(regions="brats", reduction="none")
    text = _one_at_this_file(_caught(lambda: metric(**batch)))  # two cases, three regions: one warning
    assert "['TC', 'WT', 'ET']" in text, text
    decollated = {k: list(v) for k, v in batch.items()}
    _one_at_this_file(_caught(lambda: metric(**decollated)))  # MONAI evaluates the items one by one
    masks = QUBraTSMetric(reduction="none")  # one-region masks: the channels are named by index
    text = _one_at_this_file(_caught(lambda: masks(y_pred=batch["y"] > 0, y=batch["y"] > 0,
                                                   uncertainty=batch["uncertainty"][:, :1])))
    assert "[0]" in text, text
    assert metric.get_buffer().shape == (4, 3)


def test_metric_values_unchanged_and_declared_scale_still_silent():
    batch = _batch()
    metric = QUBraTSMetric(regions="brats", reduction="none")
    _caught(lambda: metric(**batch))
    label = _label()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        direct = qu_brats_regions(_unit_maps(), label, label)
    expected = torch.tensor([[r.score for r in direct.regions.values()]] * 2, dtype=torch.float64)
    assert torch.equal(metric.aggregate(), expected)
    declared = QUBraTSMetric(regions="brats", uncertainty_max=100.0)  # rescaled from its declared scale: no warning
    assert _caught(lambda: declared(**batch)) == []


def test_metric_warns_again_on_the_next_call_and_after_a_refused_one():
    """A refused call drops the warnings it held: its case 0 is ungraded (held) and its case 1 then raises while
    it is scored (an empty brain mask); the next, graded call says nothing (the held warning neither leaks into it
    nor stays behind), and an ungraded call warns again."""
    batch = _batch()
    metric = QUBraTSMetric(regions="brats")
    _one_at_this_file(_caught(lambda: metric(**batch)))
    rows = len(metric.get_buffer())
    graded = dict(batch, uncertainty=100 * batch["uncertainty"])
    bad = {k: list(v) for k, v in batch.items()}
    bad["uncertainty"][1] = graded["uncertainty"][1]
    bad["brain_mask"] = [torch.ones(1, 6, 6, 6), torch.zeros(1, 6, 6, 6)]  # case 1: no brain voxel
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="brain_mask has no voxel"):
            metric(**bad)
    assert caught == []  # the error is what the refused call says
    assert len(metric.get_buffer()) == rows  # and it counts nothing
    assert _caught(lambda: metric(**graded)) == []
    _one_at_this_file(_caught(lambda: metric(**batch)))


@pytest.mark.parametrize("max_u", [1e-30, 1e-15, 3.5e38, 1e300, 1.79e308])
@pytest.mark.parametrize("grid", ["numpy2", "numpy1"])
def test_grid_of_an_extreme_scale_is_the_grid_of_its_steps(max_u, grid):
    """Found by review 70: on a scale far below the float32 epsilon the range ran to ``eps`` in steps of
    ``max_u / 40`` (numpy's "Maximum allowed size exceeded" at 1e-30, 4.7e9 thresholds to allocate at 1e-15, then
    dropped), and beyond float32's largest value ``max_u + eps`` was infinite (the same error)."""
    t = qu_brats_thresholds(40, max_u, grid=grid)
    assert len(t) in (40, 41) and t[-1] == 0.0 and t[0] <= max_u * (1 + 1e-12)
    np.testing.assert_allclose(t[::-1], np.arange(len(t)) * (max_u / 40), rtol=1e-12)


@pytest.mark.parametrize("max_u", [1.0, 1.5, 2.0, 3.0, 3.9, 4.0, 100.0, 1e-6, 1e-3, 7.0, 1e6])
@pytest.mark.parametrize("k", [2, 7, 40])
@pytest.mark.parametrize("grid", ["numpy2", "numpy1"])
def test_grid_of_ordinary_scales_unchanged(max_u, k, grid):
    """The grid is the script's ``numpy.arange`` (float32 or float64 end) for the scales it can represent."""
    eps = np.finfo(np.float32).eps
    stop = np.float64(max_u) + np.float64(eps) if grid == "numpy1" else np.float32(max_u) + np.float32(eps)
    ref = np.arange(0.0, stop, max_u / k, dtype=np.float64)
    ref = ref[ref <= max_u * (1.0 + 1e-12)][::-1]
    assert np.array_equal(qu_brats_thresholds(k, max_u, grid=grid), ref)


def test_degenerate_inputs_keep_their_documented_outcomes():
    """Checked by review 70. Empty masks score as the challenge scores them (filtered Dice 1, no true positive to
    filter: a number, not NaN, and no warning; module docstring), through the function and the metric alike; a NaN
    map and a single threshold are bad input, refused naming the argument."""
    empty = np.zeros((4, 4, 4), dtype=bool)
    caught = _caught(lambda: qu_brats(np.zeros((4, 4, 4)), empty, empty))
    assert caught == []
    res = qu_brats(np.zeros((4, 4, 4)), empty, empty)
    assert (res.dice_auc, res.ftp_auc, res.ftn_auc) == (0.975, 0.0, 0.0)
    metric = QUBraTSMetric(reduction="none")
    t = torch.from_numpy(empty)[None, None]
    assert _caught(lambda: metric(y_pred=t, y=t, uncertainty=torch.zeros(1, 1, 4, 4, 4))) == []
    assert metric.aggregate().item() == res.score
    nan = np.full((4, 4, 4), np.nan)
    with pytest.raises(ValueError, match="uncertainty contains 64 non-finite"):
        qu_brats(nan, empty, empty)
    with pytest.raises(ValueError, match="uncertainty contains 64 non-finite"):
        qu_brats_regions({"r": nan}, {"r": empty}, {"r": empty}, regions={"r": [1]})
    for declared in (None, 1.0):
        with pytest.raises(ValueError, match="uncertainty contains 64 non-finite"):
            QUBraTSMetric(uncertainty_max=declared)(y_pred=t, y=t, uncertainty=torch.from_numpy(nan)[None, None])
    with pytest.raises(ValueError, match="num_points"):
        qu_brats(np.zeros((4, 4, 4)), empty, empty, num_points=1)
    with pytest.raises(ValueError, match="num_points"):
        QUBraTSMetric(num_points=1)
