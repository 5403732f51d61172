"""An evaluation folder whose recorded class names one column since NFKC (review 69).

Found by review 69: an evaluation written by an earlier version (columns of ASCII letters and digits only) with the
class names ``"T2"`` and ``"Ｔ２"`` (``dice_t2`` and ``dice_class`` there) is refused on read, as it must be (both are
``dice_t2`` now), but the message listed every name and column, said neither which two names met nor why, nor what to
do with the folder.
"""

from __future__ import annotations

import json
import warnings

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, load_evaluation, run_evaluate
from monai_unc.evaluation.cohort import config_from_summary


def test_the_refusal_names_the_two_names_their_column_and_what_to_do():
    summary = {"config": {"class_names": ["bg", "T2", "flair", "Ｔ２"], "num_classes": 4}}
    with pytest.raises(ValueError) as err:
        config_from_summary(summary, [])
    text = str(err.value)
    assert "'T2' (class 1) and 'Ｔ２' (class 3) are both dice_t2" in text
    assert "NFKC" in text and "earlier version" in text
    assert "evaluate the cases again into a new folder" in text and "--class-names" in text
    # a new evaluation is told the same pair, and to name each class apart (not of any folder)
    with pytest.raises(ValueError, match=r"'T2' \(class 1\) and 'Ｔ２' \(class 3\) are both dice_t2.*name of its own"):
        EvaluationConfig(class_names=["bg", "T2", "flair", "Ｔ２"])


def test_report_of_such_a_folder_names_the_file(tmp_path, capsys):
    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(8, 8, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_evaluate(data["labels"], data["predictions"], tmp_path / "eval", EvaluationConfig(spatial=False))
    # as an earlier version wrote it: the names recorded, the class column dice_class (its ASCII-only slug of "Ｔ２")
    path = tmp_path / "eval" / "summary.json"
    summary = json.loads(path.read_text())
    summary["config"]["class_names"] = summary["class_names"] = ["T2", "Ｔ２"]
    path.write_text(json.dumps(summary))
    rows = tmp_path / "eval" / "state" / "rows.json"
    rows.write_text(rows.read_text().replace('"dice_1"', '"dice_class"'))
    with pytest.raises(ValueError, match="summary.json: 'config': .*'T2' \\(class 0\\) and 'Ｔ２' \\(class 1\\)"):
        load_evaluation(tmp_path / "eval")
    assert cli.main(["report", "--evaluation", str(tmp_path / "eval"), "--output", str(tmp_path / "r"),
                     "--cases", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and "new folder" in err


def test_three_names_of_one_column_and_an_ascii_clash_are_said_as_they_are():
    from monai_unc.evaluation import EvaluationConfig

    with pytest.raises(ValueError) as e:
        EvaluationConfig(class_names=["bg", "a b", "a-b", "a_b"])
    text = str(e.value)
    assert "'a b' (class 1) and 'a-b' (class 2) and 'a_b' (class 3) are all dice_a_b" in text
    assert "full-width" not in text and "lower-cased, every other run of characters one '_'" in text


def test_an_old_folders_regions_of_one_column_say_what_to_do():
    """Region names that an earlier version's ASCII-only columns told apart ("WT²": WT, "WT2": WT2) and that now
    give one column: refused with what the class names' refusal says (the folder, why, what to do)."""
    from monai_unc.evaluation.cohort import config_from_summary

    with pytest.raises(ValueError) as e:
        config_from_summary({"config": {"regions": {"WT²": [1, 2, 3], "WT2": [1, 2]}}}, [])
    text = str(e.value)
    assert text.startswith("summary.json: regions: the region names ['WT²', 'WT2'] give the same column names")
    assert "An earlier version" in text and "--regions giving each region a name of its own" in text
