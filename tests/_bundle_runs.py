"""``python -m monai.bundle run`` for the bundle tests: one run per process as a user types it, or several runs in one
process (each parsed by ``fire`` exactly as ``python -m monai.bundle`` parses its command line) so that the runs of
one test, or of one shared fixture, pay the ~10 s start-up of torch/MONAI/monai_unc once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests._paths import ROOT

#: the child of :func:`run_bundles`: each command line goes to ``fire`` with the namespace of ``monai.bundle``'s
#: ``__main__`` (what ``python -m monai.bundle`` hands to ``fire.Fire()``), one after the other
_MANY = """
import json, sys
import fire
import monai.bundle.__main__ as bundle_main
for i, argv in enumerate(json.loads(sys.argv[1])):
    print(f"=== bundle run {i}: {argv}", flush=True)
    print(f"=== bundle run {i}: {argv}", file=sys.stderr, flush=True)
    fire.Fire(bundle_main, command=argv)
"""


def bundle_argv(config: str | list[str], *overrides: str, meta_file: Path | None = None) -> list[str]:
    """The arguments after ``python -m monai.bundle`` of one ``run``."""
    files = config if isinstance(config, str) else "[" + ",".join(f"'{c}'" for c in config) + "]"
    argv = ["run", "--config_file", files, *overrides]
    if meta_file is not None:
        argv += ["--meta_file", str(meta_file)]
    return argv


def _check(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"bundle run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc


def run_bundle(config: str | list[str], *overrides: str, meta_file: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m monai.bundle run`` from the repository root, as a user would."""
    cmd = [sys.executable, "-m", "monai.bundle", *bundle_argv(config, *overrides, meta_file=meta_file)]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return _check(subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=900))


def run_bundles(*argvs: list[str]) -> subprocess.CompletedProcess:
    """Several ``run`` command lines (from :func:`bundle_argv`) one after the other in one process from the repository
    root; fails on the first that fails."""
    cmd = [sys.executable, "-c", _MANY, json.dumps(list(argvs))]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return _check(subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=900 * len(argvs)))
