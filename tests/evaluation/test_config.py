"""Options of an evaluation (:mod:`monai_unc.evaluation.config`): the refusals of ``EvaluationConfig.validate`` name
the field, the derived settings, the column names of regions, the shift table and the score specs (the options of
the masks with a guarantee: tests/products/test_conformal_product.py)."""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest

from monai_unc.evaluation.config import (
    UNREPEATABLE,
    EvaluationConfig,
    parse_score_column,
    read_shifts,
    region_suffix,
    slug,
    unit_scale,
)
from monai_unc.keys import MEASURES
from monai_unc.scores import CASE_SCORES


@pytest.mark.parametrize("kwargs, field", [
    ({"budget": 1.0}, "budget"),
    ({"budget": -0.1}, "budget"),
    ({"failure_dice": 1.5}, "failure_dice"),
    ({"failure_dice": -0.01}, "failure_dice"),
    ({"measure": "entropyy"}, "measure"),
    ({"patch_size": 0}, "patch_size"),
    ({"n_bins": 0}, "n_bins"),
    ({"target_risk": 0.0}, "target_risk"),
    ({"target_risk": 1.0}, "target_risk"),
    ({"delta": 0.0}, "delta"),
    ({"delta": 1.0}, "delta"),
    ({"risk": "dice"}, "risk"),
    ({"risk_method": "bonferroni"}, "risk_method"),
    ({"risk": "1-dice", "risk_method": "sgr"}, "risk_method"),
    ({"calibration_cases": []}, "calibration_cases"),
    ({"regions": {"W T": [1], "W-T": [2]}}, "regions"),
    ({"regions": {"...": [1]}}, "regions"),
    ({"regions": "brats", "class_names": ["a", "b", "c"]}, "class_names"),
    ({"regions": "brats", "num_classes": 2}, "num_classes"),
    ({"case_metrics": {"bad name": len}}, "case_metrics"),
    ({"case_metrics": {"1x": len}}, "case_metrics"),
])
def test_validate_refuses_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        EvaluationConfig(**kwargs).validate()


@pytest.mark.parametrize("kwargs, field", [
    ({"ignore_unclaimed_labels": 1}, "ignore_unclaimed_labels"),
    ({"case_metrics": [len]}, "case_metrics"),
    ({"case_metrics": {"m": 3}}, "case_metrics"),
])
def test_validate_type_errors_name_the_field(kwargs, field):
    with pytest.raises(TypeError, match=field):
        EvaluationConfig(**kwargs).validate()


def test_validate_normalises_regions():
    config = EvaluationConfig(measure="one_minus_max_prob", regions="brats")
    config.validate()
    assert list(config.regions.items()) == [("TC", [1, 4]), ("WT", [1, 2, 4]), ("ET", [4])]  # channel order
    assert config.region_names == ["TC", "WT", "ET"]
    config.validate()  # validating twice changes nothing
    assert list(config.regions.items()) == [("TC", [1, 4]), ("WT", [1, 2, 4]), ("ET", [4])]


def test_validate_accepts_the_deprecated_measure_name():
    with pytest.warns(DeprecationWarning):  # at the construction (tests/test_measure_name_upgrade.py)
        config = EvaluationConfig(measure="max_softmax")
    config.validate()
    assert config.measure == "one_minus_max_prob"


def test_n_fine_bins_is_sixteen_times_n_bins():
    assert EvaluationConfig().n_fine_bins == 16 * 15
    assert EvaluationConfig(n_bins=10).n_fine_bins == 160
    assert EvaluationConfig(n_bins=1).n_fine_bins == 16


def test_resolved_risk_method():
    assert EvaluationConfig().resolved_risk_method == "sgr"
    assert EvaluationConfig(risk="1-dice").resolved_risk_method == "ltt"
    assert EvaluationConfig(risk_method="ltt").resolved_risk_method == "ltt"


def test_check_calibration_cases():
    assert EvaluationConfig().check_calibration_cases(["a"]) == set()
    assert EvaluationConfig(calibration_cases=["a", 2]).check_calibration_cases(["a", "2", "b"]) == {"a", "2"}
    with pytest.raises(ValueError, match=r"calibration_cases: 1 case\(s\) not in the evaluation"):
        EvaluationConfig(calibration_cases=["a", "z"]).check_calibration_cases(["a", "b"])


def test_case_metric_names():
    def vol(task):
        return 0.0

    assert EvaluationConfig().case_metric_names is None
    names = EvaluationConfig(case_metrics={"vol": vol}).case_metric_names
    assert names == {"vol": f"{__name__}.test_case_metric_names.<locals>.vol"}


