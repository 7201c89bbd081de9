"""A DBOS application whose one tool books a seat in a database transaction; it can kill itself.

python -m tests.integrations.dbos._tx_process SCHEMA SERVER KILL_AT SAGA RECONCILE [start]

The journal, DBOS's system tables, the datasource's outputs and the `seats` table all
live in SCHEMA of the test server SERVER: one PostgreSQL database. The tool `book`
inserts a row in a `SQLAlchemyDatasource` transaction (DBOS 3.4's successor to
`@DBOS.transaction`); RECONCILE `yes` declares a reconciler that reads the row. The
process SIGKILLs itself at KILL_AT (`-`: nowhere):

- `book:start`: before the call journals anything;
- `book:uncommitted`: the row inserted, its transaction not committed;
- `book:committed`: the transaction committed, EXECUTED not journaled;
- `book:done`: EXECUTED journaled, DBOS not told.

It prints `ready`, then `ended` (or `ended <error>`) once the saga's workflow returned.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, SetWorkflowID, SQLAlchemyDatasource

from sagacity import (
    CompensationContext,
    Evidence,
    ReconcileContext,
    Reconciled,
    Sagacity,
    compensable,
    compensation,
    current_call,
)
from sagacity.integrations._engine import Ran
from sagacity.integrations.dbos import DBOSSaga, SagaSteps
from tests._postgres import with_query
from tests.integrations.dbos.conftest import dbos_config

STEPS: dict[str, SagaSteps] = {}


def seats_table(schema: str) -> str:
    return f'"{schema}".seats'


class Seats:
    """Book a seat: one row of `seats`, inserted in a datasource transaction."""

    def __init__(self, datasource: SQLAlchemyDatasource, schema: str, kill_at: str) -> None:
        self.datasource = datasource
        self.table = seats_table(schema)
        self.kill_at = kill_at
        self.insert = datasource.transaction(name="book_seat")(self._insert)

    def point(self, name: str) -> None:
        if name == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def _insert(self, saga_id: str, call_id: str, seat: str) -> str:
        session = self.datasource.sql_session()
        session.execute(
            sa.text(
                f"INSERT INTO {self.table} (saga_id, call_id, seat) "
                "VALUES (:saga_id, :call_id, :seat)"
            ),
            {"saga_id": saga_id, "call_id": call_id, "seat": seat},
        )
        session.flush()
        self.point("book:uncommitted")
        return f"seat-{seat}"

    def booked(self, seat: str) -> str:
        call = current_call()
        assert call is not None
        result = self.insert(call.saga_id, call.call_id, seat)
        self.point("book:committed")
        return result

    def rows(self, saga_id: str, call_id: str) -> int:
        with self.datasource.engine.connect() as conn:
            found = conn.execute(
                sa.text(
                    f"SELECT count(*) FROM {self.table} "
                    "WHERE saga_id = :saga_id AND call_id = :call_id"
                ),
                {"saga_id": saga_id, "call_id": call_id},
            )
            return int(found.scalar_one())


class PlainSeats(Seats):
    """No reconciler: a call in doubt stays in doubt."""

    @compensable(by="cancel")
    def book(self, seat: str) -> str:
        return self.booked(seat)

    @compensation
    def cancel(self, ctx: CompensationContext) -> None:
        raise AssertionError("a one-call saga that completes never cancels")


class ReconciledSeats(Seats):
    """A reconciler that reads the row: in the same database, the doubt is decidable."""

    @compensable(by="cancel", reconcile="find_booking")
    def book(self, seat: str) -> str:
        return self.booked(seat)

    @compensation
    def cancel(self, ctx: CompensationContext) -> None:
        raise AssertionError("a one-call saga that completes never cancels")

    def find_booking(self, ctx: ReconcileContext) -> Reconciled:
        rows = self.rows(ctx.saga_id, ctx.call_id)
        evidence = Evidence.of(f"seats?call_id={ctx.call_id}", str(rows).encode())
        if rows == 0:
            return Reconciled.did_not_land(evidence=evidence)
        return Reconciled.landed(f"seat-{ctx.input['seat']}", evidence=evidence)


class KillingSteps(SagaSteps):
    """The steps, with the `book:start` and `book:done` kill points around the call."""

    def __init__(self, sagacity: Sagacity, seats: Seats) -> None:
        super().__init__(sagacity, [seats])
        self.seats = seats

    def _call(
        self, tool: str, call_id: str | None, arguments: dict[str, Any], approved: bool
    ) -> Ran:
        self.seats.point(f"{tool}:start")
        ran = super()._call(tool, call_id, arguments, approved)
        self.seats.point(f"{tool}:done")
        return ran


@DBOS.workflow()
def booking_workflow(seat: str) -> str:
    with DBOSSaga(STEPS["tx"]) as saga:
        return str(saga.call("book", seat=seat))


def main(schema: str, server: str, kill_at: str, saga_id: str, reconcile: str, *start: str) -> None:
    url = with_query(server, schema=schema)
    datasource = SQLAlchemyDatasource.create(server, schema=schema)
    seats = (ReconciledSeats if reconcile == "yes" else PlainSeats)(datasource, schema, kill_at)
    with Sagacity.from_url(url) as sagacity:
        STEPS["tx"] = KillingSteps(sagacity, seats)
        DBOS(config=dbos_config(schema))
        DBOS.launch()
        try:
            if start:
                with SetWorkflowID(saga_id):
                    DBOS.start_workflow(booking_workflow, "12C")
            print("ready", flush=True)
            try:
                DBOS.retrieve_workflow(saga_id).get_result()
            except Exception as error:
                print(f"ended {type(error).__name__}", flush=True)
            else:
                print("ended", flush=True)
        finally:
            DBOS.destroy()


if __name__ == "__main__":
    main(*sys.argv[1:])
