"""The wheel and the sdist carry the package, its data and its licences, and nothing else (review 63).

The static tests read ``pyproject.toml``; the slow one builds both distributions from a copy of this checkout
with setuptools' own build backend in the running interpreter (no build environment, nothing downloaded: a few
seconds) after putting a developer's leftovers into the copy (bytecode, numba's disk cache and its lock file), and
compares their file lists with the package's tracked files. What the installed wheel runs (the demo from a fresh
venv) is ``tests/test_plain_install.py``.
"""

from __future__ import annotations

import email
import json
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from tests._paths import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]
ASSETS = ROOT / "monai_unc" / "report" / "assets"
#: what a developer's checkout holds beside the sources and no distribution may carry
LEFTOVERS = ("__pycache__/_numba_histogram.tables-294.py311.nbi", "__pycache__/_numba_histogram.tables-294.py311.1.nbc",
             "__pycache__/monai_unc.lock", "__pycache__/histogram.cpython-311.pyc")


def _spdx_ids(expression: str) -> set[str]:
    """The licence identifiers of an SPDX expression (``AND`` / ``OR`` / ``WITH`` and parentheses dropped)."""
    return set(re.findall(r"[A-Za-z0-9.+-]+", expression)) - {"AND", "OR", "WITH"}


def test_the_vendored_viewer_licence_is_declared():
    """The report's viewer ships NiiVue's BSD-2-Clause bundle: the metadata named Apache-2.0 only and carried
    LICENSE only, so the wheel held BSD code that its declared licence and licence files did not cover."""
    vendored = json.loads((ASSETS / "niivue.json").read_text())["license"]
    assert vendored in _spdx_ids(PROJECT["license"]), (PROJECT["license"], vendored)
    files = PROJECT.get("license-files", [])
    assert "LICENSE" in files and "monai_unc/report/assets/NIIVUE_LICENSE.txt" in files, files
    for name in files:
        assert (ROOT / name).is_file(), name


def test_classifiers_name_the_python_versions_of_requires_python():
    """The metadata had no classifiers; the ``Python :: 3.X`` ones must agree with ``requires-python``."""
    classifiers = PROJECT.get("classifiers", [])
    versions = sorted(int(c.rsplit(".", 1)[1]) for c in classifiers
                      if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c))
    assert versions, classifiers
    assert versions == list(range(versions[0], versions[-1] + 1)), f"a gap in the Python versions: {versions}"
    requires = SpecifierSet(PROJECT["requires-python"])
    assert all(f"3.{v}" in requires for v in versions), (versions, str(requires))
    assert f"3.{versions[0] - 1}" not in requires, f"requires-python admits 3.{versions[0] - 1}, not in classifiers"
    assert "Programming Language :: Python :: 3 :: Only" in classifiers
    assert len(set(classifiers)) == len(classifiers) and classifiers == sorted(classifiers), classifiers
    # no licence classifier beside a licence expression (PEP 639: setuptools refuses the combination)
    assert not any(c.startswith("License ::") for c in classifiers), classifiers


def test_the_package_declares_its_type_hints():
    """``Typing :: Typed`` and PEP 561's ``py.typed`` marker in the package data: without the marker a type checker
    treats the installed package as untyped (mypy: "missing library stubs or py.typed marker")."""
    assert (ROOT / "monai_unc" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["monai_unc"]
    assert "Typing :: Typed" in PROJECT.get("classifiers", [])


def _tracked_package_files() -> set[str]:
    """The files of ``monai_unc/`` under version control (what a distribution must carry, all of it)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", "monai_unc"], capture_output=True,
                         check=True).stdout
    return {p for p in out.decode().split("\0") if p and (ROOT / p).is_file()}


def _source_copy(dest: Path) -> Path:
    """The top-level files and ``monai_unc/`` (without bytecode), then a developer's leftovers put into it."""
    dest.mkdir()
    for item in ROOT.iterdir():
        if item.is_file():
            shutil.copy2(item, dest / item.name)
    shutil.copytree(ROOT / "monai_unc", dest / "monai_unc", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for folder in (dest / "monai_unc" / "metrics" / "calibration", dest / "monai_unc" / "report" / "assets"):
        for name in LEFTOVERS:
            (folder / name).parent.mkdir(exist_ok=True)
            (folder / name).write_bytes(b"leftover")
    return dest


@pytest.mark.slow
def test_wheel_and_sdist_carry_the_package_its_data_and_licences_only(tmp_path):
    """Both distributions, built from a checkout with leftovers: every tracked package file, no leftover, no tests;
    the licences, classifiers, entry point and ``Requires-Python`` in the metadata."""
    src = _source_copy(tmp_path / "src")
    out = tmp_path / "dist"
    for hook in ("build_wheel", "build_sdist"):  # one process each: the backend runs setup() once per process
        r = subprocess.run([sys.executable, "-c", f"import sys; from setuptools import build_meta; "
                            f"build_meta.{hook}(sys.argv[1])", str(out)], cwd=src, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, (hook, (r.stdout + r.stderr)[-3000:])
    (wheel,), (sdist,) = out.glob("monai_unc-*.whl"), out.glob("monai_unc-*.tar.gz")
    expected = _tracked_package_files() | {"monai_unc/py.typed"}

    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        (info,) = {n.split("/", 1)[0] for n in names if ".dist-info/" in n}
        meta = email.message_from_bytes(z.read(f"{info}/METADATA"))
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    package = {n for n in names if not n.startswith(info + "/")}
    assert package == expected, (f"missing: {sorted(expected - package)}; "
                                 f"not the package's: {sorted(package - expected)}")
    assert {f"{info}/licenses/LICENSE", f"{info}/licenses/monai_unc/report/assets/NIIVUE_LICENSE.txt"} <= names
    assert meta["License-Expression"] == PROJECT["license"]
    assert sorted(meta.get_all("License-File")) == sorted(PROJECT["license-files"])
    assert meta.get_all("Classifier") == PROJECT["classifiers"]
    assert meta["Requires-Python"] == PROJECT["requires-python"]
    assert re.search(r"^monai-unc = monai_unc\.cli:main$", entry_points, re.M), entry_points

    with tarfile.open(sdist) as t:
        top = sdist.name.removesuffix(".tar.gz")
        files = {m.name.removeprefix(top + "/") for m in t.getmembers() if m.isfile()}
    sdist_package = {n for n in files if n.startswith("monai_unc/")}
    assert sdist_package == expected, (f"missing: {sorted(expected - sdist_package)}; "
                                       f"not the package's: {sorted(sdist_package - expected)}")
    assert {"LICENSE", "pyproject.toml", "README.md", "PKG-INFO"} <= files
    assert not any(n.startswith("tests/") or "__pycache__" in n for n in files), sorted(files)
