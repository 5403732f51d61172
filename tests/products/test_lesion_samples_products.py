"""The volume spread of one sample is undefined, not 0 (:func:`monai_unc.metrics.lesions.lesion_uncertainty`).

Found by hostile testing: a 3-D file in ``--lesion-samples`` (the hard segmentation alone) reads as one sample, and
every lesion got ``volume_cv`` 0 and ``existence`` 1, read as "certain, no volume spread"; with several samples the
spread is checked against a count over the samples' connected components (scipy, 26-connected).
"""

from __future__ import annotations

import json
import warnings

import nibabel as nib
import numpy as np
import pytest
from scipy import ndimage

from monai_unc.cli import main
from monai_unc.metrics.lesions import lesion_uncertainty

FULL = np.ones((3, 3, 3), bool)


def _pred() -> np.ndarray:
    pred = np.zeros((12, 12, 12), bool)
    pred[1:4, 1:4, 1:4] = True
    pred[7:11, 6:9, 6:10] = True
    return pred


def _brute_cv(pred: np.ndarray, samples: np.ndarray) -> np.ndarray:
    lab, n = ndimage.label(pred, FULL)
    vols = np.zeros((len(samples), n))
    for i, s in enumerate(samples):
        s_lab, _ = ndimage.label(s, FULL)
        for k in range(1, n + 1):
            hit = set(np.unique(s_lab[(lab == k) & (s_lab > 0)]).tolist())
            vols[i, k - 1] = sum(int((s_lab == j).sum()) for j in hit)
    mean = vols.mean(axis=0)
    return np.array([vols[:, k].std() / mean[k] if mean[k] > 0 else np.nan for k in range(n)])


def test_one_sample_gives_an_undefined_volume_spread_with_a_warning():
    pred = _pred()
    with pytest.warns(UserWarning, match="one sample: the volume spread"):
        out = lesion_uncertainty(pred, samples=pred[None])
    assert np.isnan(out["volume_cv"]).all() and out["volume_cv"].shape == (2,)
    assert out["existence"].tolist() == [1.0, 1.0]  # one sample's share: 0 or 1, as the warning says


@pytest.mark.parametrize("n_samples", [2, 3, 5])
def test_volume_spread_of_several_samples_equals_a_count_over_their_components(n_samples):
    rng = np.random.default_rng(n_samples)
    pred = _pred()
    samples = np.stack([pred & (rng.random(pred.shape) < 0.8) for _ in range(n_samples)])
    samples[0, 1:4, 1:4, 1:4] = False  # a sample without the first lesion: volume 0 there
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # several samples: no warning
        out = lesion_uncertainty(pred, samples=samples)
    np.testing.assert_allclose(out["volume_cv"], _brute_cv(pred, samples), rtol=1e-12)
    constant = lesion_uncertainty(pred, samples=np.stack([pred] * n_samples))
    assert constant["volume_cv"].tolist() == [0.0, 0.0]  # equal samples: a spread of 0 is the answer


def test_a_three_d_sample_file_leaves_the_spread_undefined_in_evaluate(tmp_path):
    labels, preds, samples = (tmp_path / d for d in ("labels", "predictions", "samples"))
    for d in (labels, preds, samples):
        d.mkdir()
    pred = _pred().astype(np.uint8)
    truth = pred.copy()
    truth[0:4, 1:4, 1:4] = 1
    for case in ("a", "b"):
        nib.save(nib.Nifti1Image(truth, np.eye(4)), labels / f"{case}.nii.gz")
        nib.save(nib.Nifti1Image(pred, np.eye(4)), preds / f"{case}_seg.nii.gz")
        u = np.linspace(0, 1, pred.size, dtype=np.float32).reshape(pred.shape)
        nib.save(nib.Nifti1Image(u, np.eye(4)), preds / f"{case}_predictive_entropy.nii.gz")
        nib.save(nib.Nifti1Image(pred, np.eye(4)), samples / f"{case}_samples.nii.gz")  # 3-D: one sample
    out = tmp_path / "ev"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(out), "--lesions", "--no-spatial",
                     "--num-classes", "2", "--lesion-min-volume", "0", "--lesion-samples", str(samples),
                     "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    block = summary["lesions"]
    assert block["samples"] == {"min": 1, "max": 1}
    spread = block["per_task"]["1"]["failure_detection"]["volume_cv"]
    assert spread["n_lesions"] == 0 and spread["auroc_false_positive"] is None  # undefined for every lesion, not 0
    assert any("one sample" in w for w in summary["warnings"])
