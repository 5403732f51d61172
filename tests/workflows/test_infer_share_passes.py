"""``monai-unc infer --no-share-passes / --sample-batch-size``: the options reach the inferer, are recorded in the
run's settings and in every case's fingerprint, and a resume with other values is refused (seeded draws differ),
while a rule's prediction fingerprint leaves them out (the maps follow the same distribution either way)."""

from __future__ import annotations

import json

import pytest

from monai_unc.io.provenance import prediction_fingerprint
from monai_unc.workflows.infer import InferSettings
from tests._cases import run_toy_infer, toy_infer_files

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return toy_infer_files(tmp_path_factory.mktemp("share"), n_cases=1)


_infer = run_toy_infer


def _settings(out):
    return json.loads((out / "infer.json").read_text())["settings"]


def test_options_are_recorded_and_a_resume_with_others_is_refused(toy, tmp_path, capsys):
    out = tmp_path / "out"
    assert _infer(toy, out, "--sample-batch-size", "2") == 0
    assert _settings(out)["share_passes"] is True and _settings(out)["sample_batch_size"] == 2
    record = json.loads((out / "toy000.json").read_text())
    assert record["fingerprint"]["share_passes"] is True and record["fingerprint"]["sample_batch_size"] == 2
    fp = prediction_fingerprint(out)
    assert "share_passes" not in fp and "sample_batch_size" not in fp  # the rule's fingerprint: as with the seed

    capsys.readouterr()
    assert _infer(toy, out, "--no-share-passes") == 2  # other draws: not mixed into this folder
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different settings" in err and "share_passes" in err
    assert _infer(toy, out, "--sample-batch-size", "2") == 0  # the same settings resume
    assert _infer(toy, out, "--no-share-passes", "--overwrite") == 0
    assert _settings(out)["share_passes"] is False and _settings(out)["sample_batch_size"] == "auto"
    assert json.loads((out / "toy000.json").read_text())["fingerprint"]["share_passes"] is False


@pytest.mark.parametrize("value", ["0", "-1", "many", "2.5"])
def test_bad_sample_batch_size_is_one_line(toy, tmp_path, capsys, value):
    with pytest.raises(SystemExit) as e:  # argparse's exit status 2, before any work
        _infer(toy, tmp_path / "out", "--sample-batch-size", value)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") <= 2 and "--sample-batch-size" in err and "expected 'auto' or a positive integer" in err
    assert not (tmp_path / "out").exists()



@pytest.mark.parametrize("flags, named", [(["--sample-batch-size", "4"], "--sample-batch-size 4"),
                                          (["--no-share-passes"], "--no-share-passes")])
def test_shared_pass_options_with_one_sample_are_refused(toy, tmp_path, capsys, flags, named):
    """Found by hostile testing: ``--samples 1 --sample-batch-size 4`` (or ``--no-share-passes``) was accepted and
    recorded in ``infer.json`` and every case's fingerprint, so a resume with another value was refused as "other
    seeded draws", yet one sample per window has no pass to share or batch."""
    from monai_unc.workflows.factory import build_inferer

    out = tmp_path / "out"
    code = _infer(toy, out, "--samples", "1", *flags)
    assert code == 2
    err = capsys.readouterr().err
    assert named in err and "--samples 1" in err and err.count("\n") <= 2
    assert not out.exists()
    with pytest.raises(ValueError, match="--samples 1"):
        build_inferer("ratein+tta", samples=1, sample_batch_size=2)
    assert build_inferer("mcdropout", samples=1).sample_batch_size == "auto"  # the defaults stay accepted
    assert build_inferer("mcdropout", samples=2, share_passes=False).share_passes is False

def test_methods_without_shared_samples_record_neither_option():
    """A run of TTA or an ensemble records its settings as before the options existed (its resume is unchanged)."""
    base = dict(model="m", samples=2, roi=None, overlap=0.25, intensity="none", measures=["predictive_entropy"],
                seed=0, activation="softmax", checkpoints=[])
    for method in ("tta", "ensemble", "softmax", "ssn"):
        assert not {"share_passes", "sample_batch_size"} & set(InferSettings(method=method, **base).to_json())
    for method in ("mcdropout", "RateIn+tta", "tta + mcdropout"):
        recorded = InferSettings(method=method, share_passes=False, **base).to_json()
        assert recorded["share_passes"] is False and recorded["sample_batch_size"] == "auto"
