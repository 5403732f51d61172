"""Reusing a certified rule on new images: ``monai-unc infer --settings-from RULE`` (issue #40, item 2).

End to end on a small synthetic cohort and a tiny 3D UNet: ``infer`` with non-default settings (intensity, window,
TTA), ``evaluate --target-risk`` certifies a referral rule (and ``--conformal`` a conformal rule), new images are
predicted with ``infer --settings-from`` the rule, giving only the model, and ``triage`` applies the rule: every case
is accepted or referred on its score, none is refused for its settings. An option given on the command line that
contradicts the rule is refused in one line naming it; so is another model, and an edited rule file.
"""

import csv
import json
import warnings

import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.triage import RULE_FILE
from monai_unc.io.provenance import compare_fingerprints, prediction_fingerprint
from monai_unc.workflows.reuse import read_rule_settings, settings_of_fingerprint
from tests._cases import TOY_NET

pytestmark = pytest.mark.slow

#: settings unlike infer's defaults, so that a rule's settings cannot be met by accident
SETTINGS = ["--method", "mcdropout+tta", "--samples", "2", "--intensity", "zscore", "--roi", "8", "--overlap",
            "0.5", "--measures", "predictive_entropy", "mutual_information"]


@pytest.fixture(scope="module")
def certified(tmp_path_factory):
    from monai.networks.nets import UNet

    root = tmp_path_factory.mktemp("reuse")
    cal = write_toy_cohort(root / "cal", n_cases=10, shape=(12, 12, 12), predictions=False, seed=1)
    new = write_toy_cohort(root / "new", n_cases=3, shape=(12, 12, 12), predictions=False, seed=2)
    torch.manual_seed(0)
    net = root / "net.pt"
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), net)
    spec = root / "net.json"
    spec.write_text(json.dumps(TOY_NET))
    model = ["--network", str(spec), "--checkpoint", str(net), "--device", "cpu", "-q"]
    assert cli.main(["infer", "-i", str(cal["images"]), "-o", str(root / "pred"), *model, *SETTINGS]) == 0
    ev = root / "eval"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["evaluate", "-l", str(cal["labels"]), "-p", str(root / "pred"), "-o", str(ev),
                         "--no-spatial", "--measures", "predictive_entropy", "mutual_information",
                         "--measure", "predictive_entropy", "--target-risk", "0.4", "--delta", "0.2",
                         "--conformal", "outer:fnr=0.3", "-q"]) == 0
    return {"root": root, "new": new, "model": model, "rule": ev / RULE_FILE, "pred": root / "pred", "spec": spec,
            "conformal": ev / "conformal_rule.json"}


def test_rule_settings_are_the_recorded_ones(certified):
    rule = read_rule_settings(certified["rule"])
    assert rule.options["intensity"] == "zscore" and rule.options["roi"] == [8]
    assert rule.options["method"] == "mcdropout+tta" and rule.num_samples == 16  # 2 dropout x 8 flips
    assert rule.options["overlap"] == 0.5 and rule.weights


def test_certify_predict_with_the_rules_settings_triage(certified, tmp_path):
    """The reuse path: only the model is given; triage accepts or refers every case, none is refused."""
    out = tmp_path / "new_pred"
    argv = ["infer", "-i", str(certified["new"]["images"]), "-o", str(out), *certified["model"],
            "--settings-from", str(certified["rule"]), "--seed", "5"]  # another seed keeps new cases exchangeable
    assert cli.main(argv) == 0
    rule_fp = json.loads(certified["rule"].read_text())["fingerprint"]
    assert compare_fingerprints(rule_fp, prediction_fingerprint(out)) == ("match", [])
    tri = tmp_path / "triage"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["triage", "-p", str(out), "--rule", str(certified["rule"]), "-o", str(tri), "-q"]) == 0
    with (tri / "triage.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and {r["decision"] for r in rows} <= {"accept", "review"}
    doc = json.loads((tri / "triage.json").read_text())
    assert doc["fingerprint"]["status"] == "match"


def test_a_conformal_rule_gives_the_same_settings(certified):
    assert certified["conformal"].is_file()
    ref, conf = read_rule_settings(certified["rule"]), read_rule_settings(certified["conformal"])
    assert conf.options == ref.options and conf.num_samples == ref.num_samples and conf.weights == ref.weights
    assert conf.source.startswith("conformal rule")


def test_an_option_that_agrees_with_the_rule_is_accepted(certified, tmp_path):
    argv = ["infer", "-i", str(certified["new"]["images"]), "-o", str(tmp_path / "p"), *certified["model"],
            "--settings-from", str(certified["rule"]), "--roi", "8", "8", "8", "--samples", "2", "--intensity",
            "zscore"]
    assert cli.main(argv) == 0
    rule_fp = json.loads(certified["rule"].read_text())["fingerprint"]
    assert compare_fingerprints(rule_fp, prediction_fingerprint(tmp_path / "p"))[0] == "match"


@pytest.mark.parametrize("option, value", [("--intensity", "max"), ("--roi", "6"), ("--method", "mcdropout"),
                                           ("--samples", "3"), ("--overlap", "0.25"), ("--measures", "variance")])
def test_a_contradicting_option_is_refused_naming_it(certified, tmp_path, capsys, option, value):
    out = tmp_path / "p"
    argv = ["infer", "-i", str(certified["new"]["images"]), "-o", str(out), *certified["model"],
            "--settings-from", str(certified["rule"]), option, value]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{option} {value} contradicts" in err and "referral rule" in err
    assert not list(out.glob("*.nii.gz"))


def test_another_model_is_refused(certified, tmp_path, capsys):
    from monai.networks.nets import UNet

    torch.manual_seed(1)
    other = tmp_path / "other.pt"
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), other)
    argv = ["infer", "-i", str(certified["new"]["images"]), "-o", str(tmp_path / "p"), "--network",
            str(certified["spec"]), "--checkpoint", str(other), "--device", "cpu", "-q",
            "--settings-from", str(certified["rule"])]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model's files differ" in err


