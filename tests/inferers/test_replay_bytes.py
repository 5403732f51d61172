"""The working memory of a replay (``SharedPasses.replay_bytes``) and the automatic sample batch built on it.

A window batch of ``B > 1`` inputs is replayed one input at a time: a replay of ``k`` samples holds one input's
stochastic tensors for its ``k`` samples, not the whole batch's, so the whole-batch rule (``k`` times
``per_sample_bytes``) overstated it ``B``-fold and a GPU replayed 2 samples at a time where 8 fit. The model is
checked against the measured peak RSS of a replay (glibc's fixed mmap threshold: RSS follows the live tensors), and
the first replay of ``k = B >= 4`` samples, which ran the whole batch with the kept values copied for every sample
(7 times the memory of the same replay input by input), is checked to run input by input and stay exact.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from monai.inferers import SlidingWindowInferer
from torch import nn

from monai_unc.inferers import MCDropoutInferer, enable_mc_dropout
from monai_unc.networks.shared import AUTO_BATCH_FRACTION, MAX_SAMPLE_BATCH, SharedPasses, sample_batch

from .test_shared import MaskBank, assert_maps_close, banked, run_both

ROOT = Path(__file__).resolve().parents[2]


def _head_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv3d(1, 16, 3, padding=1), nn.Dropout3d(0.3), nn.Conv3d(16, 3, 1)).eval()


def _traced(batch: int, size: int = 8) -> tuple[SharedPasses, nn.Module, torch.Tensor]:
    net = _head_net()
    x = torch.rand(batch, 1, size, size, size)
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net)
        passes.trace(net, x)
    return passes, net, x


def test_replay_bytes_input_by_input_by_hand():
    """Four windows: per sample the largest of one window's stochastic tensors plus the earlier windows' outputs,
    two outputs (the rows and their interleaved copy), and the output beside its probabilities."""
    passes, _, x = _traced(4)
    assert passes.replays_rows and not passes.plain
    v = 8**3
    r = passes.stochastic_bytes
    o = passes.output_bytes
    assert o == 4 * 3 * v * 4  # the network's output for the four windows, float32
    assert r == 4 * (16 + 3) * v * 4  # the dropout's output and the last convolution's, per window
    after = 3 * v * 4 * 4  # probabilities of the four windows
    for k in (2, 5, 8):
        want = k * max(-(-(r + o * 3) // 4), 2 * o, o + after)
        assert passes.replay_bytes(k, after) == want
        assert passes.replay_bytes(k, after) < k * (passes.per_sample_bytes() + after)  # the whole-batch rule
    # one sample runs the whole batch, the first convolution's output copied for it (the kept value the dropout
    # reads); one window is replayed whole: the whole-batch rule
    assert passes.replay_bytes(1, after) == passes.per_sample_bytes() + 4 * 16 * v * 4 + after
    one, _, _ = _traced(1)
    assert not one.replays_rows and one.replay_bytes(6, 7) == 6 * (one.per_sample_bytes() + 7)


def test_replay_bytes_counts_the_copies_of_a_first_whole_batch_replay():
    """k = B <= 3 samples with unchecked draws: the first replay runs the whole batch, the kept values that the
    stochastic rest reads copied for every sample; once the draws are checked, input by input."""
    passes, net, x = _traced(3)
    needed = 3 * 16 * 8**3 * 4  # the first convolution's output, read by the dropout
    assert passes.replay_bytes(3) == 3 * (passes.stochastic_bytes + needed)
    with torch.no_grad(), enable_mc_dropout(net):
        passes.replay(net, x, 2)  # two samples of one window at a time: a count of draws that tells
    assert passes._draws_checked
    assert passes.replay_bytes(3) < 3 * passes.stochastic_bytes


_MEASURE = r"""
import gc, json, sys
import torch
from torch import nn
sys.path.insert(0, "benchmarks")
from _floor import peak_mib, reset_peak
# from its own module, not monai_unc.inferers (the same function): MONAI's import was 3.5 s of this process's 9
from monai_unc.networks.dropout import enable_mc_dropout
from monai_unc.networks.shared import SharedPasses
torch.manual_seed(0)
net = nn.Sequential(nn.Conv3d(1, 16, 3, padding=1), nn.Dropout3d(0.3), nn.Conv3d(16, 3, 1)).eval()
x = torch.rand(4, 1, 40, 40, 40)
got = {}
for k in (1, 4, 8):  # 1: the whole batch, the kept values copied; 4 = B first: the draws unchecked
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net)
        out = passes.trace(net, x)
        del out
        gc.collect()
        r0 = reset_peak()
        y = passes.replay(net, x, k)
        top = peak_mib() - r0
        del y
    got[k] = {"measured": top * 2**20, "estimate": passes.replay_bytes(k)}
