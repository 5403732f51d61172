"""The ``monai-unc`` command line.

    monai-unc infer     --input IMAGES --output PRED (--model example | --bundle DIR | --network SPEC --checkpoint F)
    monai-unc evaluate  --labels LABELS --predictions PRED --output EVAL [--shifts shifts.csv] [--budget 0.2]
                        [--target-risk 0.1 --delta 0.1 --risk failure|1-dice --calibration-cases FILE]
                        [the options of the cohort products: monai-unc evaluate --help]
    monai-unc report    --evaluation EVAL [--output DIR] [--budget 0.2] [--images IMAGES] [--target-risk ...]
    monai-unc calibrate --input IMAGES --labels LABELS --output calibrated.pt (model options as for infer)
    monai-unc demo      [--output demo_output] [--quick] [--device cpu]
    monai-unc triage    --predictions PRED --rule referral_rule.json --output TRIAGE [--images IMAGES]
                        [--<command>-rule RULE: a product's command run beside the triage]
    monai-unc <command> --predictions PRED --rule RULE --output OUT   (a product's rule applied: monai-unc --help)
    monai-unc dicom-export --predictions PRED --series SERIES --output DICOM   (with the dicom extra: SEG, maps)
    monai-unc monitor   record TRIAGE --db DB [--site S | --sites CSV] | label --labels CSV --db DB
                        | status --db DB | report --db DB --output PAGE.html | verify --db DB
    monai-unc nnunet-predict ...        (with the nnunet extra: nnU-Net v2 prediction with uncertainty)

``infer`` writes uncertainty maps, probabilities and segmentations per case (resumable, atomic, never into the
input folder); ``evaluate`` writes ``metrics.csv`` (per case) and ``summary.json`` (cohort); ``report`` writes a
self-contained ``report.html``; ``demo`` runs all three on the shipped MNI152 example. See docs/cli.md.

Exit status: 0 on success, 1 when some cases failed (one stderr line per case with its id, ``failures.json`` in the
output folder; the other cases are done), 2 for bad arguments or inputs, or a package the command needs that is not
installed (one line on stderr; it names what to ``pip install``), 130 when interrupted
(run the same command again to resume). ``infer`` and ``evaluate`` also run under ``torchrun``: each rank takes a
shard of the cases and the results equal a single-process run (docs/distributed.md).

This module parses and prints: the options of each command are :mod:`monai_unc.workflows.arguments` (light, so that
``--help`` and argument errors answer without torch or MONAI), and each command is its workflow on the parsed
arguments (``<command>_from_arguments``: :func:`monai_unc.workflows.evaluate.evaluate_from_arguments`, ...), which
returns a :class:`~monai_unc.workflows.session.CommandResult` whose ``lines`` rank 0 prints.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import select
import sys
import traceback
import warnings
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from . import __version__
from ._frames import first_frame_outside_package, in_package
from .keys import did_you_mean
from .product import command_product, command_products
from .workflows.arguments import add_command_parsers

if TYPE_CHECKING:  # imported after parsing, by _import_commands: --help and argument errors answer at once
    from .workflows.demo import run_demo
    from .workflows.prepare import error_text
    from .workflows.session import CohortFailed, CommandResult

__all__ = ["main", "build_parser", "run_demo"]

#: sub-commands provided by monai_unc.nnunet.cli (registered only when nnU-Net v2 imports)
NNUNET_COMMANDS = ("nnunet-predict", "nnunet-dropout-plans", "nnunet-calibrate")


#: the ``nargs`` of an option that takes its values as a list (``--roi 64 64 32``): given twice, argparse keeps the
#: last list; such an option is not one of :func:`_single_valued` (its repetition is left as argparse has it)
_LIST_NARGS = (argparse.ONE_OR_MORE, argparse.ZERO_OR_MORE, argparse.REMAINDER, argparse.PARSER)


def _single_valued(action: argparse.Action) -> bool:
    """Whether ``action`` is an option that takes one value, which a second occurrence would silently replace.

    An option stored as given (``store``, ``nargs`` None, ``'?'`` or a number); not a list option (``nargs`` ``'+'``
    or ``'*'``), an ``append`` / ``extend`` / ``count`` option, a flag (``store_true``, ``store_false``,
    ``store_const``: given twice it says the same thing twice, which is harmless) nor a positional argument.
    """
    return (bool(action.option_strings) and isinstance(action, argparse._StoreAction)
            and action.nargs not in _LIST_NARGS)


def _once(action: argparse.Action) -> None:
    """Make the single-valued option ``action`` refuse a second occurrence in one parse (idempotent).

    Its class becomes a subclass of its own whose call records the option in the parser that parses it
    (:attr:`_Parser._given`, by destination, so that ``-o`` and ``--output``, or an abbreviation such as ``--out``,
    count as one option) and raises argparse's error when it was already given: ``argument --output/-o: given more
    than once (as -o and as --output): give it once`` (earlier versions silently ran 3 for ``--samples 2 --samples 3``).
    """
    base = type(action)
    if getattr(base, "_once", False):
        return

    def call(self: Any, parser: Any, namespace: Any, values: Any, option_string: Any = None,
             _base: type = base) -> None:
        given = getattr(parser, "_given", None)
        if given is not None:
            first = given.get(self.dest)
            if first is not None:
                typed = f" (as {first} and as {option_string})" if first != option_string else ""
                raise argparse.ArgumentError(self, f"given more than once{typed}: give it once")
            given[self.dest] = option_string or self.dest
        _base.__call__(self, parser, namespace, values, option_string)

    action.__class__ = type(f"Once{base.__name__}", (base,), {"__call__": call, "_once": True})


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error message (exit status 2), whose single-valued options are given once.

    A single-valued option (:func:`_single_valued`) given twice, in any of its spellings (``--output a --output b``,
    ``-o a --output=b``, ``-oa -ob``), is an error naming it (exit status 2) where argparse would keep the last value
    without a word; list, ``append`` and ``count`` options and flags are parsed as argparse does. Every command's
    parser is one (the sub-parsers are of the class of the parser that holds them).
    """

    #: the options given in the parse under way: destination -> the option string it was first given as
    _given: dict[str, str] | None = None

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """:meth:`argparse.ArgumentParser.parse_args`, whose unrecognized arguments are refused by their command.

        argparse's sub-parsers hand the arguments they do not know to the top parser, which refused them as
        ``monai-unc: error: unrecognized arguments: ...`` for every command (in earlier versions ``demo --device
        cuda``, an option demo did not have, named no command); the command's own parser refuses them now
        (``monai-unc demo: error: unrecognized arguments: --bogus (see monai-unc demo --help)``).
        """
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            (_command_parser(self, parsed) or self).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def parse_known_args(self, args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        """:meth:`argparse.ArgumentParser.parse_known_args`, refusing a single-valued option given twice."""
        for action in self._actions:  # at parse time: the options a product or a test added after building count
            if _single_valued(action):
                _once(action)
        outer, self._given = self._given, {}
        try:
            return super().parse_known_args(args, namespace)
        finally:
            self._given = outer

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """The choice check of argparse, whose error proposes the closest choices (``did you mean 'nnunet'?``).

        Every choice option of every command (and the command names themselves) goes through it.
        """
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as e:
            if action.choices is None or not isinstance(value, str):
                raise
            raise argparse.ArgumentError(action, e.message + did_you_mean(value, map(str, action.choices))) from None


class _DefaultsFormatter(argparse.HelpFormatter):
    """Help that shows every option's default: ``(default: X)`` where the help text does not already say it.

    Like :class:`argparse.ArgumentDefaultsHelpFormatter`, without its noise: a default of None (the option's absence,
    which the help describes), of False (a flag) or empty is not shown, nor one of a help text that names its default
    in its own words (``default: the evaluation's``). Lists are shown as they are typed (``folds mirroring``).
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        default = action.default
        if (text is None or text == argparse.SUPPRESS or not action.option_strings or action.nargs == 0
                or default is None or default is False or default == argparse.SUPPRESS
                or (isinstance(default, (str, list, tuple)) and not default) or "default" in text.lower()):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` and every sub-parser below it :class:`_DefaultsFormatter`."""
    parser.formatter_class = _DefaultsFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _show_defaults(child)


def _add_nnunet(sub: Any, wanted: str | None, help_only: bool = False) -> Any:
    """Register the nnU-Net sub-commands; the real parser (which imports nnU-Net v2) only when one is run.

    With ``help_only`` (``nnunet-predict --help``) and nnU-Net v2 not installed, the parsers are still made, so that
    the help answers as ``dicom-export --help`` does without its extra (earlier versions exited 2 with the
    extra's message); running the command says what to install.
    """
    if wanted in NNUNET_COMMANDS:
        try:
            from .nnunet import cli as nnunet_cli  # ImportError without nnunetv2: reported by main()
        except ImportError:
            if not help_only:
                raise
            _nnunet_help_parsers(sub)
            return None
        nnunet_cli.add_parser(sub)
        return nnunet_cli
    sub.add_parser("nnunet-predict", help="nnU-Net v2 prediction with uncertainty maps (needs the nnunet extra)",
                   add_help=False)
    sub.add_parser("nnunet-dropout-plans", help="nnU-Net plans with dropout for training (needs the nnunet extra)",
                   add_help=False)
    sub.add_parser("nnunet-calibrate", help="fit temperatures on nnU-Net validation outputs (needs the nnunet extra)",
                   add_help=False)
    return None


def _nnunet_help_parsers(sub: Any) -> None:
    """Register the nnU-Net sub-commands' parsers without nnU-Net v2, for their ``--help``.

    The package :mod:`monai_unc.nnunet` refuses to import without nnU-Net v2, but its parsers
    (``monai_unc/nnunet/cli.py`` and the choices of ``monai_unc/nnunet/names.py``) need only the standard library
    and :mod:`monai_unc.keys`: both files are run outside their package, and taken out of ``sys.modules`` again, so
    that a later ``import monai_unc.nnunet`` still fails as it must. Each help ends with what to install.
    """
    import importlib.util

    folder = Path(__file__).resolve().parent / "nnunet"
    names = ("monai_unc.nnunet.names", "monai_unc.nnunet.cli")
    saved = {name: sys.modules.get(name) for name in names}
    try:
        for name in names:
            spec = importlib.util.spec_from_file_location(name, folder / f"{name.rsplit('.', 1)[1]}.py")
            if spec is None or spec.loader is None:  # pragma: no cover - the package's own files
                raise ImportError(f"cannot load {name}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # the absolute import of names by cli finds it without the package
            spec.loader.exec_module(module)
        module.add_parser(sub)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:  # pragma: no cover - imported already: nnU-Net v2 is installed
                sys.modules[name] = module
    for command in NNUNET_COMMANDS:
        sub.choices[command].epilog = f"needs the nnunet extra: pip install {_PIP_NAMES['nnunetv2']}"


def build_parser(command: str | None = None, *, help_only: bool = False) -> tuple[argparse.ArgumentParser, Any]:
    """The argument parser of ``monai-unc``, and the nnU-Net CLI module when ``command`` is one of its sub-commands.

    Building it imports neither torch nor MONAI, so ``--help`` and argument errors answer at once.

    Args:
        command: the sub-command about to be parsed (the first argument that is not an option), or None. An
            nnU-Net sub-command (``nnunet-predict``) imports its module, which needs the ``nnunet`` extra.
        help_only: the arguments ask for the command's help (``-h``, ``--help``): an nnU-Net sub-command's parser is
            made without the ``nnunet`` extra too (None is returned for its module).

    Returns:
        ``(parser, nnunet_cli)``: the :class:`argparse.ArgumentParser` (one sub-parser per command) and the nnU-Net
        CLI module, or None when ``command`` is not an nnU-Net sub-command.

    Raises:
        ImportError: an nnU-Net sub-command without the ``nnunet`` extra (and without ``help_only``).

    Example:
        >>> parser, nnunet_cli = build_parser()
        >>> args = parser.parse_args(["infer", "--input", "imgs", "--output", "pred", "--model", "example",
        ...                           "--method", "mcdropout+tta", "--roi", "64"])
        >>> args.command, args.method, args.samples, args.roi, nnunet_cli
        ('infer', 'mcdropout+tta', 10, [64], None)
    """
    parser = _Parser(prog="monai-unc", description="Uncertainty for MONAI and nnU-Net segmentation")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    add_command_parsers(sub)  # the options of every command (monai_unc.workflows.arguments, light)
    nnunet_cli = _add_nnunet(sub, command, help_only)
    _show_defaults(parser)  # every option's default in every --help (review 61)
    return parser, nnunet_cli


def _import_commands(command: str | None = None) -> None:
    """Import the workflow of ``command`` (of every command when None) and the names the command line runs on.

    :func:`main` calls it once the arguments are parsed, so that ``monai-unc --help``, ``monai-unc COMMAND --help``
    and an argument error answer at once. It imports only the workflow of the command being run: MONAI (whose
    ``import monai`` loads every submodule: seconds) only for the commands that run networks (``infer``,
    ``calibrate``, ``demo``); ``evaluate``, ``report``, ``triage`` and the other commands that read and compute start
    without it. The first access to one of :data:`_COMMAND_NAMES` as an attribute of this module
    (``monai_unc.cli.run_demo``) imports what that name needs.

    A name or workflow already set (a test's ``monkeypatch``) is kept.

    Args:
        command: the parsed command (a product's command included), or None: every command's workflow (but
            ``dicom-export``'s, which needs the ``dicom`` extra and is imported when it runs).
    """
    _import_names(demo=command in (None, "demo"))
    key = None if command is None else (_PRODUCT_COMMAND if command_product(command) is not None else command)
    for name in _WORKFLOW_KEYS if key is None else (key,):
        if name not in _WORKFLOWS:
            _WORKFLOWS[name] = _import_workflow(name)


def _import_names(demo: bool = False) -> None:
    """Set the names of :data:`_COMMAND_NAMES` in this module (``run_demo`` only with ``demo``), keeping any set."""
    from .workflows.prepare import error_text, read_case_list
    from .workflows.session import CohortFailed

    names = globals()
    names.setdefault("error_text", error_text)
    names.setdefault("CohortFailed", CohortFailed)
    #: kept for callers of the former private helper; :func:`monai_unc.workflows.prepare.read_case_list`
    names.setdefault("_read_case_list", read_case_list)
    if demo:  # the demo's workflow imports MONAI
        from .workflows.demo import run_demo

        names.setdefault("run_demo", run_demo)


def _import_workflow(command: str) -> Callable[[argparse.Namespace], CommandResult]:
    """Import the workflow of one command (its module only), or raise ``KeyError`` for an unknown command."""
    if command == "infer":
        from .workflows.infer_plan import infer_from_arguments as workflow
    elif command == "evaluate":
        from .workflows.evaluate import evaluate_from_arguments as workflow
    elif command == "report":
        from .workflows.report import report_from_arguments as workflow
    elif command == "calibrate":
        from .workflows.calibrate import calibrate_from_arguments as workflow
    elif command == "demo":
        from .workflows.demo import demo_from_arguments as workflow
    elif command == "triage":
        from .workflows.triage import triage_from_arguments as workflow
    elif command == "monitor":
        from .workflows.monitor import monitor_from_arguments as workflow
    elif command == "keys":
        from .workflows.keys import keys_from_arguments as workflow
    elif command == "dicom-export":
        workflow = _dicom_export
    elif command == _PRODUCT_COMMAND:
        from .workflows.apply import apply_from_arguments as workflow
    else:
        raise KeyError(command)
    return workflow


def _run_nnunet(args: argparse.Namespace, nnunet_cli: Any) -> int:
    """Run a parsed nnU-Net sub-command (``nnunet_cli``: :mod:`monai_unc.nnunet.cli`); its exit status.

    ``nnunet-predict --output-format dicom|both`` predicts, then writes the DICOM objects (the ``dicom`` extra).
    """
    if getattr(args, "output_format", "nifti") == "nifti":
        return int(nnunet_cli.run(args))
    try:  # nnunet-predict --output-format dicom|both: the prediction, then its DICOM objects
        from .workflows.dicom import nnunet_predict_dicom
    except ImportError as e:
        return _missing_dependency(args.command, e)
    return nnunet_predict_dicom(args, nnunet_cli.run)


#: the key of the workflow of every product's command (a product registered after the first run has one too)
_PRODUCT_COMMAND = "<product command>"
#: the keys of :data:`_WORKFLOWS`: the commands of :func:`_import_workflow`
_WORKFLOW_KEYS = ("infer", "evaluate", "report", "calibrate", "demo", "triage", "monitor", "keys", "dicom-export",
                  _PRODUCT_COMMAND)
#: command -> its workflow on the parsed arguments, returning a CommandResult (filled by :func:`_import_commands`,
#: with the workflow of the command being run only)
_WORKFLOWS: dict[str, Callable[[argparse.Namespace], CommandResult]] = {}
#: the names :func:`_import_commands` sets (module attributes imported on first access)
_COMMAND_NAMES = frozenset({"CohortFailed", "error_text", "run_demo", "_read_case_list"})


def _dicom_export(args: argparse.Namespace) -> CommandResult:
    """``monai-unc dicom-export``: its workflow is imported only when it runs.

    It needs the ``dicom`` extra; without it the ImportError's one line says what to install.
    """
    from .workflows.dicom import dicom_export_from_arguments

    return dicom_export_from_arguments(args)


def __getattr__(name: str) -> Any:
    """``monai_unc.cli.run_demo`` and the other names of :func:`_import_commands`, imported on first access."""
    if name in _COMMAND_NAMES:
        _import_names(demo=name == "run_demo")
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command's workflow and print its lines on rank 0; its exit status.

    With ``--quiet`` a workflow gives only the lines it must print; its ``warning:`` lines go to stderr.

    The status is 0 unless the workflow says otherwise (``monitor status``: 1 when an alarm is raised).
    """
    command = _PRODUCT_COMMAND if command_product(args.command) is not None else args.command
    if command not in _WORKFLOWS:  # a product registered after the arguments were parsed
        _import_commands(args.command)
    try:
        result = _WORKFLOWS[command](args)
    except (*_INPUT_ERRORS, TypeError) as e:
        if command in _COHORT_COMMANDS:  # under torchrun: a refusal of this rank only must stop the others too
            from .workflows.session import share_refusal

            share_refusal(e, getattr(args, "device", None))
        raise
    if result.is_main:
        from .workflows.session import WARNING_PREFIX

        quiet = bool(getattr(args, "quiet", False))
        for line in result.lines:
            # --quiet keeps stdout free of anything but what the command must print; a warning it still gives (e.g.
            # calibrate's temperature fit that did not converge) goes to stderr, as Python's warnings do
            print(line, file=sys.stderr if quiet and line.startswith(WARNING_PREFIX) else sys.stdout)
    return result.exit_status


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``monai-unc`` console script.

    Torch and the command's workflow are imported only after the arguments are parsed, MONAI only for a command that
    runs a network (``infer``, ``calibrate``, ``demo``). Errors of bad arguments or
    inputs are one stderr line (module docstring), not a traceback; so is a package that the command needs and that
    is not installed (the line names what to ``pip install``; exit status 2). A ``TypeError`` is one line (exit 2)
    when one of the package's checks raised it (a value of the wrong type in an option or a file, named); any other
    ``TypeError`` is a bug and keeps its traceback (:func:`_raised_by_a_check`).

    Args:
        argv: the arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 1 when some cases failed, 2 for bad arguments or inputs, 130 when
        interrupted, 141 (quietly) when the reader of standard output went away (``| head``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    # the first line outside the package that led here (the console script's, runpy's for python -m, a user's
    # script's): a warning the package holds for one call and says once (_utils.said_once_per_call) points there
    caller, _ = first_frame_outside_package(sys._getframe(1))  # the one walk of _utils.user_stacklevel too
    entry = (caller.f_code.co_filename, caller.f_lineno)
    try:  # Ctrl-C at any moment, the seconds of imports after parsing included (found by hostile testing: a
        # traceback and death by SIGINT where the line and exit status 130 are promised)
        try:
            parser, nnunet_cli = build_parser(command, help_only=any(a in ("-h", "--help") for a in argv))
        except ImportError as e:
            print(f"monai-unc {command}: error: {e}", file=sys.stderr)
            return 2
        with warnings.catch_warnings():  # parsing included: a deprecated --measures name warns while it is parsed
            # the package's own deprecations are shown (Python hides a DeprecationWarning raised outside __main__),
            # and every warning of the package is one line (found by testing the docs: `--score <m>_patch` warned
            # nothing)
            if not sys.warnoptions:  # the user's -W / PYTHONWARNINGS decide otherwise (found by hostile testing:
                # `error::DeprecationWarning` in a CI had become a warning line)
                warnings.filterwarnings("default", category=DeprecationWarning, module=r"monai_unc(\.|$)")
            warnings.showwarning = _one_line_warning(command or "", entry)
            return _parse_and_run(parser, nnunet_cli, argv, entry)
    except KeyboardInterrupt:
        return _interrupted(command or "")


def _interrupted(command: str) -> int:
    """Say in one stderr line that ``command`` was interrupted (Ctrl-C) and what to do; the exit status 130.

    A command that resumes says to run it again (``nnunet-predict`` with ``--continue_prediction``; ``dicom-export``
    to complete the folder: the objects of its cases done are written, its manifest is not); the others wrote nothing
    that counts (their files are written atomically, a half-written one under a temporary name).

    Args:
        command: the command's name (``infer``, ``nnunet-predict``, ...; empty before one was given).

    Returns:
        130, the exit status of a command interrupted by Ctrl-C.
    """
    resumable = ("infer", "demo", "evaluate", "triage", *(str(cls.command) for cls in command_products()))
    if command == "nnunet-predict":
        hint = "run the same command again with --continue_prediction to resume"
    elif command == "dicom-export":  # the objects of the cases done are written, the manifest is not (docs/dicom.md)
        hint = "run the same command again to complete the folder"
    elif command in resumable:
        hint = "run the same command again to resume"
    else:
        hint = "nothing was written"
    print(f"{f'monai-unc {command}' if command else 'monai-unc'}: interrupted; {hint}", file=sys.stderr, flush=True)
    return 130


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser | None:
    """The (sub-)parser that parsed the options of ``args``' command (``monitor status``'s parser for that command).

    Args:
        parser: the ``monai-unc`` parser.
        args: the parsed arguments.

    Returns:
        The parser of the innermost sub-command the arguments name, or None when ``parser`` has none of them.
    """
    found = None
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = next((a.choices.get(getattr(args, a.dest, None)) for a in subs if a.dest != argparse.SUPPRESS), None)
        if chosen is None:
            return found
        found = parser = chosen


def _typed_option(action: argparse.Action, argv: Sequence[str]) -> str:
    """How to name the option of ``action``: the long option string the user typed last, else its longest one.

    An option with two long names is named as typed; ``-l`` as ``--labels`` (``-l folder not found`` would be harder
    to follow than a message naming ``--labels``).
    """
    longs = [o for o in action.option_strings if o.startswith("--")]
    typed = [o for a in argv for o in longs if a == o or a.startswith(o + "=")]
    return typed[-1] if typed else max(action.option_strings, key=len)


def _option_text(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Sequence[str], error: BaseException,
                 text: str) -> str:
    """An error's text naming the command's option, when the error refuses the value of one of its parameters.

    The checks of the Python API name their parameters (``n_bins must be at most 4096``) and mark the error with that
    parameter (:func:`monai_unc._utils.parameter_error`); reached from the command line the same check must name the
    option the user typed (``--n-bins must be ...``; found by hostile review). The option is found through the parser,
    not in the text: the option of the command whose destination is the error's parameter (:func:`_typed_option`),
    or a positional argument as argparse names it, by its metavar (``monitor record``'s ``TRIAGE``).
    A message that begins with the parameter (``n_bins must ...``, ``labels folder not found: x``) has that word
    replaced; any other is prefixed with the option (``--shifts: shift table not found: x``). An error
    without a parameter, or whose parameter is no option of the command (a field of a file the command read), keeps
    its text: no word of a message is guessed to be a parameter.

    Args:
        parser: the ``monai-unc`` parser.
        args: the parsed arguments.
        argv: the command line's arguments (to name the option as typed).
        error: the error caught.
        text: the error's one line.

    Returns:
        The text naming the option, or ``text`` itself.
    """
    parameter = getattr(error, "parameter", None)
    sub = _command_parser(parser, args)
    if not isinstance(parameter, str) or not parameter or sub is None:
        return text
    action = next((a for a in sub._actions if a.dest == parameter and not isinstance(a, argparse._SubParsersAction)),
                  None)
    if action is None:
        return text
    text = _other_options(sub, argv, error, text)
    # a positional argument as argparse names it in usage and errors: its metavar, else its destination
    option = _typed_option(action, argv) if action.option_strings else str(action.metavar or action.dest)
    if any(text.startswith(o) for o in action.option_strings if o.startswith("--")):
        return text  # a check that names the option itself (``--uid-root must be ...``)
    rest = text[len(parameter):]
    if text.startswith(parameter) and not (rest[:1].isalnum() or rest[:1] in ("_", "-")):
        return option + rest
    return f"{option}: {text}"


def _other_options(sub: argparse.ArgumentParser, argv: Sequence[str], error: BaseException, text: str) -> str:
    """``text`` with the other parameters the error's check declared (``other_parameters``) named as their options.

    Only the parameters the check listed (:func:`monai_unc._utils.parameter_error`, ``others``) are replaced, each
    where it stands as a word of its own (``... of num_classes`` -> ``... of --num-classes``); a parameter that is
    no option of the command keeps its name.
    """
    for other in getattr(error, "other_parameters", None) or ():
        action = next((a for a in sub._actions if a.option_strings and a.dest == other), None)
        if isinstance(other, str) and other and action is not None:
            option = _typed_option(action, argv)
            text = re.sub(rf"(?<![\w.-]){re.escape(other)}(?![\w-])", lambda _, o=option: o, text)
    return text


def _parse_and_run(parser: argparse.ArgumentParser, nnunet_cli: Any, argv: list[str],
                   entry: tuple[str, int] | None = None) -> int:
    """:func:`main` after the parser is built: parse ``argv`` and run the command (exit status).

    ``entry`` is the first file and line outside the package that led to :func:`main` (:func:`_one_line_warning`).
    """
    if _other_rank():  # every rank parses the same arguments: their warnings (a deprecated --measures name) are
        # the job's, said once by rank 0 (found by review 66: one identical line per rank of a torchrun job)
        warnings.showwarning = _say_nothing
    args = parser.parse_args(argv)
    warnings.showwarning = _one_line_warning(args.command, entry)  # the parsed command's name (restored by main)
    if nnunet_cli is None and args.command in NNUNET_COMMANDS:  # parsed for --help without the nnunet extra, but
        # "-h" was the value of an option: the command runs, so the extra's one line
        try:
            from .nnunet import cli as nnunet_cli
        except ImportError as e:
            print(f"monai-unc {args.command}: error: {e}", file=sys.stderr)
            return 2
    if nnunet_cli is not None:
        try:
            return _run_nnunet(args, nnunet_cli)
        except OSError as e:  # a full disk, an output that cannot be written: one line naming the file, as for every
            # command (found by hostile testing: nnunet-predict on a full disk printed OSError's traceback, exit 1)
            if isinstance(e, BrokenPipeError) and _stdout_reader_gone():
                return _closed_output()
            _import_names()
            print(f"monai-unc {args.command}: error: {error_text(e)}", file=sys.stderr, flush=True)
            return 2
    try:
        _import_commands(args.command)  # after parsing, and that command's workflow only (module docstring)
    except ImportError as e:
        return _missing_dependency(args.command, e)
    try:
        return _run(args)
    except ImportError as e:  # an optional package the command needs (one line naming what to install, exit 2)
        return _missing_dependency(args.command, e)
    except CohortFailed as e:  # some cases failed: rank 0 said which, the other cases are done
        return e.exit_status
    except _INPUT_ERRORS as e:
        if isinstance(e, BrokenPipeError) and _stdout_reader_gone():  # `monai-unc monitor status | head`
            return _closed_output()
        print(f"monai-unc {args.command}: error: {_option_text(parser, args, argv, e, error_text(e))}",
              file=sys.stderr, flush=True)
        return 2
    except TypeError as e:  # a check of ours refusing a value of the wrong type: bad input; any other: a bug
        if not _raised_by_a_check(e):
            raise
        text = str(e).strip()  # names the argument
        text = _option_text(parser, args, argv, e, text.splitlines()[0]) if text else "TypeError"
        print(f"monai-unc {args.command}: error: {text}", file=sys.stderr, flush=True)
        return 2
    except RuntimeError as e:  # another rank of a job started without torchrun died: one line, not gloo's traceback
        said = _peer_lost(e)
        if said is None:
            raise
        print(f"monai-unc {args.command}: error: another process of this job stopped (gloo: {said}); the cases it "
              "and this process finished are kept: run the same command again to resume", file=sys.stderr,
              flush=True)
        return 1


def _other_rank() -> bool:
    """Whether this process is a rank other than 0 of a job of several (torchrun's ``RANK`` and ``WORLD_SIZE``).

    Read from an initialised process group when there is one, else from the environment without importing torch
    (the arguments are parsed first); values that are not integers count as no job (the command refuses them later,
    in one line naming the variable).

    Returns:
        True for ``RANK`` >= 1 of ``WORLD_SIZE`` > 1.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return bool(dist.get_world_size() > 1 and dist.get_rank() != 0)
    try:
        return int(os.environ.get("WORLD_SIZE") or 1) > 1 and int(os.environ.get("RANK") or 0) != 0
    except ValueError:
        return False


def _say_nothing(*args: Any, **kwargs: Any) -> None:
    """``warnings.showwarning`` that shows nothing (rank 0 of the job shows the same warning)."""


#: what gloo says when the process at the other end of a connection exited or crashed
_PEER_LOST = ("Connection closed by peer", "Connection reset by peer")


def _peer_lost(error: BaseException) -> str | None:
    """The backend's words when ``error`` is its report that another rank of the job went away.

    Found by the review of torch.distributed cohorts: ranks started by hand (``RANK`` / ``WORLD_SIZE`` set by a
    scheduler, no torchrun to stop the others) printed gloo's ``RuntimeError`` traceback when one rank was killed.

    Args:
        error: a ``RuntimeError`` caught around a command.

    Returns:
        For gloo's lost-connection errors while ``torch.distributed`` is in use, its sentence from the lost
        connection on (``Connection closed by peer [127.0.0.1]:39654``); None for any other error.
    """
    if "torch.distributed" not in sys.modules:
        return None
    text = str(error)
    return next((text[i:].split(". ")[0] for i in (text.find(p) for p in _PEER_LOST) if i >= 0), None)


#: the commands that run their cases on every rank of a torchrun job (a refusal before the ranks join the group is
#: shared with the other ranks: :func:`monai_unc.engine.share_early_error`)
_COHORT_COMMANDS = frozenset({"infer", "evaluate", "triage", _PRODUCT_COMMAND})

#: errors that bad arguments, inputs or outputs raise (exit status 2, one stderr line): our own ValueErrors (which
#: name the argument), file-system errors (missing, unwritable, a file where a folder is needed) and readers' errors
#: on truncated or corrupt files that no layer below turned into a ValueError
_INPUT_ERRORS = (ValueError, OSError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError)
#: the exit status of a command whose standard output's reader went away (``monai-unc monitor status | head``):
#: 128 + SIGPIPE, the status a shell reports for a program a closed pipe stopped
_STDOUT_CLOSED_STATUS = 141


def _stdout_reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it (``| head`` read the lines it wanted).

    In earlier versions ``monai-unc monitor status | head`` printed ``error: BrokenPipeError``
    (exit 2) for output nobody reads any more. Only a pipe with no reader counts (``poll`` reports an error on its
    descriptor); a broken pipe elsewhere (a database connection, a subprocess) stays an error. Where there is no
    ``poll`` (Windows) or no descriptor (a captured stream), False.

    Returns:
        True when standard output's reader is gone.

    Example:
        >>> _stdout_reader_gone()  # a doctest's captured output has no descriptor
        False
    """
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return False


def _closed_output() -> int:
    """Stop quietly after standard output's reader went away; :data:`_STDOUT_CLOSED_STATUS`.

    The rest of the output goes to the null device (the interpreter's flush at exit would report the pipe again), and
    nothing is said.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    return _STDOUT_CLOSED_STATUS


def _raised_by_a_check(error: BaseException) -> bool:
    """Whether an error was raised by an explicit ``raise`` statement of this package (one of its checks).

    Our checks raise ``TypeError`` naming the argument for a value of the wrong type (``"x must be True or False,
    got 'yes'"``): bad input, one line like a ``ValueError``. A ``TypeError`` that Python or a library raised
    (``'int' object is not iterable``) is a bug to fix and keeps its traceback.

    Args:
        error: the error caught.

    Returns:
        True when the innermost frame of its traceback is a ``raise`` statement in a module of this package.
    """
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return False
    last = frames[-1]
    return in_package(last.filename) and (last.line or "").lstrip().startswith("raise ")


#: importable module -> what ``pip install`` takes to provide it, where the two names differ: the extra of
#: pyproject.toml that holds it (with the version bound the package is tested with), else the distribution
_PIP_NAMES = {
    "nnunetv2": "'monai-unc[nnunet]'",
    "ipyniivue": "'monai-unc[viewer]'",
    "ignite": "'monai-unc[ignite]'",
    "pydicom": "'monai-unc[dicom]'",
    "highdicom": "'monai-unc[dicom]'",
    "psycopg": "'monai-unc[monitor]'",
    "numba": "'monai-unc[fast]'",
    "isal": "'monai-unc[fast]'",
    "cucim": "'monai-unc[cuda]'",
    "cupy": "'monai-unc[cuda]'",
    "sklearn": "scikit-learn",
    "skimage": "scikit-image",
}


def _missing_dependency_text(error: ImportError) -> str | None:
    """One line naming what to install for an ``ImportError`` of a package that is not installed.

    Args:
        error: the error an import raised.

    Returns:
        The error's own first line when it already says what to install (``pip install ...``, as the package's own
        messages do), else ``"<module> is not installed: pip install <package>"`` for a module that is missing; None
        for any other import error (a module of this package itself, or a name missing from an installed module: a
        bug, not an install problem, which the caller re-raises).

    Example:
        >>> _missing_dependency_text(ModuleNotFoundError("No module named 'sklearn'", name="sklearn"))
        'sklearn is not installed: pip install scikit-learn'
        >>> _missing_dependency_text(ImportError("this needs ipyniivue: pip install 'monai-unc[viewer]'"))
        "this needs ipyniivue: pip install 'monai-unc[viewer]'"
        >>> _missing_dependency_text(ModuleNotFoundError("No module named 'monai_unc.nope'", name="monai_unc.nope"))
    """
    text = str(error).strip()
    if "pip install" in text:
        return text.splitlines()[0]
    name = (error.name or "").split(".")[0]
    if not isinstance(error, ModuleNotFoundError) or not name or name == __package__:
        return None
    return f"{name} is not installed: pip install {_PIP_NAMES.get(name, name)}"


def _missing_dependency(command: str, error: ImportError) -> int:
    """Print the one line of :func:`_missing_dependency_text` on stderr and return 2; re-raise other import errors."""
    text = _missing_dependency_text(error)
    if text is None:
        raise error
    print(f"monai-unc {command}: error: {text}", file=sys.stderr, flush=True)
    return 2


def _one_line_warning(command: str, entry: tuple[str, int] | None = None) -> Callable[..., None]:
    """``warnings.showwarning`` for a command.

    The package's own ``UserWarning`` s and ``DeprecationWarning`` s (raised from, or attributed to, a module of the
    package, or to ``entry``: the file and line that called :func:`main`, where a warning the package holds for one
    call and says once is attributed) as one stderr line each (``monai-unc <command>: warning: ...``); other warnings
    as Python shows them.
    """
    package = str(Path(__file__).resolve().parent)
    original = warnings.showwarning

    def show(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        # found by review 71: a warning said once per call of run_report was shown as Python shows a user's warning,
        # two lines naming the console script's sys.exit(main())
        ours = str(Path(filename).resolve()).startswith(package) or (filename, lineno) == entry
        if ours and issubclass(category, (UserWarning, DeprecationWarning)):
            text = str(message).strip().splitlines()[0] if str(message).strip() else category.__name__
            from ._utils import stderr_line  # torch: not at the command line's start

            stderr_line(f"monai-unc {command}: warning: {text}")  # above a progress bar (a case's warning)
        else:
            original(message, category, filename, lineno, file, line)

    return show


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
