"""A database-only effect in a DBOS transaction, on the journal's own PostgreSQL, killed anywhere.

The tool books a seat: one row inserted in a `SQLAlchemyDatasource` transaction (DBOS
3.4's `@DBOS.transaction`) of the database that holds the journal. The process is
SIGKILLed at each point of the call and a second process recovers the workflow. What
docs/integrations/dbos.md says holds: the row is never written twice; the EXECUTED does
not commit with it, so a kill between the two leaves the call in doubt, and a kill
inside the uncommitted transaction leaves it in doubt too though nothing was written;
a reconciler that reads the row settles both, and then the row is written exactly once.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator

import pytest

from sagacity import Sagacity
from sagacity.audit import verify
from tests._postgres import admin_connection, require_server, server_url, with_query
from tests.integrations.dbos._tx_process import seats_table
from tests.processes._kill import running_until

pytestmark = pytest.mark.slow

PROCESS = "tests.integrations.dbos._tx_process"


@pytest.fixture(scope="module")
def schema() -> Iterator[str]:
    """One schema for the journal, DBOS's tables and the seats: one database.

    Shared by the file's tests (each saga its own id): DBOS creates its tables once.
    """
    require_server()
    name = f"sagacity_dbos_tx_{uuid.uuid4().hex[:10]}"
    with admin_connection() as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
        conn.execute(f"CREATE TABLE {seats_table(name)} (saga_id text, call_id text, seat text)")
    yield name
    with admin_connection() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def run_with_a_kill(schema: str, kill_at: str, *, reconcile: bool) -> tuple[str, int]:
    """The saga's outcome and the seat's rows after a kill at `kill_at` and a recovery."""
    saga_id = f"booking-{uuid.uuid4().hex[:8]}"
    command = [sys.executable, "-m", PROCESS, schema, server_url()]
    answer = "yes" if reconcile else "no"
    with running_until([*command, kill_at, saga_id, answer, "start"], "ready") as first:
        assert first.wait(120) == -9, "the kill point was never reached"
    with running_until([*command, "-", saga_id, answer], "ready") as second:
        assert second.stdout is not None
        line = second.stdout.readline()
        assert line.startswith("ended"), line
    with Sagacity.from_url(with_query(server_url(), schema=schema)) as sagacity:
        entries = sagacity.history(saga_id)
        assert verify(sagacity.journal, saga_id).ok
    with admin_connection() as conn:
        found = conn.execute(
            f"SELECT count(*) FROM {seats_table(schema)} WHERE saga_id = %s", (saga_id,)
        ).fetchone()
    assert entries[-1].phase.value == "ENDED"
    assert found is not None
    return str(entries[-1].payload["outcome"]), int(found[0])


@pytest.mark.parametrize(
    ("kill_at", "outcome", "rows"),
    [
        ("book:start", "COMPLETED", 1),
        ("book:uncommitted", "NEEDS_ATTENTION", 0),
        ("book:committed", "NEEDS_ATTENTION", 1),
        ("book:done", "COMPLETED", 1),
    ],
)
def test_without_a_reconciler_the_row_is_written_at_most_once(
    schema: str, kill_at: str, outcome: str, rows: int
) -> None:
    """Killed between INTENT and EXECUTED, the call is in doubt, committed or not."""
    assert run_with_a_kill(schema, kill_at, reconcile=False) == (outcome, rows)


KILL_POINTS = ["book:start", "book:uncommitted", "book:committed", "book:done"]


@pytest.mark.parametrize("kill_at", KILL_POINTS)
def test_with_a_reconciler_that_reads_the_row_it_is_written_exactly_once(
    schema: str, kill_at: str
) -> None:
    """The row is in the journal's database: its presence says whether the call landed."""
    assert run_with_a_kill(schema, kill_at, reconcile=True) == ("COMPLETED", 1)
