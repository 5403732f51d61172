"""svls_kernel's neighbour mass summed directly (hostile review 58).

The kernel was normalised, its centre raised to ``1 - g_centre`` and normalised again: with sigma small against the
spacing ``1 - g_centre`` cancels, the neighbours' weights came out 5e-7 (relative) off at sigma 0.3 with 2 mm voxels
and sigma 0.25 was refused there, although the kernel is well defined (its centre 1/2, a neighbour ``g / (2 sum g)``).
The reference follows the paper's three steps in 60-digit arithmetic (mpmath).
"""

from __future__ import annotations

import itertools

import mpmath
import pytest
import torch

from monai_unc.losses import svls_kernel


def _reference(dims: int, k: int, sigma: float, spacing: tuple[float, ...]) -> list:
    """Islam & Glocker's kernel: a Gaussian normalised, its centre replaced by the neighbours' sum, normalised."""
    with mpmath.workdps(60):
        half = k // 2
        offsets = list(itertools.product(range(-half, half + 1), repeat=dims))
        g = {o: mpmath.exp(-sum((mpmath.mpf(i) * s) ** 2 for i, s in zip(o, spacing)) / (2 * mpmath.mpf(sigma) ** 2))
             for o in offsets}
        total = mpmath.fsum(g.values())
        g = {o: v / total for o, v in g.items()}
        centre = (0,) * dims
        g[centre] = 1 - g[centre]
        total = mpmath.fsum(g.values())
        return [[o, g[o] / total] for o in offsets]


@pytest.mark.parametrize("dims,k,sigma,spacing", [
    (3, 3, 0.3, (2.0, 2.0, 2.0)),
    (3, 3, 0.25, (2.0, 2.0, 2.0)),
    (2, 5, 0.2, (1.0, 1.0)),
    (3, 3, 0.4, (0.8, 0.8, 3.0)),
    (1, 3, 1.0, (1.0,)),
    (3, 5, 1.0, (1.0, 1.0, 2.5)),
])
def test_kernel_against_the_paper_in_high_precision(dims, k, sigma, spacing):
    kernel = svls_kernel(dims, k, sigma, spacing, dtype=torch.float64)
    half = k // 2
    for offset, want in _reference(dims, k, sigma, spacing):
        got = float(kernel[tuple(i + half for i in offset)])
        # 1e-14: exp of an argument of ~50 rounded in float64 (the corner weights); the old form was 5e-7 off
        assert abs(got - float(want)) <= 1e-14 * float(want), (offset, got, float(want))


def test_a_sigma_whose_neighbours_underflow_is_refused():
    with pytest.raises(ValueError, match="too small"):
        svls_kernel(3, sigma=0.01)  # exp(-5000) is 0 in float64
    k = svls_kernel(3, sigma=0.05, dtype=torch.float64)  # exp(-200): face neighbours 1/12 each, diagonals ~0
    assert float(k[1, 1, 1]) == 0.5 and float(k[0, 1, 1]) == pytest.approx(1 / 12, rel=1e-15)
