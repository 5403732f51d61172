"""The label lookup tables the viewers hand NiiVue fit in one row of a texture (review 62).

NiiVue (``assets/niivue.umd.js``, 0.69.0) uploads a label colormap as ONE row of a 2-D RGBA texture as wide as the
table, ``max - min + 1`` texels; it does not wrap it into rows. A texture wider than the GPU's ``MAX_TEXTURE_SIZE``
(8192 in headless Chromium's SwiftShader, 16384 on many GPUs) is refused by WebGL, and the labels are not drawn.
``notebook.view`` built a table with an entry per label value up to 65535 (65536 texels for a label 65535); the
pages' viewer one per label present in the crop (up to 65535). Both now stay within
:data:`~monai_unc.report.viewer.MAX_LABEL_TEXELS`, every label in its colour of the pages.
"""

from __future__ import annotations

import base64
import gzip
import re

import nibabel as nib
import numpy as np
import pytest

from monai_unc.report.notebook import _label_lut
from monai_unc.report.palette import class_colors
from monai_unc.report.viewer import ASSETS, MAX_LABEL_TEXELS, case_viewer


def _hex(rgba) -> str:
    return "#{:02x}{:02x}{:02x}".format(*(int(c) for c in rgba[:3]))


def test_niivue_uploads_a_label_table_as_one_row_of_its_width():
    """Pins what the fix relies on (read in NiiVue's bundle): the label texture is ``max - min + 1`` texels wide and
    one high (``createColormapTexture(null, 1, width)`` is ``texStorage2D(TEXTURE_2D, 1, RGBA8, width, 1)``). A
    NiiVue that wraps the table into rows would fail this test: the limit could then go."""
    js = (ASSETS / "niivue.umd.js").read_text(encoding="utf-8")
    upload = re.search(r"const (\w)=(\w)\.colormapLabel\.max-\2\.colormapLabel\.min\+1,(\w)=\w\(null,1,\1\);"
                       r"return \w\.texSubImage2D\(\w\.TEXTURE_2D,0,0,0,\1,1,", js)
    assert upload, "NiiVue's upload of a label table changed: check MAX_LABEL_TEXELS against it"
    create = re.search(r"createColormapTexture\((\w)=null,(\w)=0,(\w)=256\)\{.{0,200}?texStorage2D\("
                       r"this\.gl\.TEXTURE_2D,1,this\.gl\.RGBA8,\3,\2\)", js)
    assert create, "NiiVue's colormap texture is no longer (width, rows) = (C, g)"
    # the R/G/B/I form that the pages' viewer passes is made dense from min(I) to max(I) (makeLabelLut)
    assert re.search(r"const \w=Math\.min\(\.\.\.(\w)\),(\w)=Math\.max\(\.\.\.\1\),(\w)=\2-\w\+1,"
                     r"\w=new Uint8ClampedArray\(\3\*4\)", js)
    assert 2048 <= MAX_LABEL_TEXELS <= 16384  # WebGL 2 guarantees 2048; many GPUs give 8192 or 16384


def _save(tmp_path, values, shape=(12, 12, 12)):
    seg = np.zeros(shape, np.int32)
    rng = np.random.default_rng(0)
    seg.reshape(-1)[rng.choice(seg.size, len(values), replace=False)] = values
    path = tmp_path / "c1_seg.nii.gz"
    nib.save(nib.Nifti1Image(seg, np.diag([1.0, 1.5, 2.0, 1.0])), path)
    return seg, path


@pytest.mark.parametrize("values", [[1, 20000, 65535], [3, MAX_LABEL_TEXELS], [2, MAX_LABEL_TEXELS - 1]])
def test_the_notebooks_table_fits_and_keeps_each_labels_colour(tmp_path, values):
    seg, path = _save(tmp_path, values)
    table, data = _label_lut(path)
    rgba = np.asarray(table["lut"]).reshape(-1, 4)
    width = int(table["max"] - table["min"] + 1)
    assert rgba.shape[0] == width <= MAX_LABEL_TEXELS  # 65536 texels for label 65535 before
    index = seg if data is None else np.asarray(nib.Nifti1Image.from_bytes(gzip.decompress(data)).dataobj)
    expected = class_colors(values)
    for v in values:
        voxel = index[seg == v]
        assert voxel.size == 1 and rgba[int(voxel[0]), 3] == 255
        assert _hex(rgba[int(voxel[0])]) == expected[v], v
        if data is not None:  # hovering names the true label value
            assert table["labels"][int(voxel[0])] == str(v)
    assert (index[seg == 0] == 0).all() and rgba[0, 3] == 0
    assert (data is None) == (max(values) < MAX_LABEL_TEXELS)  # a dense table only where it fits


