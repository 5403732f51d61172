"""write_toy_dataset reruns and hostile arguments (nnunetdeep review): a toy raw dataset never mixes two calls."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("nnunetv2")

import monai_unc.nnunet as mun  # noqa: E402

SMALL = {"shape": (16, 16, 16), "empty_slices": 2}


def _names(folder, sub):
    return sorted(p.name for p in (folder / sub).iterdir())


def test_rerun_with_the_same_settings_rewrites_the_same_files(tmp_path):
    first = mun.write_toy_dataset(tmp_path, num_training=2, num_test=1, **SMALL)
    again = mun.write_toy_dataset(tmp_path, num_training=2, num_test=1, **SMALL)
    assert first == again and _names(again, "imagesTr") == ["toy_000_0000.nii.gz", "toy_001_0000.nii.gz"]
    assert _names(again, "imagesTs") == ["toy_002_0000.nii.gz"]


@pytest.mark.parametrize(("num_training", "num_test"), [(2, 1), (3, 0), (2, 2)])
def test_rerun_with_other_counts_is_refused_and_writes_nothing(tmp_path, num_training, num_test):
    """4 training + 2 test cases, then 2 + 1 into the same folder: toy_002 stood in imagesTr and imagesTs, toy_003 in
    imagesTr, and dataset.json said numTraining 2 (nnU-Net's verify_dataset_integrity: 'found 4 instead')."""
    folder = mun.write_toy_dataset(tmp_path, num_training=4, num_test=2, **SMALL)
    before = {sub: _names(folder, sub) for sub in ("imagesTr", "labelsTr", "imagesTs")}
    with pytest.raises(ValueError, match="holds .* file\\(s\\) that this toy dataset does not"):
        mun.write_toy_dataset(tmp_path, num_training=num_training, num_test=num_test, **SMALL)
    assert {sub: _names(folder, sub) for sub in before} == before
    assert json.loads((folder / "dataset.json").read_text())["numTraining"] == 4


def test_more_cases_extend_a_dataset_consistently(tmp_path):
    mun.write_toy_dataset(tmp_path, num_training=2, num_test=1, **SMALL)
    with pytest.raises(ValueError, match="imagesTs/toy_002_0000.nii.gz"):  # toy_002 would be a training case too
        mun.write_toy_dataset(tmp_path, num_training=3, num_test=1, **SMALL)
    folder = mun.write_toy_dataset(tmp_path, num_training=2, num_test=3, **SMALL)
    assert len(_names(folder, "imagesTs")) == 3


def test_negative_num_test_is_refused(tmp_path):
    """num_test=-1 wrote one training case while dataset.json said numTraining 2."""
    with pytest.raises(ValueError, match="num_test must be an integer >= 0"):
        mun.write_toy_dataset(tmp_path, num_training=2, num_test=-1, **SMALL)
    assert not any(tmp_path.iterdir())


def test_second_dataset_of_the_same_id_is_refused(tmp_path):
    """Dataset005_UncToy and Dataset005_Other side by side: nnU-Net cannot resolve id 5 to one dataset."""
    mun.write_toy_dataset(tmp_path, dataset_id=5, num_training=2, num_test=0, **SMALL)
    with pytest.raises(ValueError, match="already holds dataset id 5 as Dataset005_UncToy"):
        mun.write_toy_dataset(tmp_path, dataset_id=5, name="Other", num_training=2, num_test=0, **SMALL)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Dataset005_UncToy"]


@pytest.mark.parametrize("name", ["a/b", ""])
def test_name_with_a_path_is_refused(tmp_path, name):
    with pytest.raises(ValueError, match="name must be a folder name part"):
        mun.write_toy_dataset(tmp_path, name=name, num_training=2, num_test=0, **SMALL)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"dataset_id": 12.7}, "dataset_id must be an integer in 1..999"),
    ({"dataset_id": True}, "dataset_id must be an integer in 1..999"),
    ({"dataset_id": "12"}, "dataset_id must be an integer in 1..999"),
    ({"dataset_id": 1000}, "dataset_id must be an integer in 1..999"),
    ({"num_training": 2.5}, "num_training must be an integer >= 2"),
    ({"num_training": 1}, "num_training must be an integer >= 2"),
    ({"num_test": True}, "num_test must be an integer >= 0"),
    ({"shape": (16, 16, 16.5)}, "shape must be 3 integers"),
    ({"shape": (16, 16)}, "shape must be 3 integers"),
    ({"spacing": (1.0, 1.0)}, "spacing must be 3 positive finite numbers"),
    ({"spacing": (0.0, 1.0, 1.0)}, "spacing must be 3 positive finite numbers"),
    ({"spacing": (float("nan"), 1.0, 1.0)}, "spacing must be 3 positive finite numbers"),
    ({"empty_slices": True}, "empty_slices must be an integer in"),
    ({"empty_slices": 1.5}, "empty_slices must be an integer in"),
])
def test_bad_settings_are_refused_by_name_before_anything_is_written(tmp_path, kwargs, match):
    """Found by hostile testing: ``dataset_id=12.7`` or ``True`` wrote Dataset012 / Dataset001, ``empty_slices=True``
    blanked one slice, ``shape=(16, 16, 16.5)`` wrote a dataset, a 2-entry spacing failed with an IndexError and a zero
    or NaN spacing in nibabel, without naming the argument."""
    with pytest.raises(ValueError, match=match):
        mun.write_toy_dataset(tmp_path, **{"num_training": 2, "num_test": 0, **SMALL, **kwargs})
    assert not any(tmp_path.iterdir())


def test_numpy_integer_settings_are_integers(tmp_path):
    """Found by hostile testing: ``num_training=np.int64(2)`` was refused as "n_cases must be a positive integer"."""
    np = pytest.importorskip("numpy")
    folder = mun.write_toy_dataset(tmp_path, dataset_id=np.int64(7), num_training=np.int64(2), num_test=np.int32(1),
                                   shape=tuple(np.int64(v) for v in (16, 16, 16)), spacing=(np.float32(1.0), 1, 2),
                                   empty_slices=np.int64(2))
    assert folder.name == "Dataset007_UncToy" and json.loads((folder / "dataset.json").read_text())["numTraining"] == 2
    assert _names(folder, "imagesTr") == ["toy_000_0000.nii.gz", "toy_001_0000.nii.gz"]
    assert _names(folder, "imagesTs") == ["toy_002_0000.nii.gz"]