print(json.dumps(got))
"""


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="needs a resettable peak RSS (Linux)")
def test_replay_bytes_within_a_few_percent_of_the_measured_peak():
    """Peak RSS of a replay of four windows of 40^3 voxels (glibc's mmap threshold fixed: RSS follows the live
    tensors) against ``replay_bytes``: within 10 %. The first replay of k = B = 4 samples ran the whole batch with
    the kept values copied for every sample: 192 MiB measured against 27 MiB input by input."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_="131072")
    res = subprocess.run([sys.executable, "-c", _MEASURE], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    for k, m in got.items():
        assert m["measured"] == pytest.approx(m["estimate"], rel=0.1), (k, m)


def test_auto_batch_on_a_gpu_follows_the_replay_input_by_input():
    """Off the CPU the automatic batch is the largest whose replay fits the budget: with four windows per batch it
    holds more samples than the whole-batch rule, which the CPU keeps (larger replay batches measured slower there)."""
    passes, _, x = _traced(4, size=16)
    voxels, classes = 16**3, 3
    cpu_k = sample_batch(passes, "auto", voxels, classes, 29)
    probabilities = x.numel() * classes * 4
    budget = max(AUTO_BATCH_FRACTION * voxels * 4 * (classes + 4), passes.traced_bytes)
    assert cpu_k == max(1, min(29, int(budget // (passes.per_sample_bytes() + probabilities))))
    passes._input = x.to("meta")  # only the device is read: the rule of an accelerator
    k = sample_batch(passes, "auto", voxels, classes, 29)
    assert k > cpu_k
    assert passes.replay_bytes(k, probabilities) <= budget
    assert k == min(29, MAX_SAMPLE_BATCH) or passes.replay_bytes(k + 1, probabilities) > budget


@pytest.mark.parametrize("sample_batch_size", [4, 5])  # 4 = B: the first input's samples as 2 + 2
def test_four_windows_a_batch_equal_full_passes_injected_masks(sample_batch_size, monkeypatch):
    """Four windows in one batch, replayed input by input (k = B = 4 included: its first replay no longer runs the
    whole batch with copies), equal full passes with the same injected masks."""
    whole = []
    replay = SharedPasses._replay

    def spy(self, predictor, x, k, row):
        if row is None and k > 1:
            whole.append(k)
        return replay(self, predictor, x, k, row)

    monkeypatch.setattr(SharedPasses, "_replay", spy)
    bank = MaskBank()
    net = banked("BasicUNet", 2, bank)
    x = torch.rand(1, 1, 24, 24)  # 2 x 2 overlapping windows of 16^2: one batch of four
    sw = SlidingWindowInferer([16, 16], sw_batch_size=4, overlap=0.25)

    def make(share):
        return MCDropoutInferer(num_samples=9, base_inferer=sw, share_passes=share,
                                sample_batch_size=sample_batch_size, keep_samples=True)

    full, shared = run_both(make, x, net, bank)
    assert_maps_close(full, shared)
    samples = full["samples"]
    for i, j in itertools.combinations(range(3), 2):
        assert (samples[i] - samples[j]).abs().max() > 1e-6  # the masks differ: the test can fail
    assert not whole  # no replay of several samples ran the whole batch
