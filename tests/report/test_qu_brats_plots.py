"""The QU-BraTS curves' figure against the curves it is given.

Found by hostile testing: a curve longer than the thresholds lost its last values without a word (a shorter one failed
with numpy's ``IndexError``, a missing curve with a ``KeyError``), and a seventh region was drawn in the first's colour.
"""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.colors import to_hex

from monai_unc.report.plots import plot_qu_brats_curves

T = [75.0, 25.0, 50.0]  # any order


def _curve(n: int = 3) -> dict[str, list[float]]:
    return {"dice": list(np.linspace(0.9, 0.7, n)), "ftp": list(np.linspace(0.5, 0.0, n)),
            "ftn": list(np.linspace(0.3, 0.0, n))}


@pytest.mark.parametrize("n", [2, 4])
def test_a_curve_not_one_value_per_threshold_is_refused(n):
    curves = {"WT": _curve(), "TC": {**_curve(), "ftp": _curve(n)["ftp"]}}
    with pytest.raises(ValueError, match=r"curves\['TC'\]\['ftp'\]"):
        plot_qu_brats_curves(T, curves)


def test_a_missing_curve_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"curves\['WT'\] has no 'ftn'"):
        plot_qu_brats_curves(T, {"WT": {"dice": [1, 1, 1], "ftp": [0, 0, 0]}})


def test_each_region_has_its_own_colour_and_its_values_sorted_by_threshold():
    curves = {f"region {i}": _curve() for i in range(9)}
    fig = plot_qu_brats_curves(T, curves)
    for ax, key in zip(fig.axes, ("dice", "ftp", "ftn")):
        lines = ax.get_lines()
        assert len({to_hex(ln.get_color()) for ln in lines}) == 9
        for ln, (name, c) in zip(lines, curves.items()):
            assert ln.get_label() == name
            np.testing.assert_array_equal(ln.get_xdata(), [25.0, 50.0, 75.0])
            np.testing.assert_array_equal(ln.get_ydata(), np.asarray(c[key])[[1, 2, 0]])
