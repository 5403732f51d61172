"""The documentation's command lines, option names, option defaults and printed outputs, checked against the code
(review 61 of the documentation's truth).

Every ``monai-unc`` command line of a code block parses; every option a page names beside a command (``evaluate
--target-risk``) is an option of that command; every default that ``--help`` states in words is the parser's; the
outputs that docs/referral_threshold.md shows beside its examples are the ones they print.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex

import pytest

from monai_unc import cli
from tests._paths import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser, _ = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of ``parser`` and of its sub-commands (``monitor record``)."""
    out: set[str] = set()
    for action in parser._actions:
        out.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                out |= _options(child)
    return out


def _code_blocks(text: str) -> list[str]:
    """The fenced blocks of a Markdown page (a fence opens with three backticks and any language, and closes)."""
    blocks, current = [], None
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


_LINE = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(?:monai-unc|torchrun\s.*?-m\s+monai_unc\.cli)\s+(\S.*)$")


def _command_lines():
    """``(page, argv)`` of every ``monai-unc`` command line in a code block, continuation lines joined and comments
    dropped; a synopsis's optional parts (``[--layout A|B]``) are read as given with their first value; lines with a
    ``<placeholder>`` and column-aligned diagrams are left out."""
    names = set(_commands())
    for page in PAGES:
        for block in _code_blocks(page.read_text(encoding="utf-8")):
            for line in block.replace("\\\n", " ").splitlines():
                m = _LINE.match(line.strip())
                if not m:
                    continue
                rest = m.group(1)
                first = rest.split(" ", 1)[0]
                if first not in names or re.match(r"\S+\s{2,}\S", rest.split("#", 1)[0]):
                    continue  # an error message quoted (`monai-unc nnunet-predict: error: ...`), a diagram's row
                argv = shlex.split(rest, comments=True)
                if any(re.search(r"[<>]", a) for a in argv):
                    continue
                # a synopsis: `[--layout monai-unc|nnunet]` is an option you may give, with one of its values
                argv = [a.strip("[]").split("|")[0] for a in argv if a.strip("[]") not in ("", "...")]
                argv = [a for a in argv if not a.endswith("...")]
                yield page.relative_to(ROOT).as_posix(), [a.replace("$nnUNet_results", "results") for a in argv]


def test_the_scan_finds_the_command_lines():
    found = list(_command_lines())
    pages = {page for page, _ in found}
    assert len(found) > 40, len(found)
    assert {"README.md", "docs/cli.md", "docs/triage.md", "docs/monitoring.md", "docs/nnunet.md"} <= pages, pages


@pytest.mark.parametrize("page,argv", list(_command_lines()),
                         ids=lambda v: v if isinstance(v, str) else " ".join(v[:2]))
def test_every_command_line_of_the_docs_parses(page, argv):
    """A command line a reader copies from a page must at least be one the parser takes: an option renamed, a value a
    choice no longer holds or a positional argument gone would make it exit 2 before doing anything."""
    if argv[0].startswith("nnunet-"):
        pytest.importorskip("nnunetv2", reason="the nnU-Net commands' own options need the nnunet extra")
    parser, _ = cli.build_parser(argv[0])
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
    except SystemExit as exc:
        assert not exc.code, f"{page}: monai-unc {' '.join(argv)}: {err.getvalue().strip()}"


#: options a page names that only exist once the page's own example has registered them
REGISTERED_BY_THE_PAGE = {("docs/products.md", "evaluate", "--volume-bias")}


