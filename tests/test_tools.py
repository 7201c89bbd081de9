"""SagaTool's hot path: the journaled call, its input, call ids, replay, classification."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

import pytest

from sagacity import (
    CallRef,
    CompensationContext,
    ConfigurationError,
    CurrentCall,
    FailureKind,
    InDoubtError,
    InMemoryJournal,
    JournalError,
    NoSagaError,
    Phase,
    ReplayMismatchError,
    Sagacity,
    SagaOutcome,
    SerializationError,
    compensable,
    current_call,
)
from sagacity._summary import summary_of
from sagacity.approval import InMemoryApprovalStore
from sagacity.journal import JsonValue, SagaLease
from sagacity.testing import memory_sagacity
from tests._shop import Shop, journal_intent, phases, tools_of


class Retry(Exception):
    """Stands for a framework's retry request (PydanticAI's ModelRetry)."""


class Pause(Exception):
    """Stands for a framework's control flow (LangGraph's GraphBubbleUp)."""


def classify(error: BaseException) -> FailureKind | None:
    if isinstance(error, Retry):
        return FailureKind.RETRYABLE
    if isinstance(error, Pause):
        return FailureKind.CONTROL_FLOW
    return None


class Crash(BaseException):
    """Stands for the process dying: nothing after it runs."""


class Probe:
    """A tool that raises what it is told to, and remembers what it saw."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.calls = 0
        self.seen: list[CurrentCall | None] = []
        self.undone: list[CompensationContext] = []

    @compensable(by="unprobe")
    def probe(self, value: str) -> str:
        """Touch something."""
        self.calls += 1
        self.seen.append(current_call())
        if self.error is not None:
            raise self.error
        return f"probed-{value}"

    def unprobe(self, ctx: CompensationContext) -> None:
        self.undone.append(ctx)

    @compensable(by="unprobe")
    async def aprobe(self, value: str) -> str:
        """Touch something, asynchronously."""
        self.calls += 1
        self.seen.append(current_call())
        await asyncio.sleep(0)
        if self.error is not None:
            raise self.error
        return f"aprobed-{value}"


@pytest.fixture
def backend(sagacity: Sagacity) -> Sagacity:
    """The `sagacity` fixture, with the test classifier installed."""
    sagacity.add_classifier(classify)
    return sagacity


class TestOutsideASaga:
    def test_calls_straight_through_without_journaling(self) -> None:
        """Outside a saga a tool is just called; nothing is journaled."""
        sagacity = memory_sagacity()
        tools = tools_of(sagacity, Shop())
        assert tools["reserve_inventory"]("SKU-1") == "res-SKU-1-1"
        assert sagacity.journal.list_sagas() == []

    def test_irreversible_refuses_with_no_saga(self) -> None:
        """An IRREVERSIBLE tool outside a saga raises NoSagaError and is not called."""
        shop = Shop()
        tools = tools_of(memory_sagacity(), shop)
        with pytest.raises(NoSagaError, match="'send_wire_transfer' is IRREVERSIBLE"):
            tools["send_wire_transfer"]("10.00", "ACME")
        assert shop.calls["send_wire_transfer"] == 0

    def test_irreversible_allowed_outside_a_saga_when_configured(self) -> None:
        """`allow_irreversible_outside_saga=True` lets it run, unjournaled."""
        shop = Shop()
        sagacity = memory_sagacity(allow_irreversible_outside_saga=True)
        tools = tools_of(sagacity, shop)
        assert tools["send_wire_transfer"]("10.00", "ACME") == "wire-10.00-ACME"
        assert shop.calls["send_wire_transfer"] == 1
        assert sagacity.journal.list_sagas() == []

    def test_current_call_is_none_outside_a_saga(self) -> None:
        """current_call() is None outside a saga, even inside a tool."""
        probe = Probe()
        tool = tools_of(memory_sagacity(), probe)["probe"]
        tool("x")
        assert probe.seen == [None]
        assert current_call() is None

    def test_a_tool_of_another_sagacity_is_refused(self) -> None:
        """A tool wrapped by one Sagacity cannot journal into another's saga."""
        first, second = memory_sagacity(), memory_sagacity()
        tools = tools_of(first, Shop())
        result = second.saga("s", lambda: tools["reserve_inventory"]("SKU-1"))
        assert isinstance(result.error, ConfigurationError)
        assert "wrapped by another Sagacity" in str(result.error)
        assert first.journal.list_sagas() == []
        assert phases(second.history("s")) == [("ENDED", None, None)]


