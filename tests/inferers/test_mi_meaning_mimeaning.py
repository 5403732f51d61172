"""The meaning of the mutual information, said the same before and after a call, by the inferer and nnU-Net."""

from __future__ import annotations

import pytest
import torch

from monai_unc.inferers import (
    EnsembleSource,
    FlipSource,
    MCDropoutSource,
    NoiseSource,
    RateInSource,
    SSNSource,
    StochasticSource,
    UncertaintyInferer,
)
from monai_unc.keys import MIMeaning, combine_mi_meanings
from monai_unc.networks import SSNHead, SSNNetwork

E, A, M, N = MIMeaning.EPISTEMIC, MIMeaning.ALEATORIC, MIMeaning.MIXED, MIMeaning.NONE


def _net(seed: int = 0) -> SSNNetwork:
    torch.manual_seed(seed)
    backbone = torch.nn.Sequential(torch.nn.Conv3d(1, 8, 3, padding=1), torch.nn.Dropout3d(0.3))
    return SSNNetwork(backbone, SSNHead(8, num_classes=2, rank=2, init_variance=1.0)).eval()


# (sources factory, expected meaning): MI over the varying sources only (a marginalised SSN draws one sample)
CASES = {
    "mcdropout": (lambda: [MCDropoutSource(3)], E),
    "ratein": (lambda: [RateInSource(num_samples=3, target_loss=0.1)], E),
    "flips": (lambda: [FlipSource([0])], E),
    "noise": (lambda: [NoiseSource(0.1, 3)], E),
    "ensemble": (lambda: [EnsembleSource([_net(0), _net(1)])], E),
    "ssn": (lambda: [SSNSource(3)], A),
    "ssn_marginalised": (lambda: [SSNSource(3, marginalize=True)], N),
    "mcdropout+ssn": (lambda: [MCDropoutSource(3), SSNSource(3)], M),
    "mcdropout+ssn_marginalised": (lambda: [MCDropoutSource(3), SSNSource(3, marginalize=True)], E),
    "flips+ssn": (lambda: [FlipSource([0]), SSNSource(3)], M),
    "flips+ssn_marginalised": (lambda: [FlipSource([0]), SSNSource(3, marginalize=True)], E),
    "noise+ssn_marginalised": (lambda: [NoiseSource(0.1, 2), SSNSource(3, marginalize=True)], E),
    "ensemble+ssn": (lambda: [EnsembleSource([_net(0), _net(1)]), SSNSource(3)], M),
    "ensemble+ssn_marginalised": (lambda: [EnsembleSource([_net(0), _net(1)]), SSNSource(3, marginalize=True)], E),
    "mcdropout1+ssn": (lambda: [MCDropoutSource(1), SSNSource(3)], A),
    "stochastic1": (lambda: [StochasticSource(1)], N),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_inferer_mi_meaning_before_call_matches_output(name):
    # found by hostile testing: before any input, mcdropout+marginalised ssn said "mixed" and the output "epistemic"
    make, expected = CASES[name]
    sources = make()
    inferer = UncertaintyInferer(sources, seed=0)
    assert inferer.mi_meaning == expected
    net = None if isinstance(sources[0], EnsembleSource) else _net()
    out = inferer(torch.rand(1, 1, 4, 4, 4), net)
    assert out.mi_meaning == expected == inferer.mi_meaning


def test_combine_mi_meanings_rule():
    assert combine_mi_meanings([]) == N
    assert combine_mi_meanings([(E, 4), (A, 1)]) == E
    assert combine_mi_meanings([("aleatoric", 2), ("epistemic", 2)]) == M
    assert combine_mi_meanings([(M, 2), (E, 2)]) == M
    assert combine_mi_meanings([(E, 1), (A, 1)]) == N


@pytest.mark.parametrize(
    ("sources", "num_samples", "expected"),
    [
        (("ssn",), 4, A),
        (("ssn", "dropout"), 4, M),
        (("ssn", "dropout"), 1, N),
        (("dropout",), 1, N),
        (("mirroring", "dropout"), 4, E),
        (("folds", "ssn"), 4, M),
    ],
)
def test_nnunet_predictor_mi_meaning_counts_varying_sources(sources, num_samples, expected):
    # found by hostile testing: ("ssn", "dropout") with num_samples=1 said "mixed" although one pass cannot vary
    pytest.importorskip("nnunetv2")
    from monai_unc.nnunet.predictor import UncertaintyPredictor

    pred = UncertaintyPredictor(sources, num_samples=num_samples, device=torch.device("cpu"))
    assert pred.mi_meaning == expected

