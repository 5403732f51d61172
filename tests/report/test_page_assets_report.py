"""The viewer scripts a page writes beside itself (``assets/``) never land in an input folder.

Found by hostile testing: ``monai-unc report --images OUT/assets -o OUT`` and ``monai-unc triage --images OUT/assets
-o OUT`` copied ``niivue.umd.js`` and ``viewer.js`` into the images folder (``assets/`` was not among the files the
commands checked against their inputs). Both commands now refuse it before any work.
"""

from __future__ import annotations

import pytest

from monai_unc import cli
from monai_unc.workflows import run_report, triage_with_page


def _images(out):
    images = out / "assets"
    images.mkdir(parents=True)
    (images / "c1.nii.gz").write_bytes(b"not read")
    return images


def test_report_refuses_images_in_the_pages_assets_folder(tmp_path):
    evaluation = tmp_path / "eval"
    evaluation.mkdir()
    out = tmp_path / "out"
    images = _images(out)
    with pytest.raises(ValueError, match="assets/"):
        run_report(evaluation, out, images=images)
    assert sorted(p.name for p in images.iterdir()) == ["c1.nii.gz"]


@pytest.mark.parametrize("which", ["images", "uncertainty", "predictions"])
def test_triage_refuses_an_input_in_the_pages_assets_folder(tmp_path, which):
    out = tmp_path / "out"
    inputs = {"predictions": tmp_path / "predictions", "images": None, "uncertainty": None}
    inputs["predictions"].mkdir()
    inputs[which] = _images(out)
    with pytest.raises(ValueError, match="assets/"):
        triage_with_page(inputs["predictions"], tmp_path / "referral_rule.json", out, images=inputs["images"],
                         uncertainty=inputs["uncertainty"], progress=False)
    assert sorted(p.name for p in inputs[which].iterdir()) == ["c1.nii.gz"]


def test_the_command_line_says_it_in_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    images = _images(out)
    (tmp_path / "predictions").mkdir()
    code = cli.main(["triage", "-p", str(tmp_path / "predictions"), "-r", str(tmp_path / "referral_rule.json"),
                     "-o", str(out), "--images", str(images), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "assets/" in err and "\n" not in err, err
