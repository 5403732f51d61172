"""The per-case records of ``evaluate`` hold a case's non-empty histogram bins, not its dense tables.

Every case's record (``state/cases/<case>.npz``, the resume cache, and the payload each ``torchrun`` rank sends to rank
0) held the dense tables of its confidence histogram, ``24 (C + 2) F`` bytes (37.6 MiB for 105 classes at
``--n-bins 960``). They now hold the packed bins; the records of earlier runs (the dense layout) are still read, to
the same outputs, and a damaged packed record is not trusted (the case is computed again).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.io import save_probabilities
from monai_unc.metrics.calibration import ConfidenceHistogram
from tests._states import sign_case_state

C = 6
N_BINS = 960  # F = 15360: the dense tables of a case are 24 x 8 x 15360 bytes = 2.8 MiB


@pytest.fixture(scope="module")
def cohort(tmp_path_factory) -> Path:
    """Four 6-class cases, labels mostly the argmax."""
    root = tmp_path_factory.mktemp("packed_records")
    (root / "labels").mkdir()
    (root / "preds").mkdir()
    rng = np.random.default_rng(5)
    affine = np.diag([1.5, 1.0, 2.0, 1.0])
    for k in range(4):
        logits = rng.normal(size=(C, 10, 9, 6)).astype(np.float32) * (1 + k)
        p = np.exp(logits)
        p /= p.sum(0, keepdims=True)
        y = np.where(rng.random(p.shape[1:]) < 0.7, p.argmax(0), rng.integers(0, C, p.shape[1:])).astype(np.uint8)
        nib.save(nib.Nifti1Image(y, affine), root / "labels" / f"case{k}.nii.gz")
        save_probabilities(p, affine, root / "preds" / f"case{k}_probs.nii.gz")
    return root


def _evaluate(cohort: Path, out: Path) -> dict[str, bytes]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(cohort / "labels", cohort / "preds", out, EvaluationConfig(n_bins=N_BINS), resume=True)
    # rows.json names the maps derived into the output folder: the folder's path aside, the same bytes
    res = {name: (out / name).read_bytes().replace(str(out).encode(), b"<out>")
           for name in ("metrics.csv", "summary.json", "state/rows.json")}
    with np.load(out / "state" / "histogram.npz") as z:
        res.update({f"histogram.npz:{k}": z[k].tobytes() + str((z[k].dtype, z[k].shape)).encode() for k in z.files})
    return res


def _records(out: Path) -> list[Path]:
    return sorted((out / "state" / "cases").glob("*.npz"))


def _as_dense(path: Path) -> None:
    """Rewrite a record as the code before wrote it: the histogram's dense tables."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    part = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("histogram/") and not k.endswith("__")}
    dense = ConfidenceHistogram.from_state_dict(part).state_dict()
    arrays = {k: v for k, v in arrays.items() if not k.startswith("histogram/") or k.endswith("__type__")}
    arrays.update({f"histogram/{k}": np.asarray(v) for k, v in dense.items()})
    np.savez_compressed(path, **arrays)
    sign_case_state(path)  # as a run of the code before signed it


def test_records_hold_the_packed_bins(cohort, tmp_path):
    """A case's record holds its histogram's non-empty bins: far below its dense tables, no dense array in it."""
    _evaluate(cohort, tmp_path / "ev")
    dense_case = 24 * (C + 2) * 16 * N_BINS
    records = _records(tmp_path / "ev")
    assert len(records) == 4
    for path in records:
        with np.load(path) as z:
            assert "histogram/bin_index" in z.files and "histogram/counts" not in z.files
            assert sum(z[k].nbytes for k in z.files) < dense_case / 20


def test_old_dense_records_resume_to_the_same_outputs(cohort, tmp_path):
    """Records of the dense layout (an earlier run's resume cache) are read back, not computed again, and the outputs
    are the same bytes; a damaged packed record is computed again (not trusted), to the same outputs."""
    expected = _evaluate(cohort, tmp_path / "fresh")
    out = tmp_path / "resumed"
    _evaluate(cohort, out)
    for path in _records(out)[:2]:
        _as_dense(path)
    before = {p.name: p.stat().st_mtime_ns for p in _records(out)}
    assert _evaluate(cohort, out) == expected
    after = {p.name: p.stat().st_mtime_ns for p in _records(out)}
    assert before == after  # every record reused: the dense ones read, none written again
    with np.load(_records(out)[0]) as z:
        assert "histogram/counts" in z.files
    damaged = _records(out)[3]
    with np.load(damaged) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["histogram/bin_index"] = arrays["histogram/bin_index"][::-1].copy()  # unsorted: refused
    np.savez_compressed(damaged, **arrays)
    sign_case_state(damaged)  # its digest matches: refused for its content
    assert _evaluate(cohort, out) == expected
    with np.load(damaged) as z:  # computed again and written anew
        assert np.all(np.diff(z["histogram/bin_index"]) > 0)
    assert json.loads(expected["summary.json"])  # a real summary, not an empty file
