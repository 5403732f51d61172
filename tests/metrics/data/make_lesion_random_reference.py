"""Run the official lesion-wise codes (BraTS 2023, Shifts) on random label maps; freeze the volumes and outputs.

Where ``make_lesion_reference.py`` freezes the official outputs on eight designed cases, this script draws label maps
at random (BraTS labels 1 / 2 / 3 as blobs, touching the border and each other; predictions redrawn, thinned,
shifted or emptied; empty references; spacings that float32 does not hold exactly; the GLI, MEN and MET rules) and
stores each case's volumes (compressed label maps) beside the official BraTS scores of its three regions and the
Shifts scores of its whole tumour (nDSC, lesion F1, and the R-AAC of an uncertainty map made from the volumes), so that
the test needs neither the official code nor a random stream that may change between NumPy versions::

    git clone https://github.com/rachitsaluja/BraTS-2023-Metrics /tmp/brats     # metrics.py, surface_distance/
    git clone https://github.com/Shifts-Project/shifts /tmp/shifts              # mswml/metrics.py
    python tests/metrics/data/make_lesion_random_reference.py /tmp/brats /tmp/shifts/mswml \
        tests/metrics/data/lesion_random_reference.json

It needs what ``make_lesion_reference.py`` needs (``nibabel``, ``pandas``, ``connected-components-3d``,
``scikit-learn``, ``joblib``). ``test_random_volumes_equal_the_official_code_live`` of
``tests/metrics/test_lesions_random_reference.py`` calls :func:`official_scores` and :func:`official_shifts` when
``BRATS_2023_METRICS_DIR`` and ``SHIFTS_MSWML_DIR`` name such checkouts.
"""

from __future__ import annotations

import base64
import json
import sys
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy import ndimage

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_lesion_reference import _load, compat  # noqa: E402

#: the number of random cases and the seed they are drawn with
N_CASES, SEED = 80, 62
#: the rules drawn (GLI, SSA and PED share dilation 3 and 50 mm^3)
CHALLENGES = ("BraTS-GLI", "BraTS-MEN", "BraTS-MET")
#: voxel sizes (mm); 0.7, 1.3 and 0.9 are not float32 numbers, as NIfTI headers store them
SIZES = (0.5, 0.7, 0.9, 1.0, 1.3, 2.0, 3.0)


