"""Hostile review 60 of the MONAI integration: engines, handlers, transforms."""

from __future__ import annotations

import warnings

import pytest
import torch
from monai.data import DataLoader, Dataset, MetaTensor
from monai.networks.nets import UNet
from monai.transforms import Activationsd, AsDiscreted, Compose, CopyItemsd, Lambdad

pytest.importorskip("ignite")

from monai_unc.engines import UncertaintyEvaluator, find_pred_activation  # noqa: E402
from monai_unc.inferers import MCDropoutInferer  # noqa: E402

CPU = torch.device("cpu")


def _items(n: int = 2) -> list[dict]:
    torch.manual_seed(0)
    return [{"image": MetaTensor(torch.rand(1, 16, 16, 16)),
             "label": MetaTensor((torch.rand(1, 16, 16, 16) > 0.5).long())} for _ in range(n)]


def _net() -> UNet:
    torch.manual_seed(0)
    return UNet(3, 1, 2, (4, 8), (2,), dropout=0.2)


# ------------------------------------------------------------------------------------- activation on a copy of pred
def test_find_pred_activation_follows_a_copy_of_pred():
    # a bundle that keeps pred for the label map and applies the softmax to a copy (CopyItemsd) expects logits in
    # pred as well: the activation on the copy is the one that reads them
    assert find_pred_activation(Compose([CopyItemsd("pred", names="prob"), Activationsd("prob", softmax=True),
                                         AsDiscreted("pred", argmax=True)])) == "softmax"
    assert find_pred_activation(Compose([CopyItemsd(["label", "pred"], names=["lab", "p"]),
                                         Activationsd("p", sigmoid=True)])) == "sigmoid"
    assert find_pred_activation(Compose([CopyItemsd("pred", times=2, names=["a", "b"]),
                                         Activationsd("b", softmax=True)])) == "softmax"
    # a copy of another key is no copy of pred
    assert find_pred_activation(Compose([CopyItemsd("label", names="prob"),
                                         Activationsd("prob", softmax=True)])) is None


def test_softmax_on_a_copy_of_pred_gives_the_mean_probabilities():
    # found by hostile review 60: pred_format="auto" stored the mean probabilities, and the softmax on the copy
    # flattened them (max 1.0 became 0.708 on this net), without a word
    post = Compose([CopyItemsd("pred", names="prob"), Activationsd("prob", softmax=True),
                    AsDiscreted("pred", argmax=True)])
    plain = UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(_items()), batch_size=2),
                                 network=_net(), inferer=MCDropoutInferer(4, seed=0), pred_format="probabilities")
    plain.run()
    ev = UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(_items()), batch_size=2),
                              network=_net(), inferer=MCDropoutInferer(4, seed=0), postprocessing=post)
    ev.run()
    assert ev.pred_format == "log_probabilities"
    for case, ref in zip(ev.state.output, plain.state.output):
        torch.testing.assert_close(case["prob"].as_tensor(), ref["pred"].as_tensor(), atol=1e-6, rtol=0)
        assert torch.equal(case["pred"].as_tensor(), ref["pred"].as_tensor().argmax(0, keepdim=True).float())


def test_a_lambdad_on_a_copy_of_pred_is_warned_about():
    post = Compose([CopyItemsd("pred", names="prob"), Lambdad("prob", lambda x: torch.softmax(x, 0))])
    with pytest.warns(UserWarning, match="Lambdad"):
        UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(_items()), batch_size=2),
                             network=_net(), inferer=MCDropoutInferer(2, seed=0), postprocessing=post)
    # a copy of pred made after its argmax holds labels: nothing to warn about
    post = Compose([AsDiscreted("pred", argmax=True), CopyItemsd("pred", names="seg"), Lambdad("seg", lambda x: x)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        UncertaintyEvaluator(device=CPU, val_data_loader=DataLoader(Dataset(_items()), batch_size=2),
                             network=_net(), inferer=MCDropoutInferer(2, seed=0), postprocessing=post)
    # a copy made before the argmax keeps the probabilities; one made after it holds the labels
    from monai_unc.engines import _opaque_pred_transform

    assert _opaque_pred_transform(Compose([CopyItemsd("pred", names="prob"), AsDiscreted("pred", argmax=True),
                                           CopyItemsd("pred", names="seg"), Lambdad("seg", lambda x: x)])) is None
    assert _opaque_pred_transform(Compose([CopyItemsd("pred", names="prob"), AsDiscreted("pred", argmax=True),
                                           Lambdad("prob", lambda x: x)])) == "Lambdad(keys=['prob'])"
