"""The interactive 3D viewer of the report and triage pages: NiiVue, embedded, working from disk with no network.

A QC reader reviews a flagged case by scrolling through it with the uncertainty on top. For each flagged case the
pages (:func:`monai_unc.report.html.build_report`, :func:`monai_unc.report.triage.build_triage_page`) embed a
viewer: the image in grey, the prediction as a label overlay (one colour per class, legend with the class names)
and the uncertainty map as a heat overlay (transparent below a threshold, so the anatomy shows), with the three
planes and a 3D render in a 2 x 2 grid, titled colorbars with units, and controls for the view, the uncertainty
colormap, its threshold and each overlay's opacity; light text on a dark panel (WCAG AA contrast).

- **No network, no server**: the volumes are in the page (gzipped NIfTI as base64 in a JSON block that
  :func:`~monai_unc.report.markup.json_script` writes, so no case name or value can end it), and the two scripts
  (the vendored NiiVue bundle ``niivue.umd.js``, BSD-2-Clause, version and SHA-256 in ``assets/niivue.json``, and
  this package's ``viewer.js``) are copied next to the page (``assets/``) and loaded by relative path.
- **Size budget**: a case's volumes take at most :data:`CASE_BUDGET_BYTES` (2 MiB of base64) in the page. The
  volumes are cropped to the bounding box of the image's foreground (non-zero voxels), the prediction and the
  uncertainty, plus a margin; the uncertainty is quantised to 8 bit (the NIfTI scale slope keeps its units, the
  error is at most half a step, ``(max - min) / 510``) and the image to 8 bit between its 0.5th and 99.5th
  percentiles; when that is still too large, every volume is subsampled by 2, 3, ... along each axis (the voxel
  size in the NIfTI header grows accordingly) until it fits. The step used is recorded in the data (``step``)
  and shown under the viewer.
- The static PNG slices stay on the pages: they print, and they are the fallback where WebGL is missing.
- **Display convention** (:data:`CONVENTIONS`): the neurological convention by default, the patient's left on the
  screen's left; ``convention="radiological"`` sets NiiVue's radiological mode (``isRadiologicalConvention``: the
  patient's right on the screen's left in the axial and coronal planes, its orientation letters swapped), as the
  static slices then draw them (:func:`monai_unc.report.plots.plot_case_overlay`).

NiiVue: Taylor Hanayik, Chris Drake, Chris Rorden et al., https://github.com/niivue/niivue.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np

from .._utils import check_integer, normalize_spacing
from ..io import atomic_copy, file_sha256
from ..keys import ENTROPY_MEASURES
from .markup import Markup, el, frag, isolate, json_script, script_file
from .palette import LABEL_COLORS, MAX_DISTINCT_COLORS, class_colors, hex_rgb

__all__ = ["CASE_BUDGET_BYTES", "CONVENTIONS", "LABEL_COLORS", "MAX_LABEL_TEXELS", "VIEWER_CSS", "case_viewer",
           "check_convention", "measure_unit", "viewer_block", "viewer_scripts", "viewer_section"]

#: the most base64 bytes one case's volumes may take in a page
CASE_BUDGET_BYTES = 2 * 2**20
#: the display conventions of the pages' case figures and viewers, with what each puts on the screen's left: the
#: neurological convention (the default) draws the patient's left on the left, the radiological one (how radiologists
#: read) the patient's right; the sagittal plane is the same in both
CONVENTIONS = {
    "neurological": "the patient's left on the left (neurological convention)",
    "radiological": "the patient's right on the left (radiological convention)",
}
#: the most entries of a label lookup table handed to NiiVue (the pages' viewer and ``notebook.view``). NiiVue uploads
#: the table as one row of a 2-D texture, as many texels wide as it has entries (``niivue.umd.js``: a texture of
#: ``max - min + 1`` by 1, filled by ``texSubImage2D``; it does not wrap into rows); WebGL refuses a texture wider
#: than the GPU's ``MAX_TEXTURE_SIZE`` (2048 at least in WebGL 2; 8192 or 16384 on most devices) and the labels are
#: then not drawn. In earlier versions ``notebook.view`` built a table of 65536 texels for a label 65535.
MAX_LABEL_TEXELS = 8192
ASSETS = Path(__file__).parent / "assets"
#: the folder, beside the page, that gets the viewer's scripts
ASSET_DIR = "assets"
_SCRIPTS = ("niivue.umd.js", "viewer.js")
#: copied beside the scripts: NiiVue's BSD-2-Clause terms go with every copy of its bundle (in earlier versions a shared
#: report redistributed ``niivue.umd.js`` without them)
_NOTICES = ("NIIVUE_LICENSE.txt",)
COLORMAPS = ("hot", "warm", "plasma", "viridis", "inferno")
#: the share of the cropped uncertainty voxels the overlay colours by default (the rest is transparent)
DEFAULT_COVERAGE = 0.25
VIEWS = (("multiplanar", "three planes + 3D render"), ("axial", "axial"), ("coronal", "coronal"),
         ("sagittal", "sagittal"), ("render", "3D render"))
VIEWER_CSS = """
.mu-viewer{margin:10px 0 22px;background:#14181f;color:#eef1f5;padding:10px 12px;border-radius:6px}
.mu-viewer canvas.mu-view{width:100%;height:520px;display:block;background:#000}
.mu-viewer .controls{display:flex;flex-wrap:wrap;gap:14px;align-items:center;font-size:13px;margin:8px 0;color:#eef1f5}
.mu-viewer .controls label{display:flex;gap:6px;align-items:center;color:#eef1f5}
.mu-viewer select{background:#fff;color:#14181f;border:1px solid #9aa6b8;border-radius:3px;font-size:13px}
.mu-viewer output{color:#eef1f5;font-variant-numeric:tabular-nums;min-width:4em}
.mu-viewer .legends{display:flex;flex-wrap:wrap;gap:22px;align-items:flex-start;font-size:12px;margin:6px 0}
.mu-viewer .mu-cbar-title{display:block;font-weight:600;color:#eef1f5;margin-bottom:3px}
.mu-viewer canvas.mu-cbar-ramp{display:block;width:220px;height:12px;border:1px solid #9aa6b8;background:#000}
.mu-viewer .mu-cbar-ticks{display:flex;justify-content:space-between;width:222px;color:#eef1f5}
.mu-viewer ul.mu-labels{list-style:none;margin:0;padding:0;display:flex;flex-wrap:wrap;gap:4px 12px}
.mu-viewer ul.mu-labels li{display:flex;gap:5px;align-items:center;color:#eef1f5}
.mu-viewer .swatch{display:inline-block;width:12px;height:12px;border:1px solid #eef1f5}
.mu-viewer p.note{color:#d5dce6;font-size:13px;max-width:1000px;margin:6px 0 0}
.mu-viewer-error{color:#ffb4ab;font-size:13px}
"""


def _encode(array: np.ndarray, affine: np.ndarray, slope: float = 1.0, inter: float = 0.0) -> str:
    img = nib.Nifti1Image(array, affine)
    img.header.set_slope_inter(slope, inter)
    img.header.set_xyzt_units("mm")
    return base64.b64encode(gzip.compress(img.to_bytes(), compresslevel=6, mtime=0)).decode("ascii")


def _box(masks: Sequence[np.ndarray], shape: tuple[int, ...], margin: int) -> tuple[slice, ...]:
    any_fg = np.zeros(shape, dtype=bool)
    for m in masks:
        any_fg |= m
    if not any_fg.any():
        return tuple(slice(0, s) for s in shape)
    idx = [np.flatnonzero(any_fg.any(axis=tuple(a for a in range(len(shape)) if a != ax))) for ax in range(len(shape))]
    return tuple(slice(max(int(i[0]) - margin, 0), min(int(i[-1]) + margin + 1, s)) for i, s in zip(idx, shape))


def _quantise(x: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, float, float]:
    """``x`` as uint8 on ``[lo, hi]`` (NaN -> lo) and the NIfTI slope/intercept that map it back."""
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0 if np.isfinite(lo) else 1.0
        lo = lo if np.isfinite(lo) else 0.0
    # one float64 buffer, each step in place (the chained expression made a new array per step: a whole-body map's
    # crop several times over); the same operations, so the same bytes
    y = np.nan_to_num(np.asarray(x, dtype=np.float64), nan=lo)  # a copy: x is not changed
    np.subtract(y, lo, out=y)
    np.multiply(y, 255.0 / (hi - lo), out=y)
    np.rint(y, out=y)
    q = np.clip(y, 0, 255, out=y).astype(np.uint8)
    return q, (hi - lo) / 255.0, lo


def check_convention(convention: Any) -> str:
    """A display convention of the pages' case figures and viewers, checked.

    Args:
        convention: ``"neurological"`` (the patient's left on the screen's left) or ``"radiological"`` (the patient's
            right on the screen's left), a name of :data:`CONVENTIONS`.

    Returns:
        ``convention``.

    Raises:
        TypeError: ``convention`` is not a str.
        ValueError: ``convention`` is not a name of :data:`CONVENTIONS`.

    Example:
        >>> check_convention("radiological")
        'radiological'
    """
    if not isinstance(convention, str):
        raise TypeError(f"convention must be 'neurological' or 'radiological', got {type(convention).__name__}")
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be 'neurological' or 'radiological', got {convention!r}"[:200])
    return convention


def measure_unit(measure: str) -> str:
    """The unit of an uncertainty measure's values, for the viewer's colorbar title.

    Args:
        measure: the measure's name (a name of :data:`~monai_unc.keys.MEASURES` or any other).

    Returns:
        ``"nats"`` for the entropies and the mutual information (natural log), ``""`` for the others (``1 - max p``
        and the variance are probabilities or their spread: no unit).

    Example:
        >>> measure_unit("mutual_information"), measure_unit("one_minus_max_prob")
        ('nats', '')
    """
    return "nats" if measure in ENTROPY_MEASURES else ""


def _check_affine(affine: Any) -> np.ndarray:
    """``affine`` as a float64 4 x 4 matrix, refused (naming it) unless finite with three independent axes."""
    try:
        a = np.asarray(affine, dtype=np.float64)
    except (TypeError, ValueError):
        a = None
    if a is None or a.shape != (4, 4) or not np.isfinite(a).all() or not abs(np.linalg.det(a[:3, :3])) > 0:
        raise ValueError("affine must be a finite 4 x 4 voxel-to-world matrix whose first three columns are "
                         f"independent (mm), got {np.shape(affine) if a is None or a.shape != (4, 4) else a.tolist()}")
    return a


def _label_table(values: Sequence[int], class_names: Sequence[str] | None, every: Sequence[int] | None = None
                 ) -> tuple[dict[str, list[int]], list[dict[str, Any]], np.ndarray | None]:
    """NiiVue's label lookup table of the display indices ``0 .. len(values)``, the legend of ``values``, the remap.

    The volume holds index ``i`` for the label ``values[i - 1]`` (0 transparent): any label value is drawn, and the
    colour of each is :func:`~monai_unc.report.palette.class_colors`'s, as on the static slices: of ``every`` label of
    the case when given (label values above :data:`~monai_unc.report.palette.MAX_DISTINCT_COLORS` are coloured by
    their rank among them), else of ``values``.

    More labels than the table may have entries (:data:`MAX_LABEL_TEXELS`, with the background's): the labels of one
    colour share an entry (the palette repeats its colours above ``MAX_DISTINCT_COLORS`` labels, so at most that
    many entries), and the remap, ``remap[i]`` the entry of display index ``i``, must be applied to the volume; None
    where every label has its own entry. The legend keeps every label value.
    """
    colors = class_colors(values if every is None else every)
    slots: dict[str, int] = {}
    if len(values) + 1 <= MAX_LABEL_TEXELS:
        entries = list(range(1, len(values) + 1))
    else:  # one entry per colour, in the order of the labels' first use of it
        entries = [slots.setdefault(colors[k], len(slots) + 1) for k in values]
        if len(slots) + 1 > MAX_LABEL_TEXELS:  # the palette has fewer colours than texels: never reached
            raise ValueError(f"{len(slots)} label colours do not fit NiiVue's label table of {MAX_LABEL_TEXELS}")
    table: dict[str, list[int]] = {"R": [0], "G": [0], "B": [0], "A": [0], "I": [0]}
    legend = []
    done: set[int] = set()
    for entry, k in zip(entries, values):
        if entry not in done:
            done.add(entry)
            r, g, b = hex_rgb(colors[k])
            for key, v in zip("RGBAI", (r, g, b, 255, entry)):
                table[key].append(v)
        name = str(class_names[k]) if class_names is not None and k < len(class_names) else ""
        legend.append({"value": int(k), "name": name if name and not name.isdigit() else f"class {k}",
                       "color": colors[k]})
    remap = np.asarray([0, *entries], dtype=np.int64) if slots else None
    return table, legend, remap


def _display_labels(seg: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """``seg`` as display indices and the label values they stand for.

    The ``i``-th positive label value present becomes ``i`` (0 and below: 0); uint8 up to 255 labels, else uint16.
    """
    values = np.unique(seg[seg > 0]) if seg.size else np.zeros(0, seg.dtype)
    if values.size > np.iinfo(np.uint16).max:
        raise ValueError(f"seg holds {values.size} different labels in the viewer's crop; the viewer draws at most "
                         f"{np.iinfo(np.uint16).max}")
    index = np.where(seg > 0, np.searchsorted(values, seg) + 1, 0)
    return index.astype(np.uint8 if values.size <= 255 else np.uint16), [int(v) for v in values]


def case_viewer(
    case_id: str,
    seg: np.ndarray,
    uncertainty: np.ndarray,
    image: np.ndarray | None = None,
    affine: np.ndarray | None = None,
    spacing: Sequence[float] | None = None,
    measure: str = "uncertainty",
    budget_bytes: int = CASE_BUDGET_BYTES,
    margin: int = 2,
    class_names: Sequence[str] | None = None,
    image_unit: str | None = None,
    convention: str = "neurological",
) -> dict[str, Any]:
    """The viewer data of one case: its volumes as gzipped NIfTI in base64, cropped and quantised to fit the budget.

    Args:
        case_id: the case's name (shown under the viewer; any text).
        seg: the predicted label map ``(X, Y, Z)``, integers (0 background); a 2-D case ``(X, Y)`` is shown as a
            volume one slice thick.
        uncertainty: the voxel uncertainty map, of ``seg``'s shape (NaN shown as the lowest value, below the default
            threshold: transparent; in a constant map as 0).
        image: the image, of ``seg``'s shape or with channels first (channel 0 is shown), or None (the viewer then
            shows the prediction and the uncertainty alone).
        affine: the volumes' 4 x 4 voxel-to-world affine in mm (default: ``diag(spacing)``).
        spacing: the voxel size in mm when there is no ``affine`` (default 1 mm).
        measure: the uncertainty's name (the overlay's name in the viewer).
        budget_bytes: the most base64 bytes the volumes may take (default :data:`CASE_BUDGET_BYTES`).
        margin: voxels kept around the foreground's bounding box (a non-negative integer).
        class_names: the class names indexed by label value (``class_names[0]`` the background), as in
            ``summary.json``'s ``class_names``; the prediction's legend shows them. Default (or a name that is
            only digits): ``class 1``, ``class 2``, ... after the label values.
        image_unit: the unit of ``image``'s values for its colorbar title (``image intensity (HU)``;
            :func:`monai_unc.io.image_unit`: ``"HU"`` for a CT series read through its rescale), or None for a
            volume file's values as stored (``image intensity (stored units)``).
        convention: how NiiVue draws the case (:data:`CONVENTIONS`): ``"neurological"`` (default) the patient's left
            on the screen's left, ``"radiological"`` the patient's right (NiiVue's ``isRadiologicalConvention``).

    Returns:
        ``{"case", "measure", "unit", "step", "crop", "bytes", "labels", "world_to_voxel", "convention", "volumes":
        [{"role", "name", "title", "base64", "colormap", "opacity", "cal_min", "cal_max", ...}]}``: ``unit`` the
        measure's unit (:func:`measure_unit`), ``convention`` the display convention ``viewer.js`` starts NiiVue in,
        ``step`` the subsampling step (1: full resolution), ``crop`` the kept index range
        per axis, ``bytes`` the base64 size, ``world_to_voxel`` the first three rows of the inverse of the viewer
        volumes' affine (mm to their voxel, in the order they are stored, whatever order NiiVue draws them in),
        ``labels`` the prediction's legend (``{"value", "name", "color"}`` per label value drawn, the true values,
        however large). The prediction is stored as display indices (the
        ``i``-th label value drawn as ``i``: uint8, uint16 above 255 labels) with a discrete label lookup table
        (``colormap_label``, at most :data:`MAX_LABEL_TEXELS` entries, NiiVue's texture of one row: with more labels
        in the crop the labels of one colour share an index; index ``i`` in the colour of its label value,
        :func:`~monai_unc.report.palette.class_colors`: different for every class, the first twelve
        :data:`LABEL_COLORS`, the background transparent); the uncertainty has a
        ``threshold`` (``cal_min``): the larger of 10 % of its range and the quantile that leaves
        :data:`DEFAULT_COVERAGE` of the cropped voxels above it; voxels below are transparent
        (``colormap_type`` 1, NiiVue's ``ZERO_TO_MAX_TRANSPARENT_BELOW_MIN``, when the map is non-negative).
        A map with one positive value in every voxel (``constant``: that value) has the threshold 0 and the colour
        range 0 .. value, so every voxel is drawn in the ramp's top colour (a map of zeros stays transparent); its NaN
        voxels (``no_value``) are quantised to 0, below a threshold of half a step, and stay transparent.

    Raises:
        ValueError: for volumes that are not 2D or 3D or differ in shape, a ``seg`` of non-integer values or with more
            than 65535 different labels in the crop, an ``affine`` that is not a finite 4 x 4 matrix of independent
            axes, a ``spacing`` that is not one positive finite size per axis, a ``budget_bytes`` or ``margin`` that is
            not a positive / non-negative integer (numpy integers accepted, bools not), or a budget too small for even
            the coarsest subsampling, or a ``convention`` that is not a name of :data:`CONVENTIONS`.
        TypeError: a ``convention`` that is not a str.

    Example:
        >>> seg = np.zeros((8, 8, 8), np.int64); seg[2:6, 2:6, 2:6] = 1
        >>> data = case_viewer("case1", seg, np.linspace(0, 1, 512).reshape(8, 8, 8))
        >>> data["step"], data["crop"], [v["role"] for v in data["volumes"]]
        (1, [[0, 8], [0, 8], [0, 8]], ['prediction', 'uncertainty'])
    """
    seg = np.asarray(seg)
    u = np.asarray(uncertainty, dtype=np.float64)
    if seg.ndim not in (2, 3) or u.shape != seg.shape:
        raise ValueError(f"seg and uncertainty must be 2D or 3D volumes of one shape, got {seg.shape} and {u.shape}")
    if seg.dtype.kind not in "biu" and not (np.isfinite(seg).all() and (seg == np.round(seg)).all()):
        raise ValueError("seg must hold integer labels")
    img = None
    if image is not None:
        img = np.asarray(image)
        img = img[0] if img.ndim == seg.ndim + 1 else img
        if img.shape != seg.shape:
            raise ValueError(f"image must have the prediction's shape {seg.shape}, got {img.shape}")
    # found by hostile testing: numpy integers were refused, a negative margin cropped the foreground away unsaid, and
    # a spacing or affine of the wrong shape failed with an IndexError or nibabel's HeaderDataError
    budget_bytes = check_integer(budget_bytes, "budget_bytes")
    margin = check_integer(margin, "margin", 0)
    convention = check_convention(convention)
    if image_unit is not None and not isinstance(image_unit, str):
        raise TypeError(f"image_unit must be a str or None, got {type(image_unit).__name__}")
    if spacing is not None:  # a 2-D case may give its slice thickness too: only the plane's two sizes are used
        spacing = normalize_spacing(tuple(spacing)[:2] if seg.ndim == 2 and np.size(spacing) == 3 else spacing,
                                    seg.ndim, "spacing")
    if seg.ndim == 2:  # a 2-D case: one slice of a volume (the affine's third column is its normal)
        seg, u, img = seg[..., None], u[..., None], None if img is None else img[..., None]
        if spacing is not None:
            spacing = (*spacing[:2], 1.0)
    if affine is None:
        affine = np.diag([*(float(s) for s in (spacing or (1.0, 1.0, 1.0))), 1.0])
    affine = _check_affine(affine)
    # the case's labels when they are coloured by rank (values above MAX_DISTINCT_COLORS): ranked among all of them, as
    # the static slices rank them, not among those left at a subsampling step
    every = (np.unique(seg[seg > 0]).astype(np.int64).tolist()
             if seg.size and float(seg.max()) > MAX_DISTINCT_COLORS else None)
    finite = np.isfinite(u)  # the range of the finite values, without a copy of them
    any_finite = bool(finite.any())
    u_lo, u_hi = ((float(u.min(where=finite, initial=np.inf)), float(u.max(where=finite, initial=-np.inf)))
                  if any_finite else (0.0, 1.0))
    del finite
    masks = [seg > 0, np.isfinite(u) & (u > u_lo)]
    if img is not None:
        masks.append(np.asarray(img) != 0)
    box = _box(masks, seg.shape, margin)
    del masks
    seg_c, u_c = seg[box], u[box]
    img_c = img[box].astype(np.float64) if img is not None else None
    if img_c is not None:
        finite = img_c[np.isfinite(img_c)]
        i_lo, i_hi = (np.percentile(finite, [0.5, 99.5]) if finite.size else (0.0, 1.0))
    u_top = u_hi if u_hi > u_lo else u_lo + 1.0
    finite_c = u_c[np.isfinite(u_c)]
    threshold = u_lo + 0.1 * (u_top - u_lo)
    if finite_c.size:
        threshold = max(threshold, float(np.quantile(finite_c, 1.0 - DEFAULT_COVERAGE)))
    del finite_c  # the crop's finite values: only for the threshold
    threshold = min(threshold, u_top)
    u_min, q_lo = u_lo, u_lo  # the slider's low end; the value of the quantised 0 (and of a NaN voxel)
    constant = any_finite and u_hi == u_lo
    no_value = bool(np.isnan(u_c).any())  # voxels of the crop without a value (NaN)
    if constant and u_lo > 0:  # one value everywhere: every voxel drawn, in the top colour of the ramp 0 .. value
        u_min, threshold, u_top = 0.0, 0.0, u_lo
        if no_value:  # quantised on 0 .. value: a NaN voxel is 0, below the threshold (found by hostile review 60:
            # NaN voxels were quantised to the one value and drawn as it, under "every voxel is 0.5 nats")
            q_lo, threshold = 0.0, u_lo / 510.0
    unit = measure_unit(measure)
    image_title = f"image intensity ({image_unit or 'stored units'})"
    u_title = f"{str(measure).replace('_', ' ')} ({unit or 'no unit'})"
    start = np.array([s.start for s in box], dtype=np.float64)
    for step in range(1, max(seg_c.shape) + 1):
        sub = (slice(None, None, step),) * 3
        aff = affine.copy()
        aff[:3, 3] = affine[:3, :3] @ start + affine[:3, 3]
        aff[:3, :3] = affine[:3, :3] * step
        volumes = []
        if img_c is not None:
            q, slope, inter = _quantise(img_c[sub], float(i_lo), float(i_hi))
            volumes.append({"role": "image", "name": "image.nii.gz", "title": image_title,
                            "base64": _encode(q, aff, slope, inter), "colormap": "gray", "opacity": 1.0,
                            "cal_min": float(i_lo), "cal_max": float(i_hi)})
        labels, present = _display_labels(seg_c[sub])  # the labels drawn at this step, whatever their values
        lut, legend, remap = _label_table(present, class_names, every)
        if remap is not None:  # more labels than texels: one entry per colour (the table of one texture row)
            labels = remap[labels].astype(labels.dtype)
        volumes.append({"role": "prediction", "name": "prediction.nii.gz", "title": "prediction",
                        "base64": _encode(labels, aff), "colormap": "gray", "colormap_label": lut, "opacity": 0.5,
                        "cal_min": 0.0, "cal_max": float(max(max(lut["I"]), 1))})
        q, slope, inter = _quantise(u_c[sub], q_lo, u_hi)
        volumes.append({"role": "uncertainty", "name": f"{measure}.nii.gz", "title": u_title,
                        "base64": _encode(q, aff, slope, inter), "colormap": "hot", "opacity": 0.7,
                        "colormap_type": 1 if u_lo >= 0 else 0, "cal_min": threshold, "threshold": threshold,
                        "u_min": u_min, "cal_max": u_top, **({"constant": u_lo} if constant else {}),
                        **({"no_value": True} if no_value else {})})
        size = sum(len(v["base64"]) for v in volumes)
        if size <= budget_bytes:
            return {"case": str(case_id), "measure": str(measure), "unit": unit, "step": step,
                    "crop": [[s.start, s.stop] for s in box], "bytes": size, "labels": legend, "volumes": volumes,
                    "world_to_voxel": np.linalg.inv(aff)[:3].tolist(), "convention": convention}
    raise ValueError(f"budget_bytes={budget_bytes} is too small for case {case_id!r} even at the coarsest step")


def viewer_block(index: int, data: dict[str, Any]) -> Markup:
    """One case's viewer: the canvas, the controls and the case's volumes as a JSON block.

    The controls choose the view, the uncertainty colormap, the uncertainty threshold (voxels below it are
    transparent, so the anatomy shows) and the overlay opacities. Under them the legends: a titled colorbar with
    its unit for the image and the uncertainty (``viewer.js`` draws the colour ramps from NiiVue's colormaps) and
    the prediction's class names with their colours. ``viewer.js`` (:func:`viewer_scripts`) starts the viewer.

    Args:
        index: the viewer's number on the page (ids ``viewer-<index>`` and ``viewer-data-<index>``).
        data: :func:`case_viewer`'s result.

    Returns:
        The block as :class:`~monai_unc.report.markup.Markup`.

    Raises:
        ValueError: ``index`` is not a non-negative integer.

    Example:
        >>> seg = np.zeros((8, 8, 8), np.int64); seg[2:6, 2:6, 2:6] = 1
        >>> block = viewer_block(0, case_viewer("case1", seg, np.linspace(0, 1, 512).reshape(8, 8, 8)))
        >>> str(block)[:65]
        '<div class="mu-viewer" id="viewer-0" data-volumes="viewer-data-0"'
    """
    index = check_integer(index, "index", 0)  # numpy integers too (found by hostile testing: refused)
    data_id = f"viewer-data-{index}"
    roles = [v["role"] for v in data["volumes"]]
    vol = {v["role"]: v for v in data["volumes"]}
    controls = [
        el("label", "view", el("select", *(el("option", text, value=key) for key, text in VIEWS),
                                data_control="view")),
        el("label", f"{data['measure']} colormap", el("select", *(el("option", c, value=c) for c in COLORMAPS),
                                                      data_control="colormap")),
    ]
    if "uncertainty" in vol:
        u = vol["uncertainty"]
        lo, hi = float(u.get("u_min", u["cal_min"])), float(u["cal_max"])
        controls.append(el("label", f"{data['measure']} shown above",
                           el("input", type="range", min=repr(lo), max=repr(hi), step=repr((hi - lo) / 255 or 1.0),
                              value=repr(float(u.get("threshold", u["cal_min"]))), data_control="threshold"),
                           el("output", _fmt(u.get("threshold", u["cal_min"])), data_show="threshold")))
    for role in ("uncertainty", "prediction"):
        if role in vol:
            controls.append(el("label", f"{role} opacity", el("input", type="range", min="0", max="100",
                                                              value=str(round(100 * vol[role]["opacity"])),
                                                              data_control="opacity", data_role=role)))
    legends = []
    for role in ("image", "uncertainty"):
        if role in vol:
            v = vol[role]
            low = 0.0 if v.get("colormap_type") == 1 else v["cal_min"]
            ticks = [el("span", _fmt(low)), el("span", _fmt(v["cal_max"]))]
            extra = (el("span", "transparent below ", el("span", _fmt(v["threshold"]), data_show="threshold"),
                            class_="mu-cbar-ticks") if "threshold" in v else None)
            if "constant" in v:  # no range to show: the one value, and what it looks like
                extra = el("span", f"constant map: every voxel{' with a value' if v.get('no_value') else ''} is "
                           f"{_fmt(v['constant'])}"
                           + (f" {data['unit']}" if data.get("unit") else "")
                           + (", drawn in the ramp's top colour" if v["constant"] > 0 else ", nothing to draw"),
                           class_="mu-cbar-ticks mu-constant")
            legends.append(el("div", el("span", v.get("title", role), class_="mu-cbar-title"),
                              el("canvas", class_="mu-cbar-ramp", width="256", height="1", data_role=role,
                                 data_colormap=v["colormap"]),
                              el("span", *ticks, class_="mu-cbar-ticks"), extra, class_="mu-cbar", data_role=role))
    if "prediction" in vol:
        items = [el("li", el("span", class_="swatch", style=f"background:{lab['color']}"), lab["name"])
                 for lab in data.get("labels", [])]
        legends.append(el("div", el("span", "prediction (labels)", class_="mu-cbar-title"),
                          el("ul", *items, class_="mu-labels") if items else el("span", "no foreground predicted"),
                          class_="mu-legend", data_role="prediction"))
    unit = data.get("unit")
    # the case id isolated from the text after it (found by review 61: a right-to-left id reordered the sentence)
    note = frag(isolate(data["case"]), f": image{' ' if 'image' in roles else ' (none) '}with the prediction and the "
            f"{data['measure']} overlays, cropped to the foreground" +
            ("" if data["step"] == 1 else f" and subsampled by {data['step']} along each axis to fit the page") +
            f". The {data['measure']} overlay is transparent below the threshold" +
            (f" ({unit})" if unit else "") +
            f". Drawn with {CONVENTIONS[_data_convention(data)]}: the letter at a plane's left edge names that side."
            " Drag to move the crosshair; scroll to change the slice; drag in the 3D view to rotate it. Keyboard: "
            "Tab to the view, then Page Up / Page Down change the slice, H / L and J / K move the crosshair.")
    # a focusable view with a name (a screen reader announced a nameless canvas) and the note as its description
    view = el("canvas", class_="mu-view", id=f"viewer-canvas-{index}", width="960", height="520", tabindex="0",
              role="application", aria_label=f"3D viewer of case {data['case']}",
              aria_describedby=f"viewer-note-{index}")
    # what the box says until viewer.js starts the view (and what stays when it cannot run: no JavaScript, or the
    # page moved without its assets/ folder), instead of a blank black canvas and dead controls
    pending = el("p", "The interactive viewer has not started: it needs JavaScript, WebGL 2 and the scripts in "
                 "assets/ beside this page (keep that folder with the page); the slices above show the same case.",
                 class_="mu-viewer-error", data_pending="1")
    return el("div", pending, view, el("div", *controls, class_="controls"), el("div", *legends, class_="legends"),
              el("p", note, class_="note", id=f"viewer-note-{index}"),
              json_script(data, data_id), class_="mu-viewer", id=f"viewer-{index}", data_volumes=data_id,
              data_case=data["case"])


def _data_convention(data: dict[str, Any]) -> str:
    """The display convention of :func:`case_viewer`'s ``data`` (neurological for data made before it had one)."""
    return check_convention(data.get("convention", "neurological"))


def _fmt(x: float) -> str:
    """A number of the viewer's legends, as ``viewer.js`` writes the slider's (``fmt``).

    Whole from 1000 on (a CT window reads ``-1024``, not ``-1.02e+03`` as in earlier versions), else three
    significant digits without an exponent down to 1e-6 and without trailing zeros (``0.5``, ``0.602``, ``0.000015``).

    Example:
        >>> _fmt(-1024.4), _fmt(0.5), _fmt(0.60231), _fmt(1.5e-05), _fmt(2e-08)
        ('-1024', '0.5', '0.602', '0.000015', '2e-08')
    """
    v = float(x)
    if not np.isfinite(v) or v == 0.0:
        return "0" if v == 0.0 else str(v)
    if 1000.0 <= abs(v) < 1e21:
        return f"{v:.0f}"
    rounded = float(f"{v:.3g}")
    return np.format_float_positional(rounded, trim="-") if abs(rounded) >= 1e-6 else f"{rounded:.3g}"


def viewer_section(viewers: Sequence[dict[str, Any]], heading: str) -> Markup | None:
    """A page section with one viewer per case.

    Args:
        viewers: :func:`case_viewer` results, in page order.
        heading: the section heading.

    Returns:
        ``<section id="viewers">`` as :class:`~monai_unc.report.markup.Markup`, or None without any viewer.

    Example:
        >>> viewer_section([], "3D viewers") is None
        True
    """
    if not viewers:
        return None
    return el("section", el("h2", heading), *(viewer_block(i, d) for i, d in enumerate(viewers)), id="viewers")


def viewer_scripts(page_dir: str | Path) -> Markup:
    """Copy the viewer's scripts next to a page and return the elements that load them.

    ``niivue.umd.js`` and ``viewer.js`` are copied into ``<page_dir>/assets`` (atomically; a file already there
    with the same content is kept), with ``NIIVUE_LICENSE.txt``, the BSD-2-Clause terms NiiVue's bundle is
    redistributed under.

    Args:
        page_dir: the folder of the page.

    Returns:
        The two ``<script src>`` elements (relative paths), for the end of the page's body.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     print(viewer_scripts(d))
        ...     sorted(p.name for p in (Path(d) / "assets").iterdir())
        <script src="assets/niivue.umd.js"></script><script src="assets/viewer.js"></script>
        ['NIIVUE_LICENSE.txt', 'niivue.umd.js', 'viewer.js']
    """
    folder = Path(page_dir) / ASSET_DIR
    for name in (*_SCRIPTS, *_NOTICES):
        src, dst = ASSETS / name, folder / name
        if not (dst.is_file() and file_sha256(dst) == file_sha256(src)):
            atomic_copy(src, dst)
    return frag(*(script_file(f"{ASSET_DIR}/{name}") for name in _SCRIPTS))


def vendored_niivue() -> dict[str, Any]:
    """The vendored NiiVue's record (``assets/niivue.json``).

    Returns:
        ``{"package", "version", "file", "sha256", "license"}``.

    Example:
        >>> vendored_niivue()["license"]
        'BSD-2-Clause'
    """
    return json.loads((ASSETS / "niivue.json").read_text())
