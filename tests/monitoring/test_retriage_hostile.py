"""Scans triaged again under the same rule with another model (``--allow-mismatch`` after a model update) count once
per model in the rule's stream, and ``monitor status``, its ``--json`` and the dashboard say so (hostile review:
10 scans read as a stream of 20 cases without a word)."""

from __future__ import annotations

import json

from monai_unc import cli
from tests.monitoring._stream import make_rule, write_triage


def _retriaged(folder, rule, cases, digest):
    """A triage folder of ``cases`` whose predictions came from another model (weights ``digest``)."""
    out = write_triage(folder, rule, cases)
    doc = json.loads((out / "triage.json").read_text())
    doc["fingerprint"] = {"status": "mismatch", "allowed_mismatch": True,
                          "predictions": {"weights": [{"file": "net.pt", "sha256": digest}]}}
    (out / "triage.json").write_text(json.dumps(doc))
    return out


def test_scans_triaged_again_with_another_model_are_noted(tmp_path, capsys):
    rule = make_rule([0.1 * i for i in range(1, 20)])
    first = write_triage(tmp_path / "jan", rule, [{"case": f"c{i}", "score": 0.2 * i + 0.1} for i in range(10)])
    again = _retriaged(tmp_path / "jan-new-model", rule,
                       [{"case": f"c{i}", "score": 0.2 * i + 0.11} for i in range(10)], "cd" * 32)
    # a later batch that reuses case ids with the first model: other scans, not noted
    later = write_triage(tmp_path / "feb", rule, [{"case": f"c{i}", "score": 0.2 * i + 0.12} for i in range(3)])
    db = tmp_path / "monitor.db"
    for folder in (first, again, later):
        assert cli.main(["monitor", "record", str(folder), "--db", str(db), "--site", "A"]) == 0
    capsys.readouterr()
    assert cli.main(["monitor", "status", "--db", str(db), "--json", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert "10 of 23 case row(s) triage again a case id the stream recorded with another model" in out, out
    assert "--allow-mismatch" in out
    stream = json.loads((tmp_path / "s.json").read_text())["streams"][0]
    assert (stream["n_cases"], stream["n_retriaged"]) == (23, 10)
    assert cli.main(["monitor", "report", "--db", str(db), "-o", str(tmp_path / "dash.html")]) == 0
    assert "triage again a case id the stream recorded with another model" in (tmp_path / "dash.html").read_text()


def test_no_note_without_another_model(tmp_path, capsys):
    rule = make_rule([0.1 * i for i in range(1, 20)])
    db = tmp_path / "monitor.db"
    for month, shift in (("jan", 0.0), ("feb", 0.01)):
        cases = [{"case": f"c{i}", "score": 0.3 * i + 0.1 + shift} for i in range(5)]
        folder = write_triage(tmp_path / month, rule, cases)
        assert cli.main(["monitor", "record", str(folder), "--db", str(db), "--site", "A"]) == 0
    capsys.readouterr()
    assert cli.main(["monitor", "status", "--db", str(db)]) == 0
    assert "another model" not in capsys.readouterr().out
