"""The interactive viewer of the pages: volumes cropped, quantised and placed right, the size budget, escaping, the
vendored NiiVue bundle, and headless Chromium opening the report and the triage page from disk with no network."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
import shutil
import subprocess
import warnings

import nibabel as nib
import numpy as np
import pytest

from monai_unc.report.markup import json_script, script_file
from monai_unc.report.viewer import ASSETS, CASE_BUDGET_BYTES, case_viewer, vendored_niivue, viewer_block
from tests.evaluation.test_triage import _triage_cli, cohorts  # noqa: F401 (the triage cohorts fixture)

HOSTILE = "x</script><img src=x onerror=alert(1)>"


def _decode(volume: dict) -> nib.Nifti1Image:
    return nib.Nifti1Image.from_bytes(gzip.decompress(base64.b64decode(volume["base64"])))


def _volumes(data: dict) -> dict[str, nib.Nifti1Image]:
    return {v["role"]: _decode(v) for v in data["volumes"]}


def _case(shape=(30, 28, 26)):
    rng = np.random.default_rng(0)
    image = np.zeros(shape, dtype=np.float32)
    image[5:25, 4:22, 6:20] = rng.normal(100, 10, (20, 18, 14))
    seg = np.zeros(shape, dtype=np.int64)
    seg[10:18, 8:16, 9:15] = 1
    seg[12:15, 10:13, 10:13] = 2
    u = np.zeros(shape)
    u[8:20, 6:18, 8:16] = rng.random((12, 12, 8))
    return image, seg, u


def test_crop_quantisation_and_geometry():
    image, seg, u = _case()
    affine = np.array([[0, 0, 2.0, -10], [0, 1.5, 0, 4], [-1.0, 0, 0, 7], [0, 0, 0, 1]])
    data = case_viewer("c1", seg, u, image, affine, measure="mutual_information")
    assert data["step"] == 1 and data["case"] == "c1"
    vols = _volumes(data)
    assert set(vols) == {"image", "prediction", "uncertainty"}
    # the crop: the bounding box of image foreground, prediction and uncertainty, plus 2 voxels
    fg = (image != 0) | (seg > 0) | (u > 0)
    for ax, (lo, hi) in enumerate(data["crop"]):
        idx = np.flatnonzero(fg.any(axis=tuple(a for a in range(3) if a != ax)))
        assert (lo, hi) == (max(idx[0] - 2, 0), min(idx[-1] + 3, fg.shape[ax]))
    box = tuple(slice(lo, hi) for lo, hi in data["crop"])
    # the prediction is exact, the uncertainty within half a quantisation step, in its own units
    np.testing.assert_array_equal(np.asarray(vols["prediction"].dataobj), seg[box])
    step_u = (u.max() - u.min()) / 255
    np.testing.assert_allclose(vols["uncertainty"].get_fdata(), u[box], atol=step_u / 2 + 1e-9)
    assert vols["uncertainty"].get_data_dtype() == np.uint8
    # voxel (0, 0, 0) of the crop sits where the original voxel at the crop's start sits in the world (mm)
    start = np.array([b.start for b in box], dtype=float)
    for img in vols.values():
        np.testing.assert_allclose(img.affine[:3, 3], affine[:3, :3] @ start + affine[:3, 3])
        np.testing.assert_allclose(img.affine[:3, :3], affine[:3, :3])


def test_budget_subsamples_and_records_the_step():
    rng = np.random.default_rng(1)
    shape = (48, 48, 48)
    image = rng.normal(size=shape).astype(np.float32) + 5  # incompressible noise
    seg = (rng.random(shape) > 0.5).astype(np.int64)
    u = rng.random(shape)
    full = case_viewer("c", seg, u, image)
    small = case_viewer("c", seg, u, image, budget_bytes=full["bytes"] // 4)
    assert small["step"] >= 2 and small["bytes"] <= full["bytes"] // 4
    vols = _volumes(small)
    s = small["step"]
    np.testing.assert_array_equal(np.asarray(vols["prediction"].dataobj), seg[::s, ::s, ::s])
    np.testing.assert_allclose(np.diag(vols["image"].affine)[:3], [s, s, s])  # the voxel size grows with the step
    with pytest.raises(ValueError, match="too small"):
        case_viewer("c", seg, u, image, budget_bytes=10)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="budget_bytes"):
            case_viewer("c", seg, u, image, budget_bytes=bad)


def test_edge_cases_nan_constant_empty_and_shapes():
    seg = np.zeros((8, 8, 8), dtype=np.int64)
    u = np.full((8, 8, 8), np.nan)
    data = case_viewer("empty", seg, u)  # no image, nothing predicted, no finite uncertainty
    assert [v["role"] for v in data["volumes"]] == ["prediction", "uncertainty"]
    assert data["crop"] == [[0, 8]] * 3
    const = case_viewer("const", seg, np.full((8, 8, 8), 0.3), np.ones((2, 8, 8, 8)))  # (C, X, Y, Z) image
    np.testing.assert_allclose(_volumes(const)["uncertainty"].get_fdata(), 0.3)
    with pytest.raises(ValueError, match="one shape"):
        case_viewer("x", seg, np.zeros((8, 8, 7)))
    with pytest.raises(ValueError, match="image"):
        case_viewer("x", seg, np.zeros((8, 8, 8)), np.zeros((8, 8, 9)))


def test_block_escapes_the_case_name_and_json_cannot_close_the_script():
    _, seg, u = _case()
    data = case_viewer(HOSTILE, seg, u, measure=HOSTILE)
    block = str(viewer_block(0, data))
    assert "<img" not in block and "</script><img" not in block
    m = re.search(r'<script type="application/json" id="viewer-data-0">(.*?)</script>', block, re.S)
    assert json.loads(m.group(1))["case"] == HOSTILE  # the JSON reads back the same text
    assert block.count("</script>") == 1
    with pytest.raises(ValueError, match="index"):
        viewer_block(-1, data)


def test_json_script_and_script_file_rules():
    text = str(json_script({"a": "</script><!--<b>&"}, "d-1"))
    assert "</script>" == text[-9:] and text.count("</") == 1 and "<!--" not in text
    with pytest.raises(ValueError, match="strict JSON|Out of range"):
        json_script({"a": float("nan")}, "d")
    for bad_id in ("1a", "a b", 'a"', ""):
        with pytest.raises(ValueError, match="id"):
            json_script({}, bad_id)
    assert str(script_file("assets/viewer.js")) == '<script src="assets/viewer.js"></script>'
    for bad in ("https://cdn.example/niivue.js", "//cdn/x.js", "/abs/x.js", "javascript:alert(1)",
                "data:image/png;base64,AAAA"):
        with pytest.raises(ValueError):
            script_file(bad)


def test_vendored_niivue_matches_its_record():
    rec = vendored_niivue()
    data = (ASSETS / "niivue.umd.js").read_bytes()
    assert hashlib.sha256(data).hexdigest() == rec["sha256"]
    assert rec["license"] == "BSD-2-Clause" and rec["version"]
    assert "BSD 2-Clause" in (ASSETS / "NIIVUE_LICENSE.txt").read_text()
    assert data.startswith(b"(function(") and b"niivue" in data[:400]  # the UMD build defining the global


# ------------------------------------------------------------------------------------------------ in a browser
def _chromium():
    exe = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    if exe is None:
        pytest.skip("Chromium is not installed (CI installs the Debian package 'chromium')")
    return exe


def _open_offline(exe, page, tmp_path, name):
    """Dump the DOM and a full-page screenshot of ``page`` opened from disk with networking off; the console.

    One Chromium run does both (``--dump-dom`` with ``--screenshot``: both taken once the virtual time budget has run
    out): the DOM read is the page the screenshot shows, and the page loads once (NiiVue's start-up is the cost).
    """
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>", "--host-resolver-rules=MAP * ~NOTFOUND",
             "--window-size=1280,9000", "--virtual-time-budget=20000", "--enable-logging=stderr", "--v=0"]
    url = page.resolve().as_uri()
    shot = tmp_path / f"{name}.png"
    r = subprocess.run([exe, *flags, f"--user-data-dir={tmp_path / (name + '-profile')}", "--dump-dom",
                        f"--screenshot={shot}", url], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    assert shot.is_file(), r.stderr[-2000:]
    console = [ln for ln in r.stderr.splitlines() if ":CONSOLE" in ln]
    return r.stdout, shot, console


def _check_viewer_page(exe, page, tmp_path, name, n_viewers):
    from PIL import Image

    dom, shot, console = _open_offline(exe, page, tmp_path, name)
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert f'data-viewer-count="{n_viewers}"' in body and f'data-viewer-ready="{n_viewers}"' in body, body
    assert "data-viewer-error" not in body
    bad = [ln for ln in console if re.search(r"uncaught|error|fail|refused", ln, re.I)]
    assert not bad, bad
    x, y, w, h = (int(v) for v in re.search(r'data-viewer-rect="([\d,]+)"', body).group(1).split(","))
    img = np.asarray(Image.open(shot).convert("RGB"), dtype=np.float64)
    assert y + h <= img.shape[0], "the canvas is below the screenshot"
    canvas = img[y:y + h, x:x + w]
    assert canvas.std() > 10, "the viewer's canvas is blank"  # volumes drawn, not a uniform colour


@pytest.mark.slow
def test_report_and_triage_pages_show_the_viewer_offline(tmp_path):
    exe = _chromium()
    from monai_unc.data.cohorts import write_toy_cohort
    from monai_unc.evaluation import EvaluationConfig, read_shifts, run_evaluate
    from monai_unc.report.html import build_report

    data = write_toy_cohort(tmp_path / "data", n_cases=6, shape=(24, 24, 24))
    config = EvaluationConfig(budget=0.2, shifts=read_shifts(data["shifts"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(data["labels"], data["predictions"], tmp_path / "eval", config, images=data["images"])
    html = build_report(tmp_path / "eval", n_cases=2)
    text = html.read_text()
    assert text.count('class="mu-viewer"') == 2
    assert (html.parent / "assets" / "niivue.umd.js").read_bytes() == (ASSETS / "niivue.umd.js").read_bytes()
    # the stated size: each case's volumes within the budget
    blocks = re.findall(r'<script type="application/json" id="viewer-data-\d+">(.*?)</script>', text, re.S)
    assert len(blocks) == 2 and all(len(b) <= CASE_BUDGET_BYTES + 4096 for b in blocks)
    _check_viewer_page(exe, html, tmp_path, "report", 2)
    # without the viewer: no scripts beside the page are needed
    plain = build_report(tmp_path / "eval", output=tmp_path / "plain", n_cases=2, viewer=False)
    assert "mu-viewer" not in plain.read_text() and not (tmp_path / "plain" / "assets").exists()


@pytest.mark.slow
def test_triage_page_shows_the_viewer_for_referred_cases(cohorts, tmp_path):  # noqa: F811 (the fixture)
    exe = _chromium()
    out = tmp_path / "triage"
    assert _triage_cli(cohorts, out, None, "--cases", "4") == 0
    summary = json.loads((out / "triage.json").read_text())
    shown = summary["order"][:4]
    decision = {c["case"]: c["decision"] for c in summary["cases"]}
    referred = [c for c in shown if decision[c] != "accept"]
    assert referred, "the toy cohort B has referred cases among the most uncertain"
    page = out / "triage.html"
    text = page.read_text()
    assert re.findall(r'class="mu-viewer" id="viewer-\d+" data-volumes="[^"]+" data-case="([^"]+)"', text) == referred
    _check_viewer_page(exe, page, tmp_path, "triage", len(referred))


def test_case_viewer_memory_is_a_small_multiple_of_the_map():
    """The viewer of a whole-body map keeps a few MiB in the page; on the way it holds the map in float64 and one
    float64 buffer of the crop at a time (was 43 bytes per voxel: a copy of the finite values, the masks of the crop
    box kept, five chained float64 temporaries in the quantisation; found by the scale review)."""
    import tracemalloc

    rng = np.random.default_rng(0)
    seg = np.zeros((64, 64, 64), np.int64)
    seg[16:-16, 16:-16, 16:-16] = 1
    u = rng.random(seg.shape).astype(np.float32)
    case_viewer("warm-up", seg, u)
    tracemalloc.start()
    try:
        data = case_viewer("x", seg, u)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert data["step"] == 1
    assert peak < 30 * seg.size, peak / seg.size  # 25 bytes per voxel: float64 map, crop buffer, quantile copy
