"""The pages draw the patient's sides in the convention the reader asks for (review 66).

The static case figures (``plot_case_overlay`` with the case's affine) and the NiiVue viewers of the report and triage
pages drew the patient's left on the screen's left (the neurological convention) and offered nothing else; radiologists
read in the radiological convention, the patient's right on the screen's left. ``convention="radiological"`` (Python)
and ``--convention radiological`` (``report``, ``triage``, ``demo``) mirror the axial and coronal panels, swap their
side marks and start NiiVue in its radiological mode (``isRadiologicalConvention``); the default is unchanged.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import matplotlib
import nibabel as nib
import numpy as np
import pytest

matplotlib.use("Agg")

from monai_unc import cli  # noqa: E402
from monai_unc.report.html import build_report  # noqa: E402
from monai_unc.report.plots import plot_case_overlay  # noqa: E402
from monai_unc.report.triage import build_triage_page  # noqa: E402
from monai_unc.report.viewer import CONVENTIONS, case_viewer, check_convention, viewer_block  # noqa: E402
from monai_unc.workflows import arguments  # noqa: E402
from tests.report.test_triage_hostile_numbers import triage_json  # noqa: E402

N = (12, 10, 8)
#: RAS, and the same patient stored LPS (DICOM converters, SimpleITK): the patient's right at the first axis's low end
AFFINES = {
    "RAS": np.diag([1.0, 1.0, 1.0, 1.0]),
    "LPS": np.array([[-1.0, 0, 0, 11], [0, -1, 0, 9], [0, 0, 1, 0], [0, 0, 0, 1]]),
}


def _right_marker(affine: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Image, segmentation and uncertainty in ``affine``'s voxel order with a marker in the patient's right (the
    world's high x: RAS), anterior and superior (high y, high z), so that only left-right can tell the conventions."""
    ijk = np.stack(np.meshgrid(*[np.arange(n) for n in N], indexing="ij"), -1).reshape(-1, 3)
    xyz = nib.affines.apply_affine(affine, ijk)
    lo, hi = xyz.min(0), xyz.max(0)
    d = np.abs(xyz - hi) / (hi - lo)
    marker = (d < 0.3).all(1).reshape(N)
    return (np.where(marker, 1000.0, 100.0).astype(np.float32), marker.astype(np.int16),
            np.where(marker, 1.0, 0.05).astype(np.float32))


def _half(panel) -> str:
    """The half of the panel, as drawn (origin at the bottom), the bright voxels are in."""
    shown = np.asarray(panel.get_images()[0].get_array(), dtype=np.float64)
    _, cols = np.nonzero(shown > shown.min() + 0.5 * (shown.max() - shown.min()))
    return "left" if cols.mean() < (shown.shape[1] - 1) / 2 else "right"


def _side_marks(panel) -> tuple[str, str]:
    """The side marks at the left and right edges of an image panel."""
    marks = {t.get_position()[0]: t.get_text() for t in panel.texts if t.get_position()[1] == 0.5}
    return marks[min(marks)], marks[max(marks)]


@pytest.mark.parametrize("name", list(AFFINES))
def test_radiological_panels_draw_the_patients_right_on_the_left(name):
    affine = AFFINES[name]
    img, seg, u = _right_marker(affine)
    figs = {c: plot_case_overlay("c", seg, seg, u, img, affine=affine, convention=c) for c in CONVENTIONS}
    # the default is the neurological convention, unchanged
    default = plot_case_overlay("c", seg, seg, u, img, affine=affine)
    for fig in (figs["neurological"], default):
        assert [_half(fig.axes[4 * row]) for row in range(3)] == ["right", "right", "right"]
        assert [_side_marks(fig.axes[4 * row]) for row in range(2)] == [("L", "R"), ("L", "R")]
    rad = figs["radiological"]
    views = [ax.get_ylabel() for ax in rad.axes[0:12:4]]
    assert views == [ax.get_ylabel() for ax in default.axes[0:12:4]]  # the same slices, the file's indices
    assert [v.split()[0] for v in views] == ["axial", "coronal", "sagittal"]
    # axial and coronal: the marker (the patient's right) on the left half, under the mark R; every column agrees
    for row in range(2):
        for col in (0, 2, 3):  # image, uncertainty, error map (all 0 here: drawn as the image panel's background)
            assert _half(rad.axes[4 * row + col]) == "left" or col == 3, (name, views[row], col)
        assert _side_marks(rad.axes[4 * row]) == ("R", "L"), (name, views[row])
    # sagittal: the same in both conventions (anterior on the right)
    assert _half(rad.axes[8]) == "right" and _side_marks(rad.axes[8]) == ("P", "A")


