"""Hostile tests of the cohort-product protocol, the state protocol and the evaluation's handling of products.

The tests pin what a review of the protocols found (each was a bug, fixed: names and artifact files that clash with
the evaluation's own, column clashes, failing fits that left an earlier run's outputs, live states handed to a fit,
digests of integer keys, resume mixing product order or class, unreadable states, shared memory after a reduction,
a broken plug-in breaking the command line, the report of a product not imported) and cover behaviours not already
covered by tests/test_state.py, tests/test_product.py and tests/evaluation/test_products_toy.py.
"""

from __future__ import annotations

import csv
import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, load_evaluation, resummarize, run_evaluate
from monai_unc.evaluation.conformal import CONFORMAL_RULE_FILE
from monai_unc.evaluation.products import read_artifact, write_artifact
from monai_unc.evaluation.triage.rule import RULE_FILE
from monai_unc.product import CohortProduct, ReportSection, register_product, unregister_product
from monai_unc.state import pack_states, register_state_type, unpack_states
from tests._states import sign_case_state

CALLS: list[str] = []  # case ids whose product state was computed


@register_state_type("hostile.count")
class Count:
    """A foreground voxel count and a number of cases; merging adds both (in place, as the protocol says)."""

    def __init__(self, n: float, cases: int = 1) -> None:
        self.n, self.cases = float(n), int(cases)

    def merge(self, other: Count) -> Count:
        self.n += other.n
        self.cases += other.cases
        return self

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"n": np.float64(self.n), "cases": np.int64(self.cases)}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> Count:
        return cls(float(state["n"]), int(state["cases"]))


class Fg(CohortProduct):
    """A configurable toy product: the foreground voxel count per case; fit = the mean count."""

    name = "hostile_fg"
    title = "Foreground"

    def __init__(self, tag: str = "a", *, columns: Any = None, fail_at: Sequence[str] = (),
                 none_at: Sequence[str] = (), fit_error: BaseException | None = None,
                 summarize_error: BaseException | None = None, fit_merges: bool = False,
                 seen: dict | None = None) -> None:
        self.tag = tag
        self.columns = columns
        self.fail_at, self.none_at = set(fail_at), set(none_at)
        self.fit_error, self.summarize_error = fit_error, summarize_error
        self.fit_merges = fit_merges
        self.seen = {} if seen is None else seen

    def options(self) -> dict[str, Any]:
        return {"tag": self.tag}

    def case_state(self, case: Any, tasks: Sequence[Any], config: Any) -> Count | None:
        if case.case_id in self.fail_at:
            raise RuntimeError(f"product broke on {case.case_id}")
        if case.case_id in self.none_at:
            return None
        CALLS.append(case.case_id)
        return Count(np.count_nonzero(tasks[0].pred))

    def case_columns(self, state: Count, config: Any) -> dict[str, float]:
        return {"fg_count": state.n} if self.columns is None else dict(self.columns)

    def fit(self, states: Mapping[str, Count], rows: Sequence[Mapping[str, Any]], config: Any) -> dict:
        self.seen["fit_states"] = {k: v.n for k, v in states.items()}
        self.seen["fit_rows"] = [r["case"] for r in rows]
        if self.fit_error is not None:
            raise self.fit_error
        if self.fit_merges:  # the natural use of a mergeable state: add the cases up (merge is in place)
            total = None
            for s in states.values():
                total = s if total is None else total.merge(s)
            return {"mean": total.n / total.cases}
        return {"mean": float(np.mean([s.n for s in states.values()]))}

    def summarize(self, states: Mapping[str, Count], rows: Sequence[Mapping[str, Any]], artifact: Any,
                  config: Any) -> dict:
        self.seen["summary_states"] = {k: v.n for k, v in states.items()}
        if self.summarize_error is not None:
            raise self.summarize_error
        return {"n_cases": len(states), "mean": artifact["mean"],
                "per_case": {k: v.n for k, v in states.items()}}


class Fg2(Fg):
    name = "hostile_fg2"
    title = "Foreground again"


