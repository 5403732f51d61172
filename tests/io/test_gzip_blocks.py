"""``GzipBlockWriter``: gzip compressed in blocks on several threads, read by every gzip reader, the same bytes for
any thread count, with zlib or ISA-L (python-isal) deflating the blocks; the NIfTI writers hold the same
uncompressed bytes as ``nib.save``."""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
import zlib

import nibabel as nib
import numpy as np
import pytest

import monai_unc.io.files as files
from monai_unc.io.files import (
    GZIP_BLOCK_BYTES,
    GzipBlockWriter,
    atomic_gzip,
    save_nifti,
    save_nifti_image,
    save_probabilities,
)

RNG = np.random.default_rng(7)
#: compressible but not trivially: small integers (deflate finds matches across the block edges)
DATA = RNG.integers(0, 6, 3 * GZIP_BLOCK_BYTES + 4321, dtype=np.uint8).tobytes()
try:
    from isal import isal_zlib
except ImportError:  # the ``fast`` extra is not installed: the ISA-L cases skip
    isal_zlib = None
#: the deflate engines under test: zlib always, ISA-L where python-isal is installed (``make install`` installs it)
ENGINES = ["zlib", pytest.param("isal", marks=pytest.mark.skipif(isal_zlib is None, reason="python-isal missing"))]


def _gzip(data: bytes, threads: int, chunk: int | None = None, level: int = 1, engine: str = "auto") -> bytes:
    buf = io.BytesIO()
    with GzipBlockWriter(buf, compresslevel=level, threads=threads, engine=engine) as out:
        step = chunk or max(1, len(data))
        for i in range(0, len(data), step):
            out.write(data[i:i + step])
    return buf.getvalue()


@pytest.mark.parametrize("n", [0, 1, 100, GZIP_BLOCK_BYTES - 1, GZIP_BLOCK_BYTES, GZIP_BLOCK_BYTES + 1,
                               2 * GZIP_BLOCK_BYTES, len(DATA)])
@pytest.mark.parametrize("engine", ENGINES)
def test_every_length_reads_back_with_python_gzip_and_zlib(n, engine):
    blob = _gzip(DATA[:n], threads=3, engine=engine)
    assert gzip.decompress(blob) == DATA[:n]
    d = zlib.decompressobj(31)  # one gzip member: nothing after its end
    assert d.decompress(blob) == DATA[:n] and d.eof and d.unused_data == b""


@pytest.mark.parametrize("engine", ENGINES)
def test_the_bytes_do_not_depend_on_the_threads_or_on_the_writes(engine):
    reference = _gzip(DATA, threads=1, engine=engine)
    for threads in (2, 5):
        for chunk in (None, 1000, 77_777, GZIP_BLOCK_BYTES, GZIP_BLOCK_BYTES + 3):
            assert _gzip(DATA, threads, chunk, engine=engine) == reference, (threads, chunk)


