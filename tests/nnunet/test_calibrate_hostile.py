"""Hostile review of ``calibrate_model_folder`` (``monai-unc nnunet-calibrate``): every argument is checked before the
calibrated copy is begun, a checkpoint name cannot lead out of it, and cascade stages are refused by name.

The model folder is written by hand (:func:`tests.nnunet.test_predictor_hostile.write_model_folder`), the preprocessed
cases in nnU-Net's numpy layout (``<case>.npz`` with ``data`` and ``seg``, ``<case>.pkl``, ``splits_final.json``).
"""

from __future__ import annotations

import json
import pickle
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("nnunetv2")

from monai_unc.nnunet.calibrate import calibrate_model_folder  # noqa: E402
from monai_unc.temperature import TemperatureScaler  # noqa: E402
from tests.nnunet.test_nnunet import make_plans  # noqa: E402
from tests.nnunet.test_predictor_hostile import write_model_folder  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def write_preprocessed(base: Path, cases=("a", "b"), folds: int = 1, splits: list | None = None) -> Path:
    """``nnUNet_preprocessed/Dataset999_Unit``: 16^3 cases of make_plans' data identifier and the splits (default:
    every fold validated on ``cases``, trained on a case ``t`` that is not written)."""
    folder = base / "Dataset999_Unit" / "unit"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for c in sorted({*cases, *(k for split in splits or () for k in split["val"])}):
        seg = np.zeros((1, 16, 16, 16), np.int8)
        seg[0, 4:12, 4:12, 4:12] = 1
        seg[0, 6:10, 6:10, 6:10] = 2
        data = (seg.astype(np.float32) + rng.normal(scale=0.3, size=seg.shape)).astype(np.float32)
        np.savez(folder / f"{c}.npz", data=data, seg=seg)
        with open(folder / f"{c}.pkl", "wb") as f:
            pickle.dump({"spacing": [1.0, 1.0, 1.0]}, f)
    splits = splits or [{"train": ["t"], "val": list(cases)} for _ in range(folds)]
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
    with pytest.raises(ValueError, match=r"checkpoint_name \(-chk\) must be a file name"):
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
        # a fit that TemperatureScaler.fit warns about, as fold 0's; the command says it in its own line only (review
        # 62), and the fit leaves its warning out (review 68: the command filtered it by its text, a process-wide
        # filter; a warning of that text given by other code now reaches the user)
        torch.manual_seed(0)
        TemperatureScaler(loss="ece", max_steps=3).fit(40.0 * torch.randn(2, 2, 8, 8), torch.randint(0, 2, (2, 8, 8)))
        return {"0": {"temperature": [1.5], "steps": 40, "converged": False},
                "1": {"temperature": [1.2], "steps": 12, "converged": True}}

    monkeypatch.setattr(calibrate_module, "calibrate_model_folder", fake)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(["nnunet-calibrate", "-m", str(tmp_path), "-o", str(tmp_path / "out"), "-f", "0", "1",
                         "-device", "cpu", "--max_steps", "40"]) == 0
    printed = capsys.readouterr()
    warned = [line for line in printed.out.splitlines() if line.startswith("warning:")]
    assert "not the ECE minimum" not in printed.err + printed.out + "".join(str(w.message) for w in caught)
    assert seen["max_steps"] == 40
    assert len(warned) == 1 and "fold 0 did not converge in 40 steps" in warned[0] and "--max_steps" in warned[0]
    assert seen["overwrite"] is False  # --overwrite replaces an earlier calibrated copy (found by hostile testing)
    assert cli.main(["nnunet-calibrate", "-m", str(tmp_path), "-o", str(tmp_path / "out"), "-f", "0", "-device",
                     "cpu", "--overwrite"]) == 0
    assert seen["overwrite"] is True
    assert seen["command_line"] is True  # its refusals name --overwrite, not overwrite=True (review 63)



# ------------------------------------------------------------------------------------------ found by hostile testing
def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def two_folds(tmp_path):
    """A model with folds 0 and 1, validated on cases a and b, trained on the other one."""
    splits = [{"train": ["b"], "val": ["a"]}, {"train": ["a"], "val": ["b"]}]
    return {"model": write_model_folder(tmp_path / "model", folds=(0, 1)),
            "pre": write_preprocessed(tmp_path / "pre", splits=splits), "out": tmp_path / "calibrated"}