def _threshold_metric(task, threshold=0.5, scale=1.0):
    return 0.0


class _Partial(functools.partial):
    """A partial with a call of its own (Python does not flatten a partial of it)."""

    def __call__(self, *args, **kwargs):
        return super().__call__(*args, **kwargs)


class _Scaled:
    """A callable metric object whose parameter is in its repr (as a dataclass's)."""

    def __init__(self, scale):
        self.scale = scale

    def __repr__(self):
        return f"_Scaled(scale={self.scale!r})"

    def __call__(self, task):
        return 0.0

    def method(self, task):
        return 0.0


def test_case_metric_names_of_partials_name_the_function_and_its_arguments():
    """A ``functools.partial`` was named ``functools.partial`` whatever it wrapped: a resume under another threshold
    reused the rows of the first, and ranks given other partials agreed."""
    fn = f"{__name__}._threshold_metric"
    names = EvaluationConfig(case_metrics={
        "a": functools.partial(_threshold_metric, threshold=0.3),
        "b": functools.partial(_threshold_metric, threshold=0.7),
        "c": functools.partial(np.mean),
        "d": functools.partial(_threshold_metric, 0.3, scale=(1, "x")),
        "e": functools.partial(_threshold_metric, scale=2.0, threshold=0.3),
        "f": functools.partial(_threshold_metric, threshold=functools.partial(np.mean, axis=1)),
    }).case_metric_names
    assert names["a"] == f"functools.partial({fn}, threshold=0.3)"
    assert names["b"] == f"functools.partial({fn}, threshold=0.7)"
    assert names["c"] == "functools.partial(numpy.mean)"
    assert names["d"] == f"functools.partial({fn}, 0.3, scale=(1, 'x'))"
    assert names["e"] == f"functools.partial({fn}, scale=2.0, threshold=0.3)"  # keywords sorted
    assert names["f"] == f"functools.partial({fn}, threshold=functools.partial(numpy.mean, axis=1))"
    # nested partials: Python flattens those of functools.partial itself, not those of a subclass with its own call
    flat = EvaluationConfig(case_metrics={"m": functools.partial(functools.partial(_threshold_metric, 0.3), scale=2)})
    assert flat.case_metric_names["m"] == f"functools.partial({fn}, 0.3, scale=2)"
    nested = EvaluationConfig(case_metrics={"m": functools.partial(_Partial(_threshold_metric, 0.3), scale=2)})
    assert nested.case_metric_names["m"] == f"functools.partial({__name__}._Partial({fn}, 0.3), scale=2)"
    # arrays by their contents (their repr elides the middle of a long one)
    big = np.arange(5000.0)
    other = big.copy()
    other[2500] = -1
    a, b = (EvaluationConfig(case_metrics={"m": functools.partial(_threshold_metric, threshold=x)}).case_metric_names
            for x in (big, other))
    assert a != b and "sha256" in a["m"]


def test_case_metric_names_of_callable_objects_and_methods_name_their_state():
    """A callable object and a bound method were named by their class alone, whatever their parameters."""
    names = EvaluationConfig(case_metrics={"a": _Scaled(0.3), "b": _Scaled(0.7), "c": _Scaled(0.3).method}
                             ).case_metric_names
    assert names["a"] == f"{__name__}._Scaled _Scaled(scale=0.3)" and names["a"] != names["b"]
    assert names["c"] == f"{__name__}._Scaled.method of {__name__}._Scaled _Scaled(scale=0.3)"


def test_case_metric_names_of_arguments_without_repeatable_text_never_match():
    """An argument whose repr holds a memory address names nothing another run can repeat: the name says so (and a
    saved state with it is never reused: tests/evaluation/test_case_metrics.py); the address itself is left out, so
    that the ranks of one job still compare the function and the argument's type."""
    a, b = (EvaluationConfig(case_metrics={"m": functools.partial(_threshold_metric, threshold=object())})
            .case_metric_names["m"] for _ in range(2))
    assert a.endswith(UNREPEATABLE) and " at 0x" not in a and a == b
    assert a.startswith(f"functools.partial({__name__}._threshold_metric, threshold=<object object")
    plain = EvaluationConfig(case_metrics={"m": _threshold_metric}).case_metric_names["m"]
    assert not plain.endswith(UNREPEATABLE)


