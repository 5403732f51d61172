"""Each command reads, parses and verifies each of its rule files once (review 73).

Found by review 73: ``monai-unc triage`` read ``referral_rule.json`` twice (raw and unverified for the layout, then
verified for the triage), ``monai-unc conformal`` read ``conformal_rule.json`` twice (the layout, then the run), and
``triage --conformal-rule`` read it twice (the check before the triage, then the masks after it). A file rewritten
between two reads (another process, a user editing it) made the command act on two rules. Each file is now read once
(:class:`monai_unc.io.provenance.RuleRead`) and the one version read is what every step uses.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.evaluation.conformal import ConformalRuleFile
from monai_unc.evaluation.triage import RULE_FILE, ReferralRule
from monai_unc.io.provenance import RuleRead
from monai_unc.io.signing import Trust
from monai_unc.product import CohortProduct
from monai_unc.products import ConformalMasks
from monai_unc.workflows.infer import InferSettings, check_run_settings
from tests._cases import write_infer_case_records


def _stamp(pred: Path, model: str) -> None:
    """The ``infer.json`` and case records of one finished ``monai-unc infer`` run, with ``model`` as its model."""
    check_run_settings(pred, InferSettings(model=model, method="mcdropout", samples=4, roi=[12], overlap=0.25,
                                           intensity="none", measures=["predictive_entropy"], seed=0,
                                           activation="softmax", checkpoints=[]), overwrite=True)
    write_infer_case_records(pred)


@pytest.fixture(scope="module")
def rules(tmp_path_factory):
    """Cohort A evaluated with a referral rule and a conformal rule, both signed with the key of ``<root>/config``
    (trusted by the command lines with ``--trusted-keys``); cohort B, new cases of the same model; and a copy of
    each rule whose fingerprint names another model (signed with the same key): the file a swap puts in place."""
    root = tmp_path_factory.mktemp("rules_once")
    a = write_toy_cohort(root / "A", n_cases=6, shape=(12, 12, 12), seed=1)
    b = write_toy_cohort(root / "B", n_cases=3, shape=(12, 12, 12), seed=2)
    for d in (a, b):
        _stamp(d["predictions"], "net A")
    config = EvaluationConfig(budget=0.25, spatial=False, target_risk=0.5, delta=0.2,
                              products=[ConformalMasks({"outer": 0.3})])
    ev = root / "ev"
    with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
        warnings.simplefilter("ignore", UserWarning)
        mp.setenv("MONAI_UNC_CONFIG_DIR", str(root / "config"))
        run_evaluate(a["labels"], a["predictions"], ev, config)
        other = {}
        for name, cls in ((RULE_FILE, ReferralRule), ("conformal_rule.json", ConformalRuleFile)):
            doc = cls.load(ev / name)
            doc.fingerprint = {**doc.fingerprint, "model": "net B"}
            other[name] = doc.save(root / "other" / name)
    return {"root": root, "B": b, "referral": ev / RULE_FILE, "conformal": ev / "conformal_rule.json",
            "other": other, "trust": ["--trusted-keys", str(root / "config" / "signing_key.pub")]}


@pytest.fixture
def reads(monkeypatch):
    """The files read through ``Path.read_bytes`` / ``Path.read_text`` (every reader of a rule file), in order; a
    test may set ``reads.after[path] = hook`` to run ``hook()`` once, after the first read of ``path``."""

    class Reads(list):
        after: dict[Path, object] = {}

    seen = Reads()
    seen.after = {}

    def counting(original):
        def read(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            path = Path(self).resolve()
            seen.append(path)
            hook = seen.after.pop(path, None)
            if hook is not None:
                hook()
            return out
        return read

    for name in ("read_bytes", "read_text"):
        monkeypatch.setattr(Path, name, counting(getattr(Path, name)))
    return seen


def _triage(rules, out: Path) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return cli.main(["triage", "-p", str(rules["B"]["predictions"]), "--rule", str(rules["referral"]), "-o",
                         str(out), "--conformal-rule", str(rules["conformal"]), "--cases", "0", "-q", *rules["trust"]])


def _conformal(rules, rule: Path, out: Path) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return cli.main(["conformal", "-p", str(rules["B"]["predictions"]), "--rule", str(rule), "-o", str(out),
                         "-q", *rules["trust"]])


def test_triage_reads_the_referral_and_the_conformal_rule_once(rules, tmp_path, reads):
    assert _triage(rules, tmp_path / "triage") == 0
    assert reads.count(rules["referral"].resolve()) == 1  # 2 in earlier versions: the layout, then the triage
    assert reads.count(rules["conformal"].resolve()) == 1  # 2: the check before the triage, then the masks
    summary = json.loads((tmp_path / "triage" / "triage.json").read_text())
    assert summary["fingerprint"]["status"] == "match" and summary["rule_signature"].startswith("signed")


def test_conformal_reads_its_rule_once(rules, tmp_path, reads):
    assert _conformal(rules, rules["conformal"], tmp_path / "masks") == 0
    assert reads.count(rules["conformal"].resolve()) == 1  # 2 in earlier versions: the layout, then the run
    assert json.loads((tmp_path / "masks" / "conformal.json").read_text())["fingerprint"]["status"] == "match"


def _swap_after_first_read(reads, rule: Path, replacement: Path) -> Path:
    """A copy of ``rule`` that is replaced by ``replacement`` right after it is first read."""
    copy = rule.parent.parent / "swapped" / rule.name
    copy.parent.mkdir(exist_ok=True)
    shutil.copyfile(rule, copy)
    reads.after[copy.resolve()] = lambda: shutil.copyfile(replacement, copy)
    return copy


def test_triage_acts_on_the_rule_it_read_when_the_file_is_swapped(rules, tmp_path, reads):
    """Rewritten after its first read (another process, a user editing it), the rule file gives the command one
    rule: the one read (in earlier versions the layout came from the first read and the triage from the second:
    here the other file, whose fingerprint names another model, refused as a mismatch)."""
    swapped = _swap_after_first_read(reads, rules["referral"], rules["other"][RULE_FILE])
    rules = {**rules, "referral": swapped}
    assert _triage(rules, tmp_path / "triage") == 0
    assert json.loads(swapped.read_text())["fingerprint"]["model"] == "net B"  # the file was swapped
    summary = json.loads((tmp_path / "triage" / "triage.json").read_text())
    assert summary["fingerprint"]["status"] == "match"  # the version read, whose fingerprint is of net A


def test_conformal_beside_triage_acts_on_the_rule_it_checked(rules, tmp_path, reads):
    """The conformal rule checked before the triage is the one its masks are made with (in earlier versions the
    masks read the file again after the triage: the swapped file was refused once the triage was written)."""
    swapped = _swap_after_first_read(reads, rules["conformal"], rules["other"]["conformal_rule.json"])
    assert _triage({**rules, "conformal": swapped}, tmp_path / "triage") == 0
    record = json.loads((tmp_path / "triage" / "conformal" / "conformal.json").read_text())
    assert record["fingerprint"]["status"] == "match"


def test_conformal_acts_on_the_rule_it_read_when_the_file_is_swapped(rules, tmp_path, reads):
    swapped = _swap_after_first_read(reads, rules["conformal"], rules["other"]["conformal_rule.json"])
    assert _conformal(rules, swapped, tmp_path / "masks") == 0
    assert json.loads((tmp_path / "masks" / "conformal.json").read_text())["fingerprint"]["status"] == "match"


def test_a_refused_rule_is_refused_where_it_was_in_one_line(rules, tmp_path, capsys):
    """A rule signed by a key the command does not trust: refused as before (one line, exit 2), after the output
    folder's checks (a bad output folder is still what is reported first)."""
    argv = ["triage", "-p", str(rules["B"]["predictions"]), "--rule", str(rules["referral"]), "-q"]
    assert cli.main([*argv, "-o", str(tmp_path / "triage")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ": error: --rule: referral rule" in err[0] and "trusted" in err[0], err
    assert not (tmp_path / "triage" / "triage.json").exists()
    (tmp_path / "file").write_text("")
    assert cli.main([*argv, "-o", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--output" in err[0] and "referral rule" not in err[0], err


@pytest.mark.parametrize("command", ["conformal", "triage --conformal-rule"])
def test_a_refused_conformal_rule_is_refused_in_one_line_naming_its_option(rules, tmp_path, capsys, command):
    """A conformal rule edited after it was signed: one line naming the option, exit 2, nothing written (before the
    triage, beside a triage)."""
    doc = json.loads(rules["conformal"].read_text())
    doc["created"] = "2000-01-01T00:00:00+00:00"
    edited = tmp_path / "conformal_rule.json"
    edited.write_text(json.dumps(doc))
    pred = str(rules["B"]["predictions"])
    argv, option = (["conformal", "-p", pred, "--rule", str(edited)], "--rule") if command == "conformal" else (
        ["triage", "-p", pred, "--rule", str(rules["referral"]), "--conformal-rule", str(edited)], "--conformal-rule")
    assert cli.main([*argv, "-o", str(tmp_path / "out"), "-q", *rules["trust"]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f": error: {option}: conformal rule {edited}" in err[0], err
    assert not (tmp_path / "out").exists()


def test_rule_read_api(rules):
    trust = Trust((rules["trust"][1],))
    read = RuleRead(rules["referral"], ReferralRule.load, trust)
    assert read.error is None and read.get(trust, ReferralRule) is read.rule
    assert read.fingerprint == dict(read.rule.fingerprint)
    assert read.get(None) is read.rule  # no check required
    with pytest.raises(TypeError, match="rule: .*trust"):
        read.get(Trust())  # never passed off as checked with other keys
    unchecked = RuleRead(rules["referral"], ReferralRule.load)
    with pytest.raises(TypeError, match="rule: .*trust=None"):
        unchecked.get(trust)  # nor as checked at all
    with pytest.raises(TypeError, match="rule: .*not a ConformalRuleFile"):
        read.get(trust, ConformalRuleFile)
    refused = RuleRead(rules["referral"], ReferralRule.load, Trust())  # signed by a key not trusted here
    assert refused.fingerprint is None and isinstance(refused.error, ValueError)
    for _ in range(2):  # the same refusal each time
        with pytest.raises(ValueError, match="referral rule"):
            refused.get(Trust())
    with pytest.raises(TypeError, match="path"):
        RuleRead(None, ReferralRule.load)


def test_read_command_artifact(rules):
    """A product's command reads its artifact once through ``read_command_artifact``: the masks' rule into a
    RuleRead, a loaded rule (or a read) as given; by default (a product that does not read its file) the path."""
    trust = Trust((rules["trust"][1],))
    read = ConformalMasks.read_command_artifact(rules["conformal"], trust)
    assert isinstance(read, RuleRead) and isinstance(read.get(trust, ConformalRuleFile), ConformalRuleFile)
    assert ConformalMasks.read_command_artifact(read, trust) is read
    assert ConformalMasks.read_command_artifact(read.rule) is read.rule
    assert CohortProduct.read_command_artifact("rule.json", trust) == "rule.json"


def test_a_refusal_raised_again_starts_from_the_reader_each_time(tmp_path):
    """``RuleRead.get`` raises the kept refusal with the reader's own traceback each time (re-raising the one object
    grew its traceback with the frames of every earlier call)."""
    import traceback

    read = RuleRead(tmp_path / "missing.json", ReferralRule.load)
    depths = []
    for _ in range(3):
        with pytest.raises(FileNotFoundError) as info:
            read.get()
        depths.append(len(traceback.extract_tb(info.value.__traceback__)))
    assert depths[0] == depths[1] == depths[2], depths
