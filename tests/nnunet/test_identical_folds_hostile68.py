"""Hostile review 68: nnU-Net folds holding the same weights (a fold folder copied into another) are one network
counted twice as ensemble members; ``EnsembleSource`` warns of such members, the predictor's folds now do too."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

pytest.importorskip("nnunetv2")

from nnunetv2.utilities.get_network_from_plans import get_network_from_plans  # noqa: E402
from nnunetv2.utilities.plans_handling.plans_handler import PlansManager  # noqa: E402

import monai_unc.nnunet as mun  # noqa: E402
from tests.nnunet.test_nnunet import DATASET_JSON, make_plans  # noqa: E402


def _init(copies: bool, sources: tuple[str, ...] = ("folds", "mirroring")) -> list[str]:
    pm = PlansManager(make_plans())
    cm = pm.get_configuration("cfg")
    params = []
    for k in range(3):
        torch.manual_seed(7 if copies and k else 100 + k)  # copies: folds 1 and 2 from one initialisation
        net = get_network_from_plans(cm.network_arch_class_name, cm.network_arch_init_kwargs,
                                     cm.network_arch_init_kwargs_req_import, 1, 3, allow_init=True,
                                     deep_supervision=False)
        params.append(copy.deepcopy(net.state_dict()))
    pred = mun.UncertaintyPredictor(uncertainty_sources=sources, device=torch.device("cpu"), allow_tqdm=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pred.manual_initialization(net, pm, cm, params, DATASET_JSON, "nnUNetTrainer", (0, 1, 2))
    return [(str(w.message), w.filename) for w in caught if "same weights" in str(w.message)]


def test_folds_with_the_same_weights_are_warned_of_at_the_callers_line():
    msgs = _init(copies=True)
    assert len(msgs) == 1 and msgs[0][0].startswith("folds: fold #2 holds the same weights as fold #1:"), msgs
    assert msgs[0][1] == __file__


def test_distinct_folds_and_folds_not_sampled_are_not():
    assert _init(copies=False) == []
    assert _init(copies=True, sources=("mirroring",)) == []  # the folds' mean only: no ensemble disagreement
