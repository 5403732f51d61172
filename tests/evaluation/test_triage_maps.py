"""``monai-unc triage`` writes the maps it derives from the probabilities of new cases without map files.

They go to ``<output>/maps/<case>_<measure>.nii.gz`` (evaluate's writer, :func:`monai_unc.evaluation.rows.
write_derived_maps`), on the rank that triages the case; a rerun reuses them (a case whose maps are gone is triaged
again), removes the maps of cases not in the run, and the folder is among what triage declares it writes.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

import monai_unc.evaluation.rows as rows_module
import monai_unc.evaluation.triage.runner as triage_mod
from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.triage import RULE_FILE, TRIAGE_WRITES, ReferralRule, run_triage
from monai_unc.io import CaseFiles, load_case
from monai_unc.report.triage import build_triage_page
from tests._ranks import free_port
from tests._states import write_signed_state
from tests.evaluation.test_triage import _worker

MEASURES = ("predictive_entropy", "one_minus_max_prob")


@pytest.fixture(scope="module")
def cohorts(tmp_path_factory):
    """A rule certified on probability-only predictions; new cases B with their map files and without them."""
    root = tmp_path_factory.mktemp("triage_maps")
    a = write_toy_cohort(root / "A", n_cases=12, shape=(16, 16, 16), seed=1)
    b = write_toy_cohort(root / "B", n_cases=6, shape=(16, 16, 16), seed=2)
    probs_only = root / "B_probs"
    shutil.copytree(b["predictions"], probs_only)
    for folder in (a["predictions"], probs_only):
        for p in folder.glob("*_predictive_entropy.nii.gz"):
            p.unlink()
    ev = root / "eval"
    argv = ["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(ev), "--no-spatial",
            "--target-risk", "0.4", "--delta", "0.2", "-q"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(argv) == 0
    rule = ReferralRule.load(ev / RULE_FILE)
    assert rule.map_source == "probabilities" and rule.measure == "predictive_entropy"
    ids = [f"toy{i:03d}" for i in range(6)]
    return {"rule": rule, "rule_file": ev / RULE_FILE, "B": b, "probs": probs_only, "ids": ids}


def _names(ids, measures=MEASURES):
    return sorted(f"{c}_{m}.nii.gz" for c in ids for m in measures)


def test_triage_writes_the_derived_maps_and_a_rerun_reuses_them(cohorts, tmp_path, monkeypatch):
    out = tmp_path / "t"
    res = run_triage(cohorts["probs"], cohorts["rule"], out)
    ids = cohorts["ids"]
    assert sorted(p.name for p in (out / "maps").iterdir()) == _names(ids)
    # the arrays the row was scored on, in the case's geometry
    files = {c: CaseFiles.from_json(res.summary["files"][c]) for c in ids}
    case = load_case(files[ids[2]])
    for m, u in rows_module.derived_maps(case).items():
        img = nib.load(out / "maps" / f"{ids[2]}_{m}.nii.gz")
        np.testing.assert_array_equal(np.asarray(img.dataobj, dtype=np.float32), u)
        np.testing.assert_allclose(img.affine, case.affine)
    row = json.loads((out / "state" / "cases" / f"{ids[2]}.json").read_text())["row"]
    assert row["derived"] == {m: f"{ids[2]}_{m}.nii.gz" for m in MEASURES}
    assert "derived" not in (out / "triage.csv").read_text().splitlines()[0]  # the csv columns are unchanged
    first = {n: (out / n).read_bytes() for n in ("triage.csv", "triage.json")}

    real, calls = triage_mod.triage_case, []
    monkeypatch.setattr(triage_mod, "triage_case", lambda f, r, **k: calls.append(f.case_id) or real(f, r, **k))
    run_triage(cohorts["probs"], cohorts["rule"], out)
    assert calls == [] and {n: (out / n).read_bytes() for n in first} == first
    (out / "maps" / f"{ids[4]}_one_minus_max_prob.nii.gz").unlink()  # a case whose maps are gone: triaged again
    run_triage(cohorts["probs"], cohorts["rule"], out)
    assert calls == [ids[4]] and sorted(p.name for p in (out / "maps").iterdir()) == _names(ids)
    assert {n: (out / n).read_bytes() for n in first} == first


def test_a_derived_map_edited_or_swapped_since_the_run_is_triaged_again(cohorts, tmp_path, monkeypatch):
    """Found by review: the saved state's digest covered its JSON only, so a derived map edited by hand, or replaced
    by another case's, was kept on a rerun (and drawn on the triage page beside the row's scores). The state records
    the sha256 of each map written with the row; a map that differs makes the case triaged again, which writes it
    anew (the bytes of a fresh run)."""
    out, ids = tmp_path / "t", cohorts["ids"]
    run_triage(cohorts["probs"], cohorts["rule"], out)
    fresh = {p.name: p.read_bytes() for p in (out / "maps").iterdir()}
    state = json.loads((out / "state" / "cases" / f"{ids[1]}.json").read_text())
    assert sorted(state["maps_sha256"]) == _names(ids[1:2])
    edited = out / "maps" / f"{ids[1]}_predictive_entropy.nii.gz"
    img = nib.load(edited)
    nib.save(nib.Nifti1Image(np.asarray(img.dataobj) * 0.5, img.affine), edited)  # a valid map, other values
    shutil.copyfile(out / "maps" / f"{ids[3]}_one_minus_max_prob.nii.gz",
                    out / "maps" / f"{ids[2]}_one_minus_max_prob.nii.gz")  # another case's map
    real, calls = triage_mod.triage_case, []
    monkeypatch.setattr(triage_mod, "triage_case", lambda f, r, **k: calls.append(f.case_id) or real(f, r, **k))
    run_triage(cohorts["probs"], cohorts["rule"], out)
    assert sorted(calls) == [ids[1], ids[2]]
    assert {p.name: p.read_bytes() for p in (out / "maps").iterdir()} == fresh
    calls.clear()
    del state["maps_sha256"]  # a state of an earlier version (signed as it was): no digests to check the maps by
    write_signed_state(out / "state" / "cases" / f"{ids[1]}.json", state)
    run_triage(cohorts["probs"], cohorts["rule"], out)
    assert calls == [ids[1]]


def test_a_rerun_leaves_only_the_maps_of_its_cases(cohorts, tmp_path, monkeypatch):
    out, ids = tmp_path / "t", cohorts["ids"]
    run_triage(cohorts["probs"], cohorts["rule"], out)
    run_triage(cohorts["probs"], cohorts["rule"], out, cases=ids[:2])  # other cases: their maps go
    assert sorted(p.name for p in (out / "maps").iterdir()) == _names(ids[:2])
    # the same output, now with map files of the user's: nothing derived, no earlier derived map left, and the page
    # draws the user's maps
    user = dataclasses.replace(cohorts["rule"], map_source="file")
    res = run_triage(cohorts["B"]["predictions"], user, out)
    assert list((out / "maps").iterdir()) == []
    shown = res.summary["order"][0]
    assert Path(res.summary["files"][shown]["maps"]["predictive_entropy"]).parent == cohorts["B"]["predictions"]

    def refuse(*args, **kwargs):
        raise AssertionError("the page derived a map")

    # every name a loaded monai_unc module binds the map computation to (earlier versions patched the triage
    # runner's and evaluation.rows' names only: the page, which holds neither, could derive a map through another)
    bound = [(module, name) for module in list(sys.modules.values())
             if getattr(module, "__name__", "").startswith("monai_unc")
             for name, value in list(vars(module).items()) if value is rows_module.derived_maps]
    assert {(m.__name__, name) for m, name in bound} >= {(m.__name__, "derived_maps")
                                                         for m in (rows_module, triage_mod)}
    for module, name in bound:
        monkeypatch.setattr(module, name, refuse)
    text = build_triage_page(out, n_cases=1).read_text()
    assert f'id="fig-case-{shown}"' in text


def test_the_maps_folder_is_declared(cohorts, tmp_path):
    assert {"maps", "maps/*"} <= set(TRIAGE_WRITES)
    out = tmp_path / "t"
    maps = out / "maps"
    shutil.copytree(cohorts["B"]["predictions"], maps)  # an input folder where triage writes its maps
    with pytest.raises(ValueError, match="the command writes into maps/"):
        run_triage(cohorts["probs"], cohorts["rule"], out, uncertainty=maps)
    assert not (out / "triage.csv").exists() and not (out / "state").exists()


@pytest.mark.slow
def test_two_gloo_ranks_write_the_maps_of_their_cases(cohorts, tmp_path):
    single = tmp_path / "single"
    run_triage(cohorts["probs"], cohorts["rule"], single)
    port = free_port()  # not a port the kernel hands out to other processes meanwhile (tests/_ranks.py)
    dist_out = tmp_path / "dist"
    dist_out.mkdir()
    argv = ["triage", "-p", str(cohorts["probs"]), "--rule", str(cohorts["rule_file"]), "-o", str(dist_out / "t"),
            "--cases", "1", "-q"]
    import torch

    torch.multiprocessing.start_processes(_worker, args=(2, port, {"out": str(dist_out), "argv": argv}), nprocs=2,
                                          join=True, start_method="fork")
    r0, r1 = (json.loads((dist_out / f"rank{r}.json").read_text()) for r in range(2))
    ids = cohorts["ids"]
    assert r0["rc"] == r1["rc"] == 0 and r0["calls"] == ids[0::2] and r1["calls"] == ids[1::2]
    maps = dist_out / "t" / "maps"
    assert sorted(p.name for p in maps.iterdir()) == _names(ids)
    for name in _names(ids):
        assert (maps / name).read_bytes() == (single / "maps" / name).read_bytes()
    assert (dist_out / "t" / "triage.csv").read_bytes() == (single / "triage.csv").read_bytes()
