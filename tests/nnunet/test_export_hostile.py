"""Hostile review of the nnU-Net export beyond geometry: region names from ``dataset.json`` (a file users edit) become
parts of file names for formats without 4D images; a name that cannot be one is refused naming the region and
``dataset.json``, when the model is set up. Reruns into the same folder with other settings leave none of the earlier
run's files that the new one does not write."""

from __future__ import annotations

import copy
import json
import os

import numpy as np
import pytest

pytest.importorskip("nnunetv2")

import SimpleITK as sitk  # noqa: E402
from nnunetv2.imageio.simpleitk_reader_writer import SimpleITKIO  # noqa: E402

import monai_unc.nnunet as mun  # noqa: E402
from tests.nnunet.test_nnunet import make_predictor, write_inputs  # noqa: E402
from tests.nnunet.test_nnunet_regions import REGIONS_JSON, region_predictor  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _props(tmp_path):
    img = sitk.GetImageFromArray(np.zeros((4, 5, 6), np.float32))
    sitk.WriteImage(img, str(tmp_path / "img.mha"))
    _, props = SimpleITKIO().read_images([str(tmp_path / "img.mha")])
    return props


@pytest.mark.parametrize("bad", ["../../escaped", "TC/ET", "back\\slash", "nul\0"])
def test_region_name_with_a_path_is_refused_for_per_region_files(bad, tmp_path):
    """A ``.mha`` region model writes ``<case>_<measure>_<region>.mha`` per region: a region named ``TC/ET`` failed
    with pathlib's ``Invalid name 'c_mi_TC/ET.mha'`` (naming neither the region nor dataset.json), a backslash made a
    file that is a path on Windows."""
    out = tmp_path / "run" / "out" / "uncertainty"
    with pytest.raises(ValueError, match="region name .* cannot be part of a file name"):
        mun.write_region_maps(SimpleITKIO(), np.zeros((2, 6, 5, 4), np.float32), out / "c_mi.mha", _props(tmp_path),
                              ["whole", bad])
    assert not list((tmp_path / "run").rglob("*.mha"))


def test_plain_region_names_still_write_one_file_each(tmp_path):
    out = tmp_path / "out"
    paths = mun.write_region_maps(SimpleITKIO(), np.zeros((3, 6, 5, 4), np.float32), out / "c_mi.mha",
                                  _props(tmp_path), ["whole tumor", "core-2", ".."])
    assert [p.name for p in paths] == ["c_mi_whole tumor.mha", "c_mi_core-2.mha", "c_mi_...mha"]
    assert all(p.parent == out for p in paths)


def test_predictor_refuses_such_a_region_model_before_predicting(monkeypatch):
    """The same check when the model is set up, instead of after the first case's prediction."""
    import tests.nnunet.test_nnunet_regions as regions

    bad = copy.deepcopy(REGIONS_JSON)
    bad["file_ending"] = ".mha"
    bad["labels"] = {"background": 0, "../whole": [1, 2], "core": 2}
    monkeypatch.setattr(regions, "REGIONS_JSON", bad)
    with pytest.raises(ValueError, match="'../whole' cannot be part of a file name"):
        region_predictor(n_folds=1, uncertainty_sources=("mirroring",))
    bad["file_ending"] = ".nii.gz"  # one 4D NIfTI: the names are no file names, nothing to refuse
    assert region_predictor(n_folds=1, uncertainty_sources=("mirroring",)).label_manager.has_regions


def _rerun(inp, out, overwrite=True, save_probabilities=False, **kw):
    pred = make_predictor(n_folds=1, uncertainty_sources=("mirroring",), **kw)
    pred.predict_from_files(str(inp), str(out), save_probabilities=save_probabilities, overwrite=overwrite,
                            num_processes_preprocessing=0, num_processes_segmentation_export=0)
    return pred


