"""Compensation intent: COMPENSATING before each undo, doubt after a crash, timeouts, resolution."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sagacity import (
    CallRef,
    CompensationContext,
    ConfigurationError,
    JournalEntry,
    Phase,
    Reversibility,
    Sagacity,
    SagaNotFoundError,
    SagaOutcome,
    SagaResult,
    SagaStateError,
    SagaTool,
    compensable,
    verify,
)
from sagacity.annotations import declaration_of
from tests._shop import phases

TIMEOUT = 0.2
"""The compensation timeout of the hanging compensations, in seconds."""

STARTED = (
    "compensation started (COMPENSATING at seq 7) and its outcome is unknown: the process "
    "may have stopped during it"
)
"""The in-doubt reason of a compensation whose COMPENSATING (seq 7) has no outcome."""

LEFT_RUNNING = (
    f"TimeoutError: compensation timed out after {TIMEOUT:g}s; it was left running in its "
    "worker thread"
)
CANCELLED = f"TimeoutError: compensation timed out after {TIMEOUT:g}s and was cancelled"


class Crash(BaseException):
    """Stands for the process dying inside a compensation: the walk lets it through."""


def depot_class(
    *,
    idempotent: bool = False,
    timeout: float | None = None,
    async_refund: bool = False,
) -> Any:
    """A class of tools (reserve, charge, ship) whose `refund` is declared as asked.

    `Depot(*plan)`: `plan` says what each call of `refund` does, in turn: `crash` (raises
    `Crash`), `hang` (waits until `release_hang` is set, or is cancelled), `timeout-error`
    (raises a TimeoutError of its own); anything else, or no plan left, succeeds.
    """

    class Depot:
        def __init__(self, *plan: str) -> None:
            self.plan = list(plan)
            self.log: list[str] = []
            self.contexts: list[CompensationContext] = []
            self.threads: list[str] = []
            self.release_hang = threading.Event()
            self.cancelled = False

        @compensable(by="release")
        def reserve(self, sku: str) -> str:
            self.log.append(f"reserve {sku}")
            return f"res-{sku}"

        def release(self, ctx: CompensationContext) -> None:
            self.log.append(f"release {ctx.result}")

        @compensable(by="refund", compensation_idempotent=idempotent, compensation_timeout=timeout)
        def charge(self, amount: str) -> str:
            self.log.append(f"charge {amount}")
            return f"ch-{amount}"

        def _begin_refund(self, ctx: CompensationContext) -> str:
            self.contexts.append(ctx)
            self.threads.append(threading.current_thread().name)
            self.log.append(f"refund {ctx.result} started")
            action = self.plan.pop(0) if self.plan else "succeed"
            if action == "crash":
                raise Crash
            if action == "timeout-error":
                raise TimeoutError("the bank did not answer")
            return action

        if async_refund:

            async def refund(self, ctx: CompensationContext) -> None:
                if self._begin_refund(ctx) == "hang":
                    try:
                        await asyncio.sleep(30)
                    except asyncio.CancelledError:
                        self.cancelled = True
                        raise
                await asyncio.sleep(0)
                self.log.append(f"refund {ctx.result} done")

        else:

            def refund(self, ctx: CompensationContext) -> None:
                if self._begin_refund(ctx) == "hang":
                    self.release_hang.wait(30)
                    self.log.append(f"refund {ctx.result} finished late")
                    return
                self.log.append(f"refund {ctx.result} done")

        @compensable(by="cancel")
        def ship(self, to: str) -> str:
            raise RuntimeError("courier down")

        def cancel(self) -> None:
            self.log.append("cancel")

    return Depot


def tools_of(sagacity: Sagacity, depot: Any) -> dict[str, SagaTool]:
    return {tool.name: tool for tool in sagacity.wrap(depot)}


def order(tools: dict[str, SagaTool]) -> Callable[[], None]:
    """Reserve (seq 1-2), charge (3-4), a failing shipment (5-6): the walk starts at seq 7."""

    def work() -> None:
        tools["reserve"]("SKU-1")
        tools["charge"]("5.00")
        tools["ship"]("Berlin")

    return work


def aorder(tools: dict[str, SagaTool]) -> Callable[[], Any]:
    """`order` as async work, for `asaga`."""

    async def work() -> None:
        order(tools)()

    return work


def crashed_in_refund(sagacity: Sagacity, depot: Any) -> None:
    """Run the order until the process "dies" inside refund, its COMPENSATING committed."""
    with pytest.raises(Crash):
        sagacity.saga("s", order(tools_of(sagacity, depot)))
    assert phases(sagacity.history("s"))[-2:] == [
        ("FAILED", "ship", 5),
        ("COMPENSATING", "charge", 4),
    ]


def elsewhere(sagacity: Sagacity, depot: Any) -> Sagacity:
    """A fresh Sagacity on the same stores with the tools wrapped: the process after a crash."""
    later = Sagacity(sagacity.journal, sagacity.approvals)
    later.wrap(depot)
    return later


def reserve_ref() -> CallRef:
    return CallRef(seq=2, tool_name="reserve", call_id="reserve#1")


def charge_ref(error: str | None = None) -> CallRef:
    return CallRef(seq=4, tool_name="charge", call_id="charge#1", error=error)


@pytest.fixture
def hanging() -> Iterator[list[Any]]:
    """Depots whose hanging refunds are let go when the test ends."""
    depots: list[Any] = []
    yield depots
    for depot in depots:
        depot.release_hang.set()


class TestTheIntentComesFirst:
    @pytest.mark.parametrize("walk", ["sync", "async"])
    async def test_each_compensation_runs_after_its_committed_intent(
        self, sagacity: Sagacity, store_url: str, walk: str
    ) -> None:
        """Each compensation runs with its COMPENSATING already committed, as the last entry.

        Read through another connection (another Sagacity, on SQLite and PostgreSQL): the
        intent of attempt 1 names the EXECUTED entry being undone; its outcome follows it.
        """
        reader = sagacity if store_url == "memory://" else Sagacity.from_url(store_url)
        seen: list[JournalEntry] = []

        class Audited:
            @compensable(by="unbook")
            def book(self, room: str) -> str:
                return f"bk-{room}"

            def unbook(self, ctx: CompensationContext) -> None:
                seen.append(reader.history(ctx.saga_id)[-1])

            @compensable(by="unbook")
            def fail(self) -> None:
                raise RuntimeError("no")

        tools = tools_of(sagacity, Audited())

        def work() -> None:
            tools["book"]("A")
            tools["book"]("B")
            tools["fail"]()

        async def awork() -> None:
            work()

        if walk == "sync":
            result = sagacity.saga("s", work)
        else:
            result = await sagacity.asaga("s", awork)
        if reader is not sagacity:
            reader.close()
        assert result.outcome is SagaOutcome.COMPENSATED
        assert [(e.phase, e.call_id, e.ref_seq, e.payload) for e in seen] == [
            (Phase.COMPENSATING, "book#2", 4, {"attempt": 1}),
            (Phase.COMPENSATING, "book#1", 2, {"attempt": 1}),
        ]
        assert phases(sagacity.history("s"))[6:] == [
            ("COMPENSATING", "book", 4),
            ("COMPENSATED", "book", 4),
            ("COMPENSATING", "book", 2),
            ("COMPENSATED", "book", 2),
            ("ENDED", None, None),
        ]
        assert verify(sagacity.journal).ok

    def test_nothing_called_means_no_intent(self, sagacity: Sagacity) -> None:
        """A compensation not registered in this process is never called, nor journaled."""
        tools = tools_of(sagacity, depot_class()())

        def work() -> None:
            tools["reserve"]("SKU-1")
            raise Crash  # the process dies before any walk

        with pytest.raises(Crash):
            sagacity.saga("s", work)
        result = Sagacity(sagacity.journal, sagacity.approvals).compensate("s")
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert phases(sagacity.history("s"))[2:] == [("ENDED", None, None)]


class TestAfterACrashInsideACompensation:
    def test_a_compensation_in_doubt_is_listed_and_never_run_again(
        self, sagacity: Sagacity
    ) -> None:
        """An intent with no outcome is in doubt: the next walks list it, never call it.

        The walk goes on with the other compensations, and the saga ends NEEDS_ATTENTION.
        """
        depot = depot_class()("crash")
        crashed_in_refund(sagacity, depot)
        later = elsewhere(sagacity, depot)
        result = later.compensate("s")
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert result.compensation is not None
        assert result.compensation.compensated == [reserve_ref()]
        assert result.compensation.failed == []
        assert result.compensation.in_doubt == [charge_ref(STARTED)]
        entries = sagacity.history("s")
        assert phases(entries)[6:] == [
            ("COMPENSATING", "charge", 4),
            ("COMPENSATING", "reserve", 2),
            ("COMPENSATED", "reserve", 2),
            ("ENDED", None, None),
        ]
        assert entries[-1].payload == {
            "outcome": "NEEDS_ATTENTION",
            "compensated": ["reserve#1"],
            "compensation_failed": [],
            "in_doubt": ["charge#1"],
        }
        assert later.compensate("s").outcome is SagaOutcome.NEEDS_ATTENTION
        assert sagacity.history("s") == entries  # the second walk changed nothing
        assert depot.log.count("refund ch-5.00 started") == 1
        assert verify(sagacity.journal).ok

    def test_an_idempotent_compensation_runs_again_once_with_the_same_key(
        self, sagacity: Sagacity
    ) -> None:
        """Declared idempotent, it runs again as attempt 2, with the same context and call id."""
        depot = depot_class(idempotent=True)("crash")
        crashed_in_refund(sagacity, depot)
        later = elsewhere(sagacity, depot)
        result = later.compensate("s")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert result.compensation is not None
        assert result.compensation.compensated == [charge_ref(), reserve_ref()]
        entries = sagacity.history("s")
        assert phases(entries)[6:] == [
            ("COMPENSATING", "charge", 4),
            ("COMPENSATING", "charge", 4),
            ("COMPENSATED", "charge", 4),
            ("COMPENSATING", "reserve", 2),
            ("COMPENSATED", "reserve", 2),
            ("ENDED", None, None),
        ]
        assert [entries[6].payload, entries[7].payload] == [{"attempt": 1}, {"attempt": 2}]
        first, second = depot.contexts
        assert first == second
        assert second.call_id == "charge#1"
        assert later.compensate("s").outcome is SagaOutcome.COMPENSATED
        assert sagacity.history("s") == entries
        assert depot.log.count("refund ch-5.00 done") == 1
        assert depot.log.count("refund ch-5.00 started") == 2

    async def test_acompensate_treats_it_alike(self, sagacity: Sagacity) -> None:
        """The async walk lists a non-idempotent compensation in doubt, and never calls it."""
        depot = depot_class(async_refund=True)("crash")
        crashed_in_refund(sagacity, depot)
        result = await elsewhere(sagacity, depot).acompensate("s")
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert result.compensation is not None
        assert result.compensation.in_doubt == [charge_ref(STARTED)]
        assert depot.log.count("refund ch-5.00 started") == 1

    def test_a_compensation_raising_its_own_timeout_is_in_doubt(self, sagacity: Sagacity) -> None:
        """A TimeoutError from the compensation leaves its outcome unknown, as for a tool."""
        depot = depot_class()("timeout-error")
        result = sagacity.saga("s", order(tools_of(sagacity, depot)))
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        failed = sagacity.history("s")[7]
        assert (failed.phase, failed.ref_seq) == (Phase.COMPENSATION_FAILED, 4)
        error = "TimeoutError: the bank did not answer"
        assert failed.payload == {"error": error, "kind": "outcome_unknown"}
        assert result.compensation is not None
        assert result.compensation.in_doubt == [
            charge_ref(f"compensation outcome unknown: {error}")
        ]
        assert sagacity.compensate("s").outcome is SagaOutcome.NEEDS_ATTENTION
        assert depot.log.count("refund ch-5.00 started") == 1


class TestTimeouts:
    @pytest.mark.parametrize("walk", ["sync", "async"])
    @pytest.mark.parametrize("kind", ["sync", "async"])
    async def test_a_hanging_compensation_times_out_and_the_walk_goes_on(
        self, sagacity: Sagacity, hanging: list[Any], walk: str, kind: str
    ) -> None:
        """Past its timeout a compensation is journaled failed, outcome unknown; the rest run.

        An async one is cancelled, a sync one left running in its worker thread. It is
        listed in doubt, never compensated, and the next walk does not run it again.
        """
        depot = depot_class(timeout=TIMEOUT, async_refund=kind == "async")("hang")
        hanging.append(depot)
        tools = tools_of(sagacity, depot)
        started = time.monotonic()
        result: SagaResult
        if walk == "sync":
            result = sagacity.saga("s", order(tools))
        else:
            result = await sagacity.asaga("s", aorder(tools))
        assert time.monotonic() - started < 10
        error = CANCELLED if kind == "async" else LEFT_RUNNING
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert depot.log == [
            "reserve SKU-1",
            "charge 5.00",
            "refund ch-5.00 started",
            "release res-SKU-1",
        ]
        assert depot.cancelled is (kind == "async")
        entries = sagacity.history("s")
        assert phases(entries)[6:] == [
            ("COMPENSATING", "charge", 4),
            ("COMPENSATION_FAILED", "charge", 4),
            ("COMPENSATING", "reserve", 2),
            ("COMPENSATED", "reserve", 2),
            ("ENDED", None, None),
        ]
        assert entries[7].payload == {"error": error, "kind": "outcome_unknown"}
        assert result.compensation is not None
        assert result.compensation.compensated == [reserve_ref()]
        assert result.compensation.failed == []
        assert result.compensation.in_doubt == [
            charge_ref(f"compensation outcome unknown: {error}")
        ]
        assert entries[-1].payload["in_doubt"] == ["charge#1"]
        assert sagacity.compensate("s").outcome is SagaOutcome.NEEDS_ATTENTION
        assert sagacity.history("s") == entries
        assert depot.log.count("refund ch-5.00 started") == 1

    @pytest.mark.parametrize("kind", ["sync", "async"])
    def test_an_idempotent_one_that_timed_out_runs_again_on_the_next_walk(
        self, sagacity: Sagacity, hanging: list[Any], kind: str
    ) -> None:
        """Idempotent and timed out: the next walk runs it again with the same call id."""
        depot = depot_class(idempotent=True, timeout=TIMEOUT, async_refund=kind == "async")("hang")
        hanging.append(depot)
        assert sagacity.saga("s", order(tools_of(sagacity, depot))).outcome is (
            SagaOutcome.NEEDS_ATTENTION
        )
        result = sagacity.compensate("s")
        assert result.outcome is SagaOutcome.COMPENSATED
        tail = sagacity.history("s")[11:]
        assert [(e.phase, e.ref_seq, e.payload) for e in tail[:2]] == [
            (Phase.COMPENSATING, 4, {"attempt": 2}),
            (Phase.COMPENSATED, 4, None),
        ]
        first, second = depot.contexts
        assert first == second
        assert second.call_id == "charge#1"
        assert "refund ch-5.00 done" in depot.log

    def test_a_compensation_within_its_timeout_is_compensated(self, sagacity: Sagacity) -> None:
        """A sync compensation with a timeout runs in a worker thread; in time, it is done."""
        depot = depot_class(timeout=5)()
        result = sagacity.saga("s", order(tools_of(sagacity, depot)))
        assert result.outcome is SagaOutcome.COMPENSATED
        assert depot.log[-2:] == ["refund ch-5.00 done", "release res-SKU-1"]
        assert depot.threads == ["sagacity-compensation-charge"]


class TestResolveCompensation:
    def test_resolved_as_compensated_ends_the_saga_compensated(self, sagacity: Sagacity) -> None:
        """A human finds the refund went through: COMPENSATED by them; the next walk ends it."""
        depot = depot_class()("crash")
        crashed_in_refund(sagacity, depot)
        later = elsewhere(sagacity, depot)
        assert later.compensate("s").outcome is SagaOutcome.NEEDS_ATTENTION
        entry = later.resolve_compensation("s", "charge#1", compensated=True, by="ops@shop")
        assert (entry.phase, entry.tool_name, entry.call_id, entry.ref_seq) == (
            Phase.COMPENSATED,
            "charge",
            "charge#1",
            4,
        )
        assert entry.payload == {"resolved_by": "ops@shop"}
        result = later.compensate("s")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert result.compensation is not None
        assert result.compensation.compensated == [reserve_ref(), charge_ref()]
        assert result.compensation.in_doubt == []
        assert sagacity.history("s")[-1].payload == {
            "outcome": "COMPENSATED",
            "compensated": ["reserve#1", "charge#1"],
            "compensation_failed": [],
            "in_doubt": [],
        }
        assert depot.log.count("refund ch-5.00 started") == 1
        assert verify(sagacity.journal).ok

    def test_resolved_as_not_compensated_runs_again_on_the_next_walk(
        self, sagacity: Sagacity
    ) -> None:
        """A human finds no refund: COMPENSATION_FAILED `not_run`; the next walk runs it."""
        depot = depot_class()("crash")
        crashed_in_refund(sagacity, depot)
        later = elsewhere(sagacity, depot)
        entry = later.resolve_compensation("s", "charge#1", compensated=False, by="ops@shop")
        assert (entry.phase, entry.ref_seq) == (Phase.COMPENSATION_FAILED, 4)
        assert entry.payload == {"kind": "not_run", "error": None, "resolved_by": "ops@shop"}
        result = later.compensate("s")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert phases(sagacity.history("s"))[6:] == [
            ("COMPENSATING", "charge", 4),
            ("COMPENSATION_FAILED", "charge", 4),
            ("COMPENSATING", "charge", 4),
            ("COMPENSATED", "charge", 4),
            ("COMPENSATING", "reserve", 2),
            ("COMPENSATED", "reserve", 2),
            ("ENDED", None, None),
        ]
        assert depot.log.count("refund ch-5.00 done") == 1

    def test_a_timed_out_compensation_is_resolved_alike(
        self, sagacity: Sagacity, hanging: list[Any]
    ) -> None:
        """A compensation that timed out is settled the same way, and the saga ends COMPENSATED."""
        depot = depot_class(timeout=TIMEOUT)("hang")
        hanging.append(depot)
        sagacity.saga("s", order(tools_of(sagacity, depot)))
        sagacity.resolve_compensation("s", "charge#1", compensated=True, by="ops")
        assert sagacity.compensate("s").outcome is SagaOutcome.COMPENSATED

    def test_only_a_compensation_in_doubt_can_be_resolved(self, sagacity: Sagacity) -> None:
        """A compensated call, an unknown call or saga, a blank name: each is refused."""
        depot = depot_class()("crash")
        crashed_in_refund(sagacity, depot)
        later = elsewhere(sagacity, depot)
        later.compensate("s")
        with pytest.raises(SagaStateError, match="no compensation of call 'reserve#1' is in doubt"):
            later.resolve_compensation("s", "reserve#1", compensated=True, by="ops")
        with pytest.raises(SagaStateError, match="no compensation of call 'nope' is in doubt"):
            later.resolve_compensation("s", "nope", compensated=True, by="ops")
        with pytest.raises(SagaNotFoundError, match="'ghost'"):
            later.resolve_compensation("ghost", "charge#1", compensated=True, by="ops")
        with pytest.raises(ValueError, match="by must name"):
            later.resolve_compensation("s", "charge#1", compensated=True, by=" ")
        with pytest.raises(SagaStateError, match="'charge#1' is not in doubt"):
            later.resolve("s", "charge#1", executed=True, by="ops")  # the call itself ran
        later.resolve_compensation("s", "charge#1", compensated=True, by="ops")
        with pytest.raises(SagaStateError, match="no compensation of call 'charge#1' is in doubt"):
            later.resolve_compensation("s", "charge#1", compensated=False, by="ops")


class TestDeclarations:
    @pytest.mark.parametrize(
        ("options", "message"),
        [
            (
                {"reversibility": Reversibility.IRREVERSIBLE, "compensation_idempotent": True},
                "is IRREVERSIBLE and declares compensation_idempotent or compensation_timeout",
            ),
            (
                {"reversibility": Reversibility.IRREVERSIBLE, "compensation_timeout": 5},
                "is IRREVERSIBLE and declares compensation_idempotent or compensation_timeout",
            ),
            ({"by": "undo", "compensation_timeout": 0}, "compensation_timeout must be a number"),
            ({"by": "undo", "compensation_timeout": -1.5}, "compensation_timeout must be a number"),
            (
                {"by": "undo", "compensation_timeout": float("nan")},
                "compensation_timeout must be a number",
            ),
            (
                {"by": "undo", "compensation_timeout": float("inf")},
                "compensation_timeout must be a number",
            ),
            ({"by": "undo", "compensation_timeout": "5"}, "compensation_timeout must be a number"),
            ({"by": "undo", "compensation_timeout": True}, "compensation_timeout must be a number"),
            (
                {"by": "undo", "compensation_idempotent": "yes"},
                "compensation_idempotent must be True or False",
            ),
            (
                {"by": "undo", "compensation_idempotent": 1},
                "compensation_idempotent must be True or False",
            ),
        ],
    )
    def test_a_bad_declaration_is_refused_at_wrap(
        self, sagacity: Sagacity, options: dict[str, Any], message: str
    ) -> None:
        """wrap() refuses bad compensation options, naming the class and the tool."""

        class Tools:
            @compensable(**options)
            def act(self) -> str:
                return "done"

            def undo(self) -> None: ...

        with pytest.raises(ConfigurationError, match=r"class .*Tools: tool 'act'.*" + message):
            sagacity.wrap(Tools())
        with pytest.raises(ConfigurationError, match="no tool named 'act'"):
            sagacity.tool("act")

    def test_the_options_are_recorded_on_the_declaration(self, sagacity: Sagacity) -> None:
        """compensable() records both options; whole seconds are accepted for the timeout."""

        class Tools:
            @compensable(by="undo", compensation_idempotent=True, compensation_timeout=3)
            def act(self) -> str:
                return "done"

            def undo(self) -> None: ...

        declaration = declaration_of(Tools.act)
        assert declaration is not None
        assert (declaration.compensation_idempotent, declaration.compensation_timeout) == (True, 3)
        (tool,) = sagacity.wrap(Tools())
        assert tool.name == "act"
