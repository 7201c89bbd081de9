"""The worker acts on each decision once, under the saga's lease, with the right resumer."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagacity import Decision, DecisionOutcome, Phase, Sagacity, SagaOutcome, Worker
from sagacity.adapter import current_scope, pausing_as
from sagacity.errors import ConfigurationError
from sagacity.testing import FakeClock
from sagacity.worker._health import read_health
from tests.worker._shop import Shop, pause


@pytest.fixture
def shop() -> Shop:
    return Shop()


@pytest.fixture
def sagacity(store_url: str, shop: Shop) -> Iterator[Sagacity]:
    instance = Sagacity.from_url(store_url)
    instance.wrap(shop)
    yield instance
    instance.close()


def phases(sagacity: Sagacity, saga_id: str) -> list[str]:
    return [entry.phase.value for entry in sagacity.history(saga_id)]


class TestPlainWork:
    def test_an_approval_runs_the_stored_call_and_ends_the_saga(
        self, sagacity: Sagacity, shop: Shop
    ) -> None:
        """No resumer: the approved call runs with its journaled input, once; COMPLETED."""
        pause(sagacity, "w-1")
        sagacity.approve("w-1", approver="alice")
        worker = Worker(sagacity)
        assert worker.run_once() == 1
        assert worker.run_once() == 0  # nothing waits any more
        assert shop.log == ["hold 100", "wire 100 to acme"]
        assert phases(sagacity, "w-1")[-3:] == ["INTENT", "EXECUTED", "ENDED"]
        assert sagacity.history("w-1")[-1].payload["outcome"] == "COMPLETED"

    def test_the_application_s_random_state_is_left_alone(
        self, sagacity: Sagacity, shop: Shop
    ) -> None:
        """The worker shuffles its batch with a generator of its own, not `random`'s."""
        for saga_id in ("r-1", "r-2", "r-3"):
            pause(sagacity, saga_id)
            sagacity.approve(saga_id, approver="alice")
        before = random.getstate()
        assert Worker(sagacity).run_once() == 3
        assert random.getstate() == before

    def test_a_rejection_compensates_where_the_tools_are(
        self, store_url: str, sagacity: Sagacity, shop: Shop
    ) -> None:
        """Rejected where the tools are not, the undo waits; the worker, which has them, runs it."""
        pause(sagacity, "w-1")
        with (
            Sagacity.from_url(store_url)
            if store_url != "memory://"
            else _same(sagacity) as elsewhere
        ):
            result = elsewhere.reject("w-1", approver="bob", reason="wrong account")
        if store_url != "memory://":
            assert result.outcome is SagaOutcome.NEEDS_ATTENTION
            assert Worker(sagacity).run_once() == 1
        assert shop.log == ["hold 100", "release hold-100"]
        assert sagacity.history("w-1")[-1].payload["outcome"] == "COMPENSATED"
        assert Worker(sagacity).run_once() == 0

    def test_an_edit_waits_for_the_new_request(self, sagacity: Sagacity, shop: Shop) -> None:
        """An edited request is not resumed; the new input runs once it is approved.

        One worker's run_once is called again after each decision: it looks afresh.
        """
        pause(sagacity, "w-1")
        sagacity.edit("w-1", approver="carol", new_input={"amount": 90, "to": "acme"})
        worker = Worker(sagacity)
        assert worker.run_once() == 0
        sagacity.approve("w-1", approver="alice")
        assert worker.run_once() == 1
        assert shop.log == ["hold 100", "wire 90 to acme"]

    def test_an_expired_request_is_journaled_and_compensated(
        self, tmp_path: Path, shop: Shop
    ) -> None:
        """Past its expiry the worker journals REJECTED (source expiry) and compensates."""
        clock = FakeClock()
        with Sagacity.from_url(
            f"sqlite:///{tmp_path}/ttl.db", approval_ttl=60, clock=clock
        ) as sagacity:
            sagacity.wrap(shop)
            pause(sagacity, "w-1")
            assert Worker(sagacity).run_once() == 0
            clock.advance(61)
            assert Worker(sagacity).run_once() == 1
            rejected = next(e for e in sagacity.history("w-1") if e.phase is Phase.REJECTED)
            assert rejected.payload["source"] == "expiry"
            assert shop.log == ["hold 100", "release hold-100"]
            assert sagacity.pending("w-1") == []


