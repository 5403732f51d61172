"""Hostile tests of the case-wise tasks (monai_unc.metrics.casewise) from the selective-prediction review."""

from __future__ import annotations

import numpy as np

from monai_unc.evaluation import triage_order
from monai_unc.metrics import fill_undefined_scores


def test_undefined_score_ranks_above_a_huge_defined_score():
    """max + 1 == max from 2**53 on: an undefined score tied with the most uncertain case and the triage order, which
    breaks ties by case id, referred the defined case "a" before the undefined "b"."""
    for top in (1e17, 2.0**53, -1e17, 1e300):
        filled = fill_undefined_scores(np.array([top, np.nan, -np.inf, 0.0]))
        assert filled[1] > top and filled[2] > top and filled[1] == filled[2]
        assert np.isfinite(filled).all()
    assert triage_order(["a", "b"], np.array([1e17, np.nan])) == [1, 0]
    np.testing.assert_array_equal(fill_undefined_scores(np.array([0.2, np.nan, 0.5])), [0.2, 1.5, 0.5])


def test_al_improvement_refuses_dice_outside_unit_interval():
    """A Dice of -0.5 (or in percent) gave a relative change of -2.4 without complaint."""
    import pytest

    from monai_unc.metrics import al_improvement

    for bad, name in (((-0.5, 0.7, 0.7, 0.7), "dice_t1"), ((0.7, 77.0, 0.7, 0.7), "dice_t2"),
                      ((0.7, 0.7, [0.5, 1.2], 0.7), "dice_random_t1"), ((0.7, 0.7, 0.7, -1e-9), "dice_random_t2")):
        with pytest.raises(ValueError, match=name):
            al_improvement(*bad)
    assert al_improvement(0.0 + 0.5, 1.0, 0.5, 0.75) == pytest.approx(0.5)


def test_uncertainty_histograms_cases_outside_the_range_are_not_dropped_silently():
    """numpy drops values outside the bins: two of three cases vanished without a word, and the incorrect group
    (all outside) came back NaN with numpy's RuntimeWarning "invalid value encountered in divide"."""
    import warnings

    import pytest

    from monai_unc.metrics import uncertainty_histograms

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        h = uncertainty_histograms([0.1, 2.0, 3.0], [1, 1, 0], bins=2, range=(0.0, 1.0))
    messages = [str(w.message) for w in caught]
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], messages
    assert any("2 of 3 case(s) lie outside the bins" in m for m in messages), messages
    assert any("no incorrect cases inside the bins" in m for m in messages), messages
    assert np.isnan(h.incorrect).all() and h.n_correct == 2 and h.n_incorrect == 1
    np.testing.assert_allclose(h.correct, [2.0, 0.0])  # the one correct case inside, as a density
    # cases on the edges are inside (numpy's last bin is closed); no warning then
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h = uncertainty_histograms([0.0, 1.0, 0.5], [1, 0, 1], bins=[0.0, 0.5, 1.0], density=False)
    np.testing.assert_array_equal(h.correct, [1.0, 1.0])
    np.testing.assert_array_equal(h.incorrect, [0.0, 1.0])
    with pytest.warns(UserWarning, match="no correct cases, that histogram is NaN"):
        uncertainty_histograms([0.1, 0.2], [0, 0])


def test_ood_auroc_by_shift_refuses_one_string_for_the_labels():
    """"blur" for four cases was read as the labels b, l, u, r: four shifted cases and no AUROC, without a word."""
    import pytest

    from monai_unc.metrics import ood_auroc_by_shift

    for bad in ("blur", b"none"):
        with pytest.raises(TypeError, match="one label per case"):
            ood_auroc_by_shift([0.1, 0.2, 0.3, 0.4], bad)
    res = ood_auroc_by_shift([0.1, 0.2, 0.3, 0.4], ["none", "none", "blur", "blur"])
    assert res["auroc"] == 1.0 and res["per_shift"] == {"blur": 1.0}


def test_uncertainty_histograms_density_must_be_a_bool():
    """density="no" is truthy: densities came back where counts were asked for."""
    import pytest

    from monai_unc.metrics import uncertainty_histograms

    for bad in ("no", 0, None):
        with pytest.raises(TypeError, match="density"):
            uncertainty_histograms([0.1, 0.2, 0.3], [1, 0, 1], bins=2, density=bad)
    h = uncertainty_histograms([0.1, 0.2, 0.3], [1, 0, 1], bins=2, density=False)
    np.testing.assert_array_equal(h.correct, [1.0, 1.0])


def test_undefined_scores_refuse_text_and_complex_scores():
    """fill_undefined_scores and ood_auroc_by_shift parsed text ("0.9") and dropped the imaginary part of complex scores
    (numpy's ComplexWarning only), where every other case metric refuses them (found by hostile testing)."""
    import pytest

    from monai_unc.metrics import ood_auroc, ood_auroc_by_shift

    for bad in (["0.9", "0.1", "0.5"], np.array([0.9 + 1j, 0.1, 0.5]), np.array([b"0.9", b"0.1", b"0.5"]),
                np.array(["0.9", None, 0.5], dtype=object)):
        with pytest.raises(TypeError, match="scores"):
            fill_undefined_scores(bad)
        with pytest.raises(TypeError, match="uncertainty"):
            ood_auroc_by_shift(bad, ["blur", "none", "noise"])
    with pytest.raises(TypeError, match="uncertainty_ood"):
        ood_auroc([0.1], ["0.9"])  # the rule both now follow
    # numbers of any real dtype, and a list holding None for a missing score, are read as before
    np.testing.assert_array_equal(fill_undefined_scores([0.1, None, 2]), [0.1, 3.0, 2.0])
    np.testing.assert_array_equal(fill_undefined_scores(np.array([3, 1], dtype=np.uint8)), [3.0, 1.0])
    np.testing.assert_array_equal(fill_undefined_scores([True, False]), [1.0, 0.0])
    assert ood_auroc_by_shift([0.9, 0.1, None], ["blur", "none", "noise"])["auroc"] == 1.0
