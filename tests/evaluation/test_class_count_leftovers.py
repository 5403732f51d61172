"""``--num-classes`` / ``--class-names`` that the probabilities contradict: one refusal before the first case.

Found by hostile testing: ``evaluate --class-names bg a b c`` on two-class predictions evaluated every case, each
failing with the same message and listed in ``failures.json``, instead of one line and exit status 2.
"""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, check_class_count
from monai_unc.io import CaseFiles, match_cases


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_toy_cohort(tmp_path_factory.mktemp("toy"), n_cases=3, shape=(10, 10, 10))


@pytest.mark.parametrize("options, match", [
    (["--class-names", "bg", "a", "b", "c"], "--class-names has 4 names for the 2 classes"),
    (["--class-names", "bg"], "--class-names has 1 names for the 2 classes"),
    (["--num-classes", "4"], "--num-classes 4: case 'toy000' has 2 classes"),
])
def test_evaluate_refuses_a_wrong_class_count_before_the_first_case(toy, tmp_path, capsys, options, match):
    out = tmp_path / "out"
    argv = ["evaluate", "-l", str(toy["labels"]), "-p", str(toy["predictions"]), "-o", str(out), "--quiet", *options]
    status = cli.main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert status == 2 and len(err) == 1 and match in err[0], err
    assert not (out / "failures.json").exists() and not (out / "state").exists()


def test_evaluate_takes_the_right_class_count(toy, tmp_path, capsys):
    argv = ["evaluate", "-l", str(toy["labels"]), "-p", str(toy["predictions"]), "-o", str(tmp_path / "out"),
            "--quiet", "--class-names", "bg", "lesion", "--num-classes", "2"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    header = (tmp_path / "out" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "dice_lesion" in header


def test_check_class_count_leaves_unreadable_and_segmentation_only_cases_to_the_loop(toy, tmp_path):
    cases = match_cases(toy["labels"], toy["predictions"])
    broken = tmp_path / "broken_probs.npz"
    broken.write_bytes(b"not a zip")
    first = CaseFiles(cases[0].case_id, cases[0].label, cases[0].seg, broken, {}, None)
    check_class_count([first, *cases[1:]], EvaluationConfig(num_classes=4))  # the loop reports the file
    seg_only = [CaseFiles(c.case_id, c.label, c.seg, None, {}, None) for c in cases]
    check_class_count(seg_only, EvaluationConfig(num_classes=4))  # the count is num_classes' own
    with pytest.raises(ValueError, match="--num-classes 3"):
        check_class_count(cases, EvaluationConfig(num_classes=3))
    assert np.all([c.probs is not None for c in cases])


def _three_class_copy(src, dst):
    """The cohort's predictions with the background split in two classes (3 channels) and their entropy maps."""
    import nibabel as nib

    dst.mkdir()
    for f in sorted(src.glob("*_probs.nii.gz")):
        img = nib.load(f)
        a = np.asarray(img.dataobj).astype(np.float64)
        b = np.concatenate([a[..., :1] / 2, a[..., :1] / 2, a[..., 1:]], axis=-1)
        nib.save(nib.Nifti1Image(b.astype(np.float32), img.affine), dst / f.name)
        h = -(b * np.log(np.clip(b, 1e-12, 1))).sum(-1)
        nib.save(nib.Nifti1Image(h.astype(np.float32), img.affine),
                 dst / f.name.replace("_probs", "_predictive_entropy"))
        seg = f.name.replace("_probs", "_seg")
        nib.save(nib.load(src / seg), dst / seg)


def test_triage_refuses_predictions_of_another_class_count_before_the_first_case(tmp_path, capsys):
    toy = write_toy_cohort(tmp_path / "toy", n_cases=8, shape=(10, 10, 10))
    ev = tmp_path / "ev"
    status = cli.main(["evaluate", "-l", str(toy["labels"]), "-p", str(toy["predictions"]), "-o", str(ev), "--quiet",
                       "--target-risk", "0.5"])
    assert status == 0 and (ev / "referral_rule.json").is_file(), capsys.readouterr().err
    capsys.readouterr()
    three = tmp_path / "three"
    _three_class_copy(toy["predictions"], three)
    out = tmp_path / "triage"
    status = cli.main(["triage", "-p", str(three), "-r", str(ev / "referral_rule.json"), "-o", str(out), "--quiet",
                       "--allow-unsigned", "--allow-mismatch"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip() and "--allow-unsigned:" not in line]
    assert status == 2 and len(err) == 1, err
    assert "the rule is for 2 classes, but case 'toy000' has 3" in err[0]
    assert not (out / "failures.json").exists()
    # the rule's own predictions are triaged
    assert cli.main(["triage", "-p", str(toy["predictions"]), "-r", str(ev / "referral_rule.json"), "-o",
                     str(tmp_path / "ok"), "--quiet", "--allow-unsigned"]) == 0