class _same:
    """The memory backend has one Sagacity: a stand-in for 'another process' there."""

    def __init__(self, sagacity: Sagacity) -> None:
        self.sagacity = sagacity

    def __enter__(self) -> Sagacity:
        return self.sagacity

    def __exit__(self, *exc: object) -> None:
        pass


class TestResumers:
    def test_the_resumer_runs_inside_the_saga_and_the_call_runs_once(
        self, sagacity: Sagacity, shop: Shop
    ) -> None:
        """An approved decision runs the resumer in the saga's scope; its tool call runs once."""
        pause(sagacity, "w-1")
        sagacity.approve("w-1", approver="alice")
        seen: list[tuple[str | None, DecisionOutcome]] = []

        def resumer(decision: Decision) -> object:
            scope = current_scope()
            seen.append((scope.saga_id if scope else None, decision.outcome))
            return sagacity.tool("wire")(amount=100, to="acme")

        worker = Worker(sagacity, resumer)
        assert worker.run_once() == 1
        assert worker.run_once() == 0
        assert seen == [("w-1", DecisionOutcome.APPROVED)]
        assert shop.log == ["hold 100", "wire 100 to acme"]
        assert sagacity.history("w-1")[-1].payload["outcome"] == "COMPLETED"

    def test_a_rejection_tells_the_run_no_then_compensates(
        self, sagacity: Sagacity, shop: Shop
    ) -> None:
        """Rejected while the saga is open: the resumer is told inside the scope, then the walk."""
        pause(sagacity, "w-1")
        request = sagacity.pending("w-1")[0]
        # A rejection journaled without its walk (as a framework's decline journals one).
        history = sagacity.approval.history("w-1")
        sagacity.approval.decline(history, request, source=None, reason="x")  # type: ignore[arg-type]
        told: list[tuple[str | None, str]] = []

        def resumer(decision: Decision) -> None:
            scope = current_scope()
            told.append((scope.saga_id if scope else None, decision.outcome.value))

        assert Worker(sagacity, resumer).run_once() == 1
        assert told == [("w-1", "rejected")]
        assert shop.log == ["hold 100", "release hold-100"]
        assert sagacity.history("w-1")[-1].payload["outcome"] == "COMPENSATED"

    def test_a_resumer_that_raises_compensates_and_is_counted(
        self, sagacity: Sagacity, shop: Shop
    ) -> None:
        """A resumer's failure ends the saga as a failing work does; the worker goes on."""
        pause(sagacity, "w-1")
        pause(sagacity, "w-2")
        sagacity.approve("w-1", approver="alice")
        sagacity.approve("w-2", approver="alice")

        def resumer(decision: Decision) -> object:
            if decision.saga_id == "w-1":
                raise RuntimeError("the graph is gone")
            return sagacity.tool("wire")(amount=100, to="acme")

        worker = Worker(sagacity, resumer)
        assert worker.run_once() == 2
        assert sagacity.history("w-1")[-1].payload["outcome"] == "COMPENSATED"
        assert sagacity.history("w-2")[-1].payload["outcome"] == "COMPLETED"
        assert shop.log.count("release hold-100") == 1

    def test_resumers_are_chosen_by_the_name_the_request_journaled(
        self, sagacity: Sagacity, shop: Shop
    ) -> None:
        """pausing_as names the resumer; a name with no resumer is left alone and reported."""
        with pausing_as("billing"):
            pause(sagacity, "b-1")
        with pausing_as("crm"):
            pause(sagacity, "c-1")
        assert sagacity.history("b-1")[2].payload["resumer"] == "billing"
        sagacity.approve("b-1", approver="alice")
        sagacity.approve("c-1", approver="alice")
        used: list[str] = []

        def billing(decision: Decision) -> object:
            used.append(decision.saga_id)
            return sagacity.tool("wire")(amount=100, to="acme")

        worker = Worker(sagacity, {"billing": billing})
        assert worker.run_once() == 1
        assert used == ["b-1"]
        assert worker.health.unroutable == ("c-1",)
        assert sagacity.history("c-1")[-1].phase is Phase.APPROVED  # untouched

    def test_an_edit_keeps_the_resumer_name(self, sagacity: Sagacity) -> None:
        """The request an edit makes journals the resumer name of the one it replaces."""
        with pausing_as("billing"):
            pause(sagacity, "b-1")
        new = sagacity.edit("b-1", approver="carol", new_input={"amount": 1, "to": "acme"})
        awaiting = sagacity.history("b-1")[new.seq - 1]
        assert awaiting.payload["resumer"] == "billing"

    def test_an_async_resumer_is_awaited(self, sagacity: Sagacity, shop: Shop) -> None:
        """An async resumer runs on the worker's loop, inside the saga."""
        pause(sagacity, "w-1")
        sagacity.approve("w-1", approver="alice")

        async def resumer(decision: Decision) -> object:
            await asyncio.sleep(0)
            assert current_scope() is not None
            return await asyncio.to_thread(sagacity.tool("wire"), amount=100, to="acme")

        assert Worker(sagacity, resumer).run_once() == 1
        assert shop.log == ["hold 100", "wire 100 to acme"]

    def test_a_resumer_must_be_callable(self, sagacity: Sagacity) -> None:
        """Bad configuration is refused when the worker is built, naming the resumer."""
        with pytest.raises(ConfigurationError, match="resumer 'billing' is not callable"):
            Worker(sagacity, {"billing": 42})  # type: ignore[dict-item]
        with pytest.raises(ConfigurationError, match="poll_interval must be positive"):
            Worker(sagacity, poll_interval=0)


