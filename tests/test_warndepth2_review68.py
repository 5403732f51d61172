"""Review 68 (follow-up): library code that said, or had said, one of our own warnings silenced it without a filter.

Until review 68 the evaluation's QU-BraTS columns, ``lesion_retention``, ``plot_referral_curve``, ``monai-unc
calibrate``, ``monai-unc nnunet-calibrate``, ``UncertaintyInferer`` (half-precision ``accum_dtype``) and
``CalibrationMetric`` ran a callee inside ``warnings.catch_warnings()`` with an ``ignore`` filter on its warning's text
(``CalibrationMetric``, and the marks of ``plot_referral_curve``: on every ``UserWarning``). That is process-wide state:
every other thread (and any code of the caller run meanwhile) saw the extra filter, leaving the context re-showed every
"once per location" warning of the caller, and ``CalibrationMetric(reduction="mean")`` never said that ``n_bins`` does
not divide the fine bins. Each callee now has a core (or a flag) that does not warn.
"""

from __future__ import annotations

import json
import threading
import warnings

import numpy as np
import pytest
import torch

from monai_unc.evaluation import EvaluationConfig, evaluate_case
from monai_unc.evaluation.lesions import lesion_retention
from monai_unc.inferers import FlipSource, UncertaintyInferer
from monai_unc.metrics import CalibrationMetric
from monai_unc.report.plots import plot_referral_curve
from monai_unc.temperature import TemperatureScaler


def _probe() -> None:
    warnings.warn("review 68 probe (follow-up)", UserWarning, stacklevel=1)  # one location: shown once, "default"


def _plot() -> None:
    import matplotlib.pyplot as plt

    rc = {"referral_fraction": 0.5, "feasible": True, "target_risk": 0.1, "delta": 0.1}
    plt.close(plot_referral_curve(np.array([0.9, 0.1, 0.5, 0.2]), np.array([0.2, 0.9, 0.6, 0.8]), budget=0.25,
                                  risk_control=rc))


def _calibration_metric() -> None:
    probs = torch.tensor([[[[0.9, 0.2]], [[0.1, 0.8]]]])  # (B=1, C=2, 1, 2)
    CalibrationMetric(num_classes=2, reduction="mean", min_bin_count=5)(probs, torch.tensor([[[[0, 1]]]]))


class _Net(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, -x], dim=1)


def _inferer() -> UncertaintyInferer:
    with warnings.catch_warnings():  # the test's own: the constructor's half-precision warning is not this test's
        warnings.simplefilter("ignore")
        return UncertaintyInferer([FlipSource((0,))], accum_dtype=torch.bfloat16)


