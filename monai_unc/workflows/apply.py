"""The commands of the cohort products: a fitted artifact applied to new cases (``monai-unc <command>``).

A product with a :attr:`~monai_unc.product.CohortProduct.command` (e.g. the inner and outer masks with a
guarantee) applies the artifact that ``evaluate`` fitted to a folder of new predictions. :func:`apply_command` runs
its :meth:`~monai_unc.product.CohortProduct.apply_cases` inside the command's session (process group and
failed-cases step, :func:`monai_unc.workflows.session.run_command`); :func:`apply_from_arguments` is the command line's
entry; :func:`apply_beside_triage` runs the commands that ``monai-unc triage --<command>-rule`` asks for into the
triage folder. Nothing here names a product: each brings its own options, outputs and printed lines.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._utils import PARAMETER_ATTRIBUTE, parameter_error, refusing
from ..engine import DistContext, start_notice
from ..evaluation.products import command_output_markers
from ..io import LAYOUTS, check_output_folder, check_output_kind, owned_folder, read_json_or_none
from ..io.provenance import PRODUCER_LAYOUTS, RuleRead, fingerprint_layout, prediction_fingerprint
from ..io.signing import Trust
from ..product import CohortProduct, command_product, command_products
from .session import CommandResult, quiet_lines, run_command

__all__ = ["trust_from_arguments", "triage_trust_from_arguments", "unsigned_notice", "apply_command",
           "check_command_folder", "apply_from_arguments", "product_of_command", "rules_from_options",
           "product_rule_options", "beside_triage_folder",
           "check_beside_triage", "apply_beside_triage", "remove_stale_beside_triage", "layout_from_rule"]


def product_of_command(command: str | type[CohortProduct]) -> type[CohortProduct]:
    """The registered product class whose command is ``command``.

    Args:
        command: a command name or a product class with a command.

    Returns:
        The class.

    Raises:
        ValueError: no registered product has that command.

    Example:
        >>> cls = command_products()[0]
        >>> product_of_command(cls.command) is cls
        True
    """
    if isinstance(command, type) and issubclass(command, CohortProduct) and command.command:
        return command
    cls = command_product(str(command))
    if cls is None:
        names = [c.command for c in command_products()]
        raise ValueError(f"command: no product has the command {command!r} (the products' commands: {names})")
    return cls


def apply_command(
    command: str | type[CohortProduct],
    predictions: str | os.PathLike,
    artifact: Any,
    output: str | os.PathLike,
    *,
    dist: DistContext | None = None,
    **options: Any,
) -> CommandResult[Any]:
    """The whole of ``monai-unc <command>`` on one process or on every rank of a ``torchrun`` job.

    Args:
        command: the command's name or its product class.
        predictions: folder of the new cases' predictions.
        artifact: the fitted file the command applies (its path, the loaded file, or the file read once by the
            product's :meth:`~monai_unc.product.CohortProduct.read_command_artifact`).
        output: the output folder.
        dist: a rank context the caller holds (its group is left alone), or None: join the process group or
            create one from torchrun's environment, and destroy one created here at the end.
        **options: the keyword arguments of the product's
            :meth:`~monai_unc.product.CohortProduct.apply_cases` (``images``, ``layout``, ``uncertainty``,
            ``allow_mismatch``, ``progress``, ``trust``, ...).

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of the product's result; its ``lines`` are the
        product's :meth:`~monai_unc.product.CohortProduct.command_lines`. Before the product runs, ``output`` must not
        be or lie in ``predictions`` (nor ``images`` / ``uncertainty``) nor hold another command's outputs
        (:func:`check_command_folder`): ``ValueError``. Raises
        :class:`~monai_unc.workflows.session.CohortFailed` on every rank when cases failed (rank 0 has printed which).
    """
    cls = product_of_command(command)
    with refusing("output"):  # the command line names the option (found by a probe: "output folder ... is a file")
        out = check_output_folder(output, predictions, options.get("images"), options.get("uncertainty"))
    check_command_folder(cls, out)
    return run_command(str(cls.command), out,
                       lambda ctx: cls.apply_cases(predictions, artifact, out, dist=ctx, **options),
                       dist=dist, summary=cls.command_lines)


def check_command_folder(cls: type[CohortProduct], output: str | os.PathLike) -> None:
    """Refuse an output folder of a product's command that holds another command's outputs.

    Every command marks its folder (:func:`monai_unc.evaluation.products.command_output_markers`: ``summary.json`` of
    ``evaluate``, ``triage.json``, a product command's table, ...); the command of ``cls`` may not write where another
    one wrote (:func:`monai_unc.io.check_output_kind`), whether or not the product checks its folder itself.

    Args:
        cls: the product class with a command.
        output: the output folder (a missing one is accepted).

    Returns:
        None; ``ValueError`` naming the folder and the other command otherwise.
    """
    markers = command_output_markers()
    markers.setdefault(str(cls.command), ())
    check_output_kind(output, str(cls.command), markers)


def apply_from_arguments(args: argparse.Namespace) -> CommandResult[Any]:
    """``monai-unc <command>`` of a product on its parsed arguments (:mod:`monai_unc.workflows.arguments`).

    Args:
        args: the parsed arguments (``args.command`` names the product's command).

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of :func:`apply_command`; its ``lines`` are its
        warning lines alone with ``--quiet`` (:func:`~monai_unc.workflows.session.quiet_lines`).
    """
    cls = product_of_command(args.command)
    trust = trust_from_arguments(args)
    # the rule file read and verified once: the layout, the checks and the run act on that one version (in earlier
    # versions the layout came from a first, unverified read and the run from a second one: a file rewritten in
    # between gave two rules); a refusal of the file is raised by the check that refuses it, in its place
    rule = cls.read_command_artifact(args.rule, trust)
    layout, layout_notice = layout_from_rule(args.layout, rule, args.predictions, command=str(cls.command))
    with start_notice(layout_notice, unsigned_notice(args)):
        res = apply_command(cls, args.predictions, rule, args.output, images=args.images, layout=layout,
                            uncertainty=args.uncertainty, allow_mismatch=args.allow_mismatch, progress=not args.quiet,
                            trust=trust, **cls.command_options(args))
    return dataclasses.replace(res, lines=quiet_lines(res.lines)) if args.quiet else res


#: the run record of each layout that :func:`~monai_unc.io.provenance.prediction_fingerprint` reads
_RUN_RECORDS = {"monai-unc": "infer.json", "nnunet": "uncertainty_config.json"}


def _holds_records(predictions: Path, layout: str) -> bool:
    """Whether ``predictions`` holds the run record of a ``layout`` producer (a fingerprint other than unknown)."""
    return prediction_fingerprint(predictions, layout, [])["producer"] != "unknown"


def _named_as(predictions: Path, layout: str) -> bool:
    """Whether the file names of ``predictions`` (a folder without run records) are those ``layout`` reads.

    ``<case>_seg`` files for ``monai-unc``, an ``uncertainty/`` folder for ``nnunet``.
    """
    try:
        if layout == "nnunet":
            return (predictions / LAYOUTS["nnunet"]["uncertainty_subdir"]).is_dir()
        return any(p.name.split(".", 1)[0].endswith(LAYOUTS["monai-unc"]["seg_suffix"]) for p in predictions.iterdir())
    except OSError:
        return False


def layout_from_rule(given: str | None, rule: Any, predictions: str | os.PathLike, *,
                     command: str = "triage") -> tuple[str, str | None]:
    """The layout (``--layout``) to read new predictions with: the option, or the one the rule records.

    A rule file of ``evaluate`` (``referral_rule.json``, or the rule file of a product) records the fingerprint of the
    predictions it was certified / calibrated on, whose ``producer`` tells their layout
    (:func:`~monai_unc.io.provenance.fingerprint_layout`): a rule certified with ``evaluate --layout nnunet`` is
    applied to nnU-Net predictions without ``--layout nnunet`` (in earlier versions ``triage`` read them as
    ``monai-unc infer`` outputs and stopped on "no segmentation found"). Without ``given``, a folder that holds no
    run record of either layout and whose file names are those of the other layout only is read in that one. An
    explicit ``layout`` that contradicts the
    recorded one is refused where ``predictions`` does not hold the records of a run of that layout (nor, without any
    run record, its file names): read so, the files of the rule's layout would be misread (e.g. ``<case>_seg`` files
    taken for cases of their own). Where they hold them, the option is taken and the fingerprint check compares the
    two runs as before (a mismatch is refused unless ``--allow-mismatch``).

    Args:
        given: the ``--layout`` option, or None when not given.
        rule: the rule file's path, or a loaded rule (anything with a ``fingerprint`` mapping: the commands pass the
            file read and verified once, a :class:`~monai_unc.io.provenance.RuleRead`; of one that refused the file,
            the layout its text records, so that the command's refusal of the file comes first). A file that cannot
            be read as JSON records no layout here (loading it reports why).
        predictions: the folder of the new predictions.
        command: the command's name, for the notice.

    Returns:
        ``(layout, notice)``: the layout, and the line to say once the run starts when it was taken from the rule
        and is not the default ``monai-unc`` (None otherwise).

    Raises:
        ValueError: naming ``--layout``, when the given or the recorded layout would misread ``predictions``.

    Example:
        >>> import tempfile
        >>> rule = argparse.Namespace(fingerprint={"producer": "nnunet-predict"})
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     layout_from_rule(None, rule, folder)[0], layout_from_rule("monai-unc", {}, folder)
        ('nnunet', ('monai-unc', None))
    """
    if given is not None and given not in LAYOUTS:
        raise ValueError(f"--layout must be one of {tuple(LAYOUTS)}, got {given!r}")
    if isinstance(rule, RuleRead) and rule.error is not None:
        # a refused file: the layout its text names, read as before, so that the command's refusal is the file's own
        # (--rule ...) whatever it checks first; the command acts on no version of it
        rule = rule.path
    if isinstance(rule, (str, os.PathLike)):
        doc = read_json_or_none(rule)
        fingerprint = doc.get("fingerprint") if isinstance(doc, dict) else None
    else:
        fingerprint = getattr(rule, "fingerprint", None)
    recorded = fingerprint_layout(fingerprint)
    if recorded is None:  # no record of the calibration predictions' producer: the option or the default
        return given or "monai-unc", None
    producer = next(k for k, v in PRODUCER_LAYOUTS.items() if v == recorded)
    pred = Path(predictions)
    others = [lay for lay in LAYOUTS if lay != recorded]
    if given is None:
        held = [lay for lay in others if _holds_records(pred, lay)]
        if held and not _holds_records(pred, recorded):
            other = held[0]
            raise ValueError(
                f"--layout: the rule was certified on {producer} predictions (--layout {recorded}), but {pred} holds "
                f"the records of a {next(k for k, v in PRODUCER_LAYOUTS.items() if v == other)} run "
                f"({_RUN_RECORDS[other]}): give --layout {other} to read them as such (their fingerprint then differs "
                "from the rule's)")
        if not held and not _holds_records(pred, recorded):
            # no run record: the file names decide, as for a given --layout (found by the review of review 64: a
            # folder of <case>_seg files without infer.json was read as nnU-Net's, "no uncertainty map", where it was
            # read as the default monai-unc layout before)
            named = [lay for lay in others if _named_as(pred, lay)]
            if named and not _named_as(pred, recorded):
                return named[0], None if named[0] == "monai-unc" else (
                    f"monai-unc {command}: --layout {named[0]}: the file names of {pred}, which holds no run record "
                    "(give --layout to choose another)")
        notice = None if recorded == "monai-unc" else (
            f"monai-unc {command}: --layout {recorded}: the layout of the {producer} predictions the rule was "
            "certified on (give --layout to choose another)")
        return recorded, notice
    if given == recorded or _holds_records(pred, given):
        return given, None
    if not _holds_records(pred, recorded) and _named_as(pred, given) and not _named_as(pred, recorded):
        return given, None  # no run record: the file names are the option's
    raise ValueError(
        f"--layout {given} contradicts the rule, certified on {producer} predictions (--layout {recorded}): {pred} "
        f"holds no record of a {given} run ({_RUN_RECORDS[given]}), and read as {given} the files of a {recorded} "
        f"folder are misread; leave --layout out to read it as {recorded}")


def trust_from_arguments(args: argparse.Namespace) -> Trust:
    """The signatures the commands that apply a rule accept: ``--trusted-keys`` and ``--allow-unsigned``.

    ``--require-signature`` is what they do without ``--allow-unsigned``; the parser refuses the two together, and so
    does this function for arguments made without it.

    Args:
        args: the parsed arguments.

    Returns:
        The :class:`~monai_unc.io.signing.Trust`. The command says that ``--allow-unsigned`` is in effect once its run
        starts (:func:`unsigned_notice`).

    Raises:
        ValueError: ``--require-signature`` with ``--allow-unsigned``.

    Example:
        >>> trust_from_arguments(argparse.Namespace(trusted_keys=["keys/"], require_signature=True))
        Trust(keys=('keys/',), allow_unsigned=False)
    """
    allow = bool(getattr(args, "allow_unsigned", False))
    if allow and getattr(args, "require_signature", False):
        raise ValueError("--require-signature and --allow-unsigned contradict each other: give one of them")
    return Trust(tuple(str(k) for k in getattr(args, "trusted_keys", None) or ()), allow, command_line=True)


def triage_trust_from_arguments(args: argparse.Namespace) -> Trust | None:
    """The signatures the readers of ``triage.json`` require: with ``--require-signature`` or ``--trusted-keys``.

    ``monitor record`` and ``dicom-export --triage`` read a ``triage.json`` that anyone who can write its folder may
    have edited or replaced. Without either option they accept one that is unsigned or signed by a key not trusted
    here (the latter with a warning; :func:`~monai_unc.evaluation.triage.rule.check_triage_summary`). Given, the file
    must be signed by a trusted key: those of ``MONAI_UNC_TRUSTED_KEYS`` and the configuration folder
    (:func:`~monai_unc.io.signing.trusted_public_keys`) and the keys named by ``--trusted-keys`` (once or more), as for
    the commands that apply a rule (:func:`trust_from_arguments`); there is no ``--allow-unsigned`` (leave the options
    out). ``--require-signature`` alone demands a signature by the configured keys (in earlier versions a team that
    trusts keys only through ``MONAI_UNC_TRUSTED_KEYS`` or the configuration folder could not demand one).

    Args:
        args: the parsed arguments (``trusted_keys``: the list of ``--trusted-keys``, absent or empty: not given;
            ``require_signature``: the flag, absent: not given).

    Returns:
        The :class:`~monai_unc.io.signing.Trust` that requires a signature, or None.

    Example:
        >>> triage_trust_from_arguments(argparse.Namespace(trusted_keys=[])) is None
        True
        >>> triage_trust_from_arguments(argparse.Namespace(trusted_keys=["keys/"]))
        Trust(keys=('keys/',), allow_unsigned=False)
        >>> triage_trust_from_arguments(argparse.Namespace(trusted_keys=[], require_signature=True))
        Trust(keys=(), allow_unsigned=False)
    """
    keys = getattr(args, "trusted_keys", None) or []
    if not keys and not getattr(args, "require_signature", False):
        return None
    return Trust(tuple(str(k) for k in keys), command_line=True)


def unsigned_notice(args: argparse.Namespace) -> str | None:
    """The stderr line of a command given ``--allow-unsigned``, said once its run starts.

    The command says it through :func:`monai_unc.engine.start_notice` (``with start_notice(unsigned_notice(args)):``
    around the run): after the checks of its options, folders and rule, so that a refused call prints its refusal
    alone (found by a probe: the notice came before the argument checks, two stderr lines for one refusal).

    Args:
        args: the parsed arguments.

    Returns:
        The line, or None without ``--allow-unsigned``.

    Example:
        >>> unsigned_notice(argparse.Namespace(allow_unsigned=False)) is None
        True
    """
    if not getattr(args, "allow_unsigned", False):
        return None
    return ("monai-unc: --allow-unsigned: a rule that is unsigned, signed by an untrusted key or of an older format "
            "is used without checking who certified it; the outputs record it")


def rules_from_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The artifacts of the products' commands that a triage asks for: ``{command: artifact}``.

    ``monai-unc triage --<command>-rule FILE`` (keyword ``<command>_rule=``) runs the product's command on the
    same predictions into ``<triage output>/<command>/``.

    Args:
        options: keyword arguments; those named ``<command>_rule`` with a value are taken.

    Returns:
        ``{command: artifact}`` in the products' registration order.

    Example:
        >>> command = command_products()[0].command
        >>> rules_from_options({f"{command}_rule": "r.json", "cases": 4, "other_rule": None}) == {command: "r.json"}
        True
    """
    out = {}
    for cls in command_products():
        value = options.get(f"{str(cls.command).replace('-', '_')}_rule")
        if value is not None:
            out[str(cls.command)] = value
    return out


def product_rule_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--<command>-rule`` options of parsed ``monai-unc triage`` arguments, as keyword arguments.

    Args:
        args: the parsed arguments.

    Returns:
        ``{"<command>_rule": value}`` for every product with a command (None when not given).

    Example:
        >>> key = f"{command_products()[0].command}_rule"
        >>> product_rule_options(argparse.Namespace(**{key: "r.json"}))[key]
        'r.json'
    """
    keys = [f"{str(cls.command).replace('-', '_')}_rule" for cls in command_products()]
    return {k: getattr(args, k, None) for k in keys}


def beside_triage_folder(output: str | os.PathLike, command: str) -> Path:
    """Where ``monai-unc triage --<command>-rule`` writes the outputs of a product's command: ``<output>/<command>``.

    Args:
        output: the triage folder.
        command: the product's command.

    Returns:
        The folder.

    Example:
        >>> beside_triage_folder("triage", "masks").as_posix()
        'triage/masks'
    """
    return Path(output) / command


def remove_stale_beside_triage(output: str | os.PathLike, keep: Sequence[str], *inputs: Any) -> list[Path]:
    """Remove the folders ``<output>/<command>/`` of the products' commands a triage into ``output`` did not run.

    An earlier ``monai-unc triage --<command>-rule`` into the same folder wrote them; left beside a rerun without that
    option (the next day's cases, another rule), their masks and tables would pass for this run's cases (found by
    hostile testing: the masks' folder kept yesterday's masks and table beside today's ``triage.json``). A
    folder holding one of ``inputs`` is kept.

    Args:
        output: the triage folder.
        keep: the commands this triage ran (:func:`rules_from_options`).
        *inputs: the run's input folders (predictions, images, maps; None skipped).

    Returns:
        The folders removed.

    Raises:
        ValueError: such a folder is a symbolic link (:func:`monai_unc.io.owned_folder`).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     command = command_products()[0].command
        ...     (Path(d) / command).mkdir()
        ...     [p.name for p in remove_stale_beside_triage(d, [])] == [command]
        True
    """
    output = Path(output)
    held = [Path(p).resolve() for p in inputs if p is not None]
    removed = []
    for cls in command_products():
        command = str(cls.command)
        if command in keep:
            continue
        folder = owned_folder(output, command)  # not a link: its files are removed
        if not folder.is_dir() or any(p == folder.resolve() or folder.resolve() in p.parents for p in held):
            continue
        shutil.rmtree(folder)
        removed.append(folder)
    return removed


def check_beside_triage(rules: Mapping[str, Any], predictions: str | os.PathLike, output: Path,
                        **options: Any) -> dict[str, Path]:
    """Check the artifacts of :func:`rules_from_options` before the triage writes anything.

    Args:
        rules: ``{command: artifact}``: give each artifact as the product's
            :meth:`~monai_unc.product.CohortProduct.read_command_artifact` read it (as
            :func:`~monai_unc.workflows.report.triage_with_page` does), so that this check and
            :func:`apply_beside_triage` act on one version of its file.
        predictions: the new cases' predictions.
        output: the triage folder.
        **options: ``images``, ``layout``, ``uncertainty``, ``allow_mismatch``, ``trust``.

    Returns:
        ``{command: its output folder}`` (``<output>/<command>``).

    Raises:
        ValueError: a product's folder is a symbolic link (:func:`~monai_unc.io.owned_folder`), or its check's.
    """
    folders = {}
    for command, artifact in rules.items():
        folder = beside_triage_folder(output, command)
        owned_folder(output, folder.name, "--output")  # not a link: the command removes files there (its stale masks)
        with _rule_option(command):
            product_of_command(command).check_apply(predictions, artifact, folder, **options)
        folders[command] = folder
    return folders


def apply_beside_triage(rules: Mapping[str, Any], folders: Mapping[str, Path], predictions: str | os.PathLike, *,
                        dist: Any, **options: Any) -> None:
    """Run the products' commands of a triage into their folders (:func:`check_beside_triage`).

    Args:
        rules: ``{command: artifact}``, those :func:`check_beside_triage` checked.
        folders: ``{command: output folder}``.
        predictions: the new cases' predictions.
        dist: the rank context.
        **options: as for the products' :meth:`~monai_unc.product.CohortProduct.apply_cases`.

    Returns:
        None.
    """
    for command, artifact in rules.items():
        with _rule_option(command):
            product_of_command(command).apply_cases(predictions, artifact, folders[command], dist=dist, **options)


@contextlib.contextmanager
def _rule_option(command: str) -> Any:
    """Name ``--<command>-rule`` for a refusal of the artifact a product's command applies beside a triage.

    The command's own checks mark a refusal of its artifact with the parameter ``rule`` (``monai-unc <command>
    --rule``: :func:`monai_unc._utils.parameter_error`); beside a triage the same file is ``--<command>-rule``
    (``triage --rule`` is the referral rule), so such an error is marked with ``<command>_rule`` instead (found by a
    probe of every command: a missing ``--<command>-rule`` file named no option). Other errors keep their mark.

    Args:
        command: the product's command (:attr:`~monai_unc.product.CohortProduct.command`).

    Example:
        >>> from monai_unc._utils import parameter_error
        >>> try:
        ...     with _rule_option("my-product"):
        ...         raise parameter_error(ValueError("rule not found: r.json"), "rule")
        ... except ValueError as e:
        ...     print(e.parameter)
        my_product_rule
    """
    try:
        yield
    except (ValueError, TypeError, OSError) as e:
        if getattr(e, PARAMETER_ATTRIBUTE, None) == "rule":
            parameter_error(e, f"{command.replace('-', '_')}_rule")
        raise
