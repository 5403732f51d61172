"""Memory of ``monai-unc calibrate`` (:mod:`monai_unc.workflows.calibrate`): the validation cases' logits wait on
disk (:class:`monai_unc.io.MappedArrays`) and are read one case at a time, so memory does not grow with the number of
cases, and the temperature is the one fitted on the cases in memory."""

from __future__ import annotations

import json
import weakref
from collections.abc import Sequence
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch

from monai_unc.io import MappedArrays, list_image_cases
from monai_unc.temperature import calibrate_network
from monai_unc.workflows import calibrate as module
from monai_unc.workflows.models import load_network

N_CASES, CLASSES, SHAPE = 6, 4, (12, 12, 8)


def _spec(classes=CLASSES):
    return {"_target_": "torch.nn.Conv3d", "in_channels": 1, "out_channels": classes, "kernel_size": 1}


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    """``N_CASES`` cases of a 1x1x1 convolution's logits: labels its prediction on 60 % of the voxels."""
    root = tmp_path_factory.mktemp("calmem")
    (root / "img").mkdir()
    (root / "lab").mkdir()
    torch.manual_seed(0)
    net = torch.nn.Conv3d(1, CLASSES, 1)
    rng = np.random.default_rng(0)
    for k in range(N_CASES):
        x = rng.normal(size=SHAPE).astype(np.float32)
        with torch.no_grad():
            pred = net(torch.from_numpy(x)[None, None])[0].argmax(0).numpy()
        lab = np.where(rng.random(SHAPE) < 0.6, pred, rng.integers(0, CLASSES, SHAPE)).astype(np.uint8)
        nib.save(nib.Nifti1Image(x, np.eye(4)), root / "img" / f"c{k}.nii.gz")
        nib.save(nib.Nifti1Image(lab, np.eye(4)), root / "lab" / f"c{k}.nii.gz")
    torch.save(net.state_dict(), root / "w.pt")
    return root


class _Handed(Sequence):
    """A sequence of tensors that counts how many of those it handed out are alive (held, or a view of them is)."""

    def __init__(self, inner, refs):
        self.inner, self.refs, self.peak = inner, refs, 0

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        t = self.inner[i]
        self.refs.append(weakref.ref(t))
        self.peak = max(self.peak, sum(r() is not None for r in self.refs))
        return t


def test_calibrate_holds_one_case_of_logits_at_a_time(cohort, tmp_path, monkeypatch):
    """Issue: ``collect_logits`` kept every case's float32 logits and int64 labels in two lists handed whole to the
    fit, ``4 C + 8`` bytes per voxel of every case (ten 105-class 512 x 512 x 400 CTs: 418 GiB), although the fit
    streams. Counted here: the network's outputs alive at each forward (collection), and the cases' logits alive at
    each read by the checks, the fit and the metrics (a case is alive while it or a view of it is held)."""
    outputs: list[weakref.ref] = []
    alive_at_forward: list[int] = []
    handed: list[_Handed] = []
    collecting = []
    real_load, real_collect = module.load_network, module.collect_logits

    def load(*args, **kwargs):
        loaded = real_load(*args, **kwargs)

        def hook(_module, _inputs, out):
            if collecting:  # a case (not the example input of the fold check)
                outputs.append(weakref.ref(out))
                alive_at_forward.append(sum(r() is not None for r in outputs))

        loaded.network.register_forward_hook(hook)
        return loaded

    def collect(*args, **kwargs):
        collecting.append(True)
        logits, targets = real_collect(*args, **kwargs)
        collecting.clear()
        handed.append(_Handed(logits, []))
        return handed[-1], targets

    monkeypatch.setattr(module, "load_network", load)
    monkeypatch.setattr(module, "collect_logits", collect)
    out = tmp_path / "out" / "cal.pt"
    _, record = module.run_calibrate(cohort / "img", cohort / "lab", out, network=_spec(),
                                     checkpoint=cohort / "w.pt", intensity="none", max_steps=5, progress=False)
    assert record["cases"] == N_CASES and len(alive_at_forward) == N_CASES
    assert max(alive_at_forward) == 1, alive_at_forward  # before: 1, 2, ..., 6 (a list of every case's output)
    assert handed[0].peak <= 2, handed[0].peak  # the case read and the one before; before: all 6
    # the scratch folder beside the output is gone, nothing was written beside the inputs
    assert sorted(p.name for p in out.parent.iterdir()) == ["cal.json", "cal.pt"]
    assert sorted(p.name for p in cohort.iterdir()) == ["img", "lab", "w.pt"]


