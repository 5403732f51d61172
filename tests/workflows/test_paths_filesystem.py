"""A file given where a folder is expected and a folder where a file is: one line naming the path, exit 2.

Found by hostile testing of real-world folders: ``infer -i scan.nii.gz`` said ``--input folder not found:
scan.nii.gz`` (it is there: it is a file), ``--checkpoint models/`` said ``checkpoint file not found`` and
``--shifts tables/`` said ``shift table not found``.
"""

from __future__ import annotations

import os

import pytest

from monai_unc import cli
from monai_unc.evaluation.config import read_shifts
from monai_unc.io import check_entry_kind


def _one_error_line(capsys, command):
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith(f"monai-unc {command}: error:")]
    assert len(errors) == 1, err
    assert "Traceback" not in "\n".join(err)
    return errors[0]


@pytest.mark.parametrize("command", ["infer", "calibrate", "report", "evaluate"])
def test_a_file_given_for_an_input_folder_is_named_as_a_file(tmp_path, capsys, command):
    scan = tmp_path / "scan.nii.gz"
    scan.write_bytes(b"not a folder")
    (tmp_path / "net.json").write_text('{"_target_": "monai.networks.nets.UNet"}')
    labels = tmp_path / "labels"
    labels.mkdir()
    (labels / "a.nii.gz").write_bytes(b"")
    argv = {
        "infer": ["infer", "-i", str(scan), "-o", str(tmp_path / "out"), "--model", "example"],
        "calibrate": ["calibrate", "-i", str(scan), "-l", str(labels), "--network", str(tmp_path / "net.json"),
                      "--checkpoint", str(scan), "-o", str(tmp_path / "cal.pt")],
        "report": ["report", "--evaluation", str(scan)],
        "evaluate": ["evaluate", "-l", str(labels), "-p", str(scan), "-o", str(tmp_path / "ev")],
    }[command]
    assert cli.main(argv) == 2
    line = _one_error_line(capsys, command)
    assert f"{scan} is a file, not a folder" in line
    assert "not found" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels", "net.json", "scan.nii.gz"]  # nothing written


@pytest.mark.parametrize("missing", [False, True])
def test_evaluate_names_the_labels_option_of_a_file_or_missing_folder(tmp_path, capsys, missing):
    """``evaluate -l FILE`` said "folder FILE is a file" (and "folder not found") without naming the labels."""
    labels = tmp_path / "labels.nii.gz"
    if not missing:
        labels.write_bytes(b"a file")
    pred = tmp_path / "pred"
    pred.mkdir()
    assert cli.main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(tmp_path / "ev")]) == 2
    line = _one_error_line(capsys, "evaluate")
    assert (f"labels folder not found: {labels}" if missing else f"labels folder {labels} is a file, not a folder") \
        in line


def test_a_folder_given_for_a_checkpoint_is_named_as_a_folder(tmp_path, capsys):
    images = tmp_path / "images"
    images.mkdir()
    (images / "a.nii.gz").write_bytes(b"")
    weights = tmp_path / "weights"
    weights.mkdir()
    (tmp_path / "net.json").write_text('{"_target_": "monai.networks.nets.UNet", "spatial_dims": 3, '
                                       '"in_channels": 1, "out_channels": 2, "channels": [4, 8], "strides": [2]}')
    assert cli.main(["infer", "-i", str(images), "-o", str(tmp_path / "out"), "--network", str(tmp_path / "net.json"),
                     "--checkpoint", str(weights), "--method", "softmax", "--device", "cpu"]) == 2
    line = _one_error_line(capsys, "infer")
    assert f"checkpoint {weights} is a folder, not a file" in line


def test_a_folder_given_for_the_shift_table_is_named_as_a_folder(tmp_path):
    with pytest.raises(IsADirectoryError, match="shift table .* is a folder, not a file"):
        read_shifts(tmp_path)
    with pytest.raises(FileNotFoundError, match="shift table not found"):
        read_shifts(tmp_path / "missing.csv")


