"""Review 54 (second reviewer) of estimate_memory's shared-pass terms (monai_unc.inferers.memory), by hostile
testing."""

from __future__ import annotations

import torch
from torch import nn

from monai_unc.inferers import enable_mc_dropout, estimate_memory
from monai_unc.networks.shared import SharedPasses


def test_estimate_memory_counts_a_plain_replay_of_a_window_batch_whole():
    """A dropout on the input keeps nothing (``shared_bytes = copied_bytes = 0``): the replays are plain and run the
    whole window batch, ``k (r + a)``. With ``copied_bytes_per_voxel=0`` and ``sw_batch_size=4`` the estimate counted
    a replay one window at a time (2.9 MB of a replay that :meth:`SharedPasses.replay_bytes` puts at 10.2 MB)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Dropout3d(0.2), nn.Conv3d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv3d(16, 3, 1)).eval()
    w = torch.rand(4, 1, 16, 16, 16)
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net)
        passes.trace(net, w)
    assert passes.plain and not passes.replays_rows and passes.shared_bytes == passes.copied_bytes == 0
    k, vox = 4, w.numel()
    probs = logits = vox * 3 * 4
    common = dict(shape=(48, 48, 48), num_classes=3, roi_size=(16, 16, 16), sw_batch_size=4, overlap=0.25,
                  fused_update=True, sample_batch=k, network_bytes_per_voxel=200.0)
    terms = estimate_memory(**common, shared_bytes_per_voxel=passes.shared_bytes / vox,
                            stochastic_bytes_per_voxel=passes.stochastic_bytes / vox,
                            copied_bytes_per_voxel=passes.copied_bytes / vox)
    none = estimate_memory(**common)
    added = terms.parts["window"] - none.parts["window"]
    assert added == passes.replay_bytes(k, probs) - logits - probs