class TestCallInput:
    def test_input_binds_names_and_applies_defaults(self) -> None:
        """The journaled input names every parameter, defaults applied, `self` left out."""
        sagacity = memory_sagacity()
        tools = tools_of(sagacity, Shop())
        sagacity.saga("s", lambda: tools["reserve_inventory"]("SKU-1"))
        intent = sagacity.history("s")[0]
        assert intent.payload == {
            "input": {"sku": "SKU-1", "qty": 1},
            "reversibility": "COMPENSATABLE",
        }

    def test_var_keyword_arguments_are_flattened(self) -> None:
        """`**extra` arguments appear under their own names."""

        class Tagger:
            @compensable(by="untag")
            def tag(self, item: str, *, colour: str = "red", **labels: str) -> str:
                return item

            def untag(self) -> None: ...

        sagacity = memory_sagacity()
        (tag,) = sagacity.wrap(Tagger())
        sagacity.saga("s", lambda: tag("box", owner="ann"))
        assert sagacity.history("s")[0].payload == {
            "input": {"item": "box", "colour": "red", "owner": "ann"},
            "reversibility": "COMPENSATABLE",
        }

    def test_excluding_leaves_injected_parameters_out(self) -> None:
        """`excluding("runtime")` keeps a framework-injected parameter out of the input."""

        class Agentic:
            @compensable(by="undo")
            def act(self, target: str, runtime: object = None) -> str:
                return target

            def undo(self) -> None: ...

        sagacity = memory_sagacity()
        (act,) = sagacity.wrap(Agentic())
        bare = act.excluding("runtime")
        assert bare.excluded == frozenset({"runtime"})
        sagacity.saga("s", lambda: bare("door", runtime=object()))
        assert sagacity.history("s")[0].payload == {
            "input": {"target": "door"},
            "reversibility": "COMPENSATABLE",
        }

    def test_values_are_converted_to_json(self) -> None:
        """Dataclasses, tuples and bytes are journaled in their documented JSON form."""

        @dataclasses.dataclass
        class Address:
            street: str
            number: int

        class Post:
            @compensable(by="undo")
            def send(self, to: Address, parts: tuple[int, ...], blob: bytes) -> None: ...

            def undo(self) -> None: ...

        sagacity = memory_sagacity()
        (send,) = sagacity.wrap(Post())
        sagacity.saga("s", lambda: send(Address("Main St", 5), (1, 2), b"\x00\xff"))
        payload = sagacity.history("s")[0].payload
        assert isinstance(payload, dict)
        assert payload["input"] == {
            "to": {"street": "Main St", "number": 5},
            "parts": [1, 2],
            "blob": "AP8=",
        }

    def test_unserializable_input_raises_before_anything_runs(self) -> None:
        """A value with no JSON form raises SerializationError naming tool and argument."""
        probe = Probe()
        sagacity = memory_sagacity()
        tool = tools_of(sagacity, probe)["probe"]
        errors: list[SerializationError] = []

        def work() -> None:
            try:
                tool(object())
            except SerializationError as error:
                errors.append(error)

        # Swallowed, it still fails the saga: the model was told the step failed, and
        # must not be taken to have done it.
        result = sagacity.saga("s", work)
        assert (result.outcome, result.error) == (SagaOutcome.COMPENSATED, errors[0])
        assert "tool 'probe' argument 'value'" in str(errors[0])
        assert probe.calls == 0
        assert phases(sagacity.history("s")) == [
            ("REFUSED", "probe", None),
            ("ENDED", None, None),
        ]

    def test_unserializable_result_is_journaled_with_its_repr(self) -> None:
        """The effect happened: a result with no JSON form is journaled by its repr."""

        class Token:
            def __repr__(self) -> str:
                return "<Token 42>"

        class Vault:
            @compensable(by="undo")
            def open(self) -> Token:
                return Token()

            def undo(self) -> None: ...

        sagacity = memory_sagacity()
        (tool,) = sagacity.wrap(Vault())
        result = sagacity.saga("s", lambda: tool())
        assert result.outcome is SagaOutcome.COMPLETED
        assert repr(result.value) == "<Token 42>"  # the caller still gets the object
        executed = sagacity.history("s")[1]
        assert executed.phase is Phase.EXECUTED
        assert isinstance(executed.payload, dict)
        assert executed.payload["result"] is None
        note = str(executed.payload["unserializable_result"])
        assert note.startswith("tool 'open' result: cannot convert a ")
        assert note.endswith(": <Token 42>")


