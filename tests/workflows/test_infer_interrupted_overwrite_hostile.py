"""Hostile testing of crash consistency: an ``infer --overwrite`` with other settings, interrupted before it finished a
case, leaves the earlier run's cases whole; resuming that run (and evaluating its folder) is not refused."""

from __future__ import annotations

import json

from tests._cases import run_toy_infer, toy_infer_files


def test_an_overwrite_interrupted_before_its_first_case_leaves_a_folder_that_resumes(tmp_path, monkeypatch):
    """Found by hostile testing: ``infer --overwrite --seed 2`` into a finished ``--seed 1`` folder, interrupted
    (Ctrl-C, SIGKILL) while it predicted its first case, had already written its settings into ``infer.json``: every
    case was still the seed-1 run's, whole, yet the resume with ``--seed 1`` was refused ("different settings (seed)")
    and ``evaluate`` refused the folder, so every case had to be predicted again. A run whose every finished case was
    made with its settings resumes (nothing predicted again); one with a case of other settings is still refused."""
    import monai_unc.workflows.infer as infer

    toy = toy_infer_files(tmp_path, n_cases=2)
    out = tmp_path / "out"
    assert run_toy_infer(toy, out, "--seed", "1") == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "infer.json"}

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C during the first case of the new run

    with monkeypatch.context() as m:
        m.setattr(infer, "predict_case", interrupted)
        assert run_toy_infer(toy, out, "--seed", "2", "--overwrite") != 0
    assert json.loads((out / "infer.json").read_text())["settings"]["seed"] == 2  # the interrupted run's
    with monkeypatch.context() as m:  # the resume predicts nothing again
        m.setattr(infer, "predict_case", lambda *a, **k: (_ for _ in ()).throw(AssertionError("predicted again")))
        assert run_toy_infer(toy, out, "--seed", "1") == 0
    assert json.loads((out / "infer.json").read_text())["settings"]["seed"] == 1
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != "infer.json"} == before
    case = sorted(p for p in out.glob("*.json") if p.name != "infer.json")[0]
    doc = json.loads(case.read_text())
    doc["fingerprint"]["seed"] = 2  # a case of the other run: the folder holds two settings, refused as before
    case.write_text(json.dumps(doc))
    run = json.loads((out / "infer.json").read_text())
    run["settings"]["seed"] = 2
    (out / "infer.json").write_text(json.dumps(run))
    assert run_toy_infer(toy, out, "--seed", "1") == 2
