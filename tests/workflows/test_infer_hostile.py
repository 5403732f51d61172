"""``monai_unc.workflows.infer`` settings with a NaN option: ``infer.json`` stays strict JSON, and a resumed run
reads the same settings back."""

from __future__ import annotations

import json
import math


def test_infer_settings_never_write_bare_nan(tmp_path):
    from monai_unc.workflows.infer import InferSettings, check_run_settings

    s = InferSettings(model="m", method="tta", samples=2, roi=None, overlap=0.25, intensity="none",
                      measures=["predictive_entropy"], seed=0, activation="softmax", checkpoints=[],
                      tta_noise=math.nan)
    check_run_settings(tmp_path, s)
    text = (tmp_path / "infer.json").read_text()
    assert "NaN" not in text and json.loads(text)["settings"]["tta_noise"] is None
    check_run_settings(tmp_path, s)  # resuming compares the settings as they read back
