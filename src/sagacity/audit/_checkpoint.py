"""Signed checkpoints: an Ed25519 signature over every saga's head, kept outside the database.

A hash chain needs no secret, so whoever can write the database can delete a chain's
last entries, a whole saga, or rebuild a chain with fresh hashes, and it still
verifies. A checkpoint records each saga's head (seq and hash) at a time and is signed
with a key the database never sees; `verify(journal, heads=checkpoint.heads)` then
reports any of those three, naming the saga and seq.

Each checkpoint names the one before it (the SHA-256 of its text), and is made only if
the journal still holds every head that one recorded: a truncation between two
checkpoints is refused, not signed as the new truth.

The text format (UTF-8, LF line ends, documented in docs/journal-format.md):

```
sagacity-checkpoint 2
created_at 2026-12-01T12:00:00.000000Z
key_id 0123456789abcdef
previous <sha256 hex of the previous checkpoint's text, or none>
sagas 2
entries 16
heads_sha256 <sha256 hex of the head lines, each with its LF>
head 11 <hash> "order-1001"
head 5 <hash> "wire-1002"
signature <Ed25519 signature hex of every byte before this line>
```

Each head line is `head SEQ HASH ID`, the saga id last as a JSON string with every
non-ASCII character escaped, so that spaces, quotes or any text an edited database may
hold stay on one line and read back exactly. Version 1 files (no `previous` line) are
still read.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import re
from collections.abc import Iterable, Sequence

from sagacity.audit._keys import PrivateKey, PublicKey
from sagacity.audit._verify import ChainCheck, ChainHead, Problem, iter_saga_ids
from sagacity.errors import CheckpointError
from sagacity.journal import JournalEntry, SideEffectJournal
from sagacity.journal._rows import UnreadableRowError

__all__ = ["Checkpoint", "make_checkpoint", "read_checkpoint"]

MAGIC = "sagacity-checkpoint 2"
_MAGIC_1 = "sagacity-checkpoint 1"
_FIELDS = {
    _MAGIC_1: ["created_at", "key_id", "sagas", "entries", "heads_sha256"],
    MAGIC: ["created_at", "key_id", "previous", "sagas", "entries", "heads_sha256"],
}
_SHA256 = re.compile(r"[0-9a-f]{64}")
_HEAD = re.compile(r"head (\d+) ([0-9a-f]{64}) (\".*\")")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Checkpoint:
    """A signed statement of every saga's head at a time."""

    created_at: str
    """When the heads were read: RFC 3339, UTC, six fraction digits, `Z`."""
    key_id: str
    """The id of the key that signed it (`PublicKey.key_id`)."""
    entries: int
    """How many entries the journal held, summed over the heads."""
    heads: list[ChainHead]
    """Each saga's head, in saga order; pass them to `verify(journal, heads=...)`."""
    signature: str
    """The Ed25519 signature, hex, of every byte of `text` before the signature line."""
    text: str
    """The checkpoint as it is stored: write exactly this."""
    previous: str | None = None
    """The SHA-256 (hex) of the text of the checkpoint made before this one; None for
    the first (and for a version 1 file, which does not record it)."""

    @property
    def sha256(self) -> str:
        """The SHA-256 (hex) of `text`: what the next checkpoint records as `previous`."""
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def filename(self) -> str:
        """A file name that sorts by time: `checkpoint-20261201T120000.000000Z.txt`."""
        return "checkpoint-" + self.created_at.replace("-", "").replace(":", "") + ".txt"


def make_checkpoint(
    journal: SideEffectJournal,
    key: PrivateKey,
    *,
    now: datetime.datetime | None = None,
    previous: Checkpoint | None = None,
) -> Checkpoint:
    """Verify every saga's chain as it is read, and sign the statement of their heads.

    Each saga's entries are read once and checked as `verify` checks them, and the head
    signed is the last entry verified: a checkpoint never vouches for a broken chain, nor
    for rows appended after it was checked.

    Args:
        journal: The journal whose heads are signed.
        key: The private key that signs.
        now: The time recorded as `created_at` (default: now).
        previous: The last checkpoint made (read with `read_checkpoint`): the new one
            records its SHA-256, and is made only if the journal still holds every head
            it recorded. None: the first checkpoint.

    Raises:
        CheckpointError: A saga's chain is broken, or no longer holds a head `previous`
            recorded (entries deleted from its end, the saga deleted, the chain
            rewritten); the message names the saga and the seq of its first problem,
            and nothing is signed.
    """
    when = now or datetime.datetime.now(datetime.UTC)
    if when.tzinfo is None:
        raise CheckpointError("checkpoint: the time must be timezone-aware")
    created_at = when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    recorded = {} if previous is None else {head.saga_id: head for head in previous.heads}
    heads = []
    for saga_id in iter_saga_ids(journal):
        head = _verified_head(journal, saga_id, recorded.pop(saga_id, None), previous)
        if head is not None:
            heads.append(head)
    for saga_id, head in recorded.items():  # in the previous checkpoint, gone from the journal
        _refuse(ChainCheck(head).finish(saga_id), saga_id, previous)
    link = None if previous is None else previous.sha256
    body = _body(created_at, key.key_id, heads, link)
    signature = key.sign(body.encode())
    return Checkpoint(
        created_at=created_at,
        key_id=key.key_id,
        entries=sum(head.seq for head in heads),
        heads=heads,
        signature=signature,
        text=f"{body}signature {signature}\n",
        previous=link,
    )


