"""read_json_cached on a file system whose timestamps are coarser than the writes: a JSON record rewritten in place
with the same size within one timestamp tick (1 s on ext3 or NFS, 2 s on FAT, a few ms on Linux without fine-grained
timestamps, as on most CI machines) has the same path, inode, size and times as the version read before it."""

import json
import os
import types

import pytest

from monai_unc.io import files
from monai_unc.io.files import read_json_cached


class _CoarseClockOs(types.SimpleNamespace):
    """``os`` whose ``stat`` / ``fstat`` give every file the times it had when first seen: the clock did not tick."""

    def __init__(self):
        super().__init__(first={})

    def __getattr__(self, name):
        return getattr(os, name)

    def _frozen(self, st: os.stat_result) -> types.SimpleNamespace:
        t = self.first.setdefault((st.st_dev, st.st_ino), (st.st_mtime_ns, st.st_ctime_ns))
        return types.SimpleNamespace(st_mode=st.st_mode, st_dev=st.st_dev, st_ino=st.st_ino, st_size=st.st_size,
                                     st_mtime_ns=t[0], st_ctime_ns=t[1])

    def stat(self, path, *a, **k):
        return self._frozen(os.stat(path, *a, **k))

    def fstat(self, fd):
        return self._frozen(os.fstat(fd))


def test_a_record_rewritten_within_one_timestamp_tick_is_read_again(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "os", _CoarseClockOs())
    p = tmp_path / "infer.json"
    p.write_text(json.dumps({"settings": {"samples": 8}}))
    assert read_json_cached(p) == {"settings": {"samples": 8}}
    p.write_text(json.dumps({"settings": {"samples": 9}}))  # the same size, inode and (coarse) times
    assert read_json_cached(p) == {"settings": {"samples": 9}}


class _Proxy(types.SimpleNamespace):
    """A module with some of its functions replaced (the module itself is left alone)."""

    def __init__(self, module, **replaced):
        super().__init__(module=module, **replaced)

    def __getattr__(self, name):
        return getattr(self.module, name)


def test_a_settled_record_is_parsed_once(tmp_path, monkeypatch):
    p = tmp_path / "infer.json"
    parsed = []
    monkeypatch.setattr(files, "json", _Proxy(json, loads=lambda raw: parsed.append(raw) or json.loads(raw)))
    monkeypatch.setattr(files, "time", _Proxy(files.time, time_ns=lambda: os.stat(p).st_ctime_ns + 10**10))
    p.write_text(json.dumps({"settings": {"samples": 8}}))  # written 10 s ago, as the clock tells
    assert read_json_cached(p) == read_json_cached(p) == {"settings": {"samples": 8}}
    assert len(parsed) == 1
    p.write_text(json.dumps({"settings": {"samples": 16}}))  # a later change: other times, read again
    assert read_json_cached(p) == read_json_cached(p) == {"settings": {"samples": 16}} and len(parsed) == 2


def test_settled_measures_from_the_time_given(tmp_path):
    """One clock reading serves a scan of several files (read_prediction_regions' scan of the case records)."""
    st = os.stat(tmp_path)
    last = max(st.st_mtime_ns, st.st_ctime_ns)
    assert not files.settled(st)  # made just now
    assert not files.settled(st, now_ns=last + files.SETTLE_S * 1_000_000_000)
    assert files.settled(st, now_ns=last + files.SETTLE_S * 1_000_000_000 + 1)
    for bad in (1.5, True, "1"):
        with pytest.raises(TypeError, match="now_ns"):
            files.settled(st, now_ns=bad)
