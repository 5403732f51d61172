"""Resume of ``infer`` does not trust an edited ``<case>.json`` (review 61).

A record whose ``file_digests`` were edited to match a replaced map, whose digest entry of a listed file was removed,
or whose ``files`` name a path outside the output folder (``../x``, an absolute path) was taken for a finished case
and the case skipped. Each now makes the case be predicted again, with one warning naming the case.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.io import file_sha256
from monai_unc.workflows.infer import record_digest
from tests._cases import TOY_NET


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from monai.networks.nets import UNet

    root = tmp_path_factory.mktemp("r61")
    paths = write_toy_cohort(root / "d", n_cases=2, shape=(12, 12, 12), predictions=False)
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), root / "net.pt")
    out = root / "pred"
    argv = ["infer", "-i", str(paths["images"]), "-o", str(out), "--network", json.dumps(TOY_NET), "--checkpoint",
            str(root / "net.pt"), "--samples", "2", "--device", "cpu", "--seed", "0", "-q"]
    assert cli.main(argv) == 0
    return root, out, argv


def _copy(run, tmp_path: Path) -> tuple[Path, list[str]]:
    root, out, argv = run
    new = tmp_path / "pred"
    shutil.copytree(out, new)
    return new, [str(new) if a == str(out) else a for a in argv]


def _rerun(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert cli.main(argv) == 0
    return capsys.readouterr().err


def _edit(path: Path, change, digest: str = "keep") -> None:
    """Edit a record; ``digest``: "keep" (the saved ``record_digest`` stays, now stale), "recompute" (made to match
    the edit) or "drop" (a record as an earlier version wrote it, without one)."""
    doc = json.loads(path.read_text())
    change(doc)
    if digest == "recompute":
        doc["record_digest"] = record_digest(doc)
    elif digest == "drop":
        doc.pop("record_digest")
    path.write_text(json.dumps(doc))


@pytest.mark.slow
def test_a_replaced_map_with_its_digest_edited_to_match_is_predicted_again(run, tmp_path, capsys):
    out, argv = _copy(run, tmp_path)
    probs, whole = out / "toy000_probs.nii.gz", (out / "toy000_probs.nii.gz").read_bytes()
    shutil.copyfile(out / "toy001_probs.nii.gz", probs)  # another case's map in its place ...

    def match(doc):  # ... and the record edited so that its digest matches the replaced file
        doc["file_digests"]["toy000_probs.nii.gz"] = {"size": probs.stat().st_size, "sha256": file_sha256(probs)}
    _edit(out / "toy000.json", match)
    err = _rerun(argv, capsys)
    assert "case 'toy000'" in err and "record (its text differs" in err and "predicting it again" in err, err
    assert err.count("warning") == 1, err  # one warning, for the one case
    assert probs.read_bytes() == whole  # seeded: predicted again, the same bytes


@pytest.mark.slow
@pytest.mark.parametrize("digest", ["recompute", "drop"])
def test_a_listed_file_without_its_digest_entry_is_predicted_again(run, tmp_path, capsys, digest):
    out, argv = _copy(run, tmp_path)
    probs, whole = out / "toy000_probs.nii.gz", (out / "toy000_probs.nii.gz").read_bytes()
    shutil.copyfile(out / "toy001_probs.nii.gz", probs)
    _edit(out / "toy000.json", lambda doc: doc["file_digests"].pop("toy000_probs.nii.gz"), digest)
    err = _rerun(argv, capsys)
    assert "toy000_probs.nii.gz (no digest recorded)" in err and "predicting it again" in err, err
    assert probs.read_bytes() == whole


@pytest.mark.slow
@pytest.mark.parametrize("digest", ["keep", "recompute", "drop"])
@pytest.mark.parametrize("escape", ["../outside.txt", "ABS"])
def test_a_files_entry_outside_the_output_folder_is_predicted_again(run, tmp_path, capsys, escape, digest):
    out, argv = _copy(run, tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("not a map")
    name = str(outside) if escape == "ABS" else escape
    kept = (out / "toy001.json").stat().st_mtime_ns

    def add(doc):
        doc["files"].append(name)
        doc["file_digests"][name] = {"size": outside.stat().st_size, "sha256": file_sha256(outside)}
    _edit(out / "toy000.json", add, digest)
    err = _rerun(argv, capsys)
    why = "record (its text differs" if digest == "keep" else f"files entry {name!r} (not a file name"
    assert "case 'toy000'" in err and why in err and "predicting it again" in err, err
    record = json.loads((out / "toy000.json").read_text())
    assert name not in record["files"]  # predicted again: a record of this run's files
    assert outside.read_text() == "not a map"  # never written nor removed
    assert (out / "toy001.json").stat().st_mtime_ns == kept  # the intact case is kept
