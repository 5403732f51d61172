"""What a radiologist sees on the report / triage pages' static case figures: the patient's sides, the values, the
cases whose files cannot be read (found by hostile review of the report's geometry and values).

- The case figures drew the voxel array as stored, whatever the affine: a lesion in the patient's left anterior
  corner was drawn on the left of the axial panel for a RAS file and on the right, upside down, for the same patient
  stored LPS (DICOM converters, SimpleITK, nnU-Net), while the page's NiiVue viewer, which reorients, drew it on the
  left; the row titled "axial" of a permuted-axis file was a sagittal slice.
- An image with NaN voxels (outside the field of view) made the image panels blank (NaN window).
- The heatmap's colour range ended at the map's 99.9th percentile: a hot spot of under 0.1 % of the voxels was drawn
  in the colour of the background and the colour bar read the background's value as its maximum.
- The rows left out every slice whose reference foreground was under 25 % of the largest: a small lesion away from
  the organ's widest slices, with the case's hot spot, was never shown, though docs/report.md promises the slices of
  largest uncertainty among those that cut the reference foreground.
- A 2-D cohort evaluated, but its report failed ("seg and uncertainty must be 3D volumes").
- One flagged case with a missing or corrupt file made the whole report / triage page fail.
- The viewer's ``data-viewer-centre`` (a lesion link's voxel) named NiiVue's RAS-reoriented voxel, not the file's.
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib
import nibabel as nib
import numpy as np
import pytest

matplotlib.use("Agg")

from monai_unc.report.plots import plot_case_overlay  # noqa: E402
from monai_unc.report.viewer import case_viewer  # noqa: E402

N = (12, 12, 12)
AFFINES = {
    "RAS": np.diag([1.0, 1.0, 1.0, 1.0]),
    "LPS": np.array([[-1.0, 0, 0, 11], [0, -1, 0, 11], [0, 0, 1, 0], [0, 0, 0, 1]]),
    "LAS": np.array([[-1.0, 0, 0, 11], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]),
    "permuted SAR": np.array([[0, 0, 1.0, 0], [0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1]]),
    "anisotropic LPS": np.array([[-0.5, 0, 0, 5.5], [0, -0.5, 0, 5.5], [0, 0, 5.0, 0], [0, 0, 0, 1]]),
    "oblique": np.array([[np.cos(0.3), -np.sin(0.3), 0, 0], [np.sin(0.3), np.cos(0.3), 0, 0], [0, 0, 1, 0],
                         [0, 0, 0, 1]]),
}


def _left_anterior_superior(affine: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Image, segmentation and uncertainty in ``affine``'s voxel order with a blob at the patient's left anterior
    superior corner (world RAS: lowest x, highest y, highest z)."""
    ijk = np.stack(np.meshgrid(*[np.arange(n) for n in N], indexing="ij"), -1).reshape(-1, 3)
    xyz = nib.affines.apply_affine(affine, ijk)
    lo, hi = xyz.min(0), xyz.max(0)
    d = np.abs(xyz - np.array([lo[0], hi[1], hi[2]])) / (hi - lo)
    blob = (d < 0.3).all(1).reshape(N)
    return (np.where(blob, 1000.0, 100.0).astype(np.float32), blob.astype(np.int16),
            np.where(blob, 1.0, 0.05).astype(np.float32))


def _where(panel) -> tuple[str, str]:
    shown = np.asarray(panel.get_images()[0].get_array(), dtype=np.float64)  # origin="lower": row 0 at the bottom
    rows, cols = np.nonzero(shown > shown.min() + 0.5 * (shown.max() - shown.min()))
    return ("left" if cols.mean() < (shown.shape[1] - 1) / 2 else "right",
            "top" if rows.mean() > (shown.shape[0] - 1) / 2 else "bottom")


