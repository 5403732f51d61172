"""Signed rules and keys under hostile review 60 (monai_unc.io.signing, the rule readers that check signatures)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from monai_unc.io import signing

posix = pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh configuration folder, nothing of the environment's keys."""
    monkeypatch.delenv("MONAI_UNC_SIGNING_KEY", raising=False)
    monkeypatch.delenv("MONAI_UNC_TRUSTED_KEYS", raising=False)
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "config"


# --------------------------------------------------------------------------------------------- the private group
def _groups(monkeypatch: pytest.MonkeyPatch, others_primary: bool) -> tuple[int, int]:
    """This user with a group named after them, no supplementary member; another user's primary group, or not."""
    import grp
    import pwd

    uid, gid = os.getuid(), os.getgid()
    name = pwd.getpwuid(uid).pw_name
    me = SimpleNamespace(pw_name=name, pw_uid=uid, pw_gid=gid)
    other = SimpleNamespace(pw_name="mallory-review60", pw_uid=uid + 4242, pw_gid=gid if others_primary else gid + 7)
    monkeypatch.setattr(grp, "getgrgid", lambda g: SimpleNamespace(gr_name=name, gr_gid=g, gr_mem=[]))
    monkeypatch.setattr(pwd, "getpwuid", lambda u: me if u == uid else other)
    monkeypatch.setattr(pwd, "getpwall", lambda: [me, other])
    return uid, gid


@posix
def test_a_group_that_is_another_users_primary_group_is_not_private(monkeypatch):
    """Another user whose primary group is the owner's group is in it without being listed in ``gr_mem``: a file that
    group can write is writable by that user (found by hostile review 60: such a group passed for private)."""
    uid, gid = _groups(monkeypatch, others_primary=True)
    assert not signing._private_group(gid, uid)


@posix
def test_a_group_named_after_its_only_user_is_private(monkeypatch):
    uid, gid = _groups(monkeypatch, others_primary=False)
    assert signing._private_group(gid, uid)


@posix
def test_trusted_keys_writable_by_another_users_primary_group_are_refused(config, tmp_path, monkeypatch):
    _, pub = signing.generate_key_pair(tmp_path / "dept")
    folder = config / signing.TRUSTED_KEYS_DIR
    folder.mkdir(parents=True, mode=0o700)
    (folder / "dept.pub").write_bytes(pub.read_bytes())
    os.chmod(folder, 0o770)
    _groups(monkeypatch, others_primary=True)
    with pytest.raises(ValueError, match="writable by other users"):
        signing.trusted_public_keys()


@posix
def test_a_private_key_readable_by_another_users_primary_group_does_not_sign(tmp_path, monkeypatch):
    priv, _ = signing.generate_key_pair(tmp_path / "keys")
    os.chmod(priv, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP)
    _groups(monkeypatch, others_primary=True)
    with pytest.raises(signing.UnprotectedKeyError, match="can be read or changed by other users"):
        signing.sign_digest("sha256:" + "0" * 64, priv)