def test_every_option_a_page_names_beside_a_command_is_one_of_its_options():
    """`evaluate --target-risk`, `monai-unc triage ... --allow-unsigned`: the option belongs to the command named."""
    commands = _commands()
    parsers = {name: cli.build_parser(name)[0] for name in commands if name.startswith("nnunet-")
               and _has_nnunet()}
    options = {}
    for name, parser in commands.items():
        nn = parsers.get(name)
        if nn is not None:
            parser = next(a for a in nn._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        options[name] = _options(parser)
    pattern = re.compile(r"`(?:monai-unc )?(" + "|".join(map(re.escape, sorted(commands, key=len, reverse=True)))
                         + r")((?: [^`]*)?)`")
    wrong = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        rel = page.relative_to(ROOT).as_posix()
        for m in pattern.finditer(text):
            name, rest = m.group(1), m.group(2)
            if name.startswith("nnunet-") and name not in parsers:
                continue  # a stub without the nnunet extra
            for option in re.findall(r"(?<![\w>-])(--?[a-zA-Z][\w-]*)", rest):
                if option not in options[name] and (rel, name, option) not in REGISTERED_BY_THE_PAGE:
                    wrong.append(f"{rel}:{text[:m.start()].count(chr(10)) + 1}: `{name}{rest}`: {option}")
    assert not wrong, "\n".join(wrong)


def _has_nnunet() -> bool:
    try:
        import nnunetv2  # noqa: F401
    except ImportError:
        return False
    return True


def _stated_defaults():
    """``(command, option, stated, default)`` for every option whose help states a one-word default."""
    for name, parser in _commands().items():
        subs = [(name, parser)]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                subs += [(f"{name} {child}", p) for child, p in action.choices.items()]
        for label, p in subs:
            for action in p._actions:
                if not action.option_strings or not action.help or action.default in (None, argparse.SUPPRESS):
                    continue
                stated = re.findall(r"\(default:? ([^);,\s]+)[);,]", action.help)
                stated += re.findall(r"\((-?\d[\d.e-]*)[;)]", action.help)
                for value in stated:
                    yield label, max(action.option_strings, key=len), value.strip("'\"`"), action.default


def _same(stated: str, default) -> bool:
    if isinstance(default, (list, tuple)):
        return stated == " ".join(map(str, default))
    if isinstance(default, bool):
        return stated.lower() == str(default).lower()
    if isinstance(default, (int, float)):
        try:
            return float(stated) == float(default)
        except ValueError:
            return False
    return stated == str(default)


def test_the_defaults_help_states_are_the_parsers():
    """`--help` writes its defaults in words (`ECE bins (default 15)`, `Dice below this is a failed case (0.8)`);
    they must be the values the parser fills in."""
    found = list(_stated_defaults())
    assert len(found) > 25, found
    wrong = [f"{cmd} {opt}: help says {stated!r}, parser default {default!r}" for cmd, opt, stated, default in found
             if not _same(stated, default)]
    assert not wrong, "\n".join(wrong)


def _python_blocks_with_output(page: str) -> list[tuple[str, str]]:
    """``(code, printed)`` of each python block of ``page`` that an ``Output`` paragraph and a plain block follow."""
    text = (ROOT / page).read_text(encoding="utf-8")
    pairs = re.findall(r"```python\n(.*?)```\n\nOutput[^\n]*:\n\n```\n(.*?)```", text, flags=re.S)
    assert pairs, f"{page} no longer shows an example's output"
    return pairs


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")


def _matches(printed: str, expected: str) -> bool:
    """``printed`` is ``expected``: the text alike, ``...`` standing for any text (a temporary path), numbers of more
    than 12 significant digits within 1e-7 relative: values of float32 maps differ in their last float32 bits between
    BLAS builds (a threshold of the toy cohort by 2e-9 with Intel MKL's AVX-512 path), float64 values in their last
    digit."""
    parts = re.split(r"(\.\.\.)", expected)
    regex = "".join(".*?" if part == "..." else _escaped_with_numbers(part) for part in parts)
    m = re.fullmatch(regex, printed, flags=re.S)
    if not m:
        return False
    wanted = [float(x) for part in parts if part != "..." for x in _NUMBER.findall(part)]
    got = [float(x) for x in m.groups()]
    return len(wanted) == len(got) and all(abs(a - b) <= 1e-7 * max(1.0, abs(a)) for a, b in zip(wanted, got))


def _escaped_with_numbers(text: str) -> str:
    out, last = [], 0
    for m in _NUMBER.finditer(text):
        out.append(re.escape(text[last:m.start()]))
        digits = len(re.sub(r"\D", "", m.group(0).split("e")[0]))
        out.append(f"({_NUMBER.pattern})" if digits > 12 else f"({re.escape(m.group(0))})")
        last = m.end()
    out.append(re.escape(text[last:]))
    return "".join(out)


def test_the_outputs_referral_threshold_md_shows_are_printed(tmp_path, monkeypatch, capsys):
    """docs/referral_threshold.md shows the output of its two examples (a seeded simulation, the toy cohort), which
    tests/metrics/test_quality.py runs without reading what they print; the examples must print it (docs/triage.md's
    worked example is compared by tests/evaluation/test_triage.py)."""
    page = "docs/referral_threshold.md"
    monkeypatch.chdir(tmp_path)
    for i, (code, expected) in enumerate(_python_blocks_with_output(page)):
        exec(compile(code, f"{page}#{i}", "exec"), {"__name__": "__docs__"})
        printed = capsys.readouterr().out
        assert _matches(printed, expected), f"{page} block {i} printed:\n{printed}\nthe page shows:\n{expected}"


def _doctest_paths() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    block = re.search(r"^DOCTEST_PATHS :=(.*?)\n\n", text, flags=re.S | re.M).group(1)
    return set(block.replace("\\\n", " ").split())


def test_every_module_with_docstring_examples_runs_them_in_make_test():
    """The docstring examples of monai_unc/handlers, monai_unc/transforms.py, monai_unc/keys.py and the shared private
    modules (``_utils``, ``_jit``, ``_digest``, ``_compat``: 69 docstrings with examples) ran in no part of ``make
    test``: the Makefile's DOCTEST_PATHS names folders and files one by one, and these were never added. Every module
    that holds an example is now covered, by its file or a folder above it."""
    paths = _doctest_paths()
    missing = []
    for module in sorted((ROOT / "monai_unc").rglob("*.py")):
        rel = module.relative_to(ROOT).as_posix()
        if ">>> " not in module.read_text(encoding="utf-8"):
            continue
        if not any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in paths):
            missing.append(rel)
    assert not missing, f"docstring examples that make test never runs: {missing}"
