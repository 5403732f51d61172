"""Running an evaluation (:mod:`monai_unc.evaluation.runner`): the cohort state of per-case results whatever their
order, the refusal of a case with another number of classes, of labels that no region claims and of a region spec
other than the predictions', and a shard evaluated again from its cache."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig
from monai_unc.evaluation.cohort import summarize
from monai_unc.evaluation.rows import CaseResult
from monai_unc.evaluation.runner import (
    assemble_state,
    check_recorded_regions,
    check_unclaimed_labels,
    evaluate_files,
    evaluate_shard,
)
from monai_unc.io import CaseError, CaseFiles, match_cases

CALLS: list[str] = []


def counted(task):
    CALLS.append("x")
    return float(np.count_nonzero(task.pred))


@pytest.fixture(scope="module")
def cohort(tmp_path_factory) -> dict[str, Path]:
    return write_toy_cohort(tmp_path_factory.mktemp("runner"), n_cases=4, shape=(8, 8, 8))


@pytest.fixture(scope="module")
def files(cohort) -> list[CaseFiles]:
    return match_cases(cohort["labels"], cohort["predictions"])


def _config(**kw) -> EvaluationConfig:
    c = EvaluationConfig(spatial=False, **kw)
    c.validate()
    return c


@pytest.fixture(scope="module")
def results(files):
    return [evaluate_files(f, _config()) for f in files]


def _case_bits(state):
    h = state.histogram
    return {cid: (h.counts[i].numpy().tobytes(), h.sums[i].numpy().tobytes(), h.scalars[i].numpy().tobytes())
            for i, cid in enumerate(h.case_ids)}


# --- assemble_state ----------------------------------------------------------------------------------------------
def test_assemble_state_is_order_independent(results):
    ref = assemble_state(results, _config().n_fine_bins)
    ids = sorted(r.row["case"] for r, _, _ in results)
    assert [r["case"] for r in ref.rows] == ids and ref.histogram.case_ids == ids
    assert ref.num_classes == 2 and ref.n_fine_bins == 240
    assert set(ref.files) == set(ids)
    rng = random.Random(0)
    for _ in range(3):
        shuffled = list(results)
        rng.shuffle(shuffled)
        got = assemble_state(iter(shuffled), 240)
        assert json.dumps(got.rows) == json.dumps(ref.rows)
        assert got.histogram.case_ids == ids
        assert _case_bits(got) == _case_bits(ref)
        pooled_got, pooled_ref = got.histogram.views(False), ref.histogram.views(False)
        for a, b in zip(pooled_got, pooled_ref):
            assert a.numpy().tobytes() == b.numpy().tobytes()  # the same float64 bits as one process
        assert json.dumps(summarize(got, _config()), sort_keys=True) == \
            json.dumps(summarize(ref, _config()), sort_keys=True)


def test_assemble_state_of_nothing(results):
    assert assemble_state([], 240) is None
    assert assemble_state([], 240, failures=[]) is None


def _with_classes(result_tuple, n: int, histogram: bool = True):
    result, files, _ = result_tuple
    if not histogram:
        result = CaseResult(**{**result.__dict__, "histogram": None})
    return result, files, n


def test_assemble_state_refuses_another_number_of_classes(results):
    ids = sorted(r.row["case"] for r, _, _ in results)
    odd = [_with_classes(t, 3) if t[0].row["case"] == ids[2] else t for t in results]
    with pytest.raises(CaseError, match=f"case '{ids[2]}' has 3 classes, the cohort 2"):
        assemble_state(odd, 240)
    failures: list = []
    state = assemble_state(list(reversed(odd)), 240, failures=failures)
    assert [c for c, _ in failures] == [ids[2]] and isinstance(failures[0][1], CaseError)
    assert [r["case"] for r in state.rows] == [i for i in ids if i != ids[2]]
    assert state.histogram.case_ids == [i for i in ids if i != ids[2]]


def test_the_first_case_by_id_sets_the_number_of_classes(results):
    ids = sorted(r.row["case"] for r, _, _ in results)
    first_odd = [_with_classes(t, 3, histogram=False) if t[0].row["case"] == ids[0] else t for t in results]
    failures: list = []
    state = assemble_state(first_odd, 240, failures=failures)
    assert state.num_classes == 3 and [r["case"] for r in state.rows] == [ids[0]]
    assert sorted(c for c, _ in failures) == ids[1:]


def test_assemble_state_keeps_the_regions(results):
    state = assemble_state(results, 240, regions={"sphere": [1]})
    assert state.regions == {"sphere": [1]}


# --- check_unclaimed_labels --------------------------------------------------------------------------------------
def _unclaimed(cid: str, labels: list[int]):
    return CaseResult({"case": cid}, None, unclaimed_labels=labels), None, 2


def test_check_unclaimed_labels():
    results = [_unclaimed("a", [3]), _unclaimed("b", []), _unclaimed("c", [3, 5])]
    brats = _config(regions="brats")
    with pytest.raises(ValueError, match=r"--regions: .*label 3 in 2 case\(s\) \(a, c\)") as e:
        check_unclaimed_labels(results, brats)
    assert "label 5 in 1 case(s) (c)" in str(e.value)
    assert "--ignore-unclaimed-labels" in str(e.value)
    with pytest.warns(UserWarning, match=r"label\(s\) \[3, 5\] of 2 case\(s\) are in no region"):
        check_unclaimed_labels(results, _config(regions="brats", ignore_unclaimed_labels=True))
    check_unclaimed_labels([_unclaimed("a", []), _unclaimed("b", [])], brats)  # nothing unclaimed: no error
    check_unclaimed_labels(results, _config())  # classes: not checked


# --- check_recorded_regions --------------------------------------------------------------------------------------
def _nnunet_folder(tmp_path: Path, regions) -> Path:
    folder = tmp_path / "pred"
    folder.mkdir()
    if regions is not ...:
        (folder / "uncertainty_config.json").write_text(json.dumps({"regions": regions}))
    return folder


def test_check_recorded_regions_agrees(tmp_path):
    folder = _nnunet_folder(tmp_path, {"WT": [1, 2, 4], "TC": [1, 4]})
    check_recorded_regions(folder, "nnunet", {"WT": [1, 2, 4], "TC": [1, 4]})
    check_recorded_regions(folder, "nnunet", {"whole": [4, 2, 1], "core": [4, 1]})  # names and label order free


@pytest.mark.parametrize("spec", [None, {"WT": [1, 2, 4]}, {"TC": [1, 4], "WT": [1, 2, 4]},
                                  {"WT": [1, 2, 4], "TC": [1, 2]}])
def test_check_recorded_regions_refuses_another_spec(tmp_path, spec):
    folder = _nnunet_folder(tmp_path, {"WT": [1, 2, 4], "TC": [1, 4]})
    with pytest.raises(ValueError, match="--regions: the predictions in .* were made with the regions"):
        check_recorded_regions(folder, "nnunet", spec)


def test_check_recorded_regions_without_a_record_or_for_classes(tmp_path):
    check_recorded_regions(_nnunet_folder(tmp_path, ...), "nnunet", {"WT": [1]})  # no record: not checked
    (tmp_path / "classes").mkdir()
    (tmp_path / "classes" / "uncertainty_config.json").write_text(json.dumps({"regions": None}))
    check_recorded_regions(tmp_path / "classes", "nnunet", {"WT": [1]})  # class-based: not checked
    check_recorded_regions(tmp_path / "classes", "nnunet", None)
    with pytest.raises(ValueError, match="layout"):
        check_recorded_regions(tmp_path / "classes", "other-layout", None)


# --- evaluate_shard ----------------------------------------------------------------------------------------------
def test_evaluate_shard_reuses_its_cache(files, results, tmp_path):
    config = _config(case_metrics={"counted": counted})
    CALLS.clear()
    first = evaluate_shard(files, config, cache=tmp_path / "cases")
    assert len(CALLS) == len(files)
    assert [r.row["case"] for r, _, _ in first] == [f.case_id for f in files]  # the order given
    assert sorted(p.name for p in (tmp_path / "cases").iterdir()) == sorted(
        [f"{f.case_id}.json" for f in files] + [f"{f.case_id}.npz" for f in files])
    CALLS.clear()
    second = evaluate_shard(list(reversed(files)), config, cache=tmp_path / "cases")
    assert CALLS == []  # every case from the cache
    assert [r.row["case"] for r, _, _ in second] == [f.case_id for f in reversed(files)]
    assert all(n == 2 and f in files for _, f, n in second)
    a, b = assemble_state(first, 240), assemble_state(second, 240)
    assert json.dumps(a.rows) == json.dumps(b.rows)
    assert _case_bits(a) == _case_bits(b)
    # the rows without the user metric are those of the evaluation without a cache
    plain = assemble_state(results, 240)
    assert json.dumps([{k: v for k, v in r.items() if k != "counted"} for r in a.rows]) == json.dumps(plain.rows)
    assert _case_bits(a) == _case_bits(plain)


def test_run_evaluate_derives_the_maps_of_cases_a_shard_cache_saved_without_them(tmp_path):
    """Issue: ``evaluate_shard(cache=<output>/state/cases)`` (the folder its docstring names) saved cases without the
    maps ``run_evaluate`` derives from the probabilities, under the same resume key: a later ``run_evaluate`` into
    ``<output>`` reused them as finished, so ``maps/`` was missing and the report drew no case. A saved case without
    the derived maps the current run writes is computed again; one with them is reused."""
    from monai_unc.engine import DistContext
    from monai_unc.evaluation import run_evaluate

    p = write_toy_cohort(tmp_path / "cohort", n_cases=3, shape=(8, 8, 8))
    for f in p["predictions"].glob("*_predictive_entropy*"):
        f.unlink()  # probabilities only: evaluate derives the maps
    config = _config(case_metrics={"counted": counted})
    cases = match_cases(p["labels"], p["predictions"])
    fresh = run_evaluate(p["labels"], p["predictions"], tmp_path / "fresh", config, dist=DistContext())[2]
    out = tmp_path / "resumed"
    shard = evaluate_shard(cases, config, cache=out / "state" / "cases")
    assert all(r.derived == {} for r, _, _ in shard)  # the shard writes no map
    CALLS.clear()
    paths = run_evaluate(p["labels"], p["predictions"], out, config, dist=DistContext())[2]
    assert len(CALLS) == len(cases)  # computed again: their states lack the maps
    assert sorted(x.name for x in (out / "maps").iterdir()) == sorted(x.name for x in (tmp_path / "fresh" / "maps")
                                                                       .iterdir())
    for case in cases:
        doc = json.loads((out / "state" / "cases" / f"{case.case_id}.json").read_text())
        assert sorted(doc["record"]["derived"]) == ["one_minus_max_prob", "predictive_entropy"]
    assert paths["metrics"].read_text() == fresh["metrics"].read_text()
    # the states run_evaluate saved serve the shard and run_evaluate again
    CALLS.clear()
    evaluate_shard(cases, config, cache=out / "state" / "cases")
    run_evaluate(p["labels"], p["predictions"], out, config, dist=DistContext())
    assert CALLS == []


def test_evaluate_shard_collects_failures(files, tmp_path):
    broken = CaseFiles("broken", tmp_path / "missing.nii.gz", seg=tmp_path / "missing_seg.nii.gz")
    failures: list = []
    seen: list = []
    done = evaluate_shard([files[0], broken, files[1]], _config(), failures=failures,
                          on_failure=lambda cid, e: seen.append(cid))
    assert [r.row["case"] for r, _, _ in done] == [files[0].case_id, files[1].case_id]
    assert [c for c, _ in failures] == ["broken"] and seen == ["broken"]
    with pytest.raises(type(failures[0][1]), match=re.escape(str(failures[0][1])[:20])):
        evaluate_shard([broken], _config())  # without a failures list the first error propagates
