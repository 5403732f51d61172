"""The content digest of a JSON document, with the standard library only.

One formula for :func:`monai_unc.io.provenance.rule_digest` (rule files, product artifacts) and
:func:`monai_unc.monitoring.store.rule_body_digest` (the store recomputes a recorded rule's digest in a process
that runs without torch, so this module imports nothing of the package).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from typing import Any


def content_digest(doc: Mapping[str, Any], leave_out: Collection[str] = ()) -> str:
    """``"sha256:"`` and the SHA-256 of a JSON object's canonical text, without the fields ``leave_out``.

    Canonical text: keys sorted, no spaces, UTF-8 (``ensure_ascii=False``), ``NaN`` / infinities refused.

    Args:
        doc: the JSON object.
        leave_out: top-level fields the digest does not cover (e.g. the digest itself and a signature).

    Returns:
        ``"sha256:"`` and 64 hex digits.

    Raises:
        ValueError: the object holds a value that is not JSON text (NaN, an infinity, a lone surrogate).
        TypeError: the object holds a value that is not JSON data.

    Example:
        >>> with_digest = {"b": 1, "a": [1.5, "é"], "digest": "x"}
        >>> content_digest(with_digest, ("digest",)) == content_digest({"a": [1.5, "é"], "b": 1})
        True
    """
    body = {k: v for k, v in doc.items() if k not in leave_out}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
