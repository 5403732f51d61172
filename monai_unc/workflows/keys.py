"""``monai-unc keys``: the key pair that signs certified rules, and the keys a machine trusts (docs/signing.md)."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from .._utils import refusing
from ..io import check_entry_kind
from ..io.signing import (
    PRIVATE_KEY_FILE,
    config_dir,
    default_signing_key,
    generate_key_pair,
    key_fingerprint,
    load_private_key,
    load_public_key,
    trusted_public_keys,
)
from .session import CommandResult

__all__ = ["key_file_fingerprint", "keys_from_arguments"]


def key_file_fingerprint(path: str | Path) -> str:
    """The fingerprint of a key file: its public key's (:func:`monai_unc.io.signing.key_fingerprint`).

    Args:
        path: a PEM public (``.pub``) or private (``.pem``) Ed25519 key.

    Returns:
        ``SHA256:<hex>``.

    Raises:
        ValueError: naming the key file and what it is instead (:func:`monai_unc.io.signing.load_public_key`).

    Example:
        >>> import tempfile
        >>> from monai_unc.io.signing import generate_key_pair
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     priv, pub = generate_key_pair(folder)
        ...     key_file_fingerprint(priv) == key_file_fingerprint(pub)
        True
    """
    head = b""
    if Path(path).is_file():
        # the first lines tell a private key from a public one (found by hostile testing: the whole file was read
        # for it, a multi-gigabyte file given by mistake included); the loaders bound what they read
        with contextlib.suppress(OSError), open(path, "rb") as f:
            head = f.read(4096)
    if b"PRIVATE KEY" in head:
        return key_fingerprint(load_private_key(path, what="key file").public_key())
    return key_fingerprint(load_public_key(path, what="key file"))


def keys_from_arguments(args: argparse.Namespace) -> CommandResult[dict[str, str]]:
    """``monai-unc keys`` on its parsed arguments.

    ``--create [FOLDER]`` makes a key pair (default: the configuration folder's; refused when it has one, replaced
    with ``--overwrite``; a half pair, the private key alone, is completed with its public key; made under the
    folder's lock, so two at once make one pair); ``--show FILE`` prints a key file's fingerprint; without options,
    the signing key and the trusted keys. A pair whose public key file is not its private key's is refused by
    ``--create`` (without ``--overwrite``) and by the listing, naming both files and the remedy
    (:func:`monai_unc.io.signing.check_key_pair`).

    Args:
        args: the parsed arguments of ``monai-unc keys``.

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of ``{what: path or fingerprint}``, with its lines.
    """
    lines: list[str] = []
    value: dict[str, str] = {}
    if getattr(args, "overwrite", False) and args.create is None:
        raise ValueError("--overwrite replaces a key pair: pass it with --create [FOLDER]")
    if args.create is not None:
        folder = Path(args.create) if args.create else config_dir()
        check_entry_kind(folder, "--create folder" if args.create else "configuration folder", folder=True)
        overwrite = bool(getattr(args, "overwrite", False))
        had_private = (folder / PRIVATE_KEY_FILE).exists() and not overwrite
        priv, pub = generate_key_pair(folder, overwrite=overwrite, command_line=True)
        fp = key_file_fingerprint(pub)
        value.update(private=str(priv), public=str(pub), fingerprint=fp)
        lines += [f"kept {priv} (private: the public key was missing, derived from it)" if had_private else
                  f"created {priv} (private: keep it secret, readable by you only)",
                  f"created {pub} (public: give it to the machines that should trust your rules)", f"fingerprint {fp}"]
    elif args.show is not None:
        with refusing("show"):  # the command line names --show (found by a probe of every command with bad paths)
            fp = key_file_fingerprint(args.show)
        value.update(file=str(args.show), fingerprint=fp)
        lines.append(f"{args.show}: {fp}")
    else:
        key = default_signing_key(create=False)
        if key is None:
            lines.append(f"signing key: none yet ({config_dir() / 'signing_key.pem'} is created by the first "
                         "certification, or by monai-unc keys --create)")
        else:
            value["signing_key"] = str(key)
            lines.append(f"signing key: {key} ({key_file_fingerprint(key)})")
        trusted = trusted_public_keys()
        lines.append(f"trusted keys ({len(trusted)}):" if trusted else
                     f"trusted keys: none (add .pub files to {config_dir() / 'trusted_keys'}, set "
                     "MONAI_UNC_TRUSTED_KEYS or pass --trusted-keys)")
        lines += [f"  {fp}  {file}" for fp, (_, file) in trusted.items()]
        value.update({f"trusted {fp}": str(file) for fp, (_, file) in trusted.items()})
    return CommandResult(value, True, config_dir(), tuple(lines))
