"""Review 61 of monitoring: each test failed before its fix, or pins behaviour against an independent computation.

- a store written before monai-unc stored a negative zero as ``0.0`` holds audit digests computed over ``-0.0``;
  SQLite reads the value back as ``0.0``, so ``monitor verify`` reported such an untouched store as tampered;
- ``verify`` accepted a run's case rows re-sorted by case id, and two cases of a run whose row ids were swapped (the
  stream every alarm tests reordered): the within-run order was checked against two orders, either accepted;
- a prediction's digest was kept only when the file's modification time was before ``triage.json``'s: a prediction
  written by a host whose clock is ahead lost it (a follow-up scan reusing the case id was then skipped as recorded),
  and one written over by a host whose clock is behind was taken for the one triage read;
- ``monitor report -o`` and ``status`` / ``verify --json`` replaced any file (the rule, an audit table) but the store.

Pinned: the score alarms of ``monitor status`` (stream order, martingale, alarm, change point, positions with
undefined scores) against a brute-force recomputation from the records alone.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest

import monai_unc.monitoring.store as store_module
from monai_unc import cli
from monai_unc.engine.cache import CaseCache
from monai_unc.evaluation.config import STATE_DIR
from monai_unc.evaluation.resume import CASES_DIR
from monai_unc.evaluation.triage.runner import _triage_fingerprint
from monai_unc.io import CaseFiles
from monai_unc.io.files import save_nifti
from monai_unc.monitoring import MonitorStore, prediction_digest, read_triage_run
from monai_unc.monitoring.store import CaseRecord, entry_hash, rule_body_digest
from monai_unc.workflows.monitor import record_triage

from ._stream import make_rule, raw_sql, write_triage

RULE = {"score": "mean_entropy", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8}
RULE["digest"] = rule_body_digest(RULE)


def _cases(ids, scores):
    return [CaseRecord(c, "A", None, "2026-01-31T00:00:00+00:00", s, float("nan"), float("nan"),
                       "accept" if s < 0.5 else "review", "accepted" if s < 0.5 else "above_threshold", "r",
                       RULE["digest"], None) for c, s in zip(ids, scores)]


def _record(url, ids, scores, source="jan"):
    with MonitorStore(url) as store:
        store.record_run(RULE, _cases(ids, scores), source_digest=source, folder=f"t_{source}",
                         triaged_at="2026-01-31T00:00:00+00:00", model_digest=None, command=["test"])


def _problems(url):
    with MonitorStore(url, read_only=True) as store:
        return list(store.verify().problems)


def _old_writer():
    """The writes of monai-unc before review 60's fix: a negative zero stored, and hashed, as it came."""
    return mock.patch.object(store_module, "_unsigned_zero", lambda v: v)


# ------------------------------------------------------------------------------------------ 1. an old -0.0 store
def test_a_store_written_with_negative_zeros_before_the_fix_verifies(store_url):
    with _old_writer():
        _record(store_url, ["a", "b", "c", "d"], [-0.0, 0.2, 0.0, -0.0])
        with MonitorStore(store_url) as store:
            store.add_labels([{"case": "a", "dice": -0.0, "failure": None, "loss": 1.0},
                              {"case": "b", "dice": 0.9, "failure": None, "loss": -0.0}], source="audit.csv")
    assert _problems(store_url) == []  # SQLite: the rows of both entries were reported edited


def test_a_column_of_many_negative_zeros_verifies(store_url):
    """More zeros than are tried one by one: those of one column share the sign one computation gave them."""
    with _old_writer():
        _record(store_url, [f"c{i:02d}" for i in range(40)], [-0.0] * 30 + [0.1 * k for k in range(1, 11)])
    assert _problems(store_url) == []


@pytest.mark.parametrize("edit", ["UPDATE cases SET score = 0.0 WHERE case_id = 'b'",
                                  "UPDATE cases SET score = 1e-300 WHERE case_id = 'a'",
                                  "UPDATE cases SET score = 0.6 WHERE case_id = 'c'",
                                  "UPDATE labels SET dice = 0.5 WHERE dice = 0",
                                  "UPDATE labels SET loss = 0.0 WHERE loss = 1"])
