"""UncertaintyEvaluator warns when a function it cannot read may apply the activation it looks for (reviews 57, 58).

``pred_format="auto"`` reads ``Activationsd``; a softmax written as ``Lambdad(keys="pred", func=...)`` (review 57) or
as ``Activationsd(keys="pred", other=...)`` (review 58) is invisible to it, so the mean probabilities were stored as
they are and went through that softmax (0.9 became 0.69) without a word. A ``Lambdad`` whose result is dropped, or one
after an ``AsDiscreted`` that made ``pred`` a label map, cannot touch the probabilities (review 58).
"""

from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("ignite")

from monai.transforms import Activationsd, AsDiscreted, Compose, Lambda, Lambdad  # noqa: E402

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


def _remap(x):
    return torch.where(x == 2, 4, x)


@pytest.mark.parametrize("post", [
    Compose([Activationsd(keys="pred", other=_softmax)]),
    Compose([Compose([Activationsd(keys=["label", "pred"], other=[None, _softmax])])]),
    Compose([Activationsd(keys="pred", other=_softmax), Activationsd(keys="pred", softmax=True)]),
])
def test_activation_other_function_on_pred_warns(post) -> None:
    p = torch.tensor([[0.9], [0.1]])
    assert float(post({"pred": p, "label": p})["pred"][0, 0]) < 0.7  # the harm: 0.9 flattened to 0.69 (or 0.59)
    with pytest.warns(UserWarning, match=r"Activationsd\(keys=.*other=.*pred_format='log_probabilities'"):
        ev = _evaluator(post)
    assert ev.pred_format == "probabilities"


@pytest.mark.parametrize("post", [
    Compose([Lambdad(keys="pred", func=print, overwrite=False)]),  # result dropped
    Compose([AsDiscreted(keys="pred", argmax=True), Lambdad(keys="pred", func=_remap)]),  # a label map remapped
    Compose([AsDiscreted(keys="pred", threshold=0.5), Compose([Lambdad(keys="pred", func=_remap)])]),
    Compose([Activationsd(keys="label", other=_softmax)]),  # another key
])
def test_no_warning_where_no_function_sees_the_probabilities(post) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _evaluator(post).pred_format == "probabilities"


def test_lambdad_before_the_argmax_still_warns() -> None:
    post = Compose([Lambdad(keys="pred", func=_softmax), AsDiscreted(keys="pred", argmax=True)])
    with pytest.warns(UserWarning, match="Lambdad"):
        _evaluator(post)
