"""``load_case`` reads a case's files on several threads: the same arrays as one file after the other, and the
errors of the first file the checks take, whatever the other reads raise."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.io.cases import CaseError, CaseFiles, load_case
from monai_unc.io.files import save_nifti, save_probabilities


def _case(d, shape=(9, 8, 7), classes=3):
    rng = np.random.default_rng(0)
    probs = rng.random((classes, *shape)).astype(np.float32)
    probs /= probs.sum(0)
    aff = np.diag([1.2, 1.0, 2.0, 1.0])
    files = CaseFiles(
        "a", save_nifti(probs.argmax(0), aff, d / "a.nii.gz"),
        seg=save_nifti(probs.argmax(0), aff, d / "a_seg.nii.gz"),
        probs=save_probabilities(probs, aff, d / "a_probs.nii.gz"),
        maps={"predictive_entropy": save_nifti(rng.random(shape), aff, d / "a_predictive_entropy.nii.gz"),
              "variance": save_nifti(rng.random(shape), aff, d / "a_variance.nii.gz")},
        image=save_nifti(rng.random(shape), aff, d / "a_0000.nii.gz"),
    )
    return files


@pytest.mark.parametrize("threads", [2, 5])
def test_threaded_reads_give_the_arrays_of_one_thread(tmp_path, monkeypatch, threads):
    files = _case(tmp_path)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    ref = load_case(files, load_image=True)
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    out = load_case(files, load_image=True)
    for name in ("label", "seg", "probs", "image", "affine"):
        a, b = getattr(ref, name), getattr(out, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert out.probs.flags.c_contiguous  # the checked copy is kept
    assert ref.maps.keys() == out.maps.keys() and all(np.array_equal(ref.maps[k], out.maps[k]) for k in ref.maps)


@pytest.mark.parametrize("threads", [1, 4])
def test_the_error_is_that_of_the_first_file_checked(tmp_path, monkeypatch, threads):
    files = _case(tmp_path)
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    files.maps["variance"].write_bytes(b"not a volume")  # read first on another thread, checked last
    files.label.write_bytes(files.label.read_bytes()[:200])  # truncated: the label is checked first
    with pytest.raises(CaseError, match=r"a\.nii\.gz"):
        load_case(files)
    files = _case(tmp_path)
    files.maps["variance"].write_bytes(b"not a volume")
    with pytest.raises(CaseError, match="a_variance"):
        load_case(files)