def test_an_old_store_with_negative_zeros_still_reports_an_edited_value(store_url, edit):
    with _old_writer():
        _record(store_url, ["a", "b", "c", "d"], [-0.0, 0.2, 0.0, -0.0])
        with MonitorStore(store_url) as store:
            store.add_labels([{"case": "a", "dice": -0.0, "failure": None, "loss": 1.0}], source="audit.csv")
    raw_sql(store_url, edit)
    assert any("were edited or deleted" in p for p in _problems(store_url)), edit


# -------------------------------------------------------------------------------------- 2. the order of a run
def _case_rows(url):
    with MonitorStore(url, read_only=True) as store:
        return [(r["row"], r["case_id"]) for r in store.cases()]


def _permute(url, new_ids):
    """Give the case rows new ids (``{old: new}``), each row otherwise unchanged: every digest of its rows holds."""
    if url.startswith("postgresql://"):  # an identity column: its values are set by hand once it is dropped
        raw_sql(url, "ALTER TABLE cases ALTER COLUMN id DROP IDENTITY IF EXISTS")
    for old in new_ids:
        raw_sql(url, f"UPDATE cases SET id = {-old} WHERE id = {old}")
    for old, new in new_ids.items():
        raw_sql(url, f"UPDATE cases SET id = {new} WHERE id = {-old}")


def test_a_run_re_sorted_by_case_id_is_reported(store_url):
    ids = [f"case_{i:02d}" for i in range(8)]
    _record(store_url, ids, [0.05 * i for i in range(8)])
    rows = _case_rows(store_url)
    assert [c for _, c in rows] != sorted(ids)  # written in the order of a hash of the ids
    slots = sorted(r for r, _ in rows)
    _permute(store_url, {r: slots[sorted(ids).index(c)] for r, c in rows})
    assert [c for _, c in _case_rows(store_url)] == sorted(ids)
    assert any("out of the order it wrote them in" in p for p in _problems(store_url))  # it verified


def test_two_cases_of_a_run_whose_row_ids_were_swapped_are_reported(store_url):
    _record(store_url, ["a", "b", "c"], [0.1, 0.2, 0.3])
    _record(store_url, ["x", "y"], [0.4, 0.6], source="feb")
    assert _problems(store_url) == []
    rows = _case_rows(store_url)
    (r1, _), (r2, _) = rows[3:]  # February's two cases: either order is that of their ids or of their hashes
    _permute(store_url, {r1: r2, r2: r1})
    assert [c for _, c in _case_rows(store_url)][3:] == [c for _, c in rows][3:][::-1]
    assert any("out of the order it wrote them in" in p for p in _problems(store_url))  # it verified


def _drop_order_digests(path):
    """The store as monai-unc wrote it before ``record`` entries held ``order_digest``: the chain recomputed."""
    conn = sqlite3.connect(path)
    prev = store_module.GENESIS
    for row in conn.execute("SELECT seq, at, actor, host, version, command, action, details, prev_hash FROM audit "
                            "ORDER BY seq").fetchall():
        entry = dict(zip(("seq", "at", "actor", "host", "version", "command", "action", "details", "prev_hash"), row))
        details = json.loads(entry["details"])
        details.pop("order_digest", None)
        entry["details"], entry["prev_hash"] = store_module._canonical(details), prev
        prev = entry_hash(entry)
        conn.execute("UPDATE audit SET details = ?, prev_hash = ?, hash = ? WHERE seq = ?",
                     (entry["details"], entry["prev_hash"], prev, entry["seq"]))
    conn.commit()
    conn.close()


def test_a_store_written_before_the_order_digest_verifies_and_keeps_the_earlier_check(tmp_path):
    url = str(tmp_path / "monitor.db")
    ids = [f"case_{i:02d}" for i in range(8)]
    _record(url, ids, [0.05 * i for i in range(8)])
    _drop_order_digests(url)
    assert _problems(url) == []
    rows = _case_rows(url)
    slots = sorted(r for r, _ in rows)
    _permute(url, {r: slots[sorted(ids).index(c)] for r, c in rows})  # case-id order, as earlier versions wrote it
    assert _problems(url) == []
    rows = _case_rows(url)
    _permute(url, {rows[0][0]: rows[1][0], rows[1][0]: rows[0][0]})  # neither hash nor case-id order
    assert any("out of the order the store writes them in" in p for p in _problems(url))


