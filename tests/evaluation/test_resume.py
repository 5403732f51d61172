"""Per-case resume state of an evaluation (:mod:`monai_unc.evaluation.resume`): what the fingerprint of a case
depends on, saving and loading a case's result, and that a stale or damaged state is recomputed."""

from __future__ import annotations

import io
import json
import os
import shutil
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest

from monai_unc import __version__
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig
from monai_unc.evaluation.resume import (
    CASE_FIELDS,
    case_cache,
    case_fingerprint,
    file_signature,
    load_case_state,
    save_case_state,
)
from monai_unc.evaluation.runner import evaluate_files, evaluate_shard
from monai_unc.io import match_cases
from monai_unc.product import CohortProduct
from monai_unc.products import ConformalMasks
from tests._states import sign_case_state

CALLS: list[str] = []


def counted(task):
    """A user metric that records each evaluation of a case (a resumed case does not call it)."""
    CALLS.append("x")
    return float(np.count_nonzero(task.pred))


def other_metric(task):
    return 0.0


class Scaled(CohortProduct):
    name, title = "scaled", "Scaled"

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale

    def options(self):
        return {"scale": self.scale}


@pytest.fixture(scope="module")
def cohort(tmp_path_factory) -> dict[str, Path]:
    return write_toy_cohort(tmp_path_factory.mktemp("resume"), n_cases=2, shape=(8, 8, 8))


@pytest.fixture
def files(cohort, tmp_path):
    """The toy cases, copied (the tests touch and replace files)."""
    root = tmp_path / "cohort"
    shutil.copytree(cohort["labels"].parent, root)
    return match_cases(root / "labels", root / "predictions")


def _config(**kw) -> EvaluationConfig:
    c = EvaluationConfig(spatial=False, **kw)
    c.validate()
    return c


#: one changed value per field of CASE_FIELDS (spatial is False in the base config)
VARIANTS = {
    "measure": {"measure": "one_minus_max_prob"},
    "n_bins": {"n_bins": 10},
    "min_bin_count": {"min_bin_count": 5},
    "patch_size": {"patch_size": 5},
    "spatial": {"spatial": True},
    "num_classes": {"num_classes": 2},
    "class_names": {"class_names": ["background", "sphere"]},
    "regions": {"regions": {"sphere": [1]}},
    "case_metric_names": {"case_metrics": {"counted": counted}},
}


def test_every_case_field_has_a_variant():
    assert set(VARIANTS) == set(CASE_FIELDS)


def test_fingerprint_contents(files):
    fp = case_fingerprint(files[0], _config())
    assert fp["version"] == __version__
    assert fp["config"] == {**{k: getattr(_config(), k) for k in CASE_FIELDS}, "n_fine_bins": 240}
    assert fp["shift"] is None
    assert fp["inputs"]["label"] == file_signature(files[0].label)
    assert sorted(fp["inputs"]["maps"]) == sorted(files[0].maps)
    assert json.loads(json.dumps(fp)) == fp
    assert "products" not in fp["config"] and "conformal" not in fp["config"] and "image" not in fp["inputs"]


def test_every_case_field_changes_the_fingerprint(files):
    base = case_fingerprint(files[0], _config())
    seen = [json.dumps(base, sort_keys=True)]
    for field, kw in VARIANTS.items():
        config = EvaluationConfig(**{"spatial": False, **kw})
        config.validate()
        fp = case_fingerprint(files[0], config)
        assert fp != base, field
        seen.append(json.dumps(fp, sort_keys=True))
    assert len(set(seen)) == len(seen)  # every option a different fingerprint


def test_other_case_metric_functions_change_the_fingerprint(files):
    a = case_fingerprint(files[0], _config(case_metrics={"m": counted}))
    b = case_fingerprint(files[0], _config(case_metrics={"m": other_metric}))
    assert a != b
    assert a == case_fingerprint(files[0], _config(case_metrics={"m": counted}))


def test_region_order_conformal_and_shift_change_the_fingerprint(files):
    f = files[0]
    ab = case_fingerprint(f, _config(regions={"a": [1], "b": [1]}))
    ba = case_fingerprint(f, _config(regions={"b": [1], "a": [1]}))
    assert ab != ba  # the channel order of the regions
    masks = ConformalMasks(["outer:fnr=0.1"])
    assert case_fingerprint(f, _config(products=[masks])) != case_fingerprint(f, _config())
    assert case_fingerprint(f, _config(products=[masks])) != \
        case_fingerprint(f, _config(products=[ConformalMasks(["outer:fnr=0.1"], family="margin")]))
    # the targets are the fit's: the case states are kept
    assert case_fingerprint(f, _config(products=[masks])) == \
        case_fingerprint(f, _config(products=[ConformalMasks(["outer:fnr=0.2"], strata=3)]))
    with_shift = case_fingerprint(f, _config(shifts={f.case_id: "intensity"}))
    assert with_shift["shift"] == "intensity"
    assert case_fingerprint(f, _config(shifts={}))["shift"] == ""
    assert with_shift != case_fingerprint(f, _config(shifts={f.case_id: "none"}))


