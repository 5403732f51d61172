"""The retry of a sliding window whose result buffers did not fit on the device draws what the first attempt drew.

nnU-Net moves the result buffers to the CPU and runs the window again when the device runs out of memory. The retry
went on from the random state the failed attempt left (other dropout masks for a seeded case, so its maps depended on
where the memory ran out) and kept the Rate-In records of the windows done before (counted twice in the mean rate).
The fallback runs on a CPU here: a forward hook raises the out-of-memory error partway through the first attempt.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("nnunetv2")

from nnunetv2.inference.sliding_window_prediction import pad_nd_image  # noqa: E402

from tests.nnunet.test_nnunet import make_predictor  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _run(pred, data, fail_at, capsys):
    """The case's sliding window through the fallback; ``fail_at``: the network call that runs out of memory."""
    calls = [0]

    def hook(module, args):
        calls[0] += 1
        if calls[0] == fail_at:
            raise torch.OutOfMemoryError("CUDA out of memory (imitated)")

    if pred._rate_in is not None:
        pred._rate_in.reset()
    handle = pred.network.register_forward_pre_hook(hook)
    try:
        with torch.inference_mode(), pred._seed_context(), pred._sampling_context():
            padded, _ = pad_nd_image(data, pred.configuration_manager.patch_size, "constant", {"value": 0}, True, None)
            slicers = pred._internal_get_sliding_window_slicers(padded.shape[1:])
            out = pred._predict_with_buffer_fallback(padded, slicers)
    finally:
        handle.remove()
    said = capsys.readouterr().out
    assert ("ran out of memory" in said) == (fail_at is not None)
    assert fail_at is None or calls[0] > fail_at  # it failed partway: windows were done before
    return out, pred._extras()


@pytest.mark.parametrize("sources, kw", [
    (("dropout", "mirroring"), {"dropout_p": 0.3}),
    (("rate_in",), {"rate_in": {"target_loss": 0.2, "loss": "mse"}}),
])
def test_the_retry_draws_what_an_uninterrupted_run_draws(sources, kw, capsys):
    pred = make_predictor(n_folds=1, uncertainty_sources=sources, num_samples=2, seed=7, share_passes=False, **kw)
    torch.manual_seed(3)
    data = torch.randn(1, 20, 24, 12)
    ref, ref_extras = _run(pred, data, None, capsys)
    got, extras = _run(pred, data, 6, capsys)
    assert set(got) == set(ref)
    for key in ref:
        assert torch.equal(got[key], ref[key]), key
    assert extras == ref_extras