@pytest.mark.parametrize("name", list(AFFINES))
def test_the_patients_left_is_on_the_left_of_every_panel_whatever_the_storage_order(name):
    affine = AFFINES[name]
    img, seg, u = _left_anterior_superior(affine)
    spacing = tuple(float(s) for s in np.linalg.norm(affine[:3, :3], axis=0))
    fig = plot_case_overlay("c", seg, seg, u, img, spacing, affine=affine)
    views = [ax.get_ylabel().split()[0] for ax in fig.axes[0:12:4]]
    assert views == ["axial", "coronal", "sagittal"]
    # the image, the prediction's contour panel background and the uncertainty agree, and the side is the patient's:
    # axial: left / anterior at the top; coronal: left / superior at the top; sagittal: anterior on the right / top
    expected = [("left", "top"), ("left", "top"), ("right", "top")]
    for row, want in enumerate(expected):
        image_panel, u_panel = fig.axes[4 * row], fig.axes[4 * row + 2]
        assert _where(image_panel) == want, (name, views[row])
        assert _where(u_panel) == want, (name, views[row])
        err_free = np.asarray(fig.axes[4 * row + 3].get_images()[-1].get_array())
        assert not err_free.any()
        sides = {t.get_text() for t in image_panel.texts}
        assert sides == {"axial": {"L", "R", "P", "A"}, "coronal": {"L", "R", "I", "S"},
                         "sagittal": {"P", "A", "I", "S"}}[views[row]]


def test_the_row_label_gives_the_files_slice_index():
    affine = AFFINES["LPS"]
    u = np.zeros(N, np.float32)
    u[3, 9, 7] = 1.0  # file voxel (3, 9, 7)
    seg = np.zeros(N, np.int16)
    seg[2:5, 8:11, 6:9] = 1
    fig = plot_case_overlay("c", seg, seg, u, None, affine=affine)
    assert [ax.get_ylabel() for ax in fig.axes[0:12:4]] == ["axial 7", "coronal 9", "sagittal 3"]


def test_without_an_affine_the_arrays_are_drawn_as_stored():
    img, seg, u = _left_anterior_superior(AFFINES["LPS"])
    fig = plot_case_overlay("c", seg, seg, u, img, axes=(2,))
    assert _where(fig.axes[0]) == ("right", "bottom") and not fig.axes[0].texts


def test_nan_image_voxels_do_not_blank_the_image_panels():
    rng = np.random.default_rng(0)
    img = (rng.random((20, 20, 20)) * 100 + np.arange(20)[:, None, None] * 10).astype(np.float32)
    img[0] = np.nan  # outside the field of view
    seg = np.zeros(img.shape, np.int16)
    seg[5:15, 5:15, 5:15] = 1
    fig = plot_case_overlay("c", seg, seg, rng.random(img.shape), img, axes=(2,))
    norm = fig.axes[0].get_images()[0].norm
    assert np.isfinite(norm.vmin) and np.isfinite(norm.vmax) and norm.vmax > norm.vmin


def test_the_colour_bar_reaches_the_hottest_voxel_shown():
    u = np.full((40, 40, 40), 0.02, np.float32)
    u[18:21, 18:21, 18:21] = 0.9  # 0.04 % of the voxels: below the 99.9th percentile
    seg = np.zeros(u.shape, np.int16)
    seg[15:25, 15:25, 15:25] = 1
    fig = plot_case_overlay("c", seg, seg, u, axes=(2,))
    norm = fig.axes[2].get_images()[-1].norm
    assert norm.vmax == pytest.approx(0.9)
    assert norm(0.02) < 0.1 < 0.9 < norm(0.9)  # the hot spot stands out of the background


def test_the_slice_shown_is_the_one_of_the_hot_spot_on_a_small_lesion():
    label = np.zeros((40, 40, 40), np.int16)
    label[5:35, 5:35, 5:25] = 1  # an organ: axial slices 5..24, area 900
    label[18:22, 18:22, 30:33] = 2  # a lesion: axial slices 30..32, area 16 (under 25 % of the organ's)
    u = np.full(label.shape, 0.01)
    u[16:24, 16:24, 29:34] = 1.0  # the case's hot spot, on the lesion
    seg = label.copy()
    seg[18:22, 18:22, 30:33] = 1  # the lesion predicted as the organ
    fig = plot_case_overlay("c", seg, label, u, axes=(2,))
    k = int(fig.axes[0].get_ylabel().split()[-1])
    assert 30 <= k <= 32 and u[:, :, k].sum() == pytest.approx(u.sum(axis=(0, 1)).max())
    assert (np.asarray(fig.axes[3].get_images()[-1].get_array()) == 3).sum() == 16  # the wrong class, in purple


