"""The configuration folder's keys are trusted without being named: only while no other user can change them."""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from monai_unc.io import signing

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")


@pytest.fixture
def config(tmp_path, monkeypatch):
    cfg = tmp_path / "cfg"
    cfg.mkdir(mode=0o700)
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(cfg))
    monkeypatch.delenv("MONAI_UNC_TRUSTED_KEYS", raising=False)
    keys = tmp_path / "made"
    signing.generate_key_pair(keys)
    (cfg / signing.TRUSTED_KEYS_DIR).mkdir(mode=0o755)
    shutil.copy(keys / signing.PUBLIC_KEY_FILE, cfg / signing.TRUSTED_KEYS_DIR / "dept.pub")
    os.chmod(cfg / signing.TRUSTED_KEYS_DIR / "dept.pub", 0o644)
    return cfg


def test_private_folder_is_trusted(config):
    keys = signing.trusted_public_keys()
    assert [f.name for _, f in keys.values()] == ["dept.pub"]


@pytest.mark.parametrize("where", ["folder", "trusted_keys", "key"])
@pytest.mark.parametrize("mode_bits", [stat.S_IWGRP, stat.S_IWOTH])
def test_writable_by_others_refused(config, monkeypatch, where, mode_bits):
    path = {"folder": config, "trusted_keys": config / signing.TRUSTED_KEYS_DIR,
            "key": config / signing.TRUSTED_KEYS_DIR / "dept.pub"}[where]
    os.chmod(path, stat.S_IMODE(path.stat().st_mode) | mode_bits)
    if mode_bits == stat.S_IWGRP:  # a group other users belong to (root can hand the path to a group without name)
        if os.getuid() == 0:
            os.chown(path, -1, 4243)
        else:
            monkeypatch.setattr(signing, "_private_group", lambda gid, uid: False)
    with pytest.raises(ValueError, match="writable by other users") as err:
        signing.trusted_public_keys()
    assert str(path) in str(err.value) and "chmod go-w" in str(err.value)


def test_group_writable_by_the_owners_private_group_accepted(config, monkeypatch):
    """umask 002 (user private groups): new folders are group-writable by a group only the user is in."""
    monkeypatch.setattr(signing, "_private_group", lambda gid, uid: True)
    os.chmod(config / signing.TRUSTED_KEYS_DIR, 0o775)
    assert len(signing.trusted_public_keys()) == 1


def test_private_group_of_the_current_user():
    import grp
    import pwd

    uid, gid = os.getuid(), os.getgid()
    group, user = grp.getgrgid(gid), pwd.getpwuid(uid).pw_name
    others = any(p.pw_gid == gid and p.pw_name != user for p in pwd.getpwall())  # their primary group
    assert signing._private_group(gid, uid) == (group.gr_name == user and set(group.gr_mem) <= {user}
                                                and not others)
    assert not signing._private_group(4243, uid)  # no such group


def test_own_public_key_checked_too(tmp_path, monkeypatch):
    cfg = tmp_path / "cfg"
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(cfg))
    monkeypatch.delenv("MONAI_UNC_TRUSTED_KEYS", raising=False)
    signing.generate_key_pair(cfg)
    assert len(signing.trusted_public_keys()) == 1
    os.chmod(cfg / signing.PUBLIC_KEY_FILE, 0o666)
    with pytest.raises(ValueError, match="writable by other users"):
        signing.trusted_public_keys()


