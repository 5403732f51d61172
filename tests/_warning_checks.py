"""Warning helpers shared by the tests of where and how often the package says its warnings."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any


def caught_warnings(call: Callable[[], Any]) -> list[warnings.WarningMessage]:
    """Every warning ``call()`` says (the ``"always"`` action: none hidden by an earlier one)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return caught


def quietly(call: Callable[[], Any]) -> Any:
    """``call()`` with every warning ignored (for the values alone)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return call()


def said_once_each_at(filename: str, caught: list[warnings.WarningMessage], *starts: str) -> list[str]:
    """Each of ``starts`` begins exactly one warning, each warning distinct and a ``UserWarning`` said at a line of
    ``filename`` (the test's ``__file__``); the texts."""
    where = [(w.filename, w.lineno, str(w.message)[:90]) for w in caught]
    assert [w.filename for w in caught] == [filename] * len(caught), where
    assert all(issubclass(w.category, UserWarning) for w in caught), where
    texts = [str(w.message) for w in caught]
    assert sorted(texts) == sorted(set(texts)), where  # each distinct warning once
    assert len(texts) == len(starts) and all(sum(t.startswith(s) for t in texts) == 1 for s in starts), where
    return texts
