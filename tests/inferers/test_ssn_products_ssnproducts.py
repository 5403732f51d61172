"""SSN latent draws in products with random TTA sources: every draw belongs to its own transformed input.

Found by hostile testing: ``SSNSource`` reused the backbone pass of its first draw whenever the next input had the
same shape; a random invertible transform (``RandRotate90``) is drawn anew for every latent draw, so draws 1..m-1
took the distribution of draw 0's rotated input and were inverted with another rotation (mis-registered samples,
up to 0.06 off in probability in the test below).
"""

import pytest
import torch
from monai.transforms import RandRotate90
from torch import nn

from monai_unc.inferers import FlipSource, InvertibleTransformSource, SSNSource, UncertaintyInferer
from monai_unc.networks import SSNHead, SSNNetwork, ssn_sampling
from tests.networks.test_ssn import _Counting


def _deterministic_ssn() -> SSNNetwork:
    """An SSN whose draws equal its mean logits (no covariance to speak of): each sample is a plain TTA sample."""
    torch.manual_seed(0)
    head = SSNHead(8, num_classes=2, rank=1, spatial_dims=2, init_variance=1e-12, epsilon=1e-12)
    with torch.no_grad():  # logits well outside [0, 1] (not mistaken for probabilities)
        head.mean_conv.weight.mul_(20.0)
    return SSNNetwork(_Counting(nn.Conv2d(1, 8, 3, padding=1)), head).eval()


def test_latent_draws_under_a_random_rotation_are_inverted_with_their_own_rotation():
    net = _deterministic_ssn()
    x = torch.rand(1, 1, 6, 6)
    with torch.no_grad():  # the four possible samples: rot^-k softmax(mu(rot^k x)), k = 0..3 (brute force)
        valid = [torch.rot90(torch.softmax(net(torch.rot90(x, k, (2, 3))), 1), -k, (2, 3))[0] for k in range(4)]
    sources = [InvertibleTransformSource([RandRotate90(prob=1.0, max_k=3)], num_samples=3), SSNSource(4)]
    out = UncertaintyInferer(sources, seed=0, keep_samples=True)(x, net)
    assert out.num_samples == 12
    for s in out["samples"][:, 0]:
        assert min(float((s - v).abs().max()) for v in valid) < 1e-5
    # the statistics are those of the samples (brute force over the 12)
    s = out["samples"].double()
    torch.testing.assert_close(out["pred"].double(), s.mean(0), rtol=0, atol=1e-6)


def test_latent_draws_of_one_deterministic_variant_still_share_one_backbone_pass():
    net = _deterministic_ssn()
    x = torch.rand(1, 1, 6, 8)
    UncertaintyInferer([FlipSource((0, 1)), SSNSource(3)], seed=1)(x, net)
    assert net.backbone.calls == 4  # one pass per flip, three latent draws each


@pytest.mark.parametrize("change", ["values", "mask"])
def test_a_reused_pass_needs_the_same_input_and_mask(change):
    net = _deterministic_ssn()
    x = torch.rand(1, 1, 6, 6)
    mask = torch.ones(1, 1, 6, 6, dtype=torch.bool)
    with torch.no_grad(), ssn_sampling(net, cache=True):
        net(x, mask)
        with net.reuse_features():
            net(x.clone(), mask.clone())  # equal values: reused
            assert net.backbone.calls == 1
            other_x = x + 1 if change == "values" else x
            other_mask = mask if change == "values" else ~mask
            z = net(other_x, other_mask)
    assert net.backbone.calls == 2
    with torch.no_grad():
        torch.testing.assert_close(z, net.head.params(net.features(other_x), other_mask).mean, rtol=0, atol=1e-4)


def _dropout_ssn() -> tuple[SSNNetwork, nn.Module]:
    """A deterministic-draw SSN whose backbone drops one of two channels: four possible dropout masks."""
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.Dropout2d(0.5), nn.Conv2d(2, 8, 3, padding=1))
    head = SSNHead(8, num_classes=2, rank=1, spatial_dims=2, init_variance=1e-12, epsilon=1e-12)
    with torch.no_grad():
        head.mean_conv.weight.mul_(20.0)
    return SSNNetwork(backbone, head).eval(), backbone


def _mask_predictions(net: SSNNetwork, backbone: nn.Module, x: torch.Tensor, rotations: range) -> list[torch.Tensor]:
    """softmax(mu) of every (dropout mask, rotation) pair, rotated back: the only valid samples (brute force)."""
    out = []
    with torch.no_grad():
        for a in (0.0, 2.0):
            for b in (0.0, 2.0):
                keep = torch.tensor([a, b]).view(1, 2, 1, 1)
                for k in rotations:
                    f = backbone[2](backbone[0](torch.rot90(x, k, (2, 3))) * keep)
                    out.append(torch.rot90(torch.softmax(net.head.params(f).mean, 1), -k, (2, 3))[0])
    return out


@pytest.mark.parametrize("share_passes", [True, False])
def test_marginalised_draws_share_one_dropout_mask_and_one_random_rotation(share_passes):
    from monai_unc.inferers import MCDropoutSource

    net, backbone = _dropout_ssn()
    x = torch.rand(1, 1, 6, 6)
    valid = _mask_predictions(net, backbone, x, range(4))
    sources = [MCDropoutSource(4), InvertibleTransformSource([RandRotate90(prob=1.0, max_k=3)], num_samples=2),
               SSNSource(3, marginalize=True)]
    out = UncertaintyInferer(sources, seed=0, keep_samples=True, share_passes=share_passes)(x, net)
    assert out.num_samples == 8
    for s in out["samples"][:, 0]:  # one mask and one rotation per sample, not a blend of several
        assert min(float((s - v).abs().max()) for v in valid) < 1e-4


def test_marginalised_draws_next_to_noise_keep_one_dropout_mask():
    from monai_unc.inferers import MCDropoutSource, NoiseSource

    net, backbone = _dropout_ssn()
    x = torch.rand(1, 1, 6, 6)
    valid = _mask_predictions(net, backbone, x, range(1))
    sources = [MCDropoutSource(4), NoiseSource(1e-7, num_samples=1), SSNSource(3, marginalize=True)]
    out = UncertaintyInferer(sources, seed=0, keep_samples=True, share_passes=False)(x, net)
    for s in out["samples"][:, 0]:
        assert min(float((s - v).abs().max()) for v in valid) < 1e-4