# -------------------------------------------------------------------------- 3. prediction digests and the clocks
def _seg(path, k):
    """A predicted label map whose voxels depend on ``k``."""
    seg = np.zeros((6, 6, 4), dtype=np.uint8)
    seg[1:4, 1:4, 1 + k % 2] = 1 + k // 2
    path.parent.mkdir(parents=True, exist_ok=True)
    save_nifti(seg, np.eye(4), path)
    return str(path)


def _triage_folder(folder, rule, case, score, pred):
    """A triage output folder as ``triage`` leaves it: ``triage.json`` and the per-case state of the files it read
    (the fingerprint ``triage`` keeps, :func:`~monai_unc.evaluation.triage.runner._triage_fingerprint`)."""
    files = CaseFiles(case, None, seg=Path(pred))
    rule_obj = SimpleNamespace(measure="predictive_entropy", patch_size=None, map_source="derived", num_classes=3,
                               class_names=None, regions=None, expected_dice_estimate="class_mean",
                               image_reference=None)
    CaseCache(folder / STATE_DIR / CASES_DIR).save(case, {"row": {}}, _triage_fingerprint(files, rule_obj))
    return write_triage(folder, rule, [{"case": case, "score": score}], segs={case: pred})


def _in_hours(path, hours):
    t = time.time() + hours * 3600
    os.utime(path, (t, t))


def test_a_prediction_written_by_a_host_whose_clock_is_ahead_keeps_its_digest(store_url, tmp_path):
    """Its modification time is after ``triage.json``'s: its digest was lost (None), so a follow-up scan reusing the
    case id with the same score was skipped as the decision already recorded, and the label check had nothing."""
    rule = make_rule([0.1, 0.2, 0.3])
    pred = _seg(tmp_path / "preds_jan" / "p001.nii.gz", 0)
    _in_hours(pred, 2)  # written on the GPU host, whose clock is two hours ahead
    run = read_triage_run(_triage_folder(tmp_path / "t1", rule, "p001", 0.0, pred), site="A")
    assert run.cases[0].prediction_sha256 == prediction_digest(pred) is not None  # it was None
    record_triage(store_url, tmp_path / "t1", site="A", command=["test"])
    follow_up = _seg(tmp_path / "preds_feb" / "p001.nii.gz", 3)  # another scan, the same id, the same score 0
    _in_hours(follow_up, 2)
    record_triage(store_url, _triage_folder(tmp_path / "t2", rule, "p001", 0.0, follow_up), site="A",
                  command=["test"])
    with MonitorStore(store_url, read_only=True) as store:
        rows = store.cases()
    assert [r["prediction_sha256"] for r in rows] == [prediction_digest(pred), prediction_digest(follow_up)]


def test_a_prediction_written_over_by_a_host_whose_clock_is_behind_is_not_taken_for_the_one_triage_read(tmp_path):
    """Its modification time is before ``triage.json``'s: the follow-up's digest was recorded as that of the
    prediction triage read."""
    rule = make_rule([0.1, 0.2, 0.3])
    pred = _seg(tmp_path / "preds" / "p001.nii.gz", 0)
    folder = _triage_folder(tmp_path / "t1", rule, "p001", 0.1, pred)
    _seg(tmp_path / "preds" / "p001.nii.gz", 3)  # written over since triage, by a host whose clock is behind
    _in_hours(pred, -2)
    assert read_triage_run(folder, site="A").cases[0].prediction_sha256 is None  # it was the follow-up's digest
    _seg(tmp_path / "preds" / "p001.nii.gz", 0)  # the same voxels again, but another version of the file: unknown
    assert read_triage_run(folder, site="A").cases[0].prediction_sha256 is None


