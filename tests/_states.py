"""Per-case resume states rewritten by tests (an earlier layout, a damaged record) and signed again."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def sign_case_state(npz: Path) -> None:
    """Sign a rewritten ``state/cases/<case>.npz`` as the run that wrote it would have: its ``<case>.json`` names the
    sha256 of the ``.npz`` saved with it (``arrays_sha256``), and the JSON's own ``digest`` covers that text (the
    digest computed here as the cache defines it: sha256 of the canonical JSON without ``digest``)."""
    record = npz.with_suffix(".json")
    doc = json.loads(record.read_text())
    doc["arrays_sha256"] = hashlib.sha256(npz.read_bytes()).hexdigest()
    write_signed_state(record, doc)


def write_signed_state(record: Path, doc: dict) -> None:
    """Write a per-case state ``doc`` to ``record`` with the digest the cache gives it (sha256 of the canonical JSON
    without ``digest``), as a run that saved such a state would have written it."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    doc = {**body, "digest": "sha256:" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()}
    record.write_text(json.dumps(doc) + "\n")
