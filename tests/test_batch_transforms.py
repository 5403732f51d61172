"""Hostile review of monai_unc.transforms: the transforms act on one decollated item; a batched MetaTensor (the
output of an inferer before ``decollate_batch``) is refused instead of being read as samples or channels."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from monai.data import MetaTensor, decollate_batch, list_data_collate

from monai_unc.transforms import (
    AggregateUncertaintyd,
    ErrorMapd,
    SamplesToLabelsd,
    UncertaintyMeasuresd,
    UncertaintyToDiscreted,
)


def _batch(n: int) -> MetaTensor:
    """Softmax probabilities ``(B, 2, 6, 5, 4)`` of ``n`` cases, collated as a MONAI DataLoader does."""
    g = torch.Generator().manual_seed(n)
    items = []
    for i in range(n):
        p = torch.softmax(torch.randn(2, 6, 5, 4, generator=g) * 3, 0)
        items.append({"pred": MetaTensor(p, affine=torch.diag(torch.tensor([1.0 + i, 2.0, 3.0, 1.0])),
                                         meta={"filename_or_obj": f"case{i}.nii.gz"})})
    return list_data_collate(items)["pred"]


@pytest.mark.parametrize("n", [1, 2])
def test_a_batch_of_probabilities_is_not_read_as_samples(n):
    batch = _batch(n)
    assert batch.is_batch
    # before: two patients' probabilities averaged into one "predictive entropy" map named after both files
    with pytest.raises(ValueError, match=r"pred is a batch .*decollate_batch"):
        UncertaintyMeasuresd("pred")({"pred": batch})
    with pytest.raises(ValueError, match="pred is a batch"):
        ErrorMapd()({"pred": batch, "label": batch[:, :1].round()})
    with pytest.raises(ValueError, match="u is a batch"):
        UncertaintyToDiscreted("u", quantile=0.9)({"u": batch[:, :1]})
    with pytest.raises(ValueError, match="u is a batch"):
        AggregateUncertaintyd("u")({"u": batch[:, :1]})
    with pytest.raises(ValueError, match="s is a batch"):
        SamplesToLabelsd("s")({"s": batch})


def test_decollated_items_give_the_numpy_maps_and_their_own_meta():
    batch = _batch(2)
    for i, item in enumerate(decollate_batch({"pred": batch})):
        out = UncertaintyMeasuresd("pred", input_type="probs", measures="predictive_entropy")(item)
        p = batch[i].as_tensor().double().numpy()
        np.testing.assert_allclose(out["predictive_entropy"].numpy(), -(p * np.log(p)).sum(0, keepdims=True),
                                   atol=1e-6)
        assert out["predictive_entropy"].meta["filename_or_obj"] == f"case{i}.nii.gz"
        assert float(out["predictive_entropy"].affine[0, 0]) == 1.0 + i
        err = ErrorMapd()({"pred": item["pred"], "label": item["pred"][:1].round()})["error"]
        np.testing.assert_array_equal(err.numpy(), (p.argmax(0) != p[0].round())[None].astype(np.float32))


def test_samples_stacked_from_a_batch_of_one_are_refused_with_the_way_out():
    """review37: MC samples of a loader's batch of one, ``torch.stack([softmax(net(batch)) ...])[:, 0]``, keep
    ``is_batch`` and look like the outputs of several batches of one concatenated (several patients); the refusal
    named only ``decollate_batch``, which splits the samples into one "case" per sample. It names ``as_tensor()``."""
    batch = _batch(1)
    samples = torch.stack([torch.softmax(batch * (1 + k), 1) for k in range(4)])[:, 0]
    assert samples.is_batch and tuple(samples.shape) == (4, 2, 6, 5, 4)
    with pytest.raises(ValueError, match=r"is a batch .*over 4 entries.*pass s\.as_tensor\(\)"):
        UncertaintyMeasuresd("s", measures=["mutual_information"])({"s": samples})
    out = UncertaintyMeasuresd("s", measures=["mutual_information"])({"s": samples.as_tensor()})
    assert tuple(out["mutual_information"].shape) == (1, 6, 5, 4)
    with pytest.raises(ValueError, match="is a batch") as refused:  # a real batch: no such hint
        UncertaintyMeasuresd("p", input_type="probs")({"p": _batch(2)})
    assert "as_tensor" not in str(refused.value)
