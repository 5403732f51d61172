"""Hostile review of monai_unc.transforms inside MONAI pipelines (maps brought back with ``Invertd``): each test
compares with a reference computed independently here."""

from __future__ import annotations

import pytest
import torch

from monai_unc.transforms import AggregateUncertainty, AggregateUncertaintyd


@pytest.mark.parametrize("method", ["mean", "patch_sum"])
def test_aggregate_nan_map_names_the_key(method):
    """A NaN map was refused as "uncertainty contains ...", a name the user never passed."""
    u = torch.rand(1, 4, 4, 4)
    u[0, 1, 2, 3] = float("nan")
    kw = {"patch_size": 2} if method == "patch_sum" else {}
    with pytest.raises(ValueError, match=r"^mutual_information contains 1 non-finite"):
        AggregateUncertaintyd("mutual_information", method=method, **kw)({"mutual_information": u})
    with pytest.raises(ValueError, match=r"^img contains 1 non-finite"):
        AggregateUncertainty(method, **kw)(u)


def test_aggregate_four_spatial_axes_reports_the_users_shape():
    """A map with 4 spatial axes was refused with the shape (1, 1, 3, 3, 3, 3), a batch axis the user never passed."""
    with pytest.raises(ValueError, match=r"^mi must be a one-channel map .* got \(1, 3, 3, 3, 3\)$"):
        AggregateUncertaintyd("mi")({"mi": torch.rand(1, 3, 3, 3, 3)})


@pytest.mark.parametrize("template", ["{key}_{measure}", "{key}_{method}", "{key.x}", "{key[0]}", "{}", "{key"])
def test_label_and_mask_templates_refuse_fields_they_do_not_fill(template):
    """``UncertaintyToDiscreted(output_key="{key}_{measure}")`` stored the mask under ``"mi_"`` silently, and
    ``"{key.x}"`` failed at the first case with an ``AttributeError``: refused when built, naming ``output_key``."""
    from monai_unc.transforms import SamplesToLabelsd, UncertaintyToDiscreted

    with pytest.raises(ValueError, match="output_key"):
        UncertaintyToDiscreted("mi", threshold=0.5, output_key=template)
    with pytest.raises(ValueError, match="output_key"):
        SamplesToLabelsd("samples", output_key=template)


def test_measure_and_score_templates_keep_their_fields():
    from monai_unc.transforms import UncertaintyMeasuresd

    u = torch.rand(1, 4, 4, 4, dtype=torch.float64)
    d = AggregateUncertaintyd(["a", "b"], output_key="{key}-{method}")({"a": u, "b": u})
    assert float(d["a-mean"]) == pytest.approx(float(u.mean()), rel=1e-12)
    p = torch.softmax(torch.randn(3, 2, 4, 4, dtype=torch.float64), dim=1)
    d = UncertaintyMeasuresd("s", measures="predictive_entropy", output_key="{key}:{measure}")({"s": p})
    m = p.mean(0)
    assert torch.allclose(d["s:predictive_entropy"][0], -(m * m.log()).sum(0), atol=1e-12)
    with pytest.raises(ValueError, match="output_key"):
        UncertaintyMeasuresd("s", output_key="{key}_{measure.upper}")


def test_one_case_of_2d_sigmoid_probabilities_is_not_read_as_samples():
    """The sigmoid probabilities ``(3, H, W)`` of one 2D slice with ``multilabel=True`` and the default
    ``input_type="samples"`` gave ``(H, W)`` "maps" averaging the three regions: refused, pointing at ``probs``."""
    from monai_unc.transforms import SamplesToLabels, UncertaintyMeasures

    p = torch.rand(3, 16, 16)
    with pytest.raises(ValueError, match=r"img must be samples .* 2 or 3 spatial axes.*input_type='probs'"):
        UncertaintyMeasures(multilabel=True)(p)
    with pytest.raises(ValueError, match=r"2 or 3 spatial axes"):
        UncertaintyMeasures(input_type="probs")(torch.softmax(torch.rand(2, 16), 0))
    with pytest.raises(ValueError, match=r"2 or 3 spatial axes"):
        SamplesToLabels()(torch.softmax(torch.rand(3, 4, 16), 1))
    # read as probabilities, the maps are per region and equal the binary entropy computed here
    out = UncertaintyMeasures(input_type="probs", multilabel=True, measures="predictive_entropy")(p.double())
    q = p.double()
    ref = -(q * q.log() + (1 - q) * (1 - q).log())
    assert out["predictive_entropy"].shape == (3, 16, 16)
    assert torch.allclose(out["predictive_entropy"], ref, atol=1e-12)


