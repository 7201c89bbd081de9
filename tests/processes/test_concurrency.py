"""Concurrent writers on SQLite: processes and parallel tool calls keep one gapless chain."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from sagacity import CompensationContext, Phase, Sagacity, SagaOutcome, compensable, compensation
from sagacity.audit import verify
from sagacity.journal import JournalEntry, SqliteJournal

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def assert_one_chain(entries: list[JournalEntry]) -> None:
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert all(after.prev_hash == before.hash for before, after in itertools.pairwise(entries))


class TestProcesses:
    def test_four_processes_append_to_one_saga(self, tmp_path: Path) -> None:
        """4 processes append 200 entries each: one gapless chain of 800 that verifies.

        No seq is missing or repeated, and each process's entries keep their own order.
        """
        database = tmp_path / "journal.db"
        SqliteJournal(database).close()  # the schema exists before the writers race
        children = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.processes._child",
                    "append",
                    str(database),
                    "shared",
                    "200",
                    str(worker),
                ],
                cwd=ROOT,
                stderr=subprocess.PIPE,
                text=True,
            )
            for worker in range(4)
        ]
        for child in children:
            _, errors = child.communicate(timeout=120)
            assert child.returncode == 0, errors
        journal = SqliteJournal(database)
        entries = journal.entries("shared")
        assert_one_chain(entries)
        assert len(entries) == 800
        by_worker: dict[int, list[int]] = {}
        for entry in entries:
            payload = entry.payload
            assert isinstance(payload, dict)
            by_worker.setdefault(int(payload["worker"]), []).append(int(payload["n"]))
        assert by_worker == {worker: list(range(200)) for worker in range(4)}
        assert verify(journal).ok
        journal.close()


class Lookups:
    @compensable(by="forget")
    async def lookup(self, n: int) -> int:
        await asyncio.sleep(0.001 * (n % 5))
        return n * n

    @compensable(by="forget")
    def blocking_lookup(self, n: int) -> int:
        return n * n

    @compensation
    def forget(self, ctx: CompensationContext) -> None:
        """Nothing to undo: these sagas complete."""


@pytest.fixture(params=["sqlite", "memory"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'journal.db'}" if request.param == "sqlite" else "memory://"


class TestParallelCalls:
    async def test_twenty_async_calls_in_one_saga(self, url: str) -> None:
        """asyncio.gather of 20 calls: one gapless chain that verifies.

        All INTENTs precede the EXECUTEDs (the calls really overlap), and each EXECUTED
        answers its own INTENT with that call's result.
        """
        sagacity = Sagacity.from_url(url)
        lookup = next(tool for tool in sagacity.wrap(Lookups()) if tool.name == "lookup")

        async def work() -> list[int]:
            return list(await asyncio.gather(*(lookup(n) for n in range(20))))

        result = await sagacity.asaga("batch", work)
        assert result.outcome is SagaOutcome.COMPLETED
        assert result.value == [n * n for n in range(20)]
        entries = sagacity.history("batch")
        assert_one_chain(entries)
        assert [e.phase for e in entries[:20]] == [Phase.INTENT] * 20
        assert [e.phase for e in entries[20:40]] == [Phase.EXECUTED] * 20
        assert entries[40].phase is Phase.ENDED
        intents = {e.seq: e for e in entries[:20]}
        for executed in entries[20:40]:
            intent = intents.pop(executed.ref_seq)
            assert intent.call_id == executed.call_id
            n = intent.payload["input"]["n"]
            assert executed.payload == {"result": n * n}
        assert intents == {}
        assert verify(sagacity.journal).ok
        sagacity.close()

    async def test_twenty_calls_from_worker_threads(self, url: str) -> None:
        """Sync calls in 20 threads (context copied, as frameworks do) share one saga."""
        sagacity = Sagacity.from_url(url)
        blocking = next(t for t in sagacity.wrap(Lookups()) if t.name == "blocking_lookup")

        async def work() -> list[int]:
            return list(await asyncio.gather(*(asyncio.to_thread(blocking, n) for n in range(20))))

        result = await sagacity.asaga("threads", work)
        assert result.outcome is SagaOutcome.COMPLETED
        assert result.value == [n * n for n in range(20)]
        entries = sagacity.history("threads")
        assert_one_chain(entries)
        assert sorted(e.call_id for e in entries if e.phase is Phase.INTENT) == sorted(
            f"blocking_lookup#{n}" for n in range(1, 21)
        )
        assert sum(e.phase is Phase.EXECUTED for e in entries) == 20
        assert verify(sagacity.journal).ok
        sagacity.close()
