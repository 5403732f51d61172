"""A Parametric Map of a series that states its body part (found by the clinical QC review 65).

Every Parametric Map was written with an empty ``Laterality`` and without the source's ``BodyPartExamined``:
``dciodvfy`` then warned on every map of a real CT (``should be absent (not empty) if an unpaired body part``), and
a PACS lost the body part its hanging protocols sort the map by. The map now states the source's body part and, as
the source, no laterality; a source stating neither keeps the empty ``Laterality`` (unknown: absent, type 2C, is an
error, empty a warning).
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

pytest.importorskip("highdicom", reason="the dicom extra")

from monai_unc.io.dicom import read_series, write_parametric_map, write_series  # noqa: E402


def _dciodvfy(path) -> list[str]:
    exe = shutil.which("dciodvfy")
    if exe is None:
        pytest.skip("dciodvfy is not installed (CI installs the Debian package 'dicom3tools')")
    r = subprocess.run([exe, str(path)], capture_output=True, text=True, timeout=60)
    return [line for line in (r.stdout + r.stderr).splitlines()
            if line.startswith(("Error", "Warning")) and "Laterality" in line]  # dciodvfy warns on any empty one


@pytest.mark.parametrize("extra, body, laterality", [
    ({"BodyPartExamined": "HEAD"}, "HEAD", None),  # an unpaired part, no laterality: none in the map
    ({"BodyPartExamined": "KNEE", "Laterality": "L"}, "KNEE", "L"),
    ({}, None, ""),  # neither: the empty (unknown) laterality, as before
])
def test_parametric_map_states_the_sources_body_part(tmp_path, extra, body, laterality):
    import pydicom

    write_series(np.full((5, 4, 3), 40.0), np.diag([0.9, 0.9, 3.0, 1.0]), tmp_path / "s", extra=extra)
    series = read_series(tmp_path / "s")
    if "Laterality" not in extra:  # write_series states an empty one; a scanner's CT of the head states none
        for f in series.files:
            ds = pydicom.dcmread(f)
            if extra:
                del ds.Laterality
            ds.save_as(f)
        series = read_series(tmp_path / "s")
    path = write_parametric_map(np.linspace(0, 1, 60, dtype=np.float32).reshape(5, 4, 3), series,
                                tmp_path / "pe.dcm", "predictive_entropy")
    pm = pydicom.dcmread(path)
    assert pm.get("BodyPartExamined") == body
    assert pm.get("Laterality") == laterality
    found = _dciodvfy(path)
    assert not [line for line in found if line.startswith("Error")], found
    if body is not None:  # no warning either: the laterality is the source's
        assert found == []


@pytest.mark.parametrize("extra, body, laterality", [
    # a source's lowercase or padded body part (a CS value of the wrong case) was copied as it stood: dciodvfy
    # reported invalid characters in every map, and with the body part unrecognised, the absent Laterality as an
    # error too (hostile review of review 65)
    ({"BodyPartExamined": " head "}, "HEAD", None),
    ({"BodyPartExamined": "KNEE", "Laterality": "l"}, "KNEE", "L"),
    # no code string even in capitals (a character CS lacks, over 16 characters): no body part, unknown laterality
    ({"BodyPartExamined": "Kopf/Hals"}, None, ""),
    ({"BodyPartExamined": "HEAD AND NECK AND CHEST"}, None, ""),
    ({"BodyPartExamined": "KNEE", "Laterality": "left"}, "KNEE", ""),  # not R or L: unknown
])
def test_parametric_map_states_a_valid_body_part(tmp_path, extra, body, laterality):
    import pydicom

    write_series(np.full((5, 4, 3), 40.0), np.diag([0.9, 0.9, 3.0, 1.0]), tmp_path / "s")
    for f in read_series(tmp_path / "s").files:  # the source's values as a scanner wrote them (write_series checks)
        ds = pydicom.dcmread(f)
        if "Laterality" not in extra:
            del ds.Laterality
        for key, value in extra.items():
            setattr(ds, key, value)
        ds.save_as(f)
    path = write_parametric_map(np.linspace(0, 1, 60, dtype=np.float32).reshape(5, 4, 3), read_series(tmp_path / "s"),
                                tmp_path / "pe.dcm", "predictive_entropy")
    pm = pydicom.dcmread(path)
    assert pm.get("BodyPartExamined") == body
    assert pm.get("Laterality") == laterality
    found = _dciodvfy(path)
    assert not [line for line in found if line.startswith("Error")], found
