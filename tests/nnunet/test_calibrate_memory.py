"""Memory of ``monai-unc nnunet-calibrate`` (:func:`monai_unc.nnunet.calibrate.calibrate_model_folder`): a fold's
validation logits wait on disk beside the output (:func:`monai_unc.io.scratch_folder`,
:class:`monai_unc.io.MappedArrays`) and are read one case at a time, so memory does not grow with the number of
validation cases; the temperatures and the calibrated checkpoints are those of the cases in memory, byte for byte."""

from __future__ import annotations

import json
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("nnunetv2")

from monai_unc.io import scratch_folder, smallest_int_dtype  # noqa: E402
from monai_unc.nnunet import calibrate as module  # noqa: E402
from monai_unc.temperature import TemperatureScaler  # noqa: E402
from tests.nnunet.test_calibrate_hostile import write_preprocessed  # noqa: E402
from tests.nnunet.test_predictor_hostile import write_model_folder  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N_CASES = 6
CASES = [f"c{i}" for i in range(N_CASES)]
REGIONS_JSON = {"channel_names": {"0": "MRI"}, "labels": {"background": 0, "whole": [1, 2], "core": [2]},
                "regions_class_order": [1, 2], "numTraining": 2, "file_ending": ".nii.gz"}


def _preprocessed(base: Path, cases=CASES) -> Path:
    """``write_preprocessed`` with its first two slices outside nnU-Net's non-zero mask (-1): background to the fit."""
    pre = write_preprocessed(base, splits=[{"train": ["t"], "val": list(cases)}])
    for c in cases:
        f = base / "Dataset999_Unit" / "unit" / f"{c}.npz"
        arrays = dict(np.load(f))
        arrays["seg"][0, :2] = -1
        np.savez(f, **arrays)
    return pre


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("nncalmem")
    return {"model": write_model_folder(root / "model", folds=(0,)),
            "regions": write_model_folder(root / "rmodel", folds=(0,), dataset_json=REGIONS_JSON),
            "pre": _preprocessed(root / "pre")}


class _Handed(Sequence):
    """A sequence of tensors that counts how many of those it handed out are alive (held, or a view of them is)."""

    def __init__(self, inner, peaks):
        self.inner, self.refs, self.peaks = inner, [], peaks

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        t = self.inner[i]
        self.refs.append(weakref.ref(t))
        self.peaks.append(len({id(r()) for r in self.refs if r() is not None}))  # distinct tensors alive
        return t


def test_a_fold_holds_one_case_of_logits_at_a_time(cohort, tmp_path, monkeypatch):
    """Issue: a fold's validation logits (float16) and int64 references were kept in two lists through the fit and
    both NLL passes, ``2 C + 8`` bytes per voxel of every case (a 105-class 512 x 512 x 400 CT: 21 GiB of logits
    each). Counted here: the cases' logits alive at each read by the fit and the NLL passes (before: all 6). The
    scratch folder lies beside the output during the fit, never in the staging folder that becomes the copy."""
    peaks: list[int] = []
    seen: list[tuple[list[str], list[str]]] = []
    out = tmp_path / "calibrated"

    class Counting(TemperatureScaler):
        def _look(self):
            scratch = sorted(p.name for p in tmp_path.iterdir() if ".partial-logits-" in p.name)
            staged = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.npy"))
            seen.append((scratch, staged))

        def fit(self, logits, target):
            self._look()
            return super().fit(_Handed(logits, peaks), target)

        def loss_and_grad(self, logits, target):
            return super().loss_and_grad(_Handed(logits, peaks), target)

    monkeypatch.setattr(module, "TemperatureScaler", Counting)
    report = module.calibrate_model_folder(cohort["model"], out, use_folds=(0,), preprocessed_dir=cohort["pre"],
                                           use_mirroring=False, max_steps=5)
    assert report["0"]["num_cases"] == N_CASES and report["0"]["steps"] == 5
    assert len(peaks) >= 7 * N_CASES and max(peaks) <= 2, max(peaks)  # the case read and the one before; before: 6
    ((scratch, staged),) = seen
    assert len(scratch) == 1 and scratch[0].startswith(".calibrated.partial-logits-") and scratch[0].endswith(".dir")
    assert len(staged) == 2 * N_CASES and all(s.startswith(scratch[0] + "/") for s in staged)  # logits and labels
    # the scratch folder is gone and not part of the copy
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibrated"]
    assert sorted(p.name for p in out.iterdir()) == ["dataset.json", "fold_0", "plans.json", "temperature.json"]
    assert [p.name for p in (out / "fold_0").iterdir()] == ["checkpoint_final.pth"]


