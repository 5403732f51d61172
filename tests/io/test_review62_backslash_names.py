"""Hostile review of review 62: a backslash is a plain character of a POSIX file name.

``plain_file_name`` (review 62) refused every name holding a backslash, "a separator on Windows". ``infer`` predicts
a case whose id holds one (a file name ``a\\b.nii.gz`` is legal on Linux and macOS) and lists its outputs
(``a\\b_seg.nii.gz``, ...) in its record; on every resume its record was then refused ("files entry 'a\\\\b_seg.nii.gz'
(not a file name of the output folder)", a folder that holds them) and the case predicted again, which no earlier
version did. The project's rule since ``CaseCache.path`` is the platform's separators only: ``/`` everywhere, ``\\``
where it separates (Windows).
"""
from __future__ import annotations

import json
import os

import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.io import changed_outputs, output_digests, plain_file_name, record_digest
from tests._cases import TOY_NET

posix = pytest.mark.skipif(os.sep != "/" or os.altsep is not None, reason="a POSIX file system's names")


@posix
def test_a_backslash_is_a_plain_character_of_a_posix_name(tmp_path):
    name = "a\\b_seg.nii.gz"
    assert plain_file_name(name) is True
    (tmp_path / name).write_bytes(b"abc")
    assert [p.name for p in tmp_path.iterdir()] == [name]  # one entry of the folder
    record = {"case": "a\\b", "files": [name], "file_digests": output_digests(tmp_path, [name])}
    record["record_digest"] = record_digest(record)
    assert changed_outputs(tmp_path, record) == []
    assert not plain_file_name("../x") and not plain_file_name("a/b") and not plain_file_name("a\x00b")


@posix
@pytest.mark.slow
def test_infer_resumes_a_case_whose_id_holds_a_backslash(tmp_path, capsys):
    from monai.networks.nets import UNet

    paths = write_toy_cohort(tmp_path / "d", n_cases=1, shape=(12, 12, 12), predictions=False)
    (image,) = paths["images"].iterdir()
    image.rename(image.with_name("a\\b" + image.name[len("toy000"):]))
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), tmp_path / "net.pt")
    out = tmp_path / "pred"
    argv = ["infer", "-i", str(paths["images"]), "-o", str(out), "--network", json.dumps(TOY_NET), "--checkpoint",
            str(tmp_path / "net.pt"), "--samples", "2", "--device", "cpu", "--seed", "0", "-q"]
    assert cli.main(argv) == 0
    seg = out / "a\\b_seg.nii.gz"
    written = seg.stat().st_mtime_ns
    capsys.readouterr()
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "predicting it again" not in err, err
    assert seg.stat().st_mtime_ns == written  # kept, as every earlier version kept it
