"""``summary.json`` and ``state/rows.json`` edited by a hostile tester, read back by ``monai-unc report``.

Both are files a user may edit (docs/report.md, "Edited files"). Found by hostile testing: an unknown id in
``triage.order`` raised a KeyError traceback, a shortened order dropped cases from the page, a duplicated id showed a
case twice, ``n_cases`` 40 beside 4 rows was drawn as it was; a null Dice in ``rows.json`` raised a TypeError
traceback, a text Dice an error naming neither file nor field, and a score stored as text was printed as it was and
left out of the ranking. Each is now refused with one line naming the file and the field (exit status 2).
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import load_evaluation


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cohort_numbers")
    data = write_toy_cohort(root / "data", n_cases=5, shape=(12, 12, 12))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["evaluate", "-l", str(data["labels"]), "-p", str(data["predictions"]), "-o",
                         str(root / "eval"), "--budget", "0.4", "--target-risk", "0.6", "--delta", "0.5",
                         "--no-spatial", "--quiet"]) == 0
    return root / "eval"


def _edited(evaluation: Path, tmp_path: Path, name: str, edit: Callable[[Any], None]) -> Path:
    folder = tmp_path / "eval"
    shutil.copytree(evaluation, folder)
    path = folder / name
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    return folder


def _refused(capsys, folder: Path, tmp_path: Path) -> str:
    assert cli.main(["report", "--evaluation", str(folder), "--output", str(tmp_path / "r"), "--cases", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _triage(edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    return lambda s: edit(s["triage"])


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d.__setitem__(key, value)


SUMMARY_EDITS = [
    ("order_unknown_id", _triage(lambda t: t["order"].__setitem__(0, "ghost")), "'triage.order'", "'ghost'"),
    ("order_short", _triage(lambda t: t.__setitem__("order", t["order"][:2])), "'triage.order'", "2 of the 5"),
    ("order_duplicate", _triage(lambda t: t["order"].append(t["order"][0])), "'triage.order'", "twice"),
    ("order_reversed", _triage(lambda t: t["order"].reverse()), "'triage.order'", "from the highest"),
    ("n_cases", _set("n_cases", 40), "'n_cases'", "(5)"),
    ("referred_not_first", _triage(lambda t: t.__setitem__("referred", t["order"][-2:])), "'triage.referred'",
     "first 2"),
    ("referred_unknown", _triage(lambda t: t["referred"].__setitem__(0, "ghost")), "'triage.referred'", "'ghost'"),
    ("n_referred", _triage(lambda t: t.__setitem__("n_referred", 1)), "'triage.n_referred'", "(2)"),
    ("dice_kept", _triage(lambda t: t.__setitem__("dice_kept", 0.99)), "'triage.dice_kept'", "mean Dice"),
    ("dice_referred", _triage(lambda t: t.__setitem__("dice_referred", "0.5")), "'triage.dice_referred'", "Dice"),
    ("tied", _triage(lambda t: t.__setitem__("tied", t["order"][:2])), "'triage.tied'", "tied"),
    ("rc_referred", lambda s: s["risk_control"].__setitem__("referred", []), "'risk_control.referred'", ""),
    ("score_column", lambda s: s["score"].__setitem__("column", "dice_fg_mean"), "'score.column'", ""),
    ("undefined", lambda s: s["score"].__setitem__("undefined", []), "'score.undefined'", ""),
    ("dice_mean", lambda s: s["dice"].__setitem__("mean", 0.99), "'dice.mean'", "mean Dice"),
    ("dice_all", _triage(lambda t: t.__setitem__("dice_all", 0.99)), "'triage.dice_all'", "mean Dice"),
    ("caught", lambda s: s["failures"].__setitem__("caught_by_budget", 0), "'failures.caught_by_budget'", ""),
    ("n_failed", lambda s: s["failures"].__setitem__("n_failed", 0), "'failures.n_failed'", ""),
]


@pytest.mark.parametrize("name, edit, field, detail", SUMMARY_EDITS, ids=[e[0] for e in SUMMARY_EDITS])
def test_an_edited_summary_is_refused_naming_the_field(evaluation, tmp_path, capsys, name, edit, field, detail):
    """Found by hostile testing: triage.order, triage.referred, n_cases and the budget's Dice of an edited
    summary.json were drawn unchecked (a KeyError traceback for an unknown id, cases dropped or shown twice, a "cases"
    card of 40 beside 4 rows). They are checked against state/rows.json: one line naming the file and the field."""
    err = _refused(capsys, _edited(evaluation, tmp_path, "summary.json", edit), tmp_path)
    assert "summary.json" in err and field in err and detail in err, err


ROW_EDITS = [
    ("dice_null", _set("dice", None), "column 'dice' must be a Dice in [0, 1], got NoneType None"),
    ("dice_text", _set("dice", "abc"), "column 'dice' must be a Dice in [0, 1], got str 'abc'"),
    ("dice_above_one", _set("dice", 1.5), "column 'dice' must be a Dice"),
    ("score_text", _set("predictive_entropy_fg_mean", "0.123456789"),
     "column 'predictive_entropy_fg_mean' must be a number or null"),
    ("ece_list", _set("ece", [0.1]), "column 'ece' must be one value"),
    ("case_number", _set("case", 3), "rows[0].case"),
]


@pytest.mark.parametrize("name, edit, message", ROW_EDITS, ids=[e[0] for e in ROW_EDITS])
def test_an_edited_rows_json_is_refused_naming_the_case_and_column(evaluation, tmp_path, capsys, name, edit, message):
    """Found by hostile testing: a null Dice in state/rows.json raised a TypeError traceback, a text Dice "could not
    convert string to float" naming neither file nor field, and a text score was printed as it was and not used for
    the ranking. The state is checked when it is loaded: one line naming rows.json, the case and the column."""
    folder = _edited(evaluation, tmp_path, "state/rows.json", lambda m: edit(m["rows"][0]))
    err = _refused(capsys, folder, tmp_path)
    assert "rows.json" in err and message in err, err
    if name != "case_number":
        assert "case 'toy000'" in err


def test_a_case_twice_in_rows_json_is_refused(evaluation, tmp_path, capsys):
    """Found by hostile testing (with the edits above): a case listed twice in state/rows.json."""
    folder = _edited(evaluation, tmp_path, "state/rows.json", lambda m: m["rows"].append(dict(m["rows"][0])))
    err = _refused(capsys, folder, tmp_path)
    assert "rows.json" in err and "case 'toy000' appears twice" in err, err


def test_a_summary_of_an_older_version_gets_the_kept_dice_from_its_rows(evaluation, tmp_path):
    """A summary.json written before triage.dice_kept and triage.tied existed still reads: they come from the rows."""
    folder = _edited(evaluation, tmp_path, "summary.json",
                     _triage(lambda t: [t.pop("dice_kept"), t.pop("tied")]))
    state, summary = load_evaluation(folder)
    _, fresh = load_evaluation(evaluation)
    assert summary["triage"]["dice_kept"] == pytest.approx(fresh["triage"]["dice_kept"])
    assert summary["triage"]["tied"] == fresh["triage"]["tied"] == []
    dice = {r["case"]: r["dice"] for r in state.rows}
    kept = [dice[c] for c in fresh["triage"]["order"][fresh["triage"]["n_referred"]:]]
    assert fresh["triage"]["dice_kept"] == pytest.approx(sum(kept) / len(kept))
