"""Review 66 of the SSN support: mirrored passes that are one latent draw, and the density in full precision."""

import itertools

import pytest
import torch

from monai_unc.networks import SSNHead, SSNNetwork, mirrored_ssn_noise, ssn_sampling

MIRRORS = [c for n in range(4) for c in itertools.combinations((2, 3, 4), n)]


def _equivariant_ssn() -> SSNNetwork:
    """1x1 convolutions only: the distribution of a flipped input is the flipped distribution."""
    torch.manual_seed(0)
    return SSNNetwork(torch.nn.Conv3d(1, 4, 1), SSNHead(4, num_classes=2, rank=2, init_variance=1.0)).eval()


def _mirrored_draws(net, x, mirrored: bool, head_only: bool = False) -> list[torch.Tensor]:
    """Every mirror's pass from one random state, flipped back."""
    call = (lambda t: net.head(net.features(t))) if head_only else net
    out = []
    with ssn_sampling(net), torch.no_grad():
        state = torch.get_rng_state()
        for axes in MIRRORS:
            torch.set_rng_state(state)
            with mirrored_ssn_noise(net, axes) if mirrored else torch.no_grad():
                o = call(torch.flip(x, axes) if axes else x)
            out.append(torch.flip(o, axes) if axes else o)
    return out


@pytest.mark.parametrize("head_only", [False, True])
def test_mirrored_passes_from_one_random_state_are_one_draw(head_only):
    # found by review 66: the per-logit noise z_D was drawn in each mirror's own layout, so the flipped-back draws
    # of one sample differed and nnU-Net's mean over the 8 mirrors kept about 1/8 of the diagonal variance
    net = _equivariant_ssn()
    x = torch.rand(1, 1, 5, 4, 3)
    draws = _mirrored_draws(net, x, mirrored=True, head_only=head_only)
    for d in draws[1:]:
        torch.testing.assert_close(d, draws[0], atol=1e-6, rtol=0)
    assert not torch.equal(draws[0], net(x))  # a draw, not the mean
    unmirrored = _mirrored_draws(net, x, mirrored=False, head_only=head_only)
    assert all(float((d - unmirrored[0]).abs().max()) > 1e-2 for d in unmirrored[1:])  # the old behaviour
    assert all(h.noise_flip == () for h in [net.head])  # restored


def test_mean_over_mirrors_keeps_the_variance_of_one_draw():
    net = _equivariant_ssn()
    x = torch.rand(1, 1, 4, 3, 2)
    with torch.no_grad():
        var = net.distribution(x).variance.reshape(1, 2, 4, 3, 2)
    ratio = {}
    for mirrored in (True, False):
        samples = torch.stack([torch.stack(_mirrored_draws(net, x, mirrored)).mean(0) for _ in range(150)])
        ratio[mirrored] = float((samples.var(0) / var).mean())
    assert 0.75 < ratio[True] < 1.25, ratio
    assert ratio[False] < 0.5, ratio  # the old behaviour: about 1/8 of D (and the factor's part, small here)


@pytest.mark.parametrize("bad", [(1,), (0, 2), (2, 2), "23", (2.0,), 2, (-1,)])
def test_mirrored_noise_axes_are_distinct_spatial_dims(bad):
    with pytest.raises(ValueError, match="axes"):
        with mirrored_ssn_noise(_equivariant_ssn(), bad):
            pass


def test_mirrored_noise_axis_beyond_the_map_and_network_without_head():
    net = _equivariant_ssn()
    with ssn_sampling(net), mirrored_ssn_noise(net, (5,)), pytest.raises(ValueError, match="axes"):
        net(torch.rand(1, 1, 3, 3, 3))
    assert net.head.noise_flip == ()
    with pytest.raises(ValueError, match="SSNHead"):
        with mirrored_ssn_noise(torch.nn.Conv3d(1, 1, 1), (2,)):
            pass
