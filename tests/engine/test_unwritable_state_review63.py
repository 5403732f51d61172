"""A resume folder the user may not write (review 63: the commands run as a non-root user).

Found by running ``monai-unc conformal`` as a non-root user into a shared output folder (``0777``) that another
user's earlier run had written: its ``state/cases/`` was that user's (``0755``), so every case was computed and then
"failed" at saving its state (``PermissionError``, exit status 1, ``failures.json`` listing the whole cohort, "fix
these cases and run the same command again"). Nothing is wrong with the cases: like a full disk, a state folder that
cannot be written stops the run before its first case, in one line naming the folder.
"""

from __future__ import annotations

import os
import sys

import pytest

from monai_unc.engine import CaseCache, process_cases, run_cases
from tests._users import run_unprivileged
from tests._users import shared_folder as _shared_folder

pytestmark = pytest.mark.skipif(sys.platform == "win32" or not hasattr(os, "fork"),
                                reason="POSIX permissions and fork")


@pytest.fixture
def shared(tmp_path):
    yield from _shared_folder(tmp_path)


def _earlier_run(folder):
    """The state folder of an earlier run (the test's user's), then closed to others' writes (``0755``)."""
    cache = CaseCache(folder, fingerprint=lambda item: {"n": len(item)})
    run_cases(["a", "bb"], len, command="toy", key=str, cache=cache)
    assert sorted(p.name for p in folder.iterdir()) == ["a.json", "bb.json"]
    os.chmod(folder, 0o755 if os.geteuid() == 0 else 0o555)
    return cache


def test_a_state_folder_the_user_may_not_write_stops_the_run_before_its_first_case(shared):
    state = shared / "out" / "state"
    state.mkdir(parents=True)
    os.chmod(shared / "out", 0o777)
    _earlier_run(state)
    computed = []

    def process(item):
        computed.append(item)
        return len(item)

    def check() -> None:
        cache = CaseCache(state, fingerprint=lambda item: {"n": len(item), "other": "setting"})  # all stale
        with pytest.raises(PermissionError) as info:
            run_cases(["a", "bb"], process, command="toy", key=str, cache=cache, on_failure=lambda f: None)
        assert info.value.filename == str(state), info.value
        assert computed == [], computed

    run_unprivileged(check)


def test_a_state_the_user_may_not_save_stops_the_loop_rather_than_failing_each_case(shared):
    """The loop alone (no ``prepare``): a save refused by the file system is the environment's, not the case's."""
    state = shared / "state"
    state.mkdir()
    _earlier_run(state)

    def check() -> None:
        cache = CaseCache(state, fingerprint=lambda item: {"n": len(item), "other": "setting"})
        failed = []
        with pytest.raises(PermissionError):
            process_cases(["a", "bb"], len, key=str, cache=cache, failures=failed)
        assert failed == []

    run_unprivileged(check)
