"""Parallel tool calls in one model turn: sync tools in threads, async tools in tasks.

The journal stays whole, and a cancelled call is in doubt, never compensated.
"""

from __future__ import annotations

import threading

from agents import Runner, UserError

from sagacity import JournalEntry, Phase, Sagacity, SagaOutcome, compensable, verify
from sagacity.integrations.openai_agents import as_function_tool
from tests.integrations.openai_agents._orders import (
    Orders,
    agent_with,
    call,
    scripted,
    tool_outputs,
)


class Warehouse:
    """Two reservations that can only finish together: proof that they ran in parallel."""

    def __init__(self) -> None:
        self.together = threading.Barrier(2, timeout=5)
        self.threads: set[str] = set()

    @compensable(by="release")
    def reserve_bin(self, bin_id: str) -> str:
        """Reserve a storage bin."""
        self.threads.add(threading.current_thread().name)
        self.together.wait()
        return f"bin-{bin_id}"

    def release(self) -> None:
        """Nothing to undo in this test."""


def check_calls(entries: list[JournalEntry]) -> dict[str, list[Phase]]:
    """Assert seqs run 1..n, and each outcome refers to the INTENT of its own call."""
    assert [entry.seq for entry in entries] == list(range(1, len(entries) + 1))
    by_seq = {entry.seq: entry for entry in entries}
    calls: dict[str, list[Phase]] = {}
    for entry in entries:
        if entry.phase in (Phase.EXECUTED, Phase.FAILED):
            intent = by_seq[entry.ref_seq or 0]
            assert (intent.phase, intent.call_id) == (Phase.INTENT, entry.call_id)
        if entry.call_id is not None:
            calls.setdefault(entry.call_id, []).append(entry.phase)
    return calls


class TestParallelCalls:
    async def test_one_turn_of_parallel_calls_journals_every_call(self, sagacity: Sagacity) -> None:
        """Four calls in one turn: seqs without gaps, outcomes tied to calls, chain verified.

        Two sync calls wait for each other in worker threads; two calls are async.
        """
        warehouse, orders = Warehouse(), Orders()
        tools = [as_function_tool(t) for t in sagacity.wrap(warehouse, orders)]
        model = scripted(
            [
                call("reserve_bin", "bin-a", bin_id="A"),
                call("reserve_bin", "bin-b", bin_id="B"),
                call("charge_card", "charge", amount="25.00", card="4242"),
                call("book_courier", "courier", slot="9am"),
            ]
        )

        result = await sagacity.asaga(
            "parallel-1", lambda: Runner.run(agent_with(model, tools), "go")
        )

        assert result.outcome is SagaOutcome.COMPLETED
        assert len(warehouse.threads) == 2
        entries = sagacity.history("parallel-1")
        assert check_calls(entries) == {
            "bin-a": [Phase.INTENT, Phase.EXECUTED],
            "bin-b": [Phase.INTENT, Phase.EXECUTED],
            "charge": [Phase.INTENT, Phase.EXECUTED],
            "courier": [Phase.INTENT, Phase.EXECUTED],
        }
        assert tool_outputs(model) == {
            "bin-a": "bin-A",
            "bin-b": "bin-B",
            "charge": "ch-25.00",
            "courier": "courier-9am",
        }
        assert verify(sagacity.journal, "parallel-1").ok


class TestCancelledSibling:
    async def test_timed_out_call_is_in_doubt_and_its_siblings_are_undone(
        self, sagacity: Sagacity
    ) -> None:
        """A call the SDK's `timeout=` cancels is in doubt; its siblings are undone in reverse.

        It is journaled FAILED outcome_unknown and not compensated, though the model, told of a
        timeout, said "done".
        """
        orders = Orders(courier_delay=30)
        wrapped = {t.name: t for t in sagacity.wrap(orders)}
        tools = [
            as_function_tool(wrapped["reserve_inventory"]),
            as_function_tool(wrapped["charge_card"]),
            # Long enough for its INTENT to commit on a loaded machine: the tool then starts.
            as_function_tool(wrapped["book_courier"], timeout=0.5),
        ]
        model = scripted(
            [
                call("reserve_inventory", "reserve", sku="SKU-1"),
                call("book_courier", "courier", slot="9am"),
                call("charge_card", "charge", amount="25.00", card="4242"),
            ]
        )

        result = await sagacity.asaga(
            "parallel-2", lambda: Runner.run(agent_with(model, tools), "go")
        )

        assert result.value.final_output == "done"
        assert tool_outputs(model)["courier"] == "Tool 'book_courier' timed out after 0.5 seconds."
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert "courier 9am cancelled" in orders.log
        entries = sagacity.history("parallel-2")
        calls = check_calls(entries)
        assert calls["courier"] == [Phase.INTENT, Phase.FAILED]
        (failed,) = [e for e in entries if e.phase is Phase.FAILED]
        assert failed.payload == {
            "kind": "outcome_unknown",
            "error": {"type": "CancelledError", "message": ""},
        }
        report = result.compensation
        assert report is not None
        assert [ref.call_id for ref in report.in_doubt] == ["courier"]
        executed = [e.call_id for e in entries if e.phase is Phase.EXECUTED]
        assert [ref.call_id for ref in report.compensated] == executed[::-1]
        assert orders.log[-2:] == [
            {"reserve": "release res-SKU-1-1", "charge": "refund ch-25.00"}[call_id]
            for call_id in executed[::-1]
        ]
        assert verify(sagacity.journal, "parallel-2").ok

    async def test_failure_that_ends_the_run_cancels_the_sibling(self, sagacity: Sagacity) -> None:
        """A failure that ends the run makes the SDK cancel its sibling, which is in doubt.

        With `failure_error_function=None` the run raises UserError, the saga's error, and the
        saga compensates.
        """
        orders = Orders(ship_fails=True, courier_delay=30)
        wrapped = {t.name: t for t in sagacity.wrap(orders)}
        tools = [
            as_function_tool(wrapped["book_courier"]),
            as_function_tool(wrapped["ship"], failure_error_function=None),
        ]
        model = scripted(
            [call("book_courier", "courier", slot="9am"), call("ship", "ship", order_id="o-1")]
        )

        result = await sagacity.asaga(
            "parallel-3", lambda: Runner.run(agent_with(model, tools), "go")
        )

        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert isinstance(result.error, UserError)
        assert result.error.__cause__ is orders.errors[0]
        assert orders.log == ["courier 9am cancelled"]
        entries = sagacity.history("parallel-3")
        assert check_calls(entries) == {
            "courier": [Phase.INTENT, Phase.FAILED],
            "ship": [Phase.INTENT, Phase.FAILED],
        }
        kinds = {e.call_id: e.payload["kind"] for e in entries if e.phase is Phase.FAILED}
        assert kinds == {"courier": "outcome_unknown", "ship": "failure"}
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.in_doubt] == ["courier"]
