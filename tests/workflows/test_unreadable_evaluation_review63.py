"""An evaluation folder the user may not read (review 63: the commands run as a non-root user).

Found by running ``monai-unc report`` as a non-root user on an evaluation whose ``summary.json`` only its owner may
read (``0400``, root's): the one line said ``Permission denied: .../summary.json (a truncated or corrupt file?); run
monai-unc evaluate again``. The file is whole: evaluating again (as whom, into whose folder?) mends nothing. The line
names the file and says that this user may not read it.
"""

from __future__ import annotations

import os
import sys

import pytest

from monai_unc import cli
from monai_unc.data import write_toy_cohort
from monai_unc.workflows.report import check_evaluation_folder
from tests._users import run_unprivileged
from tests._users import shared_folder as _shared_folder


@pytest.fixture
def shared(tmp_path):
    yield from _shared_folder(tmp_path)


@pytest.mark.skipif(sys.platform == "win32" or not hasattr(os, "fork"), reason="POSIX permissions and fork")
@pytest.mark.parametrize("unreadable", ["summary.json", "state/rows.json"])
def test_an_evaluation_the_user_may_not_read_is_not_called_corrupt(shared, unreadable):
    paths = write_toy_cohort(shared / "data", n_cases=3, shape=(8, 8, 8))
    ev = shared / "ev"
    assert cli.main(["evaluate", "-l", str(paths["labels"]), "-p", str(paths["predictions"]), "-o", str(ev), "-q",
                     "--no-spatial"]) == 0
    assert check_evaluation_folder(ev) == ev  # what it imports, loaded
    for d, _, _ in os.walk(shared):
        os.chmod(d, 0o755)
    os.chmod(ev / unreadable, 0o000 if os.geteuid() else 0o400)

    def check() -> None:
        with pytest.raises(ValueError) as info:
            check_evaluation_folder(ev)
        text = str(info.value)
        assert str(ev / unreadable) in text and "Permission denied" in text, text
        assert "corrupt" not in text and "evaluate again" not in text, text
        assert "read access" in text, text

    run_unprivileged(check)