class TestManyWorkers:
    def test_workers_racing_in_threads_resume_each_saga_once(self, shared_store_url: str) -> None:
        """Four workers, each with its own Sagacity, race for 12 approved sagas: each wire once."""
        shops = [Shop() for _ in range(4)]
        instances = [Sagacity.from_url(shared_store_url) for _ in shops]
        try:
            for instance, shop in zip(instances, shops, strict=True):
                instance.wrap(shop)
            for n in range(12):
                pause(instances[0], f"r-{n}", amount=n)
                instances[0].approve(f"r-{n}", approver="alice")
            workers = [Worker(instance) for instance in instances]
            threads = [threading.Thread(target=worker.run_once) for worker in workers]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            wires = [line for shop in shops for line in shop.log if line.startswith("wire")]
            assert sorted(wires) == sorted(f"wire {n} to acme" for n in range(12))
            assert sum(worker.health.resumed for worker in workers) == 12
            for n in range(12):
                assert phases(instances[0], f"r-{n}").count("INTENT") == 2  # hold, wire
        finally:
            for instance in instances:
                instance.close()


class TestRunning:
    def test_run_wakes_on_a_decision_and_stops_cleanly(
        self, sagacity: Sagacity, shop: Shop, tmp_path: Path
    ) -> None:
        """run() resumes a decision made while it waits; stop() ends it; health says so."""
        pause(sagacity, "w-1")
        health = tmp_path / "health.json"
        worker = Worker(sagacity, poll_interval=0.02, health_file=health)
        runner = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
        runner.start()
        try:
            sagacity.approve("w-1", approver="alice")
            assert shop.wired.wait(20)
        finally:
            worker.stop()
            runner.join(20)
        assert not runner.is_alive()
        written = read_health(str(health))
        assert (written.state, written.resumed) == ("stopped", 1)


class TestAttacks:
    def test_a_tampered_stored_request_never_runs_its_new_input(
        self, tmp_path: Path, shop: Shop
    ) -> None:
        """Someone edits the stored request's input after the approval: that input never runs."""
        import sqlite3

        url = f"sqlite:///{tmp_path}/tamper.db"
        with Sagacity.from_url(url) as sagacity:
            sagacity.wrap(shop)
            pause(sagacity, "w-1")
            sagacity.approve("w-1", approver="alice")
            with sqlite3.connect(tmp_path / "tamper.db") as conn:
                conn.execute(
                    "UPDATE sagacity_approval_request SET input = ?",
                    ('{"amount":999999,"to":"mallory"}',),
                )
            conn.close()
            Worker(sagacity).run_once()
            assert not any("mallory" in line or "999999" in line for line in shop.log)
            assert shop.log.count("wire 100 to acme") <= 1

    def test_a_second_worker_after_the_first_finds_nothing_to_do(
        self, sagacity: Sagacity, shop: Shop
    ) -> None:
        """A worker that read the decision before another resumed it acts on nothing."""
        pause(sagacity, "w-1")
        sagacity.approve("w-1", approver="alice")
        late = Worker(sagacity)
        early = Worker(sagacity)
        from sagacity._history import SagaHistory

        history = SagaHistory.of("w-1", sagacity.journal.entries("w-1"))
        decision = late._resume.waiting(history)  # read before the other worker acts
        assert decision is not None
        assert early.resume("w-1")
        assert late._resume.resume(decision, None) is None  # under the lease: nothing left
        assert shop.log.count("wire 100 to acme") == 1