def _preprocessed_case():
    """A case through Orientationd / Spacingd / CropForegroundd / SpatialPadd, with 4 softmax samples on the network
    grid carrying the image's meta, as an inferer's decollated output."""
    from monai.data import MetaTensor
    from monai.transforms import Compose, CropForegroundd, Orientationd, Spacingd, SpatialPadd

    g = torch.Generator().manual_seed(0)
    affine = torch.tensor([[0.0, -1.5, 0.0, 10.0], [1.2, 0.0, 0.0, -5.0], [0.0, 0.0, 2.0, 3.0], [0.0, 0.0, 0.0, 1.0]])
    image = MetaTensor(torch.rand(1, 14, 16, 12, generator=g), affine=affine, meta={"filename_or_obj": "case.nii.gz"})
    pre = Compose([
        Orientationd("image", axcodes="RAS", labels=None),
        Spacingd("image", pixdim=(1.0, 1.0, 1.0), mode="bilinear"),
        CropForegroundd("image", "image", select_fn=lambda x: x > 0.2),
        SpatialPadd("image", (24, 24, 24)),
    ])
    d = pre({"image": image})
    x = d["image"]
    probs = torch.softmax(3 * torch.randn(4, 3, *x.shape[1:], generator=g), dim=1)
    d["samples"] = MetaTensor(probs, meta=x.meta, applied_operations=x.applied_operations)
    return d, pre, affine, tuple(image.shape)


@pytest.mark.parametrize("nearest_interp", [True, False])
def test_maps_inverted_onto_the_original_grid(nearest_interp):
    """What docs/monai_integration.md says of ``Invertd(orig_keys="image")`` on the maps: the original grid (shape,
    affine); with MONAI's default ``nearest_interp=True`` every map and mask keeps its values (the entropy of the
    inverted probabilities equals the inverted entropy, the mask stays binary); with linear interpolation an entropy
    map stays in ``[0, log C]`` but lies below the entropy of the inverted probabilities (entropy is concave)."""
    import math

    from monai.transforms import Invertd

    from monai_unc.transforms import UncertaintyMeasuresd, UncertaintyToDiscreted

    d, pre, affine, shape = _preprocessed_case()
    d = UncertaintyMeasuresd("samples", measures=["pred", "predictive_entropy"])(d)
    d = UncertaintyToDiscreted("predictive_entropy", threshold=0.8, output_key="{key}_flag")(d)
    keys = ["pred", "predictive_entropy", "predictive_entropy_flag"]
    out = Invertd(keys, transform=pre, orig_keys="image", nearest_interp=nearest_interp)(d)
    for k in keys:
        assert tuple(out[k].shape[1:]) == shape[1:], k
        assert torch.allclose(out[k].affine.double(), affine.double(), atol=1e-5), k
    m = out["pred"].as_tensor().double()
    pe_of_inverted = -(m * torch.where(m > 0, m.log(), torch.zeros_like(m))).sum(0)
    pe = out["predictive_entropy"].as_tensor()[0].double()
    flags = out["predictive_entropy_flag"].as_tensor()
    assert float(pe.min()) >= 0 and float(pe.max()) <= math.log(3) + 1e-6
    if nearest_interp:
        assert torch.allclose(pe, pe_of_inverted, atol=1e-6)
        assert set(torch.unique(flags).tolist()) <= {0.0, 1.0}
        assert torch.equal(flags[0] > 0.5, pe >= 0.8)
    else:
        assert float((pe_of_inverted - pe).min()) >= -1e-6
        assert float((pe_of_inverted - pe).max()) > 0.05


def test_error_map_of_a_prediction_inverted_with_linear_interpolation():
    """``Invertd(nearest_interp=False)`` (as Model Zoo bundles invert ``pred``) blends the probabilities of a
    ``CropForegroundd`` box with the zero frame around it; ``ErrorMapd`` refused that layer as "multi-label masks or
    sigmoid probabilities". The map equals the argmax error computed here with numpy."""
    import numpy as np
    from monai.data import MetaTensor
    from monai.transforms import Compose, CropForegroundd, Invertd, Orientationd, Spacingd, SpatialPadd

    from monai_unc.transforms import ErrorMapd

    g = torch.Generator().manual_seed(1)
    affine = torch.diag(torch.tensor([1.5, 1.5, 2.0, 1.0]))
    image = torch.zeros(1, 20, 20, 16)
    image[:, 5:15, 4:12, 3:10] = torch.rand(1, 10, 8, 7, generator=g) + 0.5
    pre = Compose([
        Orientationd("image", axcodes="RAS", labels=None),
        Spacingd("image", pixdim=(2.0, 2.0, 3.0)),
        CropForegroundd("image", "image"),
        SpatialPadd("image", (16, 16, 16)),
    ])
    d = pre({"image": MetaTensor(image, affine=affine)})
    x = d["image"]
    d["pred"] = MetaTensor(torch.softmax(torch.randn(3, *x.shape[1:], generator=g), 0), meta=x.meta,
                           applied_operations=x.applied_operations)
    d = Invertd("pred", transform=pre, orig_keys="image", nearest_interp=False)(d)
    sums = d["pred"].as_tensor().sum(0)
    assert bool(((sums > 0.01) & (sums < 0.95)).any())  # the blended layer this test is about
    label = torch.randint(0, 3, (1, 20, 20, 16), generator=g)
    d["label"] = MetaTensor(label, affine=affine)
    err = ErrorMapd("pred", "label")(d)["error"]
    p = d["pred"].as_tensor().numpy()
    ref = (p.argmax(0) != label[0].numpy()).astype(np.float32)
    np.testing.assert_array_equal(err.as_tensor()[0].numpy(), ref)


