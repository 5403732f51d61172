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
