"""Option sweep: the DICOM options of ``monai-unc infer`` and ``nnunet-predict`` (``--uid-root``, ``--segments``,
``--study-uid new``) are refused without ``--output-format both`` / ``dicom`` in one line, exit 2, before the model
loads or anything is written (:func:`monai_unc.keys.check_dicom_options`)."""

from __future__ import annotations

import pytest

from monai_unc import cli
from monai_unc.keys import check_dicom_options

OPTIONS = [(["--uid-root", "1.2.826.0.1.3680043.10.779."], "--uid-root"),
           (["--segments", "missing.json"], "--segments"),
           (["--study-uid", "new"], "--study-uid new")]


@pytest.mark.parametrize("extra, name", OPTIONS)
@pytest.mark.parametrize("command", ["infer", "nnunet-predict"])
def test_dicom_options_without_dicom_output_are_refused(tmp_path, capsys, command, extra, name):
    """Issue: ``infer --uid-root 1.2.3`` (or ``--segments`` naming no file, ``--study-uid new``) without
    ``--output-format both`` predicted every case and wrote NIfTI files, the option ignored without a word; so did
    ``nnunet-predict``."""
    images = tmp_path / "images"
    images.mkdir()
    out = tmp_path / "out"
    if command == "infer":
        argv = ["infer", "-i", str(images), "-o", str(out), "--model", "example", "--device", "cpu", "-q"]
    else:
        argv = ["nnunet-predict", "-i", str(images), "-o", str(out), "-m", str(tmp_path / "model"), "-device", "cpu"]
    rc = cli.main([*argv, *extra])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and name in err[0] and "--output-format" in err[0], (rc, err)
    assert not out.exists()


def test_check_dicom_options():
    check_dicom_options("both", "1.2.3", "s.json", "new")
    check_dicom_options("dicom", "1.2.3", "s.json", "new")
    check_dicom_options("nifti")
    check_dicom_options("nifti", study_uid="source")
    with pytest.raises(ValueError, match=r"^--uid-root and --segments concern the DICOM objects"):
        check_dicom_options("nifti", "1.2.3", "s.json")
