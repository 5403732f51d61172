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


def _plans(arch: str) -> dict:
    """Three-stage PlainConvUNet or ResidualEncoderUNet plans (two decoder stages: decoder != last stage)."""
    from tests.nnunet.test_nnunet import make_plans

    plans = make_plans(features=(4, 8, 8))
    kw = plans["configurations"]["cfg"]["architecture"]["arch_kwargs"]
    kw.update(n_stages=3, kernel_sizes=[[3] * 3] * 3, strides=[[1] * 3, [2] * 3, [2] * 3],
              n_conv_per_stage_decoder=[1, 1])
    if arch == "ResidualEncoderUNet":
        plans["configurations"]["cfg"]["architecture"]["network_class_name"] = (
            "dynamic_network_architectures.architectures.unet.ResidualEncoderUNet")
        del kw["n_conv_per_stage"]
        kw["n_blocks_per_stage"] = [1, 1, 1]
    else:
        kw["n_conv_per_stage"] = [1, 1, 1]
    return plans


@pytest.mark.parametrize("placement", ["auto", "decoder", "last"])
@pytest.mark.parametrize("arch", ["PlainConvUNet", "ResidualEncoderUNet"])
@pytest.mark.parametrize("sources", [("dropout",), ("dropout", "mirroring")])
def test_shared_equals_full_passes_nnunet_architectures(arch, placement, sources, monkeypatch):
    """With injected masks (keyed by fold network, hooked stage, window and mirror, and occurrence), shared passes
    give the maps of full passes for both nnU-Net architectures and every placement, with mirrors (averaged, or a
    source) and two fold networks held side by side; each window is traced once per mirror and fold network."""
    import monai_unc.nnunet as mun
    from monai_unc.inferers import remove_dropout
    from monai_unc.networks.shared import SharedPasses
    from monai_unc.nnunet import add_posthoc_dropout

    bank = MaskBank()
    names: dict[int, str] = {}
    monkeypatch.setattr(DropoutHook, "_drop", _bank_drop(bank, names))
    fold_networks = mun.UncertaintyPredictor._fold_networks

    def named_folds(self, params):  # every fold network's hooks named apart: its masks are its own
        nets = fold_networks(self, params)
        for f, net in enumerate(nets):
            bank.watch(net)
            names.update({id(h): f"{f}:{n}" for n, m in net.named_modules() for h in m._forward_hooks.values()
                          if isinstance(h, DropoutHook)})
        return nets

    monkeypatch.setattr(mun.UncertaintyPredictor, "_fold_networks", named_folds)
    traces = []
    trace = SharedPasses.trace
    monkeypatch.setattr(SharedPasses, "trace", lambda self, *a: traces.append(1) or trace(self, *a))
    once = []
    replay = SharedPasses.replay

    def counted_replay(self, *a):
        out = replay(self, *a)
        once.append(self.shared_ops)
        return out

    monkeypatch.setattr(SharedPasses, "replay", counted_replay)
    data = torch.randn(1, 20, 16, 16)  # two overlapping windows along the first axis
    results = []
    for share in (False, True):
        pred = make_predictor(plans=_plans(arch), n_folds=2, uncertainty_sources=sources, num_samples=7,
                              dropout_p=0.3, seed=0, mirror_axes=(0, 1), share_passes=share, sample_batch_size=3)
        assert type(pred.network).__name__ == arch
        remove_dropout(pred.network)
        sites = add_posthoc_dropout(pred.network, p=0.3, after=placement)
        assert len(sites) == {"auto": 5, "decoder": 2, "last": 1}[placement]
        bank.seen.clear()
        traces.clear()
        results.append(pred.predict_uncertainty_from_preprocessed_data(data))
        assert pred._share_note is None  # no fallback to full passes
    assert len(traces) == 2 * 4 * 2  # windows x mirrors x fold networks: one trace each, for all chunks
    assert len(once) == 3 * len(traces)  # chunks of 1 + 2, 2, 2 passes: every chunk replayed from the one trace
    if placement == "last":  # the decoder's concatenations of shared values: once on batch 1 in every replay
        assert min(once) >= 2
    full, shared = results
    for key in full.moments:
        torch.testing.assert_close(shared.moments[key], full.moments[key], rtol=1e-4, atol=2e-5, msg=key)
    # stock's fp16 logit buffer: an fp16 rounding of sums in another order (ulp 2e-3 at |logit| 2-4)
    torch.testing.assert_close(shared.logits.float(), full.logits.float(), rtol=1e-3, atol=2.5e-3)
    mi = full.measures(["mutual_information"])["mutual_information"]
    assert float(mi.max()) > 1e-4  # the masks differ between passes: the comparison can fail
