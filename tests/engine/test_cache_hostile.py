"""Hostile input for the per-case resume state (engine/cache.py, engine/records.py): stale fingerprints, another
case's file, corrupt and truncated files, missing and damaged side files, interrupted writes, partial files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import monai_unc.engine.cache as cache_module
from monai_unc.engine import CaseCache, process_cases
from monai_unc.engine.records import record_cache_hooks


class Rec:
    """A result with JSON data and one array (a :class:`~monai_unc.engine.CaseRecord`)."""

    def __init__(self, n: int, a: np.ndarray) -> None:
        self.n, self.a = n, a

    def to_record(self):
        return {"n": self.n}, {"a": self.a}

    @classmethod
    def from_record(cls, doc, arrays):
        return cls(doc["n"], arrays["a"])


def record_cache(folder: Path) -> CaseCache:
    dump, restore = record_cache_hooks(Rec)
    return CaseCache(folder, lambda item: item, dump=dump, restore=restore)


def test_stale_fingerprint_is_recomputed_and_reported(tmp_path):
    seen = []
    cache = CaseCache(tmp_path, lambda item: item, on_stale=lambda *a: seen.append(a))
    cache.save("a", {"v": 1}, cache.fingerprint_of({"input": [1, 2], "opt": 0.5}))
    assert cache.load("a", cache.fingerprint_of({"input": [1, 2], "opt": 0.5})) == {"v": 1}
    assert cache.load("a", cache.fingerprint_of({"input": [1, 2], "opt": 0.25})) is None
    assert cache.load("a", cache.fingerprint_of({"input": [1, 3], "opt": 0.5})) is None
    assert cache.load("a", cache.fingerprint_of({"input": (1, 2), "opt": 0.5})) == {"v": 1}  # JSON round trip
    assert [s[0] for s in seen] == ["a", "a"]


def test_nan_in_a_fingerprint_still_matches(tmp_path):
    cache = CaseCache(tmp_path, lambda item: item)
    cache.save("a", {"v": 1}, cache.fingerprint_of({"empty_score": float("nan")}))
    assert cache.load("a", cache.fingerprint_of({"empty_score": float("nan")})) == {"v": 1}


def test_another_cases_file_is_never_taken(tmp_path):
    cache = CaseCache(tmp_path, lambda item: item)
    cache.save("a", {"v": 1}, cache.fingerprint_of("fp"))
    cache.path("a").rename(cache.path("b"))  # a file copied or renamed by hand
    assert cache.load("b", cache.fingerprint_of("fp")) is None


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", "null", '"x"', "\x00\x01", '{"case": "a"', "NaN"])
def test_corrupt_or_truncated_json_is_recomputed(tmp_path, text):
    cache = CaseCache(tmp_path, lambda item: item)
    cache.path("a").write_text(text)
    assert cache.load("a", cache.fingerprint_of("fp")) is None


def test_invalid_utf8_json_is_recomputed(tmp_path):
    cache = CaseCache(tmp_path, lambda item: item)
    cache.path("a").write_bytes(b'{"case": "a", "\xff": 1}')
    assert cache.load("a", None) is None


def test_missing_truncated_or_wrong_side_file_is_recomputed(tmp_path):
    cache = record_cache(tmp_path)
    fp = cache.fingerprint_of("v1")
    cache.save("a", Rec(1, np.arange(5.0)), fp)
    assert np.array_equal(cache.load("a", fp).a, np.arange(5.0))
    npz = tmp_path / "a.npz"
    data = npz.read_bytes()
    npz.write_bytes(data[: len(data) // 2])
    assert cache.load("a", fp) is None
    npz.write_bytes(b"not a zip")
    assert cache.load("a", fp) is None
    np.savez(npz, b=np.zeros(1))  # another array name
    assert cache.load("a", fp) is None
    npz.unlink()
    assert cache.load("a", fp) is None


def test_pickled_side_file_is_never_unpickled(tmp_path):
    cache = record_cache(tmp_path)
    fp = cache.fingerprint_of("v1")
    cache.save("a", Rec(1, np.arange(3.0)), fp)
    np.savez(tmp_path / "a.npz", a=np.array([object()], dtype=object))
    assert cache.load("a", fp) is None


def test_interrupted_save_never_pairs_the_old_record_with_new_side_files(tmp_path, monkeypatch):
    """Regression: a save interrupted after the new ``.npz`` but before the new ``.json`` left the old JSON, so a
    later run with the old fingerprint (an input changed back) restored the old record with the new arrays."""
    cache = record_cache(tmp_path)
    old = cache.fingerprint_of("input v1")
    cache.save("a", Rec(1, np.array([1.0])), old)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cache_module, "atomic_write_text", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cache.save("a", Rec(2, np.array([2.0])), cache.fingerprint_of("input v2"))
    monkeypatch.undo()
    assert cache.load("a", old) is None  # recomputed, never [2.0] under the record of input v1
    assert cache.load("a", cache.fingerprint_of("input v2")) is None  # not finished either


def test_prepare_removes_partial_files_and_keeps_finished_ones(tmp_path):
    cache = CaseCache(tmp_path, lambda item: item)
    fp = cache.fingerprint_of("v1")
    cache.save("a", {"v": 1}, fp)
    (tmp_path / ".a.json.partial-123").write_text('{"case": "a"')
    cache.prepare()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]
    assert cache.load("a", fp) == {"v": 1}


def test_reuse_false_and_store_false(tmp_path):
    cache = CaseCache(tmp_path, lambda item: item)
    fp = cache.fingerprint_of("v1")
    cache.save("a", {"v": 1}, fp)
    assert CaseCache(tmp_path, lambda item: item, reuse=False).load("a", fp) is None
    assert CaseCache(tmp_path / "x", lambda item: item, store=False).save("a", {"v": 1}, fp) is None
    assert not (tmp_path / "x").exists()


def test_saved_nan_and_infinity_read_back_bit_for_bit(tmp_path):
    cache = CaseCache(tmp_path, lambda item: item)
    cache.save("a", {"v": [float("nan"), float("inf"), -0.0, 1e-320]}, None)
    got = cache.load("a", None)["v"]
    assert np.isnan(got[0]) and got[1] == float("inf") and str(got[2]) == "-0.0" and got[3] == 1e-320


def test_process_cases_recomputes_only_the_changed_case(tmp_path):
    calls = []
    inputs = {"a": 1, "b": 2}
    cache = CaseCache(tmp_path, lambda cid: {"input": inputs[cid]})

    def work(cid):
        calls.append(cid)
        return {"out": inputs[cid] * 10}

    assert process_cases(["a", "b"], work, key=str, cache=cache) == [("a", {"out": 10}), ("b", {"out": 20})]
    inputs["b"] = 3
    assert process_cases(["a", "b"], work, key=str, cache=cache) == [("a", {"out": 10}), ("b", {"out": 30})]
    assert calls == ["a", "b", "b"]
    assert json.loads(cache.path("b").read_text())["fingerprint"] == {"input": 3}


@pytest.mark.parametrize("saved, current", [({"flag": True}, {"flag": 1}), ({"n": 1}, {"n": 1.0}),
                                            ({"x": 0.0}, {"x": False}), ([1, True], [1.0, 1])])
def test_fingerprint_compares_json_types(tmp_path, saved, current):
    """Regression: ``==`` after the JSON round trip took ``true``, ``1`` and ``1.0`` for one setting, so a state
    saved under ``{"flag": true}`` was reused for ``{"flag": 1}``; unchanged floats (and key order) still match."""
    cache = CaseCache(tmp_path, lambda item: item)
    cache.save("a", {"v": 1}, cache.fingerprint_of(saved))
    assert cache.load("a", cache.fingerprint_of(current)) is None
    same = {"b": 0.1 + 0.2, "a": [1e-320, -0.0, float("nan"), float("inf"), 2**70], "c": True}
    cache.save("b", {"v": 2}, cache.fingerprint_of(same))
    assert cache.load("b", cache.fingerprint_of(dict(reversed(list(same.items()))))) == {"v": 2}


@pytest.mark.parametrize("case_id", ["", ".", "..", "../x", "a/b", "/abs", "a\x00b", 3]
                         + (["a\\b"] if os.altsep else []))
def test_case_id_that_leaves_the_folder_is_refused(tmp_path, case_id):
    """Regression: ``path("../x")`` named ``<folder>/../x.json``, so save wrote outside the cache's folder."""
    cache = CaseCache(tmp_path / "states", lambda item: item)
    with pytest.raises((ValueError, TypeError), match="case_id"):
        cache.path(case_id)
    with pytest.raises((ValueError, TypeError), match="case_id"):
        cache.save(case_id, {"v": 1}, None)
    assert not any(tmp_path.rglob("*.json"))