@pytest.fixture(autouse=True)
def registered():
    register_product(Fg)
    register_product(Fg2)
    CALLS.clear()
    yield
    unregister_product(Fg.name)
    unregister_product(Fg2.name)


@pytest.fixture(scope="module")
def cohort(tmp_path_factory) -> dict[str, Path]:
    return write_toy_cohort(tmp_path_factory.mktemp("hostile"), n_cases=4, shape=(10, 10, 10))


def _ids(cohort: dict[str, Path]) -> list[str]:
    return sorted(p.name.split(".")[0] for p in cohort["labels"].iterdir())


def _evaluate(cohort: dict[str, Path], out: Path, *products: CohortProduct, **options: Any):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return run_evaluate(cohort["labels"], cohort["predictions"], out,
                            EvaluationConfig(products=list(products), **options), progress=False,
                            on_failure=lambda f: None)


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# --- bugs --------------------------------------------------------------------------------------------------------
def test_a_product_named_summary_cannot_overwrite_summary_json(cohort, tmp_path):
    class Clobber(Fg):
        name = "summary"
        title = "Clobber"

    try:
        register_product(Clobber)
    except ValueError:
        return  # refused: fine
    try:
        _evaluate(cohort, tmp_path / "ev", Clobber())
        summary = json.loads((tmp_path / "ev" / "summary.json").read_text())
        assert "n_cases" in summary and "dice" in summary  # still the evaluation's summary
    finally:
        unregister_product("summary")


@pytest.mark.parametrize("filename", [RULE_FILE, CONFORMAL_RULE_FILE])
def test_a_product_artifact_cannot_take_the_place_of_a_rule_file(filename, tmp_path):
    class Clash(Fg):
        name = filename.removesuffix(".json")
        title = "Clash"

    try:
        register_product(Clash)
    except ValueError:
        return
    try:
        assert Clash().artifact_path(tmp_path) != tmp_path / filename
    finally:
        unregister_product(Clash.name)


@pytest.mark.parametrize("column", ["voxels", "spacing"])
def test_a_product_column_named_like_a_late_evaluation_column_is_refused(column, cohort, tmp_path):
    with pytest.raises(ValueError, match="clash"):
        _evaluate(cohort, tmp_path / "ev", Fg(columns={column: -1.0}))


def test_two_products_with_the_same_column_are_refused(cohort, tmp_path):
    with pytest.raises(ValueError, match="clash"):
        _evaluate(cohort, tmp_path / "ev", Fg(columns={"shared": 1.0}), Fg2(columns={"shared": 2.0}))


class _Unwritable(Fg):
    def fit(self, states, rows, config):
        return {"mean": 1.0, "extra": object()}  # not JSON: write_artifact fails after summary.json is written


@pytest.mark.parametrize("where", ["fit", "summarize", "artifact"])
def test_a_failing_fit_or_summary_leaves_no_earlier_outputs(where, cohort, tmp_path):
    out = tmp_path / "ev"
    _evaluate(cohort, out, Fg("a"))
    assert (out / "summary.json").is_file() and (out / "hostile_fg.json").is_file()
    bad = {"fit": Fg("b", fit_error=RuntimeError("fit broke")),
           "summarize": Fg("b", summarize_error=ValueError("summary broke")), "artifact": _Unwritable("b")}[where]
    with pytest.raises((RuntimeError, ValueError, TypeError)):
        _evaluate(cohort, out, bad)
    # the run failed: no earlier run's numbers (fitted with tag "a") may pass for this one
    assert not (out / "hostile_fg.json").exists()
    assert not (out / "summary.json").exists()


def test_a_fit_that_merges_states_does_not_change_the_saved_states(cohort, tmp_path):
    seen: dict = {}
    _evaluate(cohort, tmp_path / "ev", Fg(fit_merges=True, seen=seen))
    rows = {r["case"]: float(r["fg_count"]) for r in _rows(tmp_path / "ev" / "metrics.csv")}
    assert seen["summary_states"] == rows  # the first case's state is the cohort's sum
    state, summary = load_evaluation(tmp_path / "ev")
    assert {c: s["hostile_fg"].n for c, s in state.product_states.items()} == rows
    assert summary["hostile_fg"]["per_case"] == rows