def test_an_edited_or_foreign_rule_file_is_refused(certified, tmp_path, capsys):
    doc = json.loads(certified["rule"].read_text())
    doc["fingerprint"]["intensity"] = "max"  # the digest no longer matches
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something else"}))
    for path, msg in ((edited, "digest"), (other, "not a rule file that monai-unc evaluate certifies"),
                      (tmp_path / "none.json", "no rule file")):
        argv = ["infer", "-i", str(certified["new"]["images"]), "-o", str(tmp_path / "p"), *certified["model"],
                "--settings-from", str(path)]
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and msg in err, err


@pytest.mark.parametrize("field, value, msg", [
    ("producer", "nnunet-predict", "nnunet-predict"), ("producer", "unknown", "records no settings"),
    ("intensity", "__import__('os')", "'intensity'"), ("roi", [0], "'roi'"), ("num_samples", [2, 3], "'num_samples'"),
    ("measures", ["rm -rf"], "'measures'"), ("overlap", 1.5, "'overlap'"), ("method", "eval", "'method'"),
])
def test_every_field_taken_is_validated(certified, field, value, msg):
    fp = dict(json.loads(certified["rule"].read_text())["fingerprint"])
    fp[field] = value
    with pytest.raises(ValueError, match=msg):
        settings_of_fingerprint(fp, "referral rule r.json")


@pytest.mark.parametrize("method, n, per_source, given, expected", [
    ("ssn+tta", 8, 50, None, 50),  # the rule's SSN draws, not infer's default
    ("ssn+ensemble", 2, 7, None, 7),
    ("ssn+tta", 8, 50, 2, "--samples 2 contradicts"),
    ("ssn+tta", 8, None, None, "records no SSN latent draws"),  # a rule certified before they were recorded
    ("tta", 8, None, None, 10),  # --samples changes nothing: the default, not a refusal
    ("mcdropout+tta", 24, 3, None, 3),
])
def test_settings_from_takes_the_rules_draws_per_source(method, n, per_source, given, expected):
    from monai_unc.workflows.reuse import RuleSettings, rule_samples

    rule = RuleSettings("rule r.json", {}, n, samples_per_source=per_source)
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected):
            rule_samples(rule, method, 3, 2, given)
    else:
        assert rule_samples(rule, method, 3, 2, given) == expected


def test_a_conformal_rule_refuses_no_probs_before_any_case(certified, tmp_path, capsys):
    """Found by hostile testing: ``infer --settings-from conformal_rule.json --no-probs`` predicted every case, and
    ``monai-unc conformal`` then refused all of them ("have no probabilities"); a referral rule, scored on maps,
    still takes ``--no-probs``."""
    assert read_rule_settings(certified["conformal"]).needs_probabilities
    assert not read_rule_settings(certified["rule"]).needs_probabilities
    out = tmp_path / "p"
    argv = ["infer", "-i", str(certified["new"]["images"]), "-o", str(out), *certified["model"],
            "--settings-from", str(certified["conformal"]), "--no-probs"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--no-probs: conformal rule" in err and "leave out --no-probs" in err
    assert not out.exists() or not list(out.glob("*.nii.gz"))