def test_products_options_enter_the_fingerprint(files):
    f = files[0]
    plain = case_fingerprint(f, _config())
    assert case_fingerprint(f, _config(products=())) == plain
    assert case_fingerprint(f, _config(products=[])) == plain
    one = case_fingerprint(f, _config(products=[Scaled(1.0)]))
    assert one["config"]["products"] == [["scaled", f"{Scaled.__module__}.{Scaled.__qualname__}", {"scale": 1.0}]]
    assert one != plain
    assert case_fingerprint(f, _config(products=[Scaled(2.0)])) != one


def test_a_touched_or_replaced_file_changes_the_fingerprint(files):
    f = files[0]
    config = _config()
    base = case_fingerprint(f, config)
    assert case_fingerprint(f, config) == base
    st = f.probs.stat()
    os.utime(f.probs, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    touched = case_fingerprint(f, config)
    assert touched != base and touched["inputs"]["label"] == base["inputs"]["label"]
    # a copy with the same mtime (cp -p) is another file: inode and ctime differ
    copy = f.label.with_name("copy.nii.gz")
    shutil.copy2(f.label, copy)
    os.replace(copy, f.label)
    assert case_fingerprint(f, config)["inputs"]["label"] != base["inputs"]["label"]
    assert file_signature(None) is None


def _result(f, config):
    result, files, n = evaluate_files(f, config)
    result.files, result.num_classes = files, n
    return result


def test_case_cache_save_and_load(files, tmp_path):
    config = _config(case_metrics={"counted": counted}, products=[ConformalMasks(["outer:fnr=0.2"])])
    cache = case_cache(tmp_path / "cases", config)
    f = files[0]
    result = _result(f, config)
    fp = cache.fingerprint_of(f)
    path = cache.save(f.case_id, result, fp)
    assert path == tmp_path / "cases" / f"{f.case_id}.json"
    assert (tmp_path / "cases" / f"{f.case_id}.npz").is_file()
    doc = json.loads(path.read_text())
    assert doc["case"] == f.case_id and doc["fingerprint"] == fp
    back = cache.load(f.case_id, fp, f)
    assert json.dumps(back.row) == json.dumps(result.row)  # NaN included
    assert back.files is f and back.num_classes == 2  # the listing's files are attached
    for k, v in back.histogram.state_dict().items():
        assert np.asarray(v).tobytes() == np.asarray(result.histogram.state_dict()[k]).tobytes(), k
    assert back.states["conformal"] == result.states["conformal"]  # the product's state, a ConformalState
    assert cache.load(f.case_id, {**fp, "shift": "other"}, f) is None  # stale
    assert cache.load("missing", fp, f) is None


def test_save_and_load_case_state(files, tmp_path):
    config = _config()
    f = files[1]
    result = _result(f, config)
    fp = case_fingerprint(f, config)
    save_case_state(tmp_path, result, fp, 2)
    got = load_case_state(tmp_path, f.case_id, fp)
    assert got is not None and got[1] == 2 and json.dumps(got[0].row) == json.dumps(result.row)
    assert load_case_state(tmp_path, f.case_id, case_fingerprint(f, _config(n_bins=5))) is None
    assert load_case_state(tmp_path, "other", fp) is None


def test_a_stale_fingerprint_recomputes(files, tmp_path):
    config = _config(case_metrics={"counted": counted})
    CALLS.clear()
    first = evaluate_shard(files, config, cache=tmp_path)
    assert len(CALLS) == 2
    CALLS.clear()
    again = evaluate_shard(files, config, cache=tmp_path)
    assert CALLS == []  # both from the cache
    assert [json.dumps(r.row) for r, _, _ in again] == [json.dumps(r.row) for r, _, _ in first]
    CALLS.clear()
    st = files[0].seg.stat()
    os.utime(files[0].seg, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
    evaluate_shard(files, config, cache=tmp_path)
    assert len(CALLS) == 1  # only the touched case
    CALLS.clear()
    evaluate_shard(files, _config(case_metrics={"counted": counted}, n_bins=7), cache=tmp_path)
    assert len(CALLS) == 2  # another option: every case


def test_cases_of_another_version_are_computed_again(files, tmp_path, monkeypatch):
    """Rows of the 0.1.0 release (or a development build that still said 0.1.0) are not reused: fixes since then
    change numbers (found by review: the version had stayed 0.1.0, so a resume kept such rows)."""
    import monai_unc.evaluation.resume as resume

    assert __version__ != "0.1.0"
    config = _config(case_metrics={"counted": counted})
    monkeypatch.setattr(resume, "__version__", "0.1.0")
    CALLS.clear()
    evaluate_shard(files, config, cache=tmp_path)
    assert len(CALLS) == 2
    monkeypatch.setattr(resume, "__version__", __version__)
    CALLS.clear()
    evaluate_shard(files, config, cache=tmp_path)
    assert len(CALLS) == 2  # every case again
    CALLS.clear()
    evaluate_shard(files, config, cache=tmp_path)
    assert CALLS == []


def test_rows_of_the_merged_foreground_expected_dice_are_computed_again(files, tmp_path, monkeypatch):
    """Rows saved by a version whose ``expected_dice`` of classes was the merged foreground (case state format 4) are
    not reused: a resumed evaluation would mix them with rows of the mean over the classes, and the rule it certifies
    would record both as ``class_mean``."""
    import monai_unc.evaluation.resume as resume

    config = _config(case_metrics={"counted": counted})
    monkeypatch.setattr(resume, "_CASE_FORMAT", 4)
    CALLS.clear()
    evaluate_shard(files, config, cache=tmp_path)
    assert len(CALLS) == 2
    monkeypatch.undo()
    assert resume._CASE_FORMAT == 5
    CALLS.clear()
    evaluate_shard(files, config, cache=tmp_path)
    assert len(CALLS) == 2  # every case again
    CALLS.clear()
    evaluate_shard(files, config, cache=tmp_path)
    assert CALLS == []


def _saved(files, tmp_path):
    config = _config()
    f = files[0]
    fp = case_fingerprint(f, config)
    save_case_state(tmp_path, _result(f, config), fp, 2)
    assert load_case_state(tmp_path, f.case_id, fp) is not None
    return f, fp, tmp_path / f"{f.case_id}.npz"


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "missing", "other_arrays"])
def test_a_damaged_side_file_is_unusable(files, tmp_path, damage):
    f, fp, npz = _saved(files, tmp_path)
    data = npz.read_bytes()
    if damage == "garbage":
        npz.write_bytes(b"not an npz file at all" * 10)
    elif damage == "truncated":
        npz.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        npz.write_bytes(b"")
    elif damage == "missing":
        npz.unlink()
    else:
        np.savez(npz, x=np.arange(3), **{"histogram/__type__": np.array("no.such.type")})
    if damage != "missing":
        sign_case_state(npz)  # the digests match: unusable for its content
    assert load_case_state(tmp_path, f.case_id, fp) is None


