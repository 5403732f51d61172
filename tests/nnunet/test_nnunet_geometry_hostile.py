"""Hostile geometry review of the nnU-Net outputs: every file UncertaintyPredictor writes for a case must lie on the
voxel grid of the segmentation stock ``nnUNetPredictor`` writes for the same case and model.

The reference is nnU-Net itself: its own exported segmentation and ``.npz`` (same network, same folds, same
mirroring), its own readers to read our files back, SimpleITK / nibabel geometry of the written files and numpy.
With one fold and no mirroring, every sample is the same network pass, so the mean probabilities are the softmax of
stock's logits up to stock's fp16 logit buffer: the ``one_minus_max_prob`` map read back with nnU-Net's reader must
equal ``1 - max_c`` of stock's ``.npz`` voxel for voxel (no resampling), whatever the axis transposition, cropping,
reader/writer, orientation or configuration. A transposed, flipped or shifted map fails that comparison.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("nnunetv2")

import nibabel as nib  # noqa: E402
import SimpleITK as sitk  # noqa: E402
from nnunetv2.imageio.reader_writer_registry import recursive_find_reader_writer_by_name  # noqa: E402
from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor  # noqa: E402

import monai_unc.nnunet as mun  # noqa: E402
from monai_unc.nnunet.export import UNCERTAINTY_FOLDER  # noqa: E402
from tests.nnunet.test_nnunet import DATASET_JSON, make_plans, make_predictor  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: image shape (nibabel / file order x, y, z); small enough for one 16^3 window after any transposition
SHAPE = (13, 11, 9)


def _image() -> np.ndarray:
    """A smooth, asymmetric image with a zero border on two faces (nnU-Net crops it away and puts it back)."""
    g = np.meshgrid(*[np.linspace(-1.0, 1.0, n) for n in SHAPE], indexing="ij")
    img = (3.0 + 2.0 * g[0] + g[1] ** 2 - 1.5 * g[2] + np.sin(2.0 * g[0] * g[2])).astype(np.float32)
    img[:2] = 0.0
    img[..., -1] = 0.0
    return img


def _oblique_flipped_affine() -> np.ndarray:
    """An oblique affine (20 degrees about z) with permuted and flipped axes and anisotropic voxels."""
    t = np.deg2rad(20.0)
    rot = np.array([[np.cos(t), -np.sin(t), 0.0], [np.sin(t), np.cos(t), 0.0], [0.0, 0.0, 1.0]])
    perm = np.array([[0.0, -1.0, 0.0], [0.0, 0.0, 1.0], [-1.0, 0.0, 0.0]])
    affine = np.eye(4)
    affine[:3, :3] = rot @ perm @ np.diag([0.8, 1.1, 2.0])
    affine[:3, 3] = (10.0, -4.0, 3.5)
    return affine


def _axis_aligned_affine() -> np.ndarray:
    affine = np.diag([0.8, 1.1, 2.0, 1.0])
    affine[:3, 3] = (3.0, -2.0, 1.5)
    return affine


def _write_input(folder: Path, ending: str, affine: np.ndarray) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    img = _image()
    if ending == ".tif":
        import tifffile

        tifffile.imwrite(str(folder / "case0_0000.tif"), img)
        (folder / "case0.json").write_text(json.dumps({"spacing": [2.0, 1.1, 0.8]}))
        return folder / "case0_0000.tif"
    nib.save(nib.Nifti1Image(img, affine), str(folder / f"case0_0000{ending}"))
    return folder / f"case0_0000{ending}"


def _predict_both(root: Path, io_name: str, ending: str = ".nii.gz", affine: np.ndarray | None = None,
                  transpose: tuple[int, ...] = (2, 0, 1), ndim: int = 3, spacing: tuple[float, ...] | None = None,
                  mirror_axes: tuple[int, ...] | None = None, torch_resampling: bool = False, **kw) -> dict:
    """Predict one case from files with stock nnU-Net and with UncertaintyPredictor (same single network).

    ``spacing=None``: the configuration's target spacing is the image's own (after the reader and the plans'
    transposition), so nothing is resampled and stock's ``.npz`` is an exact reference for the maps.
    """
    inp = root / "in"
    image = _write_input(inp, ending, _axis_aligned_affine() if affine is None else affine)
    rw = recursive_find_reader_writer_by_name(io_name)()
    _, props = rw.read_images([str(image)])
    if spacing is None:
        spacing = tuple(float(props["spacing"][i]) for i in transpose)
    if ndim == 2:
        plans = make_plans(ndim=2, patch=(16, 16), spacing=spacing[1:], transpose=transpose)
    else:
        plans = make_plans(transpose=transpose, spacing=spacing)
    plans["image_reader_writer"] = io_name
    if torch_resampling:  # nnU-Net's torch resampling (ResamplingWithTorch planners) for the probabilities
        plans["configurations"]["cfg"]["resampling_fn_probabilities"] = "resample_torch_fornnunet"
        plans["configurations"]["cfg"]["resampling_fn_probabilities_kwargs"] = {
            "is_seg": False, "force_separate_z": None, "memefficient_seg_resampling": False}
    dataset_json = dict(DATASET_JSON, file_ending=ending)
    stock = make_predictor(cls=nnUNetPredictor, plans=plans, n_folds=1, mirror_axes=mirror_axes)
    stock.dataset_json = dataset_json
    (root / "stock").mkdir()
    stock.predict_from_files_sequential(str(inp), str(root / "stock"), save_probabilities=True)
    kw = {"uncertainty_sources": ("folds",), "measures": mun.MAP_MEASURES, **kw}
    if mirror_axes is None:
        with pytest.warns(UserWarning, match="single fold"):
            ours = make_predictor(plans=plans, n_folds=1, mirror_axes=None, **kw)
    else:
        ours = make_predictor(plans=plans, n_folds=1, mirror_axes=mirror_axes, **kw)
    ours.dataset_json = dataset_json
    ours.predict_from_files(str(inp), str(root / "ours"), save_probabilities=True, num_processes_preprocessing=0,
                            num_processes_segmentation_export=0)
    return {"rw": rw, "stock": root / "stock", "ours": root / "ours", "ending": ending, "plans": plans,
            "image": image}


def _sitk_geometry(path: Path) -> tuple:
    img = sitk.ReadImage(str(path))
    return img.GetSize(), img.GetOrigin(), img.GetSpacing(), img.GetDirection()


def _assert_same_grid(a: Path, b: Path) -> None:
    size_a, origin_a, spacing_a, dir_a = _sitk_geometry(a)
    size_b, origin_b, spacing_b, dir_b = _sitk_geometry(b)
    assert size_a == size_b
    np.testing.assert_allclose(origin_a, origin_b, atol=1e-5)
    np.testing.assert_allclose(spacing_a, spacing_b, atol=1e-6)
    np.testing.assert_allclose(dir_a, dir_b, atol=1e-6)
    na, nb = nib.load(str(a)), nib.load(str(b))
    assert na.shape == nb.shape
    np.testing.assert_allclose(na.affine, nb.affine, atol=1e-5)


def _check_against_stock(run: dict) -> None:
    rw, stock, ours, ending = run["rw"], run["stock"], run["ours"], run["ending"]
    seg_stock, _ = rw.read_seg(str(stock / f"case0{ending}"))
    seg_ours, _ = rw.read_seg(str(ours / f"case0{ending}"))
    np.testing.assert_array_equal(seg_ours, seg_stock)
    probs_stock = np.load(stock / "case0.npz")["probabilities"]
    probs_ours = np.load(ours / "case0.npz")["probabilities"]
    np.testing.assert_array_equal(probs_ours, probs_stock)  # class axis first, classes in order, reader's order
    np.testing.assert_array_equal(probs_stock.argmax(0), seg_stock[0])
    assert (seg_stock > 0).any() and (seg_stock == 0).any()
    for measure in mun.MAP_MEASURES:
        path = ours / UNCERTAINTY_FOLDER / f"case0_{measure}{ending}"
        if ending != ".tif":
            _assert_same_grid(path, stock / f"case0{ending}")
    # alignment: the map read back by nnU-Net's own reader is 1 - max_c of stock's probabilities, voxel for voxel
    one_minus, _ = rw.read_images([str(ours / UNCERTAINTY_FOLDER / f"case0_one_minus_max_prob{ending}")])
    assert one_minus.shape == seg_stock.shape
    np.testing.assert_allclose(one_minus[0], 1.0 - probs_stock.max(0), atol=2e-3)
    # and the predictive entropy is the entropy of those probabilities
    pe, _ = rw.read_images([str(ours / UNCERTAINTY_FOLDER / f"case0_predictive_entropy{ending}")])
    p = probs_stock.astype(np.float64)
    np.testing.assert_allclose(pe[0], -(p * np.log(np.where(p > 0, p, 1.0))).sum(0), atol=5e-3)


# ------------------------------------------------------------------------------------------ guards (verified right)
@pytest.mark.parametrize(("io_name", "oblique"), [
    ("SimpleITKIO", False),
    ("NibabelIO", False),
    ("NibabelIOWithReorient", True),
    ("SimpleITKIOWithReorient", True),
])
def test_maps_lie_on_stock_segmentation_grid_for_every_reader_writer(io_name, oblique, tmp_path):
    """Transposed plans (2, 0, 1), a cropped zero border, each NIfTI reader/writer (oblique flipped affine for the
    reorienting ones): segmentation and ``.npz`` are stock's, every map has the segmentation's grid, and the maps
    read back with nnU-Net's reader are 1 - max p and H(p) of stock's ``.npz`` voxel for voxel."""
    run = _predict_both(tmp_path, io_name, affine=_oblique_flipped_affine() if oblique else None)
    _check_against_stock(run)


def test_2d_configuration_maps_lie_on_stock_segmentation_grid(tmp_path):
    """A 2D configuration (slices along the plans' first axis after the transposition) from files."""
    run = _predict_both(tmp_path, "SimpleITKIO", ndim=2)
    _check_against_stock(run)


@pytest.mark.parametrize(("spacing", "ndim", "torch_resampling"), [
    ((1.5, 1.0, 1.25), 3, False), ((4.0, 1.0, 1.25), 3, False), ((1.5, 1.6, 1.0), 2, False),
    ((1.5, 1.0, 1.25), 3, True)], ids=["3d", "3d-separate-z", "2d", "3d-torch"])
def test_resampled_maps_are_nnunets_probability_resampling_of_the_mean(spacing, ndim, torch_resampling, tmp_path):
    """Target spacing different from the image's (resampling) with transposed plans and a cropped border: the
    ``.npz`` of ``segmentation_from="probabilities"`` (the mean probabilities) is nnU-Net's own chain for
    probabilities (``resampling_fn_probabilities``, ``revert_cropping_on_probabilities``, ``transpose_backward``)
    applied to the network-resolution mean, its argmax is the written segmentation, and 1 - max of it is the map.
    A target spacing anisotropic beyond nnU-Net's threshold (3) resamples the out-of-plane axis separately; a 2D
    configuration resamples in-plane only (the first axis keeps the image's spacing)."""
    run = _predict_both(tmp_path, "SimpleITKIO", spacing=spacing, ndim=ndim, torch_resampling=torch_resampling,
                        segmentation_from="probabilities")
    rw, ours = run["rw"], run["ours"]
    pred = make_predictor(cls=nnUNetPredictor, plans=run["plans"], n_folds=1, mirror_axes=None)  # the same network
    pp = pred.configuration_manager.preprocessor_class(verbose=False)
    data, _, props = pp.run_case([str(run["image"])], None, pred.plans_manager, pred.configuration_manager,
                                 pred.dataset_json)
    pm, cm, lm = pred.plans_manager, pred.configuration_manager, pred.label_manager
    assert tuple(data.shape[1:]) != tuple(props["shape_after_cropping_and_before_resampling"])  # resampled
    net = torch.softmax(pred.predict_logits_from_preprocessed_data(torch.from_numpy(data)).float(), 0).numpy()
    spacing_t = [props["spacing"][i] for i in pm.transpose_forward]
    current = list(cm.spacing) if ndim == 3 else [spacing_t[0], *cm.spacing]
    resampled = cm.resampling_fn_probabilities(net, props["shape_after_cropping_and_before_resampling"], current,
                                               spacing_t)
    full = lm.revert_cropping_on_probabilities(torch.as_tensor(np.asarray(resampled, dtype=np.float32)),
                                               props["bbox_used_for_cropping"], props["shape_before_cropping"])
    expected = np.asarray(full).transpose([0] + [i + 1 for i in pm.transpose_backward])
    probs = np.load(ours / "case0.npz")["probabilities"]
    np.testing.assert_allclose(probs, expected, atol=2e-3)
    seg, _ = rw.read_seg(str(ours / "case0.nii.gz"))
    np.testing.assert_array_equal(probs.argmax(0), seg[0])
    one_minus, _ = rw.read_images([str(ours / UNCERTAINTY_FOLDER / "case0_one_minus_max_prob.nii.gz")])
    np.testing.assert_allclose(one_minus[0], 1.0 - probs.max(0), atol=1e-6)
    _assert_same_grid(ours / UNCERTAINTY_FOLDER / "case0_one_minus_max_prob.nii.gz", run["stock"] / "case0.nii.gz")


@pytest.mark.parametrize("mirror_axes", [(1, 2), (0,)])
def test_mirroring_uses_the_models_allowed_axes_only(mirror_axes, tmp_path):
    """A model whose trainer allows mirroring along a subset of the axes (transposed plans): mirroring as the
    uncertainty source samples exactly stock's 2^k mirrors, so the segmentation and ``.npz`` are stock's (which sums
    the same mirrors), and the config records those axes and 2^k samples."""
    run = _predict_both(tmp_path, "SimpleITKIO", mirror_axes=mirror_axes, uncertainty_sources=("mirroring",))
    rw, stock, ours = run["rw"], run["stock"], run["ours"]
    np.testing.assert_array_equal(rw.read_seg(str(ours / "case0.nii.gz"))[0],
                                  rw.read_seg(str(stock / "case0.nii.gz"))[0])
    np.testing.assert_array_equal(np.load(ours / "case0.npz")["probabilities"],
                                  np.load(stock / "case0.npz")["probabilities"])
    cfg = json.loads((ours / "uncertainty_config.json").read_text())
    assert cfg["mirror_axes"] == list(mirror_axes) and cfg["samples_per_voxel"] == 2 ** len(mirror_axes)
    mi, _ = rw.read_images([str(ours / UNCERTAINTY_FOLDER / "case0_mutual_information.nii.gz")])
    assert mi.max() > 0  # the mirrors disagree somewhere
    _assert_same_grid(ours / UNCERTAINTY_FOLDER / "case0_mutual_information.nii.gz", stock / "case0.nii.gz")


# ------------------------------------------------------------------------------------------ defects
def test_tiff_segmentation_and_maps_keep_their_spacing_sidecar(tmp_path):
    """Tiff3DIO stores the spacing in a ``<name>.json`` sidecar that ``write_seg`` names after the file it writes.

    Writing under a temporary name and renaming left the sidecar under the temporary name (a hidden
    ``.case0.partial.json``): the segmentation and every map read back with spacing (1, 1, 1) instead of the
    image's, unlike stock's ``case0.json``.
    """
    run = _predict_both(tmp_path, "Tiff3DIO", ending=".tif")
    rw, stock, ours = run["rw"], run["stock"], run["ours"]
    assert json.loads((stock / "case0.json").read_text()) == {"spacing": [2.0, 1.1, 0.8]}  # stock's sidecar
    assert (ours / "case0.json").read_text() == (stock / "case0.json").read_text()
    seg_stock, props_stock = rw.read_seg(str(stock / "case0.tif"))
    seg_ours, props_ours = rw.read_seg(str(ours / "case0.tif"))
    np.testing.assert_array_equal(seg_ours, seg_stock)
    assert list(props_ours["spacing"]) == list(props_stock["spacing"]) == [2.0, 1.1, 0.8]
    unc = ours / UNCERTAINTY_FOLDER
    for measure in mun.MAP_MEASURES:
        _, props = rw.read_seg(str(unc / f"case0_{measure}.tif"))
        assert list(props["spacing"]) == [2.0, 1.1, 0.8], measure
    assert not list(ours.rglob(".*")), "temporary files left behind"
    _check_against_stock(run)


def test_tiff_float_map_writes_its_sidecar_under_the_final_name(tmp_path):
    """:func:`write_float_map` with Tiff3DIO: the map and its spacing sidecar, nothing under a temporary name."""
    from nnunetv2.imageio.tif_reader_writer import Tiff3DIO

    arr = np.random.default_rng(0).random((5, 6, 7)).astype(np.float32)
    path = mun.write_float_map(Tiff3DIO(), arr, tmp_path / "u" / "case_predictive_entropy.tif", {"spacing": [3, 2, 1]})
    assert sorted(p.name for p in (tmp_path / "u").iterdir()) == ["case_predictive_entropy.json",
                                                                 "case_predictive_entropy.tif"]
    back, props = Tiff3DIO().read_seg(str(path))
    np.testing.assert_array_equal(back[0], arr)
    assert list(props["spacing"]) == [3, 2, 1]


def test_natural_image_maps_of_a_dotted_case_name_do_not_overwrite_each_other(tmp_path):
    """NaturalImage2DIO (png, ...) maps go to ``.npz``; nnU-Net case identifiers may hold dots (``case.v1``).

    The ``.npz`` name was cut at the first dot, so every map of case ``case.v1`` went to ``case.npz``: each measure
    overwrote the one before and the record named that one file for every measure.
    """
    from nnunetv2.imageio.natural_image_reader_writer import NaturalImage2DIO

    rw = NaturalImage2DIO()
    pe = np.full((1, 4, 5), 0.25, np.float32)
    mi = np.full((1, 4, 5), 0.75, np.float32)
    p_pe = mun.write_float_map(rw, pe, tmp_path / "case.v1_predictive_entropy.png", {"spacing": (999, 1, 1)})
    p_mi = mun.write_float_map(rw, mi, tmp_path / "case.v1_mutual_information.png", {"spacing": (999, 1, 1)})
    assert p_pe.name == "case.v1_predictive_entropy.npz" and p_mi.name == "case.v1_mutual_information.npz"
    np.testing.assert_array_equal(np.load(p_pe)["map"], pe)
    np.testing.assert_array_equal(np.load(p_mi)["map"], mi)


def _flipped_affine() -> np.ndarray:
    """Axis-aligned, x and y flipped (LPS-like, not RAS): a reorienting reader flips them, the shape stays."""
    affine = np.diag([-0.8, -1.1, 2.0, 1.0])
    affine[:3, 3] = (3.0, -2.0, 1.5)
    return affine


@pytest.mark.parametrize("io_name", ["NibabelIOWithReorient", "SimpleITKIOWithReorient"])
@pytest.mark.parametrize("affine", [_flipped_affine, _oblique_flipped_affine], ids=["flipped", "oblique"])
def test_evaluate_reads_the_npz_of_a_reorienting_reader_on_the_segmentation_grid(io_name, affine, tmp_path):
    """The reorienting reader/writers predict in the RAS frame, and the ``.npz`` (stock's and ours) is in that
    frame, not in the file's; ``monai-unc evaluate --layout nnunet`` reversed its axes as for SimpleITKIO, so the
    probabilities of a non-RAS image lay flipped on the label map (silently: the shape matches when only axes are
    flipped). Read back, ``argmax(npz)`` must be the segmentation file voxel for voxel."""
    from monai_unc.io.cases import CaseFiles, load_case, read_probabilities, read_volume

    run = _predict_both(tmp_path, io_name, affine=affine())
    for side in ("stock", "ours"):
        probs, _ = read_probabilities(run[side] / "case0.npz")
        seg, _ = read_volume(run[side] / "case0.nii.gz")
        assert probs.shape[1:] == seg.shape[1:]
        np.testing.assert_array_equal(probs.argmax(0), seg[0])
    case = load_case(CaseFiles("case0", run["ours"] / "case0.nii.gz", probs=run["ours"] / "case0.npz",
                               maps={"one_minus_max_prob": run["ours"] / UNCERTAINTY_FOLDER
                                     / "case0_one_minus_max_prob.nii.gz"}))
    np.testing.assert_allclose(case.maps["one_minus_max_prob"], 1.0 - case.probs.max(0), atol=2e-3)


def test_region_model_maps_lie_on_stock_segmentation_grid_with_a_reorienting_reader(tmp_path):
    """A region-based (sigmoid) model, transposed plans, NibabelIOWithReorient and an oblique flipped affine: the
    segmentation and ``.npz`` are stock's, the 4D maps ``(X, Y, Z, R)`` have the segmentation's grid, and channel
    ``r`` is ``1 - max(p_r, 1 - p_r)`` of stock's probabilities in the file's voxel order (where their 0.5
    thresholds, painted in ``regions_class_order``, are the segmentation)."""
    import copy

    from nnunetv2.utilities.get_network_from_plans import get_network_from_plans
    from nnunetv2.utilities.plans_handling.plans_handler import PlansManager

    from monai_unc.io.cases import read_probabilities

    regions_json = {"channel_names": {"0": "MRI"}, "labels": {"background": 0, "whole": [1, 2], "core": 2},
                    "regions_class_order": [1, 2], "numTraining": 2, "file_ending": ".nii.gz"}
    io_name = "NibabelIOWithReorient"
    inp = tmp_path / "in"
    image = _write_input(inp, ".nii.gz", _oblique_flipped_affine())
    _, props = recursive_find_reader_writer_by_name(io_name)().read_images([str(image)])
    transpose = (2, 0, 1)
    plans = make_plans(transpose=transpose, spacing=tuple(float(props["spacing"][i]) for i in transpose))
    plans["image_reader_writer"] = io_name
    pm = PlansManager(plans)
    cm = pm.get_configuration("cfg")
    torch.manual_seed(200)
    net = get_network_from_plans(cm.network_arch_class_name, cm.network_arch_init_kwargs,
                                 cm.network_arch_init_kwargs_req_import, 1, 2, allow_init=True, deep_supervision=False)
    with torch.no_grad():
        net.decoder.seg_layers[-1].weight.mul_(4.0)
    params = [copy.deepcopy(net.state_dict())]
    stock = nnUNetPredictor(device=torch.device("cpu"), allow_tqdm=False)
    stock.manual_initialization(net, pm, cm, params, copy.deepcopy(regions_json), "nnUNetTrainer", None)
    (tmp_path / "stock").mkdir()
    stock.predict_from_files_sequential(str(inp), str(tmp_path / "stock"), save_probabilities=True)
    with pytest.warns(UserWarning, match="single fold"):
        ours = mun.UncertaintyPredictor(device=torch.device("cpu"), allow_tqdm=False, uncertainty_sources=("folds",),
                                        measures=("one_minus_max_prob", "predictive_entropy"))
        ours.manual_initialization(net, pm, cm, params, copy.deepcopy(regions_json), "nnUNetTrainer", None)
    ours.predict_from_files(str(inp), str(tmp_path / "ours"), save_probabilities=True, num_processes_preprocessing=0,
                            num_processes_segmentation_export=0)
    seg_img = nib.load(str(tmp_path / "stock" / "case0.nii.gz"))
    seg = np.asarray(seg_img.dataobj)
    np.testing.assert_array_equal(np.asarray(nib.load(str(tmp_path / "ours" / "case0.nii.gz")).dataobj), seg)
    np.testing.assert_array_equal(np.load(tmp_path / "ours" / "case0.npz")["probabilities"],
                                  np.load(tmp_path / "stock" / "case0.npz")["probabilities"])
    probs, _ = read_probabilities(tmp_path / "stock" / "case0.npz")  # (R, X, Y, Z) in the file's voxel order
    np.testing.assert_array_equal((probs[0] > 0.5) | (probs[1] > 0.5), seg > 0)  # regions painted in order
    np.testing.assert_array_equal(probs[1] > 0.5, seg == 2)
    assert (seg > 0).any() and (seg == 0).any()
    img = nib.load(str(tmp_path / "ours" / UNCERTAINTY_FOLDER / "case0_one_minus_max_prob.nii.gz"))
    assert img.shape == (*seg.shape, 2)
    np.testing.assert_allclose(img.affine, seg_img.affine, atol=1e-5)
    expected = 1.0 - np.maximum(probs, 1.0 - probs)
    np.testing.assert_allclose(np.moveaxis(np.asarray(img.dataobj), -1, 0), expected, atol=2e-3)


def test_natural_image_2d_maps_line_up_with_stock_png_segmentation(tmp_path):
    """NaturalImage2DIO (png) with a 2D configuration and a dotted case id: the png segmentation and ``.npz`` are
    stock's, and every map is its own ``uncertainty/<case>_<measure>.npz`` ``(1, H, W)`` (key ``map``), aligned
    with the png: ``one_minus_max_prob`` is 1 - max of stock's probabilities ``(C, 1, H, W)``."""
    from skimage import io

    inp = tmp_path / "in"
    inp.mkdir()
    g = np.meshgrid(np.linspace(-1.0, 1.0, 13), np.linspace(-1.0, 1.0, 11), indexing="ij")
    img = (100 + 60 * g[0] + 40 * g[1] ** 2).astype(np.uint8)
    img[:2] = 0
    io.imsave(str(inp / "case.v1_0000.png"), img, check_contrast=False)
    plans = make_plans(ndim=2, patch=(16, 16), spacing=(1.0, 1.0))
    plans["image_reader_writer"] = "NaturalImage2DIO"
    dataset_json = dict(DATASET_JSON, file_ending=".png")
    stock = make_predictor(cls=nnUNetPredictor, plans=plans, n_folds=1, mirror_axes=None)
    stock.dataset_json = dataset_json
    (tmp_path / "stock").mkdir()
    stock.predict_from_files_sequential(str(inp), str(tmp_path / "stock"), save_probabilities=True)
    with pytest.warns(UserWarning, match="single fold"):
        ours = make_predictor(plans=plans, n_folds=1, mirror_axes=None, uncertainty_sources=("folds",),
                              measures=mun.MAP_MEASURES)
    ours.dataset_json = dataset_json
    ours.predict_from_files(str(inp), str(tmp_path / "ours"), save_probabilities=True, num_processes_preprocessing=0,
                            num_processes_segmentation_export=0)
    seg = io.imread(str(tmp_path / "stock" / "case.v1.png"))
    np.testing.assert_array_equal(io.imread(str(tmp_path / "ours" / "case.v1.png")), seg)
    probs = np.load(tmp_path / "stock" / "case.v1.npz")["probabilities"]
    np.testing.assert_array_equal(np.load(tmp_path / "ours" / "case.v1.npz")["probabilities"], probs)
    np.testing.assert_array_equal(probs.argmax(0)[0], seg)
    record = json.loads((tmp_path / "ours" / UNCERTAINTY_FOLDER / "case.v1.json").read_text())
    assert record["maps"] == {m: f"case.v1_{m}.npz" for m in mun.MAP_MEASURES}
    one_minus = np.load(tmp_path / "ours" / UNCERTAINTY_FOLDER / "case.v1_one_minus_max_prob.npz")["map"]
    assert one_minus.shape == (1, *seg.shape)
    np.testing.assert_allclose(one_minus, 1.0 - probs.max(0), atol=2e-3)
