"""``monitor verify`` on an audit entry whose digest matches none of its zeros' signs: before and after review 64.

An entry written before monai-unc stored ``-0.0`` as ``0.0`` hashed its zeros with their signs, so ``verify`` tries
the signs of up to 10 zeros in every combination (1024 digests of the entry's rows); an edited entry tries them all.
In the same run, on the same rows (``--rows`` cases, 10 zero scores at random rows, a digest that none matches):

- **whole entry per variant**: the code before review 64 (each variant serializes and hashes every row);
- **shared prefix**: :func:`monai_unc.monitoring.store._digest_up_to_zero_signs` (the hash state of the unchanged
  text before a variant's first negated zero copied, only the rest hashed);
- **floor**: one ``rows_digest`` of the entry (what any verify of it does).

Both must give the same answer. Times are CPU seconds of this process; zeros at random rows (the median case) and
all in the first rows (the worst: every variant hashes almost the whole entry) are timed.

    python benchmarks/bench_verify_zero_signs.py               # 1e5 rows
    python benchmarks/bench_verify_zero_signs.py --rows 10000  # quicker
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monai_unc.monitoring.store import (  # noqa: E402
    _ZERO_SIGN_COLUMNS,
    _ZERO_SIGN_SUBSETS,
    _ZERO_SIGN_WORK,
    _canonical,
    _clean,
    _digest_up_to_zero_signs,
    rows_digest,
)


def whole_entry_per_variant(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], expected: Any) -> bool | None:
    """``_digest_up_to_zero_signs`` before review 64 (the reference)."""
    def row_text(r: Mapping[str, Any], negated: set[str]) -> str:
        return _canonical([_clean(-r[c] if c in negated else r[c]) for c in columns])

    try:  # rows_digest's JSON, one row at a time: a variant serializes only the rows whose zeros it negates
        texts = [row_text(r, set()) for r in rows]
    except (TypeError, ValueError):  # a value that no row of ours holds (bytes, a NaN): edited
        return False

    def digest(flipped: frozenset[tuple[int, str]]) -> str:
        negated: dict[int, set[str]] = {}
        for i, c in flipped:
            negated.setdefault(i, set()).add(c)
        changed = {i: row_text(rows[i], cs) for i, cs in negated.items()}
        body = ",".join(changed.get(i, t) for i, t in enumerate(texts))
        return hashlib.sha256(f"[{body}]".encode()).hexdigest()

    if digest(frozenset()) == expected:
        return True
    zeros = [(i, c) for i, r in enumerate(rows) for c in columns
             if c in _ZERO_SIGN_COLUMNS and isinstance(r[c], float) and r[c] == 0]
    by_column = sorted({c for _, c in zeros})
    tried = {frozenset()}
    for mask in range(1, 1 << len(by_column)):
        chosen = {by_column[k] for k in range(len(by_column)) if mask >> k & 1}
        tried.add(frozenset(z for z in zeros if z[1] in chosen))
    every = len(zeros) <= _ZERO_SIGN_SUBSETS or (
        len(zeros) < _ZERO_SIGN_WORK.bit_length() and (1 << len(zeros)) * len(rows) <= _ZERO_SIGN_WORK)
    if any(digest(flipped) == expected for flipped in tried if flipped):
        return True
    if not every:
        return None
    tried_all = (frozenset(z for k, z in enumerate(zeros) if mask >> k & 1) for mask in range(1, 1 << len(zeros)))
    return any(digest(flipped) == expected for flipped in tried_all if flipped not in tried)


COLUMNS = ["case_id", "site", "score", "image_z_max", "expected_dice", "decision", "code"]


def cpu(fn, *args):  # noqa: ANN001, ANN202
    t0 = time.process_time()
    out = fn(*args)
    return time.process_time() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    n = args.rows
    rows = [{"case_id": f"case_{i:07d}", "site": f"Centre {i % 20}", "score": float(s), "image_z_max": float(z),
             "expected_dice": float(d), "decision": "accept", "code": "accepted"}
            for i, (s, z, d) in enumerate(zip(rng.uniform(size=n), rng.normal(size=n), rng.uniform(size=n)))]
    print(f"{n} rows, 10 zero scores, a digest that no sign matches (every one of the 1024 variants tried)")
    for name, where in (("zeros at random rows", rng.choice(n, 10, replace=False)), ("zeros in the first rows",
                                                                                      np.arange(10))):
        case = [dict(r) for r in rows]
        for i in where.tolist():
            case[i]["score"] = 0.0
        t_floor, _ = cpu(rows_digest, case, COLUMNS)
        t_old, old = cpu(whole_entry_per_variant, case, COLUMNS, "0" * 64)
        t_new, new = cpu(_digest_up_to_zero_signs, case, COLUMNS, "0" * 64)
        if old is not new:
            raise SystemExit(f"{name}: the answers differ ({old} vs {new})")
        print(f"{name:>24}: whole entry per variant {t_old:6.2f} s, shared prefix {t_new:5.2f} s "
              f"({t_old / t_new:5.1f}x faster); floor {t_floor:5.3f} s (ratio to the floor: before "
              f"{t_old / t_floor:6.0f}, now {t_new / t_floor:5.0f}); same answer ({new})")


if __name__ == "__main__":
    main()
