"""A batch of PostgreSQL appends in one statement: group commit (see `journal._group`).

The appends that overlapped a commit in flight are sealed on the heads this journal
knows and written by one multi-row `INSERT`, committed as it runs: one round trip and
one commit for the whole batch, whatever its size. A statement is atomic, so the batch
is written whole or not at all. Each append keeps its own semantics:

- a fenced append is sealed only on a head its lease's token held the saga at (see
  `_append.unchecked`): a takeover since then journaled TAKEN_OVER at the seq the row
  takes, which fails the statement;
- an append whose saga's head this journal does not know (or knows to be contended, or
  not under its token), a conditional append on a seq that is not that head, one whose
  payload has no canonical form, and every later append of that saga in the batch, is
  committed on its own after the statement,
  through the journal's ordinary path (the locked path, `LeaseLostError` or
  `AppendConflictError`);
- a row whose seq another writer took makes the statement fail, and nothing of it is
  written.

A statement that fails (a taken seq, a lost connection) is never dropped: its sagas'
cached heads are forgotten and each append is redone on its own, through the journal's
ordinary path with its retries. When the statement was sent and its answer lost, each
entry is in doubt: its retry looks for a row at its seq with its hash first.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

import psycopg
import psycopg_pool

from sagacity.errors import JournalError, SerializationError
from sagacity.journal._entry import JournalEntry, Phase
from sagacity.journal._group import AppendRequest
from sagacity.journal._rows import row_of
from sagacity.journal.postgres._append import Append
from sagacity.journal.postgres._appender import Appender
from sagacity.journal.postgres._database import is_transient
from sagacity.journal.postgres._steps import NOTHING, Statement, Steps, run_steps

__all__ = ["Batch", "append_batch"]


class _Sealed:
    """An append of the batch sealed on a known head, and its row."""

    __slots__ = ("append", "entry", "index", "payload_bytes")

    def __init__(
        self, index: int, append: Append, entry: JournalEntry, payload_bytes: bytes
    ) -> None:
        self.index = index
        self.append = append
        self.entry = entry
        self.payload_bytes = payload_bytes


def append_batch(
    appender: Appender, requests: Sequence[AppendRequest]
) -> list[JournalEntry | BaseException]:
    """Commit `requests` together; each one's entry or its own refusal, in order."""
    batch = Batch(appender, requests)
    if batch.sealed:
        db = appender.db
        sent = False
        try:
            lease = db.checkout(time.monotonic() + db.settings.timeout)
            try:
                sent = True
                run_steps(lease.cursor, batch.insert(), lease.prepared)
                batch.written()
            finally:
                db.checkin(lease)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as error:
            batch.failed(error, sent=sent)
    for index, append in batch.alone():
        try:
            batch.results[index] = appender.append(append)
        except Exception as failure:
            batch.results[index] = failure
    return batch.outcome()


class Batch:
    """A batch in progress: its sealed rows, what goes alone, and each one's result.

    A driver (sync: `append_batch`; async: `_async.LoopWriter`) runs `insert()`, then
    reports `written` or `failed`, then commits each of `alone()` on its own.
    """

    def __init__(self, appender: Appender, requests: Sequence[AppendRequest]) -> None:
        self._appender = appender
        self._appends = [Append(*request) for request in requests]  # fields in one order
        self.results: list[JournalEntry | BaseException | None] = [None] * len(requests)
        if appender.closed:
            closed = JournalError(
                f"sagas {_names(requests)}: cannot append: the journal is closed; open a new one"
            )
            self.results = [closed] * len(requests)
            self.sealed: list[_Sealed] = []
            self._alone: list[int] = []
        else:
            self.sealed, self._alone = _seal(appender, self._appends)

    def insert(self) -> Steps[None]:
        """Write the sealed rows in one statement, which writes all of them or none.

        Sent as a prepared statement whose ten parameters are array literals, in text
        (`_array_literal`): psycopg's cursor adapts a list element by element in Python,
        several times the cost. A value a text parameter cannot carry (a NUL) sends the
        statement through the cursor, which refuses it as it always did.
        """
        appender = self._appender
        rows = [row_of(item.entry, item.payload_bytes) for item in self.sealed]
        yield Statement(
            appender.sql_insert_bulk_text,
            tuple([_array_literal(column) for column in zip(*rows, strict=True)]),
            NOTHING,
            appender.prepared_insert_bulk,
        )

    def written(self) -> None:
        """The statement committed: settle its appends."""
        self._appender.done_all([(item.entry, item.append) for item in self.sealed])
        for item in self.sealed:
            self.results[item.index] = item.entry

    def failed(self, error: BaseException, *, sent: bool) -> None:
        """The statement failed: each of its appends is redone alone, with its retries.

        A refused statement wrote nothing. One sent on a connection that was then lost
        may have written every row: each append is redone in doubt, looking for its row
        first.
        """
        appender = self._appender
        transient = is_transient(error)
        with appender.guard:
            appender.conflicts += isinstance(error, psycopg.errors.UniqueViolation)
            appender.reconnects += transient
            for item in self.sealed:
                appender.heads.pop(item.entry.saga_id, None)
        for item in self.sealed:
            if sent and transient:
                item.append.sent, item.append.in_doubt = (item.entry, item.payload_bytes), True
            self._alone.append(item.index)
        self._alone.sort(key=lambda i: (self._appends[i].saga_id, i))  # each saga's in order

    def alone(self) -> list[tuple[int, Append]]:
        """The appends to commit on their own, in order, by index."""
        return [(index, self._appends[index]) for index in self._alone]

    def outcome(self) -> list[JournalEntry | BaseException]:
        """Each append's entry or refusal, in the order they were asked for."""
        assert all(result is not None for result in self.results)
        return [result for result in self.results if result is not None]