class _InMemory(list):
    """What ``_calibrate_folds`` kept before: the arrays in a list, references as int64."""

    def __init__(self, folder):
        super().__init__()

    def append(self, array, dtype=None):
        super().append(array.long() if not array.is_floating_point() else array)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("model, kw", [("model", {}), ("model", {"mode": "vector", "loss": "ece"}),
                                       ("regions", {"mode": "vector"})])
def test_the_copy_is_the_one_fitted_in_memory(cohort, tmp_path, monkeypatch, model, kw):
    """Float16 logits mapped from disk and int8 references fit the temperatures of the lists in memory, and write
    the same checkpoints and temperature.json, byte for byte (softmax and region-based)."""
    kw = {"use_folds": (0,), "preprocessed_dir": cohort["pre"], "use_mirroring": False, "max_steps": 40, **kw}
    stored: list[torch.dtype] = []
    real = module.MappedArrays

    def recording(folder):
        arrays = real(folder)
        append = arrays.append

        def add(array, dtype=None):
            append(array, dtype=dtype)
            stored.append(arrays[-1].dtype)

        arrays.append = add
        return arrays

    monkeypatch.setattr(module, "MappedArrays", recording)
    disk = module.calibrate_model_folder(cohort[model], tmp_path / "disk", **kw)
    assert stored == [torch.float16, torch.int8] * N_CASES  # 2 C + 1 bytes per voxel
    monkeypatch.setattr(module, "MappedArrays", _InMemory)
    memory = module.calibrate_model_folder(cohort[model], tmp_path / "memory", **kw)
    assert json.dumps(disk) == json.dumps(memory)
    assert _files(tmp_path / "disk") == _files(tmp_path / "memory")


def test_the_scratch_folder_goes_on_an_error(cohort, tmp_path, monkeypatch):
    def fit(self, logits, target):
        assert [p for p in tmp_path.iterdir() if ".partial-logits-" in p.name]
        raise RuntimeError("interrupted")

    monkeypatch.setattr(TemperatureScaler, "fit", fit)
    with pytest.raises(RuntimeError, match="interrupted"):
        module.calibrate_model_folder(cohort["model"], tmp_path / "calibrated", use_folds=(0,),
                                      preprocessed_dir=cohort["pre"], use_mirroring=False)
    assert list(tmp_path.iterdir()) == []


def test_a_reference_label_beyond_the_classes_is_named_not_wrapped(tmp_path):
    """A damaged reference's label 300 (3 classes) is stored without wrapping (int8 would make it 44, a valid
    class): the fit refuses it, as it did with the int64 lists."""
    pre = _preprocessed(tmp_path / "pre", cases=["a", "b"])
    f = pre / "Dataset999_Unit" / "unit" / "b.npz"
    arrays = dict(np.load(f))
    seg = arrays["seg"].astype(np.int16)
    seg[0, 8, 8, 8] = 300
    np.savez(f, data=arrays["data"], seg=seg)
    model = write_model_folder(tmp_path / "model", folds=(0,))
    with pytest.raises(ValueError, match="300"):
        module.calibrate_model_folder(model, tmp_path / "calibrated", use_folds=(0,), preprocessed_dir=pre,
                                      use_mirroring=False, max_steps=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "pre"]


def test_smallest_int_dtype_and_scratch_folder(tmp_path):
    assert [smallest_int_dtype(lo, hi) for lo, hi in ((0, 255), (0, 256), (-1, 127), (-1, 128), (-129, 0),
                                                      (0, 2**31))] == \
        [np.uint8, np.int16, np.int8, np.int16, np.int16, np.int64]
    with pytest.raises(ValueError, match="above"):
        smallest_int_dtype(1, 0)
    with pytest.raises(ValueError, match="int64"):
        smallest_int_dtype(0, 2**63)
    with pytest.raises(ValueError, match="what"):
        with scratch_folder(tmp_path / "out", "../x"):
            pass
    with pytest.raises(KeyError), scratch_folder(tmp_path / "cal.pt", "logits") as scratch:
        assert scratch.parent == tmp_path and scratch.name.startswith(".cal.pt.partial-logits-")
        (scratch / "a.npy").write_bytes(b"x")
        raise KeyError
    assert list(tmp_path.iterdir()) == []