@pytest.mark.parametrize("name, suffix", [
    ("WT", "WT"), ("whole tumour", "whole_tumour"), ("  a--b  ", "a_b"), ("ET/2", "ET_2"), ("Ödem", "Ödem"),
    (3, "3"), ("水肿", "水肿"), ("Отёк 2", "Отёк_2"), ("Ｔ２", "T2"), ("ÄÖ", "ÄÖ"),
])
def test_region_suffix(name, suffix):
    assert region_suffix(name) == suffix


@pytest.mark.parametrize("name", ["", "--", " / ", "・、"])
def test_region_suffix_refuses_a_name_without_letters_or_digits(name):
    with pytest.raises(ValueError, match="regions: the region name"):
        region_suffix(name)


@pytest.mark.parametrize("name, expected", [
    ("WT", "wt"), ("Left Kidney", "left_kidney"), ("__", "class"), ("", "class"), ("a.b-c", "a_b_c"), (2, "2"),
])
def test_slug(name, expected):
    assert slug(name) == expected


def test_unit_scale():
    u = np.array([0.0, 0.5, math.log(3)])
    np.testing.assert_allclose(unit_scale(u, "predictive_entropy", 3), u / math.log(3))
    np.testing.assert_allclose(unit_scale(u, "mutual_information", 3), u / math.log(3))
    assert unit_scale(u, "one_minus_max_prob", 3) is u
    assert unit_scale(u, "variance", 3) is u


def test_read_shifts(tmp_path):
    path = tmp_path / "shifts.csv"
    path.write_text("case,site,shift\na,1,none\nb,2,intensity\nc,3,\n", encoding="utf-8")
    assert read_shifts(path) == {"a": "none", "b": "intensity", "c": ""}
    assert read_shifts(str(path)) == read_shifts(path)


def test_read_shifts_refusals(tmp_path):
    with pytest.raises(FileNotFoundError, match="shift table not found"):
        read_shifts(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("case,site\na,1\n")
    with pytest.raises(ValueError, match="columns 'case' and 'shift'"):
        read_shifts(bad)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match="columns 'case' and 'shift'"):
        read_shifts(empty)
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"case,shift\n\xff\xfe,\x80\n")
    with pytest.raises(ValueError, match="not a UTF-8 CSV"):
        read_shifts(binary)


def test_parse_score_column_every_measure_and_score():
    for m in MEASURES:
        for s in CASE_SCORES:
            assert parse_score_column(f"{m}_{s}") == (m, s, None)
            assert parse_score_column(f"{m}_{s}_whole_tumour", ["whole tumour", "TC"]) == (m, s, "whole tumour")
            assert parse_score_column(f"{m}_{s}_TC", ["whole tumour", "TC"]) == (m, s, "TC")


@pytest.mark.parametrize("column, regions", [
    ("dice", None), ("ece", None), ("predictive_entropy", None), ("predictive_entropy_max", None),
    ("predictive_entropy_fg_mean_WT", None), ("predictive_entropy_fg_mean_XX", ["WT"]), ("entropy_mean", None),
    ("_fg_mean", None),
])
def test_parse_score_column_refusals(column, regions):
    with pytest.raises(ValueError, match="score: "):
        parse_score_column(column, regions)


def test_to_json():
    def vol(task):
        return 0.0

    config = EvaluationConfig(shifts={"a": "none"}, case_metrics={"vol": vol}, regions="brats", n_bins=7)
    config.validate()
    doc = config.to_json()
    assert "shifts" not in doc and "case_metrics" not in doc and "products" not in doc
    assert doc["case_metric_names"] == {"vol": f"{__name__}.test_to_json.<locals>.vol"}
    assert list(doc["regions"].items()) == [("TC", [1, 4]), ("WT", [1, 2, 4]), ("ET", [4])] and doc["n_bins"] == 7
    assert json.loads(json.dumps(doc)) == doc
    plain = EvaluationConfig()
    plain.validate()
    d = plain.to_json()
    assert "case_metric_names" not in d and "products" not in d and "shifts" not in d
    assert d["budget"] == 0.2 and d["measure"] is None and not any(k.startswith("conformal") for k in d)
    assert config.shifts == {"a": "none"}  # to_json does not change the config


