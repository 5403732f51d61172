"""Ranks started with other options: refused on every rank before any work, never mixed into one cohort.

Found by hostile testing: the ranks of a job compared their case lists only. A job script of one machine with another
``--patch-size`` (evaluate) or ``--samples`` (infer) than the others ran to the end with exit status 0: the cases of
that rank carried numbers computed with its options (``predictive_entropy_patch_mean`` 0.389 -> 0.586 for one case),
while ``summary.json`` / ``infer.json`` named rank 0's. The ranks are started as a scheduler would (two processes
with ``RANK`` / ``WORLD_SIZE`` / ``MASTER_*`` in their environment, no torchrun), each running ``monai-unc``'s
``cli.main`` in its own working folder with its standard error in a file (:func:`tests._ranks.run_cli_ranks`); the
parent gives up after a wall-clock limit, so a hang fails the test. The ranks are forked from the test process rather
than started as fresh interpreters (a torch/MONAI start-up each, about 4 CPU seconds, ten of them in this module):
what is checked is the ranks' agreement, not the start-up of ``python -m monai_unc.cli``
(tests/cli/test_cli_startup.py).
"""

from __future__ import annotations

from pathlib import Path

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.workflows import evaluate as _evaluate_workflow  # noqa: F401 - imported once, not in each forked rank
from tests._ranks import run_cli_ranks

WAIT_S = 180


def _ranks(per_rank: list[tuple[list[str], Path]]) -> list[tuple[int, list[str]]]:
    """Run ``monai_unc.cli`` once per rank (argv, working folder); ``[(exit status, stderr lines)]`` in rank order."""
    return run_cli_ranks(per_rank, {"MONAI_UNC_DIST_TIMEOUT": "90"}, WAIT_S)


def test_evaluate_ranks_with_other_per_case_options_are_refused_before_any_work(tmp_path):
    """Rank 1 with another ``--patch-size`` and another shift table (the OoD labels of its cases would be other
    ones): one launch, refused on both ranks with one line naming both changes (one launch instead of one per
    option: the ranks compare every setting, and each change is named)."""
    cohort = write_toy_cohort(tmp_path / "c", n_cases=3, shape=(12, 12, 12))
    out = tmp_path / "e"
    argv = ["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o", str(out), "-q"]
    other = tmp_path / "shifts_rank1.csv"
    text = Path(cohort["shifts"]).read_text()
    other.write_text(text.replace(",none", ",scanner", 1))
    assert other.read_text() != text
    results = _ranks([(argv + ["--shifts", str(cohort["shifts"])], tmp_path),
                      (argv + ["--patch-size", "3", "--shifts", str(other)], tmp_path)])
    line = ("monai-unc evaluate: error: rank 1 runs monai-unc evaluate with other options or inputs than rank 0 "
            "(rank 0 -> rank 1: {}): every rank must run the same command on the same inputs "
            "(docs/distributed.md)")
    for rc, err in results:
        assert rc == 2 and len(err) == 1, (rc, err)
        assert err[0] in (line.format("patch_size 10 -> 3; shift labels changed"),
                          line.format("shift labels changed; patch_size 10 -> 3")), (rc, err)
    assert not out.exists()  # nothing written, no folder created


def test_evaluate_ranks_in_other_working_folders_still_agree(tmp_path):
    """The ranks compare options and file names, not where they run: a machine without the shared output folder
    (its own relative ``-o``) still takes part, and rank 0 writes the cohort outputs."""
    cohort = write_toy_cohort(tmp_path / "c", n_cases=3, shape=(12, 12, 12))
    here, there = tmp_path / "rank0", tmp_path / "rank1"
    here.mkdir()
    there.mkdir()
    argv = ["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o", "out", "-q"]
    results = _ranks([(argv, here), (argv, there)])
    assert [rc for rc, _ in results] == [0, 0], results
    assert (here / "out" / "metrics.csv").is_file() and not (there / "out" / "metrics.csv").exists()


def test_infer_ranks_with_other_settings_are_refused_before_any_work(tmp_path):
    cohort = write_toy_cohort(tmp_path / "c", n_cases=3, shape=(16, 16, 16), predictions=False)
    out = tmp_path / "p"
    argv = ["infer", "-i", str(cohort["images"]), "-o", str(out), "--model", "example", "--device", "cpu", "--roi",
            "16", "-q"]
    results = _ranks([(argv + ["--samples", "4"], tmp_path), (argv + ["--samples", "2"], tmp_path)])
    for rc, err in results:
        assert rc == 2 and len(err) == 1, (rc, err)
        assert ("rank 1 runs monai-unc infer with other options or inputs than rank 0 (rank 0 -> rank 1: samples 4 "
                "-> 2)") in err[0], err
    assert not out.exists()  # no case predicted with either settings, no infer.json


def test_rule_commands_with_another_rule_on_one_rank_are_refused(tmp_path):
    """``conformal`` with a rule of another target on rank 1 wrote that rank's cases' masks with its thresholds
    (conformal.json naming rank 0's); ``triage`` likewise scored rank 1's cases with its rule's options."""
    cohort = write_toy_cohort(tmp_path / "c", n_cases=8, shape=(12, 12, 12))
    ev = ["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-q", "--target-risk", "0.3"]
    for name, extra in (("a", ["--conformal", "outer:fnr=0.2"]),
                        ("b", ["--patch-size", "3", "--conformal", "outer:fnr=0.15"])):
        assert cli.main([*ev, "-o", str(tmp_path / name), *extra]) == 0
    for command, rule in (("conformal", "conformal_rule.json"), ("triage", "referral_rule.json")):
        out = tmp_path / command
        argv = [command, "-p", str(cohort["predictions"]), "--allow-mismatch", "-q", "-o", str(out), "-r"]
        results = _ranks([([*argv, str(tmp_path / "a" / rule)], tmp_path),
                          ([*argv, str(tmp_path / "b" / rule)], tmp_path)])
        for rc, err in results:
            assert rc == 2 and err == [
                f"monai-unc {command}: error: rank 1 runs monai-unc {command} with other options or inputs than rank 0 "
                "(rank 0 -> rank 1: rule changed): every rank must run the same command on the same inputs "
                "(docs/distributed.md)"], (command, rc, err)
        assert not out.exists()
