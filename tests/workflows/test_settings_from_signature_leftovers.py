"""``infer --settings-from RULE`` checks the rule's signature as triage does (found by review).

A signed rule whose fingerprint was edited and its unkeyed digest recomputed was read by ``infer --settings-from``
and its edited settings applied, while ``triage`` refused the same file.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.triage import RULE_FILE
from monai_unc.io.provenance import prediction_fingerprint, rule_digest
from monai_unc.io.signing import Trust
from monai_unc.workflows.reuse import read_rule_settings
from tests._cases import TOY_NET

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def certified(tmp_path_factory):
    from monai.networks.nets import UNet

    root = tmp_path_factory.mktemp("signed")
    cal = write_toy_cohort(root / "cal", n_cases=8, shape=(12, 12, 12), predictions=False, seed=1)
    new = write_toy_cohort(root / "new", n_cases=1, shape=(12, 12, 12), predictions=False, seed=2)
    torch.manual_seed(0)
    net = root / "net.pt"
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), net)
    spec = root / "net.json"
    spec.write_text(json.dumps(TOY_NET))
    model = ["--network", str(spec), "--checkpoint", str(net), "--device", "cpu", "-q"]
    assert cli.main(["infer", "-i", str(cal["images"]), "-o", str(root / "pred"), *model, "--method", "mcdropout",
                     "--samples", "2", "--intensity", "zscore"]) == 0
    ev = root / "eval"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["evaluate", "-l", str(cal["labels"]), "-p", str(root / "pred"), "-o", str(ev),
                         "--no-spatial", "--target-risk", "0.5", "--delta", "0.2", "-q"]) == 0
    rule = ev / RULE_FILE
    doc = json.loads(rule.read_text())
    assert doc.get("signature")  # certification signs
    doc["fingerprint"]["intensity"] = "max"  # the attacker's edit, and the unkeyed digest recomputed
    doc["digest"] = rule_digest(doc)
    tampered = root / "tampered.json"
    tampered.write_text(json.dumps(doc))
    unsigned = dict(doc)
    del unsigned["signature"]
    unsigned_path = root / "unsigned.json"
    unsigned_path.write_text(json.dumps(unsigned))
    return {"root": root, "new": new, "model": model, "rule": rule, "tampered": tampered, "unsigned": unsigned_path}


def _infer(certified, tmp_path, rule, *extra):
    out = tmp_path / "p"
    argv = ["infer", "-i", str(certified["new"]["images"]), "-o", str(out), *certified["model"], "--settings-from",
            str(rule), *extra]
    return cli.main(argv), out


def test_a_tampered_signed_rule_is_refused_as_triage_refuses_it(certified, tmp_path, capsys):
    status, out = _infer(certified, tmp_path, certified["tampered"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and "does not match its content" in err, err
    assert not out.exists()
    # --allow-unsigned does not make an edited signed file acceptable either (as for triage)
    status, out = _infer(certified, tmp_path, certified["tampered"], "--allow-unsigned")
    assert status == 2 and "does not match its content" in capsys.readouterr().err
    with pytest.raises(ValueError, match="does not match its content"):
        read_rule_settings(certified["tampered"], Trust((), True))


def test_an_unsigned_rule_needs_allow_unsigned(certified, tmp_path, capsys):
    status, _ = _infer(certified, tmp_path, certified["unsigned"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and "is not signed" in err and len(err.splitlines()) == 1, err
    rule = read_rule_settings(certified["unsigned"], Trust((), True))
    assert rule.options["intensity"] == "max"  # read as written: allowed, and the outputs of triage record it


def test_the_signed_rule_is_used(certified, tmp_path):
    status, out = _infer(certified, tmp_path, certified["rule"])
    assert status == 0
    assert prediction_fingerprint(out)["intensity"] == "zscore"
    assert read_rule_settings(certified["rule"], Trust()).options["intensity"] == "zscore"
