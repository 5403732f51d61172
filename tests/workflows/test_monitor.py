"""``monai-unc monitor``: record, label, status (exit 1 on an alarm), verify (exit 1 when tampered), the dashboard."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import pytest

from monai_unc import cli
from monai_unc.io import write_csv
from monai_unc.workflows.monitor import MONITOR_DB_ENV

from ..monitoring._stream import make_rule, write_triage

PAYLOAD = '"><img src=x onerror=alert(1)><script>alert(2)</script>'


def _main(argv, capsys):
    capsys.readouterr()
    rc = cli.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def stream(tmp_path):
    """Eight triage runs of 30 cases at two sites; site A's scores move up from run 4 (a new scanner)."""
    rng = np.random.default_rng(2)  # runs in the store's order (a hash of the case ids): no chance alarm before run 4
    rule = make_rule(list(rng.normal(size=200)), target=0.1)
    folders = []
    for k in range(8):
        cases = []
        for i in range(30):
            site = "A" if i % 2 else f"B{PAYLOAD}"
            shift = 2.5 if site == "A" and k >= 4 else 0.0
            s = float(rng.normal() + shift)
            cases.append({"case": f"r{k}c{i}{PAYLOAD if i == 3 else ''}", "score": s,
                          "decision": "accept" if s < 1.5 else "review", "image_z_max": float(abs(rng.normal()))})
        folder = write_triage(tmp_path / f"run{k}", rule, cases)
        write_csv(tmp_path / f"sites{k}.csv",
                  [{"case": c["case"], "site": "A" if i % 2 else f"B{PAYLOAD}"} for i, c in enumerate(cases)])
        folders.append(folder)
    return tmp_path, folders


def test_record_status_label_verify_report(stream, capsys):
    root, folders = stream
    db = str(root / "monitor.db")
    for k in range(4):  # before the change: no alarm
        rc, out, err = _main(["monitor", "record", str(folders[k]), "--db", db, "--sites", str(root / f"sites{k}.csv"),
                              "--time", f"2026-01-0{k + 1}T00:00:00"], capsys)
        assert rc == 0, err
        assert out.startswith("recorded 30 case(s) from 2 site(s)")
    rc, out, err = _main(["monitor", "status", "--db", db], capsys)
    assert rc == 0, out + err
    assert "no alarm" in out and "(all sites)" in out
    assert "the image martingale ranks each case against the stream's earlier cases only" in out  # no statistics
    for k in range(4, 8):
        assert _main(["monitor", "record", str(folders[k]), "--db", db, "--sites", str(root / f"sites{k}.csv"),
                      "--time", f"2026-01-0{k + 1}T00:00:00", "-q"], capsys)[:2] == (0, "")
    rc, out, _ = _main(["monitor", "status", "--db", db, "--json", str(root / "status.json")], capsys)
    assert rc == 1 and "ALARM [A] score distribution changed" in out  # exit status 1 for cron and CI
    assert "\x1b" not in out and (root / "status.json").is_file()
    streams = json.loads((root / "status.json").read_text())["streams"]
    assert [s["image_against_calibration"] for s in streams] == [False] * 3  # the rule records no image statistics
    # the change estimate names a case of the first shifted run
    assert re.search(r"change estimated from case 'r4c", out), out
    assert _main(["monitor", "status", "--db", db, "-q"], capsys)[:2] == (1, "")
    # audited labels
    (root / "labels.csv").write_text("case,dice\nr0c1,0.95\nr0c5,0.5\n")
    rc, out, err = _main(["monitor", "label", "--labels", str(root / "labels.csv"), "--db", db], capsys)
    assert (rc, out.strip()) == (0, "recorded 2 audited label(s)"), err
    (root / "bad.csv").write_text("case,dice\nnope,0.5\n")
    rc, out, err = _main(["monitor", "label", "--labels", str(root / "bad.csv"), "--db", db], capsys)
    assert rc == 2 and "not in the monitoring store" in err and len(err.strip().splitlines()) == 1
    # a Dice and a failure that disagree under the rule's failure Dice: one line naming the case, nothing recorded
    (root / "both.csv").write_text("case,dice,failure\nr0c1,0.4,0\n")
    rc, out, err = _main(["monitor", "label", "--labels", str(root / "both.csv"), "--db", db], capsys)
    assert rc == 2 and "case 'r0c1'" in err and "disagree" in err and len(err.strip().splitlines()) == 1, err
    # the audit chain
    rc, out, _ = _main(["monitor", "verify", "--db", db], capsys)
    assert rc == 0 and "intact" in out
    head = re.search(r"head ([0-9a-f]{64})", out).group(1)
    assert _main(["monitor", "verify", "--db", db, "--expect-head", head], capsys)[0] == 0
    # the dashboard: payloads in site names and case ids are text
    page = root / "dash" / "monitor.html"
    rc, out, err = _main(["monitor", "report", "--db", db, "-o", str(page)], capsys)
    assert rc == 0, err
    text = page.read_text()
    assert "<img src=x" not in text and "<script" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert text.count("<svg") >= 3 * 3 and "ALARM" in text  # 3 streams: martingales, acceptance, scores (+ risk)
    assert text.count("Note: the image martingale ranks each case against the stream") == 3  # one per stream
    # tampering: verify exits 1
    conn = sqlite3.connect(db)
    conn.execute("UPDATE audit SET command = 'nothing to see' WHERE seq = 3")
    conn.commit()
    conn.close()
    rc, out, _ = _main(["monitor", "verify", "--db", db], capsys)
    assert rc == 1 and "PROBLEM: audit entry 3 was edited" in out