@pytest.mark.parametrize("where", ["artifact", "options"])
def test_an_artifact_with_integer_keys_reads_back(where, tmp_path):
    class Labels(CohortProduct):
        name, title = "labels", "Labels"

        def options(self):
            return {2: "x", 10: "y"} if where == "options" else {}

    artifact = {2: 0.1, 10: 0.5} if where == "artifact" else {"a": 1}
    path = write_artifact(tmp_path / "labels.json", Labels(), artifact, ["a"])
    assert read_artifact(path, "labels")["product"] == "labels"


def test_resummarize_keeps_the_block_of_a_product_not_imported(cohort, tmp_path):
    _evaluate(cohort, tmp_path / "ev", Fg())
    state, saved = load_evaluation(tmp_path / "ev")
    assert "hostile_fg" in saved
    unregister_product(Fg.name)  # the report runs in a process that does not import the product
    again = resummarize(state, saved, budget=0.5)
    assert again["hostile_fg"] == saved["hostile_fg"]
    assert not any("hostile_fg" in w for w in again["warnings"])  # the same calibration cases: nothing to say


def test_resummarize_with_other_calibration_cases_says_the_products_blocks_are_evaluates(cohort, tmp_path):
    """The report's --calibration-cases refits the risk control but not the products: the summary says so."""
    _evaluate(cohort, tmp_path / "ev", Fg())
    state, saved = load_evaluation(tmp_path / "ev")
    ids = sorted(str(r["case"]) for r in state.rows)
    again = resummarize(state, saved, calibration_cases=ids[:-1])
    assert again["hostile_fg"] == saved["hostile_fg"]
    (note,) = [w for w in again["warnings"] if "hostile_fg" in w]
    assert f"its own calibration cases (all), not on the {len(ids) - 1} calibration case(s)" in note
    same = resummarize(state, saved, calibration_cases=list(reversed(ids)))  # every case again, in another order
    assert not any("hostile_fg" in w for w in same["warnings"])


def test_a_product_no_longer_asked_for_leaves_no_artifact(cohort, tmp_path):
    out = tmp_path / "ev"
    _evaluate(cohort, out, Fg())
    assert (out / "hostile_fg.json").is_file()
    _evaluate(cohort, out)  # same folder, the product registered but not configured
    assert "hostile_fg" not in json.loads((out / "summary.json").read_text())
    assert not (out / "hostile_fg.json").exists()


class _ObjectState:
    def merge(self, other):
        return self

    def state_dict(self):
        return {"meta": np.array([{"a": 1}], dtype=object)}

    @classmethod
    def from_state_dict(cls, state):
        return cls()


def test_pack_states_refuses_object_arrays():
    register_state_type("hostile.object")(_ObjectState)
    with pytest.raises(ValueError):
        pack_states({"x": _ObjectState()})


# --- behaviours that are fine (coverage the existing tests lack) -------------------------------------------------
def test_a_failing_case_is_reported_and_the_rerun_resumes_the_others(cohort, tmp_path):
    from monai_unc.engine import CasesFailed

    ids = _ids(cohort)
    out = tmp_path / "ev"
    with pytest.raises(CasesFailed) as e:
        _evaluate(cohort, out, Fg(fail_at=[ids[1]]))
    assert [f.case for f in e.value.failures] == [ids[1]] and "product broke" in str(e.value)
    doc = json.loads((out / "failures.json").read_text())
    assert ids[1] in json.dumps(doc)
    assert not (out / "summary.json").exists() and not (out / "hostile_fg.json").exists()
    assert CALLS == [ids[0], *ids[2:]]
    CALLS.clear()
    _evaluate(cohort, out, Fg())
    assert CALLS == [ids[1]]  # only the failed case again
    assert not (out / "failures.json").exists()


