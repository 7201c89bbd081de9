"""One worker per saga: leases in the journal's database, renewed, taken over, fenced.

The journal-level tests run on every backend; the process tests run real workers on
SQLite and PostgreSQL and kill or stop them.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import pytest

from sagacity import (
    ConfigurationError,
    LeaseLostError,
    Phase,
    SagaBusyError,
    Sagacity,
    SagaOutcome,
    SagaResult,
    SagaStateError,
)
from sagacity.journal import SagaLease, SideEffectJournal
from sagacity.testing import FakeClock
from tests._shop import Shop, tools_of
from tests.journal._awaited import driven
from tests.processes._lease_child import Ledger

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC)
MINUTE = datetime.timedelta(minutes=1)


def take(journal: SideEffectJournal, owner: str, now: datetime.datetime) -> SagaLease:
    return take_saga(journal, "s", owner, now)


def take_saga(
    journal: SideEffectJournal, saga_id: str, owner: str, now: datetime.datetime
) -> SagaLease:
    return journal.acquire_lease(saga_id, owner, now=now, expires_at=now + MINUTE)


@pytest.fixture(params=["sync", "async"])
def journal(sagacity: Sagacity, request: pytest.FixtureRequest) -> Iterator[SideEffectJournal]:
    """The journal, or the same driven from an event loop as async sagas drive it.

    `async`: its appends, reads and lease takes are awaited on a loop (see
    tests/journal/_awaited.py).
    """
    yield from driven(sagacity.journal, request.param)


class TestJournalLeases:
    def test_a_held_lease_refuses_another_worker(self, journal: SideEffectJournal) -> None:
        """While a lease runs, another worker is refused, naming the holder and the time."""
        lease = take(journal, "worker-a", T0)
        assert (lease.saga_id, lease.owner, lease.token) == ("s", "worker-a", 1)
        with pytest.raises(SagaBusyError, match="is held by worker-a until 2026-12-01T09:01"):
            take(journal, "worker-b", T0 + MINUTE / 2)

    def test_an_expired_lease_is_taken_over_with_a_greater_token(
        self, journal: SideEffectJournal
    ) -> None:
        """After its expiry a lease goes to the next worker, with the next token."""
        first = take(journal, "worker-a", T0)
        second = take(journal, "worker-b", T0 + MINUTE)
        assert (second.owner, second.token) == ("worker-b", first.token + 1)

    def test_a_released_lease_is_free_at_once(self, journal: SideEffectJournal) -> None:
        """A released lease can be taken before its expiry; tokens still grow."""
        first = take(journal, "worker-a", T0)
        journal.release_lease(first)
        assert take(journal, "worker-b", T0).token == 2

    def test_a_taken_over_holder_appends_nothing(self, journal: SideEffectJournal) -> None:
        """A holder whose lease was taken over is fenced: its appends and renewals fail.

        The new holder's appends are written; unfenced appends are not affected.
        """
        old = take(journal, "worker-a", T0)
        journal.append("s", Phase.INTENT, tool_name="t", call_id="t#1", fence=old)
        new = take(journal, "worker-b", T0 + 2 * MINUTE)

        with pytest.raises(LeaseLostError, match="taken over"):
            journal.append("s", Phase.INTENT, tool_name="t", call_id="t#2", fence=old)
        with pytest.raises(LeaseLostError):
            journal.renew_lease(old, expires_at=T0 + 3 * MINUTE)
        journal.release_lease(old)  # leaves the new holder's lease alone
        journal.append("s", Phase.INTENT, tool_name="t", call_id="t#3", fence=new)
        journal.append("s", Phase.APPROVED, call_id="t#3")
        entries = journal.entries("s")
        assert [(e.phase, e.call_id) for e in entries] == [
            (Phase.INTENT, "t#1"),
            (Phase.TAKEN_OVER, None),
            (Phase.INTENT, "t#3"),
            (Phase.APPROVED, "t#3"),
        ]
        assert entries[1].payload == {"owner": "worker-b"}
        with pytest.raises(SagaBusyError):
            take(journal, "worker-c", T0 + 2 * MINUTE)

    def test_a_fenced_append_from_a_fresh_journal_is_refused_too(
        self, shared_store_url: str
    ) -> None:
        """A journal that never saw the saga appends on its locked path: fenced there too."""
        store_url = shared_store_url
        writer, other = Sagacity.from_url(store_url), Sagacity.from_url(store_url)
        try:
            old = take(writer.journal, "worker-a", T0)
            take(other.journal, "worker-b", T0 + 2 * MINUTE)
            fresh = Sagacity.from_url(store_url)
            with pytest.raises(LeaseLostError):
                fresh.journal.append("s", Phase.INTENT, call_id="x", fence=old)
            assert fresh.journal.entries("s") == []
            fresh.close()
        finally:
            writer.close()
            other.close()

    @pytest.mark.parametrize("edge", ["sync", "async"])
    @pytest.mark.parametrize(
        "last_seen", ["its own append", "a read after the takeover", "its release", "its ENDED"]
    )
    def test_a_former_holder_with_a_warm_journal_writes_nothing(
        self, shared_store_url: str, last_seen: str, edge: str
    ) -> None:
        """A holder's journal that knows the saga's head is fenced out all the same.

        Its next append would follow the head it knows with one INSERT: a takeover
        journaled TAKEN_OVER at that seq; after a release or an ENDED the journal no
        longer writes unchecked under the old token; and a read that moved its head
        past TAKEN_OVER makes it check again. The same for a former holder that takes,
        appends and reads from an event loop (`edge`), as an async saga does.
        """
        former, taker = Sagacity.from_url(shared_store_url), Sagacity.from_url(shared_store_url)
        try:
            with contextlib.contextmanager(driven)(former.journal, edge) as journal:
                old = take(journal, "worker-a", T0)
                for call_id in ("t#1", "t#2"):  # the second one on PostgreSQL's fast path
                    journal.append("s", Phase.INTENT, tool_name="t", call_id=call_id, fence=old)
                if last_seen == "its release":
                    journal.release_lease(old)
                elif last_seen == "its ENDED":
                    journal.append("s", Phase.ENDED, payload={"outcome": "X"}, fence=old)
                new = take(taker.journal, "worker-b", T0 + 2 * MINUTE)
                if last_seen == "a read after the takeover":
                    assert journal.entries("s")[-1].phase is Phase.TAKEN_OVER
                before = taker.journal.entries("s")

                with pytest.raises(LeaseLostError, match="worker-a"):
                    journal.append("s", Phase.EXECUTED, call_id="t#2", ref_seq=2, fence=old)
            assert taker.journal.entries("s") == before
            taken_over = [e.payload for e in before if e.phase is Phase.TAKEN_OVER]
            if last_seen in ("its own append", "a read after the takeover"):
                assert taken_over == [{"owner": "worker-b"}]
            else:  # freed, not taken over: nothing to journal
                assert taken_over == []
            taker.journal.append("s", Phase.INTENT, call_id="t#3", fence=new)
            assert [e.seq for e in taker.journal.entries("s")] == list(range(1, len(before) + 2))
        finally:
            former.close()
            taker.close()

    def test_a_holder_appending_through_a_takeover_lands_only_before_it(
        self, shared_store_url: str
    ) -> None:
        """A holder appending as fast as it can while another worker takes the saga over.

        Each of its entries lands before TAKEN_OVER or not at all, and once refused it
        stays refused.
        """
        former, taker = Sagacity.from_url(shared_store_url), Sagacity.from_url(shared_store_url)
        old = take(former.journal, "worker-a", T0)
        landed: list[int] = []
        refusals: list[LeaseLostError] = []
        started = threading.Event()

        def hammer() -> None:
            for n in range(10_000):
                try:
                    entry = former.journal.append("s", Phase.INTENT, call_id=f"a#{n}", fence=old)
                except LeaseLostError as refusal:
                    refusals.append(refusal)
                    if len(refusals) == 3:
                        return
                else:
                    landed.append(entry.seq)
                    if n == 20:
                        started.set()
                if started.is_set():
                    # A breath between commits: SQLite's lock is free for microseconds
                    # only, and the taker, sleeping on its busy handler, could starve.
                    time.sleep(0.0005)

        try:
            thread = threading.Thread(target=hammer)
            thread.start()
            assert started.wait(30)
            take(taker.journal, "worker-b", T0 + 2 * MINUTE)
            thread.join(60)
            assert not thread.is_alive()
            assert len(refusals) == 3
            entries = taker.journal.entries("s")
            marker = next(e for e in entries if e.phase is Phase.TAKEN_OVER)
            assert landed == list(range(1, marker.seq))
            assert entries[marker.seq :] == []
        finally:
            former.close()
            taker.close()

    def test_an_ended_saga_frees_its_lease_without_a_release(
        self, journal: SideEffectJournal
    ) -> None:
        """Writing ENDED frees the lease: the next worker takes it before its expiry.

        Ending a saga so costs no commit for the release; the ended holder is fenced as
        any other once the next one took the saga.
        """
        old = take(journal, "worker-a", T0)
        journal.append("s", Phase.ENDED, payload={"outcome": "COMPLETED"}, fence=old)
        new = take(journal, "worker-b", T0)
        assert new.token == old.token + 1
        with pytest.raises(LeaseLostError):
            journal.append("s", Phase.COMPENSATING, fence=old)

    def test_a_lease_tells_the_head_it_was_taken_at(self, journal: SideEffectJournal) -> None:
        """0 for a saga with no entries, else its last seq: TAKEN_OVER's, after a takeover."""
        taken = functools.partial(take, journal)
        first = taken("worker-a", T0)
        assert first.head_seq == 0
        journal.append("s", Phase.INTENT, tool_name="t", call_id="t#1", fence=first)
        journal.append("s", Phase.EXECUTED, tool_name="t", call_id="t#1", ref_seq=1, fence=first)
        journal.release_lease(first)
        assert taken("worker-b", T0).head_seq == 2  # released: nothing journaled
        assert taken("worker-c", T0 + 2 * MINUTE).head_seq == 3  # taken over
        assert journal.entries("s")[-1].phase is Phase.TAKEN_OVER

    def test_renewal_moves_the_expiry(self, journal: SideEffectJournal) -> None:
        """A renewed lease holds past its first expiry."""
        lease = journal.renew_lease(take(journal, "worker-a", T0), expires_at=T0 + 5 * MINUTE)
        assert lease.expires_at == T0 + 5 * MINUTE
        with pytest.raises(SagaBusyError):
            take(journal, "worker-b", T0 + 2 * MINUTE)


