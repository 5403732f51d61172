"""nnU-Net predictor with mirroring on but not an uncertainty source: the mirrored passes of one stochastic sample
(a dropout mask, an SSN latent draw) are one network, so every mirror draws from the same random state.

Before the fix every mirror drew its own mask / latent sample and a "sample" was the mean logit of 2^k independently
perturbed networks: MC dropout's mutual information fell to about half of its value (finding_01 of the methods
review: mean MI 0.135 against 0.289 for the same masks in every mirror) and an SSN's latent covariance to 1/2^k.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("nnunetv2")

import monai_unc.nnunet as mun  # noqa: E402
from monai_unc.inferers import enable_mc_dropout  # noqa: E402
from monai_unc.networks.dropout import DropoutHook  # noqa: E402
from tests.nnunet.test_nnunet import combos, make_predictor  # noqa: E402
from tests.nnunet.test_ssn_trainer import ssn_predictor  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _reference(pred, data, passes, seed, context):
    """float64 moments of one window (data = one patch): per sample, every mirror from the same random state."""
    net = pred.network.eval()
    mirrors = combos(pred.allowed_mirroring_axes)
    assert len(mirrors) == 8
    torch.manual_seed(seed)
    probs = []
    with context(net), torch.no_grad():
        for _ in range(passes):
            state = torch.random.get_rng_state()
            logits = []
            for axes in mirrors:
                torch.random.set_rng_state(state)
                x = torch.flip(data[None], axes) if axes else data[None]
                o = net(x)
                logits.append((torch.flip(o, axes) if axes else o).double())
            probs.append(torch.softmax(torch.stack(logits).mean(0), 1)[0])
    return _moments(probs)


def _moments(probs):
    p = torch.stack(probs)
    h = -(p * torch.log(p)).sum(1, keepdim=True)
    return p.mean(0).numpy(), h.mean(0).numpy()


def _ssn_reference(pred, data, passes, seed):
    """As :func:`_reference` for an SSN, built from the head's parameters: one latent draw (``z_R`` ``(1, R)``, then
    ``z_D`` ``(1, C, *patch)`` in the un-mirrored layout, torch's order of draws) per sample, used by every mirror."""
    net = pred.network.eval()
    head = net.decoder.seg_layers[-1]
    features = []
    hook = head.register_forward_pre_hook(lambda module, args: features.append(args[0]))
    mirrors = combos(pred.allowed_mirroring_axes)
    params = []
    try:
        with torch.no_grad():
            for axes in mirrors:
                features.clear()
                net(torch.flip(data[None], axes) if axes else data[None])
                params.append([t.double() for t in head.params(features[0])])
    finally:
        hook.remove()
    torch.manual_seed(seed)
    probs = []
    for _ in range(passes):
        z_r = torch.randn(1, head.rank).double()
        z_d = torch.randn(1, *params[0][0].shape[1:]).double()
        logits = []
        for axes, (mean, diag, factor) in zip(mirrors, params):
            # the mirror's own map: its noise is the un-mirrored z_D mirrored along with the input
            o = mean + torch.einsum("br,brc...->bc...", z_r, factor) + diag.sqrt() * (torch.flip(z_d, axes) if axes
                                                                                       else z_d)
            logits.append(torch.flip(o, axes) if axes else o)
        probs.append(torch.softmax(torch.stack(logits).mean(0), 1)[0])
    return _moments(probs)


@pytest.mark.parametrize("method", ["dropout", "ssn"])
def test_mirrors_of_a_sample_share_its_draws(method):
    """For an SSN, one latent draw in every mirror: the per-logit noise ``z_D`` is mirrored with the input (found by
    review 66: drawn in each mirror's own layout, the mean over the 8 mirrors kept about 1/8 of the diagonal
    variance)."""
    passes, seed = 3, 7
    if method == "dropout":
        pred = make_predictor(n_folds=1, uncertainty_sources=("dropout",), num_samples=passes, dropout_p=0.3,
                              seed=seed, share_passes=False, measures=mun.MAP_MEASURES)
    else:
        pred = ssn_predictor(sources=("ssn",), num_samples=passes, seed=seed, measures=mun.MAP_MEASURES)
    assert pred.use_mirroring and "mirroring" not in pred.uncertainty_sources
    torch.manual_seed(3)
    data = torch.randn(1, 16, 16, 16)  # one window: the Gaussian blend divides out
    res = pred.predict_uncertainty_from_preprocessed_data(data)
    assert res.num_samples == passes
    if method == "dropout":
        mean, ee = _reference(pred, data, passes, seed, enable_mc_dropout)
    else:
        mean, ee = _ssn_reference(pred, data, passes, seed)
    np.testing.assert_allclose(res.moments["pred"].numpy(), mean, atol=2e-5)
    np.testing.assert_allclose(res.moments["expected_entropy"].numpy(), ee, atol=2e-5)
    assert float(res.measures(["mutual_information"])["mutual_information"].max()) > 1e-3  # the samples differ


