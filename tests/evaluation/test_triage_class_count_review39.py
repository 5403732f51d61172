"""A rule without a class count triages any predictions, as before the check of the class count (found by review).

The check that refuses predictions of another class count than the rule's before the first case compared the count
with ``num_classes`` also when the rule records none (``null`` in the file, the ``ReferralRule`` constructor's
default): every triage with such a rule was refused with "the rule is for None classes".
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.triage import ReferralRule, run_triage


@pytest.fixture(scope="module")
def certified(tmp_path_factory):
    root = tmp_path_factory.mktemp("nocount")
    toy = write_toy_cohort(root / "A", n_cases=12, shape=(10, 10, 10), seed=1)
    ev = root / "ev"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main(["evaluate", "-l", str(toy["labels"]), "-p", str(toy["predictions"]), "-o", str(ev),
                         "--no-spatial", "--target-risk", "0.4", "--delta", "0.2", "-q"]) == 0
    return toy, ReferralRule.load(ev / "referral_rule.json")


def test_a_rule_without_a_class_count_triages(certified, tmp_path):
    toy, rule = certified
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counted = run_triage(toy["predictions"], rule, tmp_path / "counted", allow_mismatch=True)
        res = run_triage(toy["predictions"], dataclasses.replace(rule, num_classes=None, class_names=None),
                         tmp_path / "uncounted", allow_mismatch=True)
    assert res.decisions == counted.decisions and len(res.decisions) == 12


def test_a_rule_of_another_class_count_is_still_refused(certified, tmp_path):
    toy, rule = certified
    with pytest.raises(ValueError, match="the rule is for 3 classes, but case 'toy000' has 2"):
        run_triage(toy["predictions"], dataclasses.replace(rule, num_classes=3, class_names=None),
                   tmp_path / "three", allow_mismatch=True)
