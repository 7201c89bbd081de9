"""An append's statements as steps, run the same way by a sync and an async connection.

The logic of an append (which statement to send next, what its answer means) is written
once, as a generator that yields each `Statement` and receives its answer, or the
`psycopg.Error` it raised, thrown in where it was yielded. `run_steps` drives it on a
sync cursor, `arun_steps` on an async one: the event loop awaits each statement without
a thread in between, and neither copy of the logic can drift from the other.

An append's own `INSERT` (`Statement.prepared`) goes as a server-side prepared
statement with its parameters as text, on the connection's libpq handle
(`execute_prepared`): psycopg's cursor spends a quarter of an append's client time
adapting and describing a statement whose shape never changes; on an event loop, that is
time taken from every other saga of the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Generator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

import psycopg
from psycopg import errors, generators, pq, waiting

__all__ = [
    "ALL",
    "NOTHING",
    "ONE",
    "Answer",
    "PreparedSql",
    "Statement",
    "Steps",
    "arun_steps",
    "run_steps",
]

T = TypeVar("T")

NOTHING, ONE, ALL = 0, 1, 2
"""What a statement's answer carries besides its row count: nothing, a row, all rows."""


class PreparedSql(NamedTuple):
    """A statement's SQL as a prepared statement: its name, and its `$n` placeholders."""

    name: bytes
    numbered: bytes

    @classmethod
    def of(cls, sql: bytes) -> PreparedSql:
        """`sql` prepared; its only `%` are `%s` placeholders (`parse_url` refuses `%` in names)."""
        pieces = sql.split(b"%s")
        assert not any(b"%" in piece for piece in pieces), sql
        numbered = b"".join(
            piece if index == 0 else b"$%d%s" % (index, piece) for index, piece in enumerate(pieces)
        )
        # Named by its text: two journals' statements on one connection never collide.
        return cls(b"sagacity_" + hashlib.sha256(sql).hexdigest()[:16].encode(), numbered)


class Statement(NamedTuple):
    sql: bytes | str
    params: Sequence[object] | Mapping[str, object]
    fetch: int
    prepared: PreparedSql | None = None
    """For a statement that fetches nothing: how to send it prepared (`execute_prepared`)."""


Answer = tuple[int, Any]
"""A statement's row count, and its row (`ONE`: a tuple or None), rows (`ALL`) or None."""

Steps = Generator[Statement, Answer, T]


def run_steps(
    cursor: psycopg.Cursor[Any], steps: Steps[T], prepared: set[bytes] | None = None
) -> T:
    """Run `steps` on a sync cursor; return what they return, raise what they raise.

    With `prepared`, the names of the statements prepared on the cursor's connection, a
    `Statement.prepared` statement goes by `execute_prepared`.
    """
    try:
        statement = next(steps)
        while True:
            try:
                if prepared is not None and statement.prepared is not None:
                    answer = execute_prepared(cursor.connection, statement, prepared)
                    if answer is not None:
                        statement = steps.send(answer)
                        continue
                cursor.execute(statement.sql, statement.params)
                fetch = statement.fetch
                answer = (
                    cursor.rowcount,
                    cursor.fetchone() if fetch == ONE else cursor.fetchall() if fetch else None,
                )
            except psycopg.Error as error:
                statement = steps.throw(error)
            else:
                statement = steps.send(answer)
    except StopIteration as stop:
        result: T = stop.value
        return result


async def arun_steps(
    cursor: psycopg.AsyncCursor[Any], steps: Steps[T], prepared: set[bytes] | None = None
) -> T:
    """Run `steps` on an async cursor: `run_steps` for the event loop.

    With `prepared`, the names of the statements prepared on the cursor's connection, a
    `Statement.prepared` statement goes by `aexecute_prepared`.
    """
    try:
        statement = next(steps)
        while True:
            try:
                if prepared is not None and statement.prepared is not None:
                    answer = await aexecute_prepared(cursor.connection, statement, prepared)
                    if answer is not None:
                        statement = steps.send(answer)
                        continue
                await cursor.execute(statement.sql, statement.params)
                fetch = statement.fetch
                answer = (
                    cursor.rowcount,
                    await cursor.fetchone()
                    if fetch == ONE
                    else await cursor.fetchall()
                    if fetch
                    else None,
                )
            except psycopg.Error as error:
                statement = steps.throw(error)
            else:
                statement = steps.send(answer)
    except StopIteration as stop:
        result: T = stop.value
        return result


_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_BAD = pq.ConnStatus.BAD
_IDLE = pq.TransactionStatus.IDLE
_NOT_PREPARED = "26000"  # invalid_sql_statement_name: a DEALLOCATE dropped it
_ALREADY_PREPARED = "42P05"  # duplicate_prepared_statement: a cancelled PREPARE went through


def execute_prepared(
    conn: psycopg.Connection[Any], statement: Statement, prepared: set[bytes]
) -> Answer | None:
    """Run `statement` as a prepared statement, text parameters, on `conn`'s libpq handle.

    The statement is prepared on the connection at its first use there; `prepared` holds
    the names already prepared on it. The wait is psycopg's own (`Connection.wait`), which
    cancels the statement in the server when it is interrupted, as `cursor.execute` does;
    an error is the `psycopg.Error` the cursor would raise.

    Returns None, having sent nothing, when a parameter is not a `str`, an `int` or None,
    or a string holds NUL (which a text parameter cannot carry, and psycopg refuses), or
    a transaction is open: the cursor then runs the statement.
    """
    sending = _sending(conn.pgconn, statement, prepared)
    try:
        step = next(sending)
        while True:
            step = sending.send(conn.wait(step))
    except StopIteration as stop:
        answer: Answer | None = stop.value
        return answer


