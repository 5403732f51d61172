"""Run the authors' Rate-In layer on small random feature maps and freeze its numbers.

The official code is not part of this repository. Check it out and point this script at it::

    git clone https://github.com/code-supplement-25/rate-in /tmp/rate-in
    python tests/inferers/data/make_rate_in_reference.py /tmp/rate-in tests/inferers/data/rate_in_reference.json

It needs ``torch`` and ``torchmetrics`` (SSIM). The losses are those of the authors' example notebooks
(``examples/example_adaptive_layer_with_simple_mse_loss.ipynb``: normalised MSE; ``tutorial_cnn_with_ssim_loss``:
``1 - SSIM`` of min-max scaled maps, torchmetrics, ``data_range=1``), restated here; the layer
(``rate_in/adaptive_dropout.py``, ``AdaptiveInformationDropout``) is imported from the checkout and run with the
notebooks' optimiser settings (30 iterations, learning rate 0.1, decay 0.9, stopping error 0.01) from ``p = 0.1``.
``tests/inferers/test_rate_in_reference.py`` compares the library with the frozen numbers.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch

#: (name, map shape) of the reference maps: post-ReLU feature maps, 3D for MSE and 2D for SSIM (torchmetrics)
SHAPES = {"mse": (1, 8, 6, 6, 6), "ssim": (1, 4, 16, 16)}
SEEDS = (0, 1, 2, 3, 4)
RATES = (0.1, 0.3)
TARGET = 0.1


def make_map(kind: str, seed: int) -> torch.Tensor:
    """The reference feature map ``kind`` (``"mse"`` or ``"ssim"``) of ``seed``: ReLU of standard normal values."""
    g = torch.Generator().manual_seed(100 + seed)
    return torch.randn(SHAPES[kind], generator=g).relu()


def make_keep(x: torch.Tensor, rate: float, seed: int) -> torch.Tensor:
    """A fixed element-wise 0/1 keep-mask at ``rate`` (the mask ``torch.nn.functional.dropout`` would apply)."""
    g = torch.Generator().manual_seed(500 + seed)
    return (torch.rand(x.shape, generator=g) >= rate).to(x.dtype)


def official_mse(pre_dropout, post_dropout, properties=None):
    """The authors' normalised MSE (example notebook): ``mean((pre - post)^2) / (mean(pre^2) + 1e-8)``, clamped."""
    mse = torch.mean((pre_dropout.float() - post_dropout.float()) ** 2)
    return torch.clamp(mse / (torch.mean(pre_dropout.float() ** 2) + 1e-8), 0, 1)


def official_ssim(pre_dropout, post_dropout, properties=None):
    """The authors' SSIM loss (CNN tutorial): each map min-max scaled by its own range, torchmetrics SSIM."""
    from torchmetrics.image import StructuralSimilarityIndexMeasure

    ssim = StructuralSimilarityIndexMeasure(data_range=1.0)
    a = (pre_dropout - pre_dropout.min()) / (pre_dropout.max() - pre_dropout.min() + 1e-8)
    b = (post_dropout - post_dropout.min()) / (post_dropout.max() - post_dropout.min() + 1e-8)
    return 1 - ssim(a, b)


LOSSES = {"mse": official_mse, "ssim": official_ssim}

#: the controller run on a loss that does not depend on the mask: every step is the same error, ``0.3 - 0.1``
CONSTANT_LOSS, CONTROLLER_P0, CONTROLLER_STEPS = 0.3, 0.5, 12


def official_results(checkout: str) -> dict:
    """Loss values on fixed masks and searched rates of the authors' layer on the reference maps."""
    source = Path(checkout) / "rate_in" / "adaptive_dropout.py"
    spec = importlib.util.spec_from_file_location("adaptive_dropout", source)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out: dict = {"target": TARGET, "pairs": [], "searches": []}
    # the update rule alone: the rates the layer measures at, iteration by iteration, under a constant loss
    config = mod.OptimizerConfig(max_iterations=CONTROLLER_STEPS, learning_rate=0.1, decay_rate=0.9,
                                 stopping_error=0.01)
    layer = mod.AdaptiveInformationDropout(CONTROLLER_P0, lambda **kw: torch.tensor(CONSTANT_LOSS), TARGET,
                                           config).train()
    visited = []

    def constant(layer=layer, visited=visited, **kw):
        visited.append(float(layer.p))
        return torch.tensor(CONSTANT_LOSS)

    layer.calc_information_loss = constant
    final = float(layer._optimize_dropout_rate(torch.ones(1, 4)))
    out["controller"] = {"constant_loss": CONSTANT_LOSS, "p0": CONTROLLER_P0, "visited": visited, "final": final}
    for kind, fn in LOSSES.items():
        for seed in SEEDS:
            x = make_map(kind, seed)
            for rate in RATES:
                # what the authors' layer compares: the map against its inverted-dropout output (1 / (1 - p))
                post = x * make_keep(x, rate, seed) / (1 - rate)
                out["pairs"].append({"loss": kind, "seed": seed, "rate": rate, "official": float(fn(x, post))})
            torch.manual_seed(seed)
            config = mod.OptimizerConfig(max_iterations=30, learning_rate=0.1, decay_rate=0.9, stopping_error=0.01)
            layer = mod.AdaptiveInformationDropout(0.1, fn, TARGET, config).train()
            seen = []

            def record(fn=fn, seen=seen, **kw):
                value = fn(**kw)
                seen.append(float(value))
                return value

            layer.calc_information_loss = record
            rate = float(layer._optimize_dropout_rate(x))
            # the expected loss at the rate found, over 200 fresh inverted-dropout masks
            torch.manual_seed(1000 + seed)
            expected = sum(float(fn(x, torch.nn.functional.dropout(x, rate, True))) for _ in range(200)) / 200
            out["searches"].append({"loss": kind, "seed": seed, "rate": rate, "iterations": len(seen),
                                    "losses": seen, "expected_loss_at_rate": expected})
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: make_rate_in_reference.py OFFICIAL_CHECKOUT OUT.json")
    table = official_results(sys.argv[1])
    Path(sys.argv[2]).write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {sys.argv[2]}: {len(table['pairs'])} loss pairs, {len(table['searches'])} searches")