def read_checkpoint(text: str | bytes, key: PublicKey | Iterable[PublicKey]) -> Checkpoint:
    """Parse a checkpoint and check its signature with `key` (or one of several, by id).

    Raises:
        CheckpointError: The text is not a checkpoint, names another key, was edited
            after it was signed, or its signature is not the key's; the message says which.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            raise CheckpointError(f"checkpoint: not UTF-8 text ({error})") from None
    keys = [key] if isinstance(key, PublicKey) else list(key)
    marker = text.rfind("\nsignature ")
    magic = text.split("\n", 1)[0]
    if magic not in _FIELDS or marker < 0 or not text.endswith("\n"):
        raise CheckpointError(
            f"checkpoint: not a sagacity checkpoint (it must start with {MAGIC!r} and end "
            "with a signature line)"
        )
    body, signature = text[: marker + 1], text[marker + 1 : -1].removeprefix("signature ")
    lines = body.splitlines()
    names = _FIELDS[magic]
    end = 1 + len(names)
    fields = dict(line.split(" ", 1) for line in lines[1:end] if " " in line)
    if [line.split(" ", 1)[0] for line in lines[1:end]] != names:
        raise CheckpointError(f"checkpoint: lines 2 to {end} must be {', '.join(names)}")
    key_id = fields["key_id"]
    signer = next((k for k in keys if k.key_id == key_id), None)
    if signer is None:
        raise CheckpointError(
            f"checkpoint {fields['created_at']}: signed by key {key_id}, but the public key "
            f"given is {', '.join(k.key_id for k in keys) or 'none'}"
        )
    if not signer.verify(body.encode(), signature):
        raise CheckpointError(
            f"checkpoint {fields['created_at']}: the signature does not match its text: the "
            f"file was edited after it was signed, or forged (key {key_id})"
        )
    # Signed by the key: what follows only catches a signer that wrote a malformed file.
    heads = [_head(line, number) for number, line in enumerate(lines[end:], start=end + 1)]
    digest = hashlib.sha256("".join(line + "\n" for line in lines[end:]).encode()).hexdigest()
    if digest != fields["heads_sha256"] or str(len(heads)) != fields["sagas"]:
        raise CheckpointError(
            f"checkpoint {fields['created_at']}: the head lines do not match heads_sha256 "
            "or the saga count"
        )
    link = fields.get("previous", "none")
    if link != "none" and not _SHA256.fullmatch(link):
        raise CheckpointError(
            f"checkpoint {fields['created_at']}: previous must be a SHA-256 or none"
        )
    return Checkpoint(
        previous=None if link == "none" else link,
        created_at=fields["created_at"],
        key_id=key_id,
        entries=int(fields["entries"]),
        heads=heads,
        signature=signature,
        text=text,
    )


def _verified_head(
    journal: SideEffectJournal,
    saga_id: str,
    recorded: ChainHead | None,
    previous: Checkpoint | None,
) -> ChainHead | None:
    """Read one saga's chain once, verify it as `verify` does, and return its head.

    `recorded` is the saga's head in the previous checkpoint: the chain must still hold
    it. None for a saga without entries. Raises CheckpointError at the chain's first
    problem.
    """
    chain = ChainCheck(recorded)
    unreadable = None
    try:
        entries: Sequence[JournalEntry] = journal.entries(saga_id)
    except UnreadableRowError as error:  # the entries before the row were read
        entries, unreadable = error.readable, error
    for entry in entries:
        chain.check(entry, saga_id)
    if unreadable is not None:
        chain.unreadable(unreadable.seq, unreadable.reason)
    _refuse(chain.finish(saga_id), saga_id, previous)
    if not entries:
        return None
    return ChainHead(saga_id=saga_id, seq=entries[-1].seq, hash=entries[-1].hash)


def _refuse(problem: Problem | None, saga_id: str, previous: Checkpoint | None) -> None:
    """Raise CheckpointError for the saga's first problem, if it has one."""
    if problem is None:
        return
    broken = problem.reason.split(":", 1)[0] not in ("truncation", "deleted", "rewritten")
    if broken or previous is None:
        why = "the chain does not verify"
    else:
        why = (
            f"the journal no longer holds what checkpoint {previous.created_at} signed "
            "(a shorter or rebuilt chain is never signed as the new truth)"
        )
    raise CheckpointError(
        f"checkpoint: saga {saga_id!r} seq {problem.seq}: {problem.reason}; {why}, so "
        "nothing was signed"
    )


def _body(created_at: str, key_id: str, heads: list[ChainHead], previous: str | None) -> str:
    head_lines = "".join(
        f"head {head.seq} {head.hash} {json.dumps(head.saga_id, ensure_ascii=True)}\n"
        for head in heads
    )
    return (
        f"{MAGIC}\n"
        f"created_at {created_at}\n"
        f"key_id {key_id}\n"
        f"previous {previous or 'none'}\n"
        f"sagas {len(heads)}\n"
        f"entries {sum(head.seq for head in heads)}\n"
        f"heads_sha256 {hashlib.sha256(head_lines.encode()).hexdigest()}\n"
        f"{head_lines}"
    )


def _head(line: str, number: int) -> ChainHead:
    found = _HEAD.fullmatch(line)
    saga_id = None
    if found is not None:
        try:
            saga_id = json.loads(found.group(3))
        except ValueError:
            saga_id = None
    if found is None or not isinstance(saga_id, str):
        raise CheckpointError(f"checkpoint line {number}: not 'head SEQ HASH \"saga id\"'")
    return ChainHead(saga_id=saga_id, seq=int(found.group(1)), hash=found.group(2))