def test_without_triage_state_the_time_of_triage_json_still_decides(tmp_path):
    """A triage folder without its per-case state (triage without resume, the state removed): as before."""
    rule = make_rule([0.1, 0.2, 0.3])
    pred = _seg(tmp_path / "preds" / "p001.nii.gz", 0)
    folder = write_triage(tmp_path / "t1", rule, [{"case": "p001", "score": 0.1}], segs={"p001": pred})
    assert read_triage_run(folder, site="A").cases[0].prediction_sha256 == prediction_digest(pred)
    _in_hours(pred, 2)
    assert read_triage_run(folder, site="A").cases[0].prediction_sha256 is None


# ----------------------------------------------------------------------------- 4. the outputs of report / --json
@pytest.mark.parametrize("argv", [["report", "-o"], ["status", "--json"], ["verify", "--json"]])
@pytest.mark.parametrize("victim", ["referral_rule.json", "audit.csv", "summary.json"])
def test_a_monitor_output_never_replaces_another_file(tmp_path, capsys, argv, victim):
    """``monitor report -o referral_rule.json`` (or ``status --json audit.csv``) replaced the rule or the audit table
    with the page or the figures, exit status 0."""
    db = tmp_path / "monitor.db"
    MonitorStore(db).close()
    target = tmp_path / victim
    content = '{"ok": true, "n_entries": 1}' if victim == "summary.json" else "case,dice\na,0.9\n"
    target.write_text(content)
    capsys.readouterr()
    rc = cli.main(["monitor", argv[0], "--db", str(db), argv[1], str(target)])
    err = capsys.readouterr().err.strip().splitlines()
    named = "--output " if argv[1] == "-o" else "--json "
    assert rc == 2 and len(err) == 1 and named in err[0] and "not an earlier" in err[0], err
    assert target.read_text() == content


@pytest.mark.parametrize("argv", [["report", "-o"], ["status", "--json"], ["verify", "--json"]])
def test_a_monitor_output_replaces_its_own_earlier_output(tmp_path, capsys, argv):
    db = tmp_path / "monitor.db"
    MonitorStore(db).close()
    out = tmp_path / ("page.html" if argv[0] == "report" else "out.json")
    out.write_text("")  # an empty file (mktemp) holds nothing to lose
    for _ in range(2):  # then the command's own earlier output
        assert cli.main(["monitor", argv[0], "--db", str(db), argv[1], str(out)]) == 0
    assert out.stat().st_size > 0
    other = {"report": ["status", "--json"], "status": ["verify", "--json"], "verify": ["report", "-o"]}[argv[0]]
    assert cli.main(["monitor", other[0], "--db", str(db), other[1], str(out)]) == 2  # not another command's


# ------------------------------------------------------------------ the alarms of status against a brute force
def _brute_pvalues(scores, reference, seed):
    tau, bag, out = np.random.default_rng(seed).uniform(size=len(scores)), list(reference), []
    for n, s in enumerate(scores):
        out.append((sum(b > s for b in bag) + tau[n] * (sum(b == s for b in bag) + 1)) / (len(bag) + 1))
        bag.append(s)
    return out


def _brute_jumper(pvalues, jump=0.01):
    """Vovk et al. 2021, Algorithm 1: three capitals, a fraction ``jump`` of the total spread evenly before each bet."""
    capital, out = [1 / 3, 1 / 3, 1 / 3], []
    for p in pvalues:
        total = sum(capital)
        capital = [(1 - jump) * k + jump * total / 3 for k in capital]
        capital = [capital[0] * (1.5 - p), capital[1], capital[2] * (0.5 + p)]
        out.append(math.log(sum(capital)))
    return out


def _brute_change(pvalues, alarm, k=0.2):
    best, start = -math.inf, 0
    for q in (pvalues[:alarm + 1], [1 - p for p in pvalues[:alarm + 1]]):
        gains = [math.log(k) + (k - 1) * math.log(max(v, 1e-12)) for v in q]
        sums = [sum(gains[i:]) for i in range(len(gains))]
        top = max(i for i, v in enumerate(sums) if v >= max(sums) - 1e-9)  # the last maximum
        if sums[top] > best:
            best, start = sums[top], top
    return start


