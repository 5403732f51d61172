"""Run the ValUES authors' aggregation functions on small random maps and freeze their numbers (review 67).

The authors' code (Kahl et al., ICLR 2024) is not part of this repository. Check it out and point this script at it::

    git clone https://github.com/IML-DKFZ/values /tmp/values
    python tests/data/make_values_aggregation_reference.py /tmp/values tests/data/values_aggregation_reference.json

``evaluation/uncertainty_aggregation/aggregate_uncertainties.py`` imports hydra, jsbeautifier and medpy at module
level for its file handling; the three functions used here (``patch_level_aggregation``, ``image_level_aggregation``,
``threshold_aggregation``) need only numpy and ``scipy.signal.convolve``, so :func:`authors_functions` executes those
function definitions alone, unchanged. Their threshold fit (``find_threshold.py``) reads files, so :func:`fit_threshold`
below follows its steps on arrays: the per-prediction quantile ``1 - count_nonzero(pred) / pred.size``, its mean, and
``np.quantile`` of the stacked validation maps.

``tests/test_aggregation_values_reference.py`` compares ``monai_unc.aggregation`` with the frozen numbers.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import numpy as np
from scipy.signal import convolve

#: the authors' module, relative to their checkout
MODULE = "evaluation/uncertainty_aggregation/aggregate_uncertainties.py"
#: (name, spatial shape, patch size, decimals of the map: 1 gives many ties, threshold)
CASES = (
    ("2d_odd_k3", (7, 9), 3, 4, 0.5),
    ("2d_k1", (5, 6), 1, 4, 0.3),
    ("2d_aniso_k2x4", (8, 7), (2, 4), 4, 0.7),
    ("2d_ties_k2", (6, 6), 2, 1, 0.5),
    ("2d_k10_exact", (10, 12), 10, 4, 0.9),
    ("2d_k10_larger_than_image", (6, 8), 10, 4, 0.5),
    ("3d_odd_k3", (5, 7, 6), 3, 4, 0.5),
    ("3d_aniso_k1x2x3", (4, 6, 7), (1, 2, 3), 4, 0.2),
    ("3d_ties_k2", (5, 5, 4), 2, 1, 0.4),
    ("3d_k10_larger_than_image", (6, 5, 7), 10, 4, 0.6),
    ("3d_k10_exact", (10, 11, 10), 10, 2, 0.8),
)


def authors_functions(checkout: str) -> dict:
    """The authors' three aggregation functions, executed from their source without the module's other imports."""
    tree = ast.parse((Path(checkout) / MODULE).read_text())
    names = ("patch_level_aggregation", "image_level_aggregation", "threshold_aggregation")
    namespace = {"np": np, "convolve": convolve}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            exec(compile(ast.Module([node], type_ignores=[]), MODULE, "exec"), namespace)
    return {name: namespace[name] for name in names}


def fit_threshold(maps: list[np.ndarray], preds: list[np.ndarray]) -> float:
    """ValUES eqs. 21-22 as ``find_threshold.py`` computes them (its file reading left out)."""
    q = float(np.mean([1 - np.count_nonzero(p) / p.size for p in preds]))
    return float(np.quantile(np.array(maps), q))


def main(checkout: str, out: str) -> None:
    fns = authors_functions(checkout)
    rng = np.random.default_rng(67)
    cases = []
    for name, shape, patch, decimals, threshold in CASES:
        u = np.round(rng.random(shape), decimals)
        patch_sum = fns["patch_level_aggregation"](u, patch)
        patch_mean = fns["patch_level_aggregation"](u, patch, mean=True)
        cases.append({
            "name": name, "uncertainty": u.tolist(), "patch_size": patch, "threshold": threshold,
            "patch_sum": patch_sum["max_score"], "patch_mean": patch_mean["max_score"],
            "patch_start": [int(a) for a, _ in patch_sum["bounding_box"]],
            "sum": fns["image_level_aggregation"](u)["max_score"],
            "mean": fns["image_level_aggregation"](u, mean=True),
            "threshold_mean": float(fns["threshold_aggregation"](u, threshold=threshold)["max_score"]),
        })
    maps = [np.round(rng.random((6, 7)), 3) for _ in range(4)]
    preds = [(rng.random((6, 7)) < f).astype(np.int64) * 2 for f in (0.1, 0.3, 0.0, 0.5)]
    table = {
        "source": "github.com/IML-DKFZ/values " + MODULE,
        "cases": cases,
        "fit_threshold": {"uncertainty": [m.tolist() for m in maps], "pred": [p.tolist() for p in preds],
                          "threshold": fit_threshold(maps, preds)},
    }
    Path(out).write_text(json.dumps(table, indent=None) + "\n")
    print(f"wrote {out}: {len(cases)} cases")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
