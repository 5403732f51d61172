"""``read_volume``'s NIfTI fast path (nibabel alone, no MONAI import) gives exactly what MONAI's ``LoadImage`` path
gives: the same float32 array (values bit for bit, NaN included; shape and strides), the same float64 affine, the
same warnings and the same error, on a matrix of NIfTI files (data types, scaling, byte order, NIfTI-1 / NIfTI-2,
``.nii`` / ``.nii.gz``, 2 to 5 dimensions, sform / qform codes, negative qfac, pixdim that disagrees with the
affine), and it is really taken on those files (the ``LoadImage`` path is refused there)."""

from __future__ import annotations

import gzip
import io
import warnings
from pathlib import Path

import numpy as np
import pytest

nib = pytest.importorskip("nibabel")
pytest.importorskip("monai")

from monai_unc.io import cases  # noqa: E402
from monai_unc.io.cases import CaseError, read_volume  # noqa: E402

#: the LoadImage path (kept here: the ``no_loader`` fixture takes it away from ``read_volume``)
_ORIGINAL_LOADER = cases._read_with_loader

INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOATS = ("float32", "float64")
#: an oblique affine with a negative determinant (a qform stores it with qfac = -1)
OBLIQUE = np.array([[0.0, -1.5, 0.2, 10.5], [2.0, 0.0, 0.0, -20.25], [0.0, 0.1, -3.0, 7.0], [0, 0, 0, 1]])


