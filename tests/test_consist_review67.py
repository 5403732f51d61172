"""Consistency defects found by review 67: one rule for the same kind of option across the modules that take it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.aggregation import aggregate, check_threshold
from monai_unc.transforms import AggregateUncertainty, UncertaintyToDiscrete


# ---------------------------------------------------------------------------------------------------------------
# threshold: a 0-d real tensor / array is its number in aggregate and in UncertaintyToDiscrete alike
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("t", [torch.tensor(0.5), torch.tensor(0.5, dtype=torch.float64), np.array(0.5),
                               np.float32(0.5), torch.tensor(0)])
def test_aggregate_takes_a_zero_dimensional_threshold(t):
    """aggregate(..., threshold=torch.quantile(...)) was refused ("must be a real number") while
    UncertaintyToDiscrete accepted the same 0-d tensor."""
    u = np.array([[[[0.2, 0.6], [0.8, 0.1]]]])
    want = aggregate(u, "threshold", threshold=float(t))
    np.testing.assert_array_equal(aggregate(u, "threshold", threshold=t), want)
    np.testing.assert_array_equal(AggregateUncertainty("threshold", threshold=t)(u[0]), AggregateUncertainty(
        "threshold", threshold=float(t))(u[0]))
    assert UncertaintyToDiscrete(threshold=t)(u[0]).tolist() == UncertaintyToDiscrete(threshold=float(t))(u[0]).tolist()


@pytest.mark.parametrize("t", [torch.tensor(True), np.array(True), torch.tensor([0.5]), np.array([0.5]),
                               torch.tensor(0.5j), np.array("0.5"), "0.5", True, [0.5]])
def test_aggregate_and_discrete_refuse_the_same_thresholds(t):
    u = np.array([[[[0.2, 0.6], [0.8, 0.1]]]])
    with pytest.raises(ValueError, match="^threshold must be a real number"):
        aggregate(u, "threshold", threshold=t)
    with pytest.raises(TypeError, match="^threshold must be a real number"):
        UncertaintyToDiscrete(threshold=t)


@pytest.mark.parametrize("t", [torch.tensor(float("nan")), np.array(np.inf)])
def test_non_finite_zero_dimensional_thresholds_are_refused_alike(t):
    u = np.array([[[[0.2, 0.6], [0.8, 0.1]]]])
    with pytest.raises(ValueError, match="^threshold must be finite"):
        aggregate(u, "threshold", threshold=t)
    with pytest.raises(ValueError, match="^threshold must be finite"):
        UncertaintyToDiscrete(threshold=t)


def test_check_threshold_is_the_one_checker():
    assert check_threshold(torch.tensor(0.25)) == 0.25 and isinstance(check_threshold(np.array(1)), float)
    with pytest.raises(TypeError, match="^cut must be a real number"):
        check_threshold(torch.tensor(True), "cut", error=TypeError)


# ---------------------------------------------------------------------------------------------------------------
# regions_to_labels: label 0 in a region spec is refused (nnU-Net: the background is in no region)
# ---------------------------------------------------------------------------------------------------------------
def test_regions_to_labels_refuses_label_0_in_a_region():
    """A voxel in no region got 0, whose regions (label_to_regions) hold the region listing 0: the region came back,
    against the docstring's "only regions the masks hold are kept". nnU-Net's LabelManager leaves the background out
    of every region (a region of label 0 alone is dropped; its converter starts every voxel at 0)."""
    from monai_unc.regions import regions_to_labels

    masks = np.array([[0, 1, 1], [0, 1, 0]], bool)
    with pytest.raises(ValueError, match=r"^regions\['all'\] holds label 0"):
        regions_to_labels(masks, {"all": (0, 1), "one": (1,)})
    with pytest.raises(ValueError, match=r"^regions\['bg'\] holds label 0"):
        regions_to_labels(masks, '{"one": [1], "bg": [0]}')
    labels, missed = regions_to_labels(masks, {"all": (2, 1), "one": (1,)})  # without 0: unchanged
    assert labels.tolist() == [0, 1, 2] and missed == 0


# ---------------------------------------------------------------------------------------------------------------
# TTAInferer: an empty augmentations / transforms list is refused, as AugmentationSource([]) refuses it
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, name", [({"augmentations": []}, "augmentations"), ({"transforms": []}, "transforms"),
                                          ({"augmentations": ()}, "augmentations")])
def test_tta_refuses_an_empty_list_of_augmentations(kwargs, name):
    """TTAInferer(augmentations=[]) gave the flips alone without a word (None is the documented "none")."""
    from monai_unc.inferers import TTAInferer

    with pytest.raises(ValueError, match=f"^{name} must hold at least one"):
        TTAInferer(**kwargs)
    assert TTAInferer(flip_axes=(), augmentations=None, transforms=None) is not None


# ---------------------------------------------------------------------------------------------------------------
# regions_class_order that contradicts the nesting of the regions: warned, checked against nnU-Net's LabelManager
# ---------------------------------------------------------------------------------------------------------------
_NESTED = {"background": 0, "whole": [1, 2, 3], "core": [2, 3], "enhancing": 3}
_REVERSED = {"background": 0, "enhancing": 3, "core": [2, 3], "whole": [1, 2, 3]}


def _nnunet_round_trip(labels: dict, order: list[int]) -> bool:
    """Whether nnU-Net's own conversion of perfect region probabilities gives every voxel's regions back."""
    from nnunetv2.utilities.label_handling.label_handling import LabelManager

    lm = LabelManager(labels, order)
    label_map = np.array([0, 1, 2, 3])
    probs = np.stack([np.isin(label_map, r).astype(np.float32) for r in lm.foreground_regions])
    written = lm.convert_probabilities_to_segmentation(probs)
    back = np.stack([np.isin(written, r).astype(np.float32) for r in lm.foreground_regions])
    return bool((back == probs).all())  # the regions back (labels of one set of regions are interchangeable)


@pytest.mark.parametrize("labels, order", [(_NESTED, [1, 2, 3]), (_REVERSED, [3, 2, 1]), (_REVERSED, [1, 2, 3]),
                                           (_NESTED, [3, 2, 1]), ({"background": 0, "a": [1, 2], "b": 3}, [1, 3]),
                                           ({"background": 0, "b": 3, "a": [1, 2]}, [3, 1]),
                                           ({"background": 0, "a": [1, 2], "b": [2, 3]}, [1, 3])])
def test_regions_class_order_against_the_nesting_is_warned_as_nnunet_writes(labels, order, recwarn):
    """nnU-Net writes each region's voxels with p > 0.5 as its regions_class_order entry, later regions over earlier
    ones: a spec not listed from the outside in writes wrong labels, which were scored as written without a word."""
    from monai_unc.io import check_regions_class_order, nnunet_dataset_regions

    regions = nnunet_dataset_regions({"labels": labels, "regions_class_order": order})
    wrong = check_regions_class_order(regions, order, "dataset.json", warn=False)
    assert (wrong is None) == _nnunet_round_trip(labels, order)
    if wrong is not None:
        assert str(order) in wrong and "dataset.json" in wrong
        with pytest.warns(UserWarning, match=r"regions_class_order \[.*nnU-Net writes"):
            check_regions_class_order(regions, order, "dataset.json")
    else:
        check_regions_class_order(regions, order, "dataset.json")
        assert not [w for w in recwarn if "regions_class_order" in str(w.message)]


def test_regions_class_order_is_warned_once(tmp_path):
    """Read where the predictions' regions are read (prediction_regions), once per spec and order, not per read."""
    import json
    import warnings

    from monai_unc.io.provenance import prediction_regions

    (tmp_path / "dataset.json").write_text(json.dumps({"labels": {**_REVERSED, "ignore": 4},
                                                       "regions_class_order": [3, 2, 7]}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert list(prediction_regions(tmp_path, "nnunet")) == ["enhancing", "core", "whole"]
    said = [str(w.message) for w in caught if "regions_class_order" in str(w.message)]
    assert len(said) == 1 and "[3, 2, 7]" in said[0]


def test_the_predictor_warns_a_region_model_whose_order_writes_wrong_labels():
    """UncertaintyPredictor of a region model whose dataset.json lists the inner region first: warned when it is set
    up (nnU-Net's label maps of that model put every tumour voxel in the outer region's label)."""
    import warnings

    pytest.importorskip("nnunetv2")
    from tests.nnunet.test_nnunet_regions import REGIONS_JSON, region_predictor

    reversed_json = {**REGIONS_JSON, "labels": {"background": 0, "core": 2, "whole": [1, 2]},
                     "regions_class_order": [2, 1]}
    with pytest.warns(UserWarning, match=r"the model's dataset.json: regions_class_order \[2, 1\] .* label 2 "
                                         r"\(regions core, whole\) is written as label 1 \(whole\)"):
        region_predictor(n_folds=1, dataset_json=reversed_json)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*regions_class_order")
        region_predictor(n_folds=1)  # whole, core: [1, 2]


# ---------------------------------------------------------------------------------------------------------------
# TTA: a non-finite output names the flip / augmentation / transform that produced it (as the ensemble its member)
# ---------------------------------------------------------------------------------------------------------------
class _NaNWhenFlipped(torch.nn.Module):
    """Finite logits on the input as given, NaN where the input's first spatial axis was flipped."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.cat([x, -x], 1)
        return torch.where(x[:, :, :1, :1] > x[:, :, -1:, :1], torch.full_like(out, float("nan")), out)


def _ramp() -> torch.Tensor:
    return torch.arange(16, dtype=torch.float32).reshape(1, 1, 4, 4)


def test_a_nan_of_one_flip_is_named():
    from monai_unc.inferers import TTAInferer

    with pytest.raises(ValueError, match=r"^TTA sample 1 \(flip over spatial axes \(0,\)\): network output contains "
                                         r"non-finite values"):
        TTAInferer(flip_axes="all")(_ramp(), _NaNWhenFlipped())


def test_a_nan_of_one_augmentation_or_transform_is_named():
    from monai.transforms import Flip, Rotate90

    from monai_unc.inferers import TTAInferer

    flip0 = (lambda t: torch.flip(t, (2,)), lambda t: torch.flip(t, (2,)))
    ident = (lambda t: t, lambda t: t)
    with pytest.raises(ValueError, match=r"^TTA sample 1 \(no flip, augmentations\[1\]\): network output"):
        TTAInferer(flip_axes=(), augmentations=[ident, flip0])(_ramp(), _NaNWhenFlipped())
    y = torch.tensor([[float(i * (1 - j)) for j in range(4)] for i in range(4)]).reshape(1, 1, 4, 4)
    with pytest.raises(ValueError, match=r"^TTA sample 1 \(no flip, transforms\[1\] \(Flip\)\): network output"):
        TTAInferer(flip_axes=(), transforms=[Rotate90(k=2, spatial_axes=(0, 1)), Flip(spatial_axis=0)])(
            y, _NaNWhenFlipped())
