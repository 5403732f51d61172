"""Hostile review 66 of torch.distributed cohorts from the command line: what each rank says on stderr.

Every rank of a ``torchrun`` job parses the same arguments and builds the same plan, so a warning about an option is
the job's, said once (by rank 0) as one process says it; a warning about a case comes from the rank that ran the case.
The ranks are forked gloo processes on loopback (``tests/_ranks.py``); each rank's stderr goes to its own log.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.workflows import infer_plan  # noqa: F401 - imported once here, not in each forked rank
from tests._ranks import free_port, run_forked_ranks

WAIT_S = 120  # wall-clock limit of one multi-process run (a hang fails the test)


def _entry(rank: int, world: int, port: int, argv: list[str], logs: str) -> None:
    """One forked rank: torchrun's variables, ``cli.main(argv)``; stderr and the exit status in ``rank<r>.log``."""
    import torch.distributed as dist

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), MONAI_UNC_DIST_TIMEOUT="60")
    torch.set_num_threads(1)
    path = Path(logs, f"rank{rank}.log")
    with open(path, "w") as log, contextlib.redirect_stderr(log), contextlib.redirect_stdout(log):
        try:
            rc = cli.main(argv)
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
    with open(path, "a") as log:
        log.write(f"exit status {rc}\n")


def _run(argv: list[str], logs: Path, world: int = 2) -> list[list[str]]:
    """``monai-unc <argv>`` on ``world`` forked ranks: each rank's stderr lines, the last one its exit status."""
    logs.mkdir(parents=True, exist_ok=True)
    run_forked_ranks(_entry, (world, free_port(), argv, str(logs)), world, WAIT_S)
    return [[ln for ln in (logs / f"rank{r}.log").read_text().splitlines() if ln.strip()] for r in range(world)]


@pytest.fixture(scope="module")
def cohort(tmp_path_factory) -> dict[str, Path]:
    return write_toy_cohort(tmp_path_factory.mktemp("ranks66") / "c", n_cases=2, shape=(12, 12, 12))


def test_infer_option_warnings_are_said_once_by_rank_0_not_once_per_rank(cohort, tmp_path):
    """Found by review 66: the warnings about options (a deprecated ``--measures`` name, said while the arguments are
    parsed; ``--samples`` under a method that draws none, said once the plan is built) came from every rank, W
    identical lines in a torchrun job's log where one process says one. Rank 0 says each once; rank 1 says nothing
    (its cases warn about nothing)."""
    argv = ["infer", "-i", str(cohort["images"]), "-o", str(tmp_path / "out"), "--model", "example", "--method", "tta",
            "--samples", "3", "--measures", "max_softmax", "--roi", "16", "--device", "cpu", "-q"]
    rank0, rank1 = _run(argv, tmp_path / "logs")
    assert rank0[-1] == rank1[-1] == "exit status 0", (rank0, rank1)
    said = [ln for ln in rank0 if ": warning: " in ln]
    assert len(said) == 2 and "'max_softmax' is deprecated" in said[0] and "--samples 3 is not used" in said[1], rank0
    assert rank1 == ["exit status 0"]
    assert sorted(p.name for p in (tmp_path / "out").glob("*.json")) == ["infer.json", "toy000.json", "toy001.json"]


def test_seeded_draws_of_a_case_do_not_depend_on_the_rank_that_predicts_it(cohort, tmp_path):
    """The promise of docs/distributed.md: a case's MC-dropout masks and TTA noise come from the seed alone, not from
    the rank or the cases predicted before it on that rank, so 2 ranks write the maps of one process bit for bit (here
    toy001 is rank 1's first case, second in one process; dropout and noise both drawn)."""
    import nibabel as nib
    import numpy as np

    argv = ["infer", "-i", str(cohort["images"]), "--model", "example", "--method", "mcdropout+tta", "--tta-noise",
            "0.2", "--samples", "2", "--roi", "16", "--device", "cpu", "-q"]
    torch.set_num_threads(1)
    assert cli.main([*argv, "-o", str(tmp_path / "one")]) == 0
    logs = _run([*argv, "-o", str(tmp_path / "two")], tmp_path / "logs")
    assert [log[-1] for log in logs] == ["exit status 0"] * 2, logs
    maps = sorted(p.name for p in (tmp_path / "one").glob("*.nii.gz"))
    assert len(maps) == 12 and maps == sorted(p.name for p in (tmp_path / "two").glob("*.nii.gz"))
    for name in maps:
        a, b = (np.asarray(nib.load(tmp_path / d / name).dataobj) for d in ("one", "two"))
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    mi = np.asarray(nib.load(tmp_path / "one" / "toy001_mutual_information.nii.gz").dataobj)
    assert mi.max() > 0  # the samples differ: the draws are there to compare
