"""A plain install runs the demo (issue #40): ``pip install monai-unc`` then ``monai-unc demo --quick``.

The test builds the wheel from this checkout, creates a fresh virtual environment (``python -m venv``), installs
``torch==2.14.1`` with ``torchvision==0.29.1`` first (the install order of the Makefile and README: nnU-Net v2
needs a torchvision built for the installed torch; pip takes them from the same indexes and find-links as
``make install``, i.e. pip's own configuration), then the wheel with its default dependencies only (no extra:
no ``dev``, ``examples``, ``nnunet``, ...), and runs ``<venv>/bin/monai-unc demo --quick`` to completion from a
folder outside the checkout, with ``PYTHONPATH`` unset so that only the installed package is imported.

Shortcut for the pins: when the interpreter running the tests has ``torch`` and ``torchvision`` at exactly the
pinned versions (the project's ``.venv``: installing the pins from the index is ``make install``'s first step, which
CI runs before the suite), the pins and their dependency closure (from their metadata, markers and extras evaluated)
are put into the fresh venv's ``site-packages`` as hard links of the installed files, ``*.dist-info`` folders
included, before the same ``pip install`` of the pins runs: pip finds them installed (it still installs what the
closure lacks or upgrades what the fresh venv's own ``setuptools`` does not satisfy) instead of unzipping ~5 GB of
torch and CUDA wheels again (linking and pip's check: ~10 s instead of ~70 s on a loaded 2-core machine). Hard
links, never symbolic links: pip removing a linked file in the fresh venv (an uninstall, an upgrade) unlinks its
name there and leaves the project's file alone, and nothing writes into an installed file in place. Without that
interpreter (other versions, a ``--user`` install) or where a link cannot be made (another filesystem), the pins are
installed from the index as before. The wheel and its default dependencies are always installed by pip from the
index, onto those pins, and the demo runs from the fresh venv only.

It takes a few minutes and runs in CI with the rest of the slow tests. Without access to the package index pip
fails and so does the test, with pip's last lines in the message: a plain install that cannot be checked is a
failure, not a skip. Set ``MONAI_UNC_SKIP_INSTALL_TEST=1`` to skip it (a machine without the index, or a quick
local run).
"""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests._paths import ROOT

#: set to 1 to skip this test (module docstring)
SKIP_ENV = "MONAI_UNC_SKIP_INSTALL_TEST"
#: installed before the wheel, as `make install` does (README, "Install by hand")
TORCH_PINS = ("torch==2.14.1", "torchvision==0.29.1")
#: the longest each step may take (seconds): a registry that hangs fails the test instead of stalling CI
STEP_TIMEOUT = 900

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get(SKIP_ENV, "").strip() == "1", reason=f"{SKIP_ENV}=1"),
]


def _env() -> dict[str, str]:
    """The environment of the steps: no ``PYTHONPATH`` (the checkout must not shadow the installed wheel), no active
    virtual environment; one thread per process, as under pytest-xdist also when the test runs alone (what it checks
    does not depend on the thread count; on a busy 2-core machine the demo's threads mostly waited for each other)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def _run(cmd: list[str], what: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run one step; fail with its command and the last lines of its output when it exits non-zero."""
    r = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=STEP_TIMEOUT)
    if r.returncode != 0:
        tail = "\n".join((r.stdout + "\n" + r.stderr).strip().splitlines()[-25:])
        pytest.fail(f"{what} failed (rc {r.returncode}): {' '.join(cmd)}\n{tail}", pytrace=False)
    return r


