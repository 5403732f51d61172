"""The QU-BraTS score (functional, per region, the MONAI metric) on a device equals the CPU result.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``. The CPU bins through numpy, a device through
``torch.bucketize`` / ``torch.bincount``: the counts at every threshold are exact integers either way, so the
curves and areas agree to float64 rounding of the same formula (``atol=1e-12``).
"""

import math

import numpy as np
import pytest
import torch

from monai_unc.metrics.qu_brats_score import QUBraTSMetric, qu_brats, qu_brats_regions
from tests.metrics.test_qu_brats import _batch

pytestmark = pytest.mark.cuda


def _same(got, ref, fields):
    for name in fields:
        a, b = getattr(got, name), getattr(ref, name)
        a = a.cpu().numpy() if isinstance(a, torch.Tensor) else a
        b = b.cpu().numpy() if isinstance(b, torch.Tensor) else b
        if isinstance(b, dict):  # per region: numbers, or the QUBraTSResult of each region
            assert list(a) == list(b), name
            for k in b:
                if hasattr(b[k], "__dataclass_fields__"):
                    _same(a[k], b[k], b[k].__dataclass_fields__)
                else:
                    assert float(a[k]) == pytest.approx(float(b[k]), abs=1e-12), (name, k)
        else:
            np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), atol=1e-12,
                                       err_msg=name)


def test_qu_brats_on_the_device_equals_cpu(cuda_device):
    label, pred_label, y, y_pred, probs, u, brain = _batch(b=2)
    scaled = u / math.log(2) * 100
    for i in range(2):
        for r in range(3):
            ref = qu_brats(scaled[i, r], y_pred[i, r], y[i, r], brain[i, 0])
            got = qu_brats(scaled[i, r].to(cuda_device), y_pred[i, r].to(cuda_device), y[i, r].to(cuda_device),
                           brain[i, 0].to(cuda_device))
            _same(got, ref, ref.__dataclass_fields__)
    ref = qu_brats_regions(scaled[0], torch.from_numpy(pred_label[0, 0]), torch.from_numpy(label[0, 0]))
    got = qu_brats_regions(scaled[0].to(cuda_device), torch.from_numpy(pred_label[0, 0]).to(cuda_device),
                           torch.from_numpy(label[0, 0]).to(cuda_device))
    _same(got, ref, ref.__dataclass_fields__)


def test_qu_brats_metric_on_the_device(cuda_device):
    _, _, y, _, probs, u, brain = _batch()
    got, ref = (QUBraTSMetric(uncertainty_max=math.log(2), reduction="none") for _ in range(2))
    values = got(probs.to(cuda_device), y.to(cuda_device), uncertainty=u.to(cuda_device),
                 brain_mask=brain.to(cuda_device))
    ref(probs, y, uncertainty=u, brain_mask=brain)
    assert values.device.type == cuda_device.type
    np.testing.assert_allclose(got.aggregate().cpu().numpy(), ref.aggregate().numpy(), atol=1e-12)


def test_qu_brats_metric_of_probabilities_on_the_device_and_a_cpu_map(cuda_device):
    # found by the review of the GPU paths: the regions of y_pred (and y) stayed on y_pred's device and the map on its
    # own, and torch.cat refused the mix; the metric computes on the uncertainty's device, as qu_brats does
    _, _, y, _, probs, u, brain = _batch()
    got, ref = (QUBraTSMetric(uncertainty_max=math.log(2), reduction="none") for _ in range(2))
    values = got(probs.to(cuda_device), y.to(cuda_device), uncertainty=u, brain_mask=brain.to(cuda_device))
    ref(probs, y, uncertainty=u, brain_mask=brain)
    assert values.device.type == "cpu"
    np.testing.assert_allclose(got.aggregate().cpu().numpy(), ref.aggregate().numpy(), atol=1e-12)
