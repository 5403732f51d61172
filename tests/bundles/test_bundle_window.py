"""``infer --bundle`` / ``calibrate --bundle`` without ``--roi`` warn that the bundle's inferer runs sliding windows."""

import json
import warnings

import pytest

from monai_unc.workflows import load_network, prepare_infer

from .test_cli_bundles import _bundle, _images


def _window_warnings(record) -> list[str]:
    return [str(w.message) for w in record if "runs sliding windows" in str(w.message)]


def test_the_bundles_window_is_read_and_suggested(tmp_path):
    bundle = _bundle(tmp_path / "b")
    images = _images(tmp_path / "images")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert load_network(bundle=bundle).bundle_window == [64, 64, 64]  # its SlidingWindowInferer's roi_size
        prepare_infer(images, bundle=bundle, samples=2)
    found = _window_warnings(record)
    assert len(found) == 1 and "pass --roi 64 64 64 to infer as the bundle does" in found[0]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        prepare_infer(images, bundle=bundle, samples=2, roi=32)  # a window chosen: nothing to say
    assert _window_warnings(record) == []


@pytest.mark.parametrize("inferer", [
    {"_target_": "SimpleInferer"},  # the whole image, as the bundle itself runs
    {"_target_": "SlidingWindowInferer", "roi_size": [-1, 64, 64], "sw_batch_size": 1},  # -1: the image's size
    {"_target_": "SlidingWindowInferer", "roi_size": "@missing#size"},  # cannot be read: nothing said
])
def test_no_window_no_warning(tmp_path, inferer):
    def edit(cfg):
        cfg["inferer"] = inferer

    bundle = _bundle(tmp_path / "b", edit)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert load_network(bundle=bundle).bundle_window is None
        prepare_infer(_images(tmp_path / "images"), bundle=bundle, samples=2)
    assert _window_warnings(record) == []


def test_an_expression_roi_is_read_as_monai_reads_it(tmp_path):
    def edit(cfg):
        cfg["window"] = 48
        cfg["inferer"] = {"_target_": "monai.inferers.SlidingWindowInferer", "roi_size": "$[@window] * 3",
                          "sw_batch_size": 1}

    bundle = _bundle(tmp_path / "b", edit)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert load_network(bundle=bundle).bundle_window == [48, 48, 48]
    assert json.loads((bundle / "configs" / "inference.json").read_text())["inferer"]["roi_size"] == "$[@window] * 3"


def test_calibrate_warns_too(tmp_path):
    import nibabel as nib
    import numpy as np

    from monai_unc.workflows.calibrate import run_calibrate

    bundle = _bundle(tmp_path / "b")
    images = _images(tmp_path / "images")
    labels = tmp_path / "labels"
    labels.mkdir()
    nib.save(nib.Nifti1Image((np.arange(20 * 18 * 12).reshape(20, 18, 12) % 2).astype(np.uint8),
                             np.diag([1.2, 1.1, 2.0, 1.0])), labels / "case0.nii.gz")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        # the random toy network fits no temperature on these labels: refused after the model is read and warned of
        with pytest.raises(ValueError, match="no temperature fits"):
            run_calibrate(images, labels, tmp_path / "cal.pt", bundle=bundle, progress=False, max_steps=2)
    found = _window_warnings(record)
    assert len(found) == 1 and "pass --roi 64 64 64" in found[0]
