"""What a key file is, when it is not a usable Ed25519 PEM key: each failure says so, naming the file.

Found by hostile testing: every failure read ``is not a readable PEM public key (ValueError)`` -- for a missing file,
a folder, a passphrase-protected key, an OpenSSH key or a private key given as the public one alike -- and a large
file given by mistake was read whole before it was refused.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from monai_unc import cli
from monai_unc.io.signing import generate_key_pair, load_private_key, load_public_key
from monai_unc.workflows.keys import key_file_fingerprint


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    priv, pub = generate_key_pair(tmp_path / "pair")
    key = ed25519.Ed25519PrivateKey.generate()
    out = {"priv": priv, "pub": pub, "folder": tmp_path / "pair", "missing": tmp_path / "nope.pub"}
    out["encrypted"] = tmp_path / "enc.pem"
    out["encrypted"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.BestAvailableEncryption(b"secret")))
    out["openssh_priv"] = tmp_path / "id_ed25519"
    out["openssh_priv"].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                      serialization.PrivateFormat.OpenSSH,
                                                      serialization.NoEncryption()))
    out["openssh_pub"] = tmp_path / "id_ed25519.pub"
    out["openssh_pub"].write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                                 serialization.PublicFormat.OpenSSH))
    out["dangling"] = tmp_path / "gone.pub"
    out["dangling"].symlink_to(tmp_path / "removed.pub")
    out["text"] = tmp_path / "notes.txt"
    out["text"].write_text("hello\n")
    out["ec"] = tmp_path / "ec.pub"
    out["ec"].write_bytes(ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    out["big"] = tmp_path / "big.pub"
    with open(out["big"], "wb") as f:  # sparse: 2 GiB on disk costs nothing, reading it whole would
        f.truncate(2 << 30)
    return out


FAILURES = [  # (loader, file, what the message says the file is)
    ("public", "missing", "does not exist"),
    ("public", "folder", "is a folder, not a file"),
    ("public", "dangling", "is a symbolic link to"),
    ("public", "priv", "is a private key; give its public key (the .pub file beside it)"),
    ("public", "openssh_pub", "is an OpenSSH key; give a PEM key"),
    ("public", "text", "is not a PEM file"),
    ("public", "ec", "is not an Ed25519 key (another algorithm's)"),
    ("public", "big", "is larger than 1 MiB: not a PEM key file"),
    ("private", "missing", "does not exist"),
    ("private", "encrypted", "is encrypted with a passphrase: give an unencrypted copy (decrypt one with `openssl"),
    ("private", "openssh_priv", "is an OpenSSH key; give a PEM key"),
    ("private", "text", "is not a PEM file"),
    ("private", "pub", "is a PEM file that holds no private key"),
]


@pytest.mark.parametrize("loader, name, message", FAILURES, ids=[f"{f[0]}-{f[1]}" for f in FAILURES])
def test_key_file_failures_say_what_the_file_is(files, loader, name, message):
    load, what = (load_public_key, "trusted key") if loader == "public" else (load_private_key, "--signing-key")
    with pytest.raises(ValueError) as e:
        load(files[name], what=what)
    assert str(e.value).startswith(f"{what} {files[name]} {message}"), str(e.value)


def test_keys_show_names_the_key_file_in_one_line(files, capsys):
    assert key_file_fingerprint(files["priv"]) == key_file_fingerprint(files["pub"])
    for name, message in [("missing", "does not exist"), ("encrypted", "encrypted with a passphrase"),
                          ("openssh_pub", "is an OpenSSH key"), ("big", "larger than 1 MiB")]:
        assert cli.main(["keys", "--show", str(files[name])]) == 2
        lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(lines) == 1 and f"--show: key file {files[name]} " in lines[0] and message in lines[0], lines


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_key_file_says_so(files):
    files["pub"].chmod(0)
    try:
        with pytest.raises(ValueError, match="cannot be read"):
            load_public_key(files["pub"])
    finally:
        files["pub"].chmod(0o644)