class TestSagaLeases:
    def test_the_lease_is_released_when_the_saga_returns(self, store_url: str) -> None:
        """After a run, compensating or resuming the saga elsewhere is not refused as busy."""
        sagacity = Sagacity.from_url(store_url)
        tools = tools_of(sagacity, Shop())
        sagacity.saga("s", lambda: tools["send_wire_transfer"]("1", "x"))
        assert sagacity.compensate("s").outcome is SagaOutcome.COMPENSATED
        sagacity.close()

    @pytest.mark.parametrize("from_async", [False, True], ids=["sync", "async"])
    def test_a_new_saga_opens_without_reading_its_journal(
        self, store_url: str, monkeypatch: pytest.MonkeyPatch, from_async: bool
    ) -> None:
        """Its lease said it had no entries; a saga run before is read, and resumes."""
        sagacity = Sagacity.from_url(store_url)
        journal = sagacity.journal
        reads: list[str] = []

        def counted(read: Callable[[str], object]) -> Callable[[str], object]:
            def reading(saga_id: str) -> object:
                reads.append(saga_id)
                return read(saga_id)

            return reading

        for name in ("entries", "aentries"):
            if hasattr(journal, name):
                monkeypatch.setattr(journal, name, counted(getattr(journal, name)))
        tools = tools_of(sagacity, Shop())

        def run(saga_id: str) -> SagaResult:
            def work() -> object:
                return tools["reserve_inventory"]("SKU-1", 1)

            if not from_async:
                return sagacity.saga(saga_id, work)

            async def awork() -> object:
                return work()

            return asyncio.run(sagacity.asaga(saga_id, awork))

        try:
            assert run("new").outcome is SagaOutcome.COMPLETED
            assert reads == []
            with pytest.raises(SagaStateError, match="ended COMPLETED"):
                run("new")  # the second run reads the first's journal, and is refused
            assert set(reads) == {"new"}
        finally:
            sagacity.close()

    def test_a_worker_taken_over_mid_run_neither_writes_nor_compensates(
        self, shared_store_url: str
    ) -> None:
        """A worker that stalled past its lease is fenced out when it wakes.

        The new holder compensates the saga; the stale worker's next call is refused
        before it runs, and its run raises LeaseLostError without a walk or an ENDED.
        """
        clock = FakeClock(T0)
        stale = Sagacity.from_url(shared_store_url, clock=clock, lease_ttl=60)
        new = Sagacity.from_url(shared_store_url, clock=clock, lease_ttl=60)
        shop, other_shop = Shop(), Shop()
        tools = tools_of(stale, shop)
        tools_of(new, other_shop)

        def work() -> None:
            tools["reserve_inventory"]("SKU-1")
            clock.advance(seconds=120)  # the worker stalls past its lease
            taker = threading.Thread(target=new.compensate, args=("s",))
            taker.start()
            taker.join()
            tools["charge_card"]("5.00", "4242")

        try:
            with pytest.raises(LeaseLostError):
                stale.saga("s", work)
            assert shop.calls["charge_card"] == 0
            assert other_shop.log == ["release res-SKU-1-1"]
            assert [(e.phase.value, e.tool_name) for e in new.history("s")][-3:] == [
                ("COMPENSATING", "reserve_inventory"),
                ("COMPENSATED", "reserve_inventory"),
                ("ENDED", None),
            ]
            assert shop.log == ["reserve SKU-1"]  # the stale worker undid nothing
        finally:
            stale.close()
            new.close()

    def test_waiting_for_a_busy_saga(self, shared_store_url: str) -> None:
        """With `lease_wait`, a worker waits for the holder instead of being refused."""
        holder = Sagacity.from_url(shared_store_url)
        waiter = Sagacity.from_url(shared_store_url, lease_wait=10)
        tools = tools_of(holder, Shop(ship_fails=True))
        tools_of(waiter, Shop())
        started, results = threading.Event(), []

        def work() -> None:
            tools["reserve_inventory"]("SKU-1")
            started.set()
            time.sleep(0.3)
            tools["ship"]("o-1")

        def compensate_when_free() -> None:
            started.wait()
            results.append(waiter.compensate("s").outcome)

        other = threading.Thread(target=compensate_when_free)
        other.start()
        try:
            assert holder.saga("s", work).outcome is SagaOutcome.COMPENSATED
            other.join(timeout=30)
            assert results == [SagaOutcome.COMPENSATED]  # the walk found nothing left
            assert [e.phase for e in holder.history("s")].count(Phase.ENDED) == 1
        finally:
            holder.close()
            waiter.close()

    @pytest.mark.parametrize(("options"), [{"lease_ttl": 0}, {"lease_wait": -1}])
    def test_bad_lease_options_are_refused(self, options: dict[str, float]) -> None:
        """A lease that never lasts, or a negative wait, is a configuration error."""
        with pytest.raises(ConfigurationError, match="lease_ttl"):
            Sagacity.from_url("memory://", **options)


