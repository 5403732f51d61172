"""One frame walk for "the first frame outside the package" (review 72).

``monai_unc.cli.main`` (where a command line was entered) and ``_utils.user_stacklevel`` (where a warning points)
each walked the frames with their own test of a package file, and the two differed: the command line followed
symbolic links but read ``<stdin>`` as a file of the working folder (the package's, when run from there); the warnings
read a package file spelled through a symlinked folder as a user's. Both now use ``monai_unc._frames``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import monai_unc
from monai_unc import cli
from monai_unc._frames import first_frame_outside_package, in_package
from monai_unc._utils import user_stacklevel

PACKAGE = Path(monai_unc.__file__).parent


def test_a_package_file_through_a_symlinked_folder_is_the_package_s(tmp_path):
    """An installed package reached through a symlinked folder (a virtual environment's): a warning names the user's
    line, not the package's (in earlier versions the warnings stopped at the package's frame)."""
    link = tmp_path / "venv-link"
    link.symlink_to(PACKAGE, target_is_directory=True)
    namespace = {"user_stacklevel": user_stacklevel}
    exec(compile("def check():\n    return user_stacklevel()\n", str(link / "spelled.py"), "exec"), namespace)
    assert namespace["check"]() == 2  # this test's frame, past the package's
    assert in_package(str(link / "cli.py"))


def test_stdin_is_never_the_package_s_even_run_from_its_folder(monkeypatch):
    """``python -`` run in the package's folder: the command line's entry is the ``<stdin>`` line that called main (in
    earlier versions it resolved ``<stdin>`` as a file of the working folder, the package's, and walked past it)."""
    got = {}
    monkeypatch.setattr(cli, "_parse_and_run", lambda parser, nnunet_cli, argv, entry: got.setdefault("entry", entry)
                        and 0)
    monkeypatch.chdir(PACKAGE)
    namespace = {"main": cli.main}
    exec(compile("\n\nmain(['--version'])\n", "<stdin>", "exec"), namespace)
    assert got["entry"] == ("<stdin>", 3)


@pytest.mark.parametrize("spelled, inside", [
    (str(PACKAGE / "cli.py"), True),
    (str(PACKAGE.parent / "tests" / ".." / PACKAGE.name / "cli.py"), True),  # a sys.path entry "tests/.."
    (str(PACKAGE / "report" / "html.py"), True),
    (str(PACKAGE) + "_extra" + os.sep + "x.py", False),  # a sibling whose name starts with the package's
    (str(PACKAGE.parent / "tests" / "test_x.py"), False),
    ("<stdin>", False), ("<doctest monai_unc._utils.x[0]>", False), ("<frozen runpy>", False), ("", False),
])
def test_what_is_a_package_file(spelled, inside):
    assert in_package(spelled) is inside


def test_a_relative_name_is_read_from_the_working_folder(monkeypatch):
    monkeypatch.chdir(PACKAGE.parent)
    assert in_package(os.path.join(PACKAGE.name, "cli.py")) and not in_package(os.path.join("tests", "x.py"))


def test_the_walk_and_its_level():
    here = sys._getframe()
    assert first_frame_outside_package(here) == (here, 1)
    namespace = {"walk": first_frame_outside_package, "sys": sys}
    exec(compile("def inner():\n    return walk(sys._getframe())\n", str(PACKAGE / "spelled.py"), "exec"), namespace)
    assert namespace["inner"]() == (here, 2)


@pytest.mark.parametrize("call", [lambda: in_package(Path("x.py")), lambda: first_frame_outside_package(None)])
def test_bad_input_is_named(call):
    with pytest.raises(TypeError, match="filename|frame"):
        call()