def test_sigmoid_regions_in_a_zero_frame_are_still_refused():
    """The blended layer of a frame is no way around the refusal of sigmoid probabilities inside the box."""
    from monai_unc.transforms import ErrorMap

    p = torch.zeros(3, 12, 12, 12)
    p[:, 2:10, 2:10, 2:10] = 0.2  # three sigmoid regions, summing to 0.6 everywhere inside the box
    with pytest.raises(ValueError, match="do not sum to 1"):
        ErrorMap()(p, torch.zeros(1, 12, 12, 12))


@pytest.mark.parametrize("nearest_interp", [True, False])
def test_samples_are_inverted_like_each_sample_alone(nearest_interp):
    """Found by review: MONAI's ``Invertd(keys="samples")`` on the ``(S, C, *spatial)`` samples of an inferer with
    ``keep_samples=True`` failed inside the inverse of the crop ("applying transform <...Cropd.inverse>"), naming
    neither the key nor the cause. ``InvertSamplesd`` inverts them; the reference inverts each sample alone with the
    stock ``Invertd``, as ``pred`` is inverted."""
    from monai.data import MetaTensor
    from monai.transforms import Invertd

    from monai_unc.transforms import InvertSamplesd

    d, pre, affine, shape = _preprocessed_case()
    samples = d["samples"]
    out = InvertSamplesd("samples", transform=pre, orig_keys="image", nearest_interp=nearest_interp)(dict(d))
    back = out["samples"]
    assert isinstance(back, MetaTensor) and tuple(back.shape) == (4, 3, *shape[1:])
    assert torch.allclose(back.affine.double(), affine.double(), atol=1e-5)
    invert = Invertd("pred", transform=pre, orig_keys="image", nearest_interp=nearest_interp)
    for i in range(samples.shape[0]):
        alone = invert({"image": d["image"], "pred": MetaTensor(samples[i].as_tensor().clone(), meta=dict(
            samples.meta))})["pred"]
        assert torch.allclose(back[i].as_tensor(), alone.as_tensor(), atol=1e-6), i
    if not nearest_interp:  # the inverse is linear: the mean of the inverted samples is the inverted mean
        mean = invert({"image": d["image"], "pred": MetaTensor(samples.as_tensor().mean(0), meta=dict(
            samples.meta))})["pred"]
        assert torch.allclose(back.as_tensor().mean(0), mean.as_tensor(), atol=1e-5)
    assert out["image"] is d["image"]  # the image is left as it was


def test_inverting_samples_refuses_what_is_not_a_stack_of_samples_naming_the_key():
    from monai_unc.transforms import InvertSamplesd, invert_samples

    d, pre, _, _ = _preprocessed_case()
    one = d["samples"][0]
    one_item = r"^mc of shape \(3, 24, 24, 24\) is one channel-first item \(C, \*spatial\).*Invertd"
    with pytest.raises(ValueError, match=one_item):
        InvertSamplesd("mc", transform=pre)({**d, "mc": one})
    with pytest.raises(ValueError, match=r"^mc must be samples \(S, C, \*spatial\) on the grid of 'image'"):
        InvertSamplesd("mc", transform=pre)({**d, "mc": d["samples"][:, :, 1:]})
    with pytest.raises(ValueError, match=r"^mc: orig_keys 'img' is not in the data"):
        InvertSamplesd("mc", transform=pre, orig_keys="img")({**d, "mc": d["samples"]})
    with pytest.raises(TypeError, match="MetaTensor"):
        invert_samples(d["samples"], d["image"].as_tensor(), pre)
    with pytest.raises(ValueError, match="orig_keys must be one key or one per key"):
        InvertSamplesd(["a", "b"], transform=pre, orig_keys=["x", "y", "z"])
    with pytest.raises(TypeError, match="nearest_interp"):
        InvertSamplesd("a", transform=pre, nearest_interp="no")
