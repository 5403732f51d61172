"""Hostile review of UncertaintyPredictor beyond geometry: folds that are repeated, malformed or trained differently,
out-of-range sliding-window steps, and cascades (previous-stage segmentations missing, superfluous or incomplete).

Model folders are written by hand (``plans.json``, ``dataset.json``, ``fold_<k>/checkpoint_final.pth`` holding what
nnU-Net reads from a checkpoint) with the tiny network of :func:`tests.nnunet.test_nnunet.make_plans`.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("nnunetv2")

from nnunetv2.utilities.get_network_from_plans import get_network_from_plans  # noqa: E402
from nnunetv2.utilities.plans_handling.plans_handler import PlansManager  # noqa: E402

import monai_unc.nnunet as mun  # noqa: E402
from monai_unc.keys import UncertaintyKeys  # noqa: E402
from tests.nnunet.test_nnunet import DATASET_JSON, make_plans, make_predictor, write_inputs  # noqa: E402

CPU = torch.device("cpu")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def write_model_folder(root: Path, folds=(0, 1), plans: dict | None = None, in_channels: int = 1,
                       trainer: dict | None = None, mirror: dict | None = None, configuration: dict | None = None,
                       fold_plans: dict | None = None, dataset_json: dict | None = None) -> Path:
    """A trained-model folder as nnU-Net writes it; per-fold overrides of the checkpoint's trainer, mirror axes,
    configuration and plans (``{fold: value}``)."""
    plans = plans or make_plans()
    dataset_json = dataset_json or DATASET_JSON
    cm = PlansManager(plans).get_configuration("cfg")
    heads = PlansManager(plans).get_label_manager(dataset_json).num_segmentation_heads
    root.mkdir(parents=True, exist_ok=True)
    (root / "plans.json").write_text(json.dumps(plans))
    (root / "dataset.json").write_text(json.dumps(dataset_json))
    for i, f in enumerate(folds):
        torch.manual_seed(i)
        net = get_network_from_plans(cm.network_arch_class_name, cm.network_arch_init_kwargs,
                                     cm.network_arch_init_kwargs_req_import, in_channels, heads, allow_init=True,
                                     deep_supervision=False)
        (root / f"fold_{f}").mkdir()
        torch.save({"trainer_name": (trainer or {}).get(f, "nnUNetTrainer"),
                    "init_args": {"configuration": (configuration or {}).get(f, "cfg"),
                                  "plans": (fold_plans or {}).get(f, plans), "fold": f},
                    "inference_allowed_mirroring_axes": (mirror or {}).get(f, (0, 1, 2)),
                    "network_weights": net.state_dict()}, root / f"fold_{f}" / "checkpoint_final.pth")
    return root


def _predictor(**kw) -> mun.UncertaintyPredictor:
    return mun.UncertaintyPredictor(device=CPU, allow_tqdm=False, **kw)


# ------------------------------------------------------------------------------------------ folds
@pytest.mark.parametrize("folds, match", [
    ((0, 0), "more than once"),
    (("1", 1), "more than once"),
    ((), "at least one fold"),
    (("x",), "fold numbers"),
    ((-1,), "fold numbers"),
    ((True,), "fold numbers"),
])
def test_repeated_or_malformed_folds_are_refused(folds, match, tmp_path):
    """A fold named twice was loaded twice and counted as two ensemble members (the folds' disagreement, MI, shrank
    and the record claimed more folds); an empty, negative or non-numeric fold failed deep in nnU-Net."""
    model = write_model_folder(tmp_path / "model")
    with pytest.raises(ValueError, match=match):
        _predictor(uncertainty_sources=("folds",)).initialize_from_trained_model_folder(str(model), folds)


@pytest.mark.parametrize("field", ["mirror", "plans", "configuration"])
@pytest.mark.parametrize("order", [(0, 1), (1, 0), None])
def test_folds_trained_differently_are_refused(field, order, tmp_path):
    """nnU-Net builds every fold's network with the first fold's trainer, configuration and mirror axes: a fold trained
    with other plans (here another target spacing) or mirror axes was predicted with the first fold's, silently (the
    weights fit), and which one won depended on the order of -f."""
    plans = make_plans()
    other = copy.deepcopy(plans)
    other["configurations"]["cfg"]["spacing"] = [0.8, 1.0, 1.0]
    kw = {"mirror": {"mirror": {1: (0,)}}, "plans": {"fold_plans": {1: other}},
          "configuration": {"configuration": {1: "3d_lowres"}}}[field]
    model = write_model_folder(tmp_path / "model", plans=plans, **kw)
    key = {"mirror": "inference_allowed_mirroring_axes", "plans": r"plans \(plans.configurations.cfg.spacing",
           "configuration": "configuration"}[field]
    with pytest.raises(ValueError, match=f"different {key}"):
        _predictor(uncertainty_sources=("folds",)).initialize_from_trained_model_folder(str(model), order)


def test_folds_of_one_training_run_load(tmp_path):
    """The check refuses nothing that belongs together: same trainer, configuration, mirror axes and plans."""
    model = write_model_folder(tmp_path / "model", folds=(0, 1, 2))
    for folds in [(0, 1, 2), None, ("2", 0)]:
        pred = _predictor(uncertainty_sources=("folds", "mirroring"))
        pred.initialize_from_trained_model_folder(str(model), folds)
        assert len(pred.list_of_parameters) == (3 if folds is None else len(folds))


# ------------------------------------------------------------------------------------------ sliding window
@pytest.mark.parametrize("step", [0, 0.0, -0.5, 1.5, float("nan"), True, "0.5"])
def test_tile_step_size_out_of_range_is_refused_at_construction(step):
    """Stock nnU-Net asserts 0 < step <= 1 only when the first case reaches the sliding window (an AssertionError
    after loading the model and preprocessing); refused at once, naming the argument."""
    with pytest.raises(ValueError, match="tile_step_size"):
        _predictor(tile_step_size=step)


def test_full_patch_step_is_accepted():
    assert _predictor(tile_step_size=1).tile_step_size == 1


# ------------------------------------------------------------------------------------------ cascades
def _cascade_predictor(**kw) -> mun.UncertaintyPredictor:
    """A second cascade stage: its network reads the image and the previous stage's one-hot foreground (1 + 2)."""
    plans = make_plans()
    plans["configurations"]["cfg"]["previous_stage"] = "lowres"
    pm = PlansManager(plans)
    cm = pm.get_configuration("cfg")
    net = get_network_from_plans(cm.network_arch_class_name, cm.network_arch_init_kwargs,
                                 cm.network_arch_init_kwargs_req_import, 3, 3, allow_init=True,
                                 deep_supervision=False)
    pred = _predictor(uncertainty_sources=("mirroring",), **kw)
    pred.manual_initialization(net, pm, cm, [copy.deepcopy(net.state_dict())], DATASET_JSON, "nnUNetTrainer",
                               (0, 1, 2))
    return pred