class TestCallIds:
    def test_made_ids_count_per_tool_and_saga_run(self) -> None:
        """Without a framework id, calls are `name#1`, `name#2`, … per tool."""
        sagacity = memory_sagacity()
        tools = tools_of(sagacity, Shop())

        def work() -> None:
            tools["reserve_inventory"]("A")
            tools["charge_card"]("1.00", "visa")
            tools["reserve_inventory"]("B")

        sagacity.saga("s", work)
        assert [e.call_id for e in sagacity.history("s") if e.phase is Phase.INTENT] == [
            "reserve_inventory#1",
            "charge_card#1",
            "reserve_inventory#2",
        ]

    def test_current_call_inside_a_tool(self) -> None:
        """current_call() names the saga, the call id and the tool, and only during the call."""
        probe = Probe()
        sagacity = memory_sagacity()
        tool = tools_of(sagacity, probe)["probe"]

        def work() -> None:
            tool("a")
            tool.invoke(("b",), call_id="framework-77")
            assert current_call() is None

        sagacity.saga("order-9", work)
        assert probe.seen == [
            CurrentCall("order-9", "probe#1", "probe"),
            CurrentCall("order-9", "framework-77", "probe"),
        ]

    async def test_current_call_inside_an_async_tool(self) -> None:
        """An async tool sees its call too."""
        probe = Probe()
        sagacity = memory_sagacity()
        tools = tools_of(sagacity, probe)

        async def work() -> None:
            await tools["aprobe"]("a")
            await tools["aprobe"].ainvoke((), {"value": "b"}, call_id="fw-1")

        await sagacity.asaga("s", work)
        assert probe.seen == [
            CurrentCall("s", "aprobe#1", "aprobe"),
            CurrentCall("s", "fw-1", "aprobe"),
        ]

    def test_invoke_refuses_an_async_tool(self) -> None:
        """`invoke` of an async tool raises instead of journaling an unawaited coroutine."""
        probe = Probe()
        tools = tools_of(memory_sagacity(), probe)
        with pytest.raises(TypeError, match="'aprobe' is async"):
            tools["aprobe"].invoke(("a",))
        assert probe.calls == 0

    async def test_ainvoke_calls_a_sync_tool(self) -> None:
        """`ainvoke` runs a sync tool and journals it."""
        sagacity = memory_sagacity()
        tools = tools_of(sagacity, Shop())

        async def work() -> Any:
            return await tools["reserve_inventory"].ainvoke(("SKU-1",), call_id="c1")

        result = await sagacity.asaga("s", work)
        assert result.value == "res-SKU-1-1"
        assert [(e.phase.value, e.call_id) for e in sagacity.history("s")[:2]] == [
            ("INTENT", "c1"),
            ("EXECUTED", "c1"),
        ]


