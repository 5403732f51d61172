"""Hostile review of monai_unc.transforms: inputs MONAI users plausibly hand the transforms, compared with brute-force
references computed here."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from monai.data import MetaTensor

from monai_unc.transforms import AggregateUncertainty, AggregateUncertaintyd


def _map_and_probability_mask(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(1, 8, 9, 7, generator=g)
    p1 = torch.full((1, 8, 9, 7), 0.02)  # a sigmoid bundle's foreground probability after Activationsd(sigmoid)
    p1[:, 2:5, 3:7, 1:4] = 0.97
    return u, p1


@pytest.mark.parametrize("container", ["tensor", "numpy", "meta"])
def test_aggregate_refuses_a_probability_map_as_mask(container):
    """A one-channel probability map (a binary sigmoid bundle's ``pred``) is "non-zero" everywhere: used as a mask it
    silently selected the whole volume. It must be thresholded first."""
    u, p1 = _map_and_probability_mask()
    mask = {"tensor": p1, "numpy": p1.numpy(), "meta": MetaTensor(p1)}[container]
    with pytest.raises(ValueError, match="mask.*threshold"):
        AggregateUncertainty("mean")(u, mask)
    with pytest.raises(ValueError, match="'pred'.*threshold"):
        AggregateUncertaintyd("u", mask_key="pred")({"u": u, "pred": mask})


def test_aggregate_binary_float_and_label_masks_still_work():
    u, p1 = _map_and_probability_mask()
    binary = (p1 >= 0.5).float()  # AsDiscreted(threshold=0.5) gives floats in {0, 1}
    ref = float(u[binary > 0].double().mean())
    assert float(AggregateUncertainty("mean")(u, binary)) == pytest.approx(ref, rel=1e-12)
    labels = binary * 2.0  # a float label map read from NIfTI: non-zero = inside
    assert float(AggregateUncertainty("mean")(u, labels)) == pytest.approx(ref, rel=1e-12)
    assert float(AggregateUncertainty("mean")(u, binary.bool().numpy())) == pytest.approx(ref, rel=1e-12)
    onehot = torch.cat([1 - binary, binary])  # C >= 2: argmax > 0
    assert float(AggregateUncertainty("mean")(u, onehot)) == pytest.approx(ref, rel=1e-12)
    np.testing.assert_allclose(float(AggregateUncertaintyd("u", mask_key="m")({"u": u, "m": binary})["u_mean"]), ref,
                               rtol=1e-12)
