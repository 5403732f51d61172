"""Griffe extension of the documentation site (``mkdocs.yml``): the package's docstrings read as they are written.

The docstrings follow Google style as ruff's pydocstyle checks it, with two habits that griffe's Google parser
reads differently from napoleon: an ``Example:`` section (griffe knows only ``Examples:``, so ``Example:`` would
become an admonition whose doctest lines render as prose), and Sphinx roles such as ``:func:`name```, which
Markdown shows literally. Before griffe parses a docstring, this extension renames the section and turns a role
into inline code (``~a.b.c`` shows ``c``, as in Sphinx). The source files are not changed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

EXAMPLE_SECTION = re.compile(r"^Example:[ \t]*$", flags=re.M)
SPHINX_ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|attr|data|obj|exc|const):`(~?)\.?([^`]+)`")


def _role_to_code(match: re.Match) -> str:
    shorten, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if shorten else target}`"


def rewrite_docstring(text: str) -> str:
    """The docstring ``text`` with ``Example:`` sections renamed ``Examples:`` and Sphinx roles as inline code.

    Args:
        text: a cleaned (dedented) docstring.

    Returns:
        The rewritten docstring.
    """
    return SPHINX_ROLE.sub(_role_to_code, EXAMPLE_SECTION.sub("Examples:", text))


class DocstringRewrite(griffe.Extension):
    """Rewrites every docstring with :func:`rewrite_docstring` once the object tree is built."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite_docstring(obj.docstring.value)
