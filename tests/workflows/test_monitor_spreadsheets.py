"""``monai-unc monitor`` on tables a person saved from a spreadsheet (found by hostile testing): a decimal comma in a
comma-separated labels table, Excel's byte-order mark, a column given twice, and a sites table whose case ids differ
from the triage run's only by a trailing space or by Unicode normalization (macOS writes file names in NFD)."""

from __future__ import annotations

import unicodedata

import pytest

from monai_unc import cli
from monai_unc.monitoring import MonitorStore

from ..monitoring._stream import make_rule, write_triage


def _main(argv, capsys):
    capsys.readouterr()
    rc = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _store(tmp_path, capsys, cases, sites=None):
    rule = make_rule([0.1, 0.2, 0.3], target=0.2)  # risk "failure", failure_dice 0.8
    folder = write_triage(tmp_path / "triage", rule, [{"case": c, "score": 0.15} for c in cases])
    db = tmp_path / "store.sqlite"
    rc, _, err = _main(["monitor", "record", folder, "--db", db, *(["--sites", sites] if sites else [])], capsys)
    assert rc == 0, err
    return db


def _cases(db):
    with MonitorStore(str(db), create=False) as store:
        return {c["case_id"]: c for c in store.cases()}


def test_a_decimal_comma_in_a_comma_separated_labels_table_is_refused(tmp_path, capsys):
    """'Müller,0,85' under 'case,dice' read the Dice as 0.0 (the cell '85' dropped): a failure, loss 1."""
    db = _store(tmp_path, capsys, ["Müller", "b"])
    labels = tmp_path / "labels.csv"
    labels.write_text("case,dice\nMüller,0,85\nb,0.9\n", encoding="utf-8")
    rc, _, err = _main(["monitor", "label", "--labels", labels, "--db", db], capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "labels.csv: line 2 has 3 cells" in lines[0], err
    assert all(c["loss"] is None for c in _cases(db).values())  # nothing recorded


def test_a_decimal_comma_under_a_header_ending_in_a_separator_is_refused(tmp_path, capsys):
    """'Müller,0,85' under 'case,dice,' (a spreadsheet's once-used column): the 85 went to the unnamed column and the
    Dice 0.0 was recorded, a failure, loss 1 instead of 0.15 (found by a review of read_table)."""
    db = _store(tmp_path, capsys, ["Müller", "b"])
    labels = tmp_path / "labels.csv"
    labels.write_text("case,dice,\nMüller,0,85\nb,0.9,\n", encoding="utf-8")
    rc, _, err = _main(["monitor", "label", "--labels", labels, "--db", db], capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "labels.csv: line 2 has 3 cells" in lines[0], err
    assert all(c["loss"] is None for c in _cases(db).values())  # nothing recorded


def test_a_byte_order_mark_keeps_the_first_column(tmp_path, capsys):
    """Excel's "CSV UTF-8": the first column was read as '\\ufefffailure' and dropped without a word (the loss then
    came from the Dice: 0 instead of the audited failure's 1); a first column 'case' was refused as missing. Case a
    has its failure only (a Dice beside it must agree with it since the label agreement check)."""
    db = _store(tmp_path, capsys, ["a", "b"])
    labels = tmp_path / "labels.csv"
    labels.write_text("\ufefffailure,case,dice\r\n1,a,\r\n0,b,0.95\r\n", encoding="utf-8")
    rc, _, err = _main(["monitor", "label", "--labels", labels, "--db", db], capsys)
    assert rc == 0, err
    got = _cases(db)
    assert (got["a"]["failure"], got["a"]["loss"]) == (1, 1.0) and (got["b"]["failure"], got["b"]["loss"]) == (0, 0.0)
    db2 = _store(tmp_path / "two", capsys, ["a"])
    labels.write_text("\ufeffcase,dice\r\na,0.5\r\n", encoding="utf-8")
    rc, _, err = _main(["monitor", "label", "--labels", labels, "--db", db2], capsys)
    assert rc == 0 and _cases(db2)["a"]["loss"] == 1.0, err


def test_a_column_given_twice_is_refused(tmp_path, capsys):
    """The csv module kept the last of two 'dice' columns: 0.5 instead of 0.95, loss 1."""
    db = _store(tmp_path, capsys, ["a"])
    labels = tmp_path / "labels.csv"
    labels.write_text("case,dice,failure,dice\na,0.95,,0.5\n", encoding="utf-8")
    rc, _, err = _main(["monitor", "label", "--labels", labels, "--db", db], capsys)
    assert rc == 2 and "the column 'dice' is given twice" in err, err
    assert _cases(db)["a"]["loss"] is None


def test_a_sites_row_matches_its_case_up_to_spaces_and_normalization(tmp_path, capsys):
    """A case 'Müller' of a macOS file name (NFD) and a case 'b' listed as 'b ' went to the site 'unknown'."""
    nfd = unicodedata.normalize("NFD", "Müller")
    sites = tmp_path / "sites.csv"
    sites.write_text("case,site\nMüller,Klinik Nord\nb ,Klinik Nord\nc,Klinik Süd\n", encoding="utf-8")
    db = _store(tmp_path, capsys, [nfd, "b", "c"], sites=sites)
    assert {k: c["site"] for k, c in _cases(db).items()} == {nfd: "Klinik Nord", "b": "Klinik Nord",
                                                              "c": "Klinik Süd"}


@pytest.mark.parametrize("rows", ["Müller,A\nMu\u0308ller,B\n", "a,A\na ,B\n"], ids=["nfc_nfd", "space"])
def test_a_sites_table_listing_one_case_twice_up_to_normalization_is_refused(tmp_path, capsys, rows):
    sites = tmp_path / "sites.csv"
    sites.write_text("case,site\n" + rows, encoding="utf-8")
    folder = write_triage(tmp_path / "triage", make_rule([0.1, 0.2]), [{"case": "a", "score": 0.1}])
    rc, _, err = _main(["monitor", "record", folder, "--db", tmp_path / "s.sqlite", "--sites", sites], capsys)
    assert rc == 2 and "is listed twice" in err and len(err.strip().splitlines()) == 1, err


def test_a_header_cell_with_a_trailing_space_is_its_column(tmp_path, capsys):
    """'failure ' was another column than 'failure': the audited failure was ignored without a word and the loss came
    from the Dice (0.9 >= 0.8: loss 0 instead of 1)."""
    db = _store(tmp_path, capsys, ["a"])
    labels = tmp_path / "labels.csv"
    labels.write_text("case,failure ,dice\na,1,\n", encoding="utf-8")
    rc, _, err = _main(["monitor", "label", "--labels", labels, "--db", db], capsys)
    assert rc == 0, err
    got = _cases(db)["a"]
    assert (got["failure"], got["loss"]) == (1, 1.0)


def test_column_names_in_another_letter_case(tmp_path, capsys):
    """'Case,Failure,Dice' from a spreadsheet: 'Failure' was another column than 'failure', the audited failure
    ignored and the loss taken from the Dice (0 instead of 1); 'failure' and 'Failure' together are refused."""
    db = _store(tmp_path, capsys, ["a"])
    labels = tmp_path / "labels.csv"
    labels.write_text("Case,Failure,Dice\na,1,\n", encoding="utf-8")
    rc, _, err = _main(["monitor", "label", "--labels", labels, "--db", db], capsys)
    assert rc == 0, err
    assert (_cases(db)["a"]["failure"], _cases(db)["a"]["loss"]) == (1, 1.0)
    labels.write_text("case,failure,Failure\na,1,0\n", encoding="utf-8")
    rc, _, err = _main(["monitor", "label", "--labels", labels, "--db", db], capsys)
    assert rc == 2 and "the column 'failure' is given twice (as 'Failure')" in err, err
