"""Example data: MNI152 tissue task, toy generator, shipped weights, training script."""

import json

import numpy as np
import pytest
import torch

from monai_unc.data import (
    build_example_network,
    example_weights_path,
    hemisphere_masks,
    load_example_model,
    load_mni152_tissue,
    make_toy_case,
    make_toy_dataset,
    tissue_ambiguity,
)

pytest.importorskip("nilearn")


@pytest.fixture(scope="module")
def mni():
    return load_mni152_tissue(resolution=2)


def test_mni152_tissue(mni):
    assert mni["image"].shape == (1, 99, 117, 95) and mni["image"].dtype == np.float32
    assert 0 <= mni["image"].min() and mni["image"].max() == pytest.approx(1.0)
    assert mni["label"].shape == (1, 99, 117, 95) and set(np.unique(mni["label"])) == {0, 1, 2}
    np.testing.assert_allclose(mni["probs"].sum(0), 1.0, atol=1e-5)
    np.testing.assert_array_equal(mni["label"][0], mni["probs"].argmax(0))
    assert mni["spacing"] == (2.0, 2.0, 2.0)
    # the reference ambiguity is sum_c p_c (1 - p_c), hand-checked at one voxel
    p = mni["probs"][:, 50, 60, 50]
    assert mni["ambiguity"][0, 50, 60, 50] == pytest.approx(float((p * (1 - p)).sum()), abs=1e-6)
    # both tissues present in both hemispheres, hemispheres partition the volume
    left, right = mni["left"], mni["right"]
    assert not (left & right).any() and (left | right).all()
    for side in (left, right):
        assert (mni["label"][0][side] == 1).sum() > 10000 and (mni["label"][0][side] == 2).sum() > 10000


def test_mni152_tissue_is_read_once_and_each_call_gets_its_own_arrays(mni, monkeypatch):
    """Reading nilearn's templates cost about 2 s of CPU a call, and the demo, the cohort writers and the training
    load the example several times: later calls reuse the arrays (no template is read again) and each gets copies
    it may change without changing what the next call returns."""
    from nilearn import datasets

    first = load_mni152_tissue(resolution=2)  # whatever an earlier test loaded: the arrays are kept from here on
    reads = []
    for name in ("load_mni152_template", "load_mni152_gm_template", "load_mni152_wm_template"):
        real = getattr(datasets, name)
        monkeypatch.setattr(datasets, name, lambda *a, _r=real, _n=name, **k: reads.append(_n) or _r(*a, **k))
    first["image"][...] = -1.0
    first["label"][...] = 7
    first["right"][...] = False
    again = load_mni152_tissue(resolution=2)
    assert reads == []
    for key in ("image", "label", "probs", "ambiguity", "affine", "left", "right"):
        np.testing.assert_array_equal(again[key], mni[key])
        assert again[key].flags.writeable and not np.shares_memory(again[key], first[key]), key
    assert again["spacing"] == mni["spacing"]
    with pytest.raises(ValueError, match="resolution"):
        load_mni152_tissue(resolution=3)


def test_hemisphere_masks_follow_affine():
    affine = np.diag([-2.0, 2.0, 2.0, 1.0])
    affine[0, 3] = 9.0  # world x = 9 - 2 i: i <= 4 is right (x >= 0)
    left, right = hemisphere_masks(affine, (10, 2, 2))
    assert right[:5].all() and left[5:].all()
    with pytest.raises(ValueError, match="affine"):
        hemisphere_masks(np.eye(3), (2, 2, 2))
    assert tissue_ambiguity(np.array([[0.5], [0.5]]))[0, 0] == pytest.approx(0.5)


def test_toy_raters_follow_values_appendix_b():
    case = make_toy_case((48, 48, 48), n_raters=3, radius=14.0, rng=0)
    vols = case["raters"].reshape(3, -1).sum(1)
    np.testing.assert_allclose(vols / vols[-1], [0.1, 0.55, 1.0], atol=0.03)
    assert case["object_volume"] == vols[1]  # majority vote of three nested raters = the middle rater
    np.testing.assert_allclose(case["probs"][1], case["raters"].mean(0))
    assert case["image"].shape == (1, 48, 48, 48) and case["label"].dtype == np.int64


