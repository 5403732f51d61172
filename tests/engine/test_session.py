"""The process-group lifecycle of a cohort run (``monai_unc.engine.cohort_session``) and the command session of the
workflows (``monai_unc.workflows.session``): a session destroys only a group it created; failed cases become one
stderr line on rank 0 and ``CohortFailed``. One process: gloo groups of world size 1 on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch.distributed as dist

import monai_unc.engine.session as session_module
from monai_unc.engine import CaseFailure, CasesFailed, DistContext, cohort_session, run_cases
from monai_unc.workflows.session import CohortFailed, CommandResult, command_session, failed_cases_message, run_command
from tests._ranks import free_port


def _init_group() -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)


@pytest.fixture
def no_group(monkeypatch) -> Iterator[None]:
    """A single process as torchrun describes one (world size 1), and no group left behind by a test."""
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    assert not dist.is_initialized()
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_a_single_process_gets_the_trivial_context_and_no_group(no_group):
    with cohort_session() as ctx:
        assert (ctx.rank, ctx.world_size, ctx.owns_group, ctx.distributed) == (0, 1, False, False)
        assert not dist.is_initialized()
        assert run_cases(["b", "a"], str.upper, command="toy", key=str, ctx=ctx).results == ["A", "B"]
    assert not dist.is_initialized()


def test_a_group_that_exists_is_joined_and_left_alone(no_group):
    _init_group()
    with cohort_session() as ctx:
        assert (ctx.world_size, ctx.owns_group, ctx.backend) == (1, False, "gloo")
    assert dist.is_initialized()  # the caller's group outlives the session
    with pytest.raises(RuntimeError, match="boom"), cohort_session():
        raise RuntimeError("boom")
    assert dist.is_initialized()


def test_a_group_created_by_the_session_is_destroyed_on_exit_and_on_error(no_group, monkeypatch):
    made: list[tuple] = []

    def creating(device=None, backend=None, timeout=None) -> DistContext:
        """``get_dist_context`` as under torchrun with no group yet: it creates one (world size 1 here)."""
        made.append((device, backend, timeout))
        _init_group()
        return DistContext(0, 1, 0, str(dist.get_backend()), owns_group=True)

    monkeypatch.setattr(session_module, "get_dist_context", creating)
    with cohort_session(device="cpu", backend="gloo", timeout=30) as ctx:
        assert ctx.owns_group and dist.is_initialized()
    assert not dist.is_initialized()
    assert made == [("cpu", "gloo", 30)]
    with pytest.raises(KeyError), cohort_session():
        assert dist.is_initialized()
        raise KeyError("a failing run")
    assert not dist.is_initialized()


def test_a_context_passed_in_is_its_owners_to_end(no_group, monkeypatch):
    _init_group()
    theirs = DistContext(0, 1, 0, "gloo", owns_group=True)  # created by the caller, e.g. get_dist_context
    monkeypatch.setattr(session_module, "get_dist_context", lambda *a, **k: pytest.fail("a new context was made"))
    with cohort_session(theirs) as ctx:
        assert ctx is theirs
    assert dist.is_initialized()


def test_the_command_session_reports_failed_cases_once_and_raises_cohort_failed(tmp_path, capsys):
    failures = [CaseFailure(f"c{i}", 0, "OSError: unreadable") for i in (3, 1, 2, 4, 5, 6)]
    with pytest.raises(CohortFailed) as e, command_session("evaluate", tmp_path):
        raise CasesFailed(failures, results=["partial"])
    assert isinstance(e.value, CasesFailed) and e.value.exit_status == 1
    assert e.value.command == "evaluate" and e.value.output == tmp_path and e.value.results == ["partial"]
    assert [f.case for f in e.value.failures] == ["c1", "c2", "c3", "c4", "c5", "c6"]
    err = capsys.readouterr().err.splitlines()
    assert err == [failed_cases_message("evaluate", e.value.failures, tmp_path)]
    assert err[0] == (f"monai-unc evaluate: 6 case(s) failed ('c1', 'c2', 'c3', 'c4', 'c5' ...), listed in "
                      f"{tmp_path / 'failures.json'}; the other cases are done: fix these and run the same command "
                      "again to resume")
    with pytest.raises(ValueError, match="not a case"), command_session("evaluate", tmp_path):
        raise ValueError("not a case")  # other errors pass through unchanged
    assert capsys.readouterr().err == ""


def test_run_command_returns_the_value_and_the_rank_role(tmp_path):
    res = run_command("toy", tmp_path, lambda ctx: run_cases(["b", "a"], str.upper, command="toy", key=str,
                                                                ctx=ctx).results)
    assert res == CommandResult(["A", "B"], True, tmp_path)
    theirs = DistContext(rank=1, world_size=1)
    assert run_command("toy", tmp_path, lambda ctx: ctx.rank, dist=theirs).is_main is False