def child(command: str, url: str, ledger: Path, saga: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.processes._lease_child", command, url, str(ledger), saga],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> str:
    out, errors = process.communicate(timeout=120)
    assert process.returncode == 0, errors
    return out.strip().splitlines()[-1]


def lines(ledger: Path) -> list[str]:
    if not ledger.exists():
        return []
    return [line.split(" ", 1)[1] for line in ledger.read_text().splitlines()]


@pytest.mark.slow
class TestWorkerProcesses:
    def test_four_processes_compensating_one_saga_undo_each_call_once(
        self, shared_store_url: str, tmp_path: Path
    ) -> None:
        """4 processes run `compensate()` on one saga: each undo runs once, one ENDED."""
        ledger = tmp_path / "ledger"
        first = child("run", shared_store_url, ledger, "s")
        assert finish(first) == "COMPLETED"
        sagacity = Sagacity.from_url(shared_store_url)
        # A later failure of the same saga, as a crashed run would leave it.
        sagacity.journal.append("s", Phase.INTENT, tool_name="charge", call_id="c", payload={})
        sagacity.journal.append(
            "s", Phase.FAILED, tool_name="charge", call_id="c", ref_seq=4,
            payload={"kind": "failure", "error": {"type": "E", "message": "x"}},
        )  # fmt: skip
        workers = [child("compensate", shared_store_url, ledger, "s") for _ in range(4)]
        outcomes = [finish(worker) for worker in workers]
        try:
            assert outcomes == ["COMPENSATED"] * 4
            assert lines(ledger) == ["reserve SKU-1", "release res-SKU-1"]
            ends = [e for e in sagacity.history("s") if e.phase is Phase.ENDED]
            assert [e.payload["outcome"] for e in ends] == ["COMPLETED", "COMPENSATED"]
        finally:
            sagacity.close()

    def test_two_workers_racing_one_saga_run_its_work_once(
        self, shared_store_url: str, tmp_path: Path
    ) -> None:
        """Two processes start the same saga at once: its work runs once."""
        ledger = tmp_path / "ledger"
        racers = [child("run", shared_store_url, ledger, "race") for _ in range(2)]
        outcomes = [finish(racer) for racer in racers]
        assert outcomes.count("COMPLETED") == 1
        # The other was refused as busy, or came after the end and found the saga used.
        assert {*outcomes} - {"COMPLETED"} <= {"SagaBusyError", "SagaStateError"}
        assert lines(ledger) == ["reserve SKU-1"]

    def test_a_killed_holder_is_taken_over_at_once_on_its_host(
        self, shared_store_url: str, tmp_path: Path
    ) -> None:
        """SIGKILL inside a call: a worker on the same host takes the saga over at once.

        Its process is gone, so its lease is not waited out (docs/sagas.md). The new
        holder sees everything the dead one journaled: the done call is undone, the
        killed one is in doubt.
        """
        ledger = tmp_path / "ledger"
        holder = child("hang", shared_store_url, ledger, "k")
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "inside charge"
        holder.send_signal(signal.SIGKILL)
        holder.communicate(timeout=30)  # reaped, its pipes closed
        sagacity = Sagacity.from_url(shared_store_url, lease_ttl=1.0)
        sagacity.wrap(Ledger(ledger))
        result = sagacity.compensate("k")
        try:
            assert result.outcome is SagaOutcome.NEEDS_ATTENTION
            assert result.compensation is not None
            assert [ref.tool_name for ref in result.compensation.in_doubt] == ["charge_slowly"]
            assert lines(ledger) == ["reserve SKU-1", "charge 9.99", "release res-SKU-1"]
        finally:
            sagacity.close()

    def test_a_stopped_holder_is_fenced_when_it_wakes(
        self, shared_store_url: str, tmp_path: Path
    ) -> None:
        """SIGSTOP past the lease, a takeover, then SIGCONT: the woken worker writes nothing.

        Its next call is refused before it runs, and it ends with LeaseLostError.
        """
        ledger = tmp_path / "ledger"
        holder = child("stall", shared_store_url, ledger, "p")
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "reserved"
        holder.send_signal(signal.SIGSTOP)
        try:
            time.sleep(1.5)
            taker = child("compensate", shared_store_url, ledger, "p")
            assert finish(taker) == "COMPENSATED"
        finally:
            holder.send_signal(signal.SIGCONT)
        assert finish(holder) == "LeaseLostError"
        sagacity = Sagacity.from_url(shared_store_url)
        try:
            assert lines(ledger) == ["reserve SKU-1", "release res-SKU-1"]
            history = sagacity.history("p")
            assert [e.tool_name for e in history if e.phase is Phase.INTENT] == ["reserve"]
            # The takeover journaled TAKEN_OVER at the seq the stopped worker's next append
            # (its warm fast path, on PostgreSQL) would have taken.
            assert [e.phase for e in history[:3]] == [
                Phase.INTENT,
                Phase.EXECUTED,
                Phase.TAKEN_OVER,
            ]
        finally:
            sagacity.close()


class TestSchemaUpgrade:
    def test_a_version_1_sqlite_file_gains_leases(self, tmp_path: Path) -> None:
        """A file written before leases existed is upgraded in place to version 2."""
        database = tmp_path / "old.db"
        with contextlib.closing(sqlite3.connect(database)) as conn, conn:
            conn.execute("CREATE TABLE sagacity_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("INSERT INTO sagacity_meta VALUES ('schema_version', '1')")
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        tools = tools_of(sagacity, Shop())
        assert (
            sagacity.saga("s", lambda: tools["reserve_inventory"]("SKU-1")).value == "res-SKU-1-1"
        )
        sagacity.close()
        with contextlib.closing(sqlite3.connect(database)) as conn:
            version = conn.execute("SELECT value FROM sagacity_meta").fetchone()
            leases = conn.execute("SELECT saga_id, token FROM sagacity_lease").fetchall()
        assert (version, leases) == (("2",), [("s", 1)])


class TestWaitingFromAsyncCode:
    async def test_an_async_saga_waits_without_blocking_the_loop(
        self, shared_store_url: str
    ) -> None:
        """An `asaga` waiting for a busy saga lets the event loop run meanwhile.

        Another task on the loop frees the saga while the async saga waits for it.
        """
        holder = Sagacity.from_url(shared_store_url)
        waiter = Sagacity.from_url(shared_store_url, lease_wait=10)
        tools = tools_of(waiter, Shop())
        lease = take(holder.journal, "worker-a", holder.now())
        ticks: list[int] = []

        async def free_the_saga_soon() -> None:
            for tick in range(5):
                ticks.append(tick)
                await asyncio.sleep(0.05)
            holder.journal.release_lease(lease)

        async def work() -> str:
            return str(tools["reserve_inventory"]("SKU-1"))

        try:
            freeing = asyncio.create_task(free_the_saga_soon())
            result = await waiter.asaga("s", work)
            await freeing
            assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "res-SKU-1-1")
            assert ticks == [0, 1, 2, 3, 4]
        finally:
            holder.close()
            waiter.close()

    async def test_a_saga_cut_short_while_it_takes_its_lease_lets_it_go(
        self, store_url: str
    ) -> None:
        """`anyio.move_on_after(0)` cancels the take, then the release, at every await.

        The release still runs: another worker takes each saga at once, not after the
        lease's 30 s.
        """
        sagacity = Sagacity.from_url(store_url)
        other = Sagacity.from_url(store_url) if not store_url.startswith("memory") else sagacity

        async def work() -> None:
            """Never reached: the saga is cut short before its work starts."""

        try:
            for n in range(8):
                with anyio.move_on_after(0):
                    await sagacity.asaga(f"cut-{n}", work)
            for n in range(8):
                lease = take_saga(other.journal, f"cut-{n}", "worker-b", other.now())
                assert lease.owner == "worker-b"
        finally:
            sagacity.close()
            if other is not sagacity:
                other.close()

    async def test_two_async_workers_racing_one_saga_run_its_work_once(
        self, shared_store_url: str
    ) -> None:
        """Two workers' `asaga` on one id at once on one loop: one runs, one is refused."""
        workers = [Sagacity.from_url(shared_store_url) for _ in range(2)]
        ran: list[str] = []

        def work_for(name: str) -> Callable[[], Awaitable[str]]:
            async def work() -> str:
                ran.append(name)
                await asyncio.sleep(0.05)  # the other worker tries meanwhile
                return name

            return work

        try:
            results = await asyncio.gather(
                *(w.asaga("s", work_for(f"w{n}")) for n, w in enumerate(workers)),
                return_exceptions=True,
            )
            assert len(ran) == 1
            (done,) = [r for r in results if not isinstance(r, BaseException)]
            (refused,) = [r for r in results if isinstance(r, BaseException)]
            assert (done.outcome, done.value) == (SagaOutcome.COMPLETED, ran[0])
            assert isinstance(refused, SagaBusyError | SagaStateError), repr(refused)
            assert [e.phase for e in workers[0].history("s")] == [Phase.ENDED]
        finally:
            for worker in workers:
                worker.close()


class TestJoin:
    def test_join_holds_the_saga_for_its_requests_and_lets_go(self, store_url: str) -> None:
        """While joined, the saga is held (another worker is busy); leaving lets it go.

        Calls run inside `scope.entered()` are journaled in the saga, which stays open.
        """
        sagacity = Sagacity.from_url(store_url)
        tools = tools_of(sagacity, Shop())
        try:
            with sagacity.join("j") as scope:
                with scope.entered():
                    assert tools["reserve_inventory"]("SKU-1") == "res-SKU-1-1"
                with pytest.raises(SagaBusyError):
                    sagacity.compensate("j")
            assert [e.phase for e in sagacity.history("j")] == [Phase.INTENT, Phase.EXECUTED]
            assert sagacity.compensate("j").outcome is SagaOutcome.COMPENSATED
            with pytest.raises(SagaStateError, match="ended COMPENSATED"), sagacity.join("j"):
                pass
        finally:
            sagacity.close()