class TestReplay:
    def test_same_call_id_and_input_returns_the_journaled_result(self, sagacity: Sagacity) -> None:
        """A call id that has EXECUTED is not run again: its journaled result is returned."""
        shop = Shop()
        tools = tools_of(sagacity, shop)
        reserve = tools["reserve_inventory"]
        results: list[Any] = []

        def work() -> None:
            results.append(reserve.invoke(("SKU-1",), call_id="call-7"))
            results.append(reserve.invoke((), {"sku": "SKU-1", "qty": 1}, call_id="call-7"))

        assert sagacity.saga("s", work).outcome is SagaOutcome.COMPLETED
        assert results == ["res-SKU-1-1", "res-SKU-1-1"]
        assert shop.calls["reserve_inventory"] == 1
        assert phases(sagacity.history("s")) == [
            ("INTENT", "reserve_inventory", None),
            ("EXECUTED", "reserve_inventory", 1),
            ("ENDED", None, None),
        ]

    def test_a_call_id_of_another_tool_is_refused(self, sagacity: Sagacity) -> None:
        """A call id that another tool used is refused, never answered with that tool's result."""
        shop = Shop()
        tools = tools_of(sagacity, shop)

        def work() -> None:
            tools["reserve_inventory"].invoke(("SKU-1",), call_id="c1")
            tools["charge_card"].invoke(("SKU-1",), {"card": "4242"}, call_id="c1")

        with pytest.raises(ReplayMismatchError, match="'c1' was used by tool 'reserve_inventory'"):
            sagacity.saga("s", work)
        assert shop.calls["charge_card"] == 0

    def test_a_crashed_saga_reopens_and_replays(self, sagacity: Sagacity) -> None:
        """A saga that stopped without ENDED re-opens; its made call ids replay."""
        shop = Shop()
        tools = tools_of(sagacity, shop)

        def crashing() -> None:
            tools["reserve_inventory"]("SKU-1")
            raise Crash

        with pytest.raises(Crash):
            sagacity.saga("s", crashing)
        assert [e.phase for e in sagacity.history("s")] == [Phase.INTENT, Phase.EXECUTED]

        def again() -> list[str]:
            return [tools["reserve_inventory"]("SKU-1"), tools["charge_card"]("5.00", "visa")]

        result = sagacity.saga("s", again)
        assert result.outcome is SagaOutcome.COMPLETED
        assert result.value == ["res-SKU-1-1", "ch-5.00"]
        assert shop.calls == {"reserve_inventory": 1, "charge_card": 1}
        assert phases(sagacity.history("s")) == [
            ("INTENT", "reserve_inventory", None),
            ("EXECUTED", "reserve_inventory", 1),
            ("INTENT", "charge_card", None),
            ("EXECUTED", "charge_card", 3),
            ("ENDED", None, None),
        ]

    def test_replay_returns_the_json_form(self, sagacity: Sagacity) -> None:
        """What a replay returns is the journaled JSON: a tuple comes back a list."""

        class Pair:
            @compensable(by="undo")
            def pair(self) -> tuple[str, int]:
                return ("a", 1)

            def undo(self) -> None: ...

        (tool,) = sagacity.wrap(Pair())
        seen: list[Any] = []
        sagacity.saga(
            "s", lambda: seen.extend([tool.invoke(call_id="p"), tool.invoke(call_id="p")])
        )
        assert seen == [("a", 1), ["a", 1]]

    def test_different_input_raises_replay_mismatch(self, sagacity: Sagacity) -> None:
        """The same call id with other input is refused, runs nothing, and leaves the saga open."""
        shop = Shop()
        reserve = tools_of(sagacity, shop)["reserve_inventory"]

        def work() -> None:
            reserve.invoke(("SKU-1",), call_id="call-7")
            reserve.invoke(("SKU-2",), call_id="call-7")

        with pytest.raises(ReplayMismatchError, match="'call-7' of tool 'reserve_inventory'"):
            sagacity.saga("s", work)
        assert shop.calls["reserve_inventory"] == 1
        assert phases(sagacity.history("s")) == [
            ("INTENT", "reserve_inventory", None),
            ("EXECUTED", "reserve_inventory", 1),
        ]

    def test_a_caught_refusal_is_still_raised(self, sagacity: Sagacity) -> None:
        """Work that swallows a ReplayMismatchError does not make the saga COMPLETED."""
        reserve = tools_of(sagacity, Shop())["reserve_inventory"]

        def work() -> str:
            reserve.invoke(("SKU-1",), call_id="c")
            with contextlib.suppress(ReplayMismatchError):
                reserve.invoke(("SKU-2",), call_id="c")
            return "done"

        with pytest.raises(ReplayMismatchError):
            sagacity.saga("s", work)
        assert [e.phase for e in sagacity.history("s")] == [Phase.INTENT, Phase.EXECUTED]

    def test_intent_without_outcome_raises_in_doubt(self, sagacity: Sagacity) -> None:
        """An INTENT with no outcome (a crash during the call) refuses to run again."""
        shop = Shop()
        tools = tools_of(sagacity, shop)
        journal_intent(sagacity, "s", "reserve_inventory#1")
        with pytest.raises(InDoubtError, match=r"Sagacity\.resolve"):
            sagacity.saga("s", lambda: tools["reserve_inventory"]("SKU-1"))
        assert shop.calls["reserve_inventory"] == 0
        assert len(sagacity.history("s")) == 1

    def test_a_resolved_call_replays_its_resolution(self, sagacity: Sagacity) -> None:
        """After `resolve(executed=True)`, the call replays the result the human recorded."""
        shop = Shop()
        tools = tools_of(sagacity, shop)
        journal_intent(sagacity, "s", "reserve_inventory#1")
        sagacity.resolve("s", "reserve_inventory#1", executed=True, result="res-H", by="ops")
        result = sagacity.saga("s", lambda: tools["reserve_inventory"]("SKU-1"))
        assert result.value == "res-H"
        assert shop.calls["reserve_inventory"] == 0

    def test_a_call_resolved_as_not_run_runs_again(self, sagacity: Sagacity) -> None:
        """After `resolve(executed=False)`, the call runs again under its id."""
        shop = Shop()
        tools = tools_of(sagacity, shop)
        journal_intent(sagacity, "s", "reserve_inventory#1")
        sagacity.resolve("s", "reserve_inventory#1", executed=False, by="ops")
        result = sagacity.saga("s", lambda: tools["reserve_inventory"]("SKU-1"))
        assert result.value == "res-SKU-1-1"
        assert shop.calls["reserve_inventory"] == 1
        assert phases(sagacity.history("s")) == [
            ("INTENT", "reserve_inventory", None),
            ("FAILED", "reserve_inventory", 1),
            ("INTENT", "reserve_inventory", None),
            ("EXECUTED", "reserve_inventory", 3),
            ("ENDED", None, None),
        ]


