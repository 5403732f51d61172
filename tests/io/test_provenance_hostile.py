"""Hostile fitted files for the strict JSON reader (io/provenance.py): constants, out-of-range and overlong numbers,
keys given twice, deep nesting, byte-order marks, lone surrogate escapes; every refusal one ``ValueError`` line
that names the file. The depth check takes time linear in the text (it was quadratic on unclosed escaped quotes) and
every entry to the reader is size-capped."""

from __future__ import annotations

import json
import time

import pytest

from monai_unc.io import provenance
from monai_unc.io.provenance import (
    MAX_DOCUMENT_DEPTH,
    compare_fingerprints,
    json_depth,
    parse_untrusted_json,
    prediction_fingerprint,
    read_checked_json,
    rule_digest,
)


@pytest.mark.parametrize("text, why", [
    ('{"a": 1, "a": 2}', "given twice"),
    ('{"a": {"b": 1, "b": 1}}', "given twice"),
    ("[NaN]", "constant NaN"),
    ("[-Infinity]", "constant -Infinity"),
    ("[1e400]", "out of range"),
    ("[-1e400]", "out of range"),
    ("1" * 101, "101 digits"),
    ("[" * (MAX_DOCUMENT_DEPTH + 1) + "]" * (MAX_DOCUMENT_DEPTH + 1), "nested 65 levels"),
    ("\ufeff{}", "BOM"),
    ('{"a": 1} trailing', "Extra data"),
    ("", "Expecting value"),
    ('"\\"[[[', "Unterminated string"),
    ('{"\\ud800": 1}', "lone surrogate"),
    ('["x\\uDFFF"]', "lone surrogate"),
])
def test_hostile_text_is_one_value_error_naming_the_source(text, why):
    with pytest.raises(ValueError, match=r"^the file x is not readable JSON: .*" + why):
        parse_untrusted_json(text, "the file x")


def test_what_strict_json_allows():
    assert parse_untrusted_json("[" * MAX_DOCUMENT_DEPTH + "]" * MAX_DOCUMENT_DEPTH, "x") is not None
    assert parse_untrusted_json('["\\ud83d\\ude00", "\\\\ud800", "]]]"]', "x") == ["😀", "\\ud800", "]]]"]
    assert parse_untrusted_json("[1.0e-400, -0, 1E5]", "x") == [0.0, 0, 100000.0]
    assert json_depth('{"a": "[[[[", "b": [["\\"]"]]}') == 3


def write_rule(path, body):
    doc = {"format": "f", "format_version": 1, **body}
    doc["digest"] = rule_digest(doc)
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return doc


def test_a_lone_surrogate_in_a_rule_file_names_the_file(tmp_path):
    """Regression: a rule file holding ``"\\ud800"`` parsed, then its digest failed with a bare
    "'utf-8' codec can't encode character" that named no file."""
    path = tmp_path / "rule.json"
    write_rule(path, {"x": "a"})
    path.write_text(path.read_text().replace('"a"', '"\\ud800"'))
    with pytest.raises(ValueError, match=r"^rule .*rule.json is not readable JSON: it holds a lone surrogate"):
        read_checked_json(path, fmt="f", versions=[1], what="rule", written_by="w")


def test_edited_truncated_and_foreign_rule_files(tmp_path):
    path = tmp_path / "rule.json"
    doc = write_rule(path, {"x": "ünï", "v": [0.1, 2]})
    assert read_checked_json(path, fmt="f", versions=[1], what="rule", written_by="w") == doc
    path.write_text(path.read_text(encoding="utf-8").replace("0.1", "0.2"), encoding="utf-8")
    with pytest.raises(ValueError, match="does not match its digest"):
        read_checked_json(path, fmt="f", versions=[1], what="rule", written_by="w")
    text = json.dumps(doc)
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match="is not readable JSON"):
        read_checked_json(path, fmt="f", versions=[1], what="rule", written_by="w")
    path.write_bytes(b'{"format": "f", "x": "\xff"}')
    with pytest.raises(ValueError, match="not UTF-8"):
        read_checked_json(path, fmt="f", versions=[1], what="rule", written_by="w")
    write_rule(path, {"x": 1})
    with pytest.raises(ValueError, match="format_version 1 is not supported"):
        read_checked_json(path, fmt="f", versions=[2], what="rule", written_by="w")
    with pytest.raises(FileNotFoundError, match="rule not found"):
        read_checked_json(tmp_path / "none.json", fmt="f", versions=[1], what="rule", written_by="w")