def _source_copy(dest: Path) -> Path:
    """The files a wheel is built from (the top-level files and ``monai_unc/``), copied so that the build leaves
    nothing (``build/``, ``*.egg-info``) in the checkout."""
    dest.mkdir()
    for item in ROOT.iterdir():
        if item.is_file():
            shutil.copy2(item, dest / item.name)
    shutil.copytree(ROOT / "monai_unc", dest / "monai_unc", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def _build_wheel(tmp_path: Path) -> Path:
    """The wheel of this checkout, built from a copy of its sources into ``tmp_path / "wheels"``."""
    src = _source_copy(tmp_path / "src")
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(src)], "building the wheel",
         tmp_path)
    (wheel,) = wheels.glob("monai_unc-*.whl")
    return wheel


def test_plain_install_runs_the_demo(tmp_path):
    """Wheel with default dependencies only, in a fresh venv: ``monai-unc demo --quick`` (two samples) runs to
    completion."""
    venv = tmp_path / "venv"
    # the wheel is built (~8 s, mostly waiting for pip's build environment) while the venv is made and torch
    # installed: neither needs the other; a failed build fails the test when the wheel is needed
    with ThreadPoolExecutor(max_workers=1) as pool:
        wheel = pool.submit(_build_wheel, tmp_path)
        try:
            _install_and_run_the_demo(venv, wheel.result, tmp_path)
        finally:  # ~6 GB (torch): not kept among pytest's last three temporary folders
            _remove_without_waiting(venv)


def _remove_without_waiting(folder: Path) -> None:
    """Delete ``folder`` (the venv: ~20 000 files, ~6 GB) in a background ``rm -rf`` that outlives the test.

    Deleting it is 15-30 s of waiting on the disk's journal with next to no CPU (``sys`` ~1.5 s), which the test
    need not wait for: nothing reads the folder afterwards. ``sh`` starts ``rm`` in the background and exits at
    once (no child left for the test to reap); ``shutil.rmtree`` where there is no ``sh``/``rm`` (Windows).
    """
    sh, rm = shutil.which("sh"), shutil.which("rm")
    if os.name == "nt" or sh is None or rm is None:
        shutil.rmtree(folder, ignore_errors=True)
        return
    subprocess.run([sh, "-c", '"$0" -rf -- "$1" </dev/null >/dev/null 2>&1 &', rm, str(folder)], check=False,
                   timeout=60)


