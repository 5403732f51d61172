"""Deeply nested JSON in files a user may edit or be given (found by hostile testing): an ``infer`` output folder's
``infer.json``, an nnU-Net model folder's ``plans.json``, an evaluation's ``state/rows.json``. Each raised
``RecursionError`` (a traceback, exit 1); each is now read as the broken file it is: one line, or the record ignored.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from tests._cases import TOY_NET

NESTED = "[" * 200_000 + "]" * 200_000


def test_infer_resume_with_a_nested_run_record_is_one_line(tmp_path, capsys):
    from monai.networks.nets import UNet

    paths = write_toy_cohort(tmp_path / "data", n_cases=1, shape=(16, 16, 16))
    ckpt = tmp_path / "net.pt"
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), ckpt)
    out = tmp_path / "out"
    argv = ["infer", "-i", str(paths["images"]), "-o", str(out), "--network", json.dumps(TOY_NET), "--checkpoint",
            str(ckpt), "--samples", "2", "--device", "cpu", "-q"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    (out / "infer.json").write_text(NESTED)
    code = cli.main(argv)
    err = capsys.readouterr().err.strip()
    # an unreadable record is one of other settings: refused in one line (--overwrite replaces it)
    assert code == 2 and len(err.splitlines()) == 1 and "holds a run with different settings" in err, err
    assert cli.main([*argv, "--overwrite"]) == 0, capsys.readouterr().err


def test_a_nested_model_json_is_one_line_naming_it(tmp_path):
    pytest.importorskip("nnunetv2")
    from monai_unc.nnunet.predictor import read_model_json

    path = tmp_path / "plans.json"
    path.write_text(NESTED)
    with pytest.raises(ValueError, match=r"plans.json: not valid JSON \(maximum recursion depth"):
        read_model_json(path)


def test_a_nested_evaluation_state_is_one_line_naming_it(tmp_path: Path):
    from monai_unc.evaluation.cohort import CohortState

    (tmp_path / "rows.json").write_text(NESTED)
    with pytest.raises(ValueError, match=r"rows.json: not valid JSON \(RecursionError"):
        CohortState.load(tmp_path)
    (tmp_path / "rows.json").write_text("{")
    with pytest.raises(ValueError, match=r"Expecting property name"):  # report: "cannot read the evaluation"
        CohortState.load(tmp_path)
