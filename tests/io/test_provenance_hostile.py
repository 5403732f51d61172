"""Hostile fitted files for the strict JSON reader (io/provenance.py): constants, out-of-range and overlong numbers,
keys given twice, deep nesting, byte-order marks, lone surrogate escapes; every refusal one ``ValueError`` line
that names the file."""

from __future__ import annotations

import json

import pytest

from monai_unc.io.provenance import (
    MAX_DOCUMENT_DEPTH,
    json_depth,
    parse_untrusted_json,
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