def test_check_entry_kind(tmp_path):
    file, folder, link = tmp_path / "f", tmp_path / "d", tmp_path / "link"
    file.write_text("x")
    folder.mkdir()
    os.symlink(tmp_path / "gone", link)
    check_entry_kind(file, "x", folder=False)  # the right kinds and a missing path pass
    check_entry_kind(folder, "x", folder=True)
    check_entry_kind(tmp_path / "missing", "x", folder=True)
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        check_entry_kind(file, "x", folder=True)
    with pytest.raises(IsADirectoryError, match="is a folder, not a file"):
        check_entry_kind(folder, "x", folder=False)
    with pytest.raises(FileNotFoundError, match="symbolic link to .*gone, which does not exist"):
        check_entry_kind(link, "x", folder=True)


def test_keys_create_into_a_file_names_it(tmp_path, capsys, monkeypatch):
    # was "File exists: <file>"
    afile = tmp_path / "afile"
    afile.write_text("x")
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(tmp_path / "config"))
    assert cli.main(["keys", "--create", str(afile)]) == 2
    assert f"--create folder {afile} is a file, not a folder" in _one_error_line(capsys, "keys")
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(afile))
    assert cli.main(["keys", "--create"]) == 2
    assert f"configuration folder {afile} is a file, not a folder" in _one_error_line(capsys, "keys")
    assert afile.read_text() == "x"


def test_a_folder_given_for_a_regions_or_case_list_file_and_a_file_for_a_bundle(tmp_path, capsys):
    from monai_unc.workflows.prepare import read_case_list, read_region_spec

    folder = tmp_path / "regions.json"
    folder.mkdir()
    with pytest.raises(IsADirectoryError, match="--regions file .* is a folder, not a file"):
        read_region_spec(folder)
    with pytest.raises(IsADirectoryError, match="--calibration-cases file .* is a folder, not a file"):
        read_case_list(folder)
    images = tmp_path / "images"
    images.mkdir()
    (images / "a.nii.gz").write_bytes(b"")
    bundle = tmp_path / "bundle.zip"
    bundle.write_bytes(b"PK")
    assert cli.main(["infer", "-i", str(images), "-o", str(tmp_path / "out"), "--bundle", str(bundle),
                     "--method", "softmax", "--device", "cpu"]) == 2
    assert f"bundle folder {bundle} is a file, not a folder" in _one_error_line(capsys, "infer")


def test_an_output_folder_where_the_linked_inputs_lie_is_refused(tmp_path, capsys):
    # a folder of links (a data set linked from the archive): infer wrote its files beside the original scans
    from monai_unc.io import check_output_folder

    archive, series, links = tmp_path / "archive", tmp_path / "series", tmp_path / "cohort"
    for folder in (archive, series / "s1", links):
        folder.mkdir(parents=True)
    (archive / "a.nii.gz").write_bytes(b"")
    (series / "s1" / "1.dcm").write_bytes(b"")
    os.symlink(archive / "a.nii.gz", links / "a.nii.gz")
    os.symlink(series / "s1", links / "s1")
    os.symlink(tmp_path / "gone.nii.gz", links / "gone.nii.gz")  # a link to nothing is the case's failure
    with pytest.raises(ValueError, match=r"output folder .*archive is .*archive, which holds inputs that .*cohort"):
        check_output_folder(archive, links)
    with pytest.raises(ValueError, match=r"lies inside .*s1, which holds inputs"):
        check_output_folder(series / "s1" / "out", links)
    assert check_output_folder(archive / "pred", links) == (archive / "pred").resolve()  # beside it: not the same
    assert check_output_folder(tmp_path / "out", links) == (tmp_path / "out").resolve()
    assert cli.main(["infer", "-i", str(links), "-o", str(archive), "--model", "example", "--device", "cpu"]) == 2
    assert "which holds inputs" in _one_error_line(capsys, "infer")
    assert sorted(p.name for p in archive.iterdir()) == ["a.nii.gz"]
