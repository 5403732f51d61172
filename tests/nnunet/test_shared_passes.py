"""Shared passes in the nnU-Net predictor: with injected dropout masks, the shared computation equals full passes."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("nnunetv2")

from monai_unc.inferers import DropoutHook  # noqa: E402
from tests.inferers.test_shared import MaskBank  # noqa: E402
from tests.nnunet.test_nnunet import make_predictor  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _bank_drop(bank: MaskBank, names: dict[int, str]):
    def drop(self, x):  # masks keyed by the name of the hooked module: the same in both predictors
        return x * bank.keep(names[id(self)], x, 1 - self.p, True) / (1 - self.p)

    return drop


@pytest.mark.parametrize("sources", [("dropout",), ("dropout", "mirroring")])
def test_predictor_shared_equals_full_passes_with_injected_masks(sources, monkeypatch):
    bank = MaskBank()
    names: dict[int, str] = {}
    monkeypatch.setattr(DropoutHook, "_drop", _bank_drop(bank, names))
    data = torch.randn(1, 20, 16, 16)  # two overlapping windows along the first axis
    results = []
    for share in (False, True):
        pred = make_predictor(n_folds=1, uncertainty_sources=sources, num_samples=5, dropout_p=0.3, seed=0,
                              mirror_axes=(0, 1), share_passes=share, sample_batch_size=3)
        bank.watch(pred.network)
        names.update({id(h): n for n, m in pred.network.named_modules() for h in m._forward_hooks.values()
                      if isinstance(h, DropoutHook)})
        bank.seen.clear()
        results.append(pred.predict_uncertainty_from_preprocessed_data(data))
    full, shared = results
    for key in full.moments:
        torch.testing.assert_close(shared.moments[key], full.moments[key], rtol=1e-4, atol=2e-5, msg=key)
    mi = full.measures(["mutual_information"])["mutual_information"]
    assert float(mi.max()) > 1e-4  # the masks differ between passes: the comparison can fail


def test_predictor_options_are_checked():
    import monai_unc.nnunet as mun

    with pytest.raises(TypeError, match="share_passes"):
        mun.UncertaintyPredictor(("dropout",), share_passes=1, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="sample_batch_size"):
        mun.UncertaintyPredictor(("dropout",), sample_batch_size=0, device=torch.device("cpu"))


def test_run_config_records_how_the_passes_ran():
    """A resume (``--continue_prediction``) compares ``share_passes`` / ``sample_batch_size`` (other seeded draws);
    sources without dropout / Rate-In passes record neither (their folders resume as before)."""
    shared = make_predictor(n_folds=1, uncertainty_sources=("dropout",), num_samples=4, dropout_p=0.2,
                            sample_batch_size=2)
    full = make_predictor(n_folds=1, uncertainty_sources=("dropout",), num_samples=4, dropout_p=0.2,
                          share_passes=False)
    assert (shared.run_config()["share_passes"], shared.run_config()["sample_batch_size"]) == (True, 2)
    assert (full.run_config()["share_passes"], full.run_config()["sample_batch_size"]) == (False, None)
    assert shared.case_settings() != full.case_settings()
    for kw in ({"uncertainty_sources": ("folds", "mirroring")}, {"uncertainty_sources": ("dropout",), "num_samples": 1,
                                                                     "dropout_p": 0.2}):
        cfg = make_predictor(n_folds=2, **kw).run_config()
        assert "share_passes" not in cfg and "sample_batch_size" not in cfg
