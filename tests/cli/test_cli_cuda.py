"""``monai-unc infer --device <cuda_device>`` end to end on the toy cohort: the same maps as ``--device cpu``.

Marked ``cuda``: a GPU (``--device cuda``), or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu`` (``--device cpu`` twice).
Test-time flipping of a network in eval mode is deterministic, so the device run's probabilities and maps equal
the CPU run's within float32 convolution rounding (``atol=1e-5``; TF32 off), and the segmentation is the same
wherever the top two classes are more than ``1e-4`` apart.
"""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest

from monai_unc import cli
from tests.cli.test_cli import _infer_args, setup  # noqa: F401 (setup: the module-scoped toy cohort fixture)

# TF32 off: the device run is compared with the CPU run to float32 rounding
pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("full_float32")]

MEASURES = ("predictive_entropy", "expected_entropy", "mutual_information", "one_minus_max_prob")




def test_infer_on_the_device_writes_the_cpu_maps(setup, tmp_path, cuda_device):  # noqa: F811
    s = setup
    out_dev, out_cpu = tmp_path / "dev", tmp_path / "cpu"
    assert cli.main(_infer_args(s, out_dev, "--method", "tta", "--device", str(cuda_device))) == 0
    assert cli.main(_infer_args(s, out_cpu, "--method", "tta", "--device", "cpu")) == 0
    for cid in ("toy000", "toy001", "toy002"):
        rec, ref = (json.loads((o / f"{cid}.json").read_text()) for o in (out_dev, out_cpu))
        assert rec["files"] == ref["files"] and rec["num_samples"] == ref["num_samples"] == 8
        p = nib.load(out_dev / f"{cid}_probs.nii.gz").get_fdata()
        p_ref = nib.load(out_cpu / f"{cid}_probs.nii.gz").get_fdata()
        np.testing.assert_allclose(p, p_ref, atol=1e-5)
        seg = nib.load(out_dev / f"{cid}_seg.nii.gz").get_fdata()
        seg_ref = nib.load(out_cpu / f"{cid}_seg.nii.gz").get_fdata()
        top2 = np.sort(p_ref, -1)[..., -2:]
        clear = top2[..., 1] - top2[..., 0] > 1e-4
        assert clear.mean() > 0.9
        np.testing.assert_array_equal(seg[clear], seg_ref[clear])
        for m in MEASURES:
            a = nib.load(out_dev / f"{cid}_{m}.nii.gz")
            b = nib.load(out_cpu / f"{cid}_{m}.nii.gz")
            np.testing.assert_array_equal(a.affine, b.affine)
            np.testing.assert_allclose(a.get_fdata(), b.get_fdata(), atol=1e-5, err_msg=f"{cid} {m}")
