"""Hostile review 58: a refusal on rank 0 alone after ``triage``'s run must stop every rank (2 gloo ranks)."""

from __future__ import annotations

import warnings

import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from tests.evaluation.test_distributed_hostile import _cli_worker, run_ranks


def test_a_stale_product_folder_refused_on_rank_0_stops_every_rank(tmp_path):
    """Found by hostile testing: rank 0 alone removes the stale outputs of a product's command beside the triage,
    and refuses a stale ``conformal/`` that is a symbolic link; rank 0 then exited 2 while rank 1 exited 0 (with a
    product rule it waited in that command's run). Now every rank exits 2, rank 1 naming rank 0's refusal."""
    cohort = write_toy_cohort(tmp_path / "cohort", n_cases=3, shape=(10, 10, 10))
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main(["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o",
                         str(tmp_path / "eval"), "--target-risk", "0.3", "-q"]) == 0
    out = tmp_path / "triage"
    out.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (out / "conformal").symlink_to(tmp_path / "elsewhere")
    argv = ["triage", "-p", str(cohort["predictions"]), "--rule", str(tmp_path / "eval" / "referral_rule.json"),
            "-o", str(out), "-q", "--allow-unsigned"]
    results, logs = run_ranks(_cli_worker, 2, {"out": str(tmp_path / "w"), "argv": argv})
    assert [r["rc"] for r in results] == [2, 2], logs
    assert "conformal is a symbolic link" in logs[0]
    assert "rank 0 failed: ValueError:" in logs[1] and "symbolic link" in logs[1], logs[1]
    assert (out / "conformal").is_symlink() and (tmp_path / "elsewhere").is_dir()
