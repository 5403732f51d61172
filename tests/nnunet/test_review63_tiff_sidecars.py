"""Tiff3DIO's map spacing files in nnU-Net output folders (review 63).

``Tiff3DIO`` writes a map ``uncertainty/<case>_<measure>.tif`` with its spacing in
``uncertainty/<case>_<measure>.json``: the name of the record of a case called ``<case>_<measure>``. Predicting both
into one folder overwrote one with the other; it is refused before any case is predicted. A case predicted again (a
rerun with fewer measures) removes the spacing files of its old maps with them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("nnunetv2")

from monai_unc.nnunet import remove_case_outputs, sidecar_record_clashes  # noqa: E402
from tests.nnunet.test_nnunet import DATASET_JSON, make_plans, make_predictor  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread")]


def test_sidecar_record_clashes_lists_map_stems_that_are_case_ids():
    assert sidecar_record_clashes(["a", "a_variance", "b"], ["variance", "predictive_entropy"]) == [("a", "a_variance")]
    assert sidecar_record_clashes(["a", "a_variance_tc"], ["variance"], ["wt", "tc"]) == [("a", "a_variance_tc")]
    assert sidecar_record_clashes(["a", "ab_variance", "b"], ["variance"]) == []


def _tiff_inputs(folder, ids):
    import tifffile

    folder.mkdir()
    img = np.random.default_rng(0).normal(size=(12, 14, 16)).astype(np.float32) + 2.0
    for cid in ids:
        tifffile.imwrite(str(folder / f"{cid}_0000.tif"), img)
        (folder / f"{cid}.json").write_text(json.dumps({"spacing": [2.0, 1.0, 1.0]}))


def _predictor(measures=None):
    plans = make_plans(spacing=(2.0, 1.0, 1.0))
    plans["image_reader_writer"] = "Tiff3DIO"
    kw = {} if measures is None else {"measures": measures}
    predictor = make_predictor(uncertainty_sources=("mirroring",), n_folds=1, plans=plans, **kw)
    predictor.dataset_json = dict(DATASET_JSON, file_ending=".tif")
    return predictor


def test_a_case_named_after_another_cases_map_is_refused_before_predicting(tmp_path):
    predictor = _predictor()
    measure = sorted(predictor.measures)[0]
    _tiff_inputs(tmp_path / "in", ["a", f"a_{measure}"])
    predicted = []
    predictor.predict_uncertainty_from_preprocessed_data = lambda data: predicted.append(data)
    with pytest.raises(ValueError, match=rf"case 'a'.*uncertainty/a_{measure}\.json, the record of case 'a_{measure}'"):
        predictor.predict_from_files(str(tmp_path / "in"), str(tmp_path / "out"), save_probabilities=False,
                                     overwrite=False, num_processes_preprocessing=0,
                                     num_processes_segmentation_export=0)
    assert predicted == []


@pytest.mark.slow
def test_a_clash_with_a_case_recorded_earlier_is_refused_too(tmp_path):
    predictor = _predictor()
    measure = sorted(predictor.measures)[0]
    _tiff_inputs(tmp_path / "in1", ["a"])
    predictor.predict_from_files(str(tmp_path / "in1"), str(tmp_path / "out"), save_probabilities=False,
                                 overwrite=False, num_processes_preprocessing=0, num_processes_segmentation_export=0)
    _tiff_inputs(tmp_path / "in2", [f"a_{measure}"])
    with pytest.raises(ValueError, match="the record of case"):
        _predictor().predict_from_files(str(tmp_path / "in2"), str(tmp_path / "out"), save_probabilities=False,
                                        overwrite=False, num_processes_preprocessing=0,
                                        num_processes_segmentation_export=0)
    rec = json.loads((tmp_path / "out" / "uncertainty" / "a.json").read_text())
    assert rec["case"] == "a"


def test_removing_a_case_removes_the_spacing_files_its_record_digests(tmp_path):
    unc = tmp_path / "uncertainty"
    unc.mkdir()
    names = ["a_old.tif", "a_old.json", "a_variance.tif", "a_variance.json", "b_old.json"]
    for n in names:
        (unc / n).write_bytes(b"x")
    record = {"case": "a", "maps": {"old": "a_old.tif", "variance": "a_variance.tif"},
              "file_digests": {n: {"size": 1, "sha256": "0"} for n in names[:4]}}
    (unc / "a.json").write_text(json.dumps(record))
    removed = sorted(p.name for p in remove_case_outputs(tmp_path / "a", ".tif"))
    assert removed == sorted(["a.json", *names[:4]])
    assert sorted(p.name for p in unc.iterdir()) == ["b_old.json"]
