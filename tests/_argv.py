"""Command lines of tests: a default argument list with some of its options replaced (review 61).

``monai-unc`` refuses a single-valued option given twice (``--samples 2 --samples 3``), so a test that overrides
a default of its helper's argument list replaces that option instead of appending a second one.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence


def _parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The sub-parser of the command ``argv`` names first (``monitor record``'s for ``monitor record ...``)."""
    from monai_unc.cli import build_parser

    parser = build_parser(next((a for a in argv if not a.startswith("-")), None))[0]
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = next((s.choices[word] for s in subs if word in s.choices), None)
        if chosen is not None:
            parser = chosen
    return parser


def command_parsers(parser: argparse.ArgumentParser,
                    words: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """``parser`` and every (sub-)command's parser under it, each with its command words (``()`` for ``parser``,
    ``("monitor", "record")`` for ``monai-unc monitor record``)."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from command_parsers(child, (*words, name))


def with_options(base: Sequence[str], *extra: str) -> list[str]:
    """``base`` followed by ``extra``, less the single-valued options of ``base`` that ``extra`` gives again.

    An option is found through the command's parser, so an alias replaces it too (``--output`` replaces ``-o x``);
    list, ``append`` and ``count`` options and flags of ``base`` are kept (``extra`` adds to them).

    Example:
        >>> with_options(["infer", "-i", "a", "-o", "b", "--samples", "2", "-q"], "--samples", "3", "--output=c")
        ['infer', '-i', 'a', '-q', '--samples', '3', '--output=c']
    """
    from monai_unc.cli import _single_valued

    options = _parser(base)._option_string_actions
    replaced = {id(a) for a in (options.get(w.split("=", 1)[0]) for w in extra if w.startswith("-"))
                if a is not None and _single_valued(a)}
    kept: list[str] = []
    i = 0
    while i < len(base):
        word = base[i]
        action = options.get(word.split("=", 1)[0]) if word.startswith("-") else None
        if action is None or id(action) not in replaced:
            kept.append(word)
            i += 1
            continue
        if "=" in word:
            n = 0
        elif action.nargs == "?":
            n = int(i + 1 < len(base) and not base[i + 1].startswith("-"))
        else:
            n = action.nargs if isinstance(action.nargs, int) else 1
        i += 1 + n
    return kept + list(extra)