def _predict(pred, inp, out, prev=None):
    return pred.predict_from_files(str(inp), str(out), num_processes_preprocessing=0,
                                   num_processes_segmentation_export=0, folder_with_segs_from_prev_stage=prev)


def test_cascade_stage_without_previous_stage_is_refused_before_writing(tmp_path):
    """Stock raised an AssertionError (a traceback from nnunet-predict), after writing plans.json, dataset.json and
    its arguments into the output folder."""
    write_inputs(tmp_path / "in", shapes=((16, 16, 16),))
    with pytest.raises(ValueError, match="cascade stage.*lowres"):
        _predict(_cascade_predictor(), tmp_path / "in", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_previous_stage_for_a_plain_configuration_is_refused(tmp_path):
    """The previous stage's one-hot channels were stacked onto the image of a network that does not read them: the
    first convolution failed with a channel-count RuntimeError."""
    write_inputs(tmp_path / "in", shapes=((16, 16, 16),))
    (tmp_path / "prev").mkdir()
    pred = make_predictor(uncertainty_sources=("mirroring",), n_folds=1)
    with pytest.raises(ValueError, match="no cascade stage"):
        _predict(pred, tmp_path / "in", tmp_path / "out", prev=str(tmp_path / "prev"))


def test_missing_previous_stage_segmentation_is_named(tmp_path):
    """A case without its previous-stage segmentation failed in the reader (or killed a preprocessing worker) after
    the cases before it were predicted."""
    cases = write_inputs(tmp_path / "in", shapes=((16, 16, 16), (16, 16, 16)))
    (tmp_path / "prev").mkdir()
    shutil.copy(tmp_path / "in" / f"{cases[0]}_0000.nii.gz", tmp_path / "prev" / f"{cases[0]}.nii.gz")
    with pytest.raises(ValueError, match=f"1 of 2 cases \\({cases[1]}.nii.gz\\)"):
        _predict(_cascade_predictor(), tmp_path / "in", tmp_path / "out", prev=str(tmp_path / "prev"))


def test_previous_stage_segmentation_of_another_shape_is_named_before_any_case(tmp_path):
    """A previous-stage segmentation in another grid than its image failed in nnU-Net's preprocessing with
    ``AssertionError: Shape mismatch ... --verify_dataset_integrity`` (a traceback), after the cases before it were
    written; now one ValueError naming the file and both shapes, before any case is predicted."""
    import nibabel as nib
    import numpy as np

    cases = write_inputs(tmp_path / "in", shapes=((16, 16, 16), (18, 17, 16)))
    (tmp_path / "prev").mkdir()
    shutil.copy(tmp_path / "in" / f"{cases[0]}_0000.nii.gz", tmp_path / "prev" / f"{cases[0]}.nii.gz")
    nib.save(nib.Nifti1Image(np.ones((16, 16, 16), np.uint8), np.eye(4)), str(tmp_path / "prev" / f"{cases[1]}.nii.gz"))
    with pytest.raises(ValueError, match=f"{cases[1]}.nii.gz has shape \\(16, 16, 16\\) but its case's image "
                                         f".*{cases[1]}_0000.nii.gz has shape \\(16, 17, 18\\)"):
        _predict(_cascade_predictor(), tmp_path / "in", tmp_path / "out", prev=str(tmp_path / "prev"))
    assert not list((tmp_path / "out").glob(f"{cases[0]}*"))


@pytest.mark.parametrize("part_id, num_parts", [(2, 2), (-1, 2), (0, 0)])
def test_part_id_outside_the_parts_is_refused(part_id, num_parts, tmp_path):
    """Stock asserts ``part_id <= num_parts`` (so part_id == num_parts passed and predicted nothing)."""
    write_inputs(tmp_path / "in", shapes=((16, 16, 16),))
    pred = make_predictor(uncertainty_sources=("mirroring",), n_folds=1)
    with pytest.raises(ValueError, match="part_id"):
        pred.predict_from_files(str(tmp_path / "in"), str(tmp_path / "out"), num_processes_preprocessing=0,
                                num_processes_segmentation_export=0, num_parts=num_parts, part_id=part_id)


@pytest.mark.parametrize("seed", [1.5, "0", True])
def test_seed_that_is_no_integer_is_refused(seed):
    """``seed=1.5`` drew the masks of seed 1 while uncertainty_config.json recorded 1.5 (two runs recorded with
    different seeds had the same draws); ``seed="0"`` failed at the first case, after the model loaded."""
    with pytest.raises(TypeError, match="seed must be an integer"):
        _predictor(uncertainty_sources=("folds", "dropout"), dropout_p=0.1, seed=seed)


@pytest.mark.parametrize("seed", [-1, 2**64])
def test_seed_outside_64_bits_is_refused(seed):
    """Hostile review (determinism): ``seed=-1`` drew the masks of ``2**64 - 1`` while the records said -1 (and
    ``nnunet-predict --seed -1`` took it), ``seed=2**64`` failed at the first case with torch's overflow error."""
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*64 - 1\]"):
        _predictor(uncertainty_sources=("folds", "dropout"), dropout_p=0.1, seed=seed)