def test_none_states_calibration_cases_and_resume_equal_a_fresh_run(cohort, tmp_path):
    ids = _ids(cohort)
    seen: dict = {}
    cal = ids[:3]
    _evaluate(cohort, tmp_path / "ev", Fg(none_at=[ids[0]], seen=seen), calibration_cases=cal)
    assert list(seen["fit_states"]) == cal[1:]  # calibration cases with a state only
    assert seen["fit_rows"] == cal  # the rows of every calibration case
    assert list(seen["summary_states"]) == ids[1:]  # the summary: every case with a state
    doc = read_artifact(tmp_path / "ev" / "hostile_fg.json", "hostile_fg")
    assert doc["calibration_cases"] == cal
    assert doc["artifact"]["mean"] == pytest.approx(np.mean(list(seen["fit_states"].values())))
    rows = _rows(tmp_path / "ev" / "metrics.csv")
    assert rows[0]["fg_count"] == "" and all(r["fg_count"] for r in rows[1:])
    # resumed (every case from its saved state) gives the same files as computed
    CALLS.clear()
    _evaluate(cohort, tmp_path / "ev", Fg(none_at=[ids[0]]), calibration_cases=cal)
    assert CALLS == []
    _evaluate(cohort, tmp_path / "fresh", Fg(none_at=[ids[0]]), calibration_cases=cal)
    for name in ("metrics.csv", "summary.json", "hostile_fg.json"):
        assert (tmp_path / "ev" / name).read_text() == (tmp_path / "fresh" / name).read_text()


def test_adding_a_product_recomputes_and_removing_it_drops_its_state(cohort, tmp_path):
    ids = _ids(cohort)
    out = tmp_path / "ev"
    _evaluate(cohort, out)
    assert CALLS == []
    _evaluate(cohort, out, Fg())
    assert CALLS == ids  # the product is new: every case again
    assert (out / "state" / "products.npz").is_file()
    CALLS.clear()
    _evaluate(cohort, out, Fg(), Fg2(columns={"fg_count_2": 1.0}))
    assert sorted(CALLS) == sorted(ids * 2)  # another product: again (one call per product and case)
    _evaluate(cohort, out)
    assert not (out / "state" / "products.npz").exists()
    state, _ = load_evaluation(out)
    assert state.product_states == {}