def _closure(pins: tuple[str, ...]) -> list[md.Distribution] | None:
    """The installed distributions of ``pins`` (``name==version``) and of their dependencies, in this interpreter's
    environment (markers evaluated, extras followed); ``None`` when a pin is missing or at another version, or when
    a dependency is not installed here."""
    found: dict[str, md.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = []
    for pin in pins:
        name, version = pin.split("==")
        try:
            if md.version(name) != version:
                return None
        except md.PackageNotFoundError:
            return None
        todo.append((name, ""))
    while todo:
        name, extra = todo.pop()
        if (canonicalize_name(name), extra) in done:
            continue
        done.add((canonicalize_name(name), extra))
        try:
            dist = found.setdefault(canonicalize_name(name), md.distribution(name))
        except md.PackageNotFoundError:
            return None
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo += [(req.name, "")] + [(req.name, e) for e in sorted(req.extras)]
    return list(found.values())


def _link_installed_pins(venv_py: Path, tmp_path: Path) -> int:
    """Hard-link the pins' closure (:func:`_closure`) from this interpreter's environment into the fresh venv of
    ``venv_py`` (module docstring); the number of files linked, 0 when the shortcut does not apply (nothing linked).

    Distributions the fresh venv already has (its own ``pip``, ``setuptools``) are left to pip. Files outside
    ``site-packages`` (console scripts in ``bin/``, whose first line names this interpreter) are not linked: the
    test runs none of them. An ``OSError`` while linking propagates; the caller starts over with a fresh venv.
    """
    dists = _closure(TORCH_PINS)
    if dists is None:
        return 0
    r = _run([str(venv_py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib']); "
              "print(sysconfig.get_paths()['platlib'])"], "reading the venv's site-packages", tmp_path)
    purelib, platlib = (Path(p) for p in r.stdout.split())
    if purelib != platlib:  # a layout this shortcut does not handle: pip installs the pins
        return 0
    present = {canonicalize_name(d.metadata["Name"]) for d in md.distributions(path=[str(purelib)])}
    plan: dict[Path, Path] = {}  # destination -> source (a file two distributions list is linked once)
    for dist in dists:
        if canonicalize_name(dist.metadata["Name"]) in present:
            continue
        base = Path(dist.locate_file(""))
        for f in dist.files or []:
            if f.parts and f.parts[0] == "..":
                continue
            src = base / f
            if src.is_file():
                plan.setdefault(purelib / f, src)
    if not plan or os.stat(next(iter(plan.values()))).st_dev != os.stat(purelib).st_dev:
        return 0
    for dst, src in plan.items():
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.link(src, dst)
    return len(plan)


def _install_and_run_the_demo(venv: Path, wheel: Callable[[], Path], tmp_path: Path) -> None:
    """Create ``venv``, install the pins (hard-linked from this interpreter's environment where they are installed
    there, :func:`_link_installed_pins`) then the wheel (``wheel()``: its path, once built) into it, and run the
    demo (the body of the test)."""
    _run([sys.executable, "-m", "venv", str(venv)], "creating the virtual environment", tmp_path)
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    py = bindir / "python"
    try:
        _link_installed_pins(py, tmp_path)
    except OSError:  # a link failed part-way: a fresh venv, and pip installs the pins
        shutil.rmtree(venv)
        _run([sys.executable, "-m", "venv", str(venv)], "creating the virtual environment", tmp_path)
    # --no-compile: no byte-compiling of every module of torch (most are never imported); pip's output is kept short
    pip = [str(py), "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check"]
    _run(pip + list(TORCH_PINS), "installing " + " ".join(TORCH_PINS), tmp_path)
    built = wheel()
    with zipfile.ZipFile(built) as z:  # found by hostile testing: the project's licence text was in neither file
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in z.namelist()), "no LICENSE in the wheel"
    _run(pip + [str(built)], f"installing {built.name} (default dependencies only)", tmp_path)

    # the installed package is imported, not the checkout; no extra came along
    r = _run([str(py), "-c", "import importlib.util as u, monai_unc; print(monai_unc.__file__); "
              "print(u.find_spec('nnunetv2') is None, u.find_spec('pytest') is None)"], "importing monai_unc", tmp_path)
    where, no_extras = r.stdout.strip().splitlines()
    assert Path(where).resolve().is_relative_to(venv.resolve()), where
    assert no_extras == "True True", "an extra was installed with the default dependencies"
    # the formats docs/cli.md lists read after a plain install (found by hostile testing: .mha needed SimpleITK,
    # which only nnU-Net's extra brought)
    r = _run([str(py), "-c", "import os, sys, numpy as np, SimpleITK as s; from monai_unc.io import read_volume; "
              "p = os.path.join(sys.argv[1], 'a.mha'); "
              "s.WriteImage(s.GetImageFromArray(np.zeros((3, 4, 5), np.float32)), p); print(read_volume(p)[0].shape)",
              str(tmp_path)], "reading a .mha file", tmp_path)
    assert r.stdout.strip().splitlines()[-1] == "(1, 5, 4, 3)", r.stdout

    out = tmp_path / "demo_output"
    # two samples instead of --quick's eight: every code path of the demo with a quarter of its forward passes (the
    # demo's own figures are checked by tests/workflows/test_demo.py; this test is about the default dependencies)
    r = _run([str(bindir / "monai-unc"), "demo", "--quick", "--samples", "2", "--output", str(out)],
             "monai-unc demo --quick --samples 2", tmp_path)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stdout.strip().splitlines()
    report = out / "report" / "report.html"
    assert lines[-1] == f"report: {report.resolve()}", lines[-5:]
    assert any(line.startswith("triage page: ") for line in lines), lines
    assert report.is_file() and (out / "demo_summary.json").is_file()
