"""The MONAI evaluator and every ignite handler of monai-unc with ``device=cuda_device``, against the CPU run.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``. The network has no dropout and the inferer
is test-time flipping, so the run is deterministic: the device run's maps equal the CPU run's within float32
convolution rounding (``atol=1e-5``; TF32 off); the handlers' values equal the functional core on the same
outputs (``1e-9``; MONAI's float32 reductions ``1e-5`` relative), and the per-case scores equal the CPU run's
within ``1e-5``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from ignite.engine import Engine, Events
from monai.data import DataLoader, Dataset
from monai.handlers import from_engine
from monai.transforms import Compose, CopyItemsd

from monai_unc.engines import CaseScoresHandler, UncertaintyEvaluator
from monai_unc.handlers import (
    BoundaryAwareECE,
    BoundaryUncertaintyConcentration,
    CalibrationHandler,
    GeneralizedEnergyDistance,
    NormalizedCrossCorrelation,
    QUBraTS,
    SpatialCalibrationError,
)
from monai_unc.inferers import TTAInferer
from monai_unc.metrics import (
    boundary_aware_ece,
    boundary_uncertainty_concentration,
    ged,
    ncc,
    qu_brats,
    rater_variance,
    spatial_calibration_error,
)
from monai_unc.metrics.calibration import ConfidenceHistogram, calibration_metrics
from monai_unc.transforms import AggregateUncertaintyd, SamplesToLabelsd
from tests.test_engines import _memory_items, _net

# TF32 off: the device run is compared with the CPU run to float32 rounding
pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("full_float32")]

#: the spacing of the cases of ``_memory_items(3)`` (their affines), which the spatial handlers read
SPACINGS = [(1.0 + i, 1.0, 2.0) for i in range(3)]
MAPS = ("pred", "predictive_entropy", "expected_entropy", "mutual_information")




def _evaluator(device: torch.device, items: list[dict]) -> tuple[UncertaintyEvaluator, list[dict], CaseScoresHandler]:
    post = Compose([SamplesToLabelsd("samples", output_key="sample_labels"),
                    CopyItemsd("raters", names="rater_labels"),
                    AggregateUncertaintyd(["mutual_information", "predictive_entropy"], method="mean")])
    scores = CaseScoresHandler(["predictive_entropy_mean", "mutual_information_mean"])
    ev = UncertaintyEvaluator(
        # MONAI's evaluators move the batches to ``device``, not the network
        device=device, val_data_loader=DataLoader(Dataset(items), batch_size=2),
        network=_net(2, dropout=0.0).to(device),
        inferer=TTAInferer(flip_axes=[0, 2], keep_samples=True), postprocessing=post,
        key_val_metric={"space": SpatialCalibrationError(uncertainty_key="predictive_entropy")},
        additional_metrics={
            "calib": CalibrationHandler(num_classes=2, output_transform=from_engine(["pred", "label"])),
            "buc": BoundaryUncertaintyConcentration(uncertainty_key="predictive_entropy"),
            "baece": BoundaryAwareECE(uncertainty_key="predictive_entropy"),
            "ged": GeneralizedEnergyDistance(num_classes=2, output_transform=from_engine(["sample_labels",
                                                                                           "rater_labels"])),
            "ncc": NormalizedCrossCorrelation(y_is_raters=True,
                                              output_transform=from_engine(["expected_entropy", "rater_labels"])),
        },
        val_handlers=[scores],
    )
    outputs: list[dict] = []
    ev.add_event_handler(Events.ITERATION_COMPLETED, lambda e: outputs.extend(e.state.output))
    return ev, outputs, scores


def test_evaluator_and_handlers_on_the_device_equal_the_cpu_run(cuda_device):
    ev_cpu, out_cpu, _ = _evaluator(torch.device("cpu"), _memory_items(3))
    ev_cpu.run()
    ev, outputs, _ = _evaluator(cuda_device, _memory_items(3))
    ev.run()
    assert len(outputs) == len(out_cpu) == 3
    for o, c in zip(outputs, out_cpu):
        for k in MAPS:
            assert o[k].device.type == cuda_device.type, k  # the maps stay on the evaluator's device
            torch.testing.assert_close(o[k].as_tensor().cpu(), c[k].as_tensor(), rtol=0, atol=1e-5, msg=k)
    # each handler equals the functional core on the device run's own outputs
    probs = torch.stack([o["pred"].as_tensor() for o in outputs])
    labels = torch.stack([o["label"].as_tensor() for o in outputs])
    ref = calibration_metrics(ConfidenceHistogram(2).update(probs.cpu(), labels.cpu()))
    for k, v in ref.items():
        assert ev.state.metrics[f"calib_{k}"] == pytest.approx(v, rel=1e-9, abs=1e-12), k
    u = torch.stack([o["predictive_entropy"].as_tensor() for o in outputs]).cpu()
    seg = probs.argmax(1, keepdim=True).cpu()
    for name, fn in (("buc", boundary_uncertainty_concentration), ("baece", boundary_aware_ece),
                     ("space", spatial_calibration_error)):
        want = fn(u, seg, labels.cpu(), spacing=SPACINGS)
        np.testing.assert_allclose(ev.state.metric_details[name].reshape(-1).cpu().numpy(), want.numpy(),
                                   atol=1e-9, equal_nan=True, err_msg=name)
    geds = [ged(o["rater_labels"].cpu(), o["sample_labels"].cpu(), num_classes=2).ged for o in outputs]
    assert ev.state.metrics["ged"] == pytest.approx(float(np.mean(geds)), rel=1e-5)
    nccs = [ncc(o["expected_entropy"].as_tensor().cpu(), rater_variance(o["rater_labels"].cpu(), keepdim=True))
            for o in outputs]
    assert ev.state.metrics["ncc"] == pytest.approx(float(np.mean(nccs)), rel=1e-5, abs=1e-9)
    # the OoD AUROC of the case scores equals the CPU run's (same scores up to rounding, same ranking here)
    for key in ("ood_auroc_predictive_entropy_mean", "ood_auroc_mutual_information_mean"):
        a, b = ev.state.metrics[key], ev_cpu.state.metrics[key]
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12), key
    for o, c in zip(outputs, out_cpu):
        assert float(o["predictive_entropy_mean"]) == pytest.approx(float(c["predictive_entropy_mean"]), abs=1e-5)


def test_qu_brats_handler_on_device_tensors(cuda_device):
    g = torch.Generator().manual_seed(4)
    probs = torch.rand(4, 3, 8, 9, 7, generator=g, dtype=torch.float64)
    y = torch.rand(4, 3, 8, 9, 7, generator=g) < 0.4
    u = torch.rand(4, 3, 8, 9, 7, generator=g, dtype=torch.float64) * math.log(2)
    image = torch.rand(4, 2, 8, 9, 7, generator=g) - 0.3
    dev = [t.to(cuda_device) for t in (probs, y, u, image)]
    data = [{"predictive_entropy": dev[2][i:i + 2], "pred": dev[0][i:i + 2], "label": dev[1][i:i + 2],
             "image": dev[3][i:i + 2]} for i in (0, 2)]
    engine = Engine(lambda e, batch: batch)
    QUBraTS(uncertainty_max=math.log(2), brain_mask_key="image").attach(engine, "qu_brats")
    engine.run(data, max_epochs=1)
    per_case = np.array([[qu_brats(u[i, r] / math.log(2) * 100, probs[i, r] > 0.5, y[i, r],
                                   (image[i] > 0).any(0)).score for r in range(3)] for i in range(4)])
    details = engine.state.metric_details["qu_brats"]
    assert details.device.type == cuda_device.type
    np.testing.assert_allclose(details.cpu().numpy(), per_case, atol=1e-12)
    assert engine.state.metrics["qu_brats"] == pytest.approx(per_case.mean(), abs=1e-6)
