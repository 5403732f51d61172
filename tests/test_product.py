"""The cohort-product protocol (:mod:`monai_unc.product`) and the evaluation's side of it
(:mod:`monai_unc.evaluation.products`): the registry, the command-line options, the base class's defaults, the
artifact files, fit and summary on the calibration cases, and the ``products`` option of
:class:`~monai_unc.evaluation.EvaluationConfig`. The end-to-end path (``monai-unc evaluate`` with a product, resume,
``torchrun``, the report) is ``tests/evaluation/test_products_toy.py``."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest

from monai_unc import __version__
from monai_unc.evaluation import EvaluationConfig
from monai_unc.evaluation.products import (
    ARTIFACT_FORMAT,
    artifact_digest,
    artifact_paths,
    fit_products,
    product_case_states,
    product_states_of,
    product_summaries,
    read_artifact,
    summary_block,
    write_artifact,
    write_artifacts,
)
from monai_unc.product import (
    RESERVED_NAMES,
    CohortProduct,
    ReportSection,
    command_product,
    product_type,
    products_from_arguments,
    register_product,
    registered_products,
    unregister_product,
)


class Total:
    """A toy state: a number per case."""

    def __init__(self, value: float) -> None:
        self.value = float(value)

    def merge(self, other: Total) -> Total:
        self.value += other.value
        return self

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"value": np.float64(self.value)}

    @classmethod
    def from_state_dict(cls, state):
        return cls(float(state["value"]))


@dataclass
class TinySummary:
    n_cases: int
    mean: float
    per_case: dict[str, float] = field(default_factory=dict)


class Tiny(CohortProduct):
    """Sums the predicted foreground of each case; fits the mean over the calibration cases."""

    name = "tiny"
    title = "Tiny product"
    description = "A product of the tests."

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = float(scale)
        self.fit_calls: list[tuple[list[str], list[str]]] = []

    @classmethod
    def add_arguments(cls, group) -> None:
        group.add_argument("--tiny", action="store_true")
        group.add_argument("--tiny-scale", type=float, default=1.0)

    @classmethod
    def from_arguments(cls, args):
        return cls(args.tiny_scale) if args.tiny else None

    def options(self):
        return {"scale": self.scale}

    def case_state(self, case, tasks, config):
        if case.case_id == "skip":
            return None
        return Total(self.scale * sum(int(np.count_nonzero(t.pred)) for t in tasks))

    def case_columns(self, state, config):
        return {"tiny_total": state.value}

    def fit(self, states, rows, config):
        self.fit_calls.append((list(states), [r["case"] for r in rows]))
        values = [s.value for s in states.values()]
        return {"mean": float(np.mean(values)) if values else None}

    def summarize(self, states, rows, artifact, config):
        values = [s.value for s in states.values()]
        return TinySummary(len(values), float(np.mean(values)) if values else math.nan,
                           {c: s.value for c, s in states.items()})


class Other(Tiny):
    name = "other_tiny"
    title = "Other tiny product"

    @classmethod
    def add_arguments(cls, group) -> None:
        group.add_argument("--other-tiny", action="store_true")

    @classmethod
    def from_arguments(cls, args):
        return cls() if args.other_tiny else None

    def summarize(self, states, rows, artifact, config):
        return None  # no block


@pytest.fixture
def products():
    register_product(Tiny)
    register_product(Other)
    yield Tiny, Other
    unregister_product(Tiny.name)
    unregister_product(Other.name)


def _mine() -> list[type]:
    return [c for c in registered_products() if c in (Tiny, Other)]


# --- registry ----------------------------------------------------------------------------------------------------
def test_register_returns_the_class_and_finds_it_by_name(products):
    assert product_type("tiny") is Tiny and product_type("other_tiny") is Other
    assert _mine() == [Tiny, Other]  # registration order
    assert product_type("no_such_product") is None


def test_registration_order_and_unregister(products):
    unregister_product("tiny")
    assert product_type("tiny") is None and _mine() == [Other]
    register_product(Tiny)
    assert _mine() == [Other, Tiny]
    register_product(Other)  # again under its name: it replaces the earlier entry, in its place
    assert _mine() == [Other, Tiny]
    unregister_product("never_registered")  # nothing happens
    assert _mine() == [Other, Tiny]


def test_unregistered_after_the_fixture():
    assert product_type("tiny") is None and product_type("other_tiny") is None


@pytest.mark.parametrize("name", sorted(RESERVED_NAMES))
def test_reserved_names_are_refused(name):
    cls = type("Reserved", (CohortProduct,), {"name": name, "title": "Reserved"})
    with pytest.raises(ValueError, match="of the evaluation itself"):
        register_product(cls)
    assert product_type(name) is None


def test_the_reserved_names_are_the_evaluations_own_keys():
    for key in ("n_cases", "calibration", "triage", "config", "products", "warnings"):
        assert key in RESERVED_NAMES
    # the masks with a guarantee and the referral rule are products: their summary key is the product's name
    for name in ("conformal", "risk_control"):
        assert name not in RESERVED_NAMES and product_type(name) is not None


def test_the_builtin_products_are_registered_on_the_first_lookup():
    from monai_unc.products import ConformalMasks

    assert ConformalMasks in registered_products() and product_type("conformal") is ConformalMasks
    assert ConformalMasks.artifact_file == "conformal_rule.json"


@pytest.mark.parametrize(("file", "owner"), [("conformal_rule.json", "ConformalMasks"),
                                             ("referral_rule.json", "RiskControl")])
def test_a_second_product_may_not_take_another_ones_artifact_file(file, owner):
    cls = type("Thief", (CohortProduct,), {"name": "thief", "title": "Thief", "artifact_file": file})
    with pytest.raises(ValueError, match=f"artifact file of product {owner}"):
        register_product(cls)
    assert product_type("thief") is None


@pytest.mark.parametrize(("command", "table", "words"), [
    ("evaluate", None, "command of the package itself"), ("evaluation", None, "command of the package itself"),
    ("conformal", None, "command of product ConformalMasks"), ("Apply", None, "lower-case command name"),
    ("apply masks", None, "lower-case command name"), ("-x", None, "lower-case command name"),
    (3, None, "lower-case command name"), ("apply-masks", "../x.csv", "applied_table"),
    ("apply-masks", "x.json", "applied_table"), ("apply-masks", 7, "applied_table")])
def test_a_products_command_must_be_a_name_of_its_own(command, table, words):
    cls = type("Cmd", (CohortProduct,), {"name": "cmd", "title": "Cmd", "command": command, "applied_table": table})
    with pytest.raises(ValueError, match=words):
        register_product(cls)
    assert product_type("cmd") is None
    ok = type("Cmd", (CohortProduct,), {"name": "cmd", "title": "Cmd", "command": "apply-masks",
                                         "applied_table": "masks.csv"})
    try:
        assert register_product(ok) is ok and command_product("apply-masks") is ok
    finally:
        unregister_product("cmd")
    assert command_product("apply-masks") is None


@pytest.mark.parametrize("name", ["", "volume-error", "1st", "_private", "a b", "x.y", None, 3])
def test_non_identifier_names_are_refused(name):
    cls = type("Bad", (CohortProduct,), {"name": name, "title": "Bad"})
    with pytest.raises(ValueError, match="identifier"):
        register_product(cls)


@pytest.mark.parametrize("title", ["", None])
def test_a_product_without_title_is_refused(title):
    cls = type("Untitled", (CohortProduct,), {"name": "untitled", "title": title})
    with pytest.raises(ValueError, match="title"):
        register_product(cls)
    assert product_type("untitled") is None


@pytest.mark.parametrize("obj", [Total, object, "tiny", None])
def test_a_non_subclass_is_refused(obj):
    with pytest.raises(TypeError, match="subclass of CohortProduct"):
        register_product(obj)


def test_an_instance_is_refused():
    with pytest.raises(TypeError, match="subclass of CohortProduct"):
        register_product(Tiny())


# --- command line ------------------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    for cls in registered_products():
        cls.add_arguments(parser.add_argument_group(cls.title, cls.description))
    return parser


def test_products_from_arguments(products):
    parser = _parser()
    assert [p for p in products_from_arguments(parser.parse_args([])) if isinstance(p, Tiny)] == []
    got = products_from_arguments(parser.parse_args(["--tiny", "--tiny-scale", "2.5"]))
    assert [type(p) for p in got] == [Tiny] and got[0].options() == {"scale": 2.5}
    got = products_from_arguments(parser.parse_args(["--other-tiny", "--tiny"]))
    assert [type(p) for p in got] == [Tiny, Other]  # registration order, not the order of the options
    help_text = parser.format_help()
    assert "Tiny product" in help_text and "A product of the tests." in help_text and "--tiny-scale" in help_text


def test_from_arguments_must_return_a_product(products):
    class Wrong(Tiny):
        name, title = "wrong_tiny", "Wrong"

        @classmethod
        def add_arguments(cls, group) -> None:
            pass

        @classmethod
        def from_arguments(cls, args):
            return {"not": "a product"}

    register_product(Wrong)
    try:
        with pytest.raises(TypeError, match="Wrong.from_arguments"):
            products_from_arguments(_parser().parse_args([]))
    finally:
        unregister_product(Wrong.name)


# --- base class defaults -----------------------------------------------------------------------------------------
def test_the_base_class_does_nothing_by_default(tmp_path):
    class Bare(CohortProduct):
        name, title = "bare", "Bare"

    p = Bare()
    parser = argparse.ArgumentParser()
    Bare.add_arguments(parser.add_argument_group("Bare"))
    assert parser.parse_args([]) == argparse.Namespace()  # no options added
    assert Bare.from_arguments(argparse.Namespace()) is None
    assert p.options() == {}
    assert p.check(["a"], EvaluationConfig()) is None
    assert p.case_state(None, [], EvaluationConfig()) is None
    assert p.case_columns(Total(1), EvaluationConfig()) == {}
    assert p.fit({"a": Total(1)}, [{"case": "a"}], EvaluationConfig()) is None
    assert p.summarize({"a": Total(1)}, [{"case": "a"}], None, EvaluationConfig()) is None
    with pytest.raises(NotImplementedError, match="'bare'"):
        p.apply(None, None)
    assert Bare.summary_lines({"x": 1}) == []
    assert Bare.report_section({"x": 1}) is None
    assert p.artifact_path(tmp_path) == tmp_path / "bare.json"
    Bare.artifact_file = "rule/bare_rule.json"
    assert p.artifact_path(str(tmp_path)) == tmp_path / "rule" / "bare_rule.json"
    assert (CohortProduct.name, CohortProduct.title, CohortProduct.artifact_file) == ("", "", None)


def test_report_section_defaults():
    s = ReportSection("T")
    assert (s.paragraphs, s.cards, s.table_head, s.table_rows) == ((), (), (), ())
    with pytest.raises(AttributeError):
        s.title = "other"  # frozen


# --- artifact files ----------------------------------------------------------------------------------------------
def _by_hand_digest(doc: dict) -> str:
    body = {k: v for k, v in doc.items() if k not in ("digest", "signature")}  # the signature signs the digest
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_write_and_read_an_artifact(tmp_path):
    path = write_artifact(tmp_path / "tiny.json", Tiny(2.0), {"mean": np.float64(1.5), "nan": math.nan},
                          ["a", "b"])
    assert path == tmp_path / "tiny.json"
    doc = json.loads(path.read_text())
    assert doc == {"format": ARTIFACT_FORMAT, "format_version": 1, "monai_unc_version": __version__,
                   "product": "tiny", "options": {"scale": 2.0}, "calibration_cases": ["a", "b"],
                   "artifact": {"mean": 1.5, "nan": None}, "digest": doc["digest"], "signature": doc["signature"]}
    assert doc["digest"] == _by_hand_digest(doc) == artifact_digest(doc)
    assert doc["signature"]["algorithm"] == "ed25519"  # signed with the user's key, as the rules are
    assert read_artifact(path) == doc
    assert read_artifact(str(path), "tiny")["artifact"] == {"mean": 1.5, "nan": None}
    assert not list(tmp_path.glob("*.tmp*")) and sorted(p.name for p in tmp_path.iterdir()) == ["tiny.json"]


def test_an_edited_artifact_is_refused(tmp_path):
    path = write_artifact(tmp_path / "tiny.json", Tiny(), {"mean": 1.5}, ["a"])
    doc = json.loads(path.read_text())
    doc["artifact"]["mean"] = 0.0
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="does not match its digest"):
        read_artifact(path)
    doc = json.loads(path.read_text())
    doc["calibration_cases"] = ["a", "b"]
    doc["digest"] = "0" * 64
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="digest"):
        read_artifact(path, "tiny")


def test_another_products_artifact_is_refused(tmp_path):
    path = write_artifact(tmp_path / "tiny.json", Tiny(), {"mean": 1.5}, ["a"])
    with pytest.raises(ValueError, match="product 'tiny', not 'other_tiny'"):
        read_artifact(path, "other_tiny")


@pytest.mark.parametrize("edit, match", [
    ({"format": "monai-unc conformal rule"}, "is not a monai-unc product artifact file"),
    ({"format_version": 2}, "format_version 2"),
    ({"format_version": None}, "format_version None"),
])
def test_a_wrong_format_or_version_is_refused(tmp_path, edit, match):
    path = write_artifact(tmp_path / "tiny.json", Tiny(), {"mean": 1.5}, ["a"])
    doc = {**json.loads(path.read_text()), **edit}
    doc["digest"] = artifact_digest(doc)  # a consistent digest: the format alone is refused
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=match):
        read_artifact(path, "tiny")


@pytest.mark.parametrize("text", ["not json", "[1, 2]", "null", ""])
def test_a_file_that_is_not_an_artifact_is_refused(tmp_path, text):
    path = tmp_path / "tiny.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="path: "):
        read_artifact(path)


def test_undecodable_bytes_are_refused(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match="not readable JSON"):
        read_artifact(path)


def test_a_missing_artifact_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no artifact file"):
        read_artifact(tmp_path / "missing.json")
    (tmp_path / "folder.json").mkdir()
    with pytest.raises(IsADirectoryError, match="artifact file .*folder.json is a folder, not a file"):
        read_artifact(tmp_path / "folder.json")


def test_write_artifacts_removes_a_stale_file(tmp_path):
    tiny, other = Tiny(), Other()
    config = EvaluationConfig(products=[tiny, other], calibration_cases=["b"])
    config.validate()
    assert artifact_paths(tmp_path, config) == {"tiny": tmp_path / "tiny.json",
                                                "other_tiny": tmp_path / "other_tiny.json"}
    (tmp_path / "other_tiny.json").write_text("an earlier run's artifact")
    written = write_artifacts(tmp_path, config, {"tiny": {"mean": 2.0}, "other_tiny": None}, ["a", "b", "c"])
    assert written == {"tiny": tmp_path / "tiny.json"}
    assert not (tmp_path / "other_tiny.json").exists()
    assert read_artifact(tmp_path / "tiny.json", "tiny")["calibration_cases"] == ["b"]


# --- per case, fit and summary -----------------------------------------------------------------------------------
def _case(cid: str):
    return SimpleNamespace(case_id=cid)


def _tasks(*counts: int):
    return [SimpleNamespace(pred=np.arange(10) < n) for n in counts]


def test_product_case_states_and_columns():
    config = EvaluationConfig(products=[Tiny(3.0), Other()])
    config.validate()
    with pytest.raises(ValueError, match="clash"):  # two products may not write the same column
        product_case_states(_case("a"), _tasks(2, 5), config)
    config = EvaluationConfig(products=[Tiny(3.0)])
    config.validate()
    states, columns = product_case_states(_case("a"), _tasks(2, 5), config)
    assert list(states) == ["tiny"] and states["tiny"].value == 3.0 * 7
    assert columns == {"tiny_total": 21.0}
    assert product_case_states(_case("skip"), _tasks(2), config) == ({}, {})
    assert product_case_states(_case("a"), _tasks(2), EvaluationConfig()) == ({}, {})


def _cohort(values: dict[str, float]) -> tuple[dict, list[dict]]:
    per_case = {c: {"tiny": Total(v)} for c, v in values.items()}
    rows = [{"case": c, "dice": 0.5} for c in sorted(values)]
    return per_case, rows


def test_product_states_of_in_case_id_order():
    per_case = {"c": {"tiny": Total(3)}, "a": {"tiny": Total(1)}, "b": {"other_tiny": Total(2)}}
    got = product_states_of(per_case, Tiny())
    assert list(got) == ["a", "c"] and got["a"] is not per_case["a"]["tiny"]  # copies: a fit may merge them
    assert got["a"].value == per_case["a"]["tiny"].value
    assert list(product_states_of(per_case, Tiny(), ["c", "b"])) == ["c"]
    assert product_states_of(per_case, Tiny(), []) == {}


def test_fit_on_every_case_without_calibration_cases():
    tiny = Tiny()
    per_case, rows = _cohort({"b": 4.0, "a": 2.0, "c": 9.0})
    config = EvaluationConfig(products=[tiny])
    config.validate()
    fitted = fit_products(per_case, rows, config)
    assert fitted == {"tiny": {"mean": 5.0}}
    assert tiny.fit_calls == [(["a", "b", "c"], ["a", "b", "c"])]


def test_fit_on_the_calibration_cases_and_summary_on_all():
    tiny, other = Tiny(), Other()
    per_case, rows = _cohort({"a": 2.0, "b": 4.0, "c": 9.0, "d": 1.0})
    config = EvaluationConfig(products=[tiny, other], calibration_cases=["d", "b"])
    config.validate()
    fitted = fit_products(per_case, rows, config)
    assert fitted["tiny"] == {"mean": 2.5}  # (4 + 1) / 2
    assert tiny.fit_calls == [(["b", "d"], ["b", "d"])]
    assert other.fit_calls == [([], ["b", "d"])]  # no states of its own: fitted on nothing, rows still given
    summaries = product_summaries(per_case, rows, config, fitted)
    assert list(summaries) == ["tiny"]  # a product without a block is left out
    assert summaries["tiny"] == {"n_cases": 4, "mean": 4.0, "per_case": {"a": 2.0, "b": 4.0, "c": 9.0, "d": 1.0}}
    json.dumps(summaries, allow_nan=False)


def test_fit_refuses_unknown_calibration_cases():
    per_case, rows = _cohort({"a": 2.0})
    config = EvaluationConfig(products=[Tiny()], calibration_cases=["zz"])
    config.validate()
    with pytest.raises(ValueError, match="calibration_cases"):
        fit_products(per_case, rows, config)


def test_a_summary_without_cases_has_a_null_mean():
    config = EvaluationConfig(products=[Tiny()])
    config.validate()
    assert product_summaries({}, [], config, {}) == {"tiny": {"n_cases": 0, "mean": None, "per_case": {}}}


def test_summary_block():
    assert summary_block(TinySummary(2, math.nan, {"a": math.inf, "b": 1.0})) == {
        "n_cases": 2, "mean": None, "per_case": {"a": None, "b": 1.0}}
    assert summary_block({"x": np.float32(0.5), "y": np.arange(3), "z": (1, math.nan)}) == {
        "x": 0.5, "y": [0, 1, 2], "z": [1, None]}
    assert summary_block(TinySummary) is TinySummary  # a class is not an instance: left as it is
    assert summary_block(None) is None


# --- EvaluationConfig(products=...) ------------------------------------------------------------------------------
def test_config_products_become_a_tuple():
    a, b = Tiny(), Other()
    config = EvaluationConfig(products=[a, b])
    config.validate()
    assert config.products == (a, b)
    assert config.product_options() == {"tiny": {"scale": 1.0}, "other_tiny": {"scale": 1.0}}


def test_config_refuses_two_products_of_one_name():
    with pytest.raises(ValueError, match="share a name"):
        EvaluationConfig(products=[Tiny(), Tiny(2.0)]).validate()


@pytest.mark.parametrize("bad", [[Tiny(), "tiny"], [Tiny, ], [None], "tiny"])
def test_config_refuses_objects_that_are_not_products(bad):
    with pytest.raises(TypeError, match="not a CohortProduct instance"):
        EvaluationConfig(products=bad).validate()


@pytest.mark.parametrize("bad", [Tiny(), {"tiny": Tiny()}, (p for p in [Tiny()]), 3])
def test_config_refuses_a_single_product_or_a_non_sequence(bad):
    with pytest.raises(TypeError, match="products must be a sequence"):
        EvaluationConfig(products=bad).validate()


def test_to_json_carries_products_only_when_there_are_some():
    plain = EvaluationConfig()
    plain.validate()
    assert "products" not in plain.to_json()
    empty = EvaluationConfig(products=[])
    empty.validate()
    assert "products" not in empty.to_json() and empty.to_json() == plain.to_json()
    config = EvaluationConfig(products=[Tiny(0.5)])
    config.validate()
    doc = config.to_json()
    assert doc["products"] == {"tiny": {"scale": 0.5}}
    assert {k: v for k, v in doc.items() if k != "products"} == plain.to_json()
    json.dumps(doc)
