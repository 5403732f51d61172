"""The trusted keys a reader is given (:class:`monai_unc.io.signing.Trust`): its fields are checked, not coerced.

Found by hostile testing (review 54): ``Trust(allow_unsigned="no")`` accepted an unsigned rule (any non-empty string
is truthy), and ``Trust(keys="/path/k.pub")`` was read one character at a time (``--trusted-keys t: no such file or
folder``; ``keys="."`` trusted every ``*.pub`` of the current folder), a :class:`~pathlib.Path` alone failed with
``'PosixPath' object is not iterable``.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from monai_unc.io.provenance import check_signature, rule_digest, write_signed_json
from monai_unc.io.signing import Trust, generate_key_pair, trusted_public_keys


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("MONAI_UNC_SIGNING_KEY", raising=False)
    monkeypatch.delenv("MONAI_UNC_TRUSTED_KEYS", raising=False)
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "config"


@pytest.mark.parametrize("flag", ["no", "false", 0.0, 1, None, [True]])
def test_allow_unsigned_must_be_a_bool(flag):
    with pytest.raises(TypeError, match="allow_unsigned must be True or False"):
        Trust(allow_unsigned=flag)


def test_an_unsigned_document_is_not_accepted_by_a_text_flag(config):
    doc = {"a": 1}
    doc["digest"] = rule_digest(doc)
    with pytest.raises(TypeError, match="allow_unsigned"):
        check_signature(doc, Trust(allow_unsigned="no"), "doc")
    assert check_signature(doc, Trust(allow_unsigned=True), "doc").startswith("UNSIGNED")
    with pytest.raises(ValueError, match="is not signed"):
        check_signature(doc, Trust(allow_unsigned=False), "doc")


def test_one_key_file_alone_is_refused_naming_keys(config, tmp_path):
    _, pub = generate_key_pair(tmp_path / "other")
    for keys in (str(pub), pub, b"k.pub", ".", (str(pub), 3)):
        with pytest.raises(TypeError, match="keys must be a list of key files or folders"):
            Trust(keys=keys)
        with pytest.raises(TypeError, match="trusted_keys must be a list of key files or folders"):
            trusted_public_keys(keys)
    # a list or a tuple of paths, strings or Path objects, is what it takes
    signed = write_signed_json(tmp_path / "doc.json", {"a": 1}, key=pub.with_suffix(".pem"))
    doc = json.loads(signed.read_text())
    assert check_signature(doc, Trust(keys=[pub]), "doc").startswith("signed by")
    assert check_signature(doc, Trust(keys=(str(pub.parent),)), "doc").startswith("signed by")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("named", ["folder", "file"])
def test_a_named_pipe_among_the_trusted_keys_is_refused_not_waited_on(config, tmp_path, named):
    """A named pipe ``evil.pub`` in a ``--trusted-keys`` folder was opened for reading, which blocks until something
    writes to it: every command that checks a signature hung (named alone, it was "no such file or folder")."""
    folder = tmp_path / "keys"
    folder.mkdir()
    fifo = folder / "evil.pub"
    os.mkfifo(fifo)
    done = threading.Event()

    def unblock() -> None:  # before the fix: a writer after a few seconds ends the wait (and the test fails)
        while not done.wait(3.0):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # no reader yet
                pass

    helper = threading.Thread(target=unblock, daemon=True)
    helper.start()
    try:
        with pytest.raises(ValueError, match="evil.pub is not a regular file"):
            trusted_public_keys([folder if named == "folder" else fifo])
    finally:
        done.set()
        helper.join()