class TestClassification:
    def test_a_failure_is_journaled_and_reraised_unchanged(self, backend: Sagacity) -> None:
        """An ordinary exception journals FAILED `failure` and reaches the caller as itself."""
        probe = Probe()
        tool = tools_of(backend, probe)["probe"]
        probe.error = ValueError("bad sku")
        caught: list[BaseException] = []

        def work() -> None:
            try:
                tool("a")
            except ValueError as error:
                caught.append(error)

        result = backend.saga("s", work)
        assert caught == [probe.error]
        assert result.outcome is SagaOutcome.COMPENSATED
        failed = backend.history("s")[1]
        assert (failed.phase, failed.ref_seq) == (Phase.FAILED, 1)
        assert failed.payload == {
            "kind": "failure",
            "error": {"type": "ValueError", "message": "bad sku"},
        }

    def test_a_timeout_is_in_doubt_and_never_compensated(self, backend: Sagacity) -> None:
        """TimeoutError journals FAILED `outcome_unknown`: the saga fails, the call is in doubt."""
        probe = Probe()
        shop = Shop()
        tools = tools_of(backend, probe, shop)
        probe.error = TimeoutError("gateway timed out")

        def work() -> str:
            tools["reserve_inventory"]("SKU-1")
            with contextlib.suppress(TimeoutError):
                tools["probe"]("a")
            return "all good"

        result = backend.saga("s", work)
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert result.value == "all good"
        assert backend.history("s")[3].payload == {
            "kind": "outcome_unknown",
            "error": {"type": "TimeoutError", "message": "gateway timed out"},
        }
        assert result.compensation is not None
        assert result.compensation.in_doubt == [
            CallRef(
                seq=3,
                tool_name="probe",
                call_id="probe#1",
                error="outcome unknown: TimeoutError: gateway timed out",
            )
        ]
        assert probe.undone == []
        assert shop.log == ["reserve SKU-1", "release res-SKU-1-1"]

    async def test_a_cancelled_async_call_is_in_doubt(self, backend: Sagacity) -> None:
        """CancelledError from an async tool journals `outcome_unknown` and fails the saga."""
        probe = Probe()
        tools = tools_of(backend, probe)
        probe.error = asyncio.CancelledError()

        async def work() -> None:
            # Some frameworks turn a cancelled tool into a message.
            with contextlib.suppress(asyncio.CancelledError):
                await tools["aprobe"]("a")

        result = await backend.asaga("s", work)
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.in_doubt] == ["aprobe#1"]
        assert probe.undone == []

    async def test_cancelling_the_saga_leaves_it_open(self, backend: Sagacity) -> None:
        """A cancelled asaga propagates the cancellation without ENDED; compensate settles it."""
        started = asyncio.Event()
        shop = Shop()

        class Slow:
            @compensable(by="undo")
            async def wait(self) -> None:
                started.set()
                await asyncio.sleep(60)

            def undo(self) -> None: ...

        tools = tools_of(backend, Slow(), shop)

        async def work() -> None:
            tools["reserve_inventory"]("SKU-1")
            await tools["wait"]()

        task = asyncio.create_task(backend.asaga("s", work))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert phases(backend.history("s")) == [
            ("INTENT", "reserve_inventory", None),
            ("EXECUTED", "reserve_inventory", 1),
            ("INTENT", "wait", None),
            ("FAILED", "wait", 3),
        ]
        result = await backend.acompensate("s")
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.in_doubt] == ["wait#1"]
        assert shop.log == ["reserve SKU-1", "release res-SKU-1-1"]

    def test_retryable_does_not_fail_the_saga(self, backend: Sagacity) -> None:
        """A classifier's RETRYABLE journals FAILED `retryable`; the saga completes."""
        probe = Probe()
        shop = Shop()
        tools = tools_of(backend, probe, shop)
        probe.error = Retry("try a smaller qty")

        def work() -> str:
            tools["reserve_inventory"]("SKU-1")
            try:
                tools["probe"]("a")
            except Retry:
                probe.error = None
                return str(tools["probe"]("b"))
            return "unreachable"

        result = backend.saga("s", work)
        assert result.outcome is SagaOutcome.COMPLETED
        assert result.value == "probed-b"
        assert backend.history("s")[3].payload == {
            "kind": "retryable",
            "error": {"type": "Retry", "message": "try a smaller qty"},
        }
        assert shop.log == ["reserve SKU-1"]

    def test_control_flow_passes_through_without_failing(self, backend: Sagacity) -> None:
        """CONTROL_FLOW reaches the framework unchanged and does not fail the saga."""
        probe = Probe()
        tool = tools_of(backend, probe)["probe"]
        pause = Pause("interrupt")
        probe.error = pause
        caught: list[BaseException] = []

        def work() -> str:
            try:
                tool("a")
            except Pause as error:
                caught.append(error)
            return "paused"

        result = backend.saga("s", work)
        assert caught == [pause]
        assert result.outcome is SagaOutcome.SUSPENDED
        assert backend.history("s")[1].payload == {
            "kind": "control_flow",
            "error": {"type": "Pause", "message": "interrupt"},
        }
        assert [e.phase for e in backend.history("s")] == [Phase.INTENT, Phase.FAILED]

    def test_a_paused_call_that_runs_again_completes_the_saga(self, backend: Sagacity) -> None:
        """A saga SUSPENDED by a framework pause stays open; resumed, the call runs and it ends."""
        probe = Probe()
        tool = tools_of(backend, probe)["probe"]
        probe.error = Pause("interrupt")

        def work() -> str:
            try:
                return str(tool("a"))
            except Pause:
                return "paused"

        assert backend.saga("s", work).outcome is SagaOutcome.SUSPENDED
        # What the server, the inbox and `sagacity sagas` list, from the journal alone.
        assert summary_of("s", backend.history("s")).status == "SUSPENDED"
        probe.error = None
        resumed = backend.resume_saga("s", work)
        assert resumed.outcome is SagaOutcome.COMPLETED
        assert resumed.value == "probed-a"
        assert [e.phase for e in backend.history("s")] == [
            Phase.INTENT,
            Phase.FAILED,
            Phase.INTENT,
            Phase.EXECUTED,
            Phase.ENDED,
        ]

    def test_the_first_classifier_that_answers_wins(self) -> None:
        """Classifiers are asked in order; None defers to the next, then to the default."""
        sagacity = memory_sagacity()
        sagacity.add_classifier(lambda error: None)
        sagacity.add_classifier(classify)
        sagacity.add_classifier(lambda error: FailureKind.FAILURE)
        sagacity.add_classifier(classify)  # a second registration is ignored
        assert sagacity.classify(Retry()) is FailureKind.RETRYABLE
        assert sagacity.classify(Pause()) is FailureKind.CONTROL_FLOW
        assert sagacity.classify(TimeoutError()) is FailureKind.FAILURE
        assert memory_sagacity().classify(TimeoutError()) is FailureKind.OUTCOME_UNKNOWN
        assert memory_sagacity().classify(asyncio.CancelledError()) is (FailureKind.OUTCOME_UNKNOWN)
        assert memory_sagacity().classify(KeyError()) is FailureKind.FAILURE