def test_the_score_alarms_of_status_match_a_brute_force_recomputation(tmp_path):
    """Runs of three sites, undefined scores, a shift at one site: each stream's cases (run after run, each run in
    the order of a SHA-256 of its case ids), its martingale, alarm and change point (positions among the stream's
    cases, undefined scores included), recomputed from the records alone."""
    import hashlib

    from monai_unc.monitoring import monitor_status
    from monai_unc.monitoring.status import stream_seed

    rng = np.random.default_rng(61)
    cal = [round(v, 3) for v in rng.normal(0.3, 0.05, 40)]
    rule = {**RULE, "calibration": {"case_scores": cal}}
    rule["digest"] = rule_body_digest(rule)
    written, alarms = [], 0
    with MonitorStore(tmp_path / "m.db") as store:
        for run in range(6):
            recs = []
            for i in range(int(rng.integers(5, 25))):
                site = str(rng.choice(["A", "B", "C"]))
                s = round(float(rng.normal(0.3 + 0.15 * (run >= 3 and site == "B"), 0.05)), 3)
                s = float("nan") if rng.uniform() < 0.1 else s
                accept = not s >= 0.35  # NaN: accepted
                recs.append(CaseRecord(f"r{run}_{i}", site, None, "2026-01-01T00:00:00+00:00", s, float("nan"),
                                       float("nan"), "accept" if accept else "review",
                                       "accepted" if accept else "above_threshold", "r", rule["digest"], None))
            store.record_run(rule, recs, source_digest=str(run), folder="f", triaged_at="t", model_digest=None,
                             command=["test"])
            written += sorted(recs, key=lambda c: hashlib.sha256(c.case_id.encode()).digest())
        groups = monitor_status(store.cases(), store.rules(), 0.05)
    assert [g.site for g in groups] == ["A", "B", "C", "(all sites)"]
    for g in groups:
        rows = [r for r in written if g.pooled or r.site == g.site]
        assert [c["case_id"] for c in g.cases] == [r.case_id for r in rows]
        at = [i for i, r in enumerate(rows) if not math.isnan(r.score)]
        p = _brute_pvalues([rows[i].score for i in at], cal, stream_seed(rule["digest"], g.site, "score"))
        log_s = _brute_jumper(p)
        np.testing.assert_allclose(g.score.log_martingale, log_s, rtol=1e-9, atol=1e-12)
        first = next((n for n, v in enumerate(log_s) if v >= math.log(20) * (1 - 1e-12)), None)
        expected = None if first is None else (at[first], at[_brute_change(p, first)])
        assert g.alarm_positions("score") == expected, g.site
        alarms += first is not None
    assert alarms >= 1  # the shift at site B is seen


def test_the_triage_state_read_stays_in_its_folder_and_reads_regular_files_only(tmp_path):
    """A case id of triage.json is untrusted: ``../`` ids and a FIFO named ``<case>.json`` are not read (the review of
    review 61 read a state outside the folder through ``../../outside``)."""
    import json
    import os

    from monai_unc.evaluation.config import STATE_DIR
    from monai_unc.evaluation.resume import CASES_DIR
    from monai_unc.monitoring.records import _triage_read_signature

    folder = tmp_path / "tri"
    cases = folder / STATE_DIR / CASES_DIR
    cases.mkdir(parents=True)
    pred = tmp_path / "p_seg.nii.gz"
    sig = [str(pred.resolve()), 10, 20]

    def state(case: str) -> str:
        return json.dumps({"case": case, "fingerprint": {"inputs": {"seg": sig}}})

    (cases / "c1.json").write_text(state("c1"))
    assert _triage_read_signature(folder, "c1", pred) == sig  # the premise: a state in the folder is read
    outside = "../../../outside"
    (cases / f"{outside}.json").resolve().write_text(state(outside))
    assert _triage_read_signature(folder, outside, pred) is None
    if hasattr(os, "mkfifo"):
        os.mkfifo(cases / "c2.json")
        assert _triage_read_signature(folder, "c2", pred) is None  # returns at once instead of blocking