def _infer_folder(path, method, samples, num_samples):
    """A prediction folder's records as monai-unc infer writes them (no images: the fingerprint reads records)."""
    path.mkdir()
    settings = {"model": "network: UNet", "method": method, "samples": samples, "roi": [8, 8, 8], "overlap": 0.25,
                "intensity": "none", "measures": ["predictive_entropy"], "seed": 0, "activation": "softmax",
                "checkpoints": ["m.pt"], "tta_noise": 0.0, "ratein_target": 0.1, "dropout": None}
    (path / "infer.json").write_text(json.dumps({"settings": settings}))
    (path / "c1.json").write_text(json.dumps({"method": method, "num_samples": num_samples, "mi_meaning": "x"}))
    return prediction_fingerprint(path)


@pytest.mark.parametrize("method, rule_draws, pred_draws, n, old_rule, status", [
    ("ssn+tta", 50, 2, 8, False, "mismatch"),  # the SSN's draws are averaged into one sample: not in num_samples
    ("ssn+ensemble", 50, 2, 2, False, "mismatch"),
    ("ssn+tta", 10, 10, 8, False, "match"),
    ("ssn+tta", 10, 10, 8, True, "mismatch"),  # a rule that did not record the draws: unknown, the safe side
    ("mcdropout+ssn", 3, 3, 3, True, "match"),  # an older rule whose num_samples pins the draws still matches
    ("ssn", 4, 4, 4, True, "match"),
    ("tta", 2, 50, 8, False, "match"),  # --samples changes nothing without a source that draws it
])
def test_fingerprint_records_the_draws_per_source(tmp_path, method, rule_draws, pred_draws, n, old_rule, status):
    rule = _infer_folder(tmp_path / "cal", method, rule_draws, n)
    pred = _infer_folder(tmp_path / "new", method, pred_draws, n)
    if old_rule:
        rule.pop("samples_per_source", None)
    assert compare_fingerprints(rule, pred)[0] == status


# ------------------------------------------------------------------ the depth check is linear, the size capped
def _depth(value) -> int:
    """The nesting depth of parsed JSON (the reference)."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@pytest.mark.parametrize("text", [
    '{"a": "[[[[", "b": [["\\"]"]]}', '["\\\\", ["\\\\\\"[", {"k\\"{": [[]]}]]', '"\\\\"', "[[1], [[2]], 3]",
    '{"a\\\\": "\\\\\\\\", "b": [{}]}', "0", "[]", '"]]]["',
])
def test_json_depth_is_the_depth_of_the_parsed_value(text):
    assert json_depth(text) == _depth(json.loads(text))


def test_the_depth_check_is_linear_on_unclosed_escaped_quotes():
    """``\\"`` repeated took 0.58 s for 16 KB and 2.6 s for 32 KB (4x per doubling: a few MB ran for hours) before
    json.loads ever saw it. 4 MB now take well under a second; the bound is generous for a loaded machine."""
    for text in ('\\"' * 2_000_000, '"\\' * 2_000_000, '"' * 4_000_000, '"a\\"[' * 800_000):
        start = time.process_time()  # this process's CPU time: not the wall clock, which a loaded machine stretches
        with pytest.raises(ValueError, match="^x is not readable JSON"):
            parse_untrusted_json(text, "x")
        assert time.process_time() - start < 20


def test_every_entry_to_the_strict_reader_is_size_capped(monkeypatch, tmp_path):
    monkeypatch.setattr(provenance, "MAX_DOCUMENT_BYTES", 100)
    with pytest.raises(ValueError, match=r"^x is not readable JSON: it has 101 bytes \(at most 100\)"):
        provenance.decode_untrusted_json(b" " * 100 + b"1", "x")
    with pytest.raises(ValueError, match=r"^x is not readable JSON: it has 101 characters \(at most 100\)"):
        parse_untrusted_json(" " * 100 + "1", "x")
    assert provenance.decode_untrusted_json(b" " * 99 + b"1", "x") == 1
