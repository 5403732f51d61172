"""``monitor verify``: the table ``monitor_meta`` against the audit log, and a head kept elsewhere (``--expect-head``).

Before: an edit of ``monitor_meta`` was not covered at all, and a head kept from an earlier check was compared with
the current head only, so every run recorded since (the normal life of a store) read as "entries were removed from the
end": the tail check could not be used on a store in use.
"""

from __future__ import annotations

import json
import re

import pytest

from monai_unc import cli
from monai_unc.monitoring import GENESIS, MonitorStore, read_triage_run

from ._stream import make_rule, raw_sql, write_triage


def _record(store, folder):
    run = read_triage_run(folder, site="S")
    return store.record_run(run.rule, run.cases, source_digest=run.source_digest, folder=str(run.folder),
                            triaged_at=run.triaged_at, model_digest=run.model_digest, command=["test"])


def _store_with_runs(store_url, tmp_path, n):
    rule = make_rule([0.1, 0.2])
    heads = []
    with MonitorStore(store_url) as store:
        heads.append(store.verify().head)
        for k in range(n):
            _record(store, write_triage(tmp_path / f"t{k}", rule, [{"case": f"c{k}", "score": 0.1 * k}]))
            heads.append(store.verify().head)
    return heads


@pytest.mark.parametrize("edit, message", [
    ("UPDATE monitor_meta SET value = '01' WHERE key = 'schema_version'", "schema version in the table monitor_meta"),
    ("INSERT INTO monitor_meta (key, value) VALUES ('alpha', '0.5')", "key(s) that monai-unc never writes ('alpha')"),
])
def test_an_edit_of_monitor_meta_is_reported(store_url, tmp_path, edit, message):
    _store_with_runs(store_url, tmp_path, 1)
    with MonitorStore(store_url, read_only=True) as store:
        assert store.verify().ok
    raw_sql(store_url, edit)
    with MonitorStore(store_url, read_only=True) as store:
        res = store.verify()
    assert not res.ok and len(res.problems) == 1 and message in res.problems[0], res.problems


def test_a_kept_head_holds_while_the_chain_grows(store_url, tmp_path):
    heads = _store_with_runs(store_url, tmp_path, 3)  # migrate, then 3 records: heads of entries 1..4
    with MonitorStore(store_url, read_only=True) as store:
        for seq, head in enumerate(heads, start=1):  # each head an earlier check printed: entries appended since
            res = store.verify(expect_head=head)
            assert res.ok and res.expected_entry == seq and res.n_entries == 4, res.problems
        res = store.verify(expect_head=GENESIS)  # kept while the store was empty
        assert res.ok and res.expected_entry == 0
        assert store.verify(expect_head=f"  {heads[1].upper()}\n").expected_entry == 2  # a copy from a ticket
        res = store.verify(expect_head="ab" * 32)  # a head of no entry: another database
        assert not res.ok and res.expected_entry is None and "no entry of the audit chain" in res.problems[0]
        for bad in ("abc", heads[1][:16], 12, "g" * 64):
            with pytest.raises(ValueError, match="expect_head must be the head hash") as caught:
                store.verify(expect_head=bad)
            assert caught.value.parameter == "expect_head"


def test_a_kept_head_catches_a_cut_tail_and_a_rewritten_chain(store_url, tmp_path):
    heads = _store_with_runs(store_url, tmp_path, 2)
    raw_sql(store_url, "DELETE FROM cases WHERE run_id = 2")
    raw_sql(store_url, "DELETE FROM runs WHERE id = 2")
    raw_sql(store_url, "DELETE FROM audit WHERE seq = 3")
    with MonitorStore(store_url, read_only=True) as store:
        assert store.verify().ok and store.verify(expect_head=heads[1]).ok  # the chain alone cannot tell
        res = store.verify(expect_head=heads[2])  # the head kept after the second run
        assert not res.ok and "no entry of the audit chain has the expected head" in res.problems[0]


def _main(argv, capsys):
    capsys.readouterr()
    rc = cli.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_command_line_checks_a_kept_head(tmp_path, capsys):
    db = str(tmp_path / "monitor.db")
    rule = make_rule([0.1, 0.2])
    args = ["monitor", "record", str(write_triage(tmp_path / "t0", rule, [{"case": "a", "score": 0.1}])), "--db", db]
    assert _main(args, capsys)[0] == 0
    rc, out, _ = _main(["monitor", "verify", "--db", db, "--json", str(tmp_path / "v.json")], capsys)
    head = re.search(r"head ([0-9a-f]{64})", out).group(1)
    doc = json.loads((tmp_path / "v.json").read_text())
    assert rc == 0 and doc == {"ok": True, "n_entries": 2, "head": head, "expected_entry": None, "problems": []}
    args = ["monitor", "record", str(write_triage(tmp_path / "t1", rule, [{"case": "b", "score": 0.2}])), "--db", db]
    assert _main(args, capsys)[0] == 0  # a run recorded since: the kept head still holds
    rc, out, _ = _main(["monitor", "verify", "--db", db, "--expect-head", head], capsys)
    assert rc == 0 and "the expected head is entry 2 of 3 (1 entries appended since)" in out, out
    rc, out, _ = _main(["monitor", "verify", "--db", db, "--expect-head", "cd" * 32], capsys)
    assert rc == 1 and "PROBLEM: no entry of the audit chain has the expected head" in out
    rc, out, err = _main(["monitor", "verify", "--db", db, "--expect-head", head[:20]], capsys)
    assert rc == 2 and err.count("\n") == 1 and "--expect-head must be the head hash" in err, err
    rc, _, err = _main(["monitor", "verify", "--db", db, "--json", db], capsys)
    assert rc == 2 and "is the monitoring store itself" in err