def test_2d_cases_are_drawn_and_viewed():
    seg = np.zeros((16, 20), np.int16)
    seg[2:6, 12:18] = 1  # patient left (low x), anterior (high y) in RAS
    u = np.where(seg > 0, 0.8, 0.1).astype(np.float32)
    image = np.where(seg > 0, 500.0, 10.0).astype(np.float32)[None]  # (C, X, Y), as load_case reads it
    affine = np.diag([0.7, 0.7, 1.0, 1.0])
    fig = plot_case_overlay("c", seg, seg, u, image, (0.7, 0.7), affine=affine)
    assert [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()] == ["axial 0"]
    assert _where(fig.axes[0]) == ("left", "top")
    data = case_viewer("c", seg, u, image, affine)
    vol = {v["role"]: v for v in data["volumes"]}
    assert len(data["crop"]) == 3 and set(vol) == {"image", "prediction", "uncertainty"}


def _toy_evaluation(root: Path):
    from monai_unc.data.cohorts import write_toy_cohort
    from monai_unc.evaluation import EvaluationConfig, run_evaluate

    data = write_toy_cohort(root, n_cases=4, shape=(10, 10, 10))
    _, summary, _ = run_evaluate(data["labels"], data["predictions"], root / "eval", EvaluationConfig(budget=0.25),
                                 images=data["images"])
    return data, summary


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_case_whose_file_cannot_be_read_gets_one_line_in_the_report(tmp_path, damage):
    data, summary = _toy_evaluation(tmp_path)
    top = summary["triage"]["order"][0]
    f = data["predictions"] / f"{top}_predictive_entropy.nii.gz"
    if damage == "missing":
        f.unlink()
    else:
        f.write_bytes(f.read_bytes()[:200])
    from monai_unc import cli

    assert cli.main(["report", "-e", str(tmp_path / "eval"), "-q"]) == 0
    page = (tmp_path / "eval" / "report" / "report.html").read_text()
    lines = re.findall(r'<ul class="warn case-errors">(.*?)</ul>', page)
    assert len(lines) == 1 and lines[0].count("<li>") == 1 and f"<bdi>{top}</bdi>: no figure and no viewer" in lines[0]
    assert f.name in lines[0]
    assert 'id="triage-table"' in page and "data:image/png;base64," in page


from tests.evaluation.test_triage import _triage_cli, cohorts  # noqa: E402, F401 (the triage cohorts fixture)


def test_a_case_whose_file_cannot_be_read_gets_one_line_in_the_triage_page(cohorts, tmp_path):  # noqa: F811
    import shutil

    from monai_unc.report.triage import build_triage_page

    pred = tmp_path / "pred"
    shutil.copytree(cohorts["B"]["predictions"], pred)
    out = tmp_path / "t"
    assert _triage_cli(cohorts, out, pred) == 0
    import json

    top = json.loads((out / "triage.json").read_text())["order"][0]
    (pred / f"{top}_predictive_entropy.nii.gz").unlink()
    page = build_triage_page(out, n_cases=2).read_text()
    lines = re.findall(r'<ul class="warn case-errors">(.*?)</ul>', page)
    assert len(lines) == 1 and lines[0].count("<li>") == 1 and f"<bdi>{top}</bdi>: no figure and no viewer" in lines[0]
    assert "data:image/png;base64," in page


@pytest.mark.slow
@pytest.mark.parametrize("name", ["LPS", "permuted SAR"])
def test_the_viewer_centre_names_the_files_voxel(name, tmp_path):
    """``#lesion=<case>:<mm>`` puts the crosshair on the point; ``data-viewer-centre`` names its voxel in the file's
    own order (it named NiiVue's RAS-reoriented voxel: ``9,8,9`` for the LPS file's voxel ``2,3,9``)."""
    import subprocess

    from monai_unc.report.viewer import VIEWER_CSS, viewer_scripts, viewer_section
    from tests.report.test_viewer import _chromium

    exe = _chromium()
    affine = AFFINES[name]
    img, seg, u = _left_anterior_superior(affine)
    page = tmp_path / "v.html"
    page.write_text(f"<!doctype html><html><head><meta charset=utf-8><style>{VIEWER_CSS}</style></head><body>"
                    f"{viewer_section([case_viewer('c', seg, u, img, affine)], 'v')}{viewer_scripts(tmp_path)}"
                    "</body></html>")
    mm = nib.affines.apply_affine(affine, (2, 3, 9))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader", "--no-first-run",
             "--disable-background-networking", "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
             "--virtual-time-budget=15000", f"--user-data-dir={tmp_path / 'profile'}"]
    url = page.resolve().as_uri() + "#lesion=c:" + ",".join(f"{x:g}" for x in mm)
    dom = subprocess.run([exe, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=240).stdout
    assert 'data-viewer-centre="c:2,3,9"' in re.search(r"<body([^>]*)>", dom).group(1)
