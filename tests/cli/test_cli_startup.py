"""``monai-unc`` answers ``--help`` and argument errors at once: parsing imports neither torch nor MONAI (nor numpy);
the commands that only read and compute run without MONAI.

What a command imports is only seen in a fresh interpreter: the ``--help`` and argument-error invocations run one after
the other in one, the commands that read and compute in another (modules only accumulate there, so "nothing heavy
loaded after it" is at least as strict as an interpreter per command), each reading ``sys.modules``; the console
script's own ``--help`` runs with ``python -X importtime``. The tests assert on module lists, not on a wall-clock
bound.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from monai_unc import cli
from monai_unc.product import command_products
from tests._paths import ROOT

#: modules whose import takes seconds: none of them may be loaded to print help or refuse an argument
HEAVY = ("torch", "monai", "numpy", "nibabel", "scipy")
#: run main() as the console script does
MAIN = "import sys; from monai_unc.cli import main; sys.exit(main())"


def _commands() -> list[str]:
    parser, _ = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return list(sub.choices)


def _run(argv: list[str], script: Path | None = None) -> tuple[subprocess.CompletedProcess, set[str], float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    prog = [str(script)] if script is not None else ["-c", MAIN]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", *prog, *argv], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    seconds = time.perf_counter() - t0
    modules = {m.group(1).strip() for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", proc.stderr,
                                                      re.MULTILINE)}
    return proc, modules, seconds


def _heavy(modules: set[str] | list[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def _help_argvs() -> list[list[str]]:
    return [["--help"], *([c, "--help"] for c in _commands())]


#: runs each argv of a JSON list in this one fresh interpreter, one after the other, as ``monai-unc <argv>`` does
#: (argparse's exits caught), and prints per argv a JSON line: its exit status, stdout, stderr, and the modules of
#: HEAVY loaded so far (modules only accumulate: none loaded after an argv means none of the argvs up to it loaded
#: one); then, last, whether importing ``monai_unc.nnunet`` (where nnunetv2 is installed) leaves torch unloaded (its
#: names are resolved in ``command_runs``' interpreter, which has loaded torch and MONAI anyway)
_LIGHT = """
import contextlib, importlib.util, io, json, sys
from monai_unc import cli
HEAVY = tuple(json.loads(sys.argv[2]))
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as e:
            code = e.code
    print(json.dumps({"argv": argv, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
                      "heavy": sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)}))
import numpy  # the control: the same reading sees a module of HEAVY once one is loaded
print(json.dumps({"control": sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)}))
if importlib.util.find_spec("nnunetv2") is not None:
    import monai_unc.nnunet
    print(json.dumps({"nnunet": "torch" not in sys.modules}))
