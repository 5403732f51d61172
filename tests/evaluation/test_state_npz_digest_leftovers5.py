"""The per-case resume state's ``<case>.npz`` is covered by the state's digest.

Found by review: the digest saved in ``state/cases/<case>.json`` covered the JSON text only, so an edited ``.npz``
beside it (a histogram count changed by hand) or one swapped for another case's was read back as computed, and a
resumed ``evaluate`` summed it into the cohort's calibration. The JSON now holds the sha256 of the ``.npz`` written
with it; another ``.npz`` makes the case computed again.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.engine import CaseCache
from monai_unc.engine.records import record_cache_hooks
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.evaluation.resume import case_fingerprint, load_case_state, save_case_state
from monai_unc.evaluation.runner import evaluate_files
from monai_unc.io import match_cases
from tests._states import write_signed_state


@pytest.fixture(scope="module")
def cohort(tmp_path_factory) -> Path:
    return write_toy_cohort(tmp_path_factory.mktemp("npz_digest"), n_cases=3, shape=(8, 8, 8))["labels"].parent


def _config() -> EvaluationConfig:
    c = EvaluationConfig(spatial=False)
    c.validate()
    return c


def _saved(cohort: Path, tmp_path: Path):
    files = match_cases(cohort / "labels", cohort / "predictions")
    config = _config()
    fps = {}
    for f in files:
        result, got, n = evaluate_files(f, config)
        result.files, result.num_classes = got, n
        fps[f.case_id] = case_fingerprint(f, config)
        save_case_state(tmp_path, result, fps[f.case_id], n)
        assert load_case_state(tmp_path, f.case_id, fps[f.case_id]) is not None
    return files, fps


def _edit_counts(npz: Path) -> None:
    """A valid ``.npz`` with one histogram bin's confidence sum changed: what a hand edit leaves (still a valid
    state: the histogram reads it back)."""
    with np.load(npz) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["histogram/bin_sums"] = arrays["histogram/bin_sums"].copy()
    arrays["histogram/bin_sums"][0] += 1e-3
    np.savez_compressed(npz, **arrays)


def test_an_edited_npz_is_not_reused(cohort, tmp_path):
    files, fps = _saved(cohort, tmp_path)
    cid = files[0].case_id
    _edit_counts(tmp_path / f"{cid}.npz")
    assert load_case_state(tmp_path, cid, fps[cid]) is None
    assert load_case_state(tmp_path, files[1].case_id, fps[files[1].case_id]) is not None  # the others are kept


def test_another_cases_npz_is_not_reused(cohort, tmp_path):
    files, fps = _saved(cohort, tmp_path)
    a, b = files[0].case_id, files[1].case_id
    assert (tmp_path / f"{a}.npz").read_bytes() != (tmp_path / f"{b}.npz").read_bytes()
    shutil.copyfile(tmp_path / f"{b}.npz", tmp_path / f"{a}.npz")
    assert load_case_state(tmp_path, a, fps[a]) is None


def test_the_json_names_the_digest_of_the_npz_written_with_it(cohort, tmp_path):
    files, _ = _saved(cohort, tmp_path)
    for f in files:
        doc = json.loads((tmp_path / f"{f.case_id}.json").read_text())
        assert doc["arrays"] is True
        assert doc["arrays_sha256"] == hashlib.sha256((tmp_path / f"{f.case_id}.npz").read_bytes()).hexdigest()


def test_a_state_saved_without_the_npz_digest_is_computed_again(cohort, tmp_path):
    """A state of the code before (no ``arrays_sha256``), re-signed so that the JSON digest itself matches."""
    files, fps = _saved(cohort, tmp_path)
    cid = files[0].case_id
    path = tmp_path / f"{cid}.json"
    doc = json.loads(path.read_text())
    del doc["arrays_sha256"]
    write_signed_state(path, doc)
    assert load_case_state(tmp_path, cid, fps[cid]) is None


class _Record:
    """A minimal record: JSON ``n``, array ``x``."""

    def __init__(self, n, x):
        self.n, self.x = n, x

    def to_record(self):
        return {"n": self.n}, ({"x": self.x} if self.x is not None else {})

    @classmethod
    def from_record(cls, doc, arrays):
        return cls(doc["n"], arrays.get("x"))


def test_the_record_hooks_check_the_digest_for_any_record(tmp_path):
    dump, restore = record_cache_hooks(_Record)
    cache = CaseCache(tmp_path, lambda item: {"v": 1}, dump=dump, restore=restore)
    cache.save("a", _Record(1, np.arange(4)), {"v": 1})
    cache.save("b", _Record(2, np.arange(5)), {"v": 1})
    cache.save("c", _Record(3, None), {"v": 1})  # no arrays: no .npz, nothing to digest
    assert not (tmp_path / "c.npz").exists() and "arrays_sha256" not in json.loads((tmp_path / "c.json").read_text())
    assert cache.load("c", {"v": 1}).n == 3
    assert cache.load("a", {"v": 1}).x.tolist() == [0, 1, 2, 3]
    np.savez_compressed(tmp_path / "a.npz", x=np.arange(4) * 2)
    assert cache.load("a", {"v": 1}) is None
    shutil.copyfile(tmp_path / "b.npz", tmp_path / "a.npz")
    assert cache.load("a", {"v": 1}) is None
    assert cache.load("b", {"v": 1}).x.tolist() == [0, 1, 2, 3, 4]


def test_a_resumed_evaluation_with_an_edited_npz_equals_a_fresh_one(cohort, tmp_path):
    def run(out):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            run_evaluate(cohort / "labels", cohort / "predictions", out, _config(), resume=True)
        with np.load(out / "state" / "histogram.npz") as z:
            return (out / "metrics.csv").read_bytes(), {k: z[k].tobytes() for k in z.files}

    fresh = run(tmp_path / "fresh")
    out = tmp_path / "resumed"
    run(out)
    npz = sorted((out / "state" / "cases").glob("*.npz"))[0]
    _edit_counts(npz)
    assert run(out) == fresh


def test_a_derived_map_edited_or_swapped_since_the_evaluation_is_evaluated_again(cohort, tmp_path, monkeypatch):
    """The maps evaluate derives from the probabilities (``<output>/maps``, drawn by the report beside the rows) are
    covered too: one edited by hand, or replaced by another case's, makes its case evaluated again, which writes it
    anew; a state that records no digests of its maps is evaluated again too."""
    import monai_unc.evaluation.runner as runner_module
    from tests._states import write_signed_state

    pred = tmp_path / "pred"
    shutil.copytree(cohort / "predictions", pred)
    for p in pred.glob("*_predictive_entropy.nii.gz"):
        p.unlink()  # probabilities only: evaluate derives the maps

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            run_evaluate(cohort / "labels", pred, tmp_path / "ev", _config(), resume=True)

    run()
    maps = tmp_path / "ev" / "maps"
    fresh = {p.name: p.read_bytes() for p in maps.iterdir()}
    ids = sorted({n.split("_")[0] for n in fresh})
    assert len(ids) == 3 and f"{ids[0]}_predictive_entropy.nii.gz" in fresh
    edited = maps / f"{ids[0]}_predictive_entropy.nii.gz"
    img = nib.load(edited)
    nib.save(nib.Nifti1Image(np.asarray(img.dataobj) * 0.5, img.affine), edited)
    shutil.copyfile(maps / f"{ids[2]}_one_minus_max_prob.nii.gz", maps / f"{ids[1]}_one_minus_max_prob.nii.gz")
    real, calls = runner_module._evaluate_record, []
    monkeypatch.setattr(runner_module, "_evaluate_record",
                        lambda f, *a, **k: calls.append(f.case_id) or real(f, *a, **k))
    run()
    assert sorted(calls) == ids[:2]
    assert {p.name: p.read_bytes() for p in maps.iterdir()} == fresh
    record = tmp_path / "ev" / "state" / "cases" / f"{ids[2]}.json"
    doc = json.loads(record.read_text())
    del doc["maps_sha256"]
    write_signed_state(record, doc)
    calls.clear()
    run()
    assert calls == [ids[2]]