def test_tampered_case_state_is_recomputed_never_executed(cohort, tmp_path):
    ids = _ids(cohort)
    out = tmp_path / "ev"
    _evaluate(cohort, out, Fg())
    fresh = (out / "metrics.csv").read_text()
    cases = out / "state" / "cases"
    # 1. an unregistered type name (as if naming a class to import) 2. a pickled object array 3. garbage bytes
    with np.load(cases / f"{ids[0]}.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["product.hostile_fg/__type__"] = np.array("os.system")
    np.savez(cases / f"{ids[0]}.npz", **arrays)
    sign_case_state(cases / f"{ids[0]}.npz")  # the digests match: each is refused for its content
    with np.load(cases / f"{ids[1]}.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["product.hostile_fg/n"] = np.array([{"x": 1}], dtype=object)
    np.savez(cases / f"{ids[1]}.npz", **arrays)
    sign_case_state(cases / f"{ids[1]}.npz")
    (cases / f"{ids[2]}.npz").write_bytes(b"not a zip")
    sign_case_state(cases / f"{ids[2]}.npz")
    CALLS.clear()
    _evaluate(cohort, out, Fg())
    assert CALLS == ids[:3]  # recomputed, the fourth resumed
    assert (out / "metrics.csv").read_text() == fresh


def test_tampered_products_npz_is_never_executed(cohort, tmp_path):
    """A type name in ``products.npz`` is looked up in the registry, never imported: an unknown one leaves the product
    states out (the report reads the products' blocks of summary.json); pickled objects are refused."""
    out = tmp_path / "ev"
    _evaluate(cohort, out, Fg())
    path = out / "state" / "products.npz"
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["0.0.__type__"] = np.array("builtins.eval")
    np.savez(path, **arrays)
    state, summary = load_evaluation(out)
    assert state.product_states == {} and "hostile_fg" in summary
    np.savez(path, **{"__names__": np.array([{"x": 1}], dtype=object)})
    with pytest.raises(ValueError):
        load_evaluation(out)


def test_the_record_survives_a_pickle_round_trip():
    """What the torchrun gather sends: pickled (doc, arrays) of a result with a product state."""
    import pickle

    from monai_unc.engine.records import record_gather_hooks
    from monai_unc.evaluation import CaseResult

    pack, unpack = record_gather_hooks(CaseResult)
    result = CaseResult({"case": "a", "fg_count": 3.0}, None, states={"hostile_fg": Count(3.0)})
    back = unpack(pickle.loads(pickle.dumps(pack(result))))
    assert back.row == result.row and back.states["hostile_fg"].n == 3.0


def test_state_names_and_keys_with_separators_round_trip():
    """Keys with '/', '.' and digits inside a state, and a nested group, come back unchanged."""
    from monai_unc.state import StateGroup

    @register_state_type("hostile.keys")
    class Keys:
        def __init__(self, d):
            self.d = {k: np.asarray(v) for k, v in d.items()}

        def merge(self, other):
            return self

        def state_dict(self):
            return dict(self.d)

        @classmethod
        def from_state_dict(cls, state):
            return cls(state)

    s = Keys({"a/b": [1], "0.x": [2], "1.__type__": [3]})
    group = StateGroup({f"m{i}": StateGroup({"k": Keys({"v": [i]})}) for i in range(12)})
    back = unpack_states(pack_states({"s": s, "g": group}))
    assert {k: v.tolist() for k, v in back["s"].d.items()} == {"a/b": [1], "0.x": [2], "1.__type__": [3]}
    assert [int(back["g"][f"m{i}"]["k"].d["v"][0]) for i in range(12)] == list(range(12))


def test_report_section_escapes_every_string():
    from monai_unc.report.html import product_section

    x = "<script>alert(1)</script>"
    html = str(product_section(ReportSection(x, [x], cards=[(x, x)], table_head=[x, x], table_rows=[[x, 1.5]]),
                               "k<y>"))
    # seven places, and the scrolling table box's aria-label (its title; hostile review 60's keyboard access)
    assert "<script" not in html and html.count("&lt;script&gt;") == 8
    assert 'aria-label="&lt;script&gt;alert(1)&lt;/script&gt;"' in html
    assert 'id="product-k_y"' in html


def test_a_product_option_clash_does_not_break_the_command_line():
    from monai_unc.cli import main

    class BadOption(CohortProduct):
        name, title = "bad_option", "Bad option"

        @classmethod
        def add_arguments(cls, group):
            group.add_argument("--output", help="clashes with evaluate's --output")

    register_product(BadOption)
    try:
        try:
            main(["report", "--help"])  # another command: should not care about evaluate's products
        except SystemExit as e:
            assert e.code == 0
        except Exception as e:  # or a clean refusal that names the product
            assert "bad_option" in str(e) or "BadOption" in str(e), repr(e)
    finally:
        unregister_product(BadOption.name)


def test_product_order_resumed_equals_fresh(cohort, tmp_path):
    _evaluate(cohort, tmp_path / "ev", Fg(), Fg2(columns={"fg2": 2.0}))
    _evaluate(cohort, tmp_path / "ev", Fg2(columns={"fg2": 2.0}), Fg())  # resumed
    _evaluate(cohort, tmp_path / "fresh", Fg2(columns={"fg2": 2.0}), Fg())
    for name in ("metrics.csv", "summary.json"):
        assert (tmp_path / "ev" / name).read_text() == (tmp_path / "fresh" / name).read_text(), name


def test_another_product_class_under_the_same_name_recomputes(cohort, tmp_path):
    @register_state_type("hostile.background")
    class Background(Count):
        pass

    class FgV2(Fg):  # same name and options, other computation: the background count
        def case_state(self, case, tasks, config):
            CALLS.append(case.case_id)
            return Background(np.count_nonzero(tasks[0].pred == 0))

    _evaluate(cohort, tmp_path / "ev", Fg())
    register_product(FgV2)
    CALLS.clear()
    _evaluate(cohort, tmp_path / "ev", FgV2())
    _evaluate(cohort, tmp_path / "fresh", FgV2())
    assert (tmp_path / "ev" / "metrics.csv").read_text() == (tmp_path / "fresh" / "metrics.csv").read_text()


@register_state_type("hostile.indexed")
class Indexed(Count):
    """Count stored as a 1-element array; reading it indexes the array (an IndexError on a 0-d one)."""

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"n": np.array([self.n]), "cases": np.array([self.cases])}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> Indexed:
        return cls(float(state["n"][0]), int(state["cases"][0]))


class FgIndexed(Fg):
    name = "hostile_idx"
    title = "Indexed"

    def case_state(self, case, tasks, config):
        CALLS.append(case.case_id)
        return Indexed(np.count_nonzero(tasks[0].pred))


def test_a_product_state_that_cannot_be_read_back_is_recomputed(cohort, tmp_path):
    register_product(FgIndexed)
    try:
        ids = _ids(cohort)
        out = tmp_path / "ev"
        _evaluate(cohort, out, FgIndexed())
        path = out / "state" / "cases" / f"{ids[0]}.npz"
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["product.hostile_idx/n"] = np.float64(5.0)  # 0-d: indexing it raises IndexError
        np.savez(path, **arrays)
        sign_case_state(path)  # its digest matches: refused for its content
        CALLS.clear()
        _evaluate(cohort, out, FgIndexed())  # expected: the unreadable case is computed again
        assert CALLS == [ids[0]]
    finally:
        unregister_product(FgIndexed.name)


def test_reduce_state_on_one_process_returns_a_copy():
    import torch

    from monai_unc.engine import DistContext
    from monai_unc.engine.collectives import reduce_state
    from monai_unc.stats import SampleStats

    a = SampleStats().update(torch.tensor([[[0.1], [0.9]]], dtype=torch.float64))
    mean = a.mean.clone()
    out = reduce_state(a, DistContext())
    out.merge(SampleStats().update(torch.tensor([[[0.5], [0.5]]], dtype=torch.float64)))
    assert torch.equal(a.mean, mean)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_pack_states_of_a_gpu_state():
    import torch

    from monai_unc.stats import SampleStats

    stats = SampleStats().update(torch.tensor([[[0.1], [0.9]]], device="cuda"))
    back = unpack_states(pack_states({"s": stats}))["s"]
    assert back.count == 1.0


def test_product_section_ids_are_unique():
    from monai_unc.report.html import product_section

    a = str(product_section(ReportSection("A"), "dose"))
    b = str(product_section(ReportSection("B"), "dose_"))
    assert a.split('id="')[1].split('"')[0] != b.split('id="')[1].split('"')[0]


def test_evaluate_cases_asks_the_products_check_first(cohort):
    from monai_unc.evaluation import evaluate_cases
    from monai_unc.io import match_cases

    class Picky(Fg):
        def check(self, case_ids, config):
            raise ValueError("hostile_fg: this cohort is refused")

    cases = match_cases(cohort["labels"], cohort["predictions"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(ValueError, match="refused"):
            evaluate_cases(cases, EvaluationConfig(products=[Picky()]))
    assert CALLS == []


@pytest.mark.parametrize("text", ["[" * 100000 + "]" * 100000,
                                  '{"format": "monai-unc product artifact", "format_version": 1, '
                                  '"artifact": NaN, "digest": "x"}'])
def test_read_artifact_refuses_a_malformed_file_by_name(text, tmp_path):
    path = tmp_path / "hostile_fg.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="hostile_fg.json"):
        read_artifact(path, "hostile_fg")


def test_a_nan_option_still_resumes(cohort, tmp_path):
    """NaN options: the fingerprint still equals itself after its JSON round trip (json's one NaN object)."""
    _evaluate(cohort, tmp_path / "ev", Fg(float("nan")))
    CALLS.clear()
    _evaluate(cohort, tmp_path / "ev", Fg(float("nan")))
    assert CALLS == []


def test_the_report_reads_an_evaluation_whose_product_is_not_imported(cohort, tmp_path, monkeypatch):
    import monai_unc.state as state_mod
    from monai_unc.workflows.report import run_report

    _evaluate(cohort, tmp_path / "ev", Fg())
    unregister_product(Fg.name)  # as in a fresh process: neither the product nor its state type is known
    monkeypatch.delitem(state_mod._REGISTRY, "hostile.count")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        html = run_report(tmp_path / "ev", cases=0)
    assert html.is_file()


# --- the predictions' records in an --uncertainty folder ---------------------------------------------------------
class _Stop(Exception):
    pass


@pytest.mark.parametrize("entry", ["conformal", "triage --conformal-rule"])
def test_conformal_compares_the_records_of_the_uncertainty_folder(tmp_path, monkeypatch, entry):
    """nnU-Net layout, per-case records in ``--uncertainty``: the rule certified on these very predictions matches
    (it was refused as made otherwise: the records were looked for in ``<predictions>/uncertainty/``)."""
    import nibabel as nib

    from monai_unc.evaluation.conformal import ConformalRuleFile, check_conformal_inputs
    from monai_unc.io.provenance import prediction_fingerprint
    from monai_unc.metrics.conformal import conformal_case_state, fit_conformal_rule
    from monai_unc.workflows import report

    pred, unc = tmp_path / "pred", tmp_path / "unc"
    pred.mkdir()
    unc.mkdir()
    seg = np.zeros((4, 4, 4), np.uint8)
    seg[1:3, 1:3, 1:3] = 1
    nib.save(nib.Nifti1Image(seg, np.eye(4)), pred / "c1.nii.gz")
    p1 = seg.astype(np.float32) * 0.8 + 0.1
    np.savez(pred / "c1.npz", probabilities=np.stack([1 - p1, p1]).transpose(0, 3, 2, 1))
    (pred / "uncertainty_config.json").write_text(json.dumps(
        {"trainer_name": "T", "folds": [0], "uncertainty_sources": ["mcdropout"], "num_samples": 4}))
    (unc / "c1.json").write_text(json.dumps({"num_samples": 8, "mi_meaning": "epistemic"}))
    # the folder as nnunet-predict writes it: the maps beside the records (one without maps is refused: it names
    # no uncertainty)
    nib.save(nib.Nifti1Image(np.full((4, 4, 4), 0.1, np.float32), np.eye(4)), unc / "c1_predictive_entropy.nii.gz")
    probs = np.stack([1 - p1, p1])
    states = [conformal_case_state(probs, seg.astype(int), activation="softmax", side="outer", grid=16)] * 5
    doc = ConformalRuleFile({"outer": fit_conformal_rule(states, 0.3)}, {"outer": 0.3}, None,
                            prediction_fingerprint(pred, "nnunet", ["c1"], unc), [f"k{i}" for i in range(5)])
    if entry == "conformal":
        assert check_conformal_inputs(pred, doc, tmp_path / "out", layout="nnunet",
                                      uncertainty=unc)[2]["status"] == "match"
        return

    def stop(*args, **kwargs):
        raise _Stop

    monkeypatch.setattr(report, "run_triage", stop)  # the product's check ran before the triage
    with pytest.raises(_Stop):
        report.triage_with_page(pred, None, tmp_path / "out", layout="nnunet", uncertainty=unc, conformal_rule=doc,
                                progress=False)


@pytest.mark.parametrize("step", ["iterdir", "unlink", "rmdir"])
def test_remove_case_files_survives_a_concurrent_remover(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         step: str) -> None:
    """Each rank of a distributed rerun removes an earlier run's product case files: one removed them first."""
    import shutil

    from monai_unc.evaluation.products import remove_case_files

    for name in ("conformal", "lesions"):
        (tmp_path / "products" / name).mkdir(parents=True)
        for i in range(3):
            (tmp_path / "products" / name / f"c{i}_mask.nii.gz").write_bytes(b"x")
    original = getattr(Path, step)

    def raced(self: Path, *args: Any, **kwargs: Any) -> Any:  # the other rank removed the folder just before
        folder = self if step != "unlink" else self.parent
        if folder.parent.name == "products" and folder.exists():
            shutil.rmtree(folder)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, step, raced)
    remove_case_files(tmp_path)
    monkeypatch.undo()
    assert list((tmp_path / "products").iterdir()) == []
