"""Review 67: a resume across review 66's element-wise token dropout predicts the older cases again.

Review 66 made inserted dropout (``--dropout``, Rate-In's inserted layers) element-wise on the tokens of a
transformer, where earlier versions drew channel-wise masks that erased whole tokens. ``infer.json`` and the case
records did not say which, so a resumed run kept the older cases beside new ones with only a version warning. The
settings now carry ``dropout_masks`` where an inserted site drops elements; convolutional networks (every site
channel-wise, as before) record nothing new and keep resuming.
"""

from __future__ import annotations

import json
import types
import warnings

import pytest
from monai.networks.nets import UNETR, UNet

from monai_unc import __version__
from monai_unc.inferers import RateInSource, add_dropout
from monai_unc.io.provenance import compare_fingerprints, prediction_fingerprint
from monai_unc.workflows.infer import InferSettings, check_run_settings, is_finished
from monai_unc.workflows.infer_plan import ELEMENTWISE_DROPOUT_MASKS, inserted_dropout_masks
from monai_unc.workflows.reuse import settings_of_fingerprint


def _unetr() -> UNETR:
    return UNETR(1, 2, (16, 16, 16), feature_size=4, hidden_size=24, mlp_dim=24, num_heads=2)


def _unet() -> UNet:
    return UNet(3, 1, 2, (4, 8), (2,), num_res_units=0)


def _with(*sources):
    return types.SimpleNamespace(sources=list(sources))


def test_inserted_dropout_on_tokens_gets_the_marker_and_a_unet_does_not():
    unetr, unet = _unetr(), _unet()
    assert inserted_dropout_masks(unetr, _with()) is None  # nothing inserted (its own dropout is not)
    add_dropout(unetr, 0.1, after=["vit.blocks.0", "encoder1"])  # a token site and a convolutional one
    assert inserted_dropout_masks(unetr, _with()) == ELEMENTWISE_DROPOUT_MASKS
    add_dropout(unet, 0.1)  # every stage: convolutional
    assert inserted_dropout_masks(unet, _with()) is None
    # Rate-In layers a ratein source inserts into a network without dropout
    assert inserted_dropout_masks(_unetr(), _with(RateInSource(2, after=["vit.blocks.1"]))) == ELEMENTWISE_DROPOUT_MASKS
    assert inserted_dropout_masks(_unetr(), _with(RateInSource(2, after=["encoder1"]))) is None
    assert inserted_dropout_masks(_unet(), _with(RateInSource(2))) is None
    # channel-wise asked for at every site: the masks of earlier versions, no marker
    assert inserted_dropout_masks(_unetr(), _with(RateInSource(2, after=["vit.blocks.1"], channelwise=True))) is None


def _settings(**kwargs) -> InferSettings:
    return InferSettings(model="network: UNETR", method="mcdropout", samples=2, roi=None, overlap=0.25,
                         intensity="none", measures=["mutual_information"], seed=0, activation="softmax",
                         checkpoints=[], dropout=0.1, **kwargs)


def _finished_folder(out, settings: InferSettings):
    """A folder of one finished case ``c1`` (no files) made with ``settings`` by this version."""
    out.mkdir()
    recorded = settings.to_json()
    (out / "infer.json").write_text(json.dumps({"settings": recorded, "monai_unc_version": __version__}))
    (out / "c1.json").write_text(json.dumps({"case": "c1", "files": [], "method": "mcdropout", "num_samples": 2,
                                             "mi_meaning": "epistemic", "fingerprint": recorded}))
    return out


def test_a_token_run_without_the_marker_is_predicted_again_and_a_convolutional_one_is_kept(tmp_path):
    old, new = _settings(), _settings(dropout_masks=ELEMENTWISE_DROPOUT_MASKS)
    assert "dropout_masks" not in old.to_json()  # convolutional runs record what they recorded before
    assert new.to_json()["dropout_masks"] == ELEMENTWISE_DROPOUT_MASKS
    # a run made before review 66 on a transformer (no marker), resumed now: not refused, its case predicted again
    out = _finished_folder(tmp_path / "tokens", old)
    check_run_settings(out, new)
    assert json.loads((out / "infer.json").read_text())["settings"]["dropout_masks"] == ELEMENTWISE_DROPOUT_MASKS
    with pytest.warns(UserWarning, match="case 'c1' was predicted with other settings .*dropout_masks"):
        assert not is_finished("c1", out, new)
    # a convolutional run resumed: the same settings, the case kept, no warning
    out = _finished_folder(tmp_path / "conv", old)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_run_settings(out, old)
        assert is_finished("c1", out, old)


def test_a_rule_of_channel_wise_token_masks_does_not_match_element_wise_predictions(tmp_path):
    before = prediction_fingerprint(_finished_folder(tmp_path / "before", _settings()))
    now = prediction_fingerprint(_finished_folder(tmp_path / "now", _settings(dropout_masks=ELEMENTWISE_DROPOUT_MASKS)))
    assert "dropout_masks" not in before and now["dropout_masks"] == ELEMENTWISE_DROPOUT_MASKS
    assert compare_fingerprints(before, now) == ("mismatch", [("dropout_masks", None, ELEMENTWISE_DROPOUT_MASKS)])
    # infer --settings-from a rule certified on such predictions: a field this version knows
    assert settings_of_fingerprint(now, "rule.json").options["dropout"] == 0.1
