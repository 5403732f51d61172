"""Review 67: ensemble members under ``torch.autocast`` whose float64 weights autocast does not cast."""

from __future__ import annotations

import pytest
import torch

from monai_unc.inferers import EnsembleInferer


def _member(seed: int, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Conv2d(1, 3, 3, padding=1).to(dtype).eval()


@pytest.mark.parametrize("input_dtype, member_dtype", [(torch.float32, torch.float64), (torch.float64, torch.float32)])
def test_autocast_refuses_a_float64_mismatch_naming_the_member(input_dtype, member_dtype):
    """autocast casts float32 / float16 / bfloat16 tensors but never float64 ones: a float64 member beside a float32
    input (or a float32 member beside a float64 input) failed inside its first convolution with PyTorch's
    ``Input type (c10::BFloat16) and bias type (double) should be the same``, naming no member."""
    members = [_member(0, input_dtype), _member(1, member_dtype)]
    x = torch.randn(1, 1, 6, 5, dtype=input_dtype)
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(ValueError, match=r"networks\[1\].*autocast"):
        EnsembleInferer(members)(x)


def test_autocast_still_takes_members_it_casts():
    """float32, bfloat16 and float16 members on a float32 input all run in bfloat16 under CPU autocast, and so do
    float64 members on a float64 input (autocast leaves both in float64)."""
    x = torch.randn(1, 1, 6, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = EnsembleInferer([_member(0), _member(1, torch.bfloat16), _member(2, torch.float16)])(x)
        assert out.num_samples == 3 and bool(torch.isfinite(out["pred"]).all())
        out = EnsembleInferer([_member(0, torch.float64), _member(1, torch.float64)])(x.double())
        assert out.num_samples == 2


def test_ensemble_inferer_passes_the_checkpoint_key(tmp_path):
    """``EnsembleInferer(paths, key=...)`` reads each checkpoint's state dict under ``key`` (a MONAI bundle's
    ``CheckpointLoader`` entry), as ``EnsembleSource`` does: the inferer took no ``key`` and refused it as an unknown
    option of ``UncertaintyInferer``, so such checkpoints could not be loaded through it."""
    net = _member(0)
    paths = []
    for i in range(2):
        path = tmp_path / f"fold{i}.pt"
        torch.save({"weights": _member(i + 1).state_dict(), "epoch": 3}, path)
        paths.append(path)
    x = torch.randn(1, 1, 6, 5)
    out = EnsembleInferer(paths, key="weights")(x, net)
    ref = EnsembleInferer([_member(1), _member(2)])(x)
    assert out.num_samples == 2
    torch.testing.assert_close(out["pred"], ref["pred"], rtol=0, atol=1e-6)
    assert torch.equal(net.weight, _member(0).weight)  # the architecture's own weights are restored


def test_ensemble_key_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match="key"):
        EnsembleInferer([_member(0), _member(1)], key=3)