def test_a_damaged_json_is_unusable(files, tmp_path):
    f, fp, _ = _saved(files, tmp_path)
    (tmp_path / f"{f.case_id}.json").write_text('{"case": ')
    assert load_case_state(tmp_path, f.case_id, fp) is None
    (tmp_path / f"{f.case_id}.json").write_text("[1, 2]")
    assert load_case_state(tmp_path, f.case_id, fp) is None


def _first_corruption(data: bytes, error: type) -> bytes:
    """``data`` with one byte flipped such that ``numpy.load`` of it raises ``error`` (the first such byte)."""
    for pos in range(len(data)):
        bad = bytearray(data)
        bad[pos] ^= 0xFF
        try:
            with np.load(io.BytesIO(bytes(bad)), allow_pickle=False) as z:
                for k in z.files:
                    z[k]
        except error:
            return bytes(bad)
        except Exception:
            continue
    pytest.skip(f"no single flipped byte gives {error.__name__}")


def test_a_side_file_with_a_damaged_deflate_stream_is_unusable(files, tmp_path):
    f, fp, npz = _saved(files, tmp_path)
    npz.write_bytes(_first_corruption(npz.read_bytes(), zlib.error))
    sign_case_state(npz)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert load_case_state(tmp_path, f.case_id, fp) is None


def test_seg_label_values_enter_the_fingerprint(files):
    """DICOM SEG references: the segments' label values decide the label map, so a rerun with other values must not
    reuse the rows of the earlier ones (they were not part of the fingerprint)."""
    f = files[0]
    plain = case_fingerprint(f, _config())
    assert "seg_label_values" not in plain["config"]  # earlier fingerprints stay valid
    a = case_fingerprint(f, _config(seg_label_values=[1, 2]))
    assert a != plain and a != case_fingerprint(f, _config(seg_label_values=[2, 1]))
    assert a == case_fingerprint(f, _config(seg_label_values=[1, 2]))