"""


@pytest.fixture(scope="session")
def light_runs(tmp_path_factory) -> dict:
    """Every ``--help``, every command with a flag it does not know and ``--version``, run one after the other in ONE
    fresh interpreter (once per test session: :mod:`tests._shared`; one interpreter start instead of ~30): ``{"
    ".join(argv): its JSON line}``, and under ``"nnunet"`` whether torch was still unloaded after importing the
    nnU-Net package (absent without nnunetv2). What a command imports is only seen in a fresh process; the modules
    of all the argvs accumulate there, so each check below (nothing of HEAVY loaded yet after its argv) is at least as
    strict as one interpreter per argv."""
    from tests._shared import once_per_session

    argvs = [*_help_argvs(), *([c, "--no-such-flag"] for c in _commands()), ["--version"]]

    def run(_folder):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-c", _LIGHT, json.dumps(argvs), json.dumps(HEAVY)],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        runs = {" ".join(r["argv"]): r for r in lines if "argv" in r}
        assert [r["argv"] for r in lines if "argv" in r] == argvs
        for r in lines:
            for key in ("nnunet", "control"):
                if key in r:
                    runs[key] = r[key]
        return runs

    return once_per_session(tmp_path_factory, "cli_startup_light_runs", run)[1]


def test_every_command_is_listed():
    names = _commands()
    assert {"infer", "evaluate", "report", "calibrate", "demo", "triage", "conformal"} <= set(names)
    assert set(cli.NNUNET_COMMANDS) <= set(names)


@pytest.mark.parametrize("argv", _help_argvs(), ids=lambda a: " ".join(a))
def test_help_imports_neither_torch_nor_monai(argv, light_runs):
    r = light_runs[" ".join(argv)]
    assert r["code"] == 0, r["stderr"][-2000:]
    assert "usage: monai-unc" in r["stdout"]
    assert "numpy" in light_runs["control"]  # the reading sees a heavy module once loaded (the check below can fail)
    assert not _heavy(r["heavy"]), f"monai-unc {' '.join(argv)} (or an argv before it) imported {_heavy(r['heavy'])}"


@pytest.mark.parametrize("command", _commands())
def test_argument_error_exits_2_without_torch_or_monai(command, light_runs):
    r = light_runs[f"{command} --no-such-flag"]
    assert r["code"] == 2, r["stderr"][-2000:]
    assert re.search(rf"^monai-unc( {command})?: error: .*--no-such-flag|required", r["stderr"], re.MULTILINE)
    assert "numpy" in light_runs["control"]
    assert not _heavy(r["heavy"]), f"monai-unc {command} --no-such-flag (or an argv before it) imported {r['heavy']}"


def test_version_is_the_package_version_and_light(light_runs):
    """``monai-unc --version`` prints the version that every record names (``monai_unc.__version__``, the one that
    pyproject.toml gives the installed distribution), without importing torch or MONAI."""
    import monai_unc

    r = light_runs["--version"]
    assert r["code"] == 0, r["stderr"][-2000:]
    assert r["stdout"].strip() == f"monai-unc {monai_unc.__version__}"
    assert "numpy" in light_runs["control"]
    assert not _heavy(r["heavy"])
    declared = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert declared is not None and declared.group(1) == monai_unc.__version__


def test_console_script_help_is_light():
    script = shutil.which("monai-unc") or str(Path(sys.executable).with_name("monai-unc"))
    if not Path(script).is_file():
        pytest.skip("the monai-unc console script is not installed")
    proc, modules, seconds = _run(["evaluate", "--help"], Path(script))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--predictions" in proc.stdout
    assert "monai_unc.cli" in modules
    assert not _heavy(modules), f"monai-unc evaluate --help ({seconds:.2f} s) imported {_heavy(modules)}"


def test_a_command_still_gets_torch_and_its_names(monkeypatch):
    """The names the commands run on are imported after parsing, and are module attributes as before (a
    ``monkeypatch`` of one survives the import)."""
    assert callable(cli.run_demo) and callable(cli._read_case_list)
    cli._import_commands()
    for name in cli._COMMAND_NAMES:
        assert name in vars(cli), name
    monkeypatch.setattr(cli, "run_demo", "patched")
    cli._import_commands()
    assert cli.run_demo == "patched"
    with pytest.raises(AttributeError):
        cli.no_such_name  # noqa: B018


def test_nnunet_package_names_load_on_first_access(light_runs, command_runs):
    """``from monai_unc.nnunet import X`` works for every public name, though the package imports them lazily:
    importing the package loads no torch (checked last in the interpreter of ``light_runs``), and every name resolves
    on first access (checked last in the interpreter of ``command_runs``, where no module of ``monai_unc.nnunet`` had
    been imported: the names load torch and MONAI, which that interpreter had loaded anyway, so no interpreter starts
    for this alone)."""
    if "nnunet" not in light_runs:  # that interpreter found no nnunetv2 (read there: no import of it here)
        pytest.skip("could not import 'nnunetv2'")
    assert light_runs["nnunet"] is True
    assert command_runs["nnunet"] == [[], [], "monai_unc.nnunet.predictor", "monai_unc.nnunet.export"]


#: command -> the workflow module it runs on: the commands that only read and compute, which start without MONAI
#: (``import monai`` loads every MONAI submodule: seconds); a product's command runs on ``workflows.apply``
READ_AND_COMPUTE = {"evaluate": "evaluate", "report": "report", "triage": "triage", "dicom-export": "dicom",
                    "monitor": "monitor", "keys": "keys",
                    **{str(cls.command): "apply" for cls in command_products()}}


def _failing_argv(command: str, tmp: Path) -> list[str]:
    """Arguments that parse, then make ``command`` fail on its input once its workflow runs (exit status 2)."""
    empty = tmp / "empty"
    empty.mkdir(exist_ok=True)
    out = str(tmp / "out")
    if command == "evaluate":
        return [command, "--labels", str(empty), "--predictions", str(empty), "--output", out]
    if command == "report":
        return [command, "--evaluation", str(empty), "--output", out]
    if command == "dicom-export":
        return [command, "--predictions", str(empty), "--series", str(empty), "--output", out]
    if command == "monitor":
        return [command, "status", "--db", str(tmp / "missing.sqlite")]
    if command == "keys":
        return [command, "--show", str(tmp / "missing.pub")]
    return [command, "--predictions", str(empty), "--rule", str(tmp / "missing.json"), "--output", out]  # triage, ...


#: runs each command given as a JSON list of argv lists in this one interpreter, one after the other, and prints
#: per command a JSON line: its exit status, its stdout and stderr, the workflow modules and the MONAI modules loaded
#: so far, and of the modules the checks below look for (``_WATCHED``) those loaded so far and those it loaded itself
_SEQUENCE = """
import contextlib, io, json, sys
from monai_unc import cli
WATCHED = %r
def watched():
    return {m for m in sys.modules if m.split(".")[0] in ("monai", "matplotlib", "nibabel") or m.startswith(WATCHED)}
for argv in json.loads(sys.argv[1]):
    before = watched()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as e:
            code = e.code
    now = watched()
    print(json.dumps({"argv": argv, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
                      "workflows": sorted(m for m in sys.modules if m.startswith("monai_unc.workflows.")),
                      "monai": sorted(m for m in sys.modules if m.split(".")[0] == "monai"),
                      "watched": sorted(now), "new": sorted(now - before)}))
import importlib.util
if importlib.util.find_spec("nnunetv2") is not None:  # the nnU-Net package's lazy names, first loaded here
    loaded = sorted(m for m in sys.modules if m.startswith("monai_unc.nnunet"))
    import monai_unc.nnunet as m
    missing = [n for n in m.__all__ if not hasattr(m, n)]
    print(json.dumps({"nnunet": [loaded, missing, m.UncertaintyPredictor.__module__, m.export.__name__]}))
"""
_WATCHED = ("scipy.stats", "scipy.signal", "monai_unc.workflows.", "monai_unc.metrics.monitoring")


@pytest.fixture(scope="session")
def command_runs(tmp_path_factory) -> dict:
    """The commands that start with torch, run one after the other in ONE fresh interpreter (once per test session:
    :mod:`tests._shared`; one interpreter start with torch instead of four): a real ``evaluate`` on a NIfTI cohort
    first, then each command of ``READ_AND_COMPUTE`` on an input it refuses (``monitor`` first), then ``infer``
    (which imports MONAI) last. ``{"folder": the run's folder, "order": the commands in their order, command: its
    JSON line}`` (``"evaluate-nifti"`` for the real evaluate); under ``"nnunet"`` (where nnunetv2 is installed),
    read after the last command: the ``monai_unc.nnunet`` modules loaded before, the package's public names that did
    not resolve, and the modules of two of them.

    What a command imports is only seen in a fresh process. Modules only accumulate, so "not loaded after this
    command" (checked on the modules loaded so far) is at least as strict as in an interpreter of its own, and "loaded
    by this command" is read from the modules it loaded itself (``"new"``)."""
    from tests._shared import once_per_session

    def run(folder):
        from monai_unc.data.cohorts import write_toy_cohort

        paths = write_toy_cohort(folder / "data", n_cases=3, shape=(10, 10, 10))
        order = ["evaluate-nifti", "monitor", *sorted(set(READ_AND_COMPUTE) - {"monitor"}), "infer"]
        argvs = []
        for c in order:
            (folder / c).mkdir()
            if c == "evaluate-nifti":
                argvs.append(["evaluate", "--labels", str(paths["labels"]), "--predictions",
                              str(paths["predictions"]), "--images", str(paths["images"]), "--output",
                              str(folder / c / "evaluation")])
            elif c == "infer":
                argvs.append(["infer", "--input", str(folder / c / "missing"), "--output", str(folder / c / "out"),
                              "--model", "example"])
            else:
                argvs.append(_failing_argv(c, folder / c))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-c", _SEQUENCE % (_WATCHED,), json.dumps(argvs)], capture_output=True,
                              text=True, env=env, cwd=ROOT, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        results = [r for r in lines if "argv" in r]
        assert [r["argv"] for r in results] == argvs
        nnunet = [r for r in lines if "nnunet" in r]
        return {"order": order, **dict(zip(order, results)), **(nnunet[0] if nnunet else {})}

    folder, runs = once_per_session(tmp_path_factory, "cli_startup_command_runs", run)
    return {"folder": folder, **runs}


def test_read_and_compute_commands_run_without_monai(command_runs):
    """Each command's workflow is imported and runs (it refuses the input: exit 2, one line) without importing MONAI:
    the command line imports the workflow of the command being run only, and those workflows import no MONAI.

    The commands run one after the other in one fresh interpreter (``command_runs``): modules only accumulate, so no
    MONAI module after the last of them means none of them imported it, and the first command after which one appears
    is named. A command whose workflow an earlier command had loaded (``evaluate`` after the real evaluate, which
    imports its workflow itself; the products' commands after ``apply`` was loaded) is known to have run it by its
    one-line refusal of the input, which its workflow says.
    """
    commands = [c for c in command_runs["order"] if c in READ_AND_COMPUTE]
    assert sorted(commands) == sorted(READ_AND_COMPUTE)
    for command in commands:
        r = command_runs[command]
        assert r["code"] == 2, (command, r["stderr"][-2000:])
        errors = r["stderr"].splitlines()
        assert len(errors) == 1 and errors[0].startswith(f"monai-unc {command}: error: "), (command, errors)
        assert f"monai_unc.workflows.{READ_AND_COMPUTE[command]}" in r["workflows"], command  # the workflow ran
        assert not r["monai"], f"monai-unc {command} imported MONAI: {r['monai'][:5]}"


def test_infer_imports_its_workflow_and_monai(command_runs):
    """``infer`` runs networks: its workflow (and MONAI) is imported as before, and its refusal is one line (the check
    above sees MONAI where it is imported). Run last in ``command_runs``: MONAI and its workflow are among the
    modules it loaded itself."""
    r = command_runs["infer"]
    assert command_runs["order"][-1] == "infer"
    assert r["code"] == 2, r["stderr"][-2000:]
    assert "--input folder not found" in r["stderr"]
    assert {"monai", "monai_unc.workflows.infer_plan"} <= set(r["new"])


def test_evaluate_on_nifti_runs_without_monai(command_runs):
    """A real ``evaluate`` on a NIfTI cohort (labels, probabilities, segmentations, maps and images, all read by
    ``read_volume``'s NIfTI path, which uses nibabel alone) runs to the end without importing MONAI (the first
    command of ``command_runs``)."""
    r = command_runs["evaluate-nifti"]
    out = command_runs["folder"] / "evaluate-nifti" / "evaluation"
    assert command_runs["order"][0] == "evaluate-nifti"
    assert r["code"] == 0, r["stderr"][-2000:]
    assert (out / "metrics.csv").is_file() and (out / "summary.json").is_file()
    assert "3 case(s)" in r["stdout"]
    assert {"monai_unc.workflows.evaluate", "nibabel"} <= set(r["new"])  # the workflow ran and read NIfTI files
    monai = [m for m in r["watched"] if m.split(".")[0] == "monai"]
    assert not monai, f"monai-unc evaluate imported MONAI: {monai[:5]}"
    # nor what it does not use (about 1 s each): the report's matplotlib (no <output>/report to check) and
    # scipy.stats (the tests and risk bounds of comparisons and risk control, not computed by a plain evaluate)
    unused = [m for m in r["watched"] if m.split(".")[0] == "matplotlib" or m.startswith("scipy.stats")]
    assert not unused, f"monai-unc evaluate imported {unused[:5]}"


@pytest.mark.slow  # one interpreter start with torch (~3 s): what a monitor command imports is only seen in a fresh one
def test_monitor_imports_neither_scipy_signal_nor_stats(command_runs):
    """Hostile review of review 65: ``risk_bets``' lfilter was imported with ``monai_unc.metrics.monitoring``, so every
    ``monai-unc monitor`` command loaded scipy.signal and with it scipy.stats (~0.4 s), which the same review had
    taken off the other commands; the bets import it when they run. (``command_runs`` runs it second, after an
    evaluate that is checked to load no scipy.stats: what is loaded after it is at least what it loaded.)"""
    r = command_runs["monitor"]
    assert command_runs["order"][1] == "monitor"
    assert r["code"] == 2, r["stderr"][-2000:]
    assert {"monai_unc.workflows.monitor", "monai_unc.metrics.monitoring"} <= set(r["new"])  # the workflow ran
    unused = [m for m in r["watched"] if m.startswith(("scipy.signal", "scipy.stats"))]
    assert not unused, f"monai-unc monitor status (or the evaluate before it) imported {unused[:5]}"
