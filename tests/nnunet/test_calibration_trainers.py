"""The nnU-Net trainers with calibration losses: found by nnU-Net's name lookup, their loss is nnU-Net's Dice + CE
with the calibration term at every deep-supervision output (nnU-Net's weights), the MC-dropout variants build the
dropout network, bad set-ups are refused, and (slow) each trains two epochs on the toy task and its checkpoint
loads in stock nnU-Net (two of them predict with stock nnU-Net and with ``monai-unc nnunet-predict``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("nnunetv2")

from monai.losses import NACLLoss  # noqa: E402
from nnunetv2.training.loss.compound_losses import DC_and_BCE_loss, DC_and_CE_loss  # noqa: E402
from nnunetv2.training.loss.dice import MemoryEfficientSoftDiceLoss  # noqa: E402

import monai_unc.nnunet as mun  # noqa: E402
from monai_unc.losses import L1ACELoss, SVLSLoss, margin_penalty  # noqa: E402
from tests._nnunet_pools import plan_in_process  # noqa: E402
from tests._paths import ROOT  # noqa: E402
from tests.nnunet._toy_training import small_progress_plots  # noqa: E402
from tests.nnunet.test_ssn_trainer import _plans  # noqa: E402

CPU = torch.device("cpu")
LABELS = {"background": 0, "outer": 1, "core": 2}
TRAINERS = ("nnUNetTrainerSVLS", "nnUNetTrainerMbLS", "nnUNetTrainerL1ACE", "nnUNetTrainerSoftL1ACE",
            "nnUNetTrainerNACL")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _trainer(cls, tmp_path, monkeypatch, labels=LABELS, ndim=3):
    monkeypatch.setenv("nnUNet_results", str(tmp_path / "results"))
    plans = _plans(ndim)
    plans["continue_training"] = False
    dataset = {"labels": labels, "channel_names": {"0": "x"}, "numTraining": 2, "file_ending": ".nii.gz"}
    if any(isinstance(v, list) for v in labels.values()):
        dataset["regions_class_order"] = list(range(1, len(labels)))
    trainer = cls(plans, "cfg", 0, dataset, CPU)
    heads = trainer.label_manager.num_segmentation_heads
    trainer.network = trainer.build_network_architecture(trainer.plans_manager, trainer.configuration_manager, 1,
                                                         heads, True)
    return trainer


@pytest.mark.slow
def test_trainers_are_found_by_nnunet_name_lookup(monkeypatch):
    from nnunetv2.utilities.find_objects import recursive_find_trainer_class_by_name

    monkeypatch.setenv("nnUNet_extTrainer", mun.trainer_dir())
    dropout = [n.replace("nnUNetTrainer", "nnUNetTrainerMCDropout") for n in TRAINERS]
    # docs/training.md: every trainer and every MC-dropout variant has a _2epochs variant (found by hostile testing:
    # only nnUNetTrainerMCDropoutSVLS_2epochs existed of the MC-dropout ones)
    names = [*TRAINERS, *dropout, *(f"{n}_2epochs" for n in (*TRAINERS, *dropout))]
    for name in names:
        assert recursive_find_trainer_class_by_name(name).__name__ == name


def _stock(trainer):
    return DC_and_CE_loss({"batch_dice": False, "smooth": 1e-5, "do_bg": False, "ddp": False}, {}, weight_ce=1,
                          weight_dice=1, ignore_label=None, dice_class=MemoryEfficientSoftDiceLoss)


def _term(name, z, y):
    """The calibration part of each trainer, computed from the MONAI-style losses and MONAI's NACL."""
    if name == "nnUNetTrainerSVLS":
        return SVLSLoss(to_onehot_y=True)(z, y)
    if name == "nnUNetTrainerMbLS":
        return 0.1 * margin_penalty(z, 10.0).mean()
    if name == "nnUNetTrainerL1ACE":
        return L1ACELoss("hard", 20, to_onehot_y=True)(z, y)
    if name == "nnUNetTrainerSoftL1ACE":
        return L1ACELoss("soft", 20, to_onehot_y=True)(z, y)
    return NACLLoss(classes=3, dim=3, kernel_size=3, alpha=0.1)(z, y[:, 0].long())