def test_region_suffix_keeps_every_scripts_letters_as_slug_does():
    """Found by review 69: ``region_suffix`` kept ASCII letters and digits only, while ``slug`` (the class columns)
    keeps every script's: a region named in another script was refused (``水肿``), and two such names with one ASCII
    part shared a column (``水肿 1`` and ``浮肿 1`` both ``1``: refused as a collision), or lost letters (``Ödem`` ->
    ``dem``). ASCII names keep the columns of earlier versions byte for byte; an evaluation written by one of them
    (``Ödem 2`` -> ``dice_dem_2``) is read as written."""
    from monai_unc.evaluation.config import dice_columns, slug
    from monai_unc.scores import region_suffixes

    ascii_names = ["WT", "TC", "ET", "whole tumour", "  a--b  ", "ET/2", "left_atrium", "a__b", "x\\ty", "A-1_b.2"]
    pinned = ["WT", "TC", "ET", "whole_tumour", "a_b", "ET_2", "left_atrium", "a_b", "x_ty", "A_1_b_2"]
    assert [region_suffix(n) for n in ascii_names] == pinned
    assert region_suffixes(["水肿 1", "浮肿 1", "מיימת", "Ödem"]) == ["水肿_1", "浮肿_1", "מיימת", "Ödem"]
    # the letters slug keeps, case kept
    for name in ["水肿 2", "Отёк", "Ödem", "नमस्ते", "Ｔ２ flair"]:
        assert region_suffix(name).lower() == slug(name), name
    with pytest.raises(ValueError, match="same column names"):
        region_suffixes(["T2", "Ｔ２"])  # NFKC: one spelling
    # an evaluation written by an earlier version: its columns read as written; a new one's as now
    old = ["case", "dice", "dice_dem_2", "dice_WT"]
    assert dice_columns(0, regions=["Ödem 2", "WT"], columns=old) == ["dice_dem_2", "dice_WT"]
    assert dice_columns(0, regions=["Ödem 2", "WT"], columns=["dice_Ödem_2", "dice_WT"]) == ["dice_Ödem_2", "dice_WT"]
    assert dice_columns(0, regions=["水肿", "None"], columns=["dice_None"]) == ["dice_水肿", "dice_None"]
    # resuming such an evaluation computes a case of a non-ASCII region again (its saved row has the former columns);
    # the fingerprint of ASCII regions is unchanged
    from monai_unc.evaluation.resume import case_config_fingerprint

    assert "region_columns" not in case_config_fingerprint(EvaluationConfig(regions={"WT": [1, 2], "ET": [2]}))
    got = case_config_fingerprint(EvaluationConfig(regions={"Ödem 2": [1, 2], "ET": [2]}))
    assert got["region_columns"] == ["dice_Ödem_2", "dice_ET"]


def test_case_metric_names_of_tensors_frames_and_modules_name_their_contents():
    """A torch tensor subclass (a Parameter, a MONAI MetaTensor), a pandas object and an nn.Module were named by
    their repr, which elides the middle of a long one or omits the weights: other arguments, the same name."""
    import pandas as pd
    import torch
    from monai.data import MetaTensor

    base = np.zeros(5000, np.float32)
    other = base.copy()
    other[2500] = 1.0

    def name(value: object) -> str:
        return EvaluationConfig(case_metrics={"m": functools.partial(_threshold_metric, threshold=value)}
                                ).case_metric_names["m"]

    for make in (torch.from_numpy, lambda x: torch.nn.Parameter(torch.from_numpy(x), requires_grad=False),
                 lambda x: MetaTensor(torch.from_numpy(x)), pd.Series, lambda x: pd.DataFrame({"w": x})):
        a, b = name(make(base)), name(make(other))
        assert a != b and "sha256" in a and not a.endswith(UNREPEATABLE) and a == name(make(base.copy()))
    # a plain float32 tensor keeps the name of earlier versions; a bfloat16 one (no numpy dtype) is named too
    assert "torch.ndarray(shape=(5000,), dtype=float32, sha256=" in name(torch.from_numpy(base))
    assert "dtype=bfloat16" in name(torch.ones(3, dtype=torch.bfloat16))
    assert name(torch.ones(3, dtype=torch.bfloat16)) != name(torch.zeros(3, dtype=torch.bfloat16))
    assert name(pd.Series(base, name="a")) != name(pd.Series(base, name="b"))
    assert name(pd.Series([[1, 2], [3]])) != name(pd.Series([[1, 2], [4]]))  # unhashable cells
    torch.manual_seed(0)
    net_a, net_b = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
    assert name(net_a) != name(net_b) and "sha256" in name(net_a)
    modules = EvaluationConfig(case_metrics={"a": net_a, "b": net_b}).case_metric_names
    assert modules["a"] != modules["b"] and modules["a"].startswith("torch.nn.modules.linear.Linear(")