def test_rerun_with_other_settings_is_refused_and_overwrite_replaces_the_copy_whole(two_folds):
    """Found by hostile testing: a rerun into the same folder (fold 0 only, mode vector) was accepted and left the
    first run's fold_1 checkpoint (its t recorded nowhere) beside a temperature.json saying vector / fold 0; predicting
    -f 0 1 mixed both runs. Now the rerun is refused, and with overwrite the copy holds the new run only."""
    first = _calibrate(two_folds, use_folds=(0, 1), max_steps=20)
    before = _files(two_folds["out"])
    with pytest.raises(ValueError, match="calibrated copy of an earlier run: pass overwrite=True to replace") as err:
        _calibrate(two_folds, use_folds=(0,), mode="vector", max_steps=20)
    assert "--overwrite" not in str(err.value)  # a Python caller (review 63: it was told of both)
    assert _files(two_folds["out"]) == before
    second = _calibrate(two_folds, use_folds=(0,), mode="vector", max_steps=20, overwrite=True)
    out = two_folds["out"]
    assert sorted(p.name for p in out.iterdir()) == ["dataset.json", "fold_0", "plans.json", "temperature.json"]
    doc = json.loads((out / "temperature.json").read_text())
    assert doc["written_by"] == "monai-unc nnunet-calibrate" and doc["mode"] == "vector"
    assert doc["checkpoint_name"] == "checkpoint_final.pth" and doc["fold_ids"] == ["0"] and list(doc["folds"]) == ["0"]
    ckpt = torch.load(out / "fold_0" / "checkpoint_final.pth", weights_only=False)
    assert ckpt["monai_unc_temperature"] == second["0"]["temperature"] != first["0"]["temperature"]
    assert len(second["0"]["temperature"]) == 3
    assert [p.name for p in out.parent.iterdir() if ".partial" in p.name] == []  # no staging folder left
    with pytest.raises(TypeError, match="overwrite"):
        _calibrate(two_folds, overwrite="yes")


def test_failed_rerun_leaves_the_copy_as_it_was(two_folds):
    """Found by hostile testing: a rerun that failed at fold 1 (its validation case missing) had already replaced
    fold 0's checkpoint, while temperature.json still held the first run's t. The copy is built in a staging folder
    and moved into place only when complete: a failed run changes nothing and leaves no staging folder."""
    _calibrate(two_folds, use_folds=(0, 1), max_steps=20)
    before = _files(two_folds["out"])
    splits_file = two_folds["pre"] / "Dataset999_Unit" / "splits_final.json"
    splits_file.write_text(json.dumps([{"train": ["b"], "val": ["a"]}, {"train": ["a"], "val": ["zzz"]}]))
    with pytest.raises(ValueError, match="split 1 names validation case.*'zzz'"):
        _calibrate(two_folds, use_folds=(0, 1), mode="vector", max_steps=20, overwrite=True)
    assert _files(two_folds["out"]) == before
    assert [p.name for p in two_folds["out"].parent.iterdir() if ".partial" in p.name] == []


def test_predictor_records_the_temperature_each_checkpoint_carries(two_folds):
    """Found by hostile testing: the predictor recorded the temperatures of temperature.json, which a rerun could
    leave out of step with the checkpoints (and which lists folds not predicted). It records each used fold's t from
    the checkpoint, whose weights are divided by it; stock nnU-Net still loads the copy; a calibrated copy is not
    calibrated again (its t would be recorded as the whole division)."""
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    import monai_unc.nnunet as mun

    report = _calibrate(two_folds, use_folds=(0, 1), max_steps=20)
    out = two_folds["out"]
    doc = json.loads((out / "temperature.json").read_text())
    doc["folds"]["1"]["temperature"] = [9.0]  # an edited record: not what the weights are divided by
    (out / "temperature.json").write_text(json.dumps(doc))
    pred = mun.UncertaintyPredictor(device=torch.device("cpu"), allow_tqdm=False)
    pred.initialize_from_trained_model_folder(str(out), (1,), "checkpoint_final.pth")
    assert pred.run_config()["temperature"] == {"1": report["1"]["temperature"]}
    plain = mun.UncertaintyPredictor(device=torch.device("cpu"), allow_tqdm=False)
    plain.initialize_from_trained_model_folder(str(two_folds["model"]), (0, 1), "checkpoint_final.pth")
    assert plain.run_config()["temperature"] is None
    stock = nnUNetPredictor(device=torch.device("cpu"), allow_tqdm=False)
    stock.initialize_from_trained_model_folder(str(out), (0, 1), "checkpoint_final.pth")
    assert len(stock.list_of_parameters) == 2
    with pytest.raises(ValueError, match="calibrated already"):
        calibrate_model_folder(out, out.parent / "twice", use_folds=(0,), use_mirroring=False,
                               preprocessed_dir=two_folds["pre"])
    assert not (out.parent / "twice").exists()