def test_integer_seeds_are_accepted():
    import numpy as np

    assert _predictor(uncertainty_sources=("folds", "dropout"), dropout_p=0.1, seed=np.int64(3)).seed == 3


# ------------------------------------------------------------------------------------------ input channels
TWO_CHANNELS = {**DATASET_JSON, "channel_names": {"0": "T1", "1": "T2"}}


@pytest.mark.parametrize("channels, remove, add, match", [
    (2, "case1_0001.nii.gz", None, r"^case case1: missing case1_0001.nii.gz \(the model takes 2 channels: T1, T2\)$"),
    (1, "case1_0000.nii.gz", "case1_0001.nii.gz", r"^case case1: missing case1_0000.nii.gz"),
    (1, None, "case0_0001.nii.gz", r"^case case0: .*case0_0001.nii.gz is no input channel of the model \(the model "
     r"takes 1 channel: MRI\)$"),
    (1, None, "notes.nii.gz", r"notes.nii.gz: not named <case>_<4-digit channel>.nii.gz"),
])
def test_cases_without_one_file_per_channel_are_refused_before_writing(channels, remove, add, match, tmp_path):
    """A 2-channel model's case without its _0001 file failed in the first convolution, a stray _0001 file of a
    1-channel model in nnU-Net's normaliser (IndexError): after the cases before it were written, naming neither the
    case nor the file."""
    model = write_model_folder(tmp_path / "model", folds=(0,), in_channels=channels,
                               dataset_json=TWO_CHANNELS if channels == 2 else None)
    inp = tmp_path / "in"
    write_inputs(inp, shapes=((16, 16, 16), (16, 16, 16)))
    if channels == 2:
        for case in ("case0", "case1"):
            shutil.copy(inp / f"{case}_0000.nii.gz", inp / f"{case}_0001.nii.gz")
    if add is not None:
        shutil.copy(inp / "case0_0000.nii.gz", inp / add)
    if remove is not None:
        (inp / remove).unlink()
    pred = _predictor(uncertainty_sources=("mirroring",))
    pred.initialize_from_trained_model_folder(str(model), (0,))
    with pytest.raises(ValueError, match=match):
        _predict(pred, inp, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # the lists of channel files of the Python API: their number is checked
    with pytest.raises(ValueError, match=f"the case has 3 channel files \\(the model takes {channels} channel"):
        pred.predict_from_files([[str(inp / "case0_0000.nii.gz")] * 3], str(tmp_path / "out"),
                                num_processes_preprocessing=0, num_processes_segmentation_export=0)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", [float("-inf"), float("inf")])
def test_infinite_logits_are_refused(value):
    """A -inf logit (a float16 network whose logits overflowed) gives a softmax probability of exactly 0, which the
    check of the stitched statistics did not see: the predictor returned confident maps (+inf gave NaN and was
    refused). Found by hostile testing (precision review)."""
    pred = make_predictor(n_folds=1, uncertainty_sources=("mirroring",), measures=mun.MAP_MEASURES)

    def overflow(module, args, out):
        out = out.clone()
        out[:, 1, 3, 4, 5] = value
        return out

    handle = pred.network.register_forward_hook(overflow)
    data = torch.randn(1, 16, 16, 16)
    with pytest.raises(RuntimeError, match="non-finite"):
        pred.predict_uncertainty_from_preprocessed_data(data)
    handle.remove()
    res = pred.predict_uncertainty_from_preprocessed_data(data)
    assert torch.isfinite(res.moments["pred"]).all()


# ------------------------------------------------------------------------------------------ predict_uncertainty_npy
_SPACING = {"spacing": [1.0, 1.0, 1.0]}


def _image(shape=(1, 18, 17, 16)):
    import numpy as np

    return np.random.default_rng(0).normal(size=shape).astype(np.float32)


@pytest.mark.parametrize(("case", "error", "match"), [
    ("no channel axis", ValueError, r"input_image must be \(C_in, x, y, z\).*got shape \(18, 17, 16\)"),
    ("two channels", ValueError, "input_image holds 2 channels.*model takes 1: MRI"),
    ("torch tensor", TypeError, "input_image must be a numpy array"),
    ("nan voxel", ValueError, "input_image holds 1 non-finite voxel "),
    ("no spacing", ValueError, r"image_properties\['spacing'\]"),
    ("2d spacing", ValueError, r"image_properties\['spacing'\]"),
    ("previous stage for a plain configuration", ValueError, "no cascade stage"),
])
def test_npy_input_that_the_model_cannot_read_is_named(case, error, match):
    """Stock's npy path failed deep inside with messages naming no argument: "axes don't match array" (no channel
    axis), an IndexError in the normaliser (two channels), "no attribute 'astype'" (a tensor), KeyError 'spacing', an
    IndexError (2 spacings), an OverflowError in the cropping (a previous stage for a plain configuration); a NaN
    voxel spread over the whole normalised image and failed after every window as 'NaN or inf logits?'."""
    image, props, prev = _image(), dict(_SPACING), None
    if case == "no channel axis":
        image = image[0]
    elif case == "two channels":
        image = _image((2, 18, 17, 16))
    elif case == "torch tensor":
        image = torch.from_numpy(image)
    elif case == "nan voxel":
        image[0, 3, 4, 5] = float("nan")
    elif case == "no spacing":
        props = {}
    elif case == "2d spacing":
        props = {"spacing": [1.0, 1.0]}
    else:
        prev = (image[:1] > 0).astype("uint8")
    pred = make_predictor(uncertainty_sources=("mirroring",), n_folds=1)
    with pytest.raises(error, match=match):
        pred.predict_uncertainty_npy(image, props, prev)


@pytest.mark.parametrize(("prev_shape", "match"), [
    (None, r"cascade stage: it needs the segmentation of the previous stage \(lowres\)"),
    ((1, 9, 17, 16), r"segmentation_previous_stage must be \(1, x, y, z\) over the image's grid \(18, 17, 16\)"),
    ((18, 17, 16), r"segmentation_previous_stage must be \(1, x, y, z\)"),
])
def test_npy_cascade_stage_needs_its_previous_stage_on_the_image_grid(prev_shape, match):
    """A cascade stage without its previous stage failed in the network's first convolution (3 channels expected, 1
    given); a previous stage of another shape failed in nnU-Net's preprocessor assertion."""
    import numpy as np

    prev = None if prev_shape is None else np.ones(prev_shape, np.uint8)
    with pytest.raises(ValueError, match=match):
        _cascade_predictor().predict_uncertainty_npy(_image(), dict(_SPACING), prev)


def test_npy_cascade_stage_with_its_previous_stage_predicts():
    """The check refuses nothing that fits: a cascade stage with a (1, x, y, z) previous stage, float64 input."""
    import numpy as np

    image = _image().astype(np.float64)
    out = _cascade_predictor().predict_uncertainty_npy(image, dict(_SPACING), (image[:1] > 0).astype(np.uint8))
    assert out["segmentation"].shape == (18, 17, 16)


@pytest.mark.parametrize("measures", [("variance", "variance"),
                                      ("predictive_entropy", UncertaintyKeys.PREDICTIVE_ENTROPY)])
def test_a_measure_named_twice_is_refused(measures):
    """``--measures variance variance`` ran and recorded ``["variance", "variance"]`` in uncertainty_config.json (one
    map file per measure); uncertainty sources named twice were already refused."""
    with pytest.raises(ValueError, match="measures names a measure more than once"):
        _predictor(measures=measures)


def test_npy_output_into_a_folder_of_other_settings_is_refused(tmp_path):
    """``predict_uncertainty_npy(..., output_file_truncated=...)`` wrote its case beside cases made with other settings
    and rewrote uncertainty_config.json for its own settings: the folder mixed two runs (predict_from_files refuses)."""
    import nibabel as nib
    import numpy as np
    from nnunetv2.imageio.simpleitk_reader_writer import SimpleITKIO

    nib.save(nib.Nifti1Image(_image()[0], np.eye(4)), str(tmp_path / "a_0000.nii.gz"))
    image, props = SimpleITKIO().read_images([str(tmp_path / "a_0000.nii.gz")])
    out = tmp_path / "out"
    first = make_predictor(uncertainty_sources=("folds", "mirroring"))
    first.predict_uncertainty_npy(image, props, output_file_truncated=str(out / "a"))
    config = (out / "uncertainty_config.json").read_text()
    other = make_predictor(uncertainty_sources=("mirroring",), n_folds=1)
    with pytest.raises(ValueError, match=r"holds 1 case \(a\) made with other settings"):
        other.predict_uncertainty_npy(image, props, output_file_truncated=str(out / "b"))
    assert not (out / "b.nii.gz").exists() and (out / "uncertainty_config.json").read_text() == config
    # the same settings add a case; the other settings may replace the folder's only case
    first.predict_uncertainty_npy(image, props, output_file_truncated=str(out / "b"))
    assert (out / "b.nii.gz").is_file()
    other.predict_uncertainty_npy(image, props, output_file_truncated=str(tmp_path / "solo" / "a"))
    first.predict_uncertainty_npy(image, props, output_file_truncated=str(tmp_path / "solo" / "a"))


@pytest.mark.parametrize("sources, folds, match", [
    (("dropout",), 1, "dropout with num_samples=1 give one sample per voxel"),
    (("folds", "dropout"), 1, "folds, dropout with num_samples=1 and a single fold give one sample per voxel"),
])
def test_one_sample_per_voxel_is_warned_as_a_single_fold_is(sources, folds, match):
    """Found by hostile testing: ``--sources dropout --num_samples 1`` (or with one fold) drew one sample per voxel
    without a word, where ``--sources folds -f 0`` warns: mutual information and variance were 0 everywhere."""
    import warnings

    with pytest.warns(UserWarning, match=match):
        make_predictor(uncertainty_sources=sources, n_folds=folds, num_samples=1, dropout_p=0.1)
    with warnings.catch_warnings():  # two samples (or mirrors): no warning
        warnings.simplefilter("error")
        make_predictor(uncertainty_sources=sources, n_folds=folds, num_samples=2, dropout_p=0.1)
        make_predictor(uncertainty_sources=(*sources, "mirroring"), n_folds=folds, num_samples=1, dropout_p=0.1)
