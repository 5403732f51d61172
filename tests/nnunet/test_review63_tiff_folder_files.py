"""Tiff3DIO's segmentation spacing file must not be one of the output folder's own files (review 63, hostile review).

``Tiff3DIO`` writes a segmentation ``<case>.tif`` with its spacing in ``<case>.json`` beside it. Review 63 refused a
case whose map's spacing file is another case's record, but not a case whose segmentation's spacing file is one of
the files nnU-Net and monai-unc keep in the output folder: a case called ``dataset`` (input ``dataset_0000.tif``)
overwrote ``dataset.json`` with ``{"spacing": ...}`` (its regions and channels, which the readers of the folder take
from it, gone), and ``uncertainty_config`` overwrote the run's ``uncertainty_config.json`` (found by the hostile
review of the combined change). Such a case is refused before any case is predicted.
"""

from __future__ import annotations

import pytest

pytest.importorskip("nnunetv2")

from tests.nnunet.test_review63_tiff_sidecars import _predictor, _tiff_inputs  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread")]


@pytest.mark.parametrize("case", ["dataset", "plans", "predict_from_raw_data_args", "uncertainty_config",
                                  "Dataset"])
def test_a_case_whose_spacing_file_is_a_file_of_the_output_folder_is_refused(tmp_path, case):
    predictor = _predictor()
    _tiff_inputs(tmp_path / "in", ["a", case])
    predicted = []
    predictor.predict_uncertainty_from_preprocessed_data = lambda data: predicted.append(data)
    with pytest.raises(ValueError, match=rf"case {case!r}: its segmentation's spacing file {case}\.json would "
                                         rf"overwrite the output folder's {case.lower()}\.json"):
        predictor.predict_from_files(str(tmp_path / "in"), str(tmp_path / "out"), save_probabilities=False,
                                     overwrite=False, num_processes_preprocessing=0,
                                     num_processes_segmentation_export=0)
    assert predicted == []
