"""Every refused path names the option the user typed: one stderr line, exit status 2, nothing written.

Found by a probe of every command with bad paths (missing, a file where a folder is expected, a folder where a file
is expected, the output inside an input): ``report -o FILE`` said ``output folder FILE is a file, not a folder``,
``triage --rule missing`` said ``referral rule not found: ...`` and ``triage --rule FOLDER`` called the folder "not
found", ``evaluate --images missing`` said ``folder not found: missing``, ``infer -o images/x`` said ``output folder
... lies inside the input folder ...``, ``triage --conformal-rule missing`` and ``infer --checkpoint missing`` named
no option either. An empty path is refused while parsing (tests/cli/test_empty_paths_optionwords.py).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from tests.evaluation.test_triage import _stamp_infer_records


@pytest.fixture(scope="module")
def s(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pathwords")
    paths = write_toy_cohort(root / "toy", n_cases=5, shape=(8, 8, 8))
    _stamp_infer_records(paths["predictions"])
    evaluation = root / "eval"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert (
            cli.main(
                [
                    "evaluate",
                    "-l",
                    str(paths["labels"]),
                    "-p",
                    str(paths["predictions"]),
                    "-o",
                    str(evaluation),
                    "--no-spatial",
                    "--target-risk",
                    "0.4",
                    "--delta",
                    "0.2",
                    "--conformal",
                    "outer:fnr=0.3",
                    "-q",
                ]
            )
            == 0
        )
    return {
        **paths,
        "root": root,
        "evaluation": evaluation,
        "rule": evaluation / "referral_rule.json",
        "conformal": next(evaluation.rglob("conformal_rule.json")),
        "missing": root / "missing",
        "file": paths["shifts"],
        "out": root / "out",
    }


#: (probe, the command's arguments with {key} for a path of ``s``, the error after "monai-unc <command>: error: ")
PROBES = [
    # report: --evaluation, --output, --images
    ("report evaluation missing", "report -e {missing} -o {out}", "--evaluation folder not found: {missing}"),
    ("report evaluation a file", "report -e {file} -o {out}", "--evaluation folder {file} is a file, not a folder"),
    ("report output a file", "report -e {evaluation} -o {file}", "--output folder {file} is a file, not a folder"),
    (
        "report output in images",
        "report -e {evaluation} -o {images}/r --images {images}",
        "--output folder {images}/r lies inside the input folder {images}; choose an output outside it (inputs are "
        "never written to)",
    ),
    (
        "report output in labels",
        "report -e {evaluation} -o {labels}/r",
        "--output folder {labels}/r lies inside the input folder {labels}; choose an output outside it (inputs are "
        "never written to)",
    ),
    (
        "report images missing",
        "report -e {evaluation} -o {out} --images {missing}",
        "--images folder not found: {missing}",
    ),
    # triage: --rule, --predictions, --output, --images, --uncertainty, --conformal-rule
    (
        "triage rule missing",
        "triage -p {predictions} --rule {missing} -o {out}",
        "--rule: referral rule not found: no referral rule file at {missing} (written by monai-unc evaluate "
        "--target-risk)",
    ),
    (
        "triage rule a folder",
        "triage -p {predictions} --rule {labels} -o {out}",
        "--rule: referral rule file {labels} is a folder, not a file",
    ),
    (
        "triage rule of another kind",
        "triage -p {predictions} --rule {conformal} -o {out}",
        "--rule: referral rule {conformal} is not a monai-unc referral rule file: field 'format' is 'monai-unc "
        "conformal rule', so it is not a referral rule",
    ),
    (
        "triage predictions missing",
        "triage -p {missing} --rule {rule} -o {out}",
        "--predictions folder not found: {missing}",
    ),
    (
        "triage predictions a file",
        "triage -p {file} --rule {rule} -o {out}",
        "--predictions folder {file} is a file, not a folder",
    ),
    (
        "triage output a file",
        "triage -p {predictions} --rule {rule} -o {file}",
        "--output folder {file} is a file, not a folder",
    ),
    (
        "triage output in predictions",
        "triage -p {predictions} --rule {rule} -o {predictions}/t",
        "--output folder {predictions}/t lies inside the input folder {predictions}; choose an output outside it "
        "(inputs are never written to)",
    ),
    (
        "triage images missing",
        "triage -p {predictions} --rule {rule} -o {out} --images {missing}",
        "--images folder not found: {missing}",
    ),
    (
        "triage images a file",
        "triage -p {predictions} --rule {rule} -o {out} --images {file}",
        "--images folder {file} is a file, not a folder",
    ),
    (
        "triage uncertainty missing",
        "triage -p {predictions} --rule {rule} -o {out} --uncertainty {missing}",
        "--uncertainty folder not found: {missing}",
    ),
    (
        "triage conformal rule missing",
        "triage -p {predictions} --rule {rule} -o {out} --conformal-rule {missing}",
        "--conformal-rule: conformal rule not found: no conformal rule file at {missing} (written by monai-unc "
        "evaluate --conformal)",
    ),
    (
        "triage conformal rule a folder",
        "triage -p {predictions} --rule {rule} -o {out} --conformal-rule {labels}",
        "--conformal-rule: conformal rule file {labels} is a folder, not a file",
    ),
    (
        "triage trusted keys missing",
        "triage -p {predictions} --rule {rule} -o {out} --trusted-keys {missing}",
        "--trusted-keys {missing}: no such file or folder",
    ),
    # a product's command: conformal
    (
        "conformal rule missing",
        "conformal -p {predictions} --rule {missing} -o {out}",
        "--rule: conformal rule not found: no conformal rule file at {missing} (written by monai-unc evaluate "
        "--conformal)",
    ),
    (
        "conformal output a file",
        "conformal -p {predictions} --rule {conformal} -o {file}",
        "--output folder {file} is a file, not a folder",
    ),
    (
        "conformal images missing",
        "conformal -p {predictions} --rule {conformal} -o {out} --images {missing}",
        "--images folder not found: {missing}",
    ),
    # evaluate: --images (its other paths: tests/cli/test_option_words_optionwords.py)
    (
        "evaluate images missing",
        "evaluate -l {labels} -p {predictions} -o {out} --images {missing}",
        "--images folder not found: {missing}",
    ),
    (
        "evaluate images a file",
        "evaluate -l {labels} -p {predictions} -o {out} --images {file}",
        "--images folder {file} is a file, not a folder",
    ),
    # a product's option of evaluate: --lesion-samples (an empty one was the current folder)
    (
        "evaluate lesion samples missing",
        "evaluate -l {labels} -p {predictions} -o {out} --lesions --lesion-samples {missing}",
        "--lesion-samples folder not found: {missing}",
    ),
    (
        "evaluate lesion samples a file",
        "evaluate -l {labels} -p {predictions} -o {out} --lesions --lesion-samples {file}",
        "--lesion-samples folder {file} is a file, not a folder",
    ),
    (
        "evaluate lesion samples empty",
        "evaluate -l {labels} -p {predictions} -o {out} --lesions --lesion-samples=",
        "--lesion-samples must be a folder path, got an empty one ('')",
    ),
    # infer: --input, --output, --checkpoint, --bundle
    ("infer input missing", "infer -i {missing} -o {out} --model example", "--input folder not found: {missing}"),
    (
        "infer output a file",
        "infer -i {images} -o {file} --model example",
        "--output folder {file} is a file, not a folder",
    ),
    (
        "infer output in input",
        "infer -i {images} -o {images}/p --model example",
        "--output folder {images}/p lies inside the input folder {images}; choose an output outside it (inputs are "
        "never written to)",
    ),
    (
        "infer output under a file",
        "infer -i {images} -o {file}/p --model example",
        "--output folder {file}/p cannot be created: {file} is a file, not a folder",
    ),
    (
        "infer checkpoint missing",
        "infer -i {images} -o {out} --network {file} --checkpoint {missing}",
        "--checkpoint file not found: {missing}",
    ),
    (
        "infer bundle a file",
        "infer -i {images} -o {out} --bundle {file}",
        "--bundle folder {file} is a file, not a folder",
    ),
    (
        "keys show missing",
        "keys --show {missing}",
        "--show: key file {missing} does not exist",
    ),
    # calibrate and dicom-export name theirs too
    (
        "calibrate labels missing",
        "calibrate -i {images} -l {missing} -o {out}/c.pt --model example",
        "--labels folder not found: {missing}",
    ),
    (
        "dicom-export series a file",
        "dicom-export -p {predictions} --series {file} -o {out}",
        "--series folder {file} is a file, not a folder",
    ),
    # monitor record's positional TRIAGE: was "'x' is not a triage output folder (no triage.json)" for both
    (
        "monitor record triage missing",
        "monitor record {missing} --db {out}/monitor.db",
        "TRIAGE folder not found: {missing}",
    ),
    (
        "monitor record triage a file",
        "monitor record {file} --db {out}/monitor.db",
        "TRIAGE folder {file} is a file, not a folder",
    ),
]


@pytest.mark.parametrize("probe, words, expected", PROBES, ids=[p[0] for p in PROBES])
def test_a_refused_path_names_its_option(s, capsys, probe, words, expected):
    argv = [w.format(**s) for w in words.split()]
    listed = {k: sorted(p.name for p in s[k].iterdir()) for k in ("images", "labels", "predictions", "evaluation")}
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = cli.main(argv)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and ": warning: " not in ln]
    assert rc == 2 and err == [f"monai-unc {argv[0]}: error: {expected.format(**s)}"], (rc, err)
    assert not s["out"].exists()  # refused before any work
    assert {k: sorted(p.name for p in s[k].iterdir()) for k in listed} == listed  # nothing written into an input