def test_radiological_row_labels_keep_the_files_slice_index():
    """The sagittal row's label names the slice of the file, not of the mirrored array."""
    affine = AFFINES["LPS"]
    u = np.zeros(N, np.float32)
    u[3, 7, 5] = 1.0  # file voxel (3, 7, 5)
    seg = np.zeros(N, np.int16)
    seg[2:5, 6:9, 4:7] = 1
    fig = plot_case_overlay("c", seg, seg, u, None, affine=affine, convention="radiological")
    assert [ax.get_ylabel() for ax in fig.axes[0:12:4]] == ["axial 5", "coronal 7", "sagittal 3"]
    # without an affine the stored order is taken for RAS and mirrored too (no side marks: no geometry)
    fig = plot_case_overlay("c", seg, seg, u, None, axes=(2, 0), convention="radiological")
    assert [ax.get_ylabel() for ax in fig.axes[0:8:4]] == ["axial 5", "sagittal 3"]
    assert _half(fig.axes[0]) == "right" and not fig.axes[0].texts  # voxel x = 3 of 12: the left half, mirrored


def test_the_viewer_data_carries_the_convention_and_the_note_says_it():
    img, seg, u = _right_marker(AFFINES["LPS"])
    neuro = case_viewer("c", seg, u, img, AFFINES["LPS"])
    rad = case_viewer("c", seg, u, img, AFFINES["LPS"], convention="radiological")
    assert neuro["convention"] == "neurological" and rad["convention"] == "radiological"
    assert [v["base64"] for v in neuro["volumes"]] == [v["base64"] for v in rad["volumes"]]  # NiiVue mirrors them
    block = str(viewer_block(0, rad))
    data = json.loads(re.search(r'<script type="application/json" id="viewer-data-0">(.*?)</script>', block,
                                re.S).group(1))
    assert data["convention"] == "radiological"
    assert "Drawn with the patient&#x27;s right on the left (radiological convention)" in block
    assert "the patient&#x27;s left on the left (neurological convention)" in str(viewer_block(0, neuro))


@pytest.mark.parametrize("call", [
    lambda c: check_convention(c),
    lambda c: plot_case_overlay("c", np.zeros((4, 4, 4), np.int16), None, np.zeros((4, 4, 4)), convention=c),
    lambda c: case_viewer("c", np.zeros((4, 4, 4), np.int16), np.zeros((4, 4, 4)), convention=c),
    lambda c: build_report(Path("no-evaluation"), convention=c),  # refused before anything is read
    lambda c: build_triage_page(Path("no-triage"), convention=c),
])
def test_a_bad_convention_is_refused_naming_it(call):
    with pytest.raises(ValueError, match="convention must be 'neurological' or 'radiological', got 'Radiological'"):
        call("Radiological")
    with pytest.raises(TypeError, match="convention"):
        call(True)


