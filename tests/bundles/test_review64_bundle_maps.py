"""Review 64: what docs/cli.md says of ``infer --bundle``'s maps. They are computed on the network's grid and inverted
one by one with the preprocessing's interpolation, so after an undone resampling (``Spacingd``, bilinear) a written
entropy map is the interpolated entropy: at most (entropy is concave), and not equal to, the entropy of the written
probabilities; without a resampling the two agree."""

from __future__ import annotations

import warnings

import nibabel as nib
import numpy as np
import pytest

from monai_unc.workflows import prepare_infer, run_infer
from tests.bundles.test_cli_bundles import _bundle, _images


def _written(tmp_path, edit=None) -> dict[str, np.ndarray]:
    images = _images(tmp_path / "images")
    bundle = _bundle(tmp_path / "bundle", edit)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = prepare_infer(images, bundle=bundle, samples=2, roi=16)
        run_infer(plan.cases, plan.model, plan.inferer, plan.settings, tmp_path / "out", progress=False)
    return {m: np.asarray(nib.load(tmp_path / "out" / f"case0_{m}.nii.gz").dataobj, dtype=np.float64)
            for m in ("probs", "predictive_entropy", "one_minus_max_prob")}


def _without_spacing(cfg: dict) -> None:
    cfg["preprocessing"]["transforms"] = [t for t in cfg["preprocessing"]["transforms"]
                                          if t.get("_target_") != "Spacingd"]


@pytest.mark.parametrize("resampled", [True, False])
def test_bundle_entropy_maps_are_the_interpolated_entropy(tmp_path, resampled):
    got = _written(tmp_path, None if resampled else _without_spacing)
    p = got["probs"]  # (X, Y, Z, C), on the input grid
    entropy = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(-1)
    gap = entropy - got["predictive_entropy"]
    gap_max = (1.0 - p.max(-1)) - got["one_minus_max_prob"]
    assert gap.min() > -1e-5 and gap_max.min() > -1e-5  # never above the measure of the written probabilities
    if resampled:
        assert gap.max() > 1e-3 and (gap > 1e-4).mean() > 0.5  # and below it where the resampling was undone
    else:
        np.testing.assert_allclose(got["predictive_entropy"], entropy, atol=1e-5)
        np.testing.assert_allclose(got["one_minus_max_prob"], 1.0 - p.max(-1), atol=1e-5)