def test_errors_are_one_line_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(MONITOR_DB_ENV, raising=False)
    for argv, message in [
        (["monitor", "status"], "--db is required"),
        (["monitor", "status", "--db", str(tmp_path / "none.db")], "does not exist"),
        (["monitor", "status", "--db", "mysql://u@h/d"], "unsupported URL"),
        (["monitor", "record", str(tmp_path), "--db", str(tmp_path / "m.db")], "no triage.json"),
    ]:
        rc, out, err = _main(argv, capsys)
        assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, (argv, err)
    with pytest.raises(SystemExit) as e:
        cli.main(["monitor", "status", "--alpha", "2"])
    assert e.value.code == 2


def test_the_db_from_the_environment(tmp_path, capsys, monkeypatch):
    folder = write_triage(tmp_path / "t", make_rule([0.1, 0.2]), [{"case": "a", "score": 0.15}])
    monkeypatch.setenv(MONITOR_DB_ENV, str(tmp_path / "env.db"))
    assert _main(["monitor", "record", str(folder)], capsys)[0] == 0
    assert (tmp_path / "env.db").is_file()
    rc, out, _ = _main(["monitor", "status"], capsys)
    assert rc == 0 and "unknown" in out


@pytest.mark.slow
def test_chromium_shows_the_dashboard(stream, tmp_path, capsys):
    """Headless Chromium opens the dashboard from file://: no console error, no injected element, the payloads are
    text; the screenshot is kept ($MONAI_UNC_TEST_ARTEFACTS when set)."""
    exe = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    if exe is None:
        pytest.skip("Chromium is not installed (CI installs the Debian package 'chromium')")
    root, folders = stream
    db = str(root / "m.db")
    for k, f in enumerate(folders):
        assert _main(["monitor", "record", str(f), "--db", db, "--sites", str(root / f"sites{k}.csv"), "-q"],
                     capsys)[0] == 0
    page = root / "monitor.html"
    assert _main(["monitor", "report", "--db", db, "-o", str(page), "-q"], capsys)[0] == 0
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--enable-logging=stderr", "--v=0",
             f"--user-data-dir={tmp_path / 'profile'}"]
    url = page.resolve().as_uri()
    r = subprocess.run([exe, *flags, "--virtual-time-budget=3000", "--dump-dom", url], capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    assert "Monitoring of the deployed model" in dom and "<img" not in dom and "alert(2)</script>" not in dom
    assert "B\"&gt;&lt;img src=x onerror=alert(1)&gt;" in dom  # the site name, as text
    console = [ln for ln in r.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not console, console
    art = Path(os.environ.get("MONAI_UNC_TEST_ARTEFACTS", tmp_path))
    art.mkdir(parents=True, exist_ok=True)
    shot = art / "monitor_dashboard.png"
    r = subprocess.run([exe, *flags, "--window-size=1280,2400", f"--screenshot={shot}", url], capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    from PIL import Image

    img = np.asarray(Image.open(shot).convert("RGB"), dtype=np.float64)
    assert img.std() > 20 and (np.abs(img - [35, 50, 74]).sum(-1) < 10).mean() > 0.005  # drawn, header band there


def test_labels_from_a_folder_of_label_maps(tmp_path, capsys):
    """``monitor label --labels FOLDER``: each map's Dice against the prediction triage read (mean foreground Dice,
    a class absent from both scoring 1), then the rule's failure."""
    from monai_unc.io import save_nifti
    from monai_unc.monitoring import MonitorStore

    rng = np.random.default_rng(0)
    labels, preds = tmp_path / "labels", tmp_path / "preds"
    labels.mkdir()
    preds.mkdir()
    expected = {}
    for cid in ("a", "b"):
        seg = rng.integers(0, 3, (6, 7, 5))
        lab = seg.copy() if cid == "a" else rng.integers(0, 2, (6, 7, 5))  # b: class 2 only in the prediction
        save_nifti(seg.astype(np.uint8), np.eye(4), preds / f"{cid}_seg.nii.gz")
        save_nifti(lab.astype(np.uint8), np.eye(4), labels / f"{cid}.nii.gz")
        d = []
        for k in (1, 2):  # brute force: 2 |A & B| / (|A| + |B|), 1 when both empty
            a, b = seg == k, lab == k
            d.append(1.0 if a.sum() + b.sum() == 0 else 2 * (a & b).sum() / (a.sum() + b.sum()))
        expected[cid] = float(np.mean(d))
    folder = write_triage(tmp_path / "t", make_rule([0.1, 0.2]), [{"case": "a", "score": 0.1},
                                                                  {"case": "b", "score": 0.15}],
                          segs={c: str(preds / f"{c}_seg.nii.gz") for c in "ab"})
    db = str(tmp_path / "m.db")
    assert _main(["monitor", "record", str(folder), "--db", db, "-q"], capsys)[0] == 0
    rc, out, err = _main(["monitor", "label", "--labels", str(labels), "--db", db], capsys)
    assert rc == 0, err
    with MonitorStore(db) as store:
        got = {c["case_id"]: (c["dice"], c["loss"]) for c in store.cases()}
    assert got["a"] == (pytest.approx(1.0), 0.0)
    assert got["b"][0] == pytest.approx(expected["b"], abs=1e-6) and got["b"][1] == float(expected["b"] < 0.8)
    (labels / "zzz.nii.gz").write_bytes((labels / "a.nii.gz").read_bytes())
    rc, _, err = _main(["monitor", "label", "--labels", str(labels), "--db", db], capsys)
    assert rc == 2 and "not in the monitoring store" in err


def _region_dice(pred_masks, label, spec):
    """Brute force: per region 2 |A & B| / (|A| + |B|) (1 when both are empty), then the mean over the regions."""
    out = []
    for r, labels in enumerate(spec.values()):
        a, b = pred_masks[r].astype(bool), np.isin(label, labels)
        out.append(1.0 if a.sum() + b.sum() == 0 else 2 * (a & b).sum() / (a.sum() + b.sum()))
    return float(np.mean(out))


@pytest.mark.parametrize("risk", ["failure", "1-dice"])
def test_label_maps_of_a_region_rule_give_the_risk_of_the_csv_route(tmp_path, capsys, risk):
    """A region-based rule: each label map's Dice is the mean over the rule's regions (region masks from the spec),
    against a prediction of region masks (monai-unc infer --activation sigmoid) or a label map (nnU-Net); the audited
    risk is the one a CSV of the same Dice gives."""
    from monai_unc.io import save_nifti, save_region_maps
    from monai_unc.io.provenance import rule_digest
    from monai_unc.monitoring import MonitorStore

    spec = {"WT": [1, 2, 3], "TC": [1, 3], "ET": [3]}
    rng = np.random.default_rng(2)
    labels, preds = tmp_path / "labels", tmp_path / "preds"
    labels.mkdir()
    preds.mkdir()
    expected = {}
    for cid in ("masks", "labelmap", "same", "noET"):
        lab = rng.integers(0, 4, (6, 7, 5))
        if cid == "noET":
            lab[lab == 3] = 1  # ET empty in the label; the prediction has none either: that region scores 1
        lab_pred = lab.copy() if cid == "same" else rng.integers(0, 3 if cid == "noET" else 4, (6, 7, 5))
        masks = np.stack([np.isin(lab_pred, v) for v in spec.values()]).astype(np.uint8)
        if cid == "labelmap":
            save_nifti(lab_pred.astype(np.uint8), np.eye(4), preds / f"{cid}_seg.nii.gz")
        else:
            save_region_maps(masks, np.eye(4), preds / f"{cid}_seg.nii.gz", dtype="uint8")
        save_nifti(lab.astype(np.uint8), np.eye(4), labels / f"{cid}.nii.gz")
        expected[cid] = _region_dice(masks, lab, spec)
    assert expected["same"] == 1.0 and 0 < expected["masks"] < 0.8
    rule = make_rule([0.1, 0.2], risk=risk)
    del rule["digest"]
    rule["regions"] = spec
    rule["digest"] = rule_digest(rule)
    cases = [{"case": c, "score": 0.1} for c in expected]
    folder = write_triage(tmp_path / "t", rule, cases, segs={c: str(preds / f"{c}_seg.nii.gz") for c in expected})
    write_csv(tmp_path / "audit.csv", [{"case": c, "dice": repr(d)} for c, d in expected.items()])
    got = {}
    for route, source in (("maps", labels), ("csv", tmp_path / "audit.csv")):
        db = str(tmp_path / f"{route}.db")
        assert _main(["monitor", "record", str(folder), "--db", db, "-q"], capsys)[0] == 0
        rc, out, err = _main(["monitor", "label", "--labels", str(source), "--db", db], capsys)
        assert rc == 0 and out.startswith("recorded 4 audited label(s)"), err
        with MonitorStore(db) as store:
            got[route] = {c["case_id"]: (c["dice"], c["loss"]) for c in store.cases()}
    for cid, d in expected.items():
        assert got["maps"][cid][0] == pytest.approx(d, abs=1e-6)
        assert got["maps"][cid][1] == pytest.approx(got["csv"][cid][1], abs=1e-6)
        assert got["csv"][cid][1] == pytest.approx(float(d < 0.8) if risk == "failure" else 1 - d, abs=1e-12)
    # a label value in no region of the rule is refused, as evaluate refuses it
    bad = tmp_path / "bad"
    bad.mkdir()
    save_nifti(np.full((6, 7, 5), 5, np.uint8), np.eye(4), bad / "same.nii.gz")
    rc, _, err = _main(["monitor", "label", "--labels", str(bad), "--db", str(tmp_path / "maps.db")], capsys)
    assert rc == 2 and "[5] are in no region" in err and len(err.strip().splitlines()) == 1
    # a store that kept the rule's JSON with sorted keys has lost the order of its regions: label maps are refused
    with sqlite3.connect(str(tmp_path / "maps.db")) as conn:
        body = json.loads(conn.execute("SELECT body FROM rules").fetchone()[0])
        assert list(body["regions"]) == ["WT", "TC", "ET"]  # kept in channel order
        conn.execute("UPDATE rules SET body = ?", (json.dumps(body, sort_keys=True, separators=(",", ":")),))
    rc, _, err = _main(["monitor", "label", "--labels", str(labels), "--db", str(tmp_path / "maps.db")], capsys)
    assert rc == 2 and "before monai-unc kept the order" in err


def test_quiet_status_keeps_its_warning_on_stderr(tmp_path, capsys):
    """monitor status --quiet dropped its warning that cases have no defined score (the score alarm cannot see
    them): --quiet moves a command's warning lines to stderr, it does not drop them (hostile review 33)."""
    rng = np.random.default_rng(0)
    rule = make_rule(list(rng.normal(size=200)), target=0.1)
    cases = [{"case": f"c{i}", "score": None if i < 3 else float(rng.normal()),
              "decision": "review" if i < 3 else "accept", "image_z_max": 0.5} for i in range(20)]
    folder = write_triage(tmp_path / "run0", rule, cases)
    db = str(tmp_path / "m.db")
    rc, _, err = _main(["monitor", "record", str(folder), "--db", db, "--time", "2026-01-01T00:00:00"], capsys)
    assert rc == 0, err
    rc, out, err = _main(["monitor", "status", "--db", db], capsys)
    loud = [line for line in out.splitlines() if line.startswith("warning:")]
    assert rc == 0 and len(loud) == 1 and "3 of 20 case(s) have no defined score" in loud[0]
    rc, out, err = _main(["monitor", "status", "--db", db, "--quiet"], capsys)
    assert rc == 0 and out == "" and err.splitlines() == loud
