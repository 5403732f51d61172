"""Distinct colours for many classes: the label colours of the overlays and the viewer, the curves of many classes.

A whole-body model has a hundred classes and more; a fixed palette of a few colours, cycled, gives many organs one
colour. :func:`distinct_colors` extends a hand-picked start (:data:`LABEL_COLORS` on images, matplotlib's ten
colours on a white background) greedily: each next colour is the one of a grid of candidates farthest, in CIELAB
(CIE 1976 colour difference), from every colour before it. So every colour differs from all earlier ones (consecutive
labels are far apart), the first ``n`` colours are the same whatever the number asked for (a class keeps its colour
in every case and figure), and for 104 classes on images the closest two differ by about 16 (about 2.3 is a just
noticeable difference). :func:`class_colors` gives each label value its colour: by value while the values are at
most :data:`MAX_DISTINCT_COLORS`, else by rank among the values given.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import numpy as np

__all__ = ["LABEL_COLORS", "MAX_DISTINCT_COLORS", "class_colors", "distinct_colors", "hex_rgb"]

#: the first twelve label colours on images (label ``k`` gets ``distinct_colors(n)[k - 1]``, these for ``k <= 12``):
#: bright, saturated, readable as contours on a grey scan and as a half-transparent overlay, and apart (CIE76 above 10)
#: also for a deuteranopic or protanopic reader (label 4 was chartreuse, 5.6 from label 1's gold for a deuteranope)
LABEL_COLORS = ("#ffd700", "#00e5ff", "#ff7f0e", "#ffffa5", "#ff00ff", "#4f8cff", "#ff4d4d", "#00c49a", "#9669a5",
                "#ffffff", "#a0522d", "#808000")
#: the first ten curve colours on a white background (matplotlib's default cycle)
_LINE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
                "#17becf")
#: the most colours :func:`distinct_colors` gives (all different); beyond, :func:`class_colors` repeats them
MAX_DISTINCT_COLORS = 4096
#: per background: the start, the CIELAB lightness range and the least chroma of the generated colours
_BACKGROUNDS = {"image": (LABEL_COLORS, (50.0, 98.0), 35.0), "white": (_LINE_COLORS, (25.0, 72.0), 25.0)}
_LEVELS = 24  # candidate grid per RGB channel: 24^3 colours, about 7000 of them within the ranges


def _lab(rgb: np.ndarray) -> np.ndarray:
    """CIELAB (D65) of sRGB colours ``(N, 3)`` in 0..255."""
    c = rgb / 255.0
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                  [0.0193339, 0.1191920, 0.9503041]])
    xyz = lin @ m.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], axis=1)


def hex_rgb(color: str) -> tuple[int, int, int]:
    """The red, green and blue values (0-255) of a ``#rrggbb`` colour.

    Example:
        >>> hex_rgb("#ffd700")
        (255, 215, 0)
    """
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def _rgb(colors: Iterable[str]) -> np.ndarray:
    return np.array([hex_rgb(h) for h in colors], dtype=np.float64).reshape(-1, 3)


@lru_cache(maxsize=8)
def _greedy(background: str, n: int) -> tuple[str, ...]:
    start, (l_lo, l_hi), c_min = _BACKGROUNDS[background]
    levels = np.linspace(0, 255, _LEVELS).round()
    pool = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), axis=-1).reshape(-1, 3)
    lab = _lab(pool)
    keep = (lab[:, 0] >= l_lo) & (lab[:, 0] <= l_hi) & (np.hypot(lab[:, 1], lab[:, 2]) >= c_min)
    pool, lab = pool[keep], lab[keep]
    chosen = list(start[:n])
    nearest = np.full(len(pool), np.inf)
    for c in _lab(_rgb(chosen)):
        nearest = np.minimum(nearest, np.linalg.norm(lab - c, axis=1))
    while len(chosen) < n:
        i = int(np.argmax(nearest))  # the candidate farthest from every colour so far
        chosen.append("#{:02x}{:02x}{:02x}".format(*(int(v) for v in pool[i])))
        nearest = np.minimum(nearest, np.linalg.norm(lab - lab[i], axis=1))
    return tuple(chosen)


def distinct_colors(n: int, background: str = "image") -> list[str]:
    """``n`` different colours (``"#rrggbb"``), each as far as the grid allows from all the colours before it.

    The first ``k`` colours do not depend on ``n``: a label keeps its colour whatever the number of classes.

    Args:
        n: how many, 0 .. :data:`MAX_DISTINCT_COLORS`.
        background: ``"image"`` (contours and label overlays on a grey scan or a dark panel: bright saturated
            colours, starting with :data:`LABEL_COLORS`) or ``"white"`` (curves on a white plot: darker colours,
            starting with matplotlib's ten).

    Returns:
        The colours.

    Raises:
        ValueError: ``n`` outside 0 .. :data:`MAX_DISTINCT_COLORS`, or an unknown ``background``.

    Example:
        >>> colors = distinct_colors(105)
        >>> len(set(colors)), colors[:2], distinct_colors(2, "white")
        (105, ['#ffd700', '#00e5ff'], ['#1f77b4', '#ff7f0e'])
    """
    if background not in _BACKGROUNDS:
        raise ValueError(f"background must be one of {tuple(_BACKGROUNDS)}, got {background!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n <= MAX_DISTINCT_COLORS:
        raise ValueError(f"n must be an integer in 0 .. {MAX_DISTINCT_COLORS}, got {n!r}")
    size = 16
    while size < n:  # a few cached lengths; each list's start is the shorter list
        size *= 2
    return list(_greedy(background, min(size, MAX_DISTINCT_COLORS))[:n])


def class_colors(values: Iterable[int], background: str = "image") -> dict[int, str]:
    """The colour of each label value: ``distinct_colors(max)[value - 1]``, or by rank for very large values.

    While the largest value is at most :data:`MAX_DISTINCT_COLORS`, a value has the same colour in every case and
    figure (label ``k`` the ``k``-th colour). A larger value (a sparse atlas, label values in the thousands) makes
    the colours go by the values' rank instead: still all different among the values given (up to
    :data:`MAX_DISTINCT_COLORS` of them; more repeat the colours in turn).

    Args:
        values: positive integer label values (repeats and order do not matter).
        background: as :func:`distinct_colors`.

    Returns:
        ``{value: "#rrggbb"}``.

    Raises:
        ValueError: a value below 1, or an unknown ``background``.

    Example:
        >>> class_colors([3, 1])
        {1: '#ffd700', 3: '#ff7f0e'}
        >>> class_colors([255, 300]) == {255: distinct_colors(300)[254], 300: distinct_colors(300)[299]}
        True
    """
    vals = sorted({int(v) for v in values})
    if vals and vals[0] < 1:
        raise ValueError(f"values must be positive labels (0 is the background), got {vals[0]}")
    if not vals:
        return {}
    if vals[-1] <= MAX_DISTINCT_COLORS:
        colors = distinct_colors(vals[-1], background)
        return {v: colors[v - 1] for v in vals}
    colors = distinct_colors(min(len(vals), MAX_DISTINCT_COLORS), background)
    return {v: colors[i % len(colors)] for i, v in enumerate(vals)}
