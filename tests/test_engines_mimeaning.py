"""UncertaintyEvaluator with pred_format="auto": what it says it stores, and errors naming what the user set."""

from __future__ import annotations

import logging

import pytest
import torch

pytest.importorskip("ignite")

from monai.data import DataLoader, Dataset  # noqa: E402
from monai.inferers import SimpleInferer  # noqa: E402
from monai.transforms import Activationsd, Compose  # noqa: E402

from monai_unc.engines import UncertaintyEvaluator  # noqa: E402
from monai_unc.inferers import MCDropoutInferer  # noqa: E402

CPU = torch.device("cpu")


def _loader() -> DataLoader:
    torch.manual_seed(0)
    data = [{"image": torch.rand(1, 6, 6, 6), "label": torch.zeros(1, 6, 6, 6)} for _ in range(2)]
    return DataLoader(Dataset(data), batch_size=2)


def _net(channels: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.Dropout3d(0.2),
                               torch.nn.Conv3d(4, channels, 1))


def test_stock_inferer_is_not_said_to_store_log_probabilities(caplog):
    # found by hostile testing: "storing pred as log_probabilities" was logged although the raw logits are stored
    net = _net(3)
    with caplog.at_level(logging.INFO):
        ev = UncertaintyEvaluator(device=CPU, val_data_loader=_loader(), network=net, inferer=SimpleInferer(),
                                  postprocessing=Compose([Activationsd("pred", softmax=True)]))
        ev.run()
    assert not [r for r in caplog.records if "log_probabilities" in r.getMessage()]
    x = next(iter(_loader()))["image"]
    with torch.no_grad():
        expected = torch.softmax(net.eval()(x), 1)
    torch.testing.assert_close(torch.as_tensor(ev.state.output[0]["pred"]), expected[0], atol=1e-6, rtol=1e-5)


def test_uncertainty_inferer_conversion_is_logged(caplog):
    ev = UncertaintyEvaluator(device=CPU, val_data_loader=_loader(), network=_net(3), inferer=MCDropoutInferer(2),
                              postprocessing=Compose([Activationsd("pred", softmax=True)]))
    with caplog.at_level(logging.INFO):
        ev.run()
    assert [r for r in caplog.records if "as log_probabilities" in r.getMessage()]


def test_sigmoid_on_three_softmax_classes_names_the_postprocessing():
    # found by hostile testing: the error named pred_format='binary_logit', which the user never set
    ev = UncertaintyEvaluator(device=CPU, val_data_loader=_loader(), network=_net(3), inferer=MCDropoutInferer(2),
                              postprocessing=Compose([Activationsd("pred", sigmoid=True)]))
    with pytest.raises(ValueError, match="postprocessing applies sigmoid") as err:
        ev.run()
    assert "pred_format='auto'" in str(err.value)
