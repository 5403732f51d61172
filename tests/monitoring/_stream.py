"""Synthetic triage folders and a throwaway PostgreSQL server for the monitoring tests."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from monai_unc.io.provenance import rule_digest
from tests._ranks import free_port


def make_rule(calibration: Sequence[float], target: float = 0.1, risk: str = "failure", tag: str = "") -> dict:
    """A referral rule's JSON as triage.json records it (the fields the store reads), with its digest."""
    rule = {"format": "monai-unc referral rule", "score": {"column": "predictive_entropy_fg_mean"}, "num_classes": 3,
            "regions": None,
            "target_risk": target, "risk": risk, "failure_dice": 0.8, "threshold": 0.5, "tag": tag,
            "calibration": {"case_scores": [float(v) for v in calibration]},
            "fingerprint": {"weights": [{"file": "net.pt", "sha256": "ab" * 32}]}}
    rule["digest"] = rule_digest(rule)
    return rule


def write_triage(folder: Path, rule: dict, cases: Sequence[dict], images: dict[str, str] | None = None,
                 segs: dict[str, str] | None = None, digest: bool = False,
                 maps: dict[str, dict[str, str]] | None = None) -> Path:
    """A triage output folder: ``triage.json`` with ``cases`` (``case``, ``score``, ``decision`` ...) and, with
    ``digest``, its digest as triage writes it (without one, ``monitor record`` warns that it is unverified)."""
    folder.mkdir(parents=True, exist_ok=True)
    full = []
    for c in cases:
        accept = c.get("decision", "accept") == "accept"
        full.append({"case": c["case"], "score": c.get("score"), "decision": "accept" if accept else "review",
                     "code": "accepted" if accept else "above_threshold",
                     "reason": "accepted" if accept else "score above the threshold",
                     **({"image_z_max": c["image_z_max"]} if "image_z_max" in c else {})})
    doc = {"n_cases": len(full), "rule": rule, "cases": full,
           "fingerprint": {"status": "match", "predictions": {"weights": rule["fingerprint"]["weights"]}},
           "files": {c["case"]: {"image": (images or {}).get(c["case"]), "seg": (segs or {}).get(c["case"]),
                                 **({"maps": maps[c["case"]]} if maps and c["case"] in maps else {})}
                     for c in cases}}
    if digest:
        doc["digest"] = rule_digest(doc)
    (folder / "triage.json").write_text(json.dumps(doc))
    return folder


def postgres_binaries() -> Path | None:
    """The folder of initdb and pg_ctl, or None."""
    for name in ("pg_ctl",):
        found = shutil.which(name)
        if found and shutil.which("initdb"):
            return Path(found).resolve().parent
    for d in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (d / "initdb").exists() and (d / "pg_ctl").exists():
            return d
    return None


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL server in a temporary folder; yields its URL. Stopped and removed at the end.

    As root the server runs as the user ``nobody`` (PostgreSQL refuses to run as root).
    """
    bindir = postgres_binaries()
    if bindir is None:
        raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl)")
    root = Path(tempfile.mkdtemp(prefix="monai-unc-pg-"))
    data = root / "data"
    port = free_port()
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    run_as = ["runuser", "-u", "nobody", "--"] if as_root else []
    if as_root:
        os.chmod(root, 0o777)
    env = {**os.environ, "LC_ALL": "C"}
    try:
        subprocess.run([*run_as, str(bindir / "initdb"), "-D", str(data), "-U", "monitor", "-A", "trust",
                        "--no-sync"], check=True, capture_output=True, env=env, timeout=120)
        subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "-o",
                        f"-p {port} -k {root} -h 127.0.0.1 -F", "start"], check=True, capture_output=True, env=env,
                       timeout=120)
        subprocess.run([*run_as, str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "monitor",
                        "monitor"], check=True, capture_output=True, env=env, timeout=60)
        yield f"postgresql://monitor@127.0.0.1:{port}/monitor"
    finally:
        subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, env=env, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def raw_sql(url: str, sql: str) -> None:
    """Run SQL outside the store (what someone tampering with the database, or another program, would do)."""
    if url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql)
    else:
        import sqlite3

        conn = sqlite3.connect(url)
        conn.execute(sql)
        conn.commit()
        conn.close()
