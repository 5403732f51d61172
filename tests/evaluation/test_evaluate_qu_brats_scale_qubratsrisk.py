"""``monai-unc evaluate --regions`` rescales its maps from the measure's own maximum (``to_qu_brats_range`` with
``measure_max``): a confident case, whose map lies below the smallest positive QU-BraTS threshold, is not warned about
as a map on the wrong scale (the warning of :func:`monai_unc.metrics.qu_brats` is for maps given by hand)."""

from __future__ import annotations

import warnings

import nibabel as nib
import numpy as np

from monai_unc.evaluation import EvaluationConfig, evaluate_case
from monai_unc.io import match_cases
from tests.evaluation.test_evaluate_regions import write_region_cohort


def test_confident_case_is_not_warned_about_its_scale(tmp_path):
    dirs = write_region_cohort(tmp_path / "c", n_cases=1)
    path = dirs["pred"] / "case0_predictive_entropy.nii.gz"
    img = nib.load(str(path))
    tiny = np.asarray(img.get_fdata(), dtype=np.float32) * 1e-3  # at most 0.1 on the [0, 100] scale
    nib.save(nib.Nifti1Image(tiny, img.affine), str(path))
    files = match_cases(dirs["labels"], dirs["pred"], images=dirs["images"])[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = evaluate_case(files, EvaluationConfig(regions="brats", spatial=False))
    said = list(res.warnings) + [str(w.message) for w in caught]
    assert not [w for w in said if "smallest positive threshold" in w], said
    assert 0.0 <= res.row["qu_brats_score"] <= 1.0
