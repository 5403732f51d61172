"""Region specs on ``cuda_device`` (tests/test_regions.py on a GPU): BraTS label maps on the device become region
masks on the device, equal to the CPU's, whatever the label dtype; a region's sigmoid probability becomes its two-class
probabilities on the device; the labels no region claims are found in a device label map.

Marked ``cuda``: skipped without a GPU; ``MONAI_UNC_TEST_DEVICE=cpu`` rehearses them on the CPU.
"""

from __future__ import annotations

import pytest
import torch

from monai_unc.regions import (
    BRATS_REGIONS,
    binary_probabilities,
    label_to_regions,
    region_masks,
    regions_to_labels,
    unclaimed_labels,
)

pytestmark = pytest.mark.cuda


def brats_labels(dtype: torch.dtype) -> torch.Tensor:
    """A CPU label map ``(2, 1, 16, 16, 16)`` with the BraTS labels 0, 1, 2 and 4 (``BRATS_REGIONS``)."""
    labels = torch.randint(0, 4, (2, 1, 16, 16, 16), generator=torch.Generator().manual_seed(0))
    return torch.where(labels == 3, 4, labels).to(dtype)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.float32], ids=str)
def test_region_masks_of_a_device_label_map_equal_the_cpu(cuda_device, dtype):
    labels = brats_labels(dtype)
    got = label_to_regions(labels.to(cuda_device), channel_dim=1)
    assert got.device.type == cuda_device.type and got.dtype == torch.bool
    assert got.shape == (2, len(BRATS_REGIONS), 16, 16, 16)
    assert torch.equal(got.cpu(), label_to_regions(labels, channel_dim=1))
    stacked = label_to_regions(labels.to(cuda_device))
    assert stacked.shape == (len(BRATS_REGIONS), 2, 1, 16, 16, 16) and stacked.device.type == cuda_device.type
    masks = region_masks(labels.to(cuda_device))
    assert list(masks) == list(BRATS_REGIONS)
    for i, (name, m) in enumerate(masks.items()):
        assert m.device.type == cuda_device.type
        assert torch.equal(m, got[:, i : i + 1]), name


def test_binary_probabilities_and_unclaimed_labels_on_the_device(cuda_device):
    p = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    got = binary_probabilities(p.to(cuda_device))
    assert got.device.type == cuda_device.type and got.shape == (2, 2, 8, 8)
    assert torch.equal(got.cpu(), binary_probabilities(p))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        binary_probabilities((p + 1).to(cuda_device))
    labels = brats_labels(torch.int64)
    labels[0, 0, 0, 0, 0] = 7
    assert unclaimed_labels(labels.to(cuda_device), BRATS_REGIONS) == [7]
    with pytest.raises(ValueError, match="labels"):
        label_to_regions((labels - 9).to(cuda_device))  # negative labels


@pytest.mark.parametrize("n_regions", [3, 12, 70], ids=["table", "occurring-sets", "columns"])
def test_regions_to_labels_of_device_masks_equal_the_cpu(cuda_device, n_regions):
    """Every path of ``regions_to_labels`` (a table of all sets, the occurring sets, unique columns) stays on the
    device and gives the CPU's labels and count."""
    gen = torch.Generator().manual_seed(n_regions)
    spec = {f"r{i}": (i + 1, (i + 2) % (n_regions + 1) + 1) for i in range(n_regions)}  # overlapping regions
    masks = torch.rand(n_regions, 6, 5, 4, generator=gen) < 0.2
    got, missed = regions_to_labels(masks.to(cuda_device), spec)
    want, want_missed = regions_to_labels(masks, spec)
    assert got.device.type == cuda_device.type and got.dtype == want.dtype
    assert torch.equal(got.cpu(), want) and missed == want_missed
