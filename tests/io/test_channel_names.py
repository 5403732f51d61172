"""nnU-Net's channel naming ``<case>_NNNN``: one rule (:func:`monai_unc.io.channel_name`) for files and folders."""

from __future__ import annotations

import pytest

from monai_unc.io import channel_name


@pytest.mark.parametrize(("name", "expected"), [
    ("br01_0000", ("br01", 0)),
    ("br01_0013", ("br01", 13)),
    ("a_b_0001", ("a_b", 1)),  # the last suffix
    ("x_0000_0002", ("x_0000", 2)),
    ("_0000_0001", ("_0000", 1)),
    ("_0000", None),  # no case id
    ("br01", None),
    ("br01_000", None),
    ("br01_00000", None),  # five digits
    ("br01_0000\n", None),  # a line break at the end (re's $ matched before it)
    ("br01_\u0660\u0660\u0660\u0660", None),  # Arabic-Indic digits
    ("br01_0000.nii.gz", None),  # a file name, not its stem
])
def test_channel_name(name, expected):
    assert channel_name(name) == expected
