"""Class names a rule file refuses are refused where the rule is made (found by review).

``ReferralRule.from_json`` checks class names as untrusted text (printable, at most 256 characters), but
``EvaluationConfig`` and the ``ReferralRule`` constructor took any name: an evaluation with a class name holding a tab
certified and wrote a rule that triage then refused to read.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from monai_unc.evaluation.config import EvaluationConfig
from monai_unc.evaluation.triage import ReferralRule

sys.path.insert(0, str(Path(__file__).parent))
from test_rule_text_leftovers import _doc, _reread  # noqa: E402


@pytest.mark.parametrize("name", ["left\tkidney", "x" * 300, "liver\nspleen"])
def test_a_rule_is_not_made_with_a_name_it_cannot_read(name):
    rule = _reread(_doc())
    with pytest.raises(ValueError, match=r"class_names\[1\]"):
        dataclasses.replace(rule, class_names=("background", name))
    with pytest.raises(ValueError, match=r"class_names\[1\]"):
        EvaluationConfig(class_names=["background", name]).validate()


def test_printable_names_still_round_trip():
    rule = dataclasses.replace(_reread(_doc()), class_names=("background", "Läsion (links) ü"))
    back = ReferralRule.from_json(json.loads(json.dumps(rule.to_json())), "rule")
    assert back.class_names == ("background", "Läsion (links) ü")
    config = EvaluationConfig(class_names=["background", "Läsion (links) ü"])
    config.validate()
    assert config.class_names == ["background", "Läsion (links) ü"]
