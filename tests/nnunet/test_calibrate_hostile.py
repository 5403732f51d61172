"""Hostile review of ``calibrate_model_folder`` (``monai-unc nnunet-calibrate``): every argument is checked before the
calibrated copy is begun, a checkpoint name cannot lead out of it, and cascade stages are refused by name.

The model folder is written by hand (:func:`tests.nnunet.test_predictor_hostile.write_model_folder`), the preprocessed
cases in nnU-Net's numpy layout (``<case>.npz`` with ``data`` and ``seg``, ``<case>.pkl``, ``splits_final.json``).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("nnunetv2")

from monai_unc.nnunet.calibrate import calibrate_model_folder  # noqa: E402
from tests.nnunet.test_nnunet import make_plans  # noqa: E402
from tests.nnunet.test_predictor_hostile import write_model_folder  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def write_preprocessed(base: Path, cases=("a", "b"), folds: int = 1) -> Path:
    """``nnUNet_preprocessed/Dataset999_Unit``: 16^3 cases of make_plans' data identifier and the splits."""
    folder = base / "Dataset999_Unit" / "unit"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for c in cases:
        seg = np.zeros((1, 16, 16, 16), np.int8)
        seg[0, 4:12, 4:12, 4:12] = 1
        seg[0, 6:10, 6:10, 6:10] = 2
        data = (seg.astype(np.float32) + rng.normal(scale=0.3, size=seg.shape)).astype(np.float32)
        np.savez(folder / f"{c}.npz", data=data, seg=seg)
        with open(folder / f"{c}.pkl", "wb") as f:
            pickle.dump({"spacing": [1.0, 1.0, 1.0]}, f)
    splits = [{"train": list(cases), "val": list(cases)} for _ in range(folds)]
    (base / "Dataset999_Unit" / "splits_final.json").write_text(json.dumps(splits))
    return base


@pytest.fixture
def setup(tmp_path):
    return {"model": write_model_folder(tmp_path / "model", folds=(0,)), "pre": write_preprocessed(tmp_path / "pre"),
            "out": tmp_path / "calibrated"}


def _calibrate(setup, **kw):
    kw = {"use_folds": (0,), "use_mirroring": False, "preprocessed_dir": setup["pre"], **kw}
    return calibrate_model_folder(setup["model"], setup["out"], **kw)


@pytest.mark.parametrize("kw, match", [
    ({"use_folds": ()}, "at least one fold"),  # was an UnboundLocalError after the copy was begun
    ({"use_folds": (-1,)}, "fold numbers"),  # was the last split's validation cases and a missing fold_-1
    ({"use_folds": (0, 0)}, "more than once"),
    ({"use_folds": ("all",)}, "fold 'all'"),
    ({"use_folds": (3,)}, r"folds \[3\] are not in"),
    ({"mode": "matrix"}, "mode"),  # was refused after the first fold's validation cases were predicted
    ({"loss": "brier"}, "loss"),
    ({"checkpoint_name": "../../checkpoint_final.pth"}, "checkpoint_name"),
    ({"checkpoint_name": "sub/checkpoint_final.pth"}, "checkpoint_name"),
    ({"checkpoint_name": ".."}, "checkpoint_name"),
])
def test_bad_arguments_are_refused_before_the_copy_is_begun(kw, match, setup):
    """The copy (plans, dataset, fingerprint) was written before the folds, the checkpoint name and the scaler's
    arguments were looked at: a refused call left a calibrated-looking folder without checkpoints."""
    with pytest.raises(ValueError, match=match):
        _calibrate(setup, **kw)
    assert not setup["out"].exists()


def test_checkpoint_name_cannot_write_outside_the_copy(setup, tmp_path):
    """``output_dir/fold_0/<checkpoint_name>``: with ``../../x.pth`` the calibrated checkpoint went next to the copy,
    and with a copy beside the model folder it replaced the very checkpoint it was computed from."""
    ckpt = setup["model"] / "fold_0" / "checkpoint_final.pth"
    sibling = tmp_path / "x.pth"
    sibling.write_bytes(ckpt.read_bytes())
    before = sibling.read_bytes()
    with pytest.raises(ValueError, match="checkpoint_name must be a file name"):
        _calibrate(setup, checkpoint_name="../../x.pth")
    assert sibling.read_bytes() == before


def test_cascade_stage_is_refused_by_name(tmp_path):
    """A cascade stage's network reads the previous stage's one-hot segmentation, which the preprocessed cases lack:
    the first convolution failed with a channel-count RuntimeError, after the copy was begun."""
    plans = make_plans()
    plans["configurations"]["cfg"]["previous_stage"] = "lowres"
    setup = {"model": write_model_folder(tmp_path / "model", folds=(0,), plans=plans, in_channels=3),
             "pre": write_preprocessed(tmp_path / "pre"), "out": tmp_path / "calibrated"}
    with pytest.raises(ValueError, match="cascade stage.*'lowres'"):
        _calibrate(setup)
    assert not setup["out"].exists()


def test_valid_call_still_writes_the_copy(setup):
    """The checks moved, the copy is the same: plans and dataset copied, the folded checkpoint, temperature.json."""
    report = _calibrate(setup, max_steps=20)
    out = setup["out"]
    assert sorted(p.name for p in out.iterdir()) == ["dataset.json", "fold_0", "plans.json", "temperature.json"]
    ckpt = torch.load(out / "fold_0" / "checkpoint_final.pth", weights_only=False)
    assert ckpt["monai_unc_temperature"] == report["0"]["temperature"]
    assert report["0"]["num_cases"] == 2


@pytest.mark.parametrize("splits, match", [
    ({"0": {"val": ["a"]}}, "must hold a list of splits"),  # was KeyError 0
    ([{"train": ["a"]}], "split 0 must have 'val'"),  # was KeyError 'val'
    ([{"val": []}], "split 0 must have 'val'"),  # was the scaler's "no logits to fit on", after the copy began
    ([{"val": "a"}], "split 0 must have 'val'"),  # was an AttributeError in nnU-Net's dataset class
    (["a"], "split 0 must have 'val'"),
])
def test_malformed_splits_file_is_named_before_the_copy(splits, match, setup):
    """``splits_final.json`` is edited for custom splits: a malformed one is a ValueError naming the file and split."""
    (setup["pre"] / "Dataset999_Unit" / "splits_final.json").write_text(json.dumps(splits))
    with pytest.raises(ValueError, match=match):
        _calibrate(setup)
    assert not setup["out"].exists()


def test_cli_warns_of_a_fold_whose_fit_did_not_converge(tmp_path, monkeypatch, capsys):
    """Regression: nnunet-calibrate recorded ``converged`` in its report but printed no warning when a fold's fit
    stopped at the step limit (monai-unc calibrate does); now the same line, naming the fold and ``--max_steps``."""
    import monai_unc.nnunet.calibrate as calibrate_module
    from monai_unc import cli

    seen = {}

    def fake(model, out, **kwargs):
        seen.update(kwargs)
        return {"0": {"temperature": [1.5], "steps": 40, "converged": False},
                "1": {"temperature": [1.2], "steps": 12, "converged": True}}

    monkeypatch.setattr(calibrate_module, "calibrate_model_folder", fake)
    assert cli.main(["nnunet-calibrate", "-m", str(tmp_path), "-o", str(tmp_path / "out"), "-f", "0", "1",
                     "-device", "cpu", "--max_steps", "40"]) == 0
    warned = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert seen["max_steps"] == 40
    assert len(warned) == 1 and "fold 0 did not converge in 40 steps" in warned[0] and "--max_steps" in warned[0]
