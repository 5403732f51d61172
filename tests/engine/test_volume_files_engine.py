"""Resume against volumes whose voxels lie in another file than the one listed: a MetaImage header (``.mhd``) and its
``.raw``, a NIfTI pair (``.hdr`` / ``.img``). An edited data file beside an untouched header is an edited volume, for
``evaluate`` (the per-case state's fingerprint) as for ``infer`` (a case record's ``input_digests``)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.evaluation.resume import file_signature
from monai_unc.io import changed_inputs, input_digests, volume_files


def _names(path):
    return [p.name for p in volume_files(path)]


def test_volume_files_of_headers_and_plain_files(tmp_path):
    (tmp_path / "a.mhd").write_text("NDims = 3\nElementType = MET_SHORT\nElementDataFile = a.raw\n")
    (tmp_path / "b.mhd").write_text("NDims = 3\nElementDataFile = LOCAL\n")
    (tmp_path / "c.mhd").write_text("NDims = 3\nElementDataFile = LIST\nc0.raw\nsub/c1.raw\n\n")
    (tmp_path / "d.mhd").write_text("NDims = 3\nElementDataFile = d%02d.raw 1 3\n")
    (tmp_path / "e.mhd").write_text("NDims = 3\nElementDataFile = e%d.raw 0 1000000000\n")  # hostile: not expanded
    (tmp_path / "p.hdr").write_bytes(b"h")
    (tmp_path / "p.img").write_bytes(b"i")
    assert _names(tmp_path / "a.mhd") == ["a.mhd", "a.raw"]
    assert _names(tmp_path / "b.mhd") == ["b.mhd"]
    assert [str(p.relative_to(tmp_path)) for p in volume_files(tmp_path / "c.mhd")] == ["c.mhd", "c0.raw",
                                                                                         os.path.join("sub", "c1.raw")]
    assert _names(tmp_path / "d.mhd") == ["d.mhd", "d01.raw", "d02.raw", "d03.raw"]
    assert _names(tmp_path / "e.mhd") == ["e.mhd"]
    assert _names(tmp_path / "p.hdr") == ["p.hdr", "p.img"]
    assert _names(tmp_path / "x.nii.gz") == ["x.nii.gz"]


def _edit_raw(raw: Path, value: int) -> None:
    a = np.fromfile(raw, dtype="<i2")
    a[:] = value
    a.tofile(raw)


def _write_mhd(path: Path, labels: np.ndarray) -> None:
    sitk = pytest.importorskip("SimpleITK")
    image = sitk.GetImageFromArray(labels.astype(np.int16))
    image.SetSpacing((1.5, 1.0, 2.0))
    sitk.WriteImage(image, str(path))


def test_an_edited_raw_file_changes_the_signature_and_the_input_digest(tmp_path):
    header = tmp_path / "case.mhd"
    _write_mhd(header, np.ones((4, 4, 4)))
    sig, record = file_signature(header), {"input_digests": input_digests([header])}
    _edit_raw(tmp_path / "case.raw", 0)  # the header untouched
    assert file_signature(header) != sig  # before the fix: equal (only the header was compared)
    assert changed_inputs([header], record) == ["case.mhd"]  # before the fix: [] (infer kept the old outputs)


def test_evaluate_resume_recomputes_a_label_whose_raw_file_was_emptied(tmp_path):
    from monai_unc.data.cohorts import write_toy_cohort

    sitk = pytest.importorskip("SimpleITK")
    paths = write_toy_cohort(tmp_path / "cohort", n_cases=2, shape=(12, 12, 12))
    labels = tmp_path / "labels"
    labels.mkdir()
    for p in sorted(Path(paths["labels"]).glob("*.nii.gz")):
        sitk.WriteImage(sitk.ReadImage(str(p)), str(labels / p.name.replace(".nii.gz", ".mhd")))

    def dice(out):
        state, _, _ = run_evaluate(labels, paths["predictions"], tmp_path / out, EvaluationConfig(), measures=[])
        return [r["dice"] for r in state.sorted_rows()]

    first = dice("eval")
    _edit_raw(labels / "toy001.raw", 0)  # the label emptied, its .mhd untouched
    resumed, fresh = dice("eval"), dice("fresh")
    assert fresh[0] == first[0] and fresh[1] == 0.0
    assert resumed == fresh  # before the fix: resumed == first (the stale Dice of toy001 kept)
