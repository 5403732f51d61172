"""Run the official lesion-wise metrics on the synthetic cohort of ``tests/metrics/lesion_cohort.py`` and freeze them.

The official code is not part of this repository. Check it out and point this script at it::

    git clone https://github.com/rachitsaluja/BraTS-2023-Metrics /tmp/brats     # metrics.py, surface_distance/
    git clone https://github.com/Shifts-Project/shifts /tmp/shifts              # mswml/metrics.py
    python tests/metrics/data/make_lesion_reference.py /tmp/brats /tmp/shifts/mswml \
        tests/metrics/data/lesion_reference.json

It needs ``nibabel``, ``pandas``, ``connected-components-3d`` (``cc3d``), ``scikit-learn`` and ``joblib``. Current
library versions removed names the 2023 code uses (or, for SciPy's, deprecated them for removal in SciPy 2.0);
:func:`compat` puts them back where missing without touching the code (``DataFrame.append`` as ``pandas.concat``,
``DataFrame.replace`` skipping the column of arrays, ``numpy.Inf``, ``scipy.ndimage.filters`` / ``.morphology``).
``test_equal_to_official_code_live`` of ``tests/metrics/test_lesions.py`` calls :func:`official_results` directly
when the environment variables ``BRATS_2023_METRICS_DIR`` and ``SHIFTS_MSWML_DIR`` name such checkouts.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from lesion_cohort import CASES, make_case  # noqa: E402

#: the BraTS challenges whose settings the table covers (dilation, minimum volume): GLI (3, 50) and MET (1, 2)
CHALLENGES = ("BraTS-GLI", "BraTS-MET")


def compat() -> None:
    """Names the 2023 code still calls that pandas >= 2 and NumPy >= 2 removed (SciPy 2.0 will remove its own)."""
    import pandas as pd
    import scipy.ndimage

    if not hasattr(pd.DataFrame, "append"):
        pd.DataFrame.append = lambda self, other: pd.concat([self, other])
    if not getattr(pd.DataFrame.replace, "_lesion_compat", False):
        original = pd.DataFrame.replace

        def replace(self, to_replace=None, value=None, **kwargs):
            # pandas 3 compares every cell of an object column with ``to_replace``; the 2023 code keeps arrays of
            # lesion numbers in one, so replace in the other columns only (``inf`` occurs in the numeric ones)
            try:
                return original(self, to_replace, value, **kwargs)
            except ValueError:
                out = self if kwargs.get("inplace") else self.copy()
                for col in out.columns:
                    if out[col].dtype != object:
                        out[col] = out[col].replace(to_replace, value)
                return None if kwargs.get("inplace") else out

        replace._lesion_compat = True
        pd.DataFrame.replace = replace
    if "Inf" not in np.__dict__:
        np.Inf = np.inf
    for sub in ("filters", "morphology"):
        if not hasattr(scipy.ndimage, sub):
            setattr(scipy.ndimage, sub, scipy.ndimage)


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def official_results(brats_dir: str | Path, shifts_dir: str | Path) -> dict:
    """``{case: {"spacing", "<challenge>": {region: {...}}, "shifts": {...}}}`` from the official code."""
    import nibabel as nib

    compat()
    sys.path.insert(0, str(brats_dir))
    brats = _load("brats_2023_metrics", Path(brats_dir) / "metrics.py")
    shifts = _load("shifts_mswml_metrics", Path(shifts_dir) / "metrics.py")
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(CASES):
            pred, truth, spacing, u = make_case(i)
            affine = np.diag([*spacing, 1.0])
            nib.save(nib.Nifti1Image(pred.astype(np.uint8), affine), f"{tmp}/{case}_pred.nii.gz")
            nib.save(nib.Nifti1Image(truth.astype(np.uint8), affine), f"{tmp}/{case}_gt.nii.gz")
            zooms = nib.load(f"{tmp}/{case}_gt.nii.gz").header.get_zooms()
            row: dict = {"spacing": [float(z) for z in zooms]}
            for challenge in CHALLENGES:
                df = brats.get_LesionWiseResults(f"{tmp}/{case}_pred.nii.gz", f"{tmp}/{case}_gt.nii.gz", challenge)
                row[challenge] = {
                    r["Labels"]: {"dice": float(r["LesionWise_Score_Dice"]), "hd95": float(r["LesionWise_Score_HD95"]),
                                  "n_tp": int(r["Num_TP"]), "n_fp": int(r["Num_FP"]), "n_fn": int(r["Num_FN"])}
                    for _, r in df.iterrows()}
            g, p = (truth > 0).astype(np.uint8), (pred > 0).astype(np.uint8)
            row["shifts"] = {
                "ndsc": float(shifts.dice_norm_metric(g, p)),
                "f1": float(shifts.lesion_f1_score(g, p)),
                "raac": float(shifts.ndsc_aac_metric(g.flatten(), p.flatten(), u.flatten())),
            }
            out[case] = row
    return out


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    table = official_results(sys.argv[1], sys.argv[2])
    Path(sys.argv[3]).write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {sys.argv[3]}: {len(table)} cases")
