"""An append's statements as steps, run the same way by a sync and an async connection.

The logic of an append (which statement to send next, what its answer means) is written
once, as a generator that yields each `Statement` and receives its answer, or the
`psycopg.Error` it raised, thrown in where it was yielded. `run_steps` drives it on a
sync cursor, `arun_steps` on an async one: the event loop awaits each statement without
a thread in between, and neither copy of the logic can drift from the other.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

import psycopg

__all__ = ["ALL", "NOTHING", "ONE", "Answer", "Statement", "Steps", "arun_steps", "run_steps"]

T = TypeVar("T")

NOTHING, ONE, ALL = 0, 1, 2
"""What a statement's answer carries besides its row count: nothing, a row, all rows."""


class Statement(NamedTuple):
    sql: bytes | str
    params: Sequence[object] | Mapping[str, object]
    fetch: int


Answer = tuple[int, Any]
"""A statement's row count, and its row (`ONE`: a tuple or None), rows (`ALL`) or None."""

Steps = Generator[Statement, Answer, T]


def run_steps(cursor: psycopg.Cursor[Any], steps: Steps[T]) -> T:
    """Run `steps` on a sync cursor; return what they return, raise what they raise."""
    try:
        statement = next(steps)
        while True:
            try:
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


async def arun_steps(cursor: psycopg.AsyncCursor[Any], steps: Steps[T]) -> T:
    """Run `steps` on an async cursor: `run_steps` for the event loop."""
    try:
        statement = next(steps)
        while True:
            try:
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
