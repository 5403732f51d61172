"""Hostile review 68 of ``EvaluationConfig``'s refusals (review 67): containers the fields do not take."""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.evaluation import EvaluationConfig


def test_seg_label_values_as_an_array_is_refused_naming_the_field():
    # found by hostile review 68: np.array([1, 2, 2]) failed validate() with numpy's "The truth value of an array with
    # more than one element is ambiguous", naming neither the field nor what it takes
    config = EvaluationConfig(seg_label_values=np.array([1, 2, 3]))
    with pytest.raises(ValueError, match=r"seg_label_values must be a list of distinct non-negative integers, one per "
                                         r"segment in the order of the segments, got ndarray"):
        config.validate()


def test_seg_label_values_as_a_set_is_refused():
    # found by hostile review 68: a set has no order, and segment s took the s-th value of its iteration order: {3, 1}
    # mapped segment 1 to label 1 and segment 2 to label 3, without a word
    config = EvaluationConfig(seg_label_values={3, 1})
    with pytest.raises(ValueError, match=r"seg_label_values must be a list .* got set"):
        config.validate()


def test_seg_label_values_as_a_list_or_tuple_is_kept_in_order():
    config = EvaluationConfig(seg_label_values=(3, np.int64(1)))
    config.validate()
    assert config.seg_label_values == [3, 1]


@pytest.mark.parametrize("blank", ["", "  "])
def test_an_empty_class_name_is_refused(blank):
    # found by hostile review 68: --class-names bg "" liver (or a list with a stray empty entry) was evaluated, its
    # column named dice_class after no name, while dicom-export refuses the same --class-names ("1 to 64 bytes")
    config = EvaluationConfig(class_names=["bg", blank, "liver"], num_classes=3)
    with pytest.raises(ValueError, match=r"class_names\[1\] is empty"):
        config.validate()


def test_an_evaluation_recorded_with_an_empty_class_name_stays_readable():
    # an evaluation written before empty names were refused recorded "" and the column dice_class: report and resume
    # (config_from_summary) refused the folder; the name is read as "class", the name of that column
    from monai_unc.evaluation.cohort import config_from_summary
    from monai_unc.evaluation.config import dice_columns

    summary = {"config": {"class_names": ["bg", "", "liver"], "num_classes": 3}}
    with pytest.warns(UserWarning, match=r"empty class name \(class_names\[1\]\)"):
        config = config_from_summary(summary, [])
    assert config.class_names == ["bg", "class", "liver"]
    assert dice_columns(3, config.class_names) == ["dice_class", "dice_liver"]