def _seal(appender: Appender, appends: list[Append]) -> tuple[list[_Sealed], list[int]]:
    """Seal what follows a known head; the rest (by index, in order) is committed alone.

    Sorted by saga, stably, so that each saga's appends keep their order and two
    processes' statements lock rows in the same order.
    """
    sealed: list[_Sealed] = []
    alone: list[int] = []
    heads: dict[str, tuple[int, str, int | None] | None] = {}
    """Per saga: the head its next append follows and the token that held the saga
    there, or None once one of its appends goes alone (then all its later ones do too)."""
    cached = appender.heads
    with appender.guard:  # every saga's head at once
        for append in appends:
            saga_id = append.saga_id
            if saga_id not in heads:
                head = cached.get(saga_id)
                heads[saga_id] = (
                    None
                    if head is None or head.quiet_needed
                    else (head.seq, head.hash, head.fenced_by)
                )
    for index in sorted(range(len(appends)), key=lambda i: appends[i].saga_id):
        append = appends[index]
        saga_id = append.saga_id
        known = heads[saga_id]
        expected = append.expected_seq
        fence = append.fence
        sealing = None
        if not (
            known is None
            or (fence is not None and (fence.saga_id, fence.token) != (saga_id, known[2]))
            or (expected is not None and expected != known[0])
        ):
            # One with no canonical form is refused alone, with its reason.
            with contextlib.suppress(SerializationError):
                sealing = append.seal_after(known[0], known[1])
        if known is None or sealing is None:
            heads[saga_id] = None
            alone.append(index)
            continue
        entry, payload_bytes = sealing
        # ENDED frees the lease: no token holds after it.
        heads[saga_id] = (entry.seq, entry.hash, None if entry.phase is Phase.ENDED else known[2])
        sealed.append(_Sealed(index, append, entry, payload_bytes))
    return sealed, alone


def _array_literal(values: Sequence[object]) -> str:
    """A PostgreSQL array literal of `values` (str, int or None), every string quoted.

    Inside double quotes only a backslash and a double quote need escaping (with a
    backslash); braces, commas, spaces and the word NULL are then plain text. A column
    of plain strings with neither, or of ints, is joined in one call.
    """
    kinds = set(map(type, values))
    if kinds == _STR:
        whole = "".join(values)  # type: ignore[arg-type]  # all str, as `kinds` says
        if '"' not in whole and "\\" not in whole:
            return '{"' + '","'.join(values) + '"}'  # type: ignore[arg-type]
    elif kinds == _INT:
        return "{" + ",".join(map(str, values)) + "}"
    items = []
    for value in values:
        if value is None:
            items.append("NULL")
        elif type(value) is int:
            items.append(str(value))
        else:
            text = str(value)
            if "\\" in text or '"' in text:
                text = text.replace("\\", "\\\\").replace('"', '\\"')
            items.append(f'"{text}"')
    return "{" + ",".join(items) + "}"


_STR = {str}
_INT = {int}


def _names(requests: Sequence[AppendRequest]) -> str:
    return ", ".join(repr(saga) for saga in sorted({r.saga_id for r in requests}))
