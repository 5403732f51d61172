"""Review 67 follow-up: ``EvaluationConfig`` refuses a case id, class name or label value listed twice.

``EvaluationConfig(calibration_cases=["a", "b", "a"])`` was accepted without a word, although the command line refuses
a ``--calibration-cases`` file that lists a case twice (a typo for another case, most likely).
"""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.evaluation import EvaluationConfig
from monai_unc.evaluation.cohort import config_from_summary


@pytest.mark.parametrize("field, values, shown", [
    ("calibration_cases", ["c1", "c2", "c1"], "'c1'"),
    ("calibration_cases", [1, "1", "c2"], "'1'"),  # matched as text against the case ids: the same case
    ("class_names", ["background", "liver", "liver"], "'liver'"),
    ("seg_label_values", [1, 2, np.int64(2)], "2"),
])
def test_a_repeated_entry_is_refused_at_construction(field, values, shown):
    with pytest.raises(ValueError, match=rf"^{field} lists 1 \w+\(s\) more than once: {shown}$") as info:
        EvaluationConfig(**{field: values})
    assert info.value.parameter == field  # the command line names its option


def test_validate_refuses_a_repeat_set_after_construction():
    config = EvaluationConfig(calibration_cases=["a", "b"])
    config.calibration_cases.append("a")
    with pytest.raises(ValueError, match="calibration_cases lists 1 case"):
        config.validate()


def test_distinct_entries_are_kept():
    config = EvaluationConfig(calibration_cases=["b", "a"], class_names=["bg", "x", "y"], num_classes=3,
                              seg_label_values=[1, 2])
    config.validate()
    assert config.calibration_cases == ["b", "a"] and config.class_names == ["bg", "x", "y"]


def test_a_recorded_repeat_is_refused_unless_the_report_replaces_the_list():
    """An evaluation of an earlier version may have recorded such a list in summary.json: ``report`` refuses it, and
    ``--calibration-cases`` (an override) replaces it before the configuration is made."""
    saved = {"config": {"calibration_cases": ["a", "b", "a"], "budget": 0.2}}
    with pytest.raises(ValueError, match="calibration_cases lists 1 case"):
        config_from_summary(saved, [])
    config = config_from_summary(saved, [], calibration_cases=["a", "b"])
    assert config.calibration_cases == ["a", "b"] and config.budget == 0.2


def test_class_names_of_the_same_column_are_refused_at_construction_and_in_validate():
    """"Left Atrium" and "left-atrium" both give dice_left_atrium: refused when the config is built (review 67), with
    validate()'s message, and still by validate() when set afterwards."""
    message = r"^class_names: the names \['bg', 'Left Atrium', 'left-atrium'\] give the same column names"
    with pytest.raises(ValueError, match=message) as info:
        EvaluationConfig(class_names=["bg", "Left Atrium", "left-atrium"])
    assert info.value.parameter == "class_names"
    config = EvaluationConfig(class_names=["bg", "Left Atrium"])
    config.class_names.append("left-atrium")
    with pytest.raises(ValueError, match=message):
        config.validate()