def test_the_command_line_offers_the_conventions(capsys, monkeypatch):
    parser, _ = cli.build_parser()
    for command in (["report", "-e", "ev"], ["demo"],
                    ["triage", "-p", "p", "-r", "r.json", "-o", "o"]):
        assert parser.parse_args(command).convention == "neurological"
        assert parser.parse_args([*command, "--convention", "radiological"]).convention == "radiological"
    assert arguments._CONVENTIONS == tuple(CONVENTIONS)
    with pytest.raises(SystemExit) as e:
        cli.main(["report", "-e", "ev", "--convention", "radiologic"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "--convention: invalid choice: 'radiologic'" in err
    # the parsed option reaches the workflows of triage and demo (report's: the next test, end to end)
    from monai_unc.workflows import demo, triage

    seen = {}
    monkeypatch.setattr(triage, "triage_command", lambda *a, **options: seen.setdefault("triage", options) and 1 / 0)
    monkeypatch.setattr(demo, "run_demo", lambda *a, **options: seen.setdefault("demo", options) and 1 / 0)
    for module, command in ((triage, ["triage", "-p", "p", "-r", "r.json", "-o", "o", "--allow-unsigned"]),
                            (demo, ["demo"])):
        args = parser.parse_args([*command, "--convention", "radiological"])
        with pytest.raises(ZeroDivisionError):
            getattr(module, f"{command[0]}_from_arguments")(args)
    assert seen["triage"]["convention"] == seen["demo"]["convention"] == "radiological"


@pytest.mark.slow  # end to end: evaluate a toy cohort, then the report page through the command line
def test_report_convention_radiological_reaches_the_page(tmp_path):
    from monai_unc.data.cohorts import write_toy_cohort
    from monai_unc.evaluation import EvaluationConfig, run_evaluate

    data = write_toy_cohort(tmp_path, n_cases=4, shape=(10, 10, 10))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(data["labels"], data["predictions"], tmp_path / "eval", EvaluationConfig(budget=0.25),
                     images=data["images"])
    assert cli.main(["report", "-e", str(tmp_path / "eval"), "--cases", "1", "--convention", "radiological",
                     "-q"]) == 0
    page = (tmp_path / "eval" / "report" / "report.html").read_text()
    blocks = re.findall(r'<script type="application/json" id="viewer-data-\d+">(.*?)</script>', page, re.S)
    assert [json.loads(b)["convention"] for b in blocks] == ["radiological"]
    # both case figures (the flagged case and the most certain one) say how they are drawn
    assert page.count("drawn with the patient&#x27;s right on the left (radiological convention)") == 2
    assert "patient&#x27;s left on the left" not in page


def _triage_folder(root: Path) -> Path:
    """A ``triage.json`` (three cases; ``b`` referred) whose case ``b`` has its files: the marker in the patient's
    right of an LPS-stored volume."""
    doc = triage_json()
    img, seg, u = _right_marker(AFFINES["LPS"])
    for name, a in (("b_image", img), ("b_seg", seg), ("b_predictive_entropy", u)):
        nib.save(nib.Nifti1Image(a, AFFINES["LPS"]), root / f"{name}.nii.gz")
    doc["files"] = {"b": {"case": "b", "label": str(root / "b_seg.nii.gz"), "seg": str(root / "b_seg.nii.gz"),
                          "probs": None, "image": str(root / "b_image.nii.gz"),
                          "maps": {"predictive_entropy": str(root / "b_predictive_entropy.nii.gz")}}}
    (root / "triage.json").write_text(json.dumps(doc))
    return root


def test_triage_page_convention_radiological(tmp_path):
    folder = _triage_folder(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # an unsigned triage.json
        page = build_triage_page(folder, n_cases=2, convention="radiological").read_text()
        plain = build_triage_page(folder, output=tmp_path / "plain", n_cases=2).read_text()
    blocks = re.findall(r'<script type="application/json" id="viewer-data-\d+">(.*?)</script>', page, re.S)
    assert [json.loads(b)["convention"] for b in blocks] == ["radiological"]
    assert page.count("drawn with the patient&#x27;s right on the left (radiological convention)") == 1
    blocks = re.findall(r'<script type="application/json" id="viewer-data-\d+">(.*?)</script>', plain, re.S)
    assert [json.loads(b)["convention"] for b in blocks] == ["neurological"]
    assert plain.count("drawn with the patient&#x27;s left on the left (neurological convention)") == 1


@pytest.mark.slow  # a headless Chromium run (about 10 s): the convention NiiVue holds once the page has loaded
def test_niivue_starts_in_the_convention_of_the_data(tmp_path):
    import subprocess

    from monai_unc.report.viewer import VIEWER_CSS, viewer_scripts, viewer_section
    from tests.report.test_viewer import _chromium

    exe = _chromium()
    img, seg, u = _right_marker(AFFINES["LPS"])
    viewers = [case_viewer(c, seg, u, img, AFFINES["LPS"], convention=c) for c in CONVENTIONS]
    page = tmp_path / "v.html"
    page.write_text(f"<!doctype html><html><head><meta charset=utf-8><style>{VIEWER_CSS}</style></head><body>"
                    f"{viewer_section(viewers, 'v')}{viewer_scripts(tmp_path)}</body></html>")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader", "--no-first-run",
             "--disable-background-networking", "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
             "--virtual-time-budget=15000", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([exe, *flags, "--dump-dom", page.resolve().as_uri()], capture_output=True, text=True,
                         timeout=240).stdout
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert 'data-viewer-ready="2"' in body and "data-viewer-error" not in body, body
    held = dict(re.findall(r'<div class="mu-viewer" id="viewer-\d+" data-volumes="[^"]+" data-case="([^"]+)"'
                           r'[^>]*data-convention="([^"]+)"', dom))
    assert held == {"neurological": "neurological", "radiological": "radiological"}
