"""The package layout of ``monai_unc.metrics.calibration``: every former public name is still exported."""

import monai_unc.metrics.calibration as calibration
from tests._paths import ROOT

OLD_CALIBRATION_NAMES = [
    "DEFAULT_FINE_BINS", "NLL_EPS", "ConfidenceHistogram", "ReliabilityCurve", "ece", "classwise_ece", "all_label_ece",
    "ace", "mce", "uce", "nll", "brier", "reliability_curve", "calibration_metrics", "CalibrationMetric",
    "CALIBRATION_METRICS", "top_label",
]  # fmt: skip


def test_calibration_package_exports_every_public_name():
    assert set(OLD_CALIBRATION_NAMES) <= set(calibration.__all__)
    for name in calibration.__all__:
        assert getattr(calibration, name) is not None
    assert {m.split(".")[-1] for m in ("histogram", "functional", "metric")} <= {
        p.stem for p in (ROOT / "monai_unc" / "metrics" / "calibration").glob("*.py")
    }
