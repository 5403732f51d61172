"""Column names of class names in any script (review 68).

``slug`` kept ASCII letters and digits only: ``"Ödem"`` gave ``dice_dem``, ``"café"`` ``dice_caf``, and a name in
Japanese, Chinese, Greek or Cyrillic ``dice_class``, so two such names were refused as the same column. It now keeps
the letters and digits of every script; ASCII names give the columns they always had, and an evaluation written under
the former rule is read as written.
"""

from __future__ import annotations

import random
import re
import string
import warnings

import numpy as np
import pytest

import monai_unc.evaluation.config as config_module
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.evaluation.config import dice_columns, slug
from monai_unc.evaluation.resume import case_config_fingerprint
from monai_unc.io import read_csv


def old_slug(name: str) -> str:
    """The rule before review 68, copied as the reference."""
    return re.sub(r"[^0-9a-zA-Z]+", "_", str(name)).strip("_").lower() or "class"


ASCII_NAMES = ["Left Atrium", "ET-2", "--", "", "_", "__a__", "a__b", "a_b", "_lead", "trail_", " x ", "x\ty",
               "L1/L2", "T2w (FLAIR)", "1", "007", "C3PO", "a.b.c", "Kidney [left]", "x--__--y", "UPPER", "MiXeD_42",
               "a'b\"c", "100%", "#1 tumour", "@home", "~", "a\\b", "-3.5e2", 3, 12, "plain"]


@pytest.mark.parametrize("name", ASCII_NAMES)
def test_ascii_names_keep_their_columns(name):
    assert slug(name) == old_slug(name)


def test_ascii_names_keep_their_columns_random():
    rng = random.Random(68)
    alphabet = string.printable + "_" * 10
    names = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(2000)]
    names += list(string.printable) + [a + b for a in string.punctuation for b in "aZ9_"]
    assert [slug(n) for n in names] == [old_slug(n) for n in names]


@pytest.mark.parametrize("name, expected", [
    ("Ödem", "ödem"), ("café", "café"), ("cafe\u0301", "café"),  # NFKC: one spelling of é
    ("水肿", "水肿"), ("肝臓 (左)", "肝臓_左"), ("Οίδημα", "οίδημα"), ("Отёк мозга", "отёк_мозга"),
    ("Ｔ２ Läsion", "t2_läsion"),  # full-width letters and digits as ASCII
    ("Straße", "straße"),  # lower, not casefold: the letter kept as written
    ("हिंदी", "हिंदी"),  # vowel signs (marks) kept with their letters
    ("«Ödem»", "ödem"), ("—", "class"),
])
def test_letters_of_every_script_are_kept(name, expected):
    assert slug(name) == expected


@pytest.mark.parametrize("names", [["bg", "肝臓", "腎臓"], ["bg", "Отёк", "Некроз"], ["bg", "Ödem", "Ädem"]])
def test_names_in_other_scripts_name_distinct_columns(names):
    config = EvaluationConfig(class_names=names)  # refused before: both were dice_class (dice_dem)
    config.validate()
    cols = dice_columns(3, names)
    assert len(set(cols)) == 2 and "dice_class" not in cols


def test_names_of_one_column_still_refused():
    with pytest.raises(ValueError, match="class_names"):
        EvaluationConfig(class_names=["bg", "Ödem", "ödem"])


def test_fingerprint_of_ascii_names_unchanged():
    config = EvaluationConfig(class_names=["bg", "Left Atrium"])
    assert "class_columns" not in case_config_fingerprint(config)
    assert case_config_fingerprint(EvaluationConfig(class_names=["bg", "Ödem"]))["class_columns"] == ["dice_ödem"]


def _evaluate(data, out, names):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return run_evaluate(data["labels"], data["predictions"], out,
                            EvaluationConfig(class_names=names, spatial=False))


@pytest.fixture
def old_folder(tmp_path, monkeypatch):
    """An evaluation written under the former rule (``"Ödem"`` -> ``dice_dem``)."""
    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(8, 8, 8))
    with monkeypatch.context() as m:
        m.setattr(config_module, "slug", old_slug)
        _, summary, _ = _evaluate(data, tmp_path / "eval", ["background", "Ödem"])
    assert "dice_dem" in read_csv(tmp_path / "eval" / "metrics.csv")[0]
    assert set(summary["dice"]["per_class"]) == {"dem"}
    return data, tmp_path / "eval", summary


def test_old_evaluation_read_by_report(old_folder, tmp_path):
    from monai_unc import cli
    from monai_unc.evaluation import load_evaluation, resummarize

    _, folder, summary = old_folder
    state, saved = load_evaluation(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        again = resummarize(state, saved, budget=0.5)
    assert again["dice"]["per_class"] == pytest.approx(summary["dice"]["per_class"])
    assert np.isfinite(again["dice"]["per_class"]["dem"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["report", "-e", str(folder), "-o", str(tmp_path / "r"), "--cases", "0",
                         "--budget", "0.5"]) == 0
    assert (tmp_path / "r" / "report.html").is_file()


def test_old_evaluation_resumed_gets_the_new_columns(old_folder):
    data, folder, _ = old_folder
    _, summary, _ = _evaluate(data, folder, ["background", "Ödem"])
    rows = read_csv(folder / "metrics.csv")
    assert all("dice_ödem" in r and "dice_dem" not in r for r in rows)  # no case's row kept under the old column
    assert set(summary["dice"]["per_class"]) == {"ödem"}
