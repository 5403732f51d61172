"""``nnunet-predict`` refuses an input image with NaN or infinite voxels (review 63).

nnU-Net's preprocessing takes them silently: the normaliser's mean and standard deviation become NaN, and the case was
predicted and written without a word. ``monai-unc infer`` refuses such an image naming the case, the count and the
first voxel (review 62); the nnU-Net route now does the same on the image as nnU-Net's reader reads it, for every
case to predict before any is predicted (as its other per-case checks: nnU-Net's route stops at a bad case).
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest

pytest.importorskip("nnunetv2")

from tests.nnunet.test_nnunet import make_predictor, write_inputs  # noqa: E402
from tests.nnunet.test_nnunet_conformal import write_model_folder  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _spoil(path, value, index):
    import nibabel as nib

    img = nib.load(str(path))
    data = np.asarray(img.dataobj, dtype=np.float32).copy()
    data[index] = value
    nib.save(nib.Nifti1Image(data, img.affine), str(path))


@pytest.mark.parametrize("value, counts", [(np.nan, "1 NaN and 0 infinite"), (np.inf, "0 NaN and 1 infinite")])
def test_a_non_finite_input_voxel_is_refused_before_any_case_is_predicted(tmp_path, value, counts):
    inp = tmp_path / "imagesTs"
    write_inputs(inp)
    _spoil(inp / "case1_0000.nii.gz", value, (5, 6, 7))  # file (i, j, k) order
    predictor = make_predictor(uncertainty_sources=("mirroring",), n_folds=1)
    calls = []
    predict = predictor.predict_uncertainty_from_preprocessed_data
    predictor.predict_uncertainty_from_preprocessed_data = lambda data: calls.append(1) or predict(data)
    with pytest.raises(ValueError) as err:
        predictor.predict_from_files(str(inp), str(tmp_path / "out"), overwrite=True,
                                     num_processes_preprocessing=0, num_processes_segmentation_export=0)
    text = str(err.value)
    assert text.startswith(f"case 'case1': its image case1_0000.nii.gz holds {counts} voxel(s) of {17 * 21 * 14} "
                           "(the first at channel 0, voxel (5, 6, 7))"), text
    assert calls == [] and not (tmp_path / "out" / "case0.nii.gz").exists()


def test_nnunet_predict_says_it_in_one_line(tmp_path, capsys):
    from monai_unc.nnunet.cli import add_parser, run

    model = write_model_folder(tmp_path / "model")
    write_inputs(tmp_path / "images", shapes=((18, 17, 16),))
    _spoil(tmp_path / "images" / "case0_0000.nii.gz", np.nan, (0, 1, 2))
    parser = argparse.ArgumentParser(prog="monai-unc")
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["nnunet-predict", "-i", str(tmp_path / "images"), "-o", str(tmp_path / "pred"), "-m",
                              str(model), "-f", "0", "-device", "cpu", "--sources", "mirroring", "-npp", "0", "-nps",
                              "0", "--disable_progress_bar"])
    assert run(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("monai-unc nnunet-predict: error: case 'case0': its image case0_0000.nii.gz holds 1 NaN "
                          "and 0 infinite voxel(s)") and "voxel (0, 1, 2)" in err, err
    assert not (tmp_path / "pred" / "case0.nii.gz").exists()


def test_a_non_finite_voxel_of_an_mha_input_is_named_in_the_file_order(tmp_path):
    """An ``.mha`` image's NaN reaches nnU-Net's normaliser (SimpleITK keeps it): refused as the NIfTI's."""
    import SimpleITK as sitk

    from tests.nnunet.test_nnunet import DATASET_JSON

    inp = tmp_path / "imagesTs"
    inp.mkdir()
    image = np.ones((14, 21, 17), np.float32)  # SimpleITK's (k, j, i)
    image[7, 6, 5] = np.nan
    sitk.WriteImage(sitk.GetImageFromArray(image), str(inp / "case0_0000.mha"))
    predictor = make_predictor(uncertainty_sources=("mirroring",), n_folds=1)
    predictor.dataset_json = {**DATASET_JSON, "file_ending": ".mha"}
    with pytest.raises(ValueError, match=r"^case 'case0': its image case0_0000\.mha holds 1 NaN and 0 infinite "
                                         r"voxel\(s\) of 4998 \(the first at channel 0, voxel \(5, 6, 7\)\)"):
        predictor.predict_from_files(str(inp), str(tmp_path / "out"), overwrite=True,
                                     num_processes_preprocessing=0, num_processes_segmentation_export=0)
