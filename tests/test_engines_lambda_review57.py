"""UncertaintyEvaluator warns when a Lambda / Lambdad may apply the activation it looks for (review 57).

``pred_format="auto"`` reads ``Activationsd``; a softmax written as ``Lambdad(keys="pred", func=...)`` is invisible to
it, so the mean probabilities were stored as they are and went through that softmax (0.9 became 0.69) without a word.
"""

from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("ignite")

from monai.transforms import Activationsd, Compose, Lambda, Lambdad  # noqa: E402

from monai_unc.engines import UncertaintyEvaluator  # noqa: E402


def _evaluator(post, **kwargs):
    net = torch.nn.Conv3d(1, 2, 1)
    return UncertaintyEvaluator(device=torch.device("cpu"), val_data_loader=[], network=net, postprocessing=post,
                                **kwargs)


def _softmax(x):
    return torch.softmax(x, 0)


@pytest.mark.parametrize("post", [
    Compose([Lambdad(keys="pred", func=_softmax)]),
    Compose([Compose([Lambdad(keys=["label", "pred"], func=_softmax)])]),
    Compose([Lambda(func=lambda d: d)]),
])
def test_opaque_transform_on_pred_warns(post) -> None:
    with pytest.warns(UserWarning, match="pred_format='log_probabilities'"):
        ev = _evaluator(post)
    assert ev.pred_format == "probabilities"


@pytest.mark.parametrize("post", [
    None,
    Compose([Lambdad(keys="label", func=_softmax)]),  # another key
    Compose([Activationsd(keys="pred", softmax=True), Lambdad(keys="pred", func=_softmax)]),  # an activation found
])
def test_no_warning_when_nothing_is_hidden(post) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _evaluator(post)


def test_explicit_format_is_not_second_guessed() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ev = _evaluator(Compose([Lambdad(keys="pred", func=_softmax)]), pred_format="log_probabilities")
    assert ev.pred_format == "log_probabilities"
