"""Review 63: ``calibrate`` reads its labels as every other label reader does (``io.read_label``).

It read them with ``read_volume`` as float32: a label file stored with a NIfTI intercept (``scl_inter`` 3, background
stored as -30 with slope 0.1) read background as ``-4.47e-08`` and was refused as non-integer, while ``evaluate``
and the other commands read the same file as the integers it encodes.
"""
from __future__ import annotations

import nibabel as nib
import numpy as np
import torch

from monai_unc.io import list_files, list_image_cases
from monai_unc.workflows.calibrate import collect_logits
from tests.workflows.test_calibrate_hostile import toy  # noqa: F401  (the module's fixture)


def test_collect_logits_reads_labels_stored_with_a_scaling(toy, tmp_path):  # noqa: F811
    from monai_unc.workflows.models import load_network

    model = load_network(network=str(toy["root"] / "net.json"), checkpoints=[str(toy["root"] / "net.pt")])
    cases = list_image_cases(toy["images"])
    labels = list_files(toy["labels"])
    scaled = {}
    for case in cases:
        img = nib.load(labels[case.case_id])
        lab = np.asarray(img.dataobj).astype(np.int64)
        raw = np.round((lab - 3.0) / 0.1).astype(np.int16)
        out = nib.Nifti1Image(raw, img.affine)
        out.header.set_slope_inter(0.1, 3.0)
        nib.save(out, tmp_path / f"{case.case_id}.nii.gz")
        scaled[case.case_id] = (tmp_path / f"{case.case_id}.nii.gz", lab)
    assert float(np.abs(np.asanyarray(nib.load(scaled[cases[0].case_id][0]).dataobj).astype(np.float32)).min()) > 0
    _, targets = collect_logits(cases, [scaled[c.case_id][0] for c in cases], model, model.default_intensity,
                                progress=False)
    for case, y in zip(cases, targets):
        assert torch.equal(y[0].long(), torch.from_numpy(scaled[case.case_id][1]))
