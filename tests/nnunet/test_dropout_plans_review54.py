"""Review 54 of the dropout plans variant: ``write_dropout_plans`` reads and writes inside the dataset's preprocessed
folder only, takes an integer id (not a bool or a float), and overwrites only when ``overwrite`` is True."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("nnunetv2")

from monai_unc.nnunet.dropout import dropout_arch_kwargs, write_dropout_plans  # noqa: E402

ARCH = {"arch_kwargs": {"conv_op": "torch.nn.modules.conv.Conv3d"}, "_kw_requires_import": ["conv_op"]}


@pytest.fixture
def base(tmp_path):
    folder = tmp_path / "pre" / "Dataset990_UncToy"
    folder.mkdir(parents=True)
    (folder / "nnUNetPlans.json").write_text(json.dumps({"configurations": {"3d_fullres": {"architecture": ARCH}}}))
    (folder / "nnUNetPlansDropout.json").write_text("{}")
    # a plans file outside the preprocessed folder, which a path in source_plans or dataset reached
    (tmp_path / "nnUNetPlans.json").write_text(json.dumps({"configurations": {"3d_fullres": {"architecture": ARCH}}}))
    return tmp_path


def _files(tmp_path):
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())


@pytest.mark.parametrize("kw, error, match", [
    # "no" is truthy: the existing target was replaced
    ({"dataset": 990, "overwrite": "no"}, TypeError, "overwrite must be True or False"),
    ({"dataset": 990, "overwrite": 1}, TypeError, "overwrite must be True or False"),
    # read ../../nnUNetPlans.json and wrote nnUNetPlansDropout.json beside it, outside the preprocessed folder
    ({"dataset": 990, "source_plans": "../../nnUNetPlans", "overwrite": True}, ValueError,
     r"source_plans \(-p\) must be a file stem"),
    ({"dataset": "Dataset990_UncToy/../..", "overwrite": True}, ValueError, "without path separators"),
    # True was dataset 1, 990.7 dataset 990
    ({"dataset": True, "overwrite": True}, ValueError, r"dataset \(-d\) must be an id"),
    ({"dataset": 990.7, "overwrite": True}, ValueError, r"dataset \(-d\) must be an id"),
])
def test_bad_arguments_write_nothing(kw, error, match, base):
    before = _files(base)
    with pytest.raises(error, match=match):
        write_dropout_plans(preprocessed_dir=base / "pre", **kw)
    assert _files(base) == before
    assert (base / "pre" / "Dataset990_UncToy" / "nnUNetPlansDropout.json").read_text() == "{}"


@pytest.mark.parametrize("dataset", [990, "990", "Dataset990_UncToy"])
def test_ids_and_names_still_find_the_dataset(dataset, base):
    import numpy as np

    for d in (dataset, np.int64(990)) if dataset == 990 else (dataset,):
        path = write_dropout_plans(d, preprocessed_dir=base / "pre", overwrite=True)
        assert path == base / "pre" / "Dataset990_UncToy" / "nnUNetPlansDropout.json"


@pytest.mark.parametrize("conv_op", [3, None, [1]])
def test_a_conv_op_that_is_no_name_nor_class_is_named(conv_op):
    """A plans file's number or null reached ``conv_op.__module__``: an AttributeError naming nothing."""
    with pytest.raises(ValueError, match="conv_op must be a Conv1d/Conv2d/Conv3d"):
        dropout_arch_kwargs({"conv_op": conv_op})


@pytest.mark.parametrize("p", [10**400, -(10**400)], ids=["1e400", "-1e400"])
def test_a_rate_beyond_the_floats_is_refused_naming_it(p):
    """``float(10**400)`` was Python's ``OverflowError: int too large to convert to float``, naming nothing."""
    with pytest.raises(ValueError, match="p must be a dropout rate"):
        dropout_arch_kwargs({"conv_op": "torch.nn.Conv3d"}, p)


@pytest.mark.parametrize("configurations", [3, b"3d_fullres", ["3d_fullres", None]])
def test_configurations_that_are_no_names_are_a_type_error_naming_them(configurations):
    """3 was "'int' object is not iterable", naming nothing; b"3d_fullres" the configurations 51, 100, ..."""
    from monai_unc.nnunet.dropout import dropout_plans

    with pytest.raises(TypeError, match="configurations must be a configuration name or a list of names"):
        dropout_plans({"configurations": {"3d_fullres": {"architecture": ARCH}}}, configurations=configurations)