def test_the_temperature_is_the_one_fitted_in_memory(cohort, tmp_path):
    """Logits mapped from disk and labels in uint8 fit the temperature (and give the record) of the in-memory lists
    bit for bit."""
    model = load_network(network=_spec(), checkpoints=[cohort / "w.pt"])
    cases = list_image_cases(cohort / "img")
    labels = [cohort / "lab" / f"{c.case_id}.nii.gz" for c in cases]
    z_mem, y_mem = module.collect_logits(cases, labels, model, "none", progress=False)
    z_disk, y_disk = module.collect_logits(cases, labels, model, "none", progress=False, store=tmp_path / "store")
    assert isinstance(z_disk, MappedArrays) and isinstance(y_disk, MappedArrays) and len(z_disk) == N_CASES
    assert y_mem[0].dtype == torch.int64 and y_disk[0].dtype == torch.uint8  # in memory as before
    for a, b, ya, yb in zip(z_mem, z_disk, y_mem, y_disk):
        assert b.dtype == torch.float32 and torch.equal(a, b) and torch.equal(ya, yb.long())
    results = []
    for z, y in ((z_mem, y_mem), (z_disk, y_disk)):
        for mode in ("scalar", "vector"):
            results.append(calibrate_network(z, y, torch.nn.Conv3d(1, CLASSES, 1), mode=mode, max_steps=40)[1])
    assert json.dumps(results[:2]) == json.dumps(results[2:])


def test_the_scratch_folder_goes_on_an_error(cohort, tmp_path, monkeypatch):
    def fit(*args, **kwargs):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(module, "calibrate_network", fit)
    out = tmp_path / "cal.pt"
    with pytest.raises(RuntimeError, match="interrupted"):
        module.run_calibrate(cohort / "img", cohort / "lab", out, network=_spec(), checkpoint=cohort / "w.pt",
                             intensity="none", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_region_masks_on_disk_fit_the_same_temperatures(tmp_path):
    """Sigmoid region masks kept as uint8 files: the per-region temperatures of the lists in memory."""
    torch.manual_seed(1)
    masks = [(torch.rand(1, 3, 6, 5, 4) > 0.5).to(torch.uint8) for _ in range(3)]
    logits = [3.0 * (2 * m.float() - 1) + 2.0 * torch.randn(m.shape) for m in masks]
    zs, ys = MappedArrays(tmp_path / "z"), MappedArrays(tmp_path / "y")
    for z, m in zip(logits, masks):
        zs.append(z)
        ys.append(m)
    kw = dict(mode="vector", activation="sigmoid", max_steps=60)
    net = torch.nn.Conv3d(1, 3, 1)
    mem = calibrate_network(logits, masks, net, **kw)[1]
    disk = calibrate_network(zs, ys, net, **kw)[1]
    assert json.dumps(mem) == json.dumps(disk)


def test_mapped_arrays(tmp_path):
    store = MappedArrays(tmp_path / "a")
    store.append(torch.arange(6.0).reshape(2, 3))
    store.append(np.array([[3, 200]]), dtype=np.uint8)
    store.append(np.zeros((0, 4), np.float32))
    assert len(store) == 3 and repr(store).endswith("3 arrays)")
    assert store[1].dtype == torch.uint8 and store[1].tolist() == [[3, 200]]
    assert store[-1].shape == (0, 4) and [tuple(t.shape) for t in store[:2]] == [(2, 3), (1, 2)]
    t = store[0]
    t += 1  # copy-on-write: the tensor changes, the file does not
    assert t.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]] and store[0].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert sorted(p.name for p in Path(tmp_path / "a").iterdir()) == ["000000.npy", "000001.npy", "000002.npy"]
    with pytest.raises(IndexError):
        store[3]
    with pytest.raises(TypeError, match="array must be"):
        store.append([1, 2])
