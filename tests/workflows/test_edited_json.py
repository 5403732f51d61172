"""Hand-edited JSON files of the command line (found by hostile testing): a ``--regions`` or ``--segments`` file
nested deeper than the json module recurses crashed with a ``RecursionError`` traceback (exit 1) instead of one
line (exit 2); a ``--regions`` file saved by Notepad with a byte-order mark was refused as not JSON."""

from __future__ import annotations

import pytest

from monai_unc import cli
from monai_unc.workflows.prepare import read_region_spec

DEEP = "[" * 100000 + "]" * 100000


def test_a_deeply_nested_regions_file_is_one_line(tmp_path, capsys):
    (tmp_path / "regions.json").write_text('{"WT": ' + DEEP + "}")
    for d in ("labels", "pred"):
        (tmp_path / d).mkdir()
    capsys.readouterr()
    rc = cli.main(["evaluate", "--labels", str(tmp_path / "labels"), "--predictions", str(tmp_path / "pred"),
                   "--output", str(tmp_path / "ev"), "--regions", str(tmp_path / "regions.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--regions" in err[0] and "nested too deeply" in err[0], err[-3:]


def test_a_regions_file_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "regions.json"
    path.write_text('\ufeff{"WT": [1, 2, 3], "Ödem": [2]}', encoding="utf-8")
    assert read_region_spec(str(path)) == {"WT": (1, 2, 3), "Ödem": (2,)}


def test_a_long_regions_text_is_cut_in_the_message():
    with pytest.raises(ValueError) as err:
        read_region_spec("{" + "x" * 5000)
    assert len(str(err.value)) < 600


def test_a_deeply_nested_segments_file_is_refused_by_name(tmp_path):
    pytest.importorskip("highdicom", reason="needs the dicom extra")
    from monai_unc.io.dicom import read_segment_specs

    path = tmp_path / "segments.json"
    path.write_text('{"1": ' + DEEP + "}")
    with pytest.raises(ValueError, match=r"segments file .*segments\.json is not readable JSON: it is nested 100001 "
                                         "levels deep"):
        read_segment_specs(path, [1])
