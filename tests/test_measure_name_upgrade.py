"""Upgrade: the deprecated measure name ``max_softmax`` warns at the user's line (found by the upgrade review).

``UncertaintyMeasures(measures=["max_softmax"])`` and ``UncertaintyMeasuresd`` attributed the ``DeprecationWarning``
to ``monai_unc/transforms.py`` (a list comprehension is a frame of its own before Python 3.12), and
``EvaluationConfig(measure="max_softmax")`` warned only when the evaluation validated it, inside the package: Python's
default filters hide a ``DeprecationWarning`` attributed to a library, so code using the old name was never told that
it stops working in the next release. Each now warns once, at the calling line, and uses the new name.
"""

from __future__ import annotations

import warnings

import pytest

from monai_unc.evaluation.config import EvaluationConfig
from monai_unc.transforms import UncertaintyMeasures, UncertaintyMeasuresd
from tests.test_deprecations import MEASURE_NAME_CODE, fresh_interpreter_deprecations


@pytest.mark.parametrize("make, read", [
    (lambda: UncertaintyMeasures(measures=["max_softmax", "predictive_entropy"]), lambda t: t.measures),
    (lambda: UncertaintyMeasures(measures="max_softmax"), lambda t: t.measures),
    (lambda: UncertaintyMeasuresd(keys=["pred"], measures=["max_softmax"]), lambda t: t.transform.measures),
    (lambda: EvaluationConfig(measure="max_softmax"), lambda c: [c.measure]),
], ids=["transform", "transform-str", "dict-transform", "evaluation-config"])
def test_the_old_measure_name_warns_once_at_the_caller(make, read):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        obj = make()
    dep = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(dep) == 1 and "'max_softmax'" in str(dep[0].message) and "'one_minus_max_prob'" in str(dep[0].message)
    assert dep[0].filename == __file__, dep[0].filename
    assert read(obj)[0] == "one_minus_max_prob"


def test_the_config_validated_later_does_not_warn_again():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        config = EvaluationConfig(measure="max_softmax")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        config.validate()
    assert config.measure == "one_minus_max_prob"


def test_the_warnings_are_shown_under_the_default_filters(tmp_path_factory):
    """Under Python's default filters a fresh interpreter running ``MEASURE_NAME_CODE`` (the transform and the
    evaluation config given the old name) prints both warnings (tests/test_deprecations.py runs it, in the interpreter
    that also checks the old module paths)."""
    assert "UncertaintyMeasures(measures=['max_softmax'])" in MEASURE_NAME_CODE
    assert "EvaluationConfig(measure='max_softmax').validate()" in MEASURE_NAME_CODE
    fresh = fresh_interpreter_deprecations(tmp_path_factory)
    shown, stderr = fresh["shown"], fresh["stderr"]
    assert len(shown) == 2 and all("max_softmax" in line for line in shown), stderr


def test_uncertainty_output_get_reads_the_old_measure_name():
    """``out.get("max_softmax")`` of code written for an earlier version reads the map, warning at the caller as
    ``out["max_softmax"]`` does (found by review36: ``dict.get`` bypassed the alias and returned None silently)."""
    import torch

    from monai_unc.inferers import UncertaintyOutput

    out = UncertaintyOutput(one_minus_max_prob=torch.full((1, 1, 2, 2), 0.25))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = out.get("max_softmax")
    dep = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert got is out["one_minus_max_prob"]
    assert len(dep) == 1 and dep[0].filename == __file__, [(w.filename, str(w.message)) for w in caught]
    assert out.get("nothing", 3) == 3 and out.get("one_minus_max_prob") is got
    assert UncertaintyOutput().get("max_softmax", "absent") == "absent"
