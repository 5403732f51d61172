"""A package that a command needs and that is not installed: one stderr line naming what to install, exit status 2,
never a traceback (issue #40: ``pip install monai-unc && monai-unc demo`` must work, and where something is missing
anyway the command line says what to install)."""

from __future__ import annotations

import sys

import pytest

from monai_unc import cli
from tests._paths import ROOT


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_demo_without_nilearn_says_what_to_install(tmp_path, monkeypatch, capsys):
    """nilearn is a default dependency; after ``pip install --no-deps`` the demo names it in one line."""
    monkeypatch.setitem(sys.modules, "nilearn", None)  # `from nilearn import datasets` raises ImportError
    monkeypatch.setitem(sys.modules, "nilearn.datasets", None)
    rc = cli.main(["demo", "--quick", "--quiet", "--output", str(tmp_path / "demo")])
    line = _one_error_line(capsys)
    assert rc == 2
    assert line.startswith("monai-unc demo: error: ") and "pip install 'nilearn>=0.10.1'" in line


def test_demo_with_a_nilearn_that_does_not_import_says_so(tmp_path, monkeypatch, capsys):
    """nilearn 0.10.0 (then allowed by the declared bound) imports pkg_resources, which setuptools >= 81 and uv or
    Python >= 3.12 environments lack: the demo said nilearn "is not installed" and advised 'nilearn>=0.10', which
    the installed 0.10.0 satisfies. It says the import failed, why, and what to upgrade to."""

    class Nilearn0100:  # the import of nilearn fails inside it, as 0.10.0's does without pkg_resources
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "nilearn":
                raise ModuleNotFoundError("No module named 'pkg_resources'", name="pkg_resources")
            return None

    for name in [m for m in sys.modules if m == "nilearn" or m.startswith("nilearn.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [Nilearn0100(), *sys.meta_path])
    rc = cli.main(["demo", "--quick", "--quiet", "--output", str(tmp_path / "demo")])
    line = _one_error_line(capsys)
    assert rc == 2
    assert line == ("monai-unc demo: error: the MNI152 example needs nilearn, which is installed but does not import "
                    "(No module named 'pkg_resources'): pip install --upgrade 'nilearn>=0.10.1'")


def test_missing_module_names_the_package_to_install(monkeypatch, capsys):
    """A module missing anywhere below a workflow: ``<module> is not installed: pip install <distribution>``."""
    cli._import_commands()

    def workflow(args):
        raise ModuleNotFoundError("No module named 'sklearn'", name="sklearn")

    monkeypatch.setitem(cli._WORKFLOWS, "evaluate", workflow)
    rc = cli.main(["evaluate", "--labels", "l", "--predictions", "p", "--output", "o"])
    assert rc == 2
    assert _one_error_line(capsys) == "monai-unc evaluate: error: sklearn is not installed: pip install scikit-learn"


@pytest.mark.parametrize("module", ["nnunetv2", "ipyniivue", "ignite", "pydicom", "highdicom", "psycopg", "numba",
                                    "isal", "cucim", "cupy"])
def test_missing_module_of_an_extra_names_the_extra(module, monkeypatch, capsys):
    """A module that an extra of pyproject.toml provides: the extra is named (with the version bound the package is
    tested with), not the bare distribution (``pip install pytorch-ignite`` was advised for ignite, without its
    bound and under another name than the ``ignite`` extra the docs give)."""
    import tomllib

    cli._import_commands()

    def workflow(args):
        raise ModuleNotFoundError(f"No module named '{module}'", name=module)

    monkeypatch.setitem(cli._WORKFLOWS, "evaluate", workflow)
    rc = cli.main(["evaluate", "--labels", "l", "--predictions", "p", "--output", "o"])
    assert rc == 2
    line = _one_error_line(capsys)
    extra = line.split("pip install 'monai-unc[", 1)[1].split("]'", 1)[0]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    requirements = " ".join(extras[extra]).lower()
    distribution = {"ignite": "pytorch-ignite", "cucim": "cucim", "cupy": "cupy"}.get(module, module)
    assert distribution in requirements, (module, extra, extras[extra])


def test_import_error_of_the_package_itself_is_a_bug_not_an_install_problem(monkeypatch):
    """A module of monai_unc itself that does not import is re-raised (a bug must show its traceback)."""
    cli._import_commands()

    def workflow(args):
        raise ModuleNotFoundError("No module named 'monai_unc.nope'", name="monai_unc.nope")

    monkeypatch.setitem(cli._WORKFLOWS, "evaluate", workflow)
    with pytest.raises(ModuleNotFoundError, match="monai_unc.nope"):
        cli.main(["evaluate", "--labels", "l", "--predictions", "p", "--output", "o"])


def test_example_data_is_a_default_dependency_and_the_examples_extra_is_kept():
    """nilearn (the MNI152 template of the demo) is a default dependency; ``pip install 'monai-unc[examples]'`` still
    works (the extra is kept, empty)."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(d.replace(" ", "").startswith("nilearn>=") for d in project["dependencies"])
    assert project["optional-dependencies"]["examples"] == []