def test_named_keys_are_not_checked(config, tmp_path):
    """A key named with --trusted-keys is the user's explicit choice (a shared department folder): not refused."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.copy(config / signing.TRUSTED_KEYS_DIR / "dept.pub", shared / "other.pub")
    os.chmod(shared, 0o777)
    shutil.rmtree(config / signing.TRUSTED_KEYS_DIR)
    assert [f.name for _, f in signing.trusted_public_keys([shared]).values()] == ["other.pub"]


def test_another_owner_refused(config, monkeypatch):
    key = config / signing.TRUSTED_KEYS_DIR / "dept.pub"
    if os.getuid() == 0:  # root may give the file away
        os.chown(key, 4242, -1)
    else:  # a user may not: pretend to be another one
        monkeypatch.setattr(os, "getuid", lambda: os.stat(key).st_uid + 1)
    with pytest.raises(ValueError, match="belongs to another user") as err:
        signing.trusted_public_keys()
    assert str(key) in str(err.value) or str(config) in str(err.value)


@pytest.mark.parametrize("umask", [0o000, 0o002, 0o022, 0o077])
def test_own_key_pair_is_trusted_whatever_the_umask(tmp_path, monkeypatch, umask):
    """Found by hostile testing: under ``umask 002`` with a shared primary group the first certification wrote
    ``signing_key.pub`` 0664, and this machine then refused its own key ("writable by other users"): the rule just
    certified could not be applied. The public key is written 0644 at most, the private key 0600."""
    cfg = tmp_path / "cfg"
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(cfg))
    monkeypatch.delenv("MONAI_UNC_TRUSTED_KEYS", raising=False)
    monkeypatch.delenv("MONAI_UNC_SIGNING_KEY", raising=False)
    monkeypatch.setattr(signing, "_private_group", lambda gid, uid: False)  # a department's group
    old = os.umask(umask)
    try:
        priv = signing.default_signing_key()
        pub = priv.with_suffix(".pub")
        pub.unlink()
        signing.complete_key_pair(priv)  # the public key derived again: the same writer
    finally:
        os.umask(old)
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert stat.S_IMODE(pub.stat().st_mode) == 0o644 & ~umask
    assert len(signing.trusted_public_keys()) == 1


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o640, 0o620])
def test_a_private_key_others_can_read_does_not_sign(tmp_path, monkeypatch, mode):
    """Found by hostile testing: a signing key readable by every user (``MONAI_UNC_SIGNING_KEY`` written 0644 by a
    copy, the configuration folder's key after a ``chmod``) signed rules without a word, where OpenSSH refuses such
    a key; now certification stops, naming the file, its mode and the ``chmod``, and writes nothing (not even an
    unsigned rule)."""
    from monai_unc.io.provenance import write_signed_json

    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setattr(signing, "_private_group", lambda gid, uid: False)  # a group other users are in
    priv, _ = signing.generate_key_pair(tmp_path / "cfg")
    os.chmod(priv, mode)
    with pytest.raises(signing.UnprotectedKeyError, match=r"can be read or changed by other users \(mode 0o6") as e:
        signing.sign_digest("sha256:" + "0" * 64, priv)
    assert f"chmod 600 '{priv}'" in str(e.value)
    with pytest.raises(signing.UnprotectedKeyError):
        write_signed_json(tmp_path / "rule.json", {"format": "f", "format_version": 1})
    assert not (tmp_path / "rule.json").exists()
    os.chmod(priv, 0o600)
    assert "signature" in write_signed_json(tmp_path / "rule.json", {"format": "f", "format_version": 1}).read_text()


def test_a_private_key_readable_by_the_owners_private_group_signs(tmp_path, monkeypatch):
    """umask 002 (user private groups): group access is the owner's alone."""
    monkeypatch.setattr(signing, "_private_group", lambda gid, uid: True)
    priv, _ = signing.generate_key_pair(tmp_path / "keys")
    os.chmod(priv, 0o640)
    assert signing.sign_digest("sha256:" + "0" * 64, priv)["algorithm"] == "ed25519"


def test_a_key_another_user_owns_may_be_readable_by_its_group(tmp_path, monkeypatch):
    """review38: a secret mounted read-only by root for the pod's group (Kubernetes fsGroup, mode 0440) was refused
    with a chmod its reader may not run; OpenSSH accepts it too. Group writing and others' access stay refused."""
    monkeypatch.setattr(signing, "_private_group", lambda gid, uid: False)
    priv, _ = signing.generate_key_pair(tmp_path / "keys")
    owner = priv.stat().st_uid
    monkeypatch.setattr(signing.os, "getuid", lambda: owner + 1)  # the reader is not the key's owner
    os.chmod(priv, 0o440)
    assert signing.sign_digest("sha256:" + "0" * 64, priv)["algorithm"] == "ed25519"
    for mode in (0o460, 0o444):
        os.chmod(priv, mode)
        with pytest.raises(signing.UnprotectedKeyError, match="its owner must run: chmod 600"):
            signing.sign_digest("sha256:" + "0" * 64, priv)
    monkeypatch.setattr(signing.os, "getuid", lambda: owner)  # the owner's own key: group reading is refused
    os.chmod(priv, 0o440)
    with pytest.raises(signing.UnprotectedKeyError, match="run: chmod 600"):
        signing.sign_digest("sha256:" + "0" * 64, priv)
