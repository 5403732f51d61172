"""The resume of ``infer`` (a case record's ``input_digests``) against inputs edited in place: an edit that keeps the
size and sets the modification time back is still an edit; a record of an earlier version (no status-change time)
with the same content is not."""

from __future__ import annotations

import os

from monai_unc.io import changed_inputs, input_digests


def _edit_keeping_size_and_mtime(path, data):
    st = os.stat(path)
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def test_a_same_size_edit_with_its_mtime_set_back_is_a_changed_input(tmp_path):
    image = tmp_path / "case.nii"  # an uncompressed scan of the same shape: always the same size
    image.write_bytes(b"\x00\x01" * 500)
    record = {"input_digests": input_digests([image])}
    assert changed_inputs([image], record) == []
    _edit_keeping_size_and_mtime(image, b"\x01\x00" * 500)  # the flipped scan
    # before the fix [] : the resume kept the outputs of the earlier scan
    assert changed_inputs([image], record) == ["case.nii"]


def test_the_files_of_a_series_folder_edited_the_same_way_are_seen(tmp_path):
    series = tmp_path / "case1"
    series.mkdir()
    for i in range(3):
        (series / f"slice{i}.dcm").write_bytes(bytes([i]) * 64)
    record = {"input_digests": input_digests([series])}
    _edit_keeping_size_and_mtime(series / "slice1.dcm", b"\x07" * 64)
    assert changed_inputs([series], record) == ["case1"]


def test_a_record_without_status_change_times_is_checked_by_content(tmp_path):
    image = tmp_path / "case.nii"
    image.write_bytes(b"voxels" * 10)
    old = input_digests([image])
    old[0]["stat"] = old[0]["stat"][:2]  # [size, mtime]: what earlier versions recorded
    assert changed_inputs([image], {"input_digests": old}) == []  # same content: unchanged
    _edit_keeping_size_and_mtime(image, b"VOXELS" * 10)
    assert changed_inputs([image], {"input_digests": old}) == ["case.nii"]
