"""Hostile review of monai_unc.transforms: inputs MONAI users plausibly hand the transforms, compared with brute-force
references computed here."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from monai.data import MetaTensor

from monai_unc.transforms import AggregateUncertainty, AggregateUncertaintyd


def _map_and_probability_mask(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(1, 8, 9, 7, generator=g)
    p1 = torch.full((1, 8, 9, 7), 0.02)  # a sigmoid bundle's foreground probability after Activationsd(sigmoid)
    p1[:, 2:5, 3:7, 1:4] = 0.97
    return u, p1


@pytest.mark.parametrize("container", ["tensor", "numpy", "meta"])
def test_aggregate_refuses_a_probability_map_as_mask(container):
    """A one-channel probability map (a binary sigmoid bundle's ``pred``) is "non-zero" everywhere: used as a mask it
    silently selected the whole volume. It must be thresholded first."""
    u, p1 = _map_and_probability_mask()
    mask = {"tensor": p1, "numpy": p1.numpy(), "meta": MetaTensor(p1)}[container]
    with pytest.raises(ValueError, match="mask.*threshold"):
        AggregateUncertainty("mean")(u, mask)
    with pytest.raises(ValueError, match="'pred'.*threshold"):
        AggregateUncertaintyd("u", mask_key="pred")({"u": u, "pred": mask})


def test_aggregate_binary_float_and_label_masks_still_work():
    u, p1 = _map_and_probability_mask()
    binary = (p1 >= 0.5).float()  # AsDiscreted(threshold=0.5) gives floats in {0, 1}
    ref = float(u[binary > 0].double().mean())
    assert float(AggregateUncertainty("mean")(u, binary)) == pytest.approx(ref, rel=1e-12)
    labels = binary * 2.0  # a float label map read from NIfTI: non-zero = inside
    assert float(AggregateUncertainty("mean")(u, labels)) == pytest.approx(ref, rel=1e-12)
    assert float(AggregateUncertainty("mean")(u, binary.bool().numpy())) == pytest.approx(ref, rel=1e-12)
    onehot = torch.cat([1 - binary, binary])  # C >= 2: argmax > 0
    assert float(AggregateUncertainty("mean")(u, onehot)) == pytest.approx(ref, rel=1e-12)
    np.testing.assert_allclose(float(AggregateUncertaintyd("u", mask_key="m")({"u": u, "m": binary})["u_mean"]), ref,
                               rtol=1e-12)


def _regions(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """BraTS-like nested regions (TC inside WT, ET inside TC) as sigmoid probabilities, and the BraTS label map."""
    g = torch.Generator().manual_seed(seed)
    label = torch.zeros(1, 10, 10, 10, dtype=torch.long)
    label[:, 2:8, 2:8, 2:8] = 2
    label[:, 3:7, 3:7, 3:7] = 1
    label[:, 4:6, 4:6, 4:6] = 4
    wt, tc, et = label > 0, (label == 1) | (label == 4), label == 4
    masks = torch.cat([tc, wt, et]).float()
    probs = (0.9 * masks + 0.1 * torch.rand(masks.shape, generator=g)).clamp(0, 1)
    return probs, label


def test_error_map_refuses_overlapping_region_probabilities():
    """Region-based (sigmoid) probabilities ``(C, *spatial)`` overlap (TC inside WT): their argmax is no class, so the
    error map of them against a label map was silently meaningless."""
    from monai_unc.transforms import ErrorMap, ErrorMapd, error_map

    probs, label = _regions()
    with pytest.raises(ValueError, match="pred.*overlap"):
        error_map(probs, label)
    with pytest.raises(ValueError, match="pred.*overlap"):
        ErrorMap()(probs.numpy(), label.numpy())
    with pytest.raises(ValueError, match="pred.*overlap"):
        ErrorMapd("pred", "label")({"pred": MetaTensor(probs), "label": label})
    with pytest.raises(ValueError, match="seg.*overlap"):
        AggregateUncertaintyd("u", mask_key="seg")({"u": torch.rand(1, 10, 10, 10), "seg": probs})


def test_error_map_still_takes_softmax_log_probabilities_logits_and_refuses_padded_one_hot():
    """Class probabilities, their logarithm (``UncertaintyEvaluator``'s ``pred`` before the bundle's softmax) and
    logits reduce by argmax as before; compared with a brute-force loop. A one-hot map zero-padded by ``Invertd`` is
    refused: its zeros are those of a one-hot map without its background channel whose foreground is a box, whose
    argmax merged the background with class 1 (found by hostile review); its argmax (a label map) is taken."""
    from monai_unc.transforms import error_map

    g = torch.Generator().manual_seed(3)
    logits = 3 * torch.randn(3, 6, 5, 4, generator=g)
    probs = torch.softmax(logits, 0)
    label = torch.randint(0, 3, (1, 6, 5, 4), generator=g)
    onehot = torch.nn.functional.one_hot(probs.argmax(0), 3).permute(3, 0, 1, 2).float()
    onehot[:, :2] = 0  # the zero padding of an inverted crop
    expected = np.zeros((1, 6, 5, 4), dtype=np.float32)
    for idx in np.ndindex(6, 5, 4):
        expected[(0, *idx)] = float(int(np.argmax(probs.numpy()[(slice(None), *idx)])) != int(label[(0, *idx)]))
    for pred in (probs, torch.log(probs), logits):
        np.testing.assert_array_equal(error_map(pred, label).numpy(), expected)
    expected_padded = expected.copy()
    expected_padded[:, :2] = (label[:, :2] != 0).numpy()
    with pytest.raises(ValueError, match="pred: every channel is 0 at 40 voxel.*one-hot.*background channel"):
        error_map(onehot, label)
    np.testing.assert_array_equal(error_map(onehot.argmax(0, keepdim=True), label).numpy(), expected_padded)


def test_samples_to_labels_refuses_region_samples_and_keeps_softmax_samples():
    from monai_unc.transforms import SamplesToLabels, SamplesToLabelsd

    probs, _ = _regions()
    samples = torch.stack([probs, probs.flip(1)])  # two multi-label (sigmoid) samples (S, C, *spatial)
    with pytest.raises(ValueError, match="samples.*overlap"):
        SamplesToLabelsd("samples")({"samples": samples})
    g = torch.Generator().manual_seed(4)
    soft = torch.softmax(torch.randn(4, 3, 5, 6, 7, generator=g), 1)
    got = SamplesToLabels()(soft.numpy())
    np.testing.assert_array_equal(got, np.argmax(soft.numpy(), axis=1))


def test_measures_normalize_must_be_a_bool():
    """``--...#normalize false`` on a bundle command line arrives as the string "false", which bool() turns into True:
    the entropies were divided by log C although the user switched it off. The inferers refuse it; so does this."""
    from monai_unc.transforms import UncertaintyMeasures, UncertaintyMeasuresd

    for bad in ("false", 0, None):
        with pytest.raises(TypeError, match="normalize"):
            UncertaintyMeasures(normalize=bad)
        with pytest.raises(TypeError, match="normalize"):
            UncertaintyMeasuresd("samples", normalize=bad)
    assert UncertaintyMeasures(normalize=np.bool_(True)).normalize is True


def test_quantile_flags_that_cover_everything_warn():
    """A mutual information map is exactly 0 on most voxels (clamped at 0); its 0.95 quantile is 0 and ``u >= 0`` flags
    every voxel, not the 5 % asked for. The documented tie rule stays; it warns."""
    from monai_unc.transforms import UncertaintyToDiscrete, UncertaintyToDiscreted

    g = torch.Generator().manual_seed(0)
    mi = torch.zeros(1, 20, 20, 10)
    mi[:, 8:12, 8:12, 4:6] = torch.rand(1, 4, 4, 2, generator=g) + 0.1  # 32 uncertain voxels of 4000
    with pytest.warns(UserWarning, match="every voxel is flagged"):
        flags = UncertaintyToDiscreted("mi", quantile=0.95, output_key="flag")({"mi": mi})["flag"]
    assert int(flags.sum()) == mi.numel()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        top = UncertaintyToDiscrete(quantile=0.995)(mi)  # falls inside the uncertain voxels: no warning
        assert 0 < int(top.sum()) <= 32
        UncertaintyToDiscrete(quantile=0.0)(mi)  # q = 0 asks for every voxel


@pytest.mark.parametrize("kwargs", [{"threshold": True}, {"threshold": "0.5"}, {"quantile": True},
                                    {"quantile": "0.9"}, {"threshold": None, "quantile": [0.9]}])
def test_discrete_refuses_bool_and_string_thresholds(kwargs):
    """threshold=True was read as 1.0 (nothing flagged), quantile=True as 1.0 (the maximum flagged), strings as
    numbers, silently; AggregateUncertainty(method='threshold') already refused them."""
    from monai_unc.transforms import UncertaintyToDiscrete, UncertaintyToDiscreted

    name = "threshold" if kwargs.get("threshold") is not None else "quantile"
    with pytest.raises(TypeError, match=f"^{name} must be a real number"):
        UncertaintyToDiscrete(**kwargs)
    with pytest.raises(TypeError, match=f"^{name} must be a real number"):
        UncertaintyToDiscreted("u", **kwargs)


def test_discrete_numpy_thresholds_still_work():
    from monai_unc.transforms import UncertaintyToDiscrete

    u = np.array([[[0.2, 0.5, 0.9]]], dtype=np.float32)
    assert UncertaintyToDiscrete(threshold=np.float32(0.5))(u).tolist() == [[[0, 1, 1]]]
    assert UncertaintyToDiscrete(threshold=1)(u).tolist() == [[[0, 0, 0]]]
    assert UncertaintyToDiscrete(quantile=np.float64(1.0))(u).tolist() == [[[0, 0, 1]]]


def test_discrete_zero_dimensional_tensor_and_array_thresholds_still_work():
    """review37: a threshold of torch.quantile (a 0-d tensor) or a 0-d numpy array had been read as its number; the
    refusal of bools and strings refused it too. A 0-d bool tensor stays refused."""
    from monai_unc.transforms import UncertaintyToDiscrete, UncertaintyToDiscreted

    u = torch.tensor([[[0.2, 0.5, 0.9]]])
    assert UncertaintyToDiscrete(threshold=torch.quantile(u.flatten(), 0.5))(u).tolist() == [[[0, 1, 1]]]
    assert UncertaintyToDiscrete(threshold=np.array(0.75))(u).tolist() == [[[0, 0, 1]]]
    assert UncertaintyToDiscrete(quantile=torch.tensor(1.0))(u).tolist() == [[[0, 0, 1]]]
    assert UncertaintyToDiscreted("u", threshold=torch.tensor(1))({"u": u})["u"].tolist() == [[[0, 0, 0]]]
    with pytest.raises(TypeError, match="^threshold must be a real number"):
        UncertaintyToDiscrete(threshold=torch.tensor(True))


@pytest.mark.parametrize("container", ["tensor", "numpy"])
def test_aggregate_mask_without_channel_axis_is_named_as_such(container):
    """A binary mask (H, W, D) without its channel axis was read as H channels and refused as 'multi-label masks or
    sigmoid probabilities'; the message now names the missing channel axis. With it, the masked mean is numpy's."""
    u, p1 = _map_and_probability_mask()
    m = (p1 > 0.5)[0].to(torch.uint8)
    if container == "numpy":
        u, m = u.numpy(), m.numpy()
    with pytest.raises(ValueError, match=r"must be channel first \(1 or C, \*spatial\).*got shape \(8, 9, 7\)"):
        AggregateUncertainty()(u, m)
    with pytest.raises(ValueError, match=r"mask 'm' must be channel first"):
        AggregateUncertaintyd("u", mask_key="m")({"u": u, "m": m})
    ref = float(np.asarray(u)[0][np.asarray(m) > 0].mean())
    assert float(AggregateUncertainty()(u, m[None])) == pytest.approx(ref, rel=1e-6)
    assert float(AggregateUncertaintyd("u", mask_key="m")({"u": u, "m": m[None]})["u_mean"]) == pytest.approx(
        ref, rel=1e-6)


@pytest.mark.parametrize("template", [None, 3, ("a",), ["{key}"]])
def test_output_key_must_be_a_string_template(template):
    """A non-string output_key was accepted when built (one key) and failed at the first case with
    AttributeError: 'NoneType' object has no attribute 'format' (or TypeError: argument of type 'int' is not
    iterable when built); it is now a TypeError naming output_key when built."""
    from monai_unc.transforms import SamplesToLabelsd, UncertaintyMeasuresd, UncertaintyToDiscreted

    for build in (lambda: UncertaintyMeasuresd("x", output_key=template),
                  lambda: AggregateUncertaintyd("x", output_key=template),
                  lambda: UncertaintyToDiscreted("x", threshold=0.5, output_key=template),
                  lambda: SamplesToLabelsd("x", output_key=template)):
        with pytest.raises(TypeError, match="^output_key must be a string template"):
            build()


def test_missing_statistics_key_is_named():
    """A missing expected_entropy_key / mean_sq_key raised a bare KeyError('ee'); the message names the argument."""
    from monai_unc.transforms import UncertaintyMeasuresd

    p = np.full((2, 3, 4), 0.5)
    t = UncertaintyMeasuresd("p", input_type="probs", expected_entropy_key="ee", mean_sq_key="sq")
    with pytest.raises(KeyError, match="expected_entropy_key 'ee' is not in the data"):
        t({"p": p, "sq": p**2})
    with pytest.raises(KeyError, match="mean_sq_key 'sq' is not in the data"):
        t({"p": p, "ee": np.zeros((1, 3, 4))})
    out = t({"p": p, "ee": np.zeros((1, 3, 4)), "sq": p**2})
    np.testing.assert_allclose(out["mutual_information"], np.log(2) * np.ones((1, 3, 4)))
    np.testing.assert_allclose(out["variance"], np.zeros((1, 3, 4)), atol=1e-15)


def test_mean_probabilities_never_replace_the_engines_pred():
    """UncertaintyMeasuresd("samples") before a bundle's Activationsd(sigmoid) + AsDiscreted replaced the engine's
    pred (per-region logits) with probabilities, and every voxel was labelled foreground; it is refused, and the
    documented ways out give the label map of the mean probabilities and the numpy maps."""
    from monai.transforms import Activationsd, AsDiscreted, Compose

    from monai_unc.transforms import UncertaintyMeasuresd

    g = torch.Generator().manual_seed(0)
    samples = torch.sigmoid(torch.randn(5, 3, 6, 5, 4, generator=g) * 2).double()
    mean = samples.mean(0)
    logits = torch.log(mean) - torch.log1p(-mean)  # what the engine stores for activation="sigmoid"
    post = [Activationsd("pred", sigmoid=True), AsDiscreted("pred", threshold=0.5)]
    with pytest.raises(ValueError, match="mean probabilities of 'samples' would replace the data's 'pred'"):
        UncertaintyMeasuresd("samples", multilabel=True)({"pred": MetaTensor(logits), "samples": samples})
    for t in (UncertaintyMeasuresd("samples", multilabel=True, measures=["predictive_entropy"]),
              UncertaintyMeasuresd("samples", multilabel=True, output_key="{key}_{measure}")):
        out = Compose([t, *post])({"pred": MetaTensor(logits.clone()), "samples": samples})
        np.testing.assert_array_equal(out["pred"].numpy(), (mean.numpy() >= 0.5).astype(np.float64))
        pe = out.get("predictive_entropy", out.get("samples_predictive_entropy"))
        m = mean.numpy()
        np.testing.assert_allclose(pe, -(m * np.log(m) + (1 - m) * np.log1p(-m)), atol=1e-12)
    # without a pred in the data, the default still writes the mean probabilities under "pred"
    np.testing.assert_allclose(UncertaintyMeasuresd("samples", multilabel=True)({"samples": samples})["pred"], mean)


def _cube_on_two_grids() -> tuple[MetaTensor, MetaTensor, MetaTensor]:
    """A label on an LPS grid and the same label reoriented to RAS: one shape, two grids."""
    from monai.transforms import Orientationd

    aff = torch.tensor([[-1.0, 0, 0, 8], [0, -1, 0, 8], [0, 0, 1, 0], [0, 0, 0, 1]])
    lab = torch.zeros(1, 8, 8, 8)
    lab[:, :3, :3, :] = 1
    label = MetaTensor(lab, affine=aff)
    ras = Orientationd("x", axcodes="RAS")({"x": MetaTensor(lab.clone(), affine=aff)})["x"]
    probs = MetaTensor(torch.cat([1 - ras.as_tensor(), ras.as_tensor()]), meta=ras.meta)
    return label, ras, probs


def test_error_map_and_mask_on_another_grid_are_refused():
    """A perfect prediction left on the Orientationd grid of a cubic scan and the label on the file's grid: the
    error map counted 28 % of the voxels as errors, silently; two MetaTensors of one shape on different grids are
    refused, and the prediction brought back to the label's grid gives no error (numpy reference: all zero)."""
    from monai.transforms import Orientation

    from monai_unc.transforms import ErrorMap, ErrorMapd, error_map

    label, ras, probs = _cube_on_two_grids()
    for compute in (lambda: ErrorMapd()({"pred": probs, "label": label}), lambda: ErrorMap()(probs, label),
                    lambda: error_map(probs, label)):
        with pytest.raises(ValueError, match="pred and label have the same shape but different affines"):
            compute()
    u = MetaTensor(torch.rand(1, 8, 8, 8), meta=ras.meta)
    with pytest.raises(ValueError, match="img and mask have the same shape but different affines"):
        AggregateUncertainty()(u, label)
    with pytest.raises(ValueError, match="u and m have the same shape but different affines"):
        AggregateUncertaintyd("u", mask_key="m")({"u": u, "m": label})
    back = Orientation(axcodes="LPS")(probs)
    np.testing.assert_allclose(back.affine.numpy(), label.affine.numpy())
    assert float(ErrorMapd()({"pred": back, "label": label})["error"].abs().sum()) == 0.0
    # same grid: the masked mean is numpy's
    u_back = Orientation(axcodes="LPS")(u)
    ref = float(u_back.numpy()[label.numpy() > 0].mean())
    assert float(AggregateUncertainty()(u_back, label)) == pytest.approx(ref, rel=1e-6)
    # a MetaTensor built without geometry (MONAI's identity affine) is not judged
    assert float(ErrorMap()(MetaTensor(probs.as_tensor()), label).sum()) > 0


@pytest.mark.parametrize("input_type,shape", [("probs", (1, 4, 3)), ("samples", (5, 1, 4, 3))])
def test_one_channel_sigmoid_map_names_multilabel(input_type, shape):
    """A one-channel sigmoid map (1, H, W) as probabilities was refused as 'at least 2 classes along dim 1, got
    shape (1, 1, 4, 3)', a dimension and a shape never passed; the message gives the user's shape and the way out,
    which gives numpy's binary entropy."""
    from monai_unc.transforms import UncertaintyMeasures

    p = np.random.default_rng(0).uniform(0.05, 0.95, size=shape)
    msg = rf"img must be .* at least 2 classes, got shape \({shape[0]}, .*multilabel=True"
    with pytest.raises(ValueError, match=msg):
        UncertaintyMeasures(input_type=input_type)(p)
    out = UncertaintyMeasures(input_type=input_type, multilabel=True, measures="predictive_entropy")(p)
    m = p if input_type == "probs" else p.mean(0)
    np.testing.assert_allclose(out["predictive_entropy"], -(m * np.log(m) + (1 - m) * np.log1p(-m)), atol=1e-12)
