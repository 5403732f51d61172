r"""Ed25519 signatures of certified files: who certified a rule, and that nothing changed since.

A rule file's content digest (:func:`~monai_unc.io.provenance.rule_digest`) tells an edited file from the one
written, but anyone who edits the file can recompute it. A signature cannot be recomputed without the private key:
certification signs the file's digest with a private Ed25519 key, and the commands that apply a rule
(``monai-unc triage``, ...) accept it only when the signature verifies against a *trusted* public key.

- The single-user flow needs no step: the first certification creates a key pair in the user's configuration folder
  (:func:`config_dir`: ``$MONAI_UNC_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/monai-unc``, else
  ``~/.config/monai-unc``): ``signing_key.pem`` (readable by its owner only) and ``signing_key.pub``; the public key
  of that folder is trusted on the same machine.
- A department keeps one signing key (``MONAI_UNC_SIGNING_KEY`` names it on the machine that certifies) and points
  every machine at its public keys: ``--trusted-keys FILE_OR_FOLDER`` or ``MONAI_UNC_TRUSTED_KEYS`` (paths separated
  by ``os.pathsep``); every ``*.pub`` file of the configuration folder's ``trusted_keys/`` is trusted too.

The signature is an object ``{"algorithm": "ed25519", "key": <fingerprint>, "public_key": <base64>, "value":
<base64>}`` in the file's ``signature`` field; what is signed is ``monai-unc signed document 1\n`` followed by the
digest of the whole file without its ``digest`` and ``signature`` fields. The public key in the file only says which
key signed it: a signature verifies only against a key the reader trusts.

A signature proves who certified the rule (the holder of the private key) and that nothing in the file changed
since. It does not prove that the calibration data were honest or representative.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .._utils import refusing
from .files import atomic_write, check_entry_kind, output_lock

__all__ = [
    "SIGNATURE_FIELD",
    "PRIVATE_KEY_FILE",
    "PUBLIC_KEY_FILE",
    "TRUSTED_KEYS_DIR",
    "Trust",
    "KeyPairMismatchError",
    "UnprotectedKeyError",
    "config_dir",
    "generate_key_pair",
    "complete_key_pair",
    "check_key_pair",
    "default_signing_key",
    "load_private_key",
    "load_public_key",
    "key_fingerprint",
    "trusted_public_keys",
    "check_owner_only_writable",
    "acl_grants",
    "sign_digest",
    "verify_signature",
]

#: the field of a signed document that holds its signature
SIGNATURE_FIELD = "signature"
#: the names of the key pair in the configuration folder
PRIVATE_KEY_FILE = "signing_key.pem"
PUBLIC_KEY_FILE = "signing_key.pub"
#: the folder of further trusted public keys (``*.pub``) in the configuration folder
TRUSTED_KEYS_DIR = "trusted_keys"
_DOMAIN = b"monai-unc signed document 1\n"
#: seconds the creation of a key pair waits for another process creating the pair in the same folder (milliseconds
#: of work: two first certifications on a fresh machine, two ``keys --create``)
_PAIR_LOCK_WAIT = 60.0


class KeyPairMismatchError(ValueError):
    """A key pair whose public key file is not the public key of its private key (``<name>.pub`` of ``<name>.pem``).

    Rules signed with the private key are then refused wherever the public key file is trusted (on this machine
    first), so the pair is refused where it is used (signing, ``monai-unc keys``) rather than signing with it; the
    public key file is never replaced silently (it may have been given to other machines).
    """


class UnprotectedKeyError(ValueError):
    """A private key file that other users can read or change: whoever copied it can certify rules as its owner.

    Refused where it would sign (:func:`sign_digest`), as OpenSSH refuses such a private key, rather than signing
    with it or writing the file unsigned; the message names the file, its mode and the ``chmod`` that fixes it. Also
    a lone private key another user owns, which :func:`generate_key_pair` does not complete as a half pair.
    """


def config_dir() -> Path:
    """The user's configuration folder of monai-unc (keys).

    ``$MONAI_UNC_CONFIG_DIR`` when set, else ``$XDG_CONFIG_HOME/monai-unc``, else ``~/.config/monai-unc``. A relative
    ``XDG_CONFIG_HOME`` is ignored, as the XDG specification says: in earlier versions the folder of the
    signing key and of the keys trusted without being named then depended on the current folder (a certification run
    from an output folder wrote its key pair there).

    Returns:
        The folder (it may not exist yet).

    Example:
        >>> isinstance(config_dir(), Path)
        True
    """
    own = os.environ.get("MONAI_UNC_CONFIG_DIR")
    if own:
        return Path(own).expanduser()
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or "").expanduser()
    base = xdg if xdg.is_absolute() else Path.home() / ".config"
    return base / "monai-unc"


def key_fingerprint(key: Ed25519PublicKey) -> str:
    """The fingerprint of a public key: ``SHA256:`` and the hex digest of its 32 raw bytes.

    Args:
        key: the public key.

    Returns:
        The fingerprint.

    Example:
        >>> key = Ed25519PrivateKey.from_private_bytes(bytes(32)).public_key()
        >>> key_fingerprint(key)[:15]
        'SHA256:139e3940'
    """
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "SHA256:" + hashlib.sha256(raw).hexdigest()


def _write_private(path: Path, data: bytes) -> Path:
    def write(tmp: Path) -> None:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    return atomic_write(path, write)


def _write_public(path: Path, key: Ed25519PublicKey) -> Path:
    """The public key file, writable by its owner only whatever the umask (0644 at most).

    Found by hostile testing: under ``umask 002`` with a shared primary group it was written 0664, and
    :func:`trusted_public_keys` then refused this machine's own key (writable by other users).
    """
    data = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def write(tmp: Path) -> None:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    return atomic_write(path, write)


def generate_key_pair(folder: str | os.PathLike, name: str = "signing_key", overwrite: bool = False, *,
                      command_line: bool = False) -> tuple[Path, Path]:
    """Create an Ed25519 key pair: ``<name>.pem`` (private, mode 0600) and ``<name>.pub`` (public, 0644), both PEM.

    The private key is written first. A half pair (``<name>.pem`` without ``<name>.pub``: a full disk or a kill
    between the two files) is completed: its public key is derived from the private key (:func:`complete_key_pair`)
    and the pair is returned, not replaced. The pair is made while holding the folder's lock
    (:func:`~monai_unc.io.files.output_lock`, waiting for another process that makes a pair there), and what the
    folder holds is checked under it: two processes never write a private key of one pair beside the public key of
    the other.

    Args:
        folder: where to write them (created with mode 0700 when missing).
        name: the file stem.
        overwrite: replace an existing pair (otherwise ``FileExistsError``; ``monai-unc keys --overwrite
            --create [FOLDER]``).
        command_line: how the refusal of an existing pair names the way to replace it: the command's options
            (``monai-unc keys --overwrite --create [FOLDER]``, set by ``monai-unc keys``); False (a Python caller):
            the parameter ``overwrite=True``. Keyword only.

    Returns:
        ``(private, public)`` paths.

    Raises:
        FileExistsError: a pair exists (and ``overwrite`` is False).
        KeyPairMismatchError: a pair exists whose public key is not that of its private key (and ``overwrite`` is
            False; one line naming both files and the remedy).
        UnprotectedKeyError: a half pair whose private key another user owns (POSIX; it is not completed).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     priv, pub = generate_key_pair(folder)
        ...     oct(priv.stat().st_mode & 0o777), pub.name
        ('0o600', 'signing_key.pub')
    """
    folder = Path(folder)
    priv, pub = folder / f"{name}.pem", folder / f"{name}.pub"
    # in the caller's words (found by review 63: the command line was told of overwrite=True, Python of the command)
    replace = "monai-unc keys --overwrite --create [FOLDER]" if command_line else "overwrite=True"
    exists = FileExistsError(f"a key pair exists at {priv}; keep it, or replace it with {replace}: rules signed "
                             "with it are then no longer trusted where its public key was")
    if not overwrite and priv.is_file() and pub.is_file() and _pair_matches(priv, pub):
        raise exists  # a whole pair: nothing to write (also in a folder the lock file cannot be made in)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    with output_lock(folder, "monai-unc keys", wait=_PAIR_LOCK_WAIT):  # what the folder holds is checked under it
        if not overwrite:
            if priv.exists() and not pub.exists():  # found by hostile testing: a half pair could not be completed
                _check_own_half_pair(priv)
                complete_key_pair(priv)
                return priv, pub
            if priv.exists() and pub.exists():
                check_key_pair(priv, pub)  # a mismatched pair: named, with its remedy
            if priv.exists() or pub.exists():
                raise exists
        key = Ed25519PrivateKey.generate()
        _write_private(priv, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        _write_public(pub, key.public_key())
    return priv, pub


def _check_own_half_pair(private: Path) -> None:
    """Refuse to complete a half pair whose private key another user owns (POSIX).

    A half pair is what this user's killed write left, so its private key is the user's own file. In earlier
    versions ``keys --create FOLDER`` (and the first certification) completed any lone ``signing_key.pem`` and
    said it kept it as the user's, so in a folder others can write one of them could plant a private key of their
    own, readable by a group the user is in, and forge every rule signed with it.

    Raises:
        UnprotectedKeyError: naming the file, its owner and the remedy.
    """
    if os.name != "posix":
        return
    owner = private.stat().st_uid
    if owner != os.getuid():
        raise UnprotectedKeyError(
            f"signing key {private} belongs to another user (uid {owner}), who can read it and certify rules with it: "
            "it is no half pair of yours to complete; make a pair of your own in a folder only you can write "
            "(monai-unc keys --create FOLDER)"
        )


def complete_key_pair(private: str | os.PathLike) -> Path:
    """The public key file of a private key ``<name>.pem``: ``<name>.pub`` beside it, written when missing.

    A public key is determined by its private key, so a half pair (the private key alone: a full disk or a kill
    between the two files of :func:`generate_key_pair`) is completed rather than replaced; an existing public key
    file is left as it is, and refused when it is not the private key's (:func:`check_key_pair`).

    Args:
        private: the private key file (PEM, Ed25519).

    Returns:
        The public key file (``.pub`` in place of the private key's suffix).

    Raises:
        ValueError: ``private`` is not a readable Ed25519 private key (naming it).
        KeyPairMismatchError: the existing public key file is not the private key's (naming both files).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     priv, pub = generate_key_pair(folder)
        ...     pub.unlink()
        ...     complete_key_pair(priv) == pub, load_public_key(pub) is not None
        (True, True)
    """
    private = Path(private)
    pub = private.with_suffix(".pub")
    if pub.exists():
        check_key_pair(private, pub)
    else:
        _write_public(pub, load_private_key(private).public_key())
    return pub


def _pair_matches(private: Path, public: Path) -> bool:
    """Whether ``public`` holds the public key of ``private`` (False when it is no readable public key)."""
    try:
        own = load_public_key(public)
    except ValueError:
        return False
    return key_fingerprint(own) == key_fingerprint(load_private_key(private).public_key())


def _pair_remedy(private: Path) -> str:
    """The commands that mend a mismatched pair ``<name>.pem`` / ``<name>.pub`` (one clause)."""
    public = private.with_suffix(".pub")
    if private.name != PRIVATE_KEY_FILE:  # a pair of another name: monai-unc keys makes signing_key.* only
        return (f"delete {public} and derive it from the private key (monai_unc.io.signing.complete_key_pair), or "
                "make a new pair with monai-unc keys --create --overwrite FOLDER")
    folder = "" if private.parent.resolve() == config_dir().resolve() else f" '{private.parent}'"
    return (f"run monai-unc keys --create --overwrite{folder} for a new pair (rules signed with the old key are then "
            f"no longer trusted), or keep the private key: delete {public} and run monai-unc keys --create{folder}, "
            "which derives it")


def check_key_pair(private: str | os.PathLike, public: str | os.PathLike | None = None) -> Path:
    """Refuse a public key file that is not the public key of its private key.

    A public key file beside its private key (``<name>.pub`` of ``<name>.pem``) is the one other machines, and this
    one, trust for what the private key signs; one of another pair (two processes creating a pair at once, a file
    copied over it) makes every rule signed with the private key untrusted there. Nothing is written.

    Args:
        private: the private key file.
        public: the public key file (None: ``.pub`` in place of the private key's suffix).

    Returns:
        The public key file.

    Raises:
        KeyPairMismatchError: the public key file is another key's, or no readable Ed25519 public key (one line
            naming both files and the remedy).
        ValueError: ``private`` is not a readable Ed25519 private key (naming it).

    Example:
        >>> import tempfile
        >>> mine, theirs = tempfile.TemporaryDirectory(), tempfile.TemporaryDirectory()
        >>> priv, pub = generate_key_pair(mine.name)
        >>> check_key_pair(priv) == pub
        True
        >>> other = generate_key_pair(theirs.name)[1]
        >>> _ = pub.write_bytes(other.read_bytes())
        >>> try:
        ...     check_key_pair(priv)
        ... except KeyPairMismatchError as e:
        ...     "is not the public key of" in str(e)
        True
        >>> mine.cleanup(); theirs.cleanup()
    """
    private = Path(private)
    public = private.with_suffix(".pub") if public is None else Path(public)
    mine = key_fingerprint(load_private_key(private).public_key())
    try:
        theirs = f"the public key {key_fingerprint(load_public_key(public))}"
    except ValueError:
        theirs = "no readable Ed25519 public key"
    if theirs != f"the public key {mine}":
        raise KeyPairMismatchError(
            f"key pair mismatch: {public} is not the public key of {private} ({public} holds {theirs}, {private} is "
            f"{mine}), so rules signed with {private} are refused where {public} is trusted; {_pair_remedy(private)}"
        )
    return public


#: the largest key file read: a PEM Ed25519 key is about 120 bytes (a folder of keys may hold other files)
_MAX_KEY_FILE = 1 << 20
_ENCRYPTED = ("encrypted with a passphrase: give an unencrypted copy (decrypt one with "
              "`openssl pkey -in KEY -out PLAIN`)")


def _load_pem_key(path: str | os.PathLike, load: Callable[[bytes], Any], cls: type, what: str, kind: str) -> Any:
    """Read a PEM key file with ``load`` and check it is a ``cls``; ``ValueError`` naming the file and what it is.

    Found by hostile testing: every failure said ``is not a readable PEM public key (ValueError)``, for a file that
    does not exist, a folder, a passphrase-protected key, an OpenSSH key or a private key given as the public one
    alike, and a multi-gigabyte file given by mistake was read whole into memory first.
    """
    p = Path(path)
    try:
        # a folder, a symbolic link to nothing, a named pipe (it blocked the read, found by hostile testing): said as
        # such
        check_entry_kind(p, what, folder=False)
    except OSError as e:
        raise ValueError(str(e)) from None
    if not p.exists():
        raise ValueError(f"{what} {path} does not exist")
    try:
        with open(p, "rb") as f:
            data = f.read(_MAX_KEY_FILE + 1)
    except OSError as e:
        raise ValueError(f"{what} {path} cannot be read ({e.strerror or type(e).__name__})") from None
    if len(data) > _MAX_KEY_FILE:
        raise ValueError(f"{what} {path} is larger than {_MAX_KEY_FILE // (1 << 20)} MiB: not a PEM key file")
    try:
        key = load(data)
    except (TypeError, ValueError, UnsupportedAlgorithm) as e:
        if isinstance(e, TypeError):  # cryptography: a passphrase-protected private key read with password=None
            hint = _ENCRYPTED
        elif b"-----BEGIN OPENSSH" in data or data.lstrip().startswith(b"ssh-"):
            hint = "an OpenSSH key; give a PEM key (monai-unc keys --create makes a pair)"
        elif kind == "public" and b"PRIVATE KEY-----" in data:
            hint = "a private key; give its public key (the .pub file beside it)"
        elif b"ENCRYPTED" in data:
            hint = _ENCRYPTED
        elif b"-----BEGIN " not in data:
            hint = "not a PEM file"
        else:
            hint = f"a PEM file that holds no {kind} key ({type(e).__name__})"
        raise ValueError(f"{what} {path} is {hint}") from None
    if not isinstance(key, cls):
        raise ValueError(f"{what} {path} is not an Ed25519 key (another algorithm's); monai-unc signs "
                         "with Ed25519 keys (monai-unc keys --create makes a pair)")
    return key


def load_private_key(path: str | os.PathLike, what: str = "signing key") -> Ed25519PrivateKey:
    """Read a PEM Ed25519 private key (unencrypted PKCS8).

    Args:
        path: the key file.
        what: how errors name the file.

    Returns:
        The key.

    Raises:
        ValueError: naming the file and what it is instead (missing, a folder, larger than 1 MiB, encrypted with a
            passphrase, an OpenSSH key, not PEM, not Ed25519).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     priv, pub = generate_key_pair(folder)
        ...     type(load_private_key(priv)).__name__.lstrip("_")
        'Ed25519PrivateKey'
    """
    return _load_pem_key(path, lambda data: serialization.load_pem_private_key(data, password=None),
                         Ed25519PrivateKey, what, "private")


def load_public_key(path: str | os.PathLike, what: str = "trusted key") -> Ed25519PublicKey:
    """Read a PEM Ed25519 public key.

    Args:
        path: the key file.
        what: how errors name the file.

    Returns:
        The key.

    Raises:
        ValueError: naming the file and what it is instead (missing, a folder, larger than 1 MiB, a private key,
            an OpenSSH key, not PEM, not Ed25519).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     priv, pub = generate_key_pair(folder)
        ...     try:
        ...         load_public_key(priv)
        ...     except ValueError as e:
        ...         print(str(e).replace(str(priv), "KEY"))
        trusted key KEY is a private key; give its public key (the .pub file beside it)
    """
    return _load_pem_key(path, serialization.load_pem_public_key, Ed25519PublicKey, what, "public")


def default_signing_key(create: bool = True) -> Path | None:
    """The private key certification signs with.

    ``$MONAI_UNC_SIGNING_KEY`` when set (it must exist), else ``signing_key.pem`` of :func:`config_dir`, created
    with its public key on first use when ``create``; with ``create``, a missing ``signing_key.pub`` beside it is
    derived from it (:func:`complete_key_pair`), so that this machine trusts what it signs. The pair is created under
    the folder's lock (:func:`generate_key_pair`): two first certifications at once (two processes on a fresh
    machine) both sign with the one pair the first made. A public key file beside the key (``.pub`` in place of its
    suffix) that is not its public key is refused (:func:`check_key_pair`): what it signed would not be trusted.

    Args:
        create: create the configuration folder's key pair when missing.

    Returns:
        The key file, or None (none, and ``create`` is False).

    Raises:
        KeyPairMismatchError: the public key file beside the key is another key's (naming both files and the remedy).
        UnprotectedKeyError: the configuration folder's ``signing_key.pem`` alone belongs to another user (POSIX).
        ValueError: ``$MONAI_UNC_SIGNING_KEY`` names no file.
    """
    named = os.environ.get("MONAI_UNC_SIGNING_KEY")
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ValueError(f"MONAI_UNC_SIGNING_KEY names {path}, which is not a file")
    else:
        cfg = config_dir()
        path = cfg / PRIVATE_KEY_FILE
        if create and not (path.is_file() and (cfg / PUBLIC_KEY_FILE).exists()):
            cfg.mkdir(parents=True, exist_ok=True, mode=0o700)
            with output_lock(cfg, "monai-unc keys", wait=_PAIR_LOCK_WAIT):  # another process may be making it
                if not (path.is_file() and (cfg / PUBLIC_KEY_FILE).exists()):  # ... and have made it meanwhile
                    generate_key_pair(cfg)  # a new pair, or the public key of a half pair
        if not path.is_file():
            return None
    if path.with_suffix(".pub").exists():
        _check_settled_pair(path)
    return path


def _check_settled_pair(private: Path) -> None:
    """:func:`check_key_pair`, a mismatch checked again once the folder's lock is free.

    Another process may be replacing the pair right now (``keys --create --overwrite`` writes the private key first).
    """
    if not _pair_matches(private, private.with_suffix(".pub")):
        with contextlib.suppress(OSError, ValueError), output_lock(private.parent, "monai-unc keys",
                                                                   wait=_PAIR_LOCK_WAIT):
            pass  # held by a process making the pair: wait until it is done (not held, or no lock here: at once)
    check_key_pair(private)


@dataclass(frozen=True)
class Trust:
    """Which signatures a reader accepts.

    Attributes:
        keys: trusted public key files, or folders of ``*.pub`` files, besides the defaults
            (:func:`trusted_public_keys`).
        allow_unsigned: accept an unsigned file (or one of an older format that cannot be verified); the reader
            says so in its outputs.
        command_line: how the refusals name the ways to trust a key or accept an unsigned file: the command line's
            options (``--trusted-keys``, ``--allow-unsigned``), set by the commands that read signed files; False (a
            Python caller): this class's fields (``trust=Trust(keys=[...])``, ``allow_unsigned=True``). Keyword only;
            not part of the repr or of equality.

    Example:
        >>> Trust(("keys/",))
        Trust(keys=('keys/',), allow_unsigned=False)
    """

    keys: tuple[str, ...] = ()
    allow_unsigned: bool = False
    command_line: bool = field(default=False, repr=False, compare=False, kw_only=True)

    def __post_init__(self) -> None:
        """Refuse fields of the wrong type.

        Found by hostile testing: ``allow_unsigned="no"`` accepted an unsigned rule, and ``keys="k.pub"`` was read
        one character at a time.

        Raises:
            TypeError: naming the field.
        """
        _check_key_entries(self.keys, "keys")
        for name in ("allow_unsigned", "command_line"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r:.80}")

    def hint(self, what: str) -> str:
        """How this reader's caller does ``what``, in its own words (:attr:`command_line`).

        Args:
            what: ``"allow"`` (use an unsigned file anyway), ``"allowed"`` (why one was used), ``"trust"`` (trust
                a public key) or ``"keys"`` (the name of a trusted key file or folder given, in a refusal of it).

        Returns:
            A clause for a message: the command line's option, or, for a Python caller, this class's field.

        Example:
            >>> Trust().hint("allow")
            'pass trust=Trust(..., allow_unsigned=True) to use it anyway (the check then says UNSIGNED)'
            >>> Trust(command_line=True).hint("allow")
            'pass --allow-unsigned to use it anyway (recorded in the outputs)'
        """
        cli = self.command_line
        if what == "allow":
            return ("pass --allow-unsigned to use it anyway (recorded in the outputs)" if cli else
                    "pass trust=Trust(..., allow_unsigned=True) to use it anyway (the check then says UNSIGNED)")
        if what == "allowed":
            return "--allow-unsigned was given" if cli else "the trust given has allow_unsigned=True"
        if what == "trust":
            return ("with --trusted-keys or MONAI_UNC_TRUSTED_KEYS" if cli else
                    "with trust=Trust(keys=[FILE_OR_FOLDER]) or MONAI_UNC_TRUSTED_KEYS")
        if what == "keys":
            return "--trusted-keys" if cli else "trusted key (trust=Trust(keys=[...]))"
        raise ValueError(f"what must be 'allow', 'allowed', 'trust' or 'keys', got {what!r:.80}")


def _check_key_entries(entries: Any, name: str) -> None:
    """Refuse ``entries`` that are not a list or tuple of key files or folders (``str`` or path objects).

    One path given alone (a string, a :class:`~pathlib.Path`) is a ``TypeError`` naming ``name``: a string was
    iterated one character at a time.
    """
    if not isinstance(entries, (list, tuple)) or not all(isinstance(e, (str, os.PathLike)) for e in entries):
        raise TypeError(f"{name} must be a list of key files or folders, got {entries!r:.80}")


def _key_files(entries: Iterable[str | os.PathLike], what: str) -> list[Path]:
    out = []
    for e in entries:
        if isinstance(e, str) and not e.strip():
            # found by hostile review 60: Path("") is the current folder, so ``--trusted-keys "$KEYS"`` with the
            # variable unset trusted every *.pub there (one planted in a shared folder a triage runs from)
            raise ValueError(f"{what}: an empty path names no key file or folder (it read as the current folder, whose "
                             "every *.pub would be trusted); give a key file or folder, '.' for the current one")
        p = Path(e).expanduser()
        if p.is_dir():
            out.extend(sorted(p.glob("*.pub")))
        elif p.exists():  # a file, or another entry that the key reader refuses by name
            out.append(p)
        else:
            raise ValueError(f"{what} {p}: no such file or folder")
    return out


def _private_group(gid: int, uid: int) -> bool:
    """Whether group ``gid`` is user ``uid``'s private group: named after the user, no other member.

    The umask 002 convention of many distributions makes new folders group-writable by that group, which lets nobody
    else write. A member is a user the group lists (``gr_mem``) or one whose primary group it is: in earlier
    versions another user given the group as primary group (``useradd -g alice bob``), whom ``gr_mem`` does not
    list, could write the trusted keys and read the private key while the group passed for private.
    """
    import grp
    import pwd

    try:
        user, group = pwd.getpwuid(uid).pw_name, grp.getgrgid(gid)
    except KeyError:  # an id without a name: not known to be private
        return False
    if group.gr_name != user or not set(group.gr_mem) <= {user}:
        return False
    return not any(p.pw_gid == gid and p.pw_name != user for p in pwd.getpwall())


#: the extended attribute of a file's POSIX access ACL, and its entry tags (Linux ``acl_ea.h``)
_ACL_XATTR = "system.posix_acl_access"
_ACL_USER, _ACL_GROUP, _ACL_MASK = 0x02, 0x08, 0x10


def acl_grants(path: str | os.PathLike, perms: int, group_perms: int | None = None) -> list[str]:
    """The users and groups other than the owner that a file's POSIX ACL grants ``perms`` (4 read, 2 write).

    The mode bits of a file with an access ACL show its mask in the group bits, which the owner's private group
    passes (the umask 002 convention): in earlier versions ``setfacl -m u:bob:r signing_key.pem`` left the key
    ``0640`` with the owner's private group, and bob could read it while the key was used to sign. Read from the
    ``system.posix_acl_access`` extended attribute (``os.getxattr``, Linux); a named user or group entry counts as
    its permissions under the ACL's mask, except the owner itself, the current user (whom the owner let in) and the
    owner's private group (named after the owner, no other member). Where the platform or the file system has no
    extended attributes, or the file no ACL, nothing is found.

    Args:
        path: the file or folder (links followed).
        perms: the permission bits that count (``4`` read, ``2`` write, ``6`` either).
        group_perms: those that count for a named group's entry (default ``perms``).

    Returns:
        One text per entry that grants them, e.g. ``"user bob (uid 1001): read"``; empty without such an entry.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile() as f:
        ...     acl_grants(f.name, 6)
        []
    """
    getxattr = getattr(os, "getxattr", None)
    if getxattr is None:  # not Linux: no POSIX ACLs to read this way
        return []
    try:
        raw = getxattr(os.fspath(path), _ACL_XATTR)
    except (OSError, ValueError):  # no ACL (ENODATA), no extended attributes on this file system (ENOTSUP)
        return []
    if len(raw) < 4 or (len(raw) - 4) % 8 or struct.unpack_from("<I", raw)[0] != 2:
        return [f"an ACL this version cannot read ({len(raw)} bytes): treat it as granting {perms:o}"]
    entries = [struct.unpack_from("<HHI", raw, 4 + 8 * i) for i in range((len(raw) - 4) // 8)]
    mask = next((perm for tag, perm, _ in entries if tag == _ACL_MASK), 0o7)
    st = os.stat(path)
    out = []
    for tag, perm, qualifier in entries:
        granted = perm & mask & (perms if tag == _ACL_USER or group_perms is None else group_perms)
        if not granted or tag not in (_ACL_USER, _ACL_GROUP):
            continue
        if tag == _ACL_USER and qualifier in (st.st_uid, os.getuid()):
            continue
        if tag == _ACL_GROUP and os.name == "posix" and _private_group(qualifier, st.st_uid):
            continue
        what = ", ".join(w for bit, w in ((4, "read"), (2, "write")) if granted & bit) or "execute"
        out.append(f"{'user' if tag == _ACL_USER else 'group'} {_id_name(tag == _ACL_USER, qualifier)}: {what}")
    return out


def _id_name(user: bool, ident: int) -> str:
    """``name (uid N)`` / ``name (gid N)``, or the bare id where it has no name."""
    import grp
    import pwd

    try:
        name = pwd.getpwuid(ident).pw_name if user else grp.getgrgid(ident).gr_name
    except KeyError:
        name = "?"
    return f"{name} ({'uid' if user else 'gid'} {ident})"


def check_owner_only_writable(path: str | os.PathLike) -> None:
    """Refuse a file or folder that another user could change (POSIX; nothing is checked on Windows).

    The configuration folder's keys are trusted without being named on the command line, so, as OpenSSH does for
    ``authorized_keys``, they count only while no other user can change them: the path must belong to the current
    user (or root) and be writable by no other user: not by others, and by its group only where that is the owner's
    private group (named after the user, no other member: the umask 002 convention). A key anyone could add would let
    anyone certify a rule.

    Args:
        path: the file or folder (links are followed).

    Raises:
        ValueError: naming the path, its owner or mode, and the command that fixes it.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     check_owner_only_writable(d)  # a fresh temporary folder: the user's own, mode 0o700
    """
    if os.name != "posix":
        return
    p = Path(path)
    st = p.stat()
    if st.st_uid not in (os.getuid(), 0):
        raise ValueError(
            f"trusted key location {p} belongs to another user (uid {st.st_uid}): its keys are not trusted; "
            f"move the keys to a folder of your own or name them with --trusted-keys"
        )
    if st.st_mode & 0o002 or (st.st_mode & 0o020 and not _private_group(st.st_gid, st.st_uid)):
        raise ValueError(
            f"trusted key location {p} is writable by other users (mode {oct(st.st_mode & 0o777)}): anyone could add "
            f"a key; run: chmod go-w '{p}'"
        )
    granted = acl_grants(p, 0o2)
    if granted:  # the mode shows the ACL's mask only (review 61)
        raise ValueError(
            f"trusted key location {p} is writable by other users through its ACL ({'; '.join(granted)}): they "
            f"could add a key; run: setfacl -b '{p}'"
        )


def trusted_public_keys(extra: Sequence[str | os.PathLike] = (), *, named: str = "trusted key file or folder"
                        ) -> dict[str, tuple[Ed25519PublicKey, Path]]:
    """The public keys a reader trusts, by fingerprint.

    The given files or folders, those of ``$MONAI_UNC_TRUSTED_KEYS`` (separated by ``os.pathsep``), every ``*.pub``
    of the configuration folder's ``trusted_keys/`` and the configuration folder's own ``signing_key.pub``; of a
    half pair there (``signing_key.pem`` alone: a full disk or a kill between the two files), the public key of
    ``signing_key.pem`` (named by that file; nothing is written), so that this machine trusts what it signs.

    Args:
        extra: further key files or folders (``--trusted-keys``).
        named: how a refusal of one of ``extra`` names it, in its caller's words (:meth:`Trust.hint`
            ``("keys")``: ``--trusted-keys`` for the command line). Keyword only.

    Returns:
        ``{fingerprint: (key, file)}``; a refusal (a key file that is missing or no public key, a location others can
        write, this machine's own key while other users can read its ``signing_key.pem``: an
        :class:`UnprotectedKeyError`) is marked with the parameter ``trusted_keys``
        (:func:`monai_unc._utils.parameter_error`), so that the command line says ``--trusted-keys``, not the option
        of the rule file whose signature was being checked.

    Raises:
        TypeError: ``extra`` is not a list or tuple of key files or folders (one path alone, naming ``trusted_keys``),
            or ``named`` is not text.

    Example:
        >>> import tempfile
        >>> try:
        ...     trusted_public_keys([Path(tempfile.gettempdir()) / "no-such-key.pub"])
        ... except ValueError as e:
        ...     print(str(e).split(" ", 5)[:5], e.parameter)
        ['trusted', 'key', 'file', 'or', 'folder'] trusted_keys
    """
    _check_key_entries(extra, "trusted_keys")
    if not isinstance(named, str):
        raise TypeError(f"named must be text, got {named!r:.80}")
    with refusing("trusted_keys"):
        return _trusted_public_keys(extra, named)


def _trusted_public_keys(extra: Sequence[str | os.PathLike], named: str) -> dict[str, tuple[Ed25519PublicKey, Path]]:
    """:func:`trusted_public_keys`, its errors not marked."""
    # found by review 63: a Python caller whose key path was missing was told of --trusted-keys
    files = _key_files(extra, named)
    env = os.environ.get("MONAI_UNC_TRUSTED_KEYS")
    if env:
        files += _key_files([p for p in env.split(os.pathsep) if p], "MONAI_UNC_TRUSTED_KEYS")
    cfg = config_dir()
    implicit: list[Path] = []
    if (cfg / TRUSTED_KEYS_DIR).is_dir():
        implicit += [cfg / TRUSTED_KEYS_DIR, *sorted((cfg / TRUSTED_KEYS_DIR).glob("*.pub"))]
    own_private = cfg / PRIVATE_KEY_FILE
    if (cfg / PUBLIC_KEY_FILE).is_file():
        implicit.append(cfg / PUBLIC_KEY_FILE)
    elif own_private.is_file():  # found by hostile testing: this machine refused the rules it had just signed
        implicit.append(own_private)
    if implicit:  # trusted without being named: only while nobody else can change them
        for p in (cfg, *implicit):
            check_owner_only_writable(p)
        if own_private.is_file() and (cfg / PUBLIC_KEY_FILE in implicit or own_private in implicit):
            # found by hostile review 60: this machine's key was trusted while other users could read its private
            # key, which signing refuses (whoever copied it certifies rules as its owner)
            _check_private_key_mode(own_private)
        files += [p for p in implicit if p.is_file()]
    keys: dict[str, tuple[Ed25519PublicKey, Path]] = {}
    for f in files:
        key = load_private_key(f).public_key() if f == own_private else load_public_key(f)
        keys.setdefault(key_fingerprint(key), (key, f))
    return keys


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _check_private_key_mode(path: Path) -> None:
    """Refuse a private key file that users other than its owner can read or write (POSIX only).

    Access by the owner's private group (named after the user, no other member: the umask 002 convention) is
    access by the owner alone. A key another user owns (a secret mounted read-only by root, ``0440`` with the pod's
    group under Kubernetes' ``fsGroup``) may be readable by its group: that is how its owner let this user read it
    (found by hostile testing: such a key was refused with a ``chmod`` its reader may not run); writing by the group
    and any access by others are still refused.
    """
    if os.name != "posix":
        return
    st = path.stat()
    group_bits = 0o070 if st.st_uid == os.getuid() else 0o020
    if st.st_mode & 0o007 or (st.st_mode & group_bits and not _private_group(st.st_gid, st.st_uid)):
        raise UnprotectedKeyError(
            f"signing key {path} can be read or changed by other users (mode {oct(st.st_mode & 0o777)}): whoever "
            f"copied it can certify rules as you; {'run' if st.st_uid == os.getuid() else 'its owner must run'}: "
            f"chmod 600 '{path}' (and make a new pair with monai-unc keys --create --overwrite if someone may have "
            "copied it)"
        )
    granted = acl_grants(path, 0o6, 0o6 if st.st_uid == os.getuid() else 0o2)  # as the group bits above
    if granted:  # the mode shows the ACL's mask only (review 61)
        raise UnprotectedKeyError(
            f"signing key {path} can be read or changed by other users through its ACL ({'; '.join(granted)}): "
            f"whoever copied it can certify rules as you; {'run' if st.st_uid == os.getuid() else 'its owner must run'}"
            f": setfacl -b '{path}' (and make a new pair with monai-unc keys --create --overwrite if someone may have "
            "copied it)"
        )


def sign_digest(digest: str, key_file: str | os.PathLike) -> dict[str, str]:
    """The signature object of a document whose content digest is ``digest``.

    Args:
        digest: the document's digest (:func:`~monai_unc.io.provenance.rule_digest`, without the ``signature``).
        key_file: the private key.

    Returns:
        ``{"algorithm", "key", "public_key", "value"}``.

    Raises:
        ValueError: ``key_file`` is not a readable Ed25519 private key (naming it).
        UnprotectedKeyError: other users can read or write ``key_file`` (POSIX; naming it, its mode and the fix).
    """
    key = load_private_key(key_file)
    _check_private_key_mode(Path(key_file))
    pub = key.public_key()
    raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {"algorithm": "ed25519", "key": key_fingerprint(pub), "public_key": _b64(raw),
            "value": _b64(key.sign(_DOMAIN + digest.encode("ascii")))}


def verify_signature(doc: Mapping[str, Any], digest: str, trust: Trust, source: str) -> str:
    """Check a document's signature against the trusted keys; say how it was checked.

    Args:
        doc: the parsed document.
        digest: its content digest, recomputed from its content.
        trust: the trusted keys and whether an unsigned document is accepted.
        source: how messages name the document.

    Returns:
        One line for the outputs: ``"signed by <fingerprint> (trusted key <file>)"`` or, when allowed,
        ``"UNSIGNED: ..."``.

    Raises:
        TypeError: ``trust`` is no :class:`Trust`.
        ValueError: one line starting with ``source``: unsigned (and not allowed), a malformed signature object, a
            signature that does not verify (also, with ``allow_unsigned``, one by a key that is not trusted: the
            outputs never name a key that did not sign the content), or a key that is not trusted.
    """
    if not isinstance(trust, Trust):  # found by hostile review 60: True failed with an AttributeError
        raise TypeError(f"trust must be a Trust (monai_unc.io.signing.Trust), got {trust!r:.80}")
    sig = doc.get(SIGNATURE_FIELD)
    allow = trust.hint("allow")  # found by review 63: a Python caller was told of the command line's option
    if sig is None:
        if trust.allow_unsigned:
            return f"UNSIGNED: the rule carries no signature; used because {trust.hint('allowed')}"
        raise ValueError(f"{source} is not signed (field 'signature'), so who certified it and that it is unchanged "
                         f"cannot be checked: certify it again with this monai-unc, or {allow}")
    own_key = _signature_key(sig)
    if own_key is None:
        raise ValueError(f"{source}: field 'signature' is not an ed25519 signature object (algorithm 'ed25519', key "
                         "'SHA256:' and 64 hex digits, the fingerprint of public_key, 32 bytes in base64; value)")
    keys = trusted_public_keys(trust.keys, named=trust.hint("keys"))
    trusted = keys.get(sig["key"])
    if trusted is None and not trust.allow_unsigned:
        raise ValueError(f"{source} is signed by key {sig['key']}, which is not a trusted key (trust its public key "
                         f"{trust.hint('trust')}, or {allow}){_own_pair_hint(sig['key'])}")
    try:  # an untrusted key's signature is checked too: the outputs then name a key that did sign this content
        (own_key if trusted is None else trusted[0]).verify(base64.b64decode(sig["value"], validate=True),
                                                            _DOMAIN + digest.encode("ascii"))
    except (InvalidSignature, ValueError):
        raise ValueError(f"{source}: its signature (field 'signature') does not match its content: the file was "
                         "edited after it was signed") from None
    if trusted is None:
        return f"UNSIGNED: signed by {sig['key']}, a key that is not trusted here; used because {trust.hint('allowed')}"
    return f"signed by {sig['key']} (trusted key {trusted[1]})"


_FINGERPRINT = re.compile(r"SHA256:[0-9a-f]{64}\Z")


def _own_pair_hint(fingerprint: str) -> str:
    """Why this machine's own key (``fingerprint``) is not trusted here: its public key file is another key's.

    ``"; it is the key of ...: <the mismatch and its remedy>"``, or empty (another key, or no readable key here).
    """
    private = config_dir() / PRIVATE_KEY_FILE
    try:
        if key_fingerprint(load_private_key(private).public_key()) == fingerprint:
            check_key_pair(private)
    except KeyPairMismatchError as e:
        return f"; it is the key of {private}: {e}"
    except ValueError:  # no readable key of this machine's
        pass
    return ""


def _signature_key(sig: Any) -> Ed25519PublicKey | None:
    """The public key of a well-formed signature object, else None.

    Well-formed: ``algorithm`` ``"ed25519"``, ``public_key`` 32 bytes in base64, ``key`` its fingerprint
    (:func:`key_fingerprint`) and ``value`` a string. The fields are then safe to echo: a ``key`` of any other text
    (a newline, a terminal escape sequence) would reach the messages and the outputs as written.
    """
    if not isinstance(sig, Mapping) or sig.get("algorithm") != "ed25519":
        return None
    fields = [sig.get(k) for k in ("key", "public_key", "value")]
    if not all(isinstance(f, str) for f in fields) or not _FINGERPRINT.match(fields[0]):
        return None
    try:
        key = Ed25519PublicKey.from_public_bytes(base64.b64decode(fields[1], validate=True))
    except ValueError:
        return None
    return key if key_fingerprint(key) == fields[0] else None
