"""The referral rule's calibration geometry (review 62).

``referral_rule.json`` recorded nothing of how its calibration cases were resampled, so a rule certified on 1 mm
cases applied to 3 mm cases without a word, while its guarantee holds for new cases exchangeable with the calibration
cases. It now records the range of their voxel spacing and voxel counts (``geometry``, covered by the digest and the
signature, checked as untrusted input when read), and ``triage`` / ``RiskControl.apply`` warn naming each case outside
it (the check of ``conformal_rule.json``, one function for both). A rule written before (no ``geometry``) verifies and
applies as before: ``data/referral_rule_review61.json`` was written and signed by the previous version
(``evaluate --target-risk 0.4 --delta 0.2`` on ``write_toy_cohort(n_cases=30, shape=(16, 16, 16), spacing=(1, 1, 1),
seed=1)``, no images), ``data/referral_rule_review61.pub`` is the public key it was signed with.
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
from monai_unc.evaluation.triage import RULE_FILE, ReferralRule, find_prediction_cases, run_triage
from monai_unc.io.provenance import rule_digest, write_signed_json
from monai_unc.io.signing import Trust

DATA = Path(__file__).parent / "data"
#: what the referral rule's geometry warning says of a case, after its name
RESAMPLED = "resampled or cropped otherwise than the referral rule's calibration cases"
#: the decisions of the previous version on ``write_toy_cohort(n_cases=6, shape=(16, 16, 16), spacing=(3, 3, 3),
#: seed=2)`` with ``data/referral_rule_review61.json`` (its run_triage, before review 62): (case, decision, code)
PREVIOUS_DECISIONS = [("toy000", "review", "outside_range"), ("toy001", "review", "outside_range"),
                      ("toy002", "review", "undefined_score"), ("toy003", "review", "undefined_score"),
                      ("toy004", "review", "above_threshold"), ("toy005", "accept", "accepted")]
PREVIOUS_SCORES = [0.46513300821451203, 0.46424276145909904, None, None, 0.6824195086956024, 0.5782911090688272]


@pytest.fixture(scope="module")
def cohorts(tmp_path_factory):
    root = tmp_path_factory.mktemp("refgeom")
    cal = write_toy_cohort(root / "cal", n_cases=30, shape=(16, 16, 16), spacing=(1.0, 1.0, 1.0), seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(cal["labels"], cal["predictions"], root / "eval",
                     EvaluationConfig(spatial=False, target_risk=0.4, delta=0.2))
    return {
        "rule": root / "eval" / RULE_FILE,
        "same": write_toy_cohort(root / "same", n_cases=3, shape=(16, 16, 16), spacing=(1.0, 1.0, 1.0), seed=2),
        "coarse": write_toy_cohort(root / "coarse", n_cases=6, shape=(16, 16, 16), spacing=(3.0, 3.0, 3.0), seed=2),
        "cropped": write_toy_cohort(root / "cropped", n_cases=2, shape=(16, 16, 12), spacing=(1.0, 1.0, 1.0),
                                    seed=2),
    }


def _triage(predictions: Path, rule: Path, out: Path, trust: Trust | None = None) -> tuple[dict, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run_triage(predictions, rule, out, trust=trust)
    return result.summary, [str(w.message) for w in caught if RESAMPLED in str(w.message)]


def test_the_rule_records_its_calibration_cases_geometry(cohorts):
    raw = json.loads(cohorts["rule"].read_text())
    # before review 62 the rule recorded nothing of its calibration cases' resampling
    assert raw["geometry"] == {"spacing_min": [1.0, 1.0, 1.0], "spacing_max": [1.0, 1.0, 1.0], "voxels_min": 16**3,
                               "voxels_max": 16**3}
    rule = ReferralRule.load(cohorts["rule"], Trust())
    assert rule.geometry == raw["geometry"] and rule.integrity == "recomputed, digest verified"
    assert rule.signature.startswith("signed by")
    assert ReferralRule.from_json(rule.to_json(), check_digest=True).geometry == raw["geometry"]


def test_triage_warns_once_naming_each_case_resampled_otherwise(cohorts, tmp_path):
    rule = cohorts["rule"]
    summary, geo = _triage(cohorts["coarse"]["predictions"], rule, tmp_path / "coarse")
    expected = [f"case 'toy00{i}': voxel spacing 3x3x3 mm (calibration cases: 1x1x1): {RESAMPLED}, so its guarantee "
                "(for new cases like them) may not hold" for i in range(6)]
    assert sorted(geo) == expected  # one warning per case, each naming it
    assert [w for w in summary["warnings"] if RESAMPLED in w] == [f"toy00{i}: {t}" for i, t in enumerate(expected)]
    # a warning, not a decision: the decisions are the rule's on the scores
    loaded = ReferralRule.load(rule)
    assert [c["code"] for c in summary["cases"]] == [
        d.code for d in loaded.apply([float("nan") if c["score"] is None else c["score"] for c in summary["cases"]])]

    summary, geo = _triage(cohorts["cropped"]["predictions"], rule, tmp_path / "cropped")
    assert sorted(geo) == [f"case 'toy00{i}': 3072 voxels (calibration cases: 4096): {RESAMPLED}, so its guarantee "
                           "(for new cases like them) may not hold" for i in range(2)]
    summary, geo = _triage(cohorts["same"]["predictions"], rule, tmp_path / "same")
    assert geo == [] and not [w for w in summary["warnings"] if RESAMPLED in w]


def test_the_command_line_prints_one_warning_line_per_case(cohorts, tmp_path, capsys):
    argv = ["triage", "-p", str(cohorts["coarse"]["predictions"]), "--rule", str(cohorts["rule"]), "-o",
            str(tmp_path / "t"), "-q"]
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert cli.main(argv) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if RESAMPLED in line]
    assert [line.split(": voxel spacing")[0] for line in lines] == [
        f"monai-unc triage: warning: case 'toy00{i}'" for i in range(6)]


def test_risk_control_apply_warns_about_a_case_resampled_otherwise(cohorts):
    from monai_unc.products import RiskControl

    rule = ReferralRule.load(cohorts["rule"])
    for name, warned in (("coarse", True), ("same", False)):
        case = find_prediction_cases(cohorts[name]["predictions"], rule)[0]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            decision = RiskControl().apply(case, cohorts["rule"])
        geo = [str(w.message) for w in caught if RESAMPLED in str(w.message)]
        assert [g.split(":")[0] for g in geo] == (["case 'toy000'"] if warned else [])
        assert decision.code in ("accepted", "above_threshold", "outside_range", "undefined_score")


def test_edited_geometry_is_caught_by_the_digest_and_the_signature(cohorts, tmp_path):
    raw = json.loads(cohorts["rule"].read_text())
    widened = {**raw, "geometry": {**raw["geometry"], "spacing_max": [3.0, 3.0, 3.0]}}
    removed = {k: v for k, v in raw.items() if k != "geometry"}  # to silence the warning
    for i, doc in enumerate((widened, removed)):
        path = tmp_path / f"edited{i}.json"
        path.write_text(json.dumps(doc))
        with pytest.raises(ValueError, match="does not match its digest"):
            ReferralRule.load(path)
        # the digest recomputed: the signature, made over the digest written, no longer verifies
        path.write_text(json.dumps({**doc, "digest": rule_digest(doc)}))
        assert ReferralRule.load(path).geometry == doc.get("geometry")  # no trust asked: the content is consistent
        with pytest.raises(ValueError, match="signature"):
            ReferralRule.load(path, Trust())


@pytest.mark.parametrize("bad, field", [
    ("1x1x1", "'geometry'"),
    ({"spacing_min": [1.0, 1.0, 1.0], "spacing_max": [1.0, 1.0, 1.0], "voxels_min": 1}, "'geometry'"),
    ({"spacing_min": [-1.0, 1.0, 1.0]}, "'geometry.spacing_min'"),
    ({"spacing_max": [1.0, 0.0, 1.0]}, "'geometry.spacing_max'"),
    ({"spacing_max": ["1", 1.0, 1.0]}, "'geometry.spacing_max'"),
    ({"spacing_max": [1.0, float("inf"), 1.0]}, "'geometry.spacing_max'"),
    ({"spacing_min": [1.0, float("nan"), 1.0]}, "'geometry.spacing_min'"),
    ({"spacing_min": [True, 1.0, 1.0]}, "'geometry.spacing_min'"),
    ({"spacing_min": [2.0, 1.0, 1.0]}, "'geometry.spacing_min' must be at most"),
    ({"spacing_min": [1.0, 1.0]}, "'geometry.spacing_min' must have as many axes"),
    ({"voxels_min": -4}, "'geometry.voxels_min' must be a positive count"),
    ({"voxels_max": 4096.5}, "'geometry.voxels_max' must be a positive count"),
    ({"voxels_max": "4096"}, "'geometry.voxels_max' must be a positive count"),
    ({"voxels_min": False}, "'geometry.voxels_min' must be a positive count"),
    ({"voxels_min": 5000}, "'geometry.voxels_min' must be at most 'geometry.voxels_max'"),
])
def test_the_geometry_field_is_checked_as_untrusted_input(cohorts, bad, field):
    raw = json.loads(cohorts["rule"].read_text())
    geometry = {**raw["geometry"], **bad} if isinstance(bad, dict) and len(bad) == 1 else bad
    doc = {**raw, "geometry": geometry}
    finite = "nan" not in repr(bad) and "inf" not in repr(bad)  # no digest of a non-finite number (nor JSON file)
    if finite:
        doc["digest"] = rule_digest(doc)  # the content is consistent: the field itself is refused
    with pytest.raises(ValueError, match=rf"^rule: field {field}"):
        ReferralRule.from_json(doc, "rule", check_digest=finite)
    with pytest.raises(ValueError, match=rf"field {field}"):  # built in memory
        ReferralRule(**{**ReferralRule.from_json(raw).__dict__, "geometry": geometry})


def test_a_bad_geometry_is_one_line_and_exit_2_on_the_command_line(cohorts, tmp_path, capsys):
    raw = json.loads(cohorts["rule"].read_text())
    doc = {k: v for k, v in raw.items() if k != "signature"}
    doc["geometry"] = {**doc["geometry"], "spacing_min": [-1.0, 1.0, 1.0]}
    path = write_signed_json(tmp_path / "rule.json", doc)  # digest and signature made anew: the field refuses it
    argv = ["triage", "-p", str(cohorts["same"]["predictions"]), "--rule", str(path), "-o", str(tmp_path / "t"), "-q"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "field 'geometry.spacing_min' must be a list of positive spacings" in err[0], err


def test_a_rule_written_by_the_previous_version_verifies_and_applies_as_before(tmp_path):
    path = shutil.copy(DATA / "referral_rule_review61.json", tmp_path / "referral_rule.json")
    key = shutil.copy(DATA / "referral_rule_review61.pub", tmp_path / "previous.pub")
    raw = json.loads(Path(path).read_text())
    assert "geometry" not in raw and raw["format_version"] == 5
    trust = Trust(keys=(str(key),))
    rule = ReferralRule.load(path, trust)
    assert getattr(rule, "geometry", None) is None and rule.integrity == "recomputed, digest verified"
    assert rule.signature.startswith("signed by")
    # written again, it is the same content: the same digest, so the same signature verifies
    assert rule.to_json() == {k: v for k, v in raw.items() if k != "signature"}
    coarse = write_toy_cohort(tmp_path / "coarse", n_cases=6, shape=(16, 16, 16), spacing=(3.0, 3.0, 3.0), seed=2)
    summary, geo = _triage(coarse["predictions"], Path(path), tmp_path / "t", trust)
    assert geo == []  # it recorded no geometry: nothing is checked, as before
    assert [(c["case"], c["decision"], c["code"]) for c in summary["cases"]] == PREVIOUS_DECISIONS
    scores = [c["score"] for c in summary["cases"]]
    assert [s is None for s in scores] == [s is None for s in PREVIOUS_SCORES]
    # scores of float32 maps: another BLAS moves them by a few 1e-9 (Intel MKL's AVX-512 path: 5.6e-9 against the
    # recorded values), far below any change of a rule's decisions
    assert [s for s in scores if s is not None] == pytest.approx([s for s in PREVIOUS_SCORES if s is not None],
                                                                 rel=1e-6)
    assert "geometry" not in summary["rule"] and summary["rule"]["digest"] == raw["digest"]