def test_blocks_are_primed_with_the_previous_window():
    """A repeat that spans a block edge is found: the stream is no larger than a few bytes per block over zlib's
    one-piece deflate of the whole data (unprimed, each block would start with the pattern as literals). zlib's
    engine: ISA-L's level 1 finds few repeats in such random data with or without the window, so the size shows
    nothing there; its primed blocks are read back by the other tests."""
    block = RNG.integers(0, 256, 2_000, dtype=np.uint8).tobytes()  # incompressible bytes, repeated 2 kB apart
    data = block * (2 * GZIP_BLOCK_BYTES // len(block) + 2)
    ours = len(_gzip(data, threads=2, engine="zlib"))
    plain = len(zlib.compress(data, 1))
    assert plain < len(data) // 10 and ours <= plain * 1.01 + 64, (ours, plain)


@pytest.mark.skipif(isal_zlib is None, reason="python-isal missing")
def test_auto_takes_isal_at_level_1_only_and_the_content_is_the_same():
    """``auto``: ISA-L's deflate at level 1 (another stream than zlib's, the same content), zlib at the others."""
    data = np.linspace(0, 1, 700_000, dtype=np.float32).tobytes()  # a smooth float map: deflate finds matches
    for threads in (1, 3):
        auto, isal, plain = (_gzip(data, threads, engine=e) for e in ("auto", "isal", "zlib"))
        assert auto == isal != plain
        assert gzip.decompress(auto) == gzip.decompress(plain) == data
    for level in (0, 6):
        assert _gzip(DATA[:200_000], 2, level=level) == _gzip(DATA[:200_000], 2, level=level, engine="zlib")
    with pytest.raises(ValueError, match="engine 'isal' writes at compresslevel 1 only"):
        GzipBlockWriter(io.BytesIO(), compresslevel=6, engine="isal")


def test_without_isal_auto_is_zlib_and_isal_is_refused(monkeypatch):
    monkeypatch.setattr(files, "_isal_zlib", None)
    assert _gzip(DATA, 2) == _gzip(DATA, 2, engine="zlib")
    buf = io.BytesIO()
    with pytest.raises(ValueError, match="engine 'isal' needs python-isal"):
        GzipBlockWriter(buf, engine="isal")
    assert buf.getvalue() == b""  # nothing written before the arguments are checked


def test_levels_and_header():
    for level in (0, 1, 6, 9):
        blob = _gzip(DATA[:300_000], threads=2, level=level)
        assert gzip.decompress(blob) == DATA[:300_000]
        assert blob[:8] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00"  # no name, no time: the same input, the same bytes
    assert _gzip(b"x", 1, level=1)[8] == 4 and _gzip(b"x", 1, level=9)[8] == 2


@pytest.mark.skipif(shutil.which("gzip") is None, reason="the gzip program is not installed")
def test_the_gzip_program_reads_it(tmp_path):
    path = tmp_path / "a.gz"
    path.write_bytes(_gzip(DATA, threads=4))
    subprocess.run(["gzip", "-t", str(path)], check=True)
    assert subprocess.run(["gzip", "-dc", str(path)], check=True, capture_output=True).stdout == DATA


def test_bad_arguments_and_moves():
    with pytest.raises(ValueError, match="compresslevel"):
        GzipBlockWriter(io.BytesIO(), compresslevel=10)
    with pytest.raises(ValueError, match="compresslevel"):
        GzipBlockWriter(io.BytesIO(), compresslevel=True)
    with pytest.raises(ValueError, match="threads"):
        GzipBlockWriter(io.BytesIO(), threads=0)
    for engine in ("pigz", None, 1):
        with pytest.raises(ValueError, match="engine must be one of"):
            GzipBlockWriter(io.BytesIO(), engine=engine)
    w = GzipBlockWriter(io.BytesIO(), threads=2)
    w.write(b"abc")
    assert w.seek(3) == 3 and w.seek(0, 1) == 3 and w.tell() == 3
    with pytest.raises(OSError, match="cannot seek"):
        w.seek(0)
    w.close()
    w.close()  # a second close does nothing
    with pytest.raises(ValueError, match="closed"):
        w.write(b"more")


def test_an_error_while_writing_writes_no_trailer_and_stops_the_threads():
    buf = io.BytesIO()
    w = GzipBlockWriter(buf, threads=3)
    with pytest.raises(RuntimeError), w:
        w.write(DATA)
        raise RuntimeError("the writer failed")
    assert w.closed and w._pool is None
    with pytest.raises((EOFError, OSError)):  # a truncated stream, never a short file that reads as complete
        gzip.decompress(buf.getvalue())


def _images():
    yield nib.Nifti1Image(RNG.random((97, 61, 53)).astype(np.float32), np.diag([1.5, 2.0, 3.0, 1.0]))
    yield nib.Nifti1Image(RNG.integers(0, 4, (40, 50, 30, 3)).astype(np.int16), np.eye(4))
    yield nib.Nifti2Image(RNG.random((64, 64, 40)), np.diag([0.7, 0.7, 2.5, 1.0]))
    yield nib.Nifti1Image(np.zeros((2, 2, 2), np.uint8), np.eye(4))


@pytest.mark.parametrize("i", range(4))
@pytest.mark.parametrize("engine", ENGINES)
def test_nifti_files_hold_the_bytes_nibabel_writes(tmp_path, i, engine, monkeypatch):
    if engine == "zlib":
        monkeypatch.setattr(files, "_isal_zlib", None)
    image = list(_images())[i]
    nib.save(image, str(tmp_path / "ref.nii.gz"))
    save_nifti_image(image, tmp_path / "ours.nii.gz")
    assert gzip.decompress((tmp_path / "ours.nii.gz").read_bytes()) == \
        gzip.decompress((tmp_path / "ref.nii.gz").read_bytes())
    back = nib.load(tmp_path / "ours.nii.gz")
    assert type(back) is type(image)
    np.testing.assert_array_equal(np.asanyarray(back.dataobj), np.asanyarray(image.dataobj))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ours.nii.gz", "ref.nii.gz"]  # no temporary left


@pytest.mark.parametrize("engine", ENGINES)
def test_volumes_read_back_through_itk_and_monai(tmp_path, engine, monkeypatch):
    if engine == "zlib":
        monkeypatch.setattr(files, "_isal_zlib", None)
    probs = RNG.random((3, 70, 80, 60)).astype(np.float32)  # 4 blocks of the 4D file
    path = save_probabilities(probs, np.diag([1.2, 1.0, 2.0, 1.0]), tmp_path / "p.nii.gz")
    sitk = pytest.importorskip("SimpleITK")
    arr = sitk.GetArrayFromImage(sitk.ReadImage(str(path)))  # ITK's zlib reader: (C, z, y, x)
    np.testing.assert_array_equal(arr.transpose(0, 3, 2, 1), probs)
    from monai.transforms import LoadImage

    data = LoadImage(image_only=True, ensure_channel_first=True)(str(path))
    np.testing.assert_array_equal(np.asarray(data), probs)


def test_the_files_do_not_depend_on_the_threads(tmp_path, monkeypatch):
    import torch

    data = RNG.random((80, 90, 70)).astype(np.float32)
    blobs = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(torch, "get_num_threads", lambda t=threads: t)
        blobs.append(save_nifti(data, np.eye(4), tmp_path / f"u{threads}.nii.gz").read_bytes())
    assert blobs[0] == blobs[1] == blobs[2]


def test_atomic_gzip_reads_back_and_keeps_the_source(tmp_path):
    src = tmp_path / "a.nii"
    src.write_bytes(DATA)
    out = atomic_gzip(src, tmp_path / "a.nii.gz")
    assert gzip.decompress(out.read_bytes()) == DATA and src.read_bytes() == DATA
    with pytest.raises(ValueError, match="compresslevel"):
        atomic_gzip(src, tmp_path / "b.nii.gz", compresslevel=11)
    assert not (tmp_path / "b.nii.gz").exists()
