"""What ``evaluate --lesions`` refuses before any work: ``metrics.csv`` columns that would be one name, 2-D labels.

Found by hostile testing: the lesion fields include ``ndsc`` and ``ndsc_raac``, so a class or region whose column
suffix is ``raac_<X>`` wrote ``ndsc_raac_<X>``, the R-AAC column of ``<X>``, and one value overwrote the other in
``metrics.csv`` (exit 0).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from monai_unc.cli import main
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.lesions import CASE_FIELDS, lesion_column_names, lesion_columns
from monai_unc.products.lesions import LesionMetrics


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_toy_cohort(tmp_path_factory.mktemp("toy") / "data", n_cases=2, shape=(8, 8, 8))


def test_distinct_tasks_give_every_column_once():
    cols = lesion_column_names(["WT", "TC", "raac"])
    assert len(cols) == len(set(cols)) == 3 * len(CASE_FIELDS)
    assert cols[:len(CASE_FIELDS)] == [f"{f}_WT" for f in CASE_FIELDS]


@pytest.mark.parametrize("tasks", [["x", "raac_x"], ["raac_x", "x"], ["a", "raac_1", "1"]])
def test_colliding_tasks_are_refused_by_name(tasks):
    with pytest.raises(ValueError, match=r"ndsc_raac_\w+\): rename one of them"):
        lesion_column_names(tasks)


@pytest.mark.parametrize("config", [
    SimpleNamespace(regions={"x": [1, 3], "raac x": [1, 2, 3], "ET": [3]}, class_names=None),
    SimpleNamespace(regions=None, class_names=["bg", "x", "Raac-X"]),
])
def test_the_product_refuses_them_before_any_work(config):
    with pytest.raises(ValueError, match="ndsc_raac_"):
        LesionMetrics().check_inputs([], {}, config)
    # the background's name is no task: a background named "raac x" beside class "x" is fine
    LesionMetrics().check_inputs([], {}, SimpleNamespace(regions=None, class_names=["raac x", "x"]))


def test_the_state_of_a_colliding_case_is_refused_not_overwritten():
    import numpy as np

    from monai_unc.evaluation.lesions import LesionState

    arrays = {f"case.{t}.{f}": np.array([float(i)]) for i, t in enumerate(("x", "raac_x")) for f in CASE_FIELDS}
    with pytest.raises(ValueError, match="one name"):
        lesion_columns(LesionState(arrays))


def test_evaluate_refuses_them_in_one_line(toy, tmp_path, capsys):
    rc = main(["evaluate", "-l", str(toy["labels"]), "-p", str(toy["predictions"]), "-o", str(tmp_path / "ev"),
               "--lesions", "-q", "--regions", '{"x": [1], "raac_x": [1]}'])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and not ln.startswith("warning")]
    assert rc == 2 and len(err) == 1, (rc, err)
    assert "the columns of 'raac_x' and 'x' are one name (ndsc_raac_x)" in err[0], err
    assert not (tmp_path / "ev" / "metrics.csv").exists()


def test_two_dimensional_labels_are_refused_before_any_work(tmp_path, capsys):
    """Found by hostile testing: each 2-D case failed when read (exit 1, ``failures.json``) after the 3-D ones were
    evaluated; lesion-wise metrics need 3-D volumes, which the NIfTI headers tell before any work."""
    import nibabel as nib
    import numpy as np

    labels, pred = tmp_path / "labels", tmp_path / "pred"
    labels.mkdir()
    pred.mkdir()
    for case in ("a", "b"):
        g = np.zeros((8, 8), np.uint8)
        g[2:5, 2:5] = 1
        nib.save(nib.Nifti1Image(g, np.eye(4)), labels / f"{case}.nii.gz")
        nib.save(nib.Nifti1Image(g.astype(np.int16), np.eye(4)), pred / f"{case}_seg.nii.gz")
        nib.save(nib.Nifti1Image(g.astype(np.float32) / 2, np.eye(4)), pred / f"{case}_predictive_entropy.nii.gz")
    rc = main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(tmp_path / "ev"), "--lesions", "-q"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and not ln.startswith("warning")]
    assert rc == 2 and len(err) == 1 and "need 3-D volumes: the label of 2 case(s) is 2-D (a, b)" in err[0], err
    assert not (tmp_path / "ev" / "failures.json").exists()
    # without --lesions the 2-D cases are evaluated
    assert main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(tmp_path / "ev2"), "-q", "--num-classes",
                 "2"]) == 0