def _blocks_of_eight(seq):
    """Split ``seq`` into consecutive blocks, each 8 repeats of one sub-sequence (one per mirror); None if it cannot."""
    out, i = [], 0
    while i < len(seq):
        for n in range(1, (len(seq) - i) // 8 + 1):
            unit = seq[i:i + n]
            if all(torch.equal(a, b) for r in range(1, 8) for a, b in zip(unit, seq[i + r * n:i + (r + 1) * n])):
                out.append(unit)
                i += 8 * n
                break
        else:
            return None
    return out


def test_shared_passes_draw_the_same_masks_in_every_mirror(monkeypatch):
    """With shared passes (a trace and batched replays per mirror) every mirror also gets the sample's masks."""
    calls: dict[int, list[torch.Tensor]] = {}
    original = DropoutHook._drop

    def recording(self, x):
        out = original(self, x)
        calls.setdefault(id(self), []).append((out.flatten(2) == 0).all(-1))  # dropped channels per row
        return out

    monkeypatch.setattr(DropoutHook, "_drop", recording)
    pred = make_predictor(n_folds=1, uncertainty_sources=("dropout",), num_samples=5, dropout_p=0.5, seed=3,
                          share_passes=True, sample_batch_size=3)
    pred.predict_uncertainty_from_preprocessed_data(torch.randn(1, 16, 16, 16))
    assert calls
    for seq in calls.values():
        blocks = _blocks_of_eight(seq)
        assert blocks is not None, "a mirror drew other dropout masks than the first mirror of its samples"
        rows = torch.cat([torch.cat(unit) for unit in blocks])
        assert rows.shape[0] == 5 and len({tuple(r.tolist()) for r in rows}) > 1  # 5 samples, not all alike


def test_config_records_shared_mirror_draws_so_a_resume_redoes_older_cases(tmp_path):
    """Cases an earlier version made (a draw per mirror) have no ``mirror_draws`` in their settings: a resume sees
    the change and computes them again."""
    import json

    from monai_unc.io.cases import settings_changes

    pred = make_predictor(n_folds=1, uncertainty_sources=("dropout",), num_samples=2, dropout_p=0.2)
    cfg = pred.run_config()
    assert cfg["mirror_draws"] == "shared"
    older = {k: v for k, v in cfg.items() if k != "mirror_draws"}
    assert settings_changes(older, cfg) == ['mirror_draws (none) -> "shared"']
    pred._write_config(str(tmp_path))
    assert json.loads((tmp_path / "uncertainty_config.json").read_text())["mirror_draws"] == "shared"
    # no mirrors, or mirrors as a source, or no stochastic passes: nothing to share, nothing recorded
    for kw in (dict(uncertainty_sources=("dropout",), num_samples=2, dropout_p=0.2, use_mirroring=False),
               dict(uncertainty_sources=("dropout", "mirroring"), num_samples=2, dropout_p=0.2),
               dict(uncertainty_sources=("mirroring",))):
        assert "mirror_draws" not in make_predictor(n_folds=1, **kw).run_config()


def test_config_records_mirrored_ssn_noise_so_a_resume_redoes_older_ssn_cases():
    """SSN cases written with the noise in each mirror's own layout (``"shared"``) hold other draws (review 66)."""
    from monai_unc.io.cases import settings_changes

    cfg = ssn_predictor(sources=("ssn",), num_samples=2).run_config()
    assert cfg["mirror_draws"] == "shared, ssn noise mirrored"
    assert settings_changes({**cfg, "mirror_draws": "shared"}, cfg) == [
        'mirror_draws "shared" -> "shared, ssn noise mirrored"']
    assert "mirror_draws" not in ssn_predictor(sources=("ssn",), num_samples=2, use_mirroring=False).run_config()


def _ssn_folds_predictor(n_folds, use_mirroring=True):
    """``ssn_predictor``'s model as ``n_folds`` identical folds, folds not a source."""
    import copy

    pred = ssn_predictor(sources=("ssn",), num_samples=3, seed=5, measures=mun.MAP_MEASURES,
                         use_mirroring=use_mirroring)
    params = pred.list_of_parameters[0]
    pred.list_of_parameters = [copy.deepcopy(params) for _ in range(n_folds)]
    return pred


@pytest.mark.parametrize("use_mirroring", [False, True])
def test_identical_folds_of_an_ssn_sample_are_one_draw(use_mirroring):
    """Found by review 66: with the folds averaged (not a source) every fold drew its own latent sample, so three
    copies of one model gave a mean MI of 0.165 against the model's 0.356: the aleatoric maps shrank with the number
    of folds. The folds of a sample now share its draw: copies of one model give the model's maps."""
    torch.manual_seed(3)
    data = torch.randn(1, 16, 16, 16)
    one = _ssn_folds_predictor(1, use_mirroring).predict_uncertainty_from_preprocessed_data(data)
    three = _ssn_folds_predictor(3, use_mirroring).predict_uncertainty_from_preprocessed_data(data)
    assert three.num_samples == one.num_samples == 3
    for key in ("pred", "expected_entropy"):
        np.testing.assert_allclose(three.moments[key].numpy(), one.moments[key].numpy(), atol=2e-6, err_msg=key)
    mi = one.measures(["mutual_information"])["mutual_information"]
    assert float(mi.mean()) > 0.05  # the draws differ
    cfg = _ssn_folds_predictor(3, use_mirroring).run_config()
    assert cfg["fold_draws"] == "shared" and "fold_draws" not in _ssn_folds_predictor(1, use_mirroring).run_config()