@pytest.mark.skipif(os.altsep is not None, reason="a backslash separates folders on this platform")
def test_a_backslash_in_a_posix_case_id_is_a_plain_character(tmp_path):
    """A case id comes from a file name, and ``a\\b.nii.gz`` is one file on POSIX: it stays a case."""
    cache = CaseCache(tmp_path / "states", lambda item: item)
    assert cache.save("a\\b", {"v": 1}, None).parent == tmp_path / "states"
    assert cache.load("a\\b", None) == {"v": 1}


@pytest.mark.parametrize("hook", ["fingerprint", "dump", "restore", "on_stale", "saved_as"])
def test_a_hook_given_as_data_is_refused_before_any_case(tmp_path, hook):
    # before the fix CaseCache(dump=5) was accepted and every case failed after its work ("not callable")
    with pytest.raises(TypeError, match=f"{hook} must be callable or None, got int"):
        CaseCache(tmp_path, **{hook: 5})


def test_loop_arguments_of_the_wrong_kind_are_refused_before_any_case(tmp_path):
    from monai_unc.engine import run_cases

    calls = []
    with pytest.raises(TypeError, match="process must be callable, got int"):
        # before the fix every case "failed" ('int' object is not callable) and failures.json listed the cohort
        run_cases(["a", "b"], 5, command="toy", key=str, failures_file=tmp_path / "failures.json")
    assert not (tmp_path / "failures.json").exists()
    with pytest.raises(TypeError, match="cache must be a CaseCache or None, got str"):
        run_cases(["a"], calls.append, command="toy", key=str, cache=str(tmp_path))
    with pytest.raises(TypeError, match="summarize must be callable or None, got dict"):
        run_cases(["a"], calls.append, command="toy", key=str, summarize={})
    with pytest.raises(TypeError, match="command must be a string, got NoneType"):
        run_cases(["a"], calls.append, command=None, key=str)
    with pytest.raises(TypeError, match="key must be callable, got str"):
        process_cases(["a"], calls.append, key="case_id", failures=[])
    assert calls == []