def test_toy_dataset_shifts_sizes_and_reproducibility():
    shifts = ["none", "intensity", "shape", "position"]
    a = make_toy_dataset(8, shape=(32, 32), shift=shifts, seed=3)
    b = make_toy_dataset(8, shape=(32, 32), shift=shifts, seed=3)
    assert [c["shift"] for c in a] == shifts * 2
    assert all(np.array_equal(x["image"], y["image"]) for x, y in zip(a, b))
    assert len({c["object_volume"] for c in a}) > 4  # sizes vary
    inside = make_toy_case((32, 32, 32), shift="none", radius=8, rng=1)
    outside = make_toy_case((32, 32, 32), shift="position", radius=8, rng=1)
    full = 4 / 3 * np.pi * (8 * 0.55 ** (1 / 3)) ** 3
    assert inside["object_volume"] == pytest.approx(full, rel=0.1)
    assert outside["object_volume"] < 0.9 * full  # partly outside the volume
    crisp = make_toy_case((32, 32, 32), blur=False, rng=2)
    assert (crisp["raters"] == crisp["raters"][0]).all()
    with pytest.raises(ValueError, match="shift"):
        make_toy_case(shift="rotation")
    with pytest.raises(ValueError, match="n_cases"):
        make_toy_dataset(0)


def test_shipped_weights_load_safely_and_segment_heldout_hemisphere(mni):
    path = example_weights_path()
    assert path.stat().st_size < 5 * 2**20
    state = torch.load(path, map_location="cpu", weights_only=True)
    net = build_example_network()
    net.load_state_dict(state)
    net2, record = load_example_model()
    assert record == json.loads(path.with_name(path.name + ".json").read_text())
    assert record["dice_right_heldout"]["grey matter"] > 0.75
    assert record["dice_right_heldout"]["white matter"] > 0.8
    # recompute the held-out Dice from the weights: the record is not just trusted
    from monai_unc.data.training import hemisphere_dice

    dice = hemisphere_dice(net2, mni)
    for k, v in record["dice_right_heldout"].items():
        assert dice["right"][k] == pytest.approx(v, abs=0.01)


@pytest.mark.slow
def test_training_function_runs(tmp_path):
    from monai_unc.data.training import train_tissue_model

    net, record = train_tissue_model(tmp_path / "w.pt", iterations=3, progress=False)
    assert (tmp_path / "w.pt").is_file() and (tmp_path / "w.pt.json").is_file()
    assert set(record["dice_right_heldout"]) == {"grey matter", "white matter"}
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


@pytest.mark.parametrize("spatial", [(6, 5), (4, 5, 6)], ids=["2d", "3d"])
@pytest.mark.parametrize("classes", [2, 3])
def test_make_training_loss_builds_every_named_loss(spatial, classes):
    from monai.losses import DiceCELoss

    from monai_unc.data.training import CALIBRATION_LOSSES, TRAINING_LOSSES, make_training_loss

    gen = torch.Generator().manual_seed(0)
    z = torch.randn(2, classes, *spatial, generator=gen).requires_grad_(True)
    y = torch.randint(0, classes, (2, 1, *spatial), generator=gen)
    for name in TRAINING_LOSSES + tuple(CALIBRATION_LOSSES):
        z.grad = None
        value = make_training_loss(name, classes=classes, spatial_dims=len(spatial))(z, y)
        value.backward()
        assert value.ndim == 0 and torch.isfinite(value) and torch.isfinite(z.grad).all(), name
    stock = DiceCELoss(to_onehot_y=True, softmax=True)(z, y)
    assert torch.equal(make_training_loss("dice_ce")(z, y), stock)
    with pytest.raises(ValueError, match="loss must be one of"):
        make_training_loss("focal")
