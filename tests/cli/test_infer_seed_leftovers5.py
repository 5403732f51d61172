"""``monai-unc infer --seed`` under methods that draw nothing at random (flips, ensemble members, softmax).

Found by review: the seed was recorded in ``infer.json`` and every case's fingerprint for every method, so a resume
of a plain ensemble (or of TTA flips) with another ``--seed`` was refused as "different settings (seed)", although
the outputs are the same under every seed. Now the seed is recorded (and compared) as unused (None) there, and the
records of earlier runs, which hold the seed, resume too.
"""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest
import torch
from monai.networks.nets import UNet

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.io.provenance import settings_as_compared
from monai_unc.keys import METHOD_TOKENS, SAMPLES_TOKENS, draws_at_random
from tests._cases import TOY_NET


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("seed_cli")
    paths = write_toy_cohort(root / "data", n_cases=2, shape=(16, 16, 16))
    kw = {k: v for k, v in TOY_NET.items() if k != "_target_"}
    members = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        members.append(root / f"m{seed}.pt")
        torch.save(UNet(**kw).state_dict(), members[-1])
    spec = root / "net.json"
    spec.write_text(json.dumps(TOY_NET))
    return {"images": paths["images"], "spec": spec, "members": members}


_METHODS = {"ensemble": ("ensemble", 2, []), "tta": ("tta", 1, []), "softmax": ("softmax", 1, [])}


def _infer(s, out, method, seed, n_members=1, extra=()):
    argv = ["infer", "-i", str(s["images"]), "-o", str(out), "--network", str(s["spec"]), "--method", method,
            "--seed", str(seed), "--quiet", *extra, "--checkpoint", *map(str, s["members"][:n_members])]
    try:
        return cli.main(argv)
    except SystemExit as e:
        return e.code


def _probs(out):
    return {p.name: np.asarray(nib.load(p).dataobj) for p in sorted(out.glob("*_probs.nii.gz"))}


@pytest.mark.parametrize("name", list(_METHODS))
def test_a_resume_with_another_seed_keeps_the_cases_of_a_method_without_draws(setup, name, tmp_path, recwarn):
    method, n, extra = _METHODS[name]
    out = tmp_path / "o"
    assert _infer(setup, out, method, 0, n, extra) == 0
    assert json.loads((out / "infer.json").read_text())["settings"]["seed"] is None
    records = {p.name: p.read_text() for p in out.glob("toy*.json")}
    assert len(records) == 2 and all(json.loads(r)["fingerprint"]["seed"] is None for r in records.values())
    # the premise: another seed gives the same outputs (a fresh folder), so there is nothing to refuse
    assert _infer(setup, tmp_path / "other", method, 5, n, extra) == 0
    first, other = _probs(out), _probs(tmp_path / "other")
    assert first.keys() == other.keys() and all(np.array_equal(first[k], other[k]) for k in first)
    # the resume with another seed: accepted, nothing predicted again (the records are the same bytes)
    (out / "toy001.json").unlink()
    assert _infer(setup, out, method, 5, n, extra) == 0
    assert (out / "toy000.json").read_text() == records["toy000.json"]
    assert not [w for w in recwarn if "other settings" in str(w.message)]


def test_an_earlier_record_holding_the_seed_of_an_ensemble_resumes_with_another_seed(setup, tmp_path, recwarn):
    """A folder written before this fix (seed 0 in infer.json and in each case's fingerprint) keeps its cases."""
    out = tmp_path / "o"
    assert _infer(setup, out, "ensemble", 0, 2) == 0
    doc = json.loads((out / "infer.json").read_text())
    doc["settings"]["seed"] = 0
    (out / "infer.json").write_text(json.dumps(doc))
    rec = json.loads((out / "toy000.json").read_text())
    rec["fingerprint"]["seed"] = 0
    rec.pop("record_digest", None)  # the versions that wrote the seed wrote no digest of the record itself
    (out / "toy000.json").write_text(json.dumps(rec))
    kept = (out / "toy000.json").read_text()
    assert _infer(setup, out, "ensemble", 7, 2) == 0
    assert (out / "toy000.json").read_text() == kept  # not predicted again
    assert not [w for w in recwarn if "other settings" in str(w.message)]


def test_a_resume_of_seeded_draws_with_another_seed_is_still_refused(setup, tmp_path, capsys):
    out = tmp_path / "o"
    assert _infer(setup, out, "mcdropout", 0, 1, ["--samples", "2"]) == 0
    assert json.loads((out / "infer.json").read_text())["settings"]["seed"] == 0
    capsys.readouterr()
    assert _infer(setup, out, "mcdropout", 5, 1, ["--samples", "2"]) == 2
    assert "different settings (seed)" in capsys.readouterr().err
    out = tmp_path / "noise"
    assert _infer(setup, out, "tta", 0, 1, ["--tta-noise", "0.1"]) == 0
    assert json.loads((out / "infer.json").read_text())["settings"]["seed"] == 0
    assert _infer(setup, out, "tta", 5, 1, ["--tta-noise", "0.1"]) == 2


@pytest.mark.parametrize("method", [*METHOD_TOKENS, "mcdropout+tta", "ensemble+tta", "ssn+tta", "ensemble+ssn"])
@pytest.mark.parametrize("noise", [0, 0.0, 0.2])
def test_the_seed_is_compared_exactly_where_a_source_draws(method, noise):
    """Reference: a source draws at random when it samples (dropout masks, Rate-In, SSN latents) or adds noise."""
    sources = set(method.split("+"))
    expected = bool(sources & {"mcdropout", "ratein", "ssn"}) or ("tta" in sources and noise > 0)
    assert draws_at_random(method, noise) is expected
    assert draws_at_random(method.upper().replace("+", " + "), noise) is expected
    compared = settings_as_compared({"method": method, "seed": 3, "tta_noise": noise})
    assert compared["seed"] == (3 if expected else None)
    assert SAMPLES_TOKENS <= set(METHOD_TOKENS)


@pytest.mark.parametrize("noise", ["0.5", None, True, float("nan"), -1.0])
def test_a_recorded_noise_that_is_not_a_positive_number_draws_nothing(noise):
    assert draws_at_random("tta", noise) is False