@pytest.mark.parametrize("name", TRAINERS)
def test_loss_is_dice_ce_with_the_term_at_every_deep_supervision_output(name, tmp_path, monkeypatch):
    trainer = _trainer(getattr(mun, name), tmp_path, monkeypatch)
    loss = trainer._build_loss()
    weights = loss.weight_factors
    assert type(loss).__name__ == "DeepSupervisionWrapper" and type(loss.loss).__name__ == "CalibrationLoss"
    torch.manual_seed(0)
    x = torch.randn(2, 1, 16, 16, 16)
    y = torch.randint(0, 3, (2, 1, 16, 16, 16)).float()
    targets = [y, y[:, :, ::2, ::2, ::2]]
    outs = [o * 8 for o in trainer.network.train()(x)]  # large logits: the margin penalty is active
    stock = _stock(trainer)
    expected = 0.0
    for w, o, t in zip(weights, outs, targets):
        if w == 0:
            continue
        if name in ("nnUNetTrainerSVLS", "nnUNetTrainerNACL"):  # the term replaces nnU-Net's cross-entropy
            expected = expected + w * (stock.dc(o, t) + _term(name, o, t))
        else:
            expected = expected + w * (stock(o, t) + _term(name, o, t))
    got = loss(outs, targets)
    torch.testing.assert_close(got, expected)
    assert float(got.detach()) != pytest.approx(float(sum(w * stock(o, t) for w, o, t in zip(weights, outs, targets))))
    got.backward()
    assert trainer.network.decoder.seg_layers[-1].weight.grad.abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mbls_term_of_half_precision_outputs_equals_float64(dtype, tmp_path, monkeypatch):
    """nnU-Net computes the loss under autocast on a GPU: the outputs, and so the logits of the margin penalty, are
    float16. The term is computed in float32 and summed in float64 (found by hostile testing: in float16 the logit
    distances overflowed from 65504 on and every paying entry was rounded to 11 bits, the term 2e-4 off in float16
    and 2e-3 in bfloat16, then returned rounded to the logits' dtype)."""
    trainer = _trainer(mun.nnUNetTrainerMbLS, tmp_path, monkeypatch)
    term = trainer._build_loss().loss.term
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(2, 3, 32, 32, 32, generator=gen, dtype=torch.float64) * 8
    z[:, 0] = z[:, 0].abs() + 1000.5  # every background logit far above: large, alike distances round alike
    y = torch.zeros(2, 1, 32, 32, 32)
    zh = z.to(dtype).requires_grad_(True)
    with torch.autocast("cpu", dtype=dtype):
        got = term(zh, y)
    ref = zh.detach().double().requires_grad_(True)
    want = 0.1 * margin_penalty(ref, 10.0).mean()
    assert got.dtype == torch.float32
    assert float(got) == pytest.approx(float(want), rel=1e-6)
    (got * 2.0**16).backward()  # nnU-Net's GradScaler: a float16 gradient of 0.1 / n would be subnormal
    (want * 2.0**16).backward()
    assert zh.grad.dtype == dtype and torch.isfinite(zh.grad).all()
    torch.testing.assert_close(zh.grad.double(), ref.grad, rtol=2**-7, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", TRAINERS)
def test_every_term_of_half_precision_outputs_under_autocast_equals_float64(name, dtype, tmp_path, monkeypatch):
    """Each calibration term of a float16 / bfloat16 output (nnU-Net's autocast) is the float64 term of the same
    values to float32 precision (found by hostile testing: MONAI's NACL smoothed the target by a float16 convolution
    and averaged float16 distances under autocast, 2e-4 off in bfloat16)."""
    term = _trainer(getattr(mun, name), tmp_path, monkeypatch)._build_loss().loss.term
    gen = torch.Generator().manual_seed(1)
    z = (torch.randn(2, 3, 16, 16, 16, generator=gen, dtype=torch.float64) * 6).to(dtype)
    y = torch.randint(0, 3, (2, 1, 16, 16, 16), generator=gen).float()
    with torch.autocast("cpu", dtype=dtype):
        got = term(z, y)
    want = term(z.double(), y)
    assert got.dtype == torch.float32
    # the hard L1-ACE bins float32 probabilities: a value next to a bin edge may fall in the neighbouring bin
    assert float(got) == pytest.approx(float(want), rel=1e-4 if name == "nnUNetTrainerL1ACE" else 1e-6)


def test_mc_dropout_variants_build_the_dropout_network_with_the_loss(tmp_path, monkeypatch):
    trainer = _trainer(mun.nnUNetTrainerMCDropoutL1ACE, tmp_path, monkeypatch)
    drops = [m for m in trainer.network.modules() if isinstance(m, torch.nn.Dropout3d)]
    assert drops and all(m.p == mun.nnUNetTrainerMCDropout.dropout_p for m in drops)
    assert type(trainer._build_loss().loss.term).__name__ == "L1ACELoss"


def test_regions_use_sigmoid_terms_and_margin_methods_refuse_them(tmp_path, monkeypatch):
    regions = {"background": 0, "whole": [1, 2], "core": 2}
    trainer = _trainer(mun.nnUNetTrainerSVLS, tmp_path, monkeypatch, labels=regions)
    loss = trainer._build_loss()
    assert isinstance(loss.loss.stock, DC_and_BCE_loss) and loss.loss.term.use_sigmoid
    z = torch.randn(2, 2, 8, 8, 8)
    y = (torch.rand(2, 2, 8, 8, 8) > 0.5).float()
    ref_q = SVLSLoss().soft_targets(y)
    expected = loss.loss.stock.dc(z, y) + F.binary_cross_entropy_with_logits(z, ref_q)
    torch.testing.assert_close(loss.loss(z, y), expected)
    ace = _trainer(mun.nnUNetTrainerSoftL1ACE, tmp_path, monkeypatch, labels=regions)._build_loss().loss
    torch.testing.assert_close(ace(z, y), ace.stock(z, y) + L1ACELoss("soft", sigmoid=True, softmax=False)(z, y))
    for cls in (mun.nnUNetTrainerMbLS, mun.nnUNetTrainerNACL):
        with pytest.raises(ValueError, match="region-based"):
            _trainer(cls, tmp_path, monkeypatch, labels=regions)._build_loss()


def test_ignore_label_and_bad_kind_are_refused(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="ignore label"):
        _trainer(mun.nnUNetTrainerL1ACE, tmp_path, monkeypatch, labels={**LABELS, "ignore": 3})._build_loss()
    with pytest.raises(ValueError, match="kind"):
        mun.CalibrationLoss(torch.nn.Identity(), torch.nn.Identity(), "multiply")


def test_spacing_aware_svls_uses_the_configuration_spacing(tmp_path, monkeypatch):
    class Aniso(mun.nnUNetTrainerSVLS):
        svls_spacing_aware = True

    trainer = _trainer(Aniso, tmp_path, monkeypatch)
    trainer.configuration_manager.configuration["spacing"] = [3.0, 1.0, 1.0]
    term = trainer._build_loss().loss.term
    assert term.spacing == [3.0, 1.0, 1.0]
    plain = _trainer(mun.nnUNetTrainerSVLS, tmp_path, monkeypatch)._build_loss().loss.term
    assert plain.spacing is None


def _svls_soft_targets(onehot, voxel):
    """SVLS soft targets computed here from the paper's kernel (Islam, Glocker, IPMI 2021, Eq. 2-3) for voxels of size
    ``voxel``: a Gaussian (sigma 1 in units of the smallest voxel edge) over the 3^3 neighbours, its centre raised to
    the neighbours' sum, normalised; a full 3-D convolution of the replicate-padded one-hot target."""
    ratio = np.asarray(voxel, float) / min(voxel)
    offsets = np.stack(np.meshgrid(*[np.arange(-1, 2) * r for r in ratio], indexing="ij"))
    g = np.exp(-(offsets ** 2).sum(0) / 2.0)
    g /= g.sum()
    g[1, 1, 1] = 1.0 - g[1, 1, 1]
    g /= g.sum()
    c = onehot.shape[1]
    kernel = torch.from_numpy(g).to(onehot.dtype).expand(c, 1, 3, 3, 3)
    return F.conv3d(F.pad(onehot, (1,) * 6, mode="replicate"), kernel, groups=c)


def test_spacing_aware_svls_uses_each_outputs_own_voxel_size(tmp_path, monkeypatch):
    """Found by hostile testing: with ``svls_spacing_aware`` every deep-supervision output used the full-resolution
    spacing ratio (3 : 1 : 1 here), although output 1's voxels are the spacing times the pooling strides, 3 x 2 x 2 mm
    (ratio 1.5 : 1 : 1; soft targets differed by up to 0.106). Each output's loss is checked against the kernel of its
    own voxel size, computed here from the paper's formula."""
    class Aniso(mun.nnUNetTrainerSVLS):
        svls_spacing_aware = True

    monkeypatch.setenv("nnUNet_results", str(tmp_path / "results"))
    plans = _plans(3)
    plans["continue_training"] = False
    conf = plans["configurations"]["cfg"]
    conf["spacing"] = [3.0, 1.0, 1.0]
    conf["architecture"]["arch_kwargs"].update(
        n_stages=4, features_per_stage=[4, 8, 16, 16], kernel_sizes=[[3, 3, 3]] * 4,
        strides=[[1, 1, 1], [1, 2, 2], [2, 2, 2], [2, 2, 2]], n_conv_per_stage=[1] * 4,
        n_conv_per_stage_decoder=[1] * 3)
    dataset = {"labels": LABELS, "channel_names": {"0": "x"}, "numTraining": 2, "file_ending": ".nii.gz"}
    trainer = Aniso(plans, "cfg", 0, dataset, CPU)
    loss = trainer._build_loss()
    strides = np.cumprod([[1, 1, 1], [1, 2, 2], [2, 2, 2]], axis=0)  # the pooling down to each output
    voxels = [[3.0 * a, 1.0 * b, 1.0 * c] for a, b, c in strides]
    assert voxels[1] == [3.0, 2.0, 2.0] and [w > 0 for w in loss.weight_factors] == [True, True, False]
    torch.manual_seed(0)
    y = torch.randint(0, 3, (2, 1, 16, 16, 16)).double()
    targets = [y[:, :, ::s0, ::s1, ::s2] for s0, s1, s2 in strides]
    outs = [torch.randn(2, 3, *t.shape[2:], dtype=torch.float64) * 4 for t in targets]
    stock = _stock(trainer)
    expected = 0.0
    for w, o, t, voxel in zip(loss.weight_factors, outs, targets, voxels):
        onehot = F.one_hot(t[:, 0].long(), 3).movedim(-1, 1).double()
        q = _svls_soft_targets(onehot, voxel)
        ce = -(q * torch.log_softmax(o, 1)).sum(1).mean()
        if w:
            expected = expected + w * (stock.dc(o, t) + ce)
    torch.testing.assert_close(loss(outs, targets), expected, rtol=1e-9, atol=1e-12)
    plain = _trainer(mun.nnUNetTrainerSVLS, tmp_path, monkeypatch)._build_loss()
    assert type(plain).__name__ == "DeepSupervisionWrapper"  # in voxels: one term for every output, as before


# ------------------------------------------------------------------------------------------ end to end (slow)
#: the child of the end-to-end test: ``nnUNetv2_train`` and ``nnUNetv2_predict`` (argv as JSON in sys.argv[1:3]),
#: each through its entry point with the command line a user types. The training's validation exports and scores its
#: case in this process (tests/nnunet/_toy_training.py, found through sys.argv[3]: the repository's root) instead of
#: two ``spawn`` pools of fresh Pythons importing torch and nnU-Net: the same nnU-Net functions on the same arguments,
#: nothing of monai_unc runs in those workers; the progress plot of each epoch is saved at a tenth of its resolution.
_COMMANDS = """
import json, sys
sys.path.insert(0, sys.argv[3])
from tests.nnunet._toy_training import small_progress_plots, validate_in_process
from nnunetv2.run.run_training import run_training_entry
from nnunetv2.inference.predict_from_raw_data import predict_entry_point
validate_in_process()
small_progress_plots()
train, predict = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.argv = ["nnUNetv2_train", *train]
run_training_entry()
sys.argv = ["nnUNetv2_predict", *predict]
predict_entry_point()
"""


@pytest.mark.slow
def test_each_trainer_trains_two_epochs_and_predicts(tmp_path, monkeypatch):
    """``nnUNetv2_train`` (the command for one trainer, its function for the others), then stock
    ``nnUNetv2_predict`` and ``monai-unc nnunet-predict`` on the checkpoint of the MC-dropout trainer and of one plain
    trainer; stock nnU-Net loads every other checkpoint into its trainer's network."""
    env = {"nnUNet_raw": tmp_path / "raw", "nnUNet_preprocessed": tmp_path / "preprocessed",
           "nnUNet_results": tmp_path / "results"}
    for k, v in env.items():
        monkeypatch.setenv(k, str(v))
    monkeypatch.setenv("nnUNet_compile", "false")
    monkeypatch.setenv("nnUNet_extTrainer", mun.trainer_dir())
    monkeypatch.setenv("nnUNet_n_proc_DA", "1")
    monkeypatch.chdir(tmp_path)
    from nnunetv2.experiment_planning.plan_and_preprocess_api import (
        extract_fingerprints,
        plan_experiments,
        preprocess,
    )
    from nnunetv2.run.run_training import get_trainer_from_args

    plan_in_process(monkeypatch)  # no worker process per planning step (tests/_nnunet_pools.py)
    mun.write_toy_dataset(tmp_path / "raw", dataset_id=992, num_training=4, num_test=1, shape=(20, 20, 20),
                          empty_slices=2)
    extract_fingerprints([992], num_processes=1)
    plan_experiments([992])
    preprocess([992], configurations=("3d_fullres",), num_processes=(1,))
    plans_file = tmp_path / "preprocessed" / "Dataset992_UncToy" / "nnUNetPlans.json"
    plans = json.loads(plans_file.read_text())
    arch = plans["configurations"]["3d_fullres"]["architecture"]["arch_kwargs"]
    arch["features_per_stage"] = [min(f, 8) for f in arch["features_per_stage"]]
    plans["configurations"]["3d_fullres"]["batch_size"] = 1
    plans_file.write_text(json.dumps(plans))
    cases = sorted(p.name[: -len("_0000.nii.gz")] for p in (tmp_path / "raw/Dataset992_UncToy/imagesTr").iterdir())
    (plans_file.parent / "splits_final.json").write_text(json.dumps([{"train": cases[1:], "val": cases[:1]}]))
    monkeypatch.setenv("nnUNet_n_proc_DA", "0")

    # the command lines, as a user runs them: nnUNetv2_train, then nnUNetv2_predict on its checkpoint, through their
    # entry points in one process (one start-up); nnU-Net's validation pools (export, metrics) run their cases in
    # that process (_COMMANDS), and stock prediction runs in the process (-npp 0 -nps 0)
    images = tmp_path / "raw/Dataset992_UncToy/imagesTs"
    first = "nnUNetTrainerMCDropoutSVLS_2epochs"
    train_argv = ["992", "3d_fullres", "0", "-tr", first, "-device", "cpu"]
    predict_argv = ["-i", str(images), "-o", str(tmp_path / f"stock_{first}"), "-d", "992", "-c", "3d_fullres",
                    "-tr", first, "-f", "0", "-device", "cpu", "--disable_tta", "-npp", "0", "-nps", "0",
                    "--disable_progress_bar"]
    cmd = [sys.executable, "-c", _COMMANDS, json.dumps(train_argv), json.dumps(predict_argv), str(ROOT)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "nnUNet_def_n_proc": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    # the training's validation ran: its case exported and the Dice summarised (by the pools' stand-ins)
    validation = tmp_path / "results" / "Dataset992_UncToy" / f"{first}__nnUNetPlans__3d_fullres" / "fold_0"
    validation = validation / "validation"
    assert (validation / "summary.json").is_file() and len(list(validation.glob("*.nii.gz"))) == 1
    trained = [first]
    small_progress_plots(monkeypatch.setitem)  # tests/nnunet/_toy_training.py: each epoch's plot at a tenth of its dpi
    for name in TRAINERS[1:]:
        trainer = get_trainer_from_args("992", "3d_fullres", 0, f"{name}_2epochs", device=CPU)
        trainer.run_training()
        losses = trainer.logger.local_logger.my_fantastic_logging["train_losses"]
        assert len(losses) == 2 and np.isfinite(losses).all()
        assert type(trainer.loss.loss).__name__ == "CalibrationLoss"
        trained.append(f"{name}_2epochs")

    import argparse

    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    from monai_unc.nnunet.cli import add_parser, run

    # prediction does not depend on the training loss: the command-line MC-dropout trainer and one plain trainer
    # go through both predictors; every other checkpoint is loaded into its trainer's network by stock nnU-Net
    # (the name lookup and the weights, the step both predictors share)
    predicted = trained[:2]
    for name in trained:
        model = tmp_path / "results" / "Dataset992_UncToy" / f"{name}__nnUNetPlans__3d_fullres"
        ckpt = torch.load(model / "fold_0" / "checkpoint_final.pth", map_location="cpu", weights_only=False)
        assert ckpt["trainer_name"] == name and ckpt["current_epoch"] == 2
        if name not in predicted:
            pred = nnUNetPredictor(device=CPU, allow_tqdm=False, use_mirroring=False)
            pred.initialize_from_trained_model_folder(str(model), (0,), "checkpoint_final.pth")
            assert pred.trainer_name == name and len(pred.list_of_parameters) == 1
            with torch.no_grad():  # the loaded network runs on a patch
                out = pred.network.eval()(torch.zeros(1, 1, *pred.configuration_manager.patch_size))
            assert out.shape[1] == pred.label_manager.num_segmentation_heads and torch.isfinite(out).all()
            continue
        stock = tmp_path / f"stock_{name}"
        if name != first:  # the first went through the command in the subprocess above
            pred = nnUNetPredictor(device=CPU, allow_tqdm=False, use_mirroring=False)
            pred.initialize_from_trained_model_folder(str(model), (0,), "checkpoint_final.pth")
            stock.mkdir()
            pred.predict_from_files_sequential(str(images), str(stock))
        assert len(list(stock.glob("*.nii.gz"))) == 1
        parser = argparse.ArgumentParser()
        add_parser(parser.add_subparsers())
        ours = tmp_path / f"ours_{name}"
        sources = ["dropout"] if "MCDropout" in name else ["mirroring"]
        args = parser.parse_args(["nnunet-predict", "-i", str(images), "-o", str(ours), "-m", str(model), "-f", "0",
                                  "-device", "cpu", "--sources", *sources, "--num_samples", "2", "--seed", "0",
                                  "-npp", "0", "-nps", "0", "--disable_progress_bar"])
        assert run(args) == 0
        (rec_file,) = (ours / "uncertainty").glob("*.json")
        rec = json.loads(rec_file.read_text())
        assert rec["num_samples"] >= 2
        assert len(list(ours.glob("*.nii.gz"))) == 1
