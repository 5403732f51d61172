"""Hostile tests of ``infer --settings-from RULE``: every setting the rule records comes back exactly, or is refused
before any case is predicted (:mod:`monai_unc.workflows.reuse`)."""

from __future__ import annotations

import json
import warnings

import pytest

from monai_unc.io.provenance import compare_fingerprints
from monai_unc.workflows import prepare_infer
from monai_unc.workflows.reuse import RuleSettings, merge_rule_settings, settings_of_fingerprint
from tests.bundles.test_cli_bundles import _bundle, _images

BRATS = {"TC": [1, 4], "WT": [1, 2, 4], "ET": [4]}


@pytest.mark.parametrize("given", ["brats", json.dumps(BRATS), "file", BRATS])
def test_regions_given_as_on_the_command_line_agree_with_the_same_regions(given, tmp_path):
    """Found by hostile testing: ``--regions brats`` (or the same JSON, or a file holding it) was refused as
    contradicting a rule certified with exactly those regions: only a mapping was compared."""
    if given == "file":
        given = tmp_path / "regions.json"
        given.write_text(json.dumps(BRATS))
        given = str(given)
    rule = RuleSettings("rule r.json", {"regions": BRATS, "activation": "sigmoid"}, 4)
    out = merge_rule_settings(rule, {"regions": given, "activation": "sigmoid"}, {"regions", "activation"})
    assert out["regions"] == BRATS and list(out["regions"]) == ["TC", "WT", "ET"]


@pytest.mark.parametrize("given", [{"WT": [1, 2, 4], "TC": [1, 4], "ET": [4]}, "brats2023", None])
def test_regions_in_another_channel_order_or_labels_contradict_the_rule(given):
    """Another channel order is other regions (the key order is the channel order): it was taken for the rule's,
    since dicts compare equal in any key order, and the rule's order silently replaced the one given."""
    rule = RuleSettings("rule r.json", {"regions": BRATS}, 4)
    with pytest.raises(ValueError, match="--regions .* contradicts the settings of rule r.json"):
        merge_rule_settings(rule, {"regions": given}, {"regions"})


def test_regions_given_to_a_rule_without_regions_contradict_it():
    rule = RuleSettings("rule r.json", {"regions": None}, 4)
    with pytest.raises(ValueError, match="--regions brats contradicts"):
        merge_rule_settings(rule, {"regions": "brats"}, {"regions"})
    assert merge_rule_settings(rule, {"regions": None}, {"regions"})["regions"] is None


@pytest.fixture(scope="module")
def bundle_rule(tmp_path_factory):
    """A bundle with preprocessing, and the settings of a rule certified on its predictions with and without it."""
    root = tmp_path_factory.mktemp("bundle_rule")
    images, bundle = _images(root / "images"), _bundle(root / "bundle")
    rules = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for pre in (True, False):
            plan = prepare_infer(images, bundle=bundle, samples=2, roi=16, bundle_preprocessing=pre)
            fields = ("model", "checkpoints", "method", "measures", "roi", "overlap", "activation", "temperature",
                      "intensity", "dropout", "tta_noise", "ratein_target")  # as prediction_fingerprint takes them
            fp = {**{k: plan.settings.to_json()[k] for k in fields}, "producer": "monai-unc infer", "num_samples": 2,
                  "weights": plan.model.weights}
            rules[pre] = (settings_of_fingerprint(fp, "referral rule r.json"), fp)
    return images, bundle, rules


@pytest.mark.parametrize("certified, given", [(True, False), (False, True)])
def test_a_rule_of_a_bundle_run_refuses_the_other_preprocessing(bundle_rule, certified, given):
    """Found by hostile testing: ``--no-bundle-preprocessing`` (or leaving it out) was not compared with the rule:
    the same bundle files passed the digest check, the new predictions were made with the other preprocessing, and
    triage then refused every one of them (fingerprint field ``model``)."""
    images, bundle, rules = bundle_rule
    rule, fp = rules[certified]
    assert compare_fingerprints(fp, rules[given][1])[0] == "mismatch"  # what triage would say afterwards
    hint = "add --no-bundle-preprocessing" if given else "leave out --no-bundle-preprocessing"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=f"--settings-from: referral rule r.json was certified .*; {hint}"):
            prepare_infer(images, bundle=bundle, bundle_preprocessing=given, rule=rule, **rule.options)
        plan = prepare_infer(images, bundle=bundle, bundle_preprocessing=certified, rule=rule, **rule.options)
    assert plan.settings.model == fp["model"]


