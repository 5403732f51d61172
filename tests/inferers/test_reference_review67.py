"""Review 67: TTA, ensembles and their product against a brute-force reference built on stock MONAI.

The reference runs MONAI's own ``SlidingWindowInferer`` (float64 buffers) on a window callable that loops the flips
and the members with plain network calls, and derives every map with numpy from the definitions of docs/inferers.md:
``pred`` the mean probability, EE the blend of the windows' mean entropies, WD ``H(pred) - blend H(m_w)`` (the
members' mean), MI ``PE - EE - WD``, the variance the blend of the windows' variances plus the members' disagreement;
with ``window_disagreement="mutual_information"`` MI ``PE - EE`` and the variance of the mixture.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from monai.data import MetaTensor
from monai.inferers import SlidingWindowInferer
from monai.transforms import Affine

from monai_unc.inferers import (
    EnsembleInferer,
    EnsembleSource,
    FlipSource,
    InvertibleTransformSource,
    TTAInferer,
    UncertaintyInferer,
)

MAPS = ("pred", "predictive_entropy", "expected_entropy", "mutual_information", "window_disagreement", "variance")


def _entropy(p: np.ndarray, multilabel: bool) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(p > 0, p * np.log(p), 0.0)
        if multilabel:
            return h - np.where(p < 1, (1 - p) * np.log1p(-p), 0.0)
        return h.sum(1, keepdims=True)


def _probs(z: torch.Tensor, activation: str) -> tuple[np.ndarray, bool]:
    z = z.double()
    if activation == "softmax":
        return torch.softmax(z, 1).numpy(), False
    p = torch.sigmoid(z).numpy()
    return (np.concatenate([1 - p, p], 1), False) if z.shape[1] == 1 else (p, True)


@torch.no_grad()
def _reference(x, members, variants, activation, sw):
    """The maps of ``members`` x ``variants`` (callables ``(net, window) -> logits``), brute force."""
    parts, multilabel = [], [False]

    for net in members:
        def window(t, net=net):
            ps = []
            for variant in variants:
                p, multilabel[0] = _probs(variant(net, t.float()), activation)
                ps.append(p)
            ps = np.stack(ps)
            m = ps.mean(0)
            var = ps.var(0) if multilabel[0] else ps.var(0).mean(1, keepdims=True)
            ee = np.mean([_entropy(p, multilabel[0]) for p in ps], 0)
            return {k: torch.from_numpy(v) for k, v in
                    {"m": m, "ee": ee, "hm": _entropy(m, multilabel[0]), "var": var, "msq": (ps ** 2).mean(0)}.items()}

        parts.append({k: v.numpy() for k, v in sw(x.double(), window).items()})
    ml = multilabel[0]

    def over_classes(a):
        return a if ml else a.mean(1, keepdims=True)

    pred = np.mean([o["m"] for o in parts], 0)
    pe, ee = _entropy(pred, ml), np.mean([o["ee"] for o in parts], 0)
    wd = np.mean([_entropy(o["m"], ml) - o["hm"] for o in parts], 0)
    var = np.mean([o["var"] + over_classes(o["m"] ** 2) for o in parts], 0) - over_classes(pred ** 2)
    mixture = over_classes(np.mean([o["msq"] for o in parts], 0) - pred ** 2)
    return {"pred": pred, "predictive_entropy": pe, "expected_entropy": ee, "mutual_information": pe - ee - wd,
            "window_disagreement": wd, "variance": var, "old_mi": pe - ee, "old_variance": mixture}


def _net(cin: int, cout: int, dims: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    conv = torch.nn.Conv3d if dims == 3 else torch.nn.Conv2d
    return torch.nn.Sequential(conv(cin, 4, 3, padding=1), torch.nn.Tanh(), conv(4, cout, 3, padding=1)).eval()


def _flips(dims: int, axes) -> list:
    out = []
    for subset in [()] + [(a,) for a in axes] + ([tuple(axes)] if len(axes) == 2 else []):
        d = tuple(a + 2 for a in subset)
        out.append(lambda net, t, d=d: torch.flip(net(torch.flip(t, d)), d) if d else net(t))
    return out


def _assert_maps(out, ref, atol=2e-6):
    for key in MAPS:
        got = out[key].double().numpy()
        assert got.shape == ref[key].shape, key
        np.testing.assert_allclose(got, ref[key], rtol=0, atol=atol, err_msg=key)


@pytest.mark.parametrize("activation, classes", [("softmax", 5), ("sigmoid", 1), ("sigmoid", 3)])
def test_tta_flips_under_gaussian_windows_match_the_reference(activation, classes):
    """Two flip axes (4 samples), batch 2, odd sizes, anisotropic windows overlapping by 0.25 with Gaussian weights."""
    torch.manual_seed(0)
    x = torch.randn(2, 2, 7, 6, 5)
    net = _net(2, classes, 3, 0)
    sw = SlidingWindowInferer((5, 4, 3), overlap=0.25, mode="gaussian", sigma_scale=0.2, sw_batch_size=2)
    ref = _reference(x, [net], _flips(3, (0, 2)), activation, sw)
    with torch.no_grad():
        _assert_maps(TTAInferer(flip_axes=(0, 2), activation=activation, base_inferer=sw)(x, net), ref)
        old = TTAInferer(flip_axes=(0, 2), activation=activation, base_inferer=sw,
                         window_disagreement="mutual_information")(x, net)
    np.testing.assert_allclose(old["mutual_information"].double().numpy(), ref["old_mi"], rtol=0, atol=2e-6)
    np.testing.assert_allclose(old["variance"].double().numpy(), ref["old_variance"], rtol=0, atol=2e-6)


@pytest.mark.parametrize("activation, classes", [("softmax", 2), ("sigmoid", 2)])
def test_ensemble_times_flips_under_padded_windows_match_the_reference(activation, classes):
    """Three members x one flip, 2D, windows larger than the image along one axis (padded with cval), overlap 0.5."""
    torch.manual_seed(1)
    x = torch.randn(2, 1, 5, 11)
    members = [_net(1, classes, 2, s) for s in range(3)]
    sw = SlidingWindowInferer((7, 6), overlap=0.5, padding_mode="constant", cval=1.5)
    ref = _reference(x, members, _flips(2, (1,)), activation, sw)
    with torch.no_grad():
        out = UncertaintyInferer([EnsembleSource(members), FlipSource([1])], activation=activation, base_inferer=sw)(x)
        _assert_maps(out, ref)
        one = EnsembleInferer(members[:1], activation=activation, base_inferer=sw)(x)
    _assert_maps(one, _reference(x, members[:1], _flips(2, ()), activation, sw))


def test_members_that_disagree_totally():
    """Two confident members of opposite classes: MI = PE = log 2, EE 0, variance 1/4 (mean over the 2 classes)."""
    class Constant(torch.nn.Module):
        def __init__(self, label: int) -> None:
            super().__init__()
            self.label = label
            self.scale = torch.nn.Parameter(torch.ones(()))

        def forward(self, t: torch.Tensor) -> torch.Tensor:
            z = torch.full((t.shape[0], 2, *t.shape[2:]), -40.0) * self.scale
            z[:, self.label] = 40.0
            return z

    x = torch.randn(1, 1, 6, 5)
    out = EnsembleInferer([Constant(0), Constant(1)], base_inferer=SlidingWindowInferer((4, 4), overlap=0.5))(x)
    torch.testing.assert_close(out["mutual_information"], torch.full_like(out["mutual_information"], np.log(2)))
    assert float(out["expected_entropy"].max()) < 1e-15 and float(out["window_disagreement"].abs().max()) == 0
    torch.testing.assert_close(out["variance"], torch.full_like(out["variance"], 0.25))


def test_an_affine_that_is_not_its_own_inverse_matches_monai_inverted_by_hand():
    """Rotation, anisotropic scaling and a shift (border padding: every voxel covered), inverted by MONAI itself."""
    torch.manual_seed(2)
    x = torch.randn(1, 1, 12, 10)
    net = _net(1, 3, 2, 3)
    affine = Affine(rotate_params=0.4, scale_params=(1.1, 0.9), translate_params=(1.0, -0.5), padding_mode="border",
                    image_only=True)

    def by_hand(net, t):
        rows = []
        for item in t:
            moved = affine(MetaTensor(item))
            z = net(moved.as_tensor()[None].float())[0]
            back = MetaTensor(z, meta=dict(moved.meta))
            back.applied_operations = moved.applied_operations
            rows.append(affine.inverse(back).as_tensor())
        return torch.stack(rows)

    sw = SlidingWindowInferer((8, 8), overlap=0.5, mode="gaussian")
    ref = _reference(x, [net], [by_hand], "softmax", sw)
    with torch.no_grad():
        _assert_maps(UncertaintyInferer(InvertibleTransformSource([affine]), base_inferer=sw)(x, net), ref)
        out = TTAInferer(flip_axes=(1,), transforms=[affine], base_inferer=sw)(x, net)  # flips x the affine
    # the flip is applied to the transformed input (and undone before the inverse): the affine is the outer wrapper
    flipped = _flips(2, (1,))[1]
    both = [by_hand, lambda net, t: by_hand(lambda u: flipped(net, u), t)]
    _assert_maps(out, _reference(x, [net], both, "softmax", sw))
    plain = _reference(x, [net], _flips(2, ()), "softmax", sw)
    assert np.abs(plain["pred"] - ref["pred"]).max() > 1e-2  # the affine changes the prediction: the check has teeth