async def aexecute_prepared(
    conn: psycopg.AsyncConnection[Any], statement: Statement, prepared: set[bytes]
) -> Answer | None:
    """`execute_prepared` on the event loop (see `_await_exchange` for the wait)."""
    sending = _sending(conn.pgconn, statement, prepared)
    try:
        step = next(sending)
        while True:
            step = sending.send(await _await_exchange(conn, step))
    except StopIteration as stop:
        answer: Answer | None = stop.value
        return answer


_Results = Generator[Any, Any, list[pq.abc.PGresult]]
_ACTIVE = pq.TransactionStatus.ACTIVE
_WAIT_R, _WAIT_W = waiting.Wait.R, waiting.Wait.W
_READY_R, _READY_W = waiting.Ready.R, waiting.Ready.W


async def _await_exchange(conn: psycopg.AsyncConnection[Any], exchange: _Results) -> Any:
    """`AsyncConnection.wait(exchange)`, without its timer: a future the socket sets.

    psycopg's wait arms a timer on every wait, to look up every tenth of a second, which
    an event loop, woken by the socket, never needs: a fifth of what an append costs the
    loop besides its statement. Interrupted, it does what psycopg's does: with the
    statement running, it asks the server to cancel it and waits up to 5 s for its end,
    and a second interruption, or a server that does not end it, closes the connection;
    then it raises the interruption.
    """
    pgconn = conn.pgconn
    try:
        return await _socket_exchange(exchange, pgconn.socket)
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
        if pgconn.transaction_status == _ACTIVE:
            try:
                with contextlib.suppress(Exception):  # not sent: the wait below says so
                    await conn.cancel_safe(timeout=5.0)
                await waiting.wait_async(exchange, pgconn.socket, interval=0.1, timeout=5.0)
            except errors.QueryCanceled:
                pass  # as asked
            except BaseException as again:  # interrupted again, or not ended: state unknown
                pgconn.finish()
                if not isinstance(again, Exception):
                    raise
        raise


async def _socket_exchange(exchange: _Results, fileno: int) -> Any:
    loop = asyncio.get_running_loop()
    try:
        state = next(exchange)
        while True:
            ready: asyncio.Future[int] = loop.create_future()
            reading, writing = state & _WAIT_R, state & _WAIT_W
            if reading:
                loop.add_reader(fileno, _set_once, ready, _READY_R)
            if writing:
                loop.add_writer(fileno, _set_once, ready, _READY_W)
            try:
                await ready
            finally:
                if reading:
                    loop.remove_reader(fileno)
                if writing:
                    loop.remove_writer(fileno)
            state = exchange.send(ready.result())
    except StopIteration as done:
        return done.value
    except OSError as error:
        raise psycopg.OperationalError("connection socket closed") from error


def _set_once(future: asyncio.Future[int], state: int) -> None:
    if not future.done():
        future.set_result(state)


_Exchange = Generator[
    Generator[Any, Any, list[pq.abc.PGresult]], list[pq.abc.PGresult], Answer | None
]


def _sending(pgconn: pq.abc.PGconn, statement: Statement, prepared: set[bytes]) -> _Exchange:
    """What `execute_prepared` sends and makes of each answer, for a sync or async wait.

    Yields each exchange with the server, for the caller to wait on, and receives its
    results.
    """
    assert statement.prepared is not None
    assert statement.fetch == NOTHING
    values = _text_values(statement.params)
    if values is None or pgconn.transaction_status != _IDLE:
        return None
    name = statement.prepared.name
    for _ in range(2):
        if name not in prepared:
            pgconn.send_prepare(name, statement.prepared.numbered, None)
            done = _answer(pgconn, (yield generators.execute(pgconn)))
            if done.status != _COMMAND_OK and _sqlstate(done) != _ALREADY_PREPARED:
                raise errors.error_from_result(done)
            prepared.add(name)
        pgconn.send_query_prepared(name, values, None, 0)
        result = _answer(pgconn, (yield generators.execute(pgconn)))
        if result.status == _COMMAND_OK:
            return result.command_tuples or 0, None
        if _sqlstate(result) != _NOT_PREPARED:
            break
        prepared.discard(name)  # deallocated meanwhile: prepared again, and sent again
    raise errors.error_from_result(result)


def _answer(pgconn: pq.abc.PGconn, results: list[pq.abc.PGresult]) -> pq.abc.PGresult:
    """The answer to one statement: its result, or its error.

    A connection lost on the way (a backend terminated while it worked) can leave two
    results, the server's farewell and libpq's, or none: then the statement's fate is
    unknown, and the error says the connection was lost (`is_transient`), whatever the
    results hold.
    """
    if pgconn.status == _BAD or not results:
        raise errors.OperationalError(
            "the connection to the server was lost: "
            + (pq.error_message(pgconn).strip() or "no answer came")
        )
    for result in results:
        if result.status != _COMMAND_OK:
            return result
    return results[0]


def _sqlstate(result: pq.abc.PGresult) -> str | None:
    code = result.error_field(pq.DiagnosticField.SQLSTATE)
    return None if code is None else code.decode()


def _text_values(params: Sequence[object] | Mapping[str, object]) -> list[bytes | None] | None:
    """`params` as text parameters; None if one is not a str, an int or None, or can't be one.

    A string with NUL or a lone surrogate can't: psycopg refuses it, as it always did.
    """
    if type(params) is not tuple:
        return None
    values: list[bytes | None] = []
    for value in params:
        if type(value) is str:
            if "\x00" in value:
                return None
            try:
                values.append(value.encode())
            except UnicodeEncodeError:
                return None
        elif type(value) is int:
            values.append(b"%d" % value)
        elif value is None:
            values.append(None)
        else:
            return None
    return values
