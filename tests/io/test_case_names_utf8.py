"""Case ids come from file names and are written to UTF-8 tables and pages: a name that is not UTF-8 is refused where
the files are listed, naming the file, instead of failing in a later write without a name."""

from __future__ import annotations

import os
import sys

import pytest

from monai_unc.io import CaseError, check_utf8_name, dicom_series_folders, list_files, list_image_cases

pytestmark = pytest.mark.skipif(sys.platform == "win32" or sys.getfilesystemencoding() != "utf-8",
                                reason="bytes file names on a UTF-8 POSIX file system")


def _touch(folder, name: bytes) -> None:
    with open(os.path.join(os.fsencode(folder), name), "wb") as f:
        f.write(b"")


def test_latin1_name_refused_with_its_bytes(tmp_path):
    _touch(tmp_path, b"h\xf4pital_seg.nii.gz")  # Latin-1 o-circumflex
    _touch(tmp_path, b"b_seg.nii.gz")
    with pytest.raises(CaseError, match=r"h\\xf4pital_seg\.nii\.gz is not valid UTF-8") as err:
        list_files(tmp_path, "_seg")
    assert str(tmp_path) in str(err.value)
    str(err.value).encode("utf-8")  # the message itself is printable


def test_utf8_names_and_other_files_pass(tmp_path):
    _touch(tmp_path, "hôpital_seg.nii.gz".encode())
    _touch(tmp_path, b"notes\xff.txt")  # not a volume: never a case id, not checked
    assert list(list_files(tmp_path, "_seg")) == ["hôpital"]
    check_utf8_name(tmp_path / "hôpital_seg.nii.gz")


def test_image_cases_and_dicom_folders(tmp_path):
    _touch(tmp_path, b"ok_0000.nii.gz")
    _touch(tmp_path, b"bad\xe9_0000.nii.gz")
    with pytest.raises(CaseError, match="not valid UTF-8"):
        list_image_cases(tmp_path)
    dicom = tmp_path / "dicom"
    os.makedirs(os.path.join(os.fsencode(dicom), b"case\xe9"))
    _touch(os.path.join(os.fsencode(dicom), b"case\xe9"), b"IM0001")
    with pytest.raises(CaseError, match=r"case\\xe9 is not valid UTF-8"):
        dicom_series_folders(dicom)


def test_cli_one_line_exit_2(tmp_path, capsys):
    from monai_unc.cli import main

    for d in ("labels", "predictions"):
        (tmp_path / d).mkdir()
    _touch(tmp_path / "labels", b"case\xff.nii.gz")
    rc = main(["evaluate", "--labels", str(tmp_path / "labels"), "--predictions", str(tmp_path / "predictions"),
               "--output", str(tmp_path / "out")])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "case\\xff.nii.gz is not valid UTF-8" in err[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
