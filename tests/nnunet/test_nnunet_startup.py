"""``nnunet-predict`` runs without MONAI: the predictor and its export worker processes import torch and nnU-Net, as
stock ``nnUNetv2_predict`` does, and nothing of MONAI (about 3 s of imports per process, which on small cases was
most of the end-to-end difference to stock). Rate-In and temperature scaling load MONAI when they are used.

The run goes through ``python -X importtime``; the flag is passed on to the spawned export worker, so stderr lists
the modules of every process of the run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("nnunetv2")

from tests._paths import ROOT  # noqa: E402
from tests.nnunet.test_nnunet import write_inputs  # noqa: E402
from tests.nnunet.test_nnunet_conformal import write_model_folder  # noqa: E402

MAIN = "import sys; from monai_unc.cli import main; sys.exit(main())"


def _imported(stderr: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", stderr, re.MULTILINE)}


@pytest.mark.slow
def test_nnunet_predict_and_its_export_worker_import_no_monai(tmp_path):
    model = write_model_folder(tmp_path / "model")
    cases = write_inputs(tmp_path / "images", shapes=((18, 17, 16),))
    out = tmp_path / "pred"
    argv = ["nnunet-predict", "-i", str(tmp_path / "images"), "-o", str(out), "-m", str(model), "-f", "0",
            "-device", "cpu", "--sources", "mirroring", "-npp", "0", "-nps", "1", "--disable_progress_bar"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", MAIN, *argv], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = _imported(proc.stderr)
    # the lists are read: the predictor and the export function were imported, the latter in the worker process
    assert {"monai_unc.nnunet.predictor", "nnunetv2.inference.predict_from_raw_data"} <= modules
    loads = re.findall(r"^import time:.*\|\s*monai_unc\.nnunet\.export$", proc.stderr, re.MULTILINE)
    assert len(loads) == 2, "the export worker's imports are not listed"
    monai = sorted(m for m in modules if m.split(".")[0] == "monai")
    assert not monai, f"nnunet-predict imported MONAI: {monai[:10]}"
    assert (out / f"{cases[0]}.nii.gz").is_file()
    assert (out / "uncertainty" / f"{cases[0]}_mutual_information.nii.gz").is_file()


def test_rate_in_and_temperature_scaling_still_load_from_the_predictor_module():
    """What moved out of the module's imports is still reachable (loaded on use)."""
    from monai_unc.nnunet import predictor
    from monai_unc.nnunet.calibrate import calibrate_model_folder

    assert predictor.calibrate_model_folder is calibrate_model_folder
    with pytest.raises(AttributeError, match="no_such_name"):
        predictor.no_such_name  # noqa: B018