def test_a_none_result_is_not_saved_as_a_state_that_reads_back_as_none(tmp_path):
    cache = CaseCache(tmp_path, lambda item: {"item": item})
    failed = []
    # before the fix {"result": null} was saved, read back as "no state", and the case computed on every run
    assert process_cases(["a", "b"], lambda s: None if s == "a" else 1, key=str, cache=cache, failures=failed) == [
        ("b", 1)]
    assert [(c, type(e).__name__) for c, e in failed] == [("a", "TypeError")]
    assert "the result to save is None" in str(failed[0][1])
    assert not (tmp_path / "a.json").exists() and (tmp_path / "b.json").is_file()


def test_an_edited_saved_state_is_recomputed(tmp_path):
    """A saved result edited by hand (a triage row's score lowered; found by hostile review: ``triage`` then
    accepted the case on the edited score) no longer matches the digest saved with it: computed again."""
    cache = CaseCache(tmp_path, lambda item: item)
    fp = cache.fingerprint_of("fp")
    cache.save("a", {"score": 0.6, "nan": float("nan")}, fp)
    assert cache.load("a", fp)["score"] == 0.6  # unedited, NaN included: reused
    doc = json.loads(cache.path("a").read_text())
    for edit in ({"score": 0.0001}, {"score": "abc"}, {"case": "b"}, {}):
        cache.path("a").write_text(json.dumps({**doc, "result": {**doc["result"], **edit}} if edit else
                                              {k: v for k, v in doc.items() if k != "digest"}))
        assert cache.load("a", fp) is None, edit
    cache.path("a").write_text(json.dumps(doc))  # the file as saved: reused again
    assert cache.load("a", fp)["score"] == 0.6
