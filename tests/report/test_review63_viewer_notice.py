"""Pages that copy NiiVue's bundle copy its BSD-2-Clause terms beside it (review 63).

``viewer_scripts`` copied ``niivue.umd.js`` into a page's ``assets/`` without its licence, so a shared report
redistributed BSD-2-Clause code without the notice that licence requires.
"""
from __future__ import annotations

from monai_unc.io import file_sha256
from monai_unc.report.viewer import ASSETS, viewer_scripts


def test_the_notice_goes_with_every_copy_of_the_bundle(tmp_path):
    viewer_scripts(tmp_path)
    notice = tmp_path / "assets" / "NIIVUE_LICENSE.txt"
    assert notice.is_file() and file_sha256(notice) == file_sha256(ASSETS / "NIIVUE_LICENSE.txt")
    assert "BSD 2-Clause" in notice.read_text()


def test_an_edited_notice_is_restored(tmp_path):
    viewer_scripts(tmp_path)
    notice = tmp_path / "assets" / "NIIVUE_LICENSE.txt"
    notice.write_text("edited")
    viewer_scripts(tmp_path)
    assert file_sha256(notice) == file_sha256(ASSETS / "NIIVUE_LICENSE.txt")
