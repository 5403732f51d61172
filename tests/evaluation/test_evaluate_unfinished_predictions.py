"""``evaluate`` reads the predictions of one finished ``monai-unc infer`` run only (found by hostile testing).

It matched the cases by file name alone: a folder that an ``infer --overwrite`` with other settings left half done
(killed after it renamed one case's probabilities into place) was evaluated without a word, and ``evaluate
--target-risk`` signed a referral rule whose fingerprint said ``num_samples: [2, 3]``; a folder that a running
``infer`` still held was read too. Now, for an ``infer`` output folder (``infer.json``), ``evaluate`` refuses in
one line (exit 2) a folder another live run holds, a case whose files are there without its record (an interrupted
case) and cases made with settings other than ``infer.json``'s, naming them and the setting; a stale lock of a
killed run does not block, and folders that ``infer`` did not write are read as before.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from monai_unc.cli import main
from monai_unc.evaluation.triage import RULE_FILE
from monai_unc.io import OUTPUT_LOCK_FILE, output_lock, output_lock_holder
from monai_unc.io.provenance import check_finished_predictions
from tests._cases import run_toy_infer, toy_infer_files
from tests._holders import ForkedHolder

FLAGS = ("--method", "mcdropout", "--seed", "0")


def _evaluate(labels: Path, pred: Path, out: Path, *extra: str) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(out), "--no-spatial", "-q", *extra])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A finished ``infer --samples 2`` folder and the same cases after a finished ``--samples 3 --overwrite``."""
    root = tmp_path_factory.mktemp("unfinished")
    toy = toy_infer_files(root, n_cases=3)
    old, new = root / "old", root / "new"
    assert run_toy_infer(toy, old, *FLAGS, "--samples", "2") == 0
    shutil.copytree(old, new)
    assert run_toy_infer(toy, new, *FLAGS, "--samples", "3", "--overwrite") == 0
    return {"toy": toy, "labels": root / "data" / "labels", "old": old, "new": new}


def _interrupted_overwrite(runs, folder: Path) -> Path:
    """The folder an ``infer --samples 3 --overwrite`` over the ``--samples 2`` run leaves when killed after it
    renamed ``toy001_probs`` into place: toy000 finished at 3 samples, toy001 new segmentation and probabilities
    beside the old maps and no record (its record is removed first), toy002 untouched at 2 samples."""
    shutil.copytree(runs["old"], folder)
    shutil.copy2(runs["new"] / "infer.json", folder / "infer.json")
    for p in runs["new"].glob("toy000*"):
        shutil.copy2(p, folder / p.name)
    for name in ("toy001_seg.nii.gz", "toy001_probs.nii.gz"):
        shutil.copy2(runs["new"] / name, folder / name)
    (folder / "toy001.json").unlink()
    return folder


@pytest.mark.slow
def test_evaluate_refuses_an_interrupted_infer_of_other_settings(runs, tmp_path, capsys):
    pred = _interrupted_overwrite(runs, tmp_path / "pred")
    capsys.readouterr()
    for out, extra in ((tmp_path / "eval", ()), (tmp_path / "cert", ("--target-risk", "0.5"))):
        assert _evaluate(runs["labels"], pred, out, *extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert err[0].startswith(f"monai-unc evaluate: error: the predictions in {pred} are not one finished "
                                 "'monai-unc infer' run"), err
        assert "case(s) ['toy001'] have files but no record" in err[0]
        assert "case(s) ['toy002'] were made with other settings than infer.json's (samples 2 -> 3" in err[0]
        assert "toy000" not in err[0] and "run 'monai-unc infer' into the folder again" in err[0]
        assert not (out / "metrics.csv").exists() and not (out / RULE_FILE).exists()
    # the rule fitted on the calibration cases checks them too (a folder changed after the listing)
    from monai_unc.evaluation.triage.certify import certify_rule

    with pytest.raises(ValueError, match=r"case\(s\) \['toy001'\] have files but no record"):
        certify_rule([], {}, 2, "x", {"calibration": {"cases": ["toy000", "toy001"]}}, None, predictions=pred)
    # the remedy the message gives: infer again with the settings of infer.json finishes the folder
    assert run_toy_infer(runs["toy"], pred, *FLAGS, "--samples", "3") == 0
    capsys.readouterr()
    assert _evaluate(runs["labels"], pred, tmp_path / "cert2", "--target-risk", "0.5") == 0
    rule = json.loads((tmp_path / "cert2" / RULE_FILE).read_text())
    fingerprint = rule.get("fingerprint") or rule["body"]["fingerprint"]
    assert fingerprint["num_samples"] == 3


@pytest.mark.slow
def test_triage_and_conformal_listings_refuse_an_interrupted_infer(runs, tmp_path):
    """Found by hostile testing: the prediction listing of ``triage`` and ``conformal`` read a mixed folder (the
    check of ``evaluate`` now runs in ``list_prediction_cases`` too)."""
    from monai_unc.io.provenance import list_prediction_cases

    pred = _interrupted_overwrite(runs, tmp_path / "pred")
    with pytest.raises(ValueError, match="not one finished 'monai-unc infer' run"):
        list_prediction_cases(pred, "monai-unc")
    assert [f.case_id for f in list_prediction_cases(runs["new"], "monai-unc")] == ["toy000", "toy001", "toy002"]
    assert [f.case_id for f in list_prediction_cases(pred, "monai-unc", cases=["toy000"])] == ["toy000"]


def test_records_of_earlier_versions_that_disagree_are_refused(tmp_path):
    """Records without ``fingerprint`` (before it existed) are compared on what a rule's fingerprint reads."""
    (tmp_path / "infer.json").write_text(json.dumps({"settings": {"method": "mcdropout", "samples": 2}}))
    for cid, n in (("a", 2), ("b", 2), ("c", 3)):
        (tmp_path / f"{cid}.json").write_text(json.dumps({"method": "mcdropout", "num_samples": n}))
    check_finished_predictions(tmp_path, "monai-unc", ["a", "b"])
    with pytest.raises(ValueError, match=r"disagree on num_samples \(2: \['a', 'b'\]; 3: \['c'\]\)"):
        check_finished_predictions(tmp_path, "monai-unc", ["a", "b", "c"])
    check_finished_predictions(tmp_path, "nnunet", ["a", "b", "c"])  # nnU-Net's records are its own
    (tmp_path / "infer.json").unlink()  # not an infer run: files of another tool, not checked
    check_finished_predictions(tmp_path, "monai-unc", ["a", "b", "c", "d"])


def _hold(folder: Path) -> ForkedHolder:
    return ForkedHolder(lambda: output_lock(folder, "monai-unc infer"))


@pytest.mark.slow
def test_evaluate_refuses_predictions_that_a_running_infer_holds(runs, tmp_path, capsys):
    pred = tmp_path / "pred"
    shutil.copytree(runs["new"], pred)
    holder = _hold(pred)
    try:
        assert output_lock_holder(pred).startswith(f"pid {holder.pid}, monai-unc infer, since ")
        capsys.readouterr()
        assert _evaluate(runs["labels"], pred, tmp_path / "eval") == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"the prediction folder {pred} is being written by another run (pid {holder.pid}, " \
            "monai-unc infer" in err[0], err
        assert not (tmp_path / "eval" / "metrics.csv").exists()
    finally:
        holder.kill()
        holder.wait()
    # killed: its lock file stays, its lock does not, and the folder is read
    assert (pred / OUTPUT_LOCK_FILE).exists() and output_lock_holder(pred) is None
    assert _evaluate(runs["labels"], pred, tmp_path / "eval") == 0
