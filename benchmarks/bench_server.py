"""The server's cost: the first page of `GET /sagacity/sagas` over many sagas, and an approval.

Run: `.venv/bin/python -m benchmarks bench_server`.

A SQLite journal is filled with `SAGACITY_BENCH_SERVER_SAGAS` sagas (default 10,000) of
three entries each (INTENT, EXECUTED, ENDED), hashed by the journal's own code and
inserted in one transaction (filling it through 30,000 durable appends would measure
the disk, not the listing). Then, through the real app and FastAPI's `TestClient` (ASGI
in process, no socket):

- list: `GET /sagacity/sagas?limit=50`, the first page, `ROUNDS` times;
- approve: `POST /sagacity/approvals/{id}/approve` with the sha256, for a fresh saga
  waiting on an IRREVERSIBLE call each round (asked before the clock starts): the
  lookup of the request, the checks, the durable APPROVED append and the answer.

Each is reported as p50 and p99 in milliseconds. Set `SAGACITY_BENCH_SERVER_ROUNDS`
(default 200) to change the rounds.
"""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from sagacity import Phase, Reversibility, Sagacity, compensable
from sagacity.journal import InMemoryJournal
from sagacity.journal._canonical import canonical_bytes
from sagacity.journal._rows import row_of
from sagacity.server import Principal, TokenAuth, create_app

SAGAS = int(os.environ.get("SAGACITY_BENCH_SERVER_SAGAS", "10000"))
ROUNDS = int(os.environ.get("SAGACITY_BENCH_SERVER_ROUNDS", "200"))
HEADERS = {"Authorization": "Bearer bench-token"}


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def wire(amount: str, to: str) -> str:
    """Wire money (never runs here: it only waits for approval)."""
    return f"wired {amount}"


def fill(path: Path, sagas: int) -> None:
    """Write `sagas` finished sagas into the SQLite journal at `path`, in one transaction."""
    memory = InMemoryJournal()
    rows = []
    for n in range(sagas):
        saga_id = f"order-{n:06d}"
        intent = memory.append(
            saga_id, Phase.INTENT, tool_name="reserve", call_id="c1", payload={"input": {"n": n}}
        )
        done = memory.append(
            saga_id, Phase.EXECUTED, tool_name="reserve", call_id="c1", ref_seq=1, payload={}
        )
        ended = memory.append(saga_id, Phase.ENDED, payload={"outcome": "COMPLETED"})
        rows += [row_of(e, canonical_bytes(e.payload)) for e in (intent, done, ended)]
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO sagacity_journal (saga_id, seq, phase, tool_name, call_id, ref_seq, "
            "payload, recorded_at, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=os.environ.get("SAGACITY_BENCH_DIR")) as folder:
        path = Path(folder) / "bench.db"
        sagacity = Sagacity.from_url(f"sqlite:///{path}")  # creates the schema
        fill(path, SAGAS)
        sagacity.wrap(wire)
        auth = TokenAuth.from_tokens(
            {"bench-token": Principal("bench", frozenset({"approver", "operator"}))}
        )
        listing: list[float] = []
        approving: list[float] = []
        with TestClient(create_app(sagacity, auth, ui=False)) as client:
            first = client.get("/sagacity/sagas", params={"limit": 50}, headers=HEADERS)
            assert first.status_code == 200
            assert len(first.json()["sagas"]) == min(50, SAGAS)
            for _ in range(ROUNDS):
                started = time.perf_counter()
                response = client.get("/sagacity/sagas", params={"limit": 50}, headers=HEADERS)
                listing.append(time.perf_counter() - started)
                assert response.status_code == 200
            for n in range(ROUNDS):
                saga_id = f"wire-{n:05d}"
                sagacity.saga(saga_id, lambda: sagacity.tool("wire")(amount="1", to="x"))
                request = sagacity.pending(saga_id)[0]
                started = time.perf_counter()
                response = client.post(
                    f"/sagacity/approvals/{request.request_id}/approve",
                    json={"sha256": request.input_sha256},
                    headers=HEADERS,
                )
                approving.append(time.perf_counter() - started)
                assert response.status_code == 200, response.text
        sagacity.close()

    ms = 1e3
    print(
        f"bench_server: nproc {os.cpu_count()}, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, load average before the run {load:.2f}"
    )
    print(f"{SAGAS} sagas of 3 entries; {ROUNDS} rounds each; TestClient (ASGI, no socket)")
    print()
    print(f"| {'measurement':<52} | {'p50 ms':>8} | {'p99 ms':>8} |")
    print(f"|{'-' * 54}|{'-' * 9}:|{'-' * 9}:|")
    for label, values in (
        (f"GET /sagacity/sagas?limit=50 (first page of {SAGAS})", listing),
        ("POST /sagacity/approvals/{id}/approve (round trip)", approving),
    ):
        print(
            f"| {label:<52} | {statistics.median(values) * ms:>8.2f} "
            f"| {percentile(values, 0.99) * ms:>8.2f} |"
        )


if __name__ == "__main__":
    main()
