"""Hostile rerun checks of ``monai-unc infer`` (review D): a resume never keeps the outputs of an input that changed.

An input image edited (re-exported, corrected) between two runs into the same folder must be predicted again: the
folder then equals a clean run's, byte for byte, and one warning line names the case. An input only copied or
touched (same content) is not predicted again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import nibabel as nib
import numpy as np
import pytest

from tests._cases import run_toy_infer, toy_infer_files

FLAGS = ("--method", "mcdropout", "--seed", "0")


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.nii.gz"))}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return toy_infer_files(tmp_path_factory.mktemp("rerun_hostile"), n_cases=2)


def _edit(path):
    img = nib.load(path)
    data = np.asarray(img.dataobj).astype(np.float32)
    nib.save(nib.Nifti1Image(data[::-1].copy() * 2.0 + 1.0, img.affine), path)


@pytest.mark.slow
def test_an_edited_input_is_predicted_again(toy, tmp_path, capsys):
    images = tmp_path / "images"
    shutil.copytree(toy["images"], images)
    mine = {**toy, "images": images}
    out, clean = tmp_path / "pred", tmp_path / "clean"
    assert run_toy_infer(mine, out, *FLAGS) == 0
    before = _digests(out)
    first = sorted(images.iterdir())[0]
    _edit(first)
    capsys.readouterr()
    assert run_toy_infer(mine, out, *FLAGS) == 0
    err = capsys.readouterr().err
    assert "input changed" in err and "toy000" in err, err
    assert run_toy_infer(mine, clean, *FLAGS) == 0
    after, fresh = _digests(out), _digests(clean)
    assert after == fresh
    assert [k for k in after if after[k] != before[k]] and all(k.startswith("toy000") for k in after
                                                                 if after[k] != before[k])
    record = json.loads((out / "toy000.json").read_text())
    assert record["input_digests"][0]["file"] == first.name


@pytest.mark.slow
def test_a_touched_or_copied_input_is_not_predicted_again(toy, tmp_path, capsys):
    images = tmp_path / "images"
    shutil.copytree(toy["images"], images)
    mine = {**toy, "images": images}
    out = tmp_path / "pred"
    assert run_toy_infer(mine, out, *FLAGS) == 0
    records = {p.name: p.read_bytes() for p in out.glob("toy*.json")}
    first = sorted(images.iterdir())[0]
    os.utime(first, ns=(0, 10**9))  # touched: another mtime, the same content
    moved = tmp_path / "moved"
    shutil.copytree(images, moved)  # copied elsewhere: other paths and times, the same content
    capsys.readouterr()
    assert run_toy_infer(mine, out, *FLAGS) == 0
    assert run_toy_infer({**toy, "images": moved}, out, *FLAGS) == 0
    assert "input changed" not in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.glob("toy*.json")} == records  # nothing predicted again
