"""Hostile review 35 of the concurrency fixes: an ``infer`` of other cases with the same settings, running beside
``evaluate`` into its prediction folder, rewrites ``infer.json`` without ``multilabel`` until its end; ``evaluate``
refused its untouched cases as "written again" (exit 2, no cohort file)."""

from __future__ import annotations

import html
import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from monai_unc import cli
from monai_unc.evaluation.resume import check_inputs_unchanged, input_signatures
from monai_unc.io import CaseFiles
from tests._cases import TOY_NET
from tests.evaluation.test_triage import _stamp_infer_records  # one stand-in infer run, shared


def test_infer_record_compared_by_its_settings(tmp_path):
    seg = tmp_path / "c1_seg.nii.gz"
    seg.write_bytes(b"x")
    record = tmp_path / "infer.json"
    settings = {"model": "m", "method": "mcdropout", "samples": 2}
    record.write_text(json.dumps({"settings": settings, "monai_unc_version": "1", "multilabel": False}))
    cases = [CaseFiles("c1", seg)]
    before = input_signatures(cases, tmp_path)
    # another infer of the same settings at its start (no multilabel yet), by another version: the same settings
    record.write_text(json.dumps({"monai_unc_version": "2", "settings": dict(reversed(list(settings.items())))}))
    check_inputs_unchanged(before, cases, tmp_path)
    # other settings: refused
    record.write_text(json.dumps({"settings": {**settings, "samples": 3}, "multilabel": False}))
    with pytest.raises(ValueError, match="infer.json were written again"):
        check_inputs_unchanged(before, cases, tmp_path)
    # a record that is no JSON: compared by its bytes
    record.write_text("{")
    with pytest.raises(ValueError, match="infer.json were written again"):
        check_inputs_unchanged(before, cases, tmp_path)


@pytest.mark.slow
def test_evaluate_beside_an_infer_of_other_cases(tmp_path, monkeypatch, capsys):
    from monai.networks.nets import UNet

    from monai_unc.data.cohorts import write_toy_cohort
    from monai_unc.evaluation import runner
    from monai_unc.workflows import infer as infer_module

    paths = write_toy_cohort(tmp_path / "d", n_cases=3, shape=(12, 12, 12), predictions=False)
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), tmp_path / "net.pt")
    images = sorted(Path(paths["images"]).glob("*.nii.gz"))
    first, other, labels = tmp_path / "first", tmp_path / "other", tmp_path / "labels"
    for folder, files in ((first, images[:2]), (other, images[2:]),
                          (labels, sorted(Path(paths["labels"]).glob("*.nii.gz"))[:2])):
        folder.mkdir()
        for p in files:
            shutil.copy(p, folder / p.name)
    preds = tmp_path / "preds"

    def infer(images_folder):
        return cli.main(["infer", "-i", str(images_folder), "-o", str(preds), "--network", json.dumps(TOY_NET),
                         "--checkpoint", str(tmp_path / "net.pt"), "--device", "cpu", "--seed", "0", "-q",
                         "--method", "mcdropout", "--samples", "2"])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert infer(first) == 0
    real = runner._evaluate_record
    seen: list[str] = []

    def case_then_other_infer(files, config, *rest):
        result = real(files, config, *rest)
        if not seen:  # a colleague's infer of another case, same settings, still running (its end not reached)
            with monkeypatch.context() as m:
                m.setattr(infer_module, "record_outputs", lambda output, records: None)
                assert infer(other) == 0
            assert "multilabel" not in json.loads((preds / "infer.json").read_text())
        seen.append(files.case_id)
        return result

    monkeypatch.setattr(runner, "_evaluate_record", case_then_other_infer)
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rc = cli.main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(tmp_path / "ev"), "--no-spatial",
                       "-q"])
    assert rc == 0, capsys.readouterr().err
    assert (tmp_path / "ev" / "summary.json").is_file() and len(seen) == 2


@pytest.mark.slow
def test_a_mismatched_triage_states_no_guarantee_in_its_json_line_and_sr(tmp_path, capsys):
    """Under ``--allow-mismatch`` ``accepted_risk.statement`` (the command's line, and what ``dicom-export --triage``
    writes into each case's SR) stated the guarantee in full."""
    from monai_unc.data.cohorts import write_toy_cohort
    from monai_unc.workflows import dicom

    a = write_toy_cohort(tmp_path / "A", n_cases=30, shape=(16, 16, 16), seed=1)
    b = write_toy_cohort(tmp_path / "B", n_cases=6, shape=(16, 16, 16), seed=2)
    _stamp_infer_records(a["predictions"], "mcdropout", 8)
    ev = tmp_path / "ev"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(ev),
                         "--no-spatial", "--target-risk", "0.4", "--delta", "0.2", "-q"]) == 0

        def triage(samples: int, out: Path, *extra: str) -> tuple[str, str, str]:
            _stamp_infer_records(b["predictions"], "mcdropout", samples)
            capsys.readouterr()
            assert cli.main(["triage", "-p", str(b["predictions"]), "--rule", str(ev / "referral_rule.json"), "-o",
                             str(out), "--cases", "0", *extra]) == 0
            lines = capsys.readouterr().out.splitlines()
            line = next(x for x in lines if x.startswith("accepted cases: "))
            doc = json.loads((out / "triage.json").read_text())
            statement = doc["accepted_risk"]["statement"]
            assert line == f"accepted cases: {statement}"
            assert next(iter(dicom._triage_entries(out).values()))["statement"] == statement  # the SR's sentence
            interval = doc["expected_dice_interval"]["statement"]
            page = html.unescape((out / "triage.html").read_text())
            assert interval[0].upper() + interval[1:] in page, interval  # the note under the page's table
            return statement, interval, lines

    same, interval, _ = triage(8, tmp_path / "same")
    assert same.startswith("with probability at least 0.8") and "is at most 0.4" in same
    assert interval.startswith("expected Dice interval (90%, conformal)") and "probability at least 90%" in interval
    other, interval, lines = triage(4, tmp_path / "other", "--allow-mismatch")
    assert other.startswith("no guarantee for these cases") and "num_samples" in other, other
    assert interval.startswith("no coverage guarantee for these cases") and "num_samples" in interval, interval
    assert not any(x.startswith("expected Dice interval") for x in lines)  # the command's line says it too
