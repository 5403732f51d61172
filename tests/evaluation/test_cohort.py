"""Cohort state and summary (:mod:`monai_unc.evaluation.cohort`): adding and merging cases equals one pass, the
state's files (and the layout of older versions), the summary of a tiny state checked by hand, the triage order,
the per-case risk and the removal of the cohort files."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from monai_unc.evaluation import EvaluationConfig
from monai_unc.evaluation.cohort import (
    CohortState,
    fill_undefined_scores,
    load_evaluation,
    remove_cohort_files,
    risk_of_dice,
    summarize,
    triage_order,
    write_evaluation,
)
from monai_unc.evaluation.config import STATE_DIR
from monai_unc.evaluation.rows import CaseResult
from monai_unc.io import CaseFiles
from monai_unc.metrics.calibration import ConfidenceHistogram
from tests._cases import volume_state_type

F = 16 * 15  # the n_fine_bins of EvaluationConfig()
REGIONS = {"WT": [1, 2], "ET": [2]}
SHAPE = (4, 3, 2)


@pytest.fixture
def volume_state():
    with volume_state_type("test.cohort_volume") as cls:
        yield cls


def _probs(rng, c):
    x = rng.random((c, *SHAPE)) + 0.05
    return x / x.sum(0, keepdims=True)


def _data(i: int):
    rng = np.random.default_rng(100 + i)
    return _probs(rng, 2), rng.integers(0, 2, SHAPE)


def _hist(i: int, cid: str | None = None) -> ConfidenceHistogram:
    p, y = _data(i)
    h = ConfidenceHistogram(2, n_fine_bins=F, per_case=True)
    h.update(p[None], y[None], case_ids=[cid or f"c{i}"])
    return h


def _result(i: int, regions: bool = False, volume=None) -> CaseResult:
    cid = f"c{i}"
    dice = [0.9, 0.5, 0.95, 0.7, 0.85, math.nan][i % 6]
    score = [0.1, 0.8, 0.05, 0.8, math.nan, 0.3][i % 6]
    row = {"case": cid, "dice": dice, "dice_1": dice, "measure": "predictive_entropy",
           "predictive_entropy_mean": score / 2, "predictive_entropy_fg_mean": score, "error_rate": 1 - dice}
    rh = {n: _hist(10 * i + k, cid) for k, n in enumerate(REGIONS)} if regions else None
    curves = {"thresholds": [0.0, 100.0], "brain_mask": "all voxels",
              "regions": {n: {"dice": [dice, 1.0], "ftp": [0.0, 1.0], "ftn": [1.0, 0.0]} for n in REGIONS}} \
        if regions else None
    states = {"volume": volume([i, 2 * i])} if volume is not None else {}
    return CaseResult(row, None if regions else _hist(i), [f"{cid}: warned"], region_histograms=rh, curves=curves,
                      states=states)


def _files(i: int) -> CaseFiles:
    return CaseFiles(f"c{i}", f"/data/labels/c{i}.nii.gz", seg=f"/data/pred/c{i}_seg.nii.gz")


def _state(ids, regions=False, volume=None) -> CohortState:
    s = CohortState(2, F, regions=dict(REGIONS) if regions else None)
    for i in ids:
        s.add(_result(i, regions, volume), _files(i))
    return s


def _hist_arrays(h: ConfidenceHistogram):
    return {k: np.asarray(v) for k, v in h.state_dict().items()}


def _by_case(h: ConfidenceHistogram):
    c, s, sc = h.counts.numpy(), h.sums.numpy(), h.scalars.numpy()
    return {cid: (c[i].tobytes(), s[i].tobytes(), sc[i].tobytes()) for i, cid in enumerate(h.case_ids)}


def _assert_same_state(a: CohortState, b: CohortState, ordered: bool = True) -> None:
    assert (a.num_classes, a.n_fine_bins, a.regions) == (b.num_classes, b.n_fine_bins, b.regions)
    ra, rb = a.sorted_rows(), b.sorted_rows()
    assert json.dumps(ra) == json.dumps(rb)  # NaN included
    assert sorted(a.warnings) == sorted(b.warnings) and a.files == b.files and a.curves == b.curves
    if a.histogram is None:
        assert b.histogram is None
    else:
        assert _by_case(a.histogram) == _by_case(b.histogram)
        if ordered:
            assert a.histogram.case_ids == b.histogram.case_ids
    assert list(a.region_histograms) == list(b.region_histograms)
    for n in a.region_histograms:
        assert _by_case(a.region_histograms[n]) == _by_case(b.region_histograms[n])
    assert sorted(a.product_states) == sorted(b.product_states)
    for c in a.product_states:
        assert list(a.product_states[c]) == list(b.product_states[c])
        for name, st in a.product_states[c].items():
            assert st.voxels.tolist() == b.product_states[c][name].voxels.tolist()


# --- add and merge -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("regions", [False, True])
def test_shards_merged_equal_one_pass(regions, volume_state):
    one = _state(range(6), regions, volume_state)
    a = _state([4, 0, 2], regions, volume_state)
    b = _state([5, 3], regions, volume_state)
    c = _state([1], regions, volume_state)
    merged = a.merge(b.merge(c))
    assert merged is a
    _assert_same_state(merged, one, ordered=False)
    assert [r["case"] for r in merged.sorted_rows()] == [f"c{i}" for i in range(6)]
    assert len(merged.warnings) == 6 and merged.files["c3"] == _files(3).to_json()
    # the pooled numbers are those of one pass (integer counts exactly)
    if not regions:
        assert merged.histogram.views(False)[0].equal(one.histogram.views(False)[0])
        assert int(merged.histogram.scalars[:, 0].sum()) == 6 * int(np.prod(SHAPE))
    else:
        assert list(merged.region_histograms) == list(REGIONS)
        assert len(merged.region_histograms["WT"]) == 6


def test_add_refuses_a_case_twice():
    s = _state([0, 1])
    with pytest.raises(ValueError, match="case 'c1' is already in the cohort state"):
        s.add(_result(1))
    assert len(s.rows) == 2 and len(s.histogram) == 2  # nothing added


def test_merge_refuses_overlapping_or_other_layouts():
    with pytest.raises(ValueError, match=r"share case\(s\) \['c1'\]"):
        _state([0, 1]).merge(_state([1, 2]))
    with pytest.raises(ValueError, match="num_classes, n_fine_bins"):
        _state([0]).merge(CohortState(3, F))
    with pytest.raises(ValueError, match="num_classes, n_fine_bins"):
        _state([0]).merge(CohortState(2, 16))
    other = CohortState(2, F, regions={"ET": [2], "WT": [1, 2]})  # another channel order
    with pytest.raises(ValueError, match="regions"):
        _state([0], regions=True).merge(other)


def test_add_upgrades_old_row_names():
    r = _result(0)
    r.row["predictive_entropy_patch"] = 0.25  # the name of <m>_patch_mean in older versions
    s = CohortState(2, F).add(r)
    assert s.rows[0]["predictive_entropy_patch_mean"] == 0.25 and "predictive_entropy_patch" not in s.rows[0]


# --- save and load -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("regions", [False, True])
def test_save_load_round_trip(tmp_path, regions, volume_state):
    s = _state([2, 0, 1], regions, volume_state)
    s.save(tmp_path / "state")
    names = sorted(p.name for p in (tmp_path / "state").iterdir())
    expected = ["products.npz", "rows.json"] + (["region_histograms.npz"] if regions else ["histogram.npz"])
    assert names == sorted(expected)
    back = CohortState.load(tmp_path / "state")
    _assert_same_state(back, s, ordered=True)
    assert [r["case"] for r in back.rows] == ["c0", "c1", "c2"]  # saved in case-id order
    if not regions:
        for k, v in _hist_arrays(back.histogram).items():
            assert v.tobytes() == _hist_arrays(s.histogram)[k].tobytes(), k


def test_save_removes_files_of_an_earlier_run(tmp_path, volume_state):
    _state([0, 1], True, volume_state).save(tmp_path)
    _state([0, 1]).save(tmp_path)  # no regions, no products now
    assert sorted(p.name for p in tmp_path.iterdir()) == ["histogram.npz", "rows.json"]
    back = CohortState.load(tmp_path)
    assert back.region_histograms == {} and back.product_states == {} and back.regions is None


def test_load_of_the_old_region_histograms_layout(tmp_path):
    s = _state([0, 1, 2], regions=True)
    s.save(tmp_path)
    # the layout of versions before StateGroup: the names under "regions", region i under "r<i>__<key>"
    old = {"regions": np.array(list(REGIONS))}
    for i, name in enumerate(REGIONS):
        old.update({f"r{i}__{k}": v for k, v in _hist_arrays(s.region_histograms[name]).items()})
    (tmp_path / "region_histograms.npz").unlink()
    np.savez_compressed(tmp_path / "region_histograms.npz", **old)
    back = CohortState.load(tmp_path)
    assert list(back.region_histograms) == list(REGIONS)
    for name in REGIONS:
        assert back.region_histograms[name].case_ids == ["c0", "c1", "c2"]
        for k, v in _hist_arrays(back.region_histograms[name]).items():
            assert v.tobytes() == _hist_arrays(s.region_histograms[name])[k].tobytes(), (name, k)


def test_load_without_rows_json(tmp_path):
    with pytest.raises(FileNotFoundError, match="rows.json missing"):
        CohortState.load(tmp_path)


# --- summary -----------------------------------------------------------------------------------------------------
def test_summarize_a_tiny_state_by_hand():
    ids = range(5)  # dice .9 .5 .95 .7 .85; score .1 .8 .05 .8 nan
    s = _state(ids)
    config = EvaluationConfig(budget=0.4, failure_dice=0.8)
    summary = summarize(s, config)
    dice = np.array([0.9, 0.5, 0.95, 0.7, 0.85])
    assert summary["n_cases"] == 5 and summary["num_classes"] == 2 and summary["measure"] == "predictive_entropy"
    assert summary["score"] == {"column": "predictive_entropy_fg_mean", "undefined": ["c4"]}
    assert summary["dice"]["mean"] == pytest.approx(dice.mean(), rel=1e-12)
    assert summary["dice"]["median"] == pytest.approx(np.median(dice), rel=1e-12)
    assert summary["dice"]["per_class"] == {"1": pytest.approx(dice.mean(), rel=1e-12)}
    # triage: the undefined score first, then 0.8 (c1 before c3 by id), 0.1, 0.05
    assert summary["triage"]["order"] == ["c4", "c1", "c3", "c0", "c2"]
    assert summary["triage"]["n_referred"] == 2 and summary["triage"]["referred"] == ["c4", "c1"]
    assert summary["triage"]["dice_referred"] == pytest.approx((0.85 + 0.5) / 2, rel=1e-12)
    assert summary["failures"]["cases"] == ["c1", "c3"] and summary["failures"]["n_failed"] == 2
    assert summary["failures"]["caught_by_budget"] == 1
    # pooled calibration: every voxel of every case; NLL and Brier from the probabilities by hand
    n_vox = 5 * int(np.prod(SHAPE))
    assert summary["calibration"]["voxels"] == n_vox
    data = [_data(i) for i in ids]
    nll = -np.mean(np.concatenate([np.log(np.take_along_axis(p, y[None], 0)[0]).ravel() for p, y in data]))
    brier = np.mean(np.concatenate([((p - np.stack([y == 0, y == 1])) ** 2).sum(0).ravel() for p, y in data]))
    assert summary["calibration"]["nll"] == pytest.approx(nll, rel=1e-9)
    assert summary["calibration"]["brier"] == pytest.approx(brier, rel=1e-9)
    assert sum(summary["reliability"]["counts"]) == 2 * n_vox  # all-label: both class probabilities of a voxel
    assert summary["warnings"] == [f"c{i}: warned" for i in ids]
    assert "risk_control" not in summary and "ood" not in summary and "regions" not in summary
    json.dumps(summary, allow_nan=False)


def test_summary_of_merged_shards_equals_one_pass():
    one = summarize(_state(range(5)), EvaluationConfig())
    merged = summarize(_state([3, 1]).merge(_state([0, 4, 2])), EvaluationConfig())
    assert json.dumps(one, sort_keys=True) == json.dumps(merged, sort_keys=True)


def test_summarize_refuses_an_unknown_score_column():
    with pytest.raises(ValueError, match="score column 'dice_mean' not found"):
        summarize(_state([0, 1]), EvaluationConfig(score="dice_mean"))


def test_write_and_load_evaluation(tmp_path):
    s = _state(range(3))
    config = EvaluationConfig()
    summary = summarize(s, config)
    paths = write_evaluation(s, summary, tmp_path, config)
    assert paths["state"] == tmp_path / STATE_DIR and paths["metrics"].is_file()
    state, doc = load_evaluation(tmp_path)
    assert doc["config"] == json.loads(json.dumps(config.to_json()))
    provenance = ("config", "monai_unc_version", "library_versions")
    assert {k: v for k, v in doc.items() if k not in provenance} == json.loads(json.dumps(summary))
    assert doc["monai_unc_version"] and set(doc["library_versions"]) == {"monai", "torch"} and "inputs" not in doc
    _assert_same_state(state, s)
    (tmp_path / "failures.json").write_text("{}")
    with pytest.raises(ValueError, match="failed cases"):
        load_evaluation(tmp_path)


# --- triage order, risk ------------------------------------------------------------------------------------------
def test_triage_order_ties_and_nan():
    ids = ["d", "b", "a", "c", "e"]
    scores = np.array([0.5, 0.5, math.nan, 0.9, 0.5])
    # NaN first (above every defined score), then 0.9, then the 0.5 ties by case id
    assert [ids[i] for i in triage_order(ids, scores)] == ["a", "c", "b", "d", "e"]
    assert triage_order(["b", "a"], np.array([math.nan, math.nan])) == [1, 0]
    assert triage_order(["x", "y"], np.array([math.inf, 1.0])) == [0, 1]
    assert triage_order([], np.array([])) == []


def test_fill_undefined_scores():
    np.testing.assert_array_equal(fill_undefined_scores(np.array([0.2, math.nan, 0.7, -math.inf])),
                                  [0.2, 1.7, 0.7, 1.7])
    np.testing.assert_array_equal(fill_undefined_scores(np.array([math.nan])), [1.0])


def test_risk_of_dice():
    dice = np.array([0.9, 0.8, 0.79, math.nan, 1.2, -0.1])
    np.testing.assert_array_equal(risk_of_dice(dice, "failure", 0.8), [0.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    got = risk_of_dice(dice, "1-dice", 0.8)
    np.testing.assert_allclose(got[[0, 1, 2]], [0.1, 0.2, 0.21], rtol=1e-12)
    assert math.isnan(got[3]) and got[4] == 0.0 and got[5] == 1.0
    assert risk_of_dice([0.5], "failure", 0.5).dtype == np.float64


# --- removing the cohort files -----------------------------------------------------------------------------------
def test_remove_cohort_files(tmp_path, volume_state):
    s = _state([0, 1], True, volume_state)
    write_evaluation(s, summarize(s, EvaluationConfig(regions=dict(REGIONS))), tmp_path)
    _state([0, 1]).save(tmp_path / STATE_DIR / "tmp")  # a histogram too, elsewhere
    (tmp_path / STATE_DIR / "histogram.npz").write_bytes(b"x")
    cases = tmp_path / STATE_DIR / "cases"
    cases.mkdir()
    (cases / "c0.json").write_text("{}")
    (tmp_path / "other.txt").write_text("kept")
    remove_cohort_files(tmp_path)
    for name in ("metrics.csv", "summary.json", f"{STATE_DIR}/rows.json", f"{STATE_DIR}/histogram.npz",
                 f"{STATE_DIR}/region_histograms.npz", f"{STATE_DIR}/products.npz"):
        assert not (tmp_path / name).exists(), name
    assert (cases / "c0.json").is_file() and (tmp_path / "other.txt").is_file()
    assert (tmp_path / STATE_DIR / "tmp" / "rows.json").is_file()
    remove_cohort_files(tmp_path)  # nothing left to remove: no error
    remove_cohort_files(tmp_path / "missing")


# --- known bugs --------------------------------------------------------------------------------------------------
def test_a_refused_merge_leaves_the_state_unchanged():
    s = _state([0], regions=True)
    other = CohortState(2, F, regions={"ET": [2], "WT": [1, 2]})
    other.add(_result(1, regions=False))
    with pytest.raises(ValueError, match="regions"):
        s.merge(other)
    assert [r["case"] for r in s.rows] == ["c0"]


def test_a_refused_add_leaves_the_state_unchanged():
    s = _state([0])
    r = _result(1)
    rng = np.random.default_rng(0)
    r.histogram = ConfidenceHistogram(3, n_fine_bins=F)
    r.histogram.update(_probs(rng, 3)[None], rng.integers(0, 3, (1, *SHAPE)), case_ids=["c1"])
    with pytest.raises(ValueError, match="num_classes, n_fine_bins"):
        s.add(r)
    assert [row["case"] for row in s.rows] == ["c0"]


def test_a_case_named_pooled_keeps_its_id_in_the_cohort_histogram():
    r = _result(0)
    p, y = _data(0)
    r.row["case"] = "pooled"
    r.histogram = ConfidenceHistogram(2, n_fine_bins=F)
    r.histogram.update(p[None], y[None], case_ids=["pooled"])
    s = CohortState(2, F).add(r)
    assert s.histogram.case_ids == ["pooled"]


class _CountedRow(dict):
    """A row that counts how often its case id is read."""

    reads = 0

    def __getitem__(self, key):
        if key == "case":
            type(self).reads += 1
        return super().__getitem__(key)


def test_adding_cases_reads_each_earlier_row_once_not_once_per_case():
    """``add`` checked a new id against every row so far, so an evaluation of N cases read N^2 / 2 ids (0.59 ms a
    case at 8 000 cases; found by the benchmark review). The ids are kept beside the rows; a duplicate is still
    refused, also after ``rows`` was replaced or extended outside ``add``."""
    state = CohortState(2, 240, rows=[_CountedRow(case=f"old{i:04d}", dice=0.5) for i in range(1000)])
    _CountedRow.reads = 0
    for i in range(200):
        state.add(CaseResult({"case": f"new{i:04d}", "dice": 0.5}, None))
    assert _CountedRow.reads <= 2 * 1000, f"{_CountedRow.reads} reads of earlier case ids for 200 cases"
    assert len(state.rows) == 1200
    with pytest.raises(ValueError, match="already in the cohort state"):
        state.add(CaseResult({"case": "old0007", "dice": 0.5}, None))
    with pytest.raises(ValueError, match="already in the cohort state"):
        state.add(CaseResult({"case": "new0199", "dice": 0.5}, None))
    state.rows.append({"case": "outside", "dice": 0.1})  # changed outside add: read again
    with pytest.raises(ValueError, match="already in the cohort state"):
        state.add(CaseResult({"case": "outside", "dice": 0.5}, None))
    state.rows = [{"case": "x", "dice": 0.1}]  # replaced
    state.add(CaseResult({"case": "old0007", "dice": 0.5}, None))
    with pytest.raises(ValueError, match="already in the cohort state"):
        state.add(CaseResult({"case": "x", "dice": 0.5}, None))
    assert [r["case"] for r in state.rows] == ["x", "old0007"]
