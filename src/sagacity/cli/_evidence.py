"""Signed evidence: keygen and checkpoint."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sagacity.audit import Checkpoint, PrivateKey, make_checkpoint, read_checkpoint
from sagacity.cli._common import EXIT_NOT_FOUND, EXIT_OK, EXIT_OUTPUT, CliError, opened

__all__ = ["checkpoint", "keygen"]

PRIVATE_NAME = "sagacity-checkpoint.key"
PUBLIC_NAME = "sagacity-checkpoint.pub"


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create `path` with `data`; refuse to overwrite anything."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise CliError(
            f"{path} exists already: a key is never overwritten (move it away first)",
            EXIT_OUTPUT,
        ) from None
    except OSError as error:
        raise CliError(f"cannot write {path}: {error.strerror}", EXIT_OUTPUT) from None
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def keygen(args: argparse.Namespace) -> int:
    """`sagacity keygen --out DIR`: a new Ed25519 key pair as two PEM files."""
    from sagacity.audit._keys import generate_key

    out = Path(args.out)
    if not out.is_dir():
        raise CliError(f"--out {args.out}: no such directory", EXIT_OUTPUT)
    private, public = out / PRIVATE_NAME, out / PUBLIC_NAME
    for path in (private, public):
        if path.exists():
            raise CliError(
                f"{path} exists already: a key is never overwritten (move it away first)",
                EXIT_OUTPUT,
            )
    key = generate_key()
    _write_new(private, key.pem(), 0o600)
    _write_new(public, key.public.pem(), 0o644)
    sys.stdout.write(
        f"key {key.key_id}\n  private: {private} (keep it off the database's machine)\n"
        f"  public:  {public} (give it to whoever verifies)\n"
    )
    return EXIT_OK


def checkpoint(args: argparse.Namespace) -> int:
    """`sagacity checkpoint --key FILE [--out DIR] [--previous FILE]`."""
    from sagacity.audit._keys import load_private_key

    key = load_private_key(args.key)
    previous = _previous(args, key)
    with opened(args) as sagacity:
        signed = make_checkpoint(sagacity.journal, key, previous=previous)
    if args.out is None:
        sys.stdout.write(signed.text)
        return EXIT_OK
    out = Path(args.out)
    path = out / signed.filename
    _write_new(path, signed.text.encode(), 0o644)
    after = "" if previous is None else f", after checkpoint {previous.created_at}"
    sys.stdout.write(
        f"checkpoint {signed.created_at}: {len(signed.heads)} sagas, {signed.entries} entries, "
        f"signed by key {signed.key_id}{after}\n  {path}\n"
    )
    return EXIT_OK


def _previous(args: argparse.Namespace, key: PrivateKey) -> Checkpoint | None:
    """The last checkpoint: `--previous FILE`, else the newest in `--out DIR`, else None.

    It is read with `--previous-public-key`, else with the signing key's own public key:
    a previous checkpoint that does not verify is refused, never skipped.
    """
    from sagacity.audit._keys import load_public_key

    if args.out is not None and not Path(args.out).is_dir():
        raise CliError(f"--out {args.out}: no such directory", EXIT_OUTPUT)
    if args.previous is not None:
        path: Path | None = Path(args.previous)
    elif args.out is not None:
        # The names sort by time (checkpoint-YYYYMMDDTHHMMSS.ffffffZ.txt): the last is newest.
        made = sorted(Path(args.out).glob("checkpoint-*.txt"))
        path = made[-1] if made else None
    else:
        path = None
    if path is None:
        return None
    if args.previous_public_key is None:
        verifier = key.public
    else:
        verifier = load_public_key(args.previous_public_key)
    try:
        text = path.read_bytes()
    except OSError as error:
        raise CliError(
            f"cannot read the previous checkpoint {path}: {error.strerror}", EXIT_NOT_FOUND
        ) from None
    return read_checkpoint(text, verifier)
