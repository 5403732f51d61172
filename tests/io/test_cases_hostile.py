"""Unreadable files for the readers of ``monai_unc.io.cases``: empty, truncated or corrupt volumes and
probabilities raise a ``CaseError`` naming the file."""

from __future__ import annotations

import nibabel as nib
import numpy as np
import pytest

from tests.cli.test_cli_hostile import _half, _nii


def test_unreadable_volumes_name_the_file(tmp_path):
    from monai_unc.io import CaseError, read_probabilities, read_volume

    good = _nii(tmp_path / "g.nii.gz", np.ones((4, 4, 4), np.float32), np.eye(4))
    (tmp_path / "z.nii.gz").write_bytes(b"")
    _half(good, tmp_path / "t.nii.gz")
    np.savez(tmp_path / "p.npz", probabilities=np.full((2, 4, 4, 4), 0.5, np.float32))
    _half(tmp_path / "p.npz", tmp_path / "pt.npz")
    (tmp_path / "pz.npz").write_bytes(b"")
    with pytest.raises(CaseError, match=r"z.nii.gz: the file is empty \(0 bytes\)"):
        read_volume(tmp_path / "z.nii.gz")
    with pytest.raises(CaseError, match=r"cannot read .*t.nii.gz: .*truncated or corrupt"):
        read_volume(tmp_path / "t.nii.gz")
    for name in ("pt.npz", "pz.npz"):
        with pytest.raises(CaseError, match=f"cannot read .*{name}"):
            read_probabilities(tmp_path / name)
    assert read_probabilities(tmp_path / "p.npz")[0].shape == (2, 4, 4, 4)


