"""GED (and its variants), NCC, the rater variance and their MONAI metric classes on a device equal the CPU.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``. GED is built from exact mask Gram
matrices (``atol=1e-12``, as ``test_ambiguity.test_cuda_inputs``); NCC is a float64 correlation (``rel=1e-9``).
"""

import numpy as np
import pytest
import torch

from monai_unc.metrics.ambiguity import (
    GEDMetric,
    NCCMetric,
    ged,
    ged_detection,
    ged_nonempty_iou,
    ncc,
    rater_variance,
)
from tests.metrics.test_ambiguity import _batch

pytestmark = pytest.mark.cuda


def test_ged_variants_and_ncc_on_the_device_equal_cpu(cuda_device):
    samples, raters = _batch()
    sd, rd = samples.to(cuda_device), raters.to(cuda_device)
    for fn, kw in ((ged, {"distance": "iou"}), (ged, {"distance": "dice"}), (ged_nonempty_iou, {}),
                   (ged_detection, {})):
        got, ref = fn(rd[0], sd[0], **kw), fn(raters[0], samples[0], **kw)
        np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(ref, dtype=float), atol=1e-12,
                                   err_msg=f"{fn.__name__} {kw}")
    var = rater_variance(rd.float(), rater_dim=1, keepdim=True)
    assert var.device.type == cuda_device.type
    np.testing.assert_allclose(var.cpu().numpy(), rater_variance(raters.float(), rater_dim=1, keepdim=True).numpy(),
                               atol=1e-7)
    g = torch.Generator().manual_seed(1)
    u = torch.rand(3, 1, 6, 7, generator=g, dtype=torch.float64)
    ref_var = rater_variance(raters.double(), rater_dim=1, keepdim=True)
    assert ncc(u.to(cuda_device), ref_var.to(cuda_device)) == pytest.approx(ncc(u, ref_var), rel=1e-9)


def test_ged_and_ncc_metric_classes_on_the_device(cuda_device):
    samples, raters = _batch()
    sd, rd = samples.to(cuda_device), raters.to(cuda_device)
    got, ref = GEDMetric(return_terms=True, reduction="none"), GEDMetric(return_terms=True, reduction="none")
    values = got(sd, rd)
    assert values.device.type == cuda_device.type
    np.testing.assert_allclose(values.cpu().numpy(), ref(samples, raters).numpy(), atol=1e-12)
    u = torch.rand(3, 1, 6, 7, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    got, ref = NCCMetric(y_is_raters=True, reduction="none"), NCCMetric(y_is_raters=True, reduction="none")
    values = got(u.to(cuda_device), rd)
    assert values.device.type == cuda_device.type
    np.testing.assert_allclose(values.cpu().numpy(), ref(u, raters).numpy(), rtol=1e-9)
