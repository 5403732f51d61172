"""The tests' in-process listing of nnU-Net's input cases (``tests/conftest.py``'s session fixture) gives nnU-Net's
own lists: ``create_lists_from_splitted_dataset_folder`` with its pool of forked workers and without it."""

from __future__ import annotations

import multiprocessing

import pytest

pytest.importorskip("nnunetv2")

from nnunetv2.utilities import utils  # noqa: E402

from tests._nnunet_pools import ListingPool  # noqa: E402


def test_the_cases_are_listed_in_process_as_by_nnunets_pool(tmp_path, monkeypatch):
    for name in ("b_0000.nii.gz", "b_0001.nii.gz", "a_0000.nii.gz", "a_0000_0000.nii.gz", "notes.txt"):
        (tmp_path / name).write_bytes(b"")
    assert utils.Pool is ListingPool  # the fixture is on for every test of a session that imported nnU-Net
    listed = utils.create_lists_from_splitted_dataset_folder(str(tmp_path), ".nii.gz")
    monkeypatch.setattr(utils, "Pool", multiprocessing.get_context("fork").Pool)
    assert listed == utils.create_lists_from_splitted_dataset_folder(str(tmp_path), ".nii.gz", num_processes=2)
    assert listed == [[str(tmp_path / "a_0000.nii.gz")], [str(tmp_path / "a_0000_0000.nii.gz")],
                      [str(tmp_path / "b_0000.nii.gz"), str(tmp_path / "b_0001.nii.gz")]]