def test_a_rerun_with_other_settings_leaves_no_file_of_the_earlier_run(tmp_path, monkeypatch):
    """A rerun into the same -o with fewer measures kept uncertainty/<case>_variance.nii.gz of the earlier run, and
    one without --save_probabilities (also a --continue_prediction run redoing the case with
    --segmentation_from probabilities) kept its <case>.npz, whose argmax was no longer the segmentation."""
    inp, out = tmp_path / "in", tmp_path / "out"
    (case,) = write_inputs(inp, shapes=((16, 16, 14),))
    unc = out / "uncertainty"
    _rerun(inp, out, save_probabilities=True, measures=("predictive_entropy", "variance"))
    assert (unc / f"{case}_variance.nii.gz").is_file() and (out / f"{case}.npz").is_file()
    _rerun(inp, out, measures=("predictive_entropy",))
    assert sorted(p.name for p in unc.iterdir()) == [f"{case}.json", f"{case}_predictive_entropy.nii.gz"]
    assert not (out / f"{case}.npz").exists() and not (out / f"{case}.pkl").exists()
    assert list(json.loads((unc / f"{case}.json").read_text())["maps"]) == ["predictive_entropy"]

    _rerun(inp, out, save_probabilities=True, measures=("predictive_entropy", "variance"))
    pred = _rerun(inp, out, overwrite=False, measures=("predictive_entropy",), segmentation_from="probabilities")
    assert json.loads((unc / f"{case}.json").read_text())["settings"] == pred.case_settings()
    assert not (out / f"{case}.npz").exists() and not (unc / f"{case}_variance.nii.gz").exists()
    assert mun.case_exported(out / case, ".nii.gz", ["predictive_entropy"], settings=pred.case_settings())

    # a rewrite that fails half-way leaves a case that is not done (its record is removed first), never the old
    # record next to the new files
    _rerun(inp, out, save_probabilities=True, measures=("predictive_entropy", "variance"))
    assert (out / f"{case}.npz").is_file() and (out / f"{case}.nii.gz").is_file()

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("monai_unc.nnunet.export.write_float_map", fail)
    with pytest.raises(OSError, match="disk full"):
        _rerun(inp, out, measures=("predictive_entropy",))
    assert not (unc / f"{case}.json").exists() and not (out / f"{case}.nii.gz").exists()
    assert not (out / f"{case}.npz").exists() and not (unc / f"{case}_variance.nii.gz").exists()
    assert not mun.case_exported(out / case, ".nii.gz", ["predictive_entropy"])


@pytest.mark.skipif(os.name != "posix", reason="flock")
@pytest.mark.parametrize("kind", ["map", "regions"])
@pytest.mark.parametrize("state", ["killed", "live"])
def test_the_next_write_of_a_map_removes_what_a_killed_write_left_beside_it(kind, state, tmp_path, monkeypatch):
    """Found by review 75: a ``.nii.gz`` map was first written uncompressed (a region map: one 3D file per region) in
    a hidden ``.map_*`` / ``.regions_*`` folder of ``tempfile.TemporaryDirectory`` beside it, which a killed export
    left in ``-o`` for good. It is the map's private folder now (``.<map>.nii.partial.dir`` /
    ``.<map>.regions.partial.dir``, its name fixed per map: no listing of a folder of thousands of maps, which the
    review of the change measured at 32 ms per map among 20 000 files): the next write of the map removes the one a
    killed run left (no lock held), nothing is written into the system's temporary folder, and the folder of a
    write still running (locked) is left alone."""
    import fcntl
    import tempfile

    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    out = tmp_path / "pred" / "c_pe.nii.gz"
    left = out.parent / f".c_pe.nii.gz.{'nii' if kind == 'map' else 'regions'}.partial.dir"
    (left / "sub").mkdir(parents=True)
    (left / "c_pe.nii").write_bytes(b"half a map")
    fd = os.open(left, os.O_RDONLY)
    if state == "live":
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another write's, still running
    else:
        os.close(fd)
    try:
        if kind == "map":
            mun.write_float_map(SimpleITKIO(), np.zeros((6, 5, 4), np.float32), out, _props(tmp_path))
        else:
            mun.write_region_maps(SimpleITKIO(), np.zeros((2, 6, 5, 4), np.float32), out, _props(tmp_path),
                                  ["WT", "TC"])
        assert sorted(p.name for p in out.parent.iterdir()) == sorted([out.name] + ([left.name] * (state == "live")))
    finally:
        if state == "live":
            os.close(fd)
    assert list(system_tmp.iterdir()) == []
