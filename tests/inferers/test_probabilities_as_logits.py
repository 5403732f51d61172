"""A network that ends in its own Sigmoid (or Softmax) layer, run with ``activation="sigmoid"`` (``"softmax"``).

The inferers apply the activation to what the network returns as to logits: a second sigmoid put every probability
in [0.5, 0.731], so every voxel of every region came out foreground (``pred >= 0.5`` everywhere) and every binary
entropy near log 2, without a word (found by hostile review). Such an output, all in [0, 1] and not constant, now
gives one ``UserWarning`` per call (under ``"softmax"`` a probability map, its channels summing to 1, is refused);
logits and a zero-initialised head do not.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from monai.inferers import SlidingWindowInferer

from monai_unc.inferers import MCDropoutInferer, warn_if_probabilities

MESSAGE = r"network's output lies in \[0, 1\]"


def _net(channels: int, final: torch.nn.Module | None) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [torch.nn.Conv3d(2, channels, 1), torch.nn.Dropout(0.2)]
    return torch.nn.Sequential(*layers, *([final] if final is not None else [])).eval()


def _x() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return 3 * torch.randn(1, 2, 8, 8, 8, generator=g)


@pytest.mark.parametrize("base", [None, SlidingWindowInferer(roi_size=(4, 4, 4), overlap=0.5)])
def test_region_network_ending_in_a_sigmoid_warns_once(base):
    kwargs = {} if base is None else {"base_inferer": base}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = MCDropoutInferer(num_samples=3, activation="sigmoid", seed=0, **kwargs)(_x(), _net(3, torch.nn.Sigmoid()))
    hits = [x for x in w if "network's output lies in [0, 1]" in str(x.message)]
    assert len(hits) == 1 and issubclass(hits[0].category, UserWarning)
    assert bool((out["pred"] >= 0.5).all())  # what the warning is about: every voxel foreground


def test_softmax_network_ending_in_a_softmax_is_refused():
    """Under "softmax" a probability map (channels summing to 1) is evidence enough: refused, not warned."""
    with pytest.raises(ValueError, match="already returns probabilities"):
        MCDropoutInferer(num_samples=2, activation="softmax", seed=0)(_x(), _net(3, torch.nn.Softmax(dim=1)))


def test_softmax_network_ending_in_a_sigmoid_warns():
    """Under "softmax" an output in [0, 1] whose channels do not sum to 1 (a sigmoid in the forward) is warned."""
    with pytest.warns(UserWarning, match=MESSAGE):
        MCDropoutInferer(num_samples=2, activation="softmax", seed=0)(_x(), _net(3, torch.nn.Sigmoid()))


def test_logits_and_a_constant_head_do_not_warn():
    zero = _net(3, None)
    torch.nn.init.zeros_(zero[0].weight)
    torch.nn.init.zeros_(zero[0].bias)
    for net in (_net(3, None), _net(1, None), zero):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            MCDropoutInferer(num_samples=2, activation="sigmoid", seed=0)(_x(), net)
        assert not [x for x in w if "network's output lies in [0, 1]" in str(x.message)]
    assert warn_if_probabilities(torch.tensor([[[0.2, 0.7]]]), None) is False  # probabilities expected


def _calibration_cases(root):
    import nibabel as nib
    import numpy as np

    from monai_unc.io import list_image_cases

    (root / "imgs").mkdir()
    (root / "labs").mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        nib.save(nib.Nifti1Image(rng.normal(size=(6, 6, 6)).astype(np.float32), np.eye(4)),
                 str(root / "imgs" / f"c{i}.nii.gz"))
        nib.save(nib.Nifti1Image(rng.integers(0, 2, (6, 6, 6)).astype(np.uint8), np.eye(4)),
                 str(root / "labs" / f"c{i}.nii.gz"))
    return list_image_cases(root / "imgs"), [root / "labs" / f"c{i}.nii.gz" for i in range(2)]


def test_calibrate_checks_its_logits_as_the_inferers_do(tmp_path):
    """``monai-unc calibrate`` (``collect_logits``) is the twin of the inferers' check: it took the output of a network
    ending in its own Softmax for logits and fitted a temperature to probabilities without a word (found by hostile
    review). Refused now under softmax, warned under sigmoid; logits pass."""
    from monai_unc.workflows.calibrate import collect_logits
    from monai_unc.workflows.models import LoadedModel

    cases, labels = _calibration_cases(tmp_path)

    def model(final: torch.nn.Module | None, channels: int = 2) -> LoadedModel:
        torch.manual_seed(0)
        layers = [torch.nn.Conv3d(1, channels, 1), *([final] if final is not None else [])]
        return LoadedModel(torch.nn.Sequential(*layers).eval(), "network: Sequential", "none", None, [], 3, None, [])

    with pytest.raises(ValueError, match="already returns probabilities"):
        collect_logits(cases, labels, model(torch.nn.Softmax(dim=1)), "none", progress=False)
    with pytest.warns(UserWarning, match=MESSAGE):
        collect_logits(cases, labels, model(torch.nn.Sigmoid(), 1), "none", progress=False, activation="sigmoid")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        logits, _ = collect_logits(cases, labels, model(None), "none", progress=False)
    assert len(logits) == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_the_probability_map_check_reads_the_extremes_as_the_elementwise_form(dtype):
    """Found by the review of the GPU paths: the check's ``(t - 1/C).abs().amax()`` made two temporaries of the
    network's whole output on the first sample of a call (beyond the memory model); it now reads the extremes, with
    the same roundings: the decisions of the elementwise form, near the tolerance too."""
    from monai_unc._utils import probability_tolerance
    from monai_unc.inferers.sampling import _is_probability_map

    def elementwise(t):
        tol = probability_tolerance(t.dtype)
        t = t.float() if t.dtype in (torch.float16, torch.bfloat16) else t
        if not (bool(t.amin() >= -tol) and bool(t.amax() <= 1 + tol)):
            return False
        if not bool((t.sum(dim=1) - 1).abs().amax() <= tol):
            return False
        return bool((t - 1.0 / t.shape[1]).abs().amax() > tol)

    g = torch.Generator().manual_seed(0)
    seen = set()
    for c in (2, 3, 7):
        tol = probability_tolerance(dtype)
        for scale in (0.0, 0.5 * tol, tol, 2 * tol, 0.1, 5.0):
            for _ in range(10):
                z = scale * torch.randn(2, c, 4, 4, generator=g)
                for t in (torch.softmax(z, 1).to(dtype), z.to(dtype), (1.0 / c + z).to(dtype)):
                    want = elementwise(t)
                    assert _is_probability_map(t) == want
                    seen.add(want)
    assert seen == {True, False}