def _values(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Values over the whole range of ``dtype`` (extremes, zero, random), NaN / inf / -0 / subnormals for floats."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        special = [info.min, info.max, 0, 1, info.max - 1, 2**24 + 1 if info.max > 2**24 else info.max // 3]
        if dt.itemsize == 8:  # rounds up to float32 directly, down through float64 (a double rounding)
            special.append(2**60 + 2**36 + 1)
        rand = rng.integers(info.min, info.max, size=n, dtype=dt, endpoint=True)
    else:
        info = np.finfo(dt)
        special = [np.nan, np.inf, -np.inf, -0.0, info.tiny / 4, info.max, info.min, 0.1, 1 / 3]
        rand = rng.normal(0, 1e3, size=n).astype(dt)
    rand[: len(special)] = np.array(special, dtype=dt)
    return rand.reshape(shape, order="F")


def _write(path: Path, data: np.ndarray, *, dtype: str | None = None, affine: np.ndarray = OBLIQUE,
           nifti2: bool = False, endian: str = "<", sform_code: int = 2, qform_code: int = 1,
           qform_affine: np.ndarray | None = None, fields: dict | None = None) -> Path:
    """Write a NIfTI file with full control of its header: ``fields`` are set in the stored header as is (after
    nibabel's own writing, so that nibabel does not recompute e.g. ``scl_slope``)."""
    header = (nib.Nifti2Header if nifti2 else nib.Nifti1Header)(endianness=endian)
    header.set_data_dtype(np.dtype(dtype or data.dtype))
    img = (nib.Nifti2Image if nifti2 else nib.Nifti1Image)(data, None, header=header)
    img.set_qform(affine if qform_affine is None else qform_affine, code=qform_code)
    img.set_sform(affine, code=sform_code)
    plain = path.with_name(path.name.removesuffix(".gz"))
    nib.save(img, plain)
    raw = bytearray(plain.read_bytes())
    stored = type(header).from_fileobj(io.BytesIO(bytes(raw)))
    assert stored.endianness == endian
    for key, value in (fields or {}).items():
        stored[key] = value
    block = stored.binaryblock
    raw[: len(block)] = block
    if path.name.endswith(".gz"):
        plain.unlink()
        path.write_bytes(gzip.compress(bytes(raw)))
    else:
        plain.write_bytes(bytes(raw))
    return path


def _loader(path: Path):
    """``read_volume`` through MONAI's ``LoadImage``, with its warnings."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = _ORIGINAL_LOADER(path)
    return out, [(x.category, str(x.message)) for x in w]


def _fast(path: Path):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = cases._read_nifti(path)
    return out, [(x.category, str(x.message)) for x in w]


def _assert_same(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The fast path reads ``path`` (it does not fall back) and gives what the LoadImage path gives, bit for bit."""
    (ref, ref_aff), ref_warn = _loader(path)
    got, got_warn = _fast(path)
    assert got is not None, f"{path.name}: the fast path fell back"
    data, aff = got
    assert data.dtype == ref.dtype == np.float32, path.name
    assert data.shape == ref.shape, (path.name, data.shape, ref.shape)
    moving = [i for i, n in enumerate(data.shape) if n > 1]  # the stride of a length-1 axis means nothing
    assert [data.strides[i] for i in moving] == [ref.strides[i] for i in moving], (path.name, data.strides,
                                                                                  ref.strides)
    assert np.array_equal(data.view(np.uint32), ref.view(np.uint32)), f"{path.name}: values differ"
    assert np.array_equal(data, ref, equal_nan=True)
    assert data.flags.writeable
    assert aff.dtype == ref_aff.dtype == np.float64 and aff.shape == ref_aff.shape == (4, 4), path.name
    assert np.array_equal(aff.view(np.uint64), ref_aff.view(np.uint64)), (path.name, aff, ref_aff)
    assert got_warn == ref_warn, path.name
    return data, aff


def _refuse(path):
    raise AssertionError(f"LoadImage path taken for {path}")


@pytest.fixture
def no_loader(monkeypatch):
    """``read_volume`` without its LoadImage path: a file it falls back on fails."""
    monkeypatch.setattr(cases, "_read_with_loader", _refuse)


# ----------------------------------------------------------------------------------------------------------------
# data types, scaling, byte order, NIfTI-1 / NIfTI-2, .nii / .nii.gz
# ----------------------------------------------------------------------------------------------------------------
SCALINGS = {"none": {}, "slope_inter": {"scl_slope": 0.37, "scl_inter": -12.5}, "slope_only": {"scl_slope": 3.0},
            "slope_0": {"scl_slope": 0.0, "scl_inter": 5.0}, "slope_nan": {"scl_slope": np.nan, "scl_inter": 2.0},
            "big_slope": {"scl_slope": 1e30, "scl_inter": 0.0}}


@pytest.mark.parametrize("ext", [".nii", ".nii.gz"])
@pytest.mark.parametrize("nifti2", [False, True], ids=["nifti1", "nifti2"])
@pytest.mark.parametrize("endian", ["<", ">"], ids=["little", "big"])
@pytest.mark.parametrize("scaling", list(SCALINGS))
def test_data_types_scaling_byte_order(tmp_path, ext, nifti2, endian, scaling, monkeypatch):
    """Every integer width, float32 / float64 (extremes, NaN, inf, -0, subnormals), with and without scaling."""
    written = []
    for i, dtype in enumerate((*INTS, *FLOATS)):
        path = _write(tmp_path / f"{dtype}{ext}", _values(dtype, (3, 4, 5), seed=i), nifti2=nifti2, endian=endian,
                      fields=SCALINGS[scaling])
        loaded = nib.load(path)
        stored = loaded.get_data_dtype()
        assert stored.newbyteorder("=") == np.dtype(dtype).newbyteorder("=")
        assert stored.itemsize == 1 or stored.byteorder == endian or (stored.byteorder == "=" and endian == "<")
        assert type(loaded.header).__name__.startswith("Nifti2" if nifti2 else "Nifti1")
        written.append(_assert_same(path))
    monkeypatch.setattr(cases, "_read_with_loader", _refuse)  # read_volume takes the fast path on every one
    for i, dtype in enumerate((*INTS, *FLOATS)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # overflows to float32: compared above
            data, aff = read_volume(tmp_path / f"{dtype}{ext}")
        assert np.array_equal(data, written[i][0], equal_nan=True) and np.array_equal(aff, written[i][1])


def test_masks_and_float16_sources(tmp_path, no_loader):
    """bool masks and float16 arrays (NIfTI has neither type: they are stored as uint8 / float32)."""
    mask = np.zeros((4, 4, 3), bool)
    mask[1:3, 1:3, 1] = True
    half = np.array([np.nan, np.inf, -0.0, 65504, 6e-8, 1 / 3] * 8, np.float16).reshape(4, 4, 3)
    for name, arr, dtype in (("mask.nii.gz", mask, "uint8"), ("half.nii.gz", half, "float32")):
        path = _write(tmp_path / name, arr.astype(dtype), dtype=dtype)
        data, _ = read_volume(path)
        assert np.array_equal(data[0], arr.astype(np.float32), equal_nan=True)
        _assert_same(path)


# ----------------------------------------------------------------------------------------------------------------
# dimensions and channels
# ----------------------------------------------------------------------------------------------------------------
SHAPES = {"2d": (5, 6), "3d": (3, 4, 5), "3d_trailing_1": (3, 4, 1), "4d": (3, 4, 5, 2), "4d_trailing_1": (3, 4, 5, 1),
          "4d_z1": (3, 4, 1, 3), "5d_x_y_z_1_c": (3, 4, 5, 1, 2), "5d_trailing_1": (3, 4, 5, 2, 1)}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("ext", [".nii", ".nii.gz"])
@pytest.mark.parametrize("dtype", ["int16", "float32", "float64"])
def test_dimensions_and_channels(tmp_path, shape, ext, dtype):
    path = _write(tmp_path / f"a{ext}", _values(dtype, SHAPES[shape]), fields={"scl_slope": 2.0, "scl_inter": 1.0}
                  if dtype == "int16" else {})
    data, _ = _assert_same(path)
    nd = len(SHAPES[shape])
    expected = (1, *SHAPES[shape]) if nd <= 3 else (SHAPES[shape][-1], *SHAPES[shape][:-1])
    assert data.shape == expected


@pytest.mark.parametrize("ext", [".nii", ".nii.gz"])
def test_what_the_fast_path_leaves_to_loadimage(tmp_path, ext):
    """Complex and RGB data, 1D and 6D volumes: the fast path returns None, LoadImage reads them (RGB: refuses it, as
    before)."""
    rgb = np.zeros((3, 4, 5), [("R", "u1"), ("G", "u1"), ("B", "u1")])
    rgb["G"] = 7
    for name, arr in (("complex", (np.arange(60) * (1 + 2j)).astype(np.complex64).reshape(3, 4, 5)), ("rgb", rgb),
                      ("1d", np.arange(7, dtype=np.float32)),
                      ("6d", np.arange(2 * 3 * 2 * 1 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 1, 2, 2))):
        path = _write(tmp_path / f"{name}{ext}", arr)
        assert cases._read_nifti(path) is None, name
        if name == "rgb":
            with pytest.raises(CaseError, match="Cannot cast array data"):
                read_volume(path)
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # LoadImage casts complex to float32 with a ComplexWarning
            assert read_volume(path)[0].dtype == np.float32


# ----------------------------------------------------------------------------------------------------------------
# geometry: sform / qform codes, negative qfac, pixdim that disagrees with the affine (MONAI's header correction)
# ----------------------------------------------------------------------------------------------------------------
SCALED = OBLIQUE @ np.diag([2.0, 2.0, 2.0, 1.0])
GEOMETRIES = {
    "sform2_qform1": {},
    "sform1_qform0": {"sform_code": 1, "qform_code": 0},
    "sform0_qform1": {"sform_code": 0, "qform_code": 1},
    "both_0": {"sform_code": 0, "qform_code": 0},
    "both_0_neg_qfac": {"sform_code": 0, "qform_code": 0, "fields": {"pixdim": [-1, 0.7, 0.8, 2.5, 1, 1, 1, 1]}},
    "qform_neg_qfac": {"sform_code": 0, "qform_code": 2, "affine": np.diag([-0.9, 1.1, 2.5, 1.0])},
    "positive_det": {"affine": np.diag([0.9, 1.1, 2.5, 1.0])},
    # sform's voxel sizes disagree with pixdim, the qform's agree: MONAI replaces the sform by the qform
    "sform_wrong_qform_right": {"qform_affine": OBLIQUE, "affine": SCALED, "sform_code": 2, "qform_code": 1},
    # qform wrong (pixdim from the sform), sform code 0: MONAI replaces the qform by the sform
    "qform_wrong_sform_code0": {"qform_affine": SCALED, "sform_code": 0, "qform_code": 1,
                                "fields": {"pixdim": [-1, *np.sqrt((OBLIQUE[:3, :3] ** 2).sum(0)), 1, 1, 1, 1]}},
    # neither agrees with pixdim: MONAI sets pixdim from the affine (the affine stays)
    "neither_agrees": {"fields": {"pixdim": [-1, 5.0, 5.0, 5.0, 1, 1, 1, 1]}},
    "neither_agrees_codes_0": {"sform_code": 0, "qform_code": 0, "fields": {"pixdim": [1, 5.0, 0.0, 5.0, 1, 1, 1, 1]}},
    "zero_pixdim": {"sform_code": 0, "qform_code": 0, "fields": {"pixdim": [1, 0.0, 0.0, 0.0, 0, 0, 0, 0]}},
    "pixdim4_translation": {"fields": {"pixdim": [-1, 1.5, 2.0, 3.0, 0.0, 1, 1, 1]}},
    "nan_in_sform": {"fields": {"srow_x": [np.nan, 0.0, 0.0, 1.0]}},
    "huge_translation": {"fields": {"srow_y": [0.0, 0.0, 2.0, 1e30], "qoffset_z": -1e30}},
}


@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("shape", [(3, 4, 5), (3, 4, 5, 2), (3, 4, 5, 1, 2), (5, 6)], ids=["3d", "4d", "5d", "2d"])
@pytest.mark.parametrize("nifti2", [False, True], ids=["nifti1", "nifti2"])
def test_sform_qform_geometry(tmp_path, geometry, shape, nifti2):
    spec = dict(GEOMETRIES[geometry])
    fields = dict(spec.pop("fields", {}))
    if "pixdim" in fields:  # the remaining pixdim entries as written, the spatial ones as given
        stored = nib.load(_write(tmp_path / "probe.nii", np.zeros(shape, np.float32), nifti2=nifti2, **spec))
        pixdim = np.array(stored.header["pixdim"], dtype=np.float64)
        pixdim[: len(fields["pixdim"])] = fields["pixdim"]
        fields["pixdim"] = pixdim
    path = _write(tmp_path / "g.nii.gz", _values("float32", shape), nifti2=nifti2, fields=fields, **spec)
    _assert_same(path)


def test_the_header_correction_is_exercised(tmp_path):
    """The geometry matrix holds a file whose affine MONAI corrects (else it would not test the port)."""
    spec = dict(GEOMETRIES["sform_wrong_qform_right"])
    path = _write(tmp_path / "g.nii.gz", np.zeros((3, 4, 5), np.float32), **spec)
    _, aff = _assert_same(path)
    assert not np.allclose(nib.load(path).affine, aff)  # nibabel alone gives the sform, MONAI the qform
    assert np.allclose(aff, nib.load(path).get_qform(), atol=1e-6)


def test_intent_codes_and_descriptions(tmp_path, no_loader):
    """Header fields nibabel's reading does not use (intent, description, units) change nothing."""
    for code in (0, 2, 1002, 1007, 1011, 2003):
        path = _write(tmp_path / f"i{code}.nii.gz", _values("float32", (3, 4, 5, 2)),
                      fields={"intent_code": code, "descrip": b"\xff\xfe odd bytes", "xyzt_units": 10})
        _assert_same(path)


# ----------------------------------------------------------------------------------------------------------------
# errors
# ----------------------------------------------------------------------------------------------------------------
def _message(fn, path: Path) -> str:
    with pytest.raises(CaseError) as e:
        fn(path)
    return str(e.value)


@pytest.mark.parametrize("ext", [".nii", ".nii.gz"])
def test_unreadable_files_give_the_same_error(tmp_path, ext, no_loader):
    good = _write(tmp_path / f"good{ext}", _values("float32", (6, 7, 8)))
    raw = good.read_bytes()
    broken = {"half": raw[: len(raw) // 2], "header_only": raw[:200], "garbage": bytes(range(256)) * 4,
              "tail_cut": raw[:-3]}
    if ext == ".nii.gz":
        body = bytearray(raw)
        body[len(body) // 2] ^= 0xFF
        broken["flipped_byte"] = bytes(body)
    raised = 0
    for name, content in broken.items():
        path = tmp_path / f"{name}{ext}"
        path.write_bytes(content)
        try:
            _ORIGINAL_LOADER(path)
        except CaseError:
            pass
        else:  # nibabel reads it (e.g. a gzip stream cut inside its trailer): so does the fast path, the same way
            _assert_same(path)
            continue
        message = _message(read_volume, path)  # the fast path raises it (the LoadImage path is refused here)
        assert message.startswith(f"cannot read {path}: ") and message.endswith("(a truncated or corrupt file?)")
        assert message == _message(_ORIGINAL_LOADER, path), name
        raised += 1
    assert raised >= 3


def test_a_corrupt_file_that_nibabel_half_reads(tmp_path):
    """A header that names a data type nibabel cannot read: LoadImage and the fast path raise the same error."""
    path = _write(tmp_path / "bad.nii", _values("float32", (3, 4, 5)), fields={"datatype": 9999})
    assert _message(read_volume, path) == _message(_ORIGINAL_LOADER, path)


# ----------------------------------------------------------------------------------------------------------------
# when the fast path must not be taken
# ----------------------------------------------------------------------------------------------------------------
def test_monai_dicom_reader_set_leaves_nifti_to_loadimage(tmp_path, monkeypatch):
    path = _write(tmp_path / "a.nii.gz", _values("float32", (3, 4, 5)))
    monkeypatch.setenv("MONAI_DICOM_READER", "itk")
    assert cases._read_nifti(path) is None


def test_other_formats_keep_their_path(tmp_path):
    np.save(tmp_path / "a.npy", np.ones((3, 4, 5), np.float32))
    assert cases._read_nifti(tmp_path / "a.npy") is None
    assert read_volume(tmp_path / "a.npy")[0].shape == (1, 3, 4, 5)


@pytest.mark.parametrize("case", ["scaling_overflow", "cast_overflow"])
def test_warnings_made_errors_give_the_same_error(tmp_path, case, no_loader):
    """Under ``-W error`` a reading warning (nibabel's scaling overflows, the float32 cast overflows) is the same
    CaseError in both paths."""
    if case == "scaling_overflow":
        path = _write(tmp_path / "a.nii.gz", _values("float32", (3, 4, 5)), fields={"scl_slope": 1e30})
    else:
        path = _write(tmp_path / "a.nii.gz", np.full((3, 4, 5), 1e300, np.float64))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        message = _message(read_volume, path)
        assert "RuntimeWarning: overflow" in message
        assert message == _message(_ORIGINAL_LOADER, path)


# ----------------------------------------------------------------------------------------------------------------
# .nii.gz inflated by ISA-L (python-isal) where installed, else by the standard library's gzip through nibabel
# ----------------------------------------------------------------------------------------------------------------
class _SpyGzip:
    """Stands for ``isal.igzip``: counts the files it opens (through ``real``) or fails each open."""

    def __init__(self, real, fail: bool = False):
        self.real, self.fail, self.opened = real, fail, []

    def open(self, name, mode):
        self.opened.append(name)
        if self.fail:
            raise OSError("the fast reader failed")
        return self.real.open(name, mode)


@pytest.mark.parametrize("kind", ["float32_3d", "int16_scaled_4d", "float64_nifti2_big_endian", "uint8_2d"])
def test_gz_inflated_by_isal_equals_the_standard_read(tmp_path, kind, monkeypatch, no_loader):
    igzip = pytest.importorskip("isal.igzip")
    data, opts = {"float32_3d": (_values("float32", (37, 41, 29)), {}),
                  "int16_scaled_4d": (_values("int16", (20, 21, 22, 3)), {"fields": {"scl_slope": 0.37,
                                                                                   "scl_inter": -12.5}}),
                  "float64_nifti2_big_endian": (_values("float64", (17, 19, 23)), {"nifti2": True, "endian": ">"}),
                  "uint8_2d": (_values("uint8", (64, 48)), {})}[kind]
    path = _write(tmp_path / "a.nii.gz", data, **opts)
    spy = _SpyGzip(igzip)
    monkeypatch.setattr(cases, "_igzip", spy)
    (fast, aff), warned = _fast(path)
    assert spy.opened == [str(path)]  # ISA-L's reader read the data
    monkeypatch.setattr(cases, "_igzip", None)
    (plain, plain_aff), plain_warned = _fast(path)
    assert np.array_equal(fast.view(np.uint32), plain.view(np.uint32)) and fast.strides == plain.strides
    assert np.array_equal(aff, plain_aff) and warned == plain_warned
    monkeypatch.setattr(cases, "_igzip", igzip)
    _assert_same(path)  # and both are LoadImage's


def test_a_failing_isal_read_falls_back_to_the_standard_read(tmp_path, monkeypatch, no_loader):
    """ISA-L's reader failing (here on every open) costs a second read, never a different result or error."""
    path = _write(tmp_path / "a.nii.gz", _values("float32", (9, 10, 11)))
    monkeypatch.setattr(cases, "_igzip", None)
    (ref, _), _ = _fast(path)
    spy = _SpyGzip(None, fail=True)
    monkeypatch.setattr(cases, "_igzip", spy)
    (got, _), warned = _fast(path)
    assert spy.opened == [str(path)] and warned == []
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    (tmp_path / "cut.nii.gz").write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    message = _message(read_volume, tmp_path / "cut.nii.gz")
    monkeypatch.setattr(cases, "_igzip", None)
    assert message == _message(read_volume, tmp_path / "cut.nii.gz")
