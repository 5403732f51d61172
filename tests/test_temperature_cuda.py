"""Temperature scaling fitted on device logits, streamed in chunks, equals the CPU fit; transforms stay on device.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``. Each step accumulates the loss and its
gradient over the chunks in float64. With float64 logits the device's ``exp``/``log`` differ from the CPU's in the
last bit only, so the whole trajectory, the best step and the fitted temperature agree to ``rel=1e-7`` for both
losses. float32 logits (the usual network output) agree to float32 rounding of the per-voxel terms, amplified by
the optimisation: ``rel=1e-4`` for the NLL fit (the ECE loss, whose bins could take a float32 voxel at a bin edge
differently, is compared in float64 only).
"""

import pytest
import torch

from monai_unc.temperature import TemperatureScaled, TemperatureScaler
from tests.test_temperature import planted

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("loss,mode,dtype,rel", [
    ("nll", "scalar", torch.float64, 1e-7), ("nll", "vector", torch.float64, 1e-7),
    ("ece", "scalar", torch.float64, 1e-7), ("nll", "scalar", torch.float32, 1e-4)])
def test_fit_on_device_chunks_equals_cpu(cuda_device, loss, mode, dtype, rel):
    z, y = planted(n_cases=2, side=(40, 30), temperature=[1.6, 2.4, 3.0] if mode == "vector" else 2.2, seed=11)
    z = z.to(dtype)
    batches, labels = [z[i : i + 1] for i in range(2)], [y[i : i + 1] for i in range(2)]
    kw = {"loss": loss, "mode": mode, "max_steps": 40, "chunk_size": 700, "min_bin_count": 5}
    ref = TemperatureScaler(**kw).fit(batches, labels)
    dev_batches, dev_labels = [b.to(cuda_device) for b in batches], [lab.to(cuda_device) for lab in labels]
    got = TemperatureScaler(**kw).fit(dev_batches, dev_labels)
    torch.testing.assert_close(got.temperature.cpu(), ref.temperature, rtol=rel, atol=0)
    value, grad = got.loss_and_grad(dev_batches, dev_labels)
    ref_value, ref_grad = ref.loss_and_grad(batches, labels)
    assert value == pytest.approx(ref_value, rel=rel)
    torch.testing.assert_close(grad, ref_grad, rtol=rel * 10, atol=1e-9)
    # the fitted scaler moved to the device transforms device logits there
    scaled = got.to(cuda_device).transform(dev_batches[0])
    assert scaled.device.type == cuda_device.type and scaled.dtype == dev_batches[0].dtype
    torch.testing.assert_close(scaled.cpu(), ref.transform(batches[0]), rtol=max(rel, 1e-6), atol=1e-6)


def test_sigmoid_regions_and_scaled_network_on_the_device(cuda_device):
    g = torch.Generator().manual_seed(4)
    masks = (torch.rand(2, 3, 12, 10, generator=g) > 0.5).float()
    logits = 4.0 * (2 * masks - 1) + 3.0 * torch.randn(2, 3, 12, 10, generator=g)
    kw = {"mode": "vector", "activation": "sigmoid", "max_steps": 30}
    ref = TemperatureScaler(**kw).fit(logits, masks)
    got = TemperatureScaler(**kw).fit(logits.to(cuda_device), masks.to(cuda_device))
    # float32 logits, 30 L-BFGS steps per region: the optimiser carries the GPU's other summation order into the
    # fitted temperatures (1.6e-4 relative measured on an H100); the float64 fits above agree to 1e-7
    torch.testing.assert_close(got.temperature.cpu(), ref.temperature, rtol=1e-3, atol=0)
    net = torch.nn.Conv2d(3, 3, 1).to(cuda_device)
    scaled = TemperatureScaled(net, got.temperature.to(cuda_device))
    x = torch.randn(1, 3, 5, 4, generator=g).to(cuda_device)
    out = scaled(x)
    assert out.device.type == cuda_device.type
    t = got.temperature.to(device=cuda_device, dtype=out.dtype).view(1, -1, 1, 1)
    torch.testing.assert_close(out, net(x) / t)