INFERER = _inferer()
CALLS = {
    "lesion_retention": lambda: lesion_retention([0.1, 0.4, 0.2, 0.8], [0.9, 0.6, 0.8, 0.3], [0, 1, 0, 1],
                                                 referred=(0.0, 0.5)),
    "plot_referral_curve": _plot,
    "CalibrationMetric": _calibration_metric,
    "UncertaintyInferer": lambda: INFERER(torch.linspace(-1, 1, 8).reshape(1, 1, 8), _Net()),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_the_once_per_location_registry_is_left_alone(name):
    """A warning shown once under the "default" action stays shown once when the library runs in between (leaving a
    ``catch_warnings`` context marks every registry stale: it was shown again after each call)."""
    CALLS[name]()  # imports and first-call work done before the count
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(2):
            _probe()
            CALLS[name]()
    assert sum(str(w.message) == "review 68 probe (follow-up)" for w in caught) == 1


def test_the_words_said_are_kept():
    """Behaviour kept: the lesion curve's tie warning once (its own scores), none for the oracle's tied Dice; the
    plot's tie warning once; the inferer's half-precision warning once, by its constructor, not per window."""
    def said(fn):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
        return [str(w.message) for w in caught]

    tied = said(lambda: lesion_retention([0.5] * 4, [1.0] * 4, [0, 0, 0, 0], referred=(0.0, 0.5)))
    assert len(tied) == 1 and tied[0].startswith("referral_curve: all 4 scores are tied")
    assert said(lambda: lesion_retention([0.1, 0.4, 0.2, 0.8], [1.0] * 4, [0, 0, 0, 0], referred=(0.0, 0.5))) == []
    assert said(_plot) == []
    built = said(lambda: UncertaintyInferer([FlipSource((0,))], accum_dtype=torch.bfloat16))
    assert len(built) == 1 and built[0].startswith("accum_dtype=torch.bfloat16")
    assert said(CALLS["UncertaintyInferer"]) == []


def test_calibration_metric_lets_the_warnings_it_does_not_report_through():
    """``reduction="mean"`` never said that ``n_bins=7`` does not divide the fine bins (every ``UserWarning`` of the
    per-case values was silenced); the NaN of a case is still said once, at aggregation, not per update."""
    probs = torch.tensor([[[[0.9, 0.2]], [[0.1, 0.8]]]])
    y = torch.tensor([[[[0, 1]]]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        CalibrationMetric(num_classes=2, n_bins=7, reduction="mean")(probs, y)
    assert caught and {str(w.message)[:30] for w in caught} == {"n_bins=7 does not divide n_fin"}  # one per metric
    metric = CalibrationMetric(num_classes=2, metrics=("ece", "nll"), reduction="mean", min_bin_count=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metric(probs, y)  # two voxels: no bin holds 5, the ECE is NaN
        assert caught == []
        out = metric.aggregate()
    assert [str(w.message) for w in caught] == ["ece: every case is NaN"]
    assert torch.isnan(out["ece"]) and torch.isfinite(out["nll"])


def test_evaluation_qu_brats_installs_no_filter(tmp_path, monkeypatch):
    """The QU-BraTS columns of a region evaluation leave out the warning of an ungraded map (the maps are rescaled
    from the measure's own maximum) without an ``ignore`` filter the caller did not install."""
    import nibabel as nib

    import monai_unc.metrics.qu_brats_score as score
    from monai_unc.io import match_cases
    from tests.evaluation.test_evaluate_regions import write_region_cohort

    dirs = write_region_cohort(tmp_path / "c", n_cases=1)
    path = dirs["pred"] / "case0_predictive_entropy.nii.gz"
    img = nib.load(str(path))
    nib.save(nib.Nifti1Image(np.asarray(img.get_fdata(), np.float32) * 1e-3, img.affine), str(path))  # ungraded
    seen, core = [], score.score_region

    def watched(*args, **kwargs):
        seen.append(list(warnings.filters))
        return core(*args, **kwargs)

    monkeypatch.setattr(score, "score_region", watched)
    outside = list(warnings.filters)
    res = evaluate_case(match_cases(dirs["labels"], dirs["pred"], images=dirs["images"])[0],
                        EvaluationConfig(regions="brats", spatial=False))
    assert seen and not [f for s in seen for f in s if f[0] == "ignore" and f not in outside]
    assert not [w for w in res.warnings if "smallest positive threshold" in w]


def _text_filters(filters: list, outside: list) -> list:
    """The filters on a warning's text among ``filters`` that the caller did not install (the command's own
    configuration of the warnings of other packages filters by category and module, not by text)."""
    return [f for f in filters if f[1] is not None and f not in outside]


def _fit_not_converged() -> TemperatureScaler:
    torch.manual_seed(0)
    z, y = 40.0 * torch.randn(2, 2, 8, 8), torch.randint(0, 2, (2, 8, 8))
    return TemperatureScaler(loss="ece", max_steps=3).fit(z, y)  # RMSprop alone: 3 steps do not converge


def test_nnunet_calibrate_fits_under_the_callers_filters(tmp_path, monkeypatch, capsys):
    """``monai-unc nnunet-calibrate`` prints its own line for a fold that did not converge; the fold's fits ran under
    an extra ``ignore`` filter (every other thread's too). Now they run under the caller's filters, and the fit's own
    warning is still left out."""
    pytest.importorskip("nnunetv2")
    import monai_unc.nnunet.calibrate as calibrate_module
    from monai_unc import cli

    seen = []

    def fake(model, out, **kwargs):
        seen.append(list(warnings.filters))
        scaler = _fit_not_converged()
        return {"0": {"temperature": scaler.temperature.tolist(), "steps": 3, "converged": scaler.converged}}

    monkeypatch.setattr(calibrate_module, "calibrate_model_folder", fake)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outside = list(warnings.filters)
        assert cli.main(["nnunet-calibrate", "-m", str(tmp_path), "-o", str(tmp_path / "out"), "-f", "0",
                         "-device", "cpu"]) == 0
    assert len(seen) == 1 and not _text_filters(seen[0], outside)
    assert not [w for w in caught if "did not converge" in str(w.message)]
    printed = capsys.readouterr().out.splitlines()
    assert [ln for ln in printed if ln.startswith("warning: the temperature fit of fold 0 did not converge")]


def test_calibrate_fits_under_the_callers_filters(tmp_path, monkeypatch, capsys):
    """``monai-unc calibrate`` as ``nnunet-calibrate``: no extra filter around the fit, the fit's warning left out."""
    import nibabel as nib
    from monai.networks.nets import UNet

    import monai_unc.workflows.calibrate as workflow
    from monai_unc import cli

    spec = {"_target_": "monai.networks.nets.UNet", "spatial_dims": 3, "in_channels": 1, "out_channels": 2,
            "channels": [2, 4], "strides": [2], "num_res_units": 0}
    images, labels = tmp_path / "images", tmp_path / "labels"
    images.mkdir()
    labels.mkdir()
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in spec.items() if k != "_target_"}).state_dict(), tmp_path / "net.pt")
    (tmp_path / "net.json").write_text(json.dumps(spec))
    rng = np.random.default_rng(0)
    nib.save(nib.Nifti1Image(rng.standard_normal((8, 8, 8)).astype(np.float32), np.eye(4)), str(images / "a.nii.gz"))
    nib.save(nib.Nifti1Image((rng.random((8, 8, 8)) > 0.5).astype(np.uint8), np.eye(4)), str(labels / "a.nii.gz"))
    seen, fit = [], workflow.calibrate_network

    def watched(*args, **kwargs):
        seen.append(list(warnings.filters))
        return fit(*args, **kwargs)

    monkeypatch.setattr(workflow, "calibrate_network", watched)
    out = tmp_path / "cal.pt"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outside = list(warnings.filters)
        assert cli.main(["calibrate", "-i", str(images), "-l", str(labels), "-o", str(out), "--network",
                         str(tmp_path / "net.json"), "--checkpoint", str(tmp_path / "net.pt"), "--intensity", "none",
                         "--max-steps", "3", "--loss", "ece"]) == 0
    assert len(seen) == 1 and not _text_filters(seen[0], outside)
    assert json.loads(out.with_suffix(".json").read_text())["converged"] is False
    assert not [w for w in caught if "did not converge" in str(w.message)]
    assert [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("warning: the temperature fit did")]


def test_convergence_said_by_caller_is_the_blocks_own():
    """Another thread's fit, run while one thread is in the block, still warns (a ``catch_warnings`` filter hid it);
    the block's own fit does not, and the flag is reset after the block."""
    from monai_unc.temperature import convergence_said_by_caller  # new in review 68

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with convergence_said_by_caller():
            assert not _fit_not_converged().converged
            thread = threading.Thread(target=_fit_not_converged, name="other fit")
            thread.start()
            thread.join()
        after = _fit_not_converged()
    assert not after.converged
    assert [str(w.message)[:36] for w in caught] == ["the temperature fit did not converge"] * 2


def test_nifti_geometry_leaves_the_correction_to_the_read_without_a_filter(tmp_path):
    """``nifti_geometry`` (the header check before any work) leaves the header correction's warning to the read of the
    file, as before, but without silencing every ``UserWarning`` inside ``catch_warnings`` (which re-showed the
    caller's once-per-location warnings)."""
    import nibabel as nib

    from monai_unc.io import read_volume
    from monai_unc.io.cases import nifti_geometry

    img = nib.Nifti1Image(np.zeros((4, 5, 6), np.float32), np.diag([2.0, 2, 3, 1]))
    img.header["pixdim"][1:4] = [1, 1, 1]  # disagrees with the qform: corrected, with a warning, when read
    nib.save(img, str(tmp_path / "a.nii"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(2):
            _probe()
            shape, affine = nifti_geometry(tmp_path / "a.nii")
    assert [str(w.message) for w in caught] == ["review 68 probe (follow-up)"]
    assert shape == (4, 5, 6) and np.diag(affine).tolist() == [2.0, 2.0, 3.0, 1.0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        read_volume(tmp_path / "a.nii")
    assert [w for w in caught if "its pixdim 1x1x1 disagrees" in str(w.message)]