def test_output_is_never_the_preprocessed_dataset_nor_contains_an_input(setup, tmp_path):
    """Found by hostile testing: -o = the preprocessed dataset folder it reads was accepted (its dataset.json replaced
    by the model's, plans.json, fold_0 and temperature.json among the cases). It is an input now; so is a folder
    that contains the model or the preprocessed folder (the copy replaces its folder whole)."""
    pre_ds = setup["pre"] / "Dataset999_Unit"
    (pre_ds / "dataset.json").write_text("{}")
    for out in (pre_ds, pre_ds / "unit" / "copy", setup["pre"], tmp_path):
        before = _files(setup["pre"])
        with pytest.raises(ValueError, match="input folder"):
            calibrate_model_folder(setup["model"], out, use_mirroring=False, preprocessed_dir=setup["pre"])
        assert _files(setup["pre"]) == before


def test_another_trained_model_or_other_files_are_never_replaced(setup, tmp_path):
    """Found by hostile testing: -o = another trained model folder was accepted and its fold_0 checkpoint silently
    replaced. A non-empty folder that temperature.json does not mark as a calibrated copy is refused, naming what it
    holds, even with overwrite."""
    other = write_model_folder(tmp_path / "other_model", folds=(0,))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "n.txt").write_text("mine")
    (other / "temperature.json").write_text('{"folds": {}}')  # not written by nnunet-calibrate
    for out, match in ((other, r"holds a trained model \(dataset.json, fold_0, plans.json\)|"
                                r"holds a trained model \(fold_0, plans.json"),
                       (tmp_path / "notes", r"holds other files \(n.txt\)")):
        before = _files(out)
        for overwrite in (False, True):
            with pytest.raises(ValueError, match=match):
                calibrate_model_folder(setup["model"], out, use_mirroring=False, preprocessed_dir=setup["pre"],
                                       overwrite=overwrite)
            assert _files(out) == before


@pytest.mark.parametrize("splits, match", [
    ([{"train": ["a", "c"], "val": ["a", "b"]}], r"lists 'a' under both 'train' and 'val'"),
    ([{"train": ["c"], "val": ["a", "b", "a"]}], r"validation case\(s\) 'a' more than once"),
    ([{"val": ["a"]}], "must have 'train'"),
])
def test_validation_case_in_train_or_repeated_is_refused(splits, match, setup):
    """Found by hostile testing: an edited splits_final.json with a validation case among the fold's training cases
    (t fitted on a case the fold was trained on) or listed twice (counted twice) was used as it was."""
    (setup["pre"] / "Dataset999_Unit" / "splits_final.json").write_text(json.dumps(splits))
    with pytest.raises(ValueError, match=match):
        _calibrate(setup)
    assert not setup["out"].exists()


def _truncate(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


@pytest.mark.parametrize("damage, named", [
    (lambda m, p: _truncate(p / "Dataset999_Unit" / "splits_final.json", 20), "splits_final.json is not readable"),
    (lambda m, p: _truncate(m / "plans.json", 20), "plans.json: not valid JSON"),
    (lambda m, p: _truncate(m / "fold_0" / "checkpoint_final.pth", 300), "checkpoint_final.pth: not a readable"),
    (lambda m, p: _truncate(p / "Dataset999_Unit" / "unit" / "b.npz", 200),
     r"preprocessed case 'b' .* cannot be read \(b.npz, b.pkl: BadZipFile"),
], ids=["splits", "plans", "checkpoint", "case"])
def test_damaged_inputs_are_one_line_naming_the_file(damage, named, setup, capsys, monkeypatch):
    """Found by hostile testing: a damaged splits_final.json or plans.json printed the JSON error without the file,
    a damaged preprocessed case (BadZipFile) or checkpoint (PytorchStreamReader) a traceback with exit 1, and after
    a case failed to load -o held a half-made copy (plans.json, dataset.json). Now one line naming the file, exit 2,
    and no -o."""
    from monai_unc import cli

    damage(setup["model"], setup["pre"])
    monkeypatch.setenv("nnUNet_preprocessed", str(setup["pre"]))
    code = cli.main(["nnunet-calibrate", "-m", str(setup["model"]), "-o", str(setup["out"]), "-f", "0",
                     "-device", "cpu", "--disable_tta", "--max_steps", "5"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("monai-unc nnunet-calibrate: error: ") and re.search(named, err[0]), err[0]
    assert not setup["out"].exists()
    assert [p.name for p in setup["out"].parent.iterdir() if ".partial" in p.name] == []