def test_a_rule_without_a_model_description_compares_the_files_only(bundle_rule):
    images, bundle, rules = bundle_rule
    rule, _ = rules[True]
    rule = RuleSettings(rule.source, rule.options, rule.num_samples, rule.weights)  # as read from an older record
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepare_infer(images, bundle=bundle, bundle_preprocessing=False, rule=rule, **rule.options)


@pytest.mark.parametrize("value", [3, ["bundle: b"], "x" * 5000])
def test_the_recorded_model_description_is_validated(value):
    fp = {"producer": "monai-unc infer", "method": "mcdropout", "num_samples": 4, "roi": None, "overlap": 0.25,
          "intensity": "none", "measures": ["predictive_entropy"], "activation": "softmax", "dropout": None,
          "tta_noise": 0.0, "ratein_target": 0.1, "model": value}
    with pytest.raises(ValueError, match="fingerprint field 'model' must be null or the description"):
        settings_of_fingerprint(fp, "rule")


def _fingerprint(**fields):
    fp = {"producer": "monai-unc infer", "method": "mcdropout", "num_samples": 4, "roi": None, "overlap": 0.25,
          "intensity": "none", "measures": ["predictive_entropy"], "activation": "softmax", "dropout": None,
          "tta_noise": 0.0, "ratein_target": 0.1}
    return {**fp, **fields}


def test_a_rule_of_0_1_0_naming_max_softmax_is_reused_under_the_current_name():
    """Found by hostile testing: 0.1.0 recorded the map ``1 - max p`` as ``max_softmax`` (its default maps), so
    ``--settings-from`` refused such a rule as naming an unknown measure, and triage found every new prediction
    (``one_minus_max_prob``) made with other measures."""
    old = ["predictive_entropy", "expected_entropy", "mutual_information", "max_softmax"]
    rule = settings_of_fingerprint(_fingerprint(measures=old), "referral rule r.json")
    new = ["predictive_entropy", "expected_entropy", "mutual_information", "one_minus_max_prob"]
    assert rule.options["measures"] == new
    assert compare_fingerprints(_fingerprint(measures=old), _fingerprint(measures=new)) == ("match", [])
    assert compare_fingerprints(_fingerprint(measures=old), _fingerprint(measures=new[:3]))[0] == "mismatch"
    with pytest.raises(ValueError, match="fingerprint field 'measures' must be a list of distinct names"):
        settings_of_fingerprint(_fingerprint(measures=["max_softmax", "one_minus_max_prob"]), "rule")


def test_a_rule_certified_on_maps_of_another_run_is_refused():
    """Found by hostile testing: a rule certified with ``evaluate --uncertainty`` on maps of another run (other
    samples) gave the settings of its segmentations; every new prediction then mismatched the rule's maps."""
    fp = _fingerprint()
    rule = {**fp, "maps": {**fp, "num_samples": 16}}
    assert compare_fingerprints(rule, fp) == ("mismatch", [("maps.num_samples", 16, 4)])
    with pytest.raises(ValueError, match=r"rule r.json was certified on uncertainty maps of another run .*'maps'"):
        settings_of_fingerprint(rule, "rule r.json")


def test_a_rule_applied_to_probabilities_refuses_no_probs(bundle_rule):
    """A conformal rule (``artifact_needs_probabilities``) is applied to the new cases' probabilities: a run without
    them was predicted in full and then refused case by case by ``monai-unc conformal``."""
    from monai_unc.products.conformal import ConformalMasks

    assert ConformalMasks.artifact_needs_probabilities
    images, bundle, rules = bundle_rule
    rule, _ = rules[True]
    rule = RuleSettings(rule.source, rule.options, rule.num_samples, rule.weights, needs_probabilities=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"--no-probs: referral rule r.json is applied to the probabilities"):
            prepare_infer(images, bundle=bundle, rule=rule, write_probs=False, **rule.options)
        assert prepare_infer(images, bundle=bundle, rule=rule, **rule.options).settings.write_probs


def test_a_setting_of_a_newer_version_is_refused_not_dropped():
    """Found by hostile testing: a fingerprint field this version does not know (a newer version's setting) was
    dropped, the run did not reproduce it, and triage refused every new prediction (``tta_flips`` differs)."""
    fp = _fingerprint(method="mcdropout+tta", num_samples=32)
    rule = {**fp, "tta_flips": [0, 1]}
    assert compare_fingerprints(rule, fp)[0] == "mismatch"
    with pytest.raises(ValueError, match=r"records settings this version of monai-unc does not know \(\"tta_flips\""):
        settings_of_fingerprint(rule, "referral rule r.json")
    assert settings_of_fingerprint({**fp, "tta_flips": None}, "r").num_samples == 32  # null: compared as absent
    assert compare_fingerprints({**fp, "tta_flips": None}, fp) == ("match", [])