def test_match_cases_with_no_measures_reads_no_map(tmp_path):
    """Regression: ``measures=[]`` read every map found, as ``None`` does (``dicom_export(measures=[])`` exported
    maps it was told not to)."""
    from monai_unc.io import match_cases

    for name in ("labels/a.nii.gz", "pred/a_seg.nii.gz", "pred/a_predictive_entropy.nii.gz"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert [sorted(c.maps) for c in match_cases(tmp_path / "labels", tmp_path / "pred", measures=[])] == [[]]
    assert [sorted(c.maps) for c in match_cases(tmp_path / "labels", tmp_path / "pred")] == [["predictive_entropy"]]


@pytest.mark.parametrize("values", [[0, 1e30], [-1e30, 0], [0, 2.0**63], [3, 2.0**62]])
def test_label_values_beyond_int64_are_named_as_they_are(values):
    """Integral float labels too large for int64 were converted first and reported as -9223372036854775808."""
    from monai_unc.io.cases import CaseError, check_label_map

    with pytest.raises(CaseError, match=r"outside classes 0\.\.3") as e:
        check_label_map(np.array(values, dtype=np.float64), "case 'a'", num_classes=4)
    assert "-9223372036854775808" not in str(e.value) and "e+" in str(e.value)


def test_label_checks_against_a_brute_force_reference():
    """The one-pass checks (min / max, a round trip through int64) accept and refuse what a value-by-value check
    does, with the same messages' kind, on float and integer maps."""
    from monai_unc.io.cases import CaseError, check_label_map

    rng = np.random.default_rng(5)

    def reference(a, c):
        for v in a.ravel().tolist():
            if not np.isfinite(v):
                return "NaN or inf"
        for v in a.ravel().tolist():
            if v != round(v):
                return "integer classes"
        for v in a.ravel().tolist():
            if v < 0 or (c is not None and v >= c) or v >= 2**62:  # beyond int64's exact range: no class
                return "outside"
        return None

    specials = [np.nan, np.inf, -np.inf, 0.5, -0.25, 2.0, 1e20, 4.0, -1.0]
    cases = 0
    for trial in range(270):
        dtype = [np.float32, np.float64, np.int16][trial % 3]
        a = rng.integers(0, 3, size=rng.integers(1, 40)).astype(dtype)
        if a.dtype.kind == "f":
            a[rng.integers(a.size)] = specials[(trial // 3) % len(specials)]
            cases += 1
        c = [None, 3, 5][(trial // 27) % 3]
        want = reference(a, c)
        if want is None:
            np.testing.assert_array_equal(check_label_map(a, "x", c), a.astype(np.int64))
        else:
            with pytest.raises(CaseError, match=want):
                check_label_map(a, "x", c)
    assert cases == 180


def test_image_loader_built_on_two_reading_threads_at_once(monkeypatch):
    """Regression: ``load_case``'s reading threads may build ``LoadImage`` at once; ``_image_loader`` silenced its
    construction warning with a process-wide ``warnings.catch_warnings``, so one thread's exit restored the filters
    under the other's construction (the warning escaped, an error where warnings are errors) and the other's exit
    left the filter in place."""
    import threading
    import time
    import warnings

    pytest.importorskip("monai")
    import monai.transforms

    from monai_unc.io import cases

    class SlowLoader:  # the construction takes a while and warns as MONAI's does without nvImageCodec
        def __init__(self, **kwargs) -> None:
            time.sleep(0.3)
            warnings.warn("NvImgCodecPydicomReader: nvImageCodec decoder plugin did not register", UserWarning)

    monkeypatch.setattr(monai.transforms, "LoadImage", SlowLoader)
    cases._image_loader.cache_clear()
    errors = []

    def build() -> None:
        try:
            cases._image_loader()
        except Exception as e:  # the warning made an error
            errors.append(e)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            before = list(warnings.filters)
            threads = [threading.Thread(target=build) for _ in range(2)]
            threads[0].start()
            time.sleep(0.1)
            threads[1].start()
            for t in threads:
                t.join()
            assert warnings.filters == before
        assert errors == []
    finally:
        cases._image_loader.cache_clear()


# ----------------------------------------------------------------------------------------------------------------
# .nii.gz through ISA-L's gzip reader: a deflate stream zlib refuses but ISA-L's inflate decodes
# ----------------------------------------------------------------------------------------------------------------
def _deflate_literals(data: bytes, dist_lengths: tuple[int, ...]) -> bytes:
    """One final dynamic-Huffman deflate block of ``data`` as literals only, declaring the distance code lengths
    ``dist_lengths`` (no distance is used). Literal/length code: bytes 0-254 on 8 bits, 255 and end-of-block on 9
    (a complete code). ``(1, 1)`` is a valid block; ``(2, 2)`` declares an incomplete distance code, which zlib
    refuses ("invalid distances set") and ISA-L's inflate accepts."""
    bits = {"acc": 0, "n": 0, "out": bytearray()}

    def put(value: int, n: int) -> None:  # least significant bit first
        bits["acc"] |= value << bits["n"]
        bits["n"] += n
        while bits["n"] >= 8:
            bits["out"].append(bits["acc"] & 0xFF)
            bits["acc"] >>= 8
            bits["n"] -= 8

    def huff(code: int, n: int) -> None:  # Huffman codes: most significant bit first
        put(int(format(code, f"0{n}b")[::-1], 2), n)

    def canonical(lengths: list[int]) -> list[int]:
        codes, code = [0] * len(lengths), 0
        for length in range(1, max(lengths) + 1):
            for i, n in enumerate(lengths):
                if n == length:
                    codes[i], code = code, code + 1
            code <<= 1
        return codes

    lit = [8] * 255 + [9, 9]
    used = sorted({8, 9, *dist_lengths})
    cl = [0] * 19
    for sym, n in zip(used, [1, 1] if len(used) == 2 else [1, 2, 2] if len(used) == 3 else [2, 2, 2, 2]):
        cl[sym] = n
    order = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15]
    hclen = max(4, max(order.index(s) for s in used) + 1)
    cl_codes, lit_codes = canonical(cl), canonical(lit)
    put(1, 1), put(2, 2), put(0, 5), put(len(dist_lengths) - 1, 5), put(hclen - 4, 4)  # final, dynamic, sizes
    for sym in order[:hclen]:
        put(cl[sym], 3)
    for n in lit + list(dist_lengths):
        huff(cl_codes[n], cl[n])
    for byte in data:
        huff(lit_codes[byte], lit[byte])
    huff(lit_codes[256], lit[256])
    if bits["n"]:
        bits["out"].append(bits["acc"] & 0xFF)
    return bytes(bits["out"])


def _gzip_with_second_block(raw: bytes, dist_lengths: tuple[int, ...], crc_xor: int = 0) -> bytes:
    """``raw`` gzipped: its first 64 KiB by zlib (which ``nib.load`` reads the header from), the rest as
    :func:`_deflate_literals`."""
    import struct
    import zlib

    c = zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = c.compress(raw[:65536]) + c.flush(zlib.Z_SYNC_FLUSH) + _deflate_literals(raw[65536:], dist_lengths)
    trailer = struct.pack("<II", zlib.crc32(raw) ^ crc_xor, len(raw) & 0xFFFFFFFF)
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + body + trailer


def test_a_stream_only_isal_inflates_gives_its_crc_checked_content(tmp_path, monkeypatch):
    """ISA-L's inflate accepts incomplete Huffman codes, which zlib refuses: a ``.nii.gz`` whose deflate stream
    declares one (here in its second block, after the header ``nib.load`` reads) is refused by nibabel, MONAI's
    ``LoadImage`` and the ``gzip`` program ("invalid distances set"), while ``read_volume`` with python-isal installed
    reads it. What it reads is the content the gzip trailer's CRC-32 vouches for (ISA-L checks it); a wrong CRC-32
    gives ``LoadImage``'s error with either reader. The one known difference between the two readers (documented in
    ``read_volume``); this pins it, so that a change of either shows here."""
    import gzip
    import zlib

    nib = pytest.importorskip("nibabel")
    from monai_unc.io import CaseError, cases, read_volume

    x = np.arange(40 * 50 * 30, dtype=np.float32).reshape(40, 50, 30) / 7
    nib.save(nib.Nifti1Image(x, np.eye(4)), tmp_path / "plain.nii")
    raw = (tmp_path / "plain.nii").read_bytes()
    assert gzip.decompress(_gzip_with_second_block(raw, (1, 1))) == raw  # the encoder writes valid streams
    odd, bad_crc = tmp_path / "odd.nii.gz", tmp_path / "odd_crc.nii.gz"
    odd.write_bytes(_gzip_with_second_block(raw, (2, 2)))
    bad_crc.write_bytes(_gzip_with_second_block(raw, (2, 2), crc_xor=1))
    with pytest.raises(zlib.error, match="invalid distances set"):
        gzip.decompress(odd.read_bytes())
    monkeypatch.setattr(cases, "_igzip", None)  # the standard library's gzip: LoadImage's error
    for path in (odd, bad_crc):
        with pytest.raises(CaseError, match=f"cannot read .*{path.name}: error: .*invalid distances set"):
            read_volume(path)
    pytest.importorskip("monai")
    with pytest.raises(CaseError, match=f"cannot read .*{odd.name}: error: .*invalid distances set"):
        cases._read_with_loader(odd)  # MONAI's LoadImage
    igzip = pytest.importorskip("isal.igzip")
    monkeypatch.setattr(cases, "_igzip", igzip)
    data, affine = read_volume(odd)
    assert np.array_equal(data, x[None]) and np.array_equal(affine, np.eye(4))
    with pytest.raises(CaseError, match=f"cannot read .*{bad_crc.name}: error: .*invalid distances set"):
        read_volume(bad_crc)


def test_the_isal_read_checks_the_crc_even_when_bytes_follow_the_data(tmp_path, monkeypatch):
    """A stream only ISA-L inflates, holding 300 kB after the image's data and a wrong CRC-32: the ISA-L read goes on
    to the end of the stream, so the CRC-32 is checked (else the data would be returned on ISA-L's word alone: the
    trailer lies past what the array needs) and the file gets ``LoadImage``'s error."""
    nib = pytest.importorskip("nibabel")
    igzip = pytest.importorskip("isal.igzip")
    from monai_unc.io import CaseError, cases, read_volume

    x = np.arange(40 * 50 * 30, dtype=np.float32).reshape(40, 50, 30) / 7
    nib.save(nib.Nifti1Image(x, np.eye(4)), tmp_path / "plain.nii")
    raw = (tmp_path / "plain.nii").read_bytes() + bytes(range(256)) * 1200  # nibabel reads up to the data's end
    good, bad_crc = tmp_path / "tail.nii.gz", tmp_path / "tail_crc.nii.gz"
    good.write_bytes(_gzip_with_second_block(raw, (2, 2)))
    bad_crc.write_bytes(_gzip_with_second_block(raw, (2, 2), crc_xor=1))
    monkeypatch.setattr(cases, "_igzip", igzip)
    data, _ = read_volume(good)
    assert np.array_equal(data, x[None])
    with pytest.raises(CaseError, match=f"cannot read .*{bad_crc.name}: error: .*invalid distances set"):
        read_volume(bad_crc)


@pytest.mark.parametrize("ext", [".nii", ".nii.gz"])
def test_a_header_claiming_more_data_than_the_file_holds_is_refused_before_allocating(tmp_path, ext):
    """Found by hostile testing: a few hundred bytes whose header claims 1 GiB of float32 made the reader allocate
    and zero the whole GiB (1.5 GiB peak) before it found the file too short; 2048^3 voxels would take 32 GiB. The
    header's claim is checked against the file's size (a ``.gz`` file inflates at most ~1032x) first."""
    import gzip
    import tracemalloc

    import nibabel as nib

    from monai_unc.io import CaseError, read_volume

    header = nib.Nifti1Header()
    header.set_data_dtype(np.float32)
    header.set_data_shape((1024, 1024, 256))
    header.set_qform(np.eye(4), 1)
    header.set_sform(np.eye(4), 1)
    body = header.binaryblock + b"\0" * 4 + np.zeros(8, np.float32).tobytes()
    path = tmp_path / f"bomb{ext}"
    path.write_bytes(gzip.compress(body) if ext == ".nii.gz" else body)
    tracemalloc.start()
    try:
        with pytest.raises(CaseError, match=r"bomb.nii(.gz)?: its header claims 1024x1024x256 voxels of float32 "
                                            r"\(1073741824 bytes of data\), but .*truncated or corrupt"):
            read_volume(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, peak


def test_ids_that_differ_only_invisibly_are_named_so(tmp_path):
    """Found by a review of hand-made folders: a label ``Müller`` typed on Linux (NFC) and a prediction copied from
    macOS (NFD) are refused as a missing prediction and an unlabelled one, in two messages that print the same name:
    the message now says that the two ids differ only in their Unicode form (with their escapes)."""
    from monai_unc.io import CaseError, match_cases

    labels, pred = tmp_path / "labels", tmp_path / "pred"
    labels.mkdir()
    pred.mkdir()
    vol = nib.Nifti1Image(np.zeros((4, 4, 4), np.uint8), np.eye(4))
    for cid in ("a", "M\u00fcller"):
        nib.save(vol, labels / f"{cid}.nii.gz")
    for cid in ("a", "Mu\u0308ller"):
        nib.save(vol, pred / f"{cid}_seg.nii.gz")
    with pytest.raises(CaseError, match=r"has no segmentation or probabilities .*\(the predictions have case "
                                        r"'Mu\u0308ller' \('Mu\\u0308ller'\), which differs from 'M\u00fcller' "
                                        r"\('M\\xfcller'\) only in letter case, Unicode form or spaces"):
        match_cases(labels, pred)
    with pytest.raises(CaseError, match=r"but no label in .*\(the labels have case 'M\u00fcller'"):
        match_cases(labels, pred, allow_missing=True)
    (labels / "M\u00fcller.nii.gz").rename(labels / "other.nii.gz")  # unrelated ids: no hint
    with pytest.raises(CaseError) as e:
        match_cases(labels, pred)
    assert "differs from" not in str(e.value)


def test_a_compressed_file_inflating_past_the_free_memory_is_refused_before_reading(tmp_path, monkeypatch):
    """The leftover of the review of hostile files on a shared server: a ``.nii.gz`` within deflate's ratio (1 MB of
    zeros claims 1 GiB; 32 MB could claim 32 GiB) passed the size check and was inflated whole, and the operating
    system killed the run, with the cases after it, mid-read. A claim beyond the machine's free memory and swap
    (read from /proc/meminfo) is a case error naming the file; a claim that fits is read as before."""
    import gzip

    import nibabel as nib

    from monai_unc import _utils
    from monai_unc.io import CaseError, cases, read_volume

    if _utils.host_memory_free() is None:
        pytest.skip("no /proc/meminfo")
    header = nib.Nifti1Header()
    header.set_data_dtype(np.float32)
    header.set_data_shape((512, 512, 128))  # 128 MiB of float32 zeros, 128 KiB compressed
    header.set_qform(np.eye(4), 1)
    header.set_sform(np.eye(4), 1)
    path = tmp_path / "big.nii.gz"
    path.write_bytes(gzip.compress(header.binaryblock + b"\0" * 4 + bytes(512 * 512 * 128 * 4), 1))
    monkeypatch.setattr(cases, "host_memory_free", lambda swap=False: 100 * 2**20)  # a machine with 100 MiB free
    with pytest.raises(CaseError, match=r"big.nii.gz: its header claims 512x512x128 voxels of float32 \(128 MiB of "
                                        r"data\), more than this machine's free memory \(100 MiB, swap included\)"):
        read_volume(path)
    monkeypatch.setattr(cases, "host_memory_free", lambda swap=False: 2**31)
    assert read_volume(path, dtype=None)[0].shape == (1, 512, 512, 128)


def test_host_memory_free_reads_meminfo(tmp_path, monkeypatch):
    """MemAvailable (plus SwapFree with swap) in bytes; None where /proc/meminfo does not tell."""
    import builtins

    from monai_unc import _utils

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:    1000 kB\nSwapFree:        24 kB\n")
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: real_open(meminfo if f == "/proc/meminfo" else f, *a, **k))
    assert _utils.host_memory_free() == 1000 * 1024
    assert _utils.host_memory_free(swap=True) == 1024 * 1024
    meminfo.write_text("MemTotal:       24000000 kB\n")
    assert _utils.host_memory_free() is None