def _blobs(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random blobs of the labels 1, 2 and 3 (the labels mixed inside a blob)."""
    seeds = rng.random(shape) < rng.uniform(0.004, 0.04)
    grown = ndimage.binary_dilation(seeds, iterations=int(rng.integers(1, 3))) if seeds.any() else seeds
    labels = rng.integers(1, 4, shape)
    out = np.zeros(shape, np.uint8)
    out[grown] = labels[grown]
    return out


def draw_cases(n: int = N_CASES, seed: int = SEED) -> list[dict]:
    """``n`` random cases: ``{"shape", "spacing", "challenge", "pred", "truth"}`` with uint8 label maps."""
    rng = np.random.default_rng(seed)
    cases = []
    for i in range(n):
        shape = tuple(int(s) for s in rng.integers(6, 15, 3))
        spacing = tuple(float(s) for s in rng.choice(SIZES, 3))
        truth = _blobs(rng, shape)
        kind = i % 5
        if kind == 0:
            pred = _blobs(rng, shape)  # unrelated: false positives and misses
        elif kind == 1:  # thinned, with stray voxels
            pred = truth.copy()
            pred[rng.random(shape) < 0.15] = 0
            stray = rng.random(shape) < 0.02
            pred[stray] = rng.integers(1, 4, shape)[stray]
        elif kind == 2:  # shifted by one or two voxels (split and merged components)
            pred = np.roll(truth, int(rng.integers(1, 3)) * int(rng.choice([-1, 1])), axis=int(rng.integers(0, 3)))
        elif kind == 3:  # grown: neighbouring lesions merged into one predicted component
            pred = np.where(ndimage.grey_dilation(truth, size=(2, 2, 2)) > 0,
                            np.maximum(truth, 2), 0).astype(np.uint8)
        else:
            pred = truth.copy()
        if i % 11 == 3:
            truth[:] = 0
        if i % 13 == 5:
            pred[:] = 0
        cases.append({"shape": shape, "spacing": spacing, "challenge": CHALLENGES[i % len(CHALLENGES)],
                      "pred": pred, "truth": truth})
    return cases


def encode(labels: np.ndarray) -> str:
    """A uint8 label map as text: its C-order bytes, zlib-compressed, in base64."""
    return base64.b64encode(zlib.compress(np.ascontiguousarray(labels, np.uint8).tobytes(), 9)).decode("ascii")


def decode(text: str, shape: Sequence[int]) -> np.ndarray:
    """The label map of :func:`encode`."""
    return np.frombuffer(zlib.decompress(base64.b64decode(text)), np.uint8).reshape(tuple(shape)).copy()


def uncertainty(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """A voxel uncertainty map without ties, made from integers (the same on every platform): a multiplicative hash
    of the voxel index in [0, 0.5), plus 0.5 where prediction and truth disagree."""
    idx = np.arange(pred.size, dtype=np.uint64).reshape(pred.shape)
    spread = ((idx * np.uint64(2654435761)) % np.uint64(2**32)).astype(np.float64) / 2.0**33
    return spread + 0.5 * ((pred > 0) != (truth > 0))


def official_shifts(shifts_dir: str | Path, cases: list[dict]) -> list[dict]:
    """Per case the Shifts ``mswml`` scores of the whole tumour (labels > 0): nDSC, lesion F1 at IoU 0.25 and 0.5,
    and the nDSC R-AAC of :func:`uncertainty`."""
    compat()
    shifts = _load("shifts_mswml_metrics_random", Path(shifts_dir) / "metrics.py")
    out = []
    for case in cases:
        g, p = (case["truth"] > 0).astype(np.uint8), (case["pred"] > 0).astype(np.uint8)
        u = uncertainty(case["pred"], case["truth"])
        out.append({"ndsc": float(shifts.dice_norm_metric(g, p)), "f1": float(shifts.lesion_f1_score(g, p)),
                    "f1_iou_0.5": float(shifts.lesion_f1_score(g, p, IoU_threshold=0.5)),
                    "raac": float(shifts.ndsc_aac_metric(g.flatten(), p.flatten(), u.flatten()))})
    return out


def official_scores(brats_dir: str | Path, cases: list[dict]) -> list[dict]:
    """Per case ``{"spacing": header zooms, region: {"dice", "hd95", "n_tp", "n_fp", "n_fn"}}`` of the official code."""
    import nibabel as nib

    compat()
    sys.path.insert(0, str(brats_dir))
    brats = _load("brats_2023_metrics_random", Path(brats_dir) / "metrics.py")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            affine = np.diag([*case["spacing"], 1.0])
            nib.save(nib.Nifti1Image(case["pred"], affine), f"{tmp}/pred.nii.gz")
            nib.save(nib.Nifti1Image(case["truth"], affine), f"{tmp}/gt.nii.gz")
            zooms = nib.load(f"{tmp}/pred.nii.gz").header.get_zooms()  # the official code reads the prediction's
            df = brats.get_LesionWiseResults(f"{tmp}/pred.nii.gz", f"{tmp}/gt.nii.gz", case["challenge"])
            row: dict = {"spacing": [float(z) for z in zooms]}
            for _, r in df.iterrows():
                row[r["Labels"]] = {"dice": float(r["LesionWise_Score_Dice"]),
                                    "hd95": float(r["LesionWise_Score_HD95"]), "n_tp": int(r["Num_TP"]),
                                    "n_fp": int(r["Num_FP"]), "n_fn": int(r["Num_FN"])}
            out.append(row)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    drawn = draw_cases()
    scores = official_scores(sys.argv[1], drawn)
    shifts_scores = official_shifts(sys.argv[2], drawn)
    table = {"seed": SEED, "cases": [
        {"shape": list(c["shape"]), "challenge": c["challenge"], "pred": encode(c["pred"]),
         "truth": encode(c["truth"]), **s, "shifts": h} for c, s, h in zip(drawn, scores, shifts_scores)]}
    Path(sys.argv[3]).write_text(json.dumps(table, separators=(",", ":")) + "\n")
    print(f"wrote {sys.argv[3]}: {len(table['cases'])} cases")
