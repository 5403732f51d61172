"""Hostile review of the dropout plans variant: a plans file is edited by users, so every field ``dropout_plans`` reads
is checked and a malformed one is a ValueError naming it (not a KeyError / AttributeError / TypeError)."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("nnunetv2")

from monai_unc.nnunet.dropout import dropout_plans  # noqa: E402

ARCH = {"network_class_name": "PlainConvUNet", "arch_kwargs": {"conv_op": "torch.nn.modules.conv.Conv3d"},
        "_kw_requires_import": ["conv_op"]}


def _plans(**conf) -> dict:
    return {"plans_name": "nnUNetPlans", "configurations": {"3d_fullres": conf or {"architecture": ARCH}}}


@pytest.mark.parametrize("plans, match", [
    (["configurations"], "not an nnU-Net plans dict"),  # was "dictionary update sequence element #0 ..."
    ({"configurations": ["3d_fullres"]}, "'configurations' must map"),  # was a TypeError
    ({"configurations": {"3d_fullres": "x"}}, "'configurations' must map"),  # was an AttributeError
    (_plans(architecture="x"), r"configurations.3d_fullres.architecture must be a JSON object"),
    (_plans(architecture={"network_class_name": "X"}), "'arch_kwargs' object"),  # was KeyError 'arch_kwargs'
    (_plans(architecture={**ARCH, "_kw_requires_import": "conv_op"}), "_kw_requires_import must be a list"),
    (_plans(architecture={**ARCH, "arch_kwargs": {"conv_op": None}}), r"arch_kwargs.conv_op must name"),
    (_plans(architecture={**ARCH, "arch_kwargs": {}}), r"arch_kwargs.conv_op must name"),
])
def test_malformed_plans_fields_are_named(plans, match):
    with pytest.raises(ValueError, match=match):
        dropout_plans(plans, p=0.2)


def test_one_configuration_name_is_not_split_into_characters():
    """``configurations="3d_fullres"`` was read as the names '3', 'd', '_', ... ("configurations ['3', 'd', ...] are
    not in the plans")."""
    out = dropout_plans(_plans(), p=0.2, configurations="3d_fullres")
    assert out["configurations"]["3d_fullres"]["architecture"]["arch_kwargs"]["dropout_op"] == "torch.nn.Dropout3d"
    with pytest.raises(ValueError, match=r"configurations \['2d'\] are not in the plans"):
        dropout_plans(_plans(), p=0.2, configurations="2d")


def test_mc_dropout_placement_in_a_residual_encoder_unet_is_what_the_docs_say():
    """Found by hostile testing: the docs said nnUNetTrainerMCDropout puts dropout "after every convolution of the
    encoder and decoder", but for nnU-Net's ResEnc networks (``ResidualEncoderUNet``) dynamic_network_architectures
    puts it after the stem's convolution, the first convolution of each residual block (never the second) and every
    decoder convolution. The docs now say so; this checks the placement they describe."""
    import torch
    from nnunetv2.utilities.plans_handling.plans_handler import PlansManager

    import monai_unc.nnunet as mun
    from tests.nnunet.test_ssn_trainer import _plans as unet_plans

    plans = unet_plans(3)
    arch = plans["configurations"]["cfg"]["architecture"]
    arch["network_class_name"] = "dynamic_network_architectures.architectures.unet.ResidualEncoderUNet"
    arch["arch_kwargs"]["n_blocks_per_stage"] = arch["arch_kwargs"].pop("n_conv_per_stage")
    pm = PlansManager(plans)
    net = mun.nnUNetTrainerMCDropout.build_network_architecture(pm, pm.get_configuration("cfg"), 1, 3, False)
    with_dropout = {name.rsplit(".", 1)[0] for name, m in net.named_modules() if isinstance(m, torch.nn.Dropout3d)}
    convs = {name.rsplit(".", 1)[0] for name, m in net.named_modules()
             if isinstance(m, torch.nn.Conv3d) and m.kernel_size == (3, 3, 3)}
    assert with_dropout == {c for c in convs if c.startswith(("encoder.stem.", "decoder.")) or c.endswith(".conv1")}
    assert any(c.endswith(".conv2") for c in convs) and not any(c.endswith(".conv2") for c in with_dropout)
    assert "ResidualEncoderUNet" in mun.nnUNetTrainerMCDropout.__doc__


@pytest.mark.parametrize("text, match", [
    ("[" * 100_000 + "]" * 100_000, "not valid JSON"),  # was a RecursionError traceback
    ('{"configurations": ', "not valid JSON"),  # was a JSONDecodeError naming no file
    ("[1, 2]", "not a JSON object"),
])
def test_a_source_plans_file_that_is_no_json_object_is_named(tmp_path, text, match):
    """Found by a review of the nested-JSON fix: the preprocessed folder's plans (a file users edit) were read with a
    bare ``json.loads``, where a model folder's are read by ``read_model_json`` (one ValueError naming the file)."""
    from monai_unc.nnunet.dropout import write_dropout_plans

    (tmp_path / "Dataset990_UncToy").mkdir()
    plans = tmp_path / "Dataset990_UncToy" / "nnUNetPlans.json"
    plans.write_text(text)
    with pytest.raises(ValueError, match=f"nnUNetPlans.json: {match}"):
        write_dropout_plans(990, p=0.2, preprocessed_dir=tmp_path)
    assert not (tmp_path / "Dataset990_UncToy" / "nnUNetPlansDropout.json").exists()


@pytest.mark.parametrize("flags, match", [
    (["--target", "../../elsewhere"], "--target\\) must be a file stem"),  # was pathlib's "Invalid name '...'"
    (["--target", ".."], "--target\\) must be a file stem"),
    (["--target", "nnUNetPlans"], "--target\\) must differ from source_plans \\(-p\\)"),
    (["--rate", "1.5"], "--rate\\) must be a dropout rate"),  # was "exists; pass overwrite=True" (the target exists)
    ([], "exists; pass --overwrite to replace it$"),  # named the Python argument (review 63: and the option)
])
def test_dropout_plans_cli_errors_name_the_flags(tmp_path, monkeypatch, capsys, flags, match):
    """Found by hostile testing: ``nnunet-dropout-plans`` printed write_dropout_plans' messages, which named Python
    arguments (``pass overwrite=True``), let pathlib refuse a ``--target`` with a slash (``Invalid name``), and
    checked the target's existence before ``--rate``; nothing is written and the existing target is kept."""
    import argparse

    from monai_unc.nnunet.cli import add_parser, run

    folder = tmp_path / "Dataset990_UncToy"
    folder.mkdir()
    arch = {"arch_kwargs": {"conv_op": "torch.nn.modules.conv.Conv3d"}, "_kw_requires_import": ["conv_op"]}
    (folder / "nnUNetPlans.json").write_text(json.dumps({"configurations": {"3d_fullres": {"architecture": arch}}}))
    (folder / "nnUNetPlansDropout.json").write_text("{}")
    monkeypatch.setenv("nnUNet_preprocessed", str(tmp_path))
    parser = argparse.ArgumentParser(prog="monai-unc")
    add_parser(parser.add_subparsers())
    assert run(parser.parse_args(["nnunet-dropout-plans", "-d", "990", *flags])) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Invalid name" not in err
    assert re.search(match, err), err
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["nnUNetPlans.json", "nnUNetPlansDropout.json"]
    assert (folder / "nnUNetPlansDropout.json").read_text() == "{}"


def test_an_existing_target_refused_in_python_names_the_parameter(tmp_path):
    """Found by review 63: a Python caller was told of the command line's ``--overwrite`` too."""
    from monai_unc.nnunet.dropout import write_dropout_plans

    folder = tmp_path / "Dataset990_UncToy"
    folder.mkdir()
    arch = {"arch_kwargs": {"conv_op": "torch.nn.modules.conv.Conv3d"}, "_kw_requires_import": ["conv_op"]}
    (folder / "nnUNetPlans.json").write_text(json.dumps({"configurations": {"3d_fullres": {"architecture": arch}}}))
    (folder / "nnUNetPlansDropout.json").write_text("{}")
    with pytest.raises(FileExistsError, match="exists; pass overwrite=True to replace it$"):
        write_dropout_plans(990, p=0.2, preprocessed_dir=tmp_path)
    assert (folder / "nnUNetPlansDropout.json").read_text() == "{}"


def test_mc_dropout_trainer_on_a_dropout_plans_variant_says_which_rate_it_trains_with():
    """Found by hostile review: a dropout plans variant (p = 0.5) trained with nnUNetTrainerMCDropout was built with
    the trainer's rate (0.2) without a word; the trainer's rate still wins (the class name in the checkpoint rebuilds
    the same network at inference), with a warning naming both rates. Plans with the trainer's rate: no warning."""
    import warnings

    import torch
    from nnunetv2.utilities.plans_handling.plans_handler import PlansManager

    import monai_unc.nnunet as mun
    from tests.nnunet.test_ssn_trainer import _plans as unet_plans

    plans = unet_plans(3)
    variant = dropout_plans(plans, p=0.5, configurations="cfg")
    pm = PlansManager(variant)
    with pytest.warns(UserWarning, match=r"already has dropout \(p = 0.5\).*dropout_p = 0.2"):
        net = mun.nnUNetTrainerMCDropout.build_network_architecture(pm, pm.get_configuration("cfg"), 1, 3, False)
    assert {m.p for m in net.modules() if isinstance(m, torch.nn.Dropout3d)} == {0.2}
    same = PlansManager(dropout_plans(plans, p=mun.nnUNetTrainerMCDropout.dropout_p, configurations="cfg"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mun.nnUNetTrainerMCDropout.build_network_architecture(same, same.get_configuration("cfg"), 1, 3, False)
        stock = PlansManager(plans)
        mun.nnUNetTrainerMCDropout.build_network_architecture(stock, stock.get_configuration("cfg"), 1, 3, False)