class FailingJournal(InMemoryJournal):
    """An in-memory journal whose appends of one phase fail, as a full disk would."""

    def __init__(self, failing: Phase) -> None:
        super().__init__()
        self.failing = failing

    def append(
        self,
        saga_id: str,
        phase: Phase,
        *,
        tool_name: str | None = None,
        call_id: str | None = None,
        ref_seq: int | None = None,
        payload: JsonValue = None,
        expected_seq: int | None = None,
        fence: SagaLease | None = None,
    ) -> Any:
        if phase is self.failing:
            raise JournalError(f"saga {saga_id!r}: disk full")
        return super().append(
            saga_id,
            phase,
            tool_name=tool_name,
            call_id=call_id,
            ref_seq=ref_seq,
            payload=payload,
            expected_seq=expected_seq,
            fence=fence,
        )


class TestJournalFailures:
    def test_no_intent_no_call(self) -> None:
        """If INTENT cannot be written the tool is not called and the error propagates."""
        shop = Shop()
        sagacity = Sagacity(FailingJournal(Phase.INTENT), InMemoryApprovalStore())
        tools = tools_of(sagacity, shop)
        result = sagacity.saga("s", lambda: tools["reserve_inventory"]("SKU-1"))
        assert isinstance(result.error, JournalError)
        assert shop.calls["reserve_inventory"] == 0

    def test_a_lost_executed_leaves_the_call_in_doubt_and_fails_the_saga(self) -> None:
        """If EXECUTED cannot be written, the error is loud and the saga cannot complete."""
        shop = Shop()
        sagacity = Sagacity(FailingJournal(Phase.EXECUTED), InMemoryApprovalStore())
        tools = tools_of(sagacity, shop)
        errors: list[JournalError] = []

        def work() -> str:
            try:
                tools["reserve_inventory"]("SKU-1")
            except JournalError as error:
                errors.append(error)
            return "done"

        result = sagacity.saga("s", work)
        assert len(errors) == 1
        assert shop.calls["reserve_inventory"] == 1
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.in_doubt] == ["reserve_inventory#1"]
        assert shop.log == ["reserve SKU-1"]  # in doubt: never compensated