def test_the_pages_viewer_table_fits_with_more_labels_than_texels():
    """A crop with more labels than the table may have texels: the labels of one colour share an entry (the palette
    repeats its colours above MAX_DISTINCT_COLORS labels), each drawn in its legend's colour."""
    n = MAX_LABEL_TEXELS + 500
    seg = np.arange(1, 24**3 + 1, dtype=np.int32).reshape(24, 24, 24)
    seg[seg > n] = 0
    page = case_viewer("c1", seg, np.zeros(seg.shape), budget_bytes=64 * 2**20)
    assert page["step"] == 1
    pred = next(v for v in page["volumes"] if v["role"] == "prediction")
    table = pred["colormap_label"]
    assert max(table["I"]) - min(table["I"]) + 1 <= MAX_LABEL_TEXELS  # 8693 texels before
    assert pred["cal_max"] == max(table["I"])
    shown = np.asarray(nib.Nifti1Image.from_bytes(gzip.decompress(base64.b64decode(pred["base64"]))).dataobj)
    colour = {i: f"#{r:02x}{g:02x}{b:02x}" for i, r, g, b in zip(table["I"], table["R"], table["G"], table["B"])}
    legend = {lab["value"]: lab["color"] for lab in page["labels"]}
    assert len(legend) == n  # the legend keeps every label value
    expected = class_colors(range(1, n + 1))
    crop = tuple(slice(a, b) for a, b in page["crop"])
    for v in (1, 2, 4096, 4097, n):
        idx = int(shown[seg[crop] == v][0])
        assert idx > 0 and colour[idx] == legend[v] == expected[v], v
    assert (shown[seg[crop] == 0] == 0).all()


def test_the_pages_viewer_keeps_one_entry_per_label_where_they_fit():
    seg = np.zeros((8, 8, 8), np.int32)
    seg[0, 0, :3] = [1, 20000, 65535]
    page = case_viewer("c1", seg, np.zeros(seg.shape))
    table = next(v for v in page["volumes"] if v["role"] == "prediction")["colormap_label"]
    assert table["I"] == [0, 1, 2, 3]  # compact display indices, 4 texels


_PROBE = """<html><body><canvas id=c></canvas><script>
var gl = document.getElementById('c').getContext('webgl2'), out = [];
if (gl) {
  out.push(gl.getParameter(gl.MAX_TEXTURE_SIZE));
  [%d, %d].forEach(function (w) {  // NiiVue's upload of a label table of w entries (one row)
    while (gl.getError()) {}
    gl.bindTexture(gl.TEXTURE_2D, gl.createTexture());
    gl.texStorage2D(gl.TEXTURE_2D, 1, gl.RGBA8, w, 1);
    gl.texSubImage2D(gl.TEXTURE_2D, 0, 0, 0, w, 1, gl.RGBA, gl.UNSIGNED_BYTE, new Uint8Array(w * 4));
    out.push(gl.getError());
  });
}
document.body.setAttribute('data-out', out.join(','));
</script></body></html>"""


@pytest.mark.slow
def test_a_table_of_max_label_texels_uploads_where_a_wider_one_fails(tmp_path):
    """In headless Chromium's WebGL 2 (SwiftShader: MAX_TEXTURE_SIZE 8192), NiiVue's upload of a table of
    MAX_LABEL_TEXELS texels succeeds and one of 65536 (the notebook's table for a label 65535 before) is refused with
    GL_INVALID_VALUE (1281)."""
    import subprocess

    from tests.report.test_viewer import _chromium

    exe = _chromium()
    page = tmp_path / "probe.html"
    page.write_text(_PROBE % (MAX_LABEL_TEXELS, 65536), encoding="utf-8")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader", "--no-first-run",
             "--virtual-time-budget=5000", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([exe, *flags, "--dump-dom", page.resolve().as_uri()], capture_output=True, text=True,
                         timeout=240).stdout
    found = re.search(r'data-out="([\d,]*)"', dom)
    if found is None or not found.group(1):
        pytest.skip("no WebGL 2 in this Chromium")
    max_size, fits, wide = (int(v) for v in found.group(1).split(","))
    assert MAX_LABEL_TEXELS <= max_size and fits == 0, (max_size, fits)
    assert max_size < 65536 and wide == 1281, (max_size, wide)  # GL_INVALID_VALUE: the labels would not be drawn
