"""``infer`` keeps each output file's size and sha256 in the case record and, on resume, redoes a case whose files
do not match: a ``<case>_probs.nii.gz`` cut to 200 bytes is predicted again, not kept (issue 43 item 5)."""

from __future__ import annotations

import json

import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.io import file_sha256
from tests._cases import TOY_NET


@pytest.mark.slow
def test_truncated_output_is_redone_on_resume(tmp_path, capsys):
    from monai.networks.nets import UNet

    paths = write_toy_cohort(tmp_path / "d", n_cases=2, shape=(12, 12, 12), predictions=False)
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), tmp_path / "net.pt")
    out = tmp_path / "pred"
    argv = ["infer", "-i", str(paths["images"]), "-o", str(out), "--network", json.dumps(TOY_NET), "--checkpoint",
            str(tmp_path / "net.pt"), "--samples", "2", "--device", "cpu", "--seed", "0", "-q"]
    assert cli.main(argv) == 0
    record = json.loads((out / "toy000.json").read_text())
    probs = out / "toy000_probs.nii.gz"
    assert record["file_digests"]["toy000_probs.nii.gz"] == {"size": probs.stat().st_size,
                                                              "sha256": file_sha256(probs)}
    assert set(record["file_digests"]) == set(record["files"])
    whole, other = probs.read_bytes(), (out / "toy001_probs.nii.gz").stat().st_mtime_ns
    probs.write_bytes(whole[:200])
    capsys.readouterr()
    assert cli.main(argv) == 0
    err = capsys.readouterr().err  # the command line prints warnings as one line each
    assert "toy000_probs.nii.gz" in err and "predicting it again" in err, err
    assert probs.read_bytes() == whole  # predicted again (seeded: the same bytes)
    assert (out / "toy001_probs.nii.gz").stat().st_mtime_ns == other  # the intact case is kept
    # a rerun with other outputs (--overwrite --no-probs, one measure) leaves none of the earlier run's files
    argv_one = [*argv, "--overwrite", "--no-probs", "--measures", "predictive_entropy"]
    assert cli.main(argv_one) == 0
    assert sorted(p.name for p in out.glob("toy000_*")) == ["toy000_predictive_entropy.nii.gz", "toy000_seg.nii.gz"]
