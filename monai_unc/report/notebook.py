"""An interactive NiiVue viewer of one case in a Jupyter notebook (the ``viewer`` extra: ``ipyniivue``).

The pages embed NiiVue for the flagged cases (:mod:`monai_unc.report.viewer`); in a notebook, :func:`view` shows
any case's files the same way: the image in grey, the prediction as an overlay (each class in its colour of the
pages, :func:`~monai_unc.report.palette.class_colors`) and an uncertainty map as a heat overlay, in a widget
(``ipyniivue.NiiVue``) that reads the files from disk (a prediction with a label of
:data:`~monai_unc.report.viewer.MAX_LABEL_TEXELS` or above is passed shown by rank, as the pages' viewer shows it:
NiiVue's label table is one row of a texture, which a GPU refuses beyond its ``MAX_TEXTURE_SIZE``).

Needs ``pip install 'monai-unc[viewer]'`` (ipyniivue and its Jupyter widget dependencies); the rest of the package
does not import this module.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

from .palette import class_colors, hex_rgb
from .viewer import MAX_LABEL_TEXELS, check_convention

__all__ = ["view"]

#: the largest label value given a table entry per value (above, the labels are shown by rank, as the pages do): the
#: table, background included, is one row of MAX_LABEL_TEXELS texels at most (in earlier versions 65536 texels for a
#: label 65535, wider than many GPUs' MAX_TEXTURE_SIZE, and the labels were not drawn)
_DENSE_MAX = MAX_LABEL_TEXELS - 1


def _file(path: str | os.PathLike | None, name: str) -> Path | None:
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file path, got {type(path).__name__}")
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{name}: no such file {p}")
    if not p.name.endswith((".nii", ".nii.gz")):
        raise ValueError(f"{name} must be a NIfTI file (.nii or .nii.gz), got {p.name}")
    return p


def view(
    image: str | os.PathLike | None = None,
    prediction: str | os.PathLike | None = None,
    uncertainty: str | os.PathLike | None = None,
    *,
    uncertainty_colormap: str = "hot",
    prediction_opacity: float = 0.35,
    uncertainty_opacity: float = 0.6,
    height: int = 480,
    convention: str = "neurological",
) -> Any:
    """A NiiVue widget showing a case's image, prediction and uncertainty map, for a Jupyter notebook.

    Args:
        image: the image (NIfTI; grey), or None.
        prediction: the label map (``<case>_seg.nii.gz``; an overlay, background transparent), or None.
        uncertainty: a voxel uncertainty map (``<case>_<measure>.nii.gz``; a heat overlay), or None.
        uncertainty_colormap: a NiiVue colormap for the uncertainty (``hot``, ``warm``, ``plasma``, ...).
        prediction_opacity: the prediction overlay's opacity in [0, 1].
        uncertainty_opacity: the uncertainty overlay's opacity in [0, 1].
        height: the widget's height in pixels.
        convention: how the widget draws the case, as the pages' viewers
            (:data:`~monai_unc.report.viewer.CONVENTIONS`): ``"neurological"`` (default) the patient's left on the
            screen's left, ``"radiological"`` the patient's right (NiiVue's ``isRadiologicalConvention``, in the
            axial and coronal planes).

    Returns:
        An ``ipyniivue.NiiVue`` widget (display it as the cell's last expression).

    Raises:
        ImportError: without ipyniivue (``pip install 'monai-unc[viewer]'``), or ``"radiological"`` with an
            ipyniivue without NiiVue's radiological mode.
        ValueError: no file given, a missing or non-NIfTI file, an opacity outside [0, 1], or a ``convention`` that
            is not a name of :data:`~monai_unc.report.viewer.CONVENTIONS`.
        TypeError: a file that is not a path, or a ``convention`` that is not a str.

    Example:
        >>> import tempfile
        >>> import nibabel as nib, numpy as np
        >>> from monai_unc.report.notebook import view
        >>> tmp = tempfile.TemporaryDirectory()
        >>> folder = tmp.name
        >>> nib.save(nib.Nifti1Image(np.random.rand(8, 8, 8).astype("float32"), np.eye(4)), f"{folder}/c1_mi.nii.gz")
        >>> widget = view(uncertainty=f"{folder}/c1_mi.nii.gz")  # in a notebook: the cell's last expression
        >>> [v.name for v in widget.volumes]
        ['c1_mi.nii.gz']
        >>> view(uncertainty=f"{folder}/c1_mi.nii.gz", convention="radiological").opts.is_radiological_convention
        True
        >>> tmp.cleanup()
    """
    files = [(_file(image, "image"), "image"), (_file(prediction, "prediction"), "prediction"),
             (_file(uncertainty, "uncertainty"), "uncertainty")]
    files = [(p, role) for p, role in files if p is not None]
    if not files:
        raise ValueError("give at least one of image, prediction and uncertainty")
    for name, value in (("prediction_opacity", prediction_opacity), ("uncertainty_opacity", uncertainty_opacity)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    if isinstance(height, bool) or not isinstance(height, int) or height < 1:
        raise ValueError(f"height must be a positive integer, got {height!r}")
    check_convention(convention)
    try:
        from ipyniivue import NiiVue
    except ImportError as err:
        raise ImportError("monai_unc.report.notebook.view needs ipyniivue: pip install 'monai-unc[viewer]'") from err
    style = {
        "image": {"colormap": "gray", "opacity": 1.0},
        "prediction": {"colormap": "winter", "opacity": float(prediction_opacity), "cal_min": 0.5},
        "uncertainty": {"colormap": uncertainty_colormap, "opacity": float(uncertainty_opacity)},
    }
    roles = [role for _, role in files]
    # each class in its colour of the pages (found by hostile review 60: a continuous ramp)
    found = _label_lut(files[roles.index("prediction")][0]) if "prediction" in roles else None
    shown = None if found is None else found[1]  # the labels by rank, from label MAX_LABEL_TEXELS on

    def volume(p: Path, role: str) -> dict[str, Any]:
        if role == "prediction" and shown is not None:
            return {"data": shown, "name": p.name, **style[role]}
        return {"path": str(p), **style[role]}

    widget = NiiVue(height=height)
    if convention == "radiological":  # the widget's own setter does this (NiiVue's isRadiologicalConvention)
        if not hasattr(getattr(widget, "opts", None), "is_radiological_convention"):
            raise ImportError("view(convention='radiological') needs an ipyniivue with NiiVue's radiological mode "
                              "(opts.is_radiological_convention): pip install -U 'monai-unc[viewer]'")
        widget.opts.is_radiological_convention = True
    widget.load_volumes([volume(p, role) for p, role in files])
    if found is not None:
        from ipyniivue import LUT

        widget.volumes[roles.index("prediction")].colormap_label = LUT(**found[0])
    return widget


def _label_lut(path: Path) -> tuple[dict[str, Any], bytes | None] | None:
    """The label lookup table of a prediction file, each label value in its colour of the pages, and the data to show.

    :func:`~monai_unc.report.palette.class_colors` of the positive label values present, as the pages' viewer and
    figures colour them; the background and the values absent are transparent. Up to label
    ``MAX_LABEL_TEXELS - 1`` (8191) the table has an entry per value up to the largest and the file is shown as it is
    (data None). Above, such a table would not fit in the one texture row NiiVue uploads it as
    (:data:`~monai_unc.report.viewer.MAX_LABEL_TEXELS`), so the prediction is shown as the pages' viewer shows it
    (:mod:`monai_unc.report.viewer`): the ``i``-th label value present as ``i`` (a gzipped NIfTI in memory, the file's
    header and affine), the table's entry ``i`` in that value's colour and named by it (in earlier versions such a
    prediction kept the continuous ``winter`` ramp, label 70000 not in its colour of the pages). None for a file that
    does not hold non-negative integer labels, or more different ones than the table has entries besides the
    background's: it keeps the ramp.
    """
    import nibabel as nib
    import numpy as np

    img = nib.load(str(path))
    data = np.asanyarray(img.dataobj)
    if data.dtype.kind not in "iu" and not (np.isfinite(data).all() and (data == np.round(data)).all()):
        return None
    values = np.unique(data).astype(np.int64)
    if values.size == 0 or values[0] < 0 or values[-1] < 1:
        return None
    positive = values[values > 0]
    colors = class_colors(int(v) for v in positive)
    top = int(values[-1])
    if top <= _DENSE_MAX:
        lut = np.zeros((top + 1, 4), dtype=np.int64)
        for value, color in colors.items():
            lut[value] = [*hex_rgb(color), 255]
        return {"lut": lut.ravel().tolist(), "min": 0.0, "max": float(top)}, None
    if positive.size > _DENSE_MAX:
        return None
    index = np.where(data > 0, np.searchsorted(positive, np.maximum(data, 0)) + 1, 0)
    index = index.astype(np.uint8 if positive.size <= 255 else np.uint16)
    shown = nib.Nifti1Image(index, img.affine, header=img.header.copy())
    shown.set_data_dtype(index.dtype)
    shown.header.set_slope_inter(1.0, 0.0)
    lut = np.zeros((positive.size + 1, 4), dtype=np.int64)
    for i, value in enumerate(positive, start=1):
        lut[i] = [*hex_rgb(colors[int(value)]), 255]
    table = {"lut": lut.ravel().tolist(), "min": 0.0, "max": float(positive.size),
             "labels": [""] + [str(int(v)) for v in positive]}
    return table, gzip.compress(shown.to_bytes(), compresslevel=1)
