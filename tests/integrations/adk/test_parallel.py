"""Parallel calls in one model turn, and the siblings ADK cancels when one fails.

ADK runs a turn's calls as tasks under a gather that cancels the unfinished ones when
one raises (`_batch_executor._gather_or_cancel`). Every call the model made is then in
the journal: executed and undone, failed, or in doubt; none is silently absent.
"""

from __future__ import annotations

from google.adk.agents import RunConfig
from google.adk.agents.run_config import ToolThreadPoolConfig

from sagacity import JournalEntry, Phase, Sagacity, SagaOutcome, verify
from sagacity.integrations.adk import function_tools
from tests.integrations.adk._agents import Desk, Orders, SwallowErrors, final_text, scripted


def calls_of(entries: list[JournalEntry]) -> dict[str, list[str]]:
    """Assert seqs run 1..n and each outcome refers to its own INTENT; phases by call id."""
    assert [entry.seq for entry in entries] == list(range(1, len(entries) + 1))
    by_seq = {entry.seq: entry for entry in entries}
    calls: dict[str, list[str]] = {}
    for entry in entries:
        if entry.phase in (Phase.EXECUTED, Phase.FAILED):
            intent = by_seq[entry.ref_seq or 0]
            assert (intent.phase, intent.call_id) == (Phase.INTENT, entry.call_id)
        if entry.call_id is not None:
            calls.setdefault(entry.call_id, []).append(entry.phase.value)
    return calls


class TestParallelCalls:
    async def test_one_turn_of_parallel_calls_journals_every_call(self, sagacity: Sagacity) -> None:
        """Three calls in one turn, sync and async: each journaled once, the chain verified."""
        orders = Orders()
        orders.courier_release.set()
        desk = Desk(
            scripted(
                [
                    ("reserve_inventory", "p-1", {"sku": "SKU-1"}),
                    ("charge_card", "p-2", {"amount": "40.00", "card": "4242"}),
                    ("book_courier", "p-3", {"slot": "9am"}),
                ]
            ),
            function_tools(sagacity, orders),
        )
        session = await desk.new_session()

        result = await sagacity.asaga("par-1", lambda: desk.turn(session, "go"))

        assert result.outcome is SagaOutcome.COMPLETED
        assert final_text(result.value) == "done"
        assert calls_of(sagacity.history("par-1")) == {
            "p-1": ["INTENT", "EXECUTED"],
            "p-2": ["INTENT", "EXECUTED"],
            "p-3": ["INTENT", "EXECUTED"],
        }
        assert verify(sagacity.journal, "par-1").ok


class TestCancelledSiblings:
    async def test_a_cancelled_async_sibling_is_in_doubt_and_the_rest_undone(
        self, sagacity: Sagacity
    ) -> None:
        """`label` fails while `book_courier` is mid-call: ADK cancels the booking.

        The booking may have happened: it is journaled in doubt, never compensated, and
        the saga ends NEEDS_ATTENTION; the reservation is undone, the failure recorded.
        """
        orders = Orders()
        desk = Desk(
            scripted(
                [
                    ("reserve_inventory", "p-1", {"sku": "SKU-1"}),
                    ("book_courier", "p-2", {"slot": "9am"}),
                    ("label", "p-3", {"order_id": "o-1"}),
                ]
            ),
            function_tools(sagacity, orders),
        )
        session = await desk.new_session()

        result = await sagacity.asaga("par-2", lambda: desk.turn(session, "go"))

        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert isinstance(result.error, RuntimeError)
        assert "courier 9am cancelled" in orders.log
        assert orders.log[-1] == "release res-SKU-1-1"
        calls = calls_of(sagacity.history("par-2"))
        assert calls["p-1"] == ["INTENT", "EXECUTED", "COMPENSATING", "COMPENSATED"]
        assert calls["p-2"] == ["INTENT", "FAILED"]
        assert calls["p-3"] == ["INTENT", "FAILED"]
        (booking,) = [  # its outcome, whatever seq the parallel INTENTs took
            e for e in sagacity.history("par-2") if e.call_id == "p-2" and e.phase.value == "FAILED"
        ]
        assert booking.payload["kind"] == "outcome_unknown"
        assert result.compensation is not None
        assert [doubt.call_id for doubt in result.compensation.in_doubt] == ["p-2"]

    async def test_swallowed_by_a_plugin_the_siblings_run_to_their_end(
        self, sagacity: Sagacity
    ) -> None:
        """With an error callback nothing is cancelled: the booking ends and is undone."""
        orders = Orders()
        orders.courier_release.set()
        desk = Desk(
            scripted(
                [
                    ("book_courier", "p-1", {"slot": "9am"}),
                    ("label", "p-2", {"order_id": "o-1"}),
                ]
            ),
            function_tools(sagacity, orders),
            plugins=[SwallowErrors()],
        )
        session = await desk.new_session()

        result = await sagacity.asaga("par-3", lambda: desk.turn(session, "go"))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert orders.log == ["courier 9am", "cancel courier-9am"]
        calls = calls_of(sagacity.history("par-3"))
        assert calls["p-1"] == ["INTENT", "EXECUTED", "COMPENSATING", "COMPENSATED"]
        assert calls["p-2"] == ["INTENT", "FAILED"]

    async def test_a_sync_sibling_on_adks_thread_pool_finishes_and_is_undone(
        self, sagacity: Sagacity
    ) -> None:
        """With ADK's tool thread pool, a sync call cut off by the cancel finishes first.

        Its thread cannot be stopped: the cancel waits for it, so its EXECUTED is journaled
        before the saga compensates, and the pick is undone rather than left in doubt.
        """
        orders = Orders()
        desk = Desk(
            scripted(
                [
                    ("pick", "p-1", {"sku": "SKU-1"}),
                    ("label", "p-2", {"order_id": "o-1"}),
                ]
            ),
            function_tools(sagacity, orders),
        )
        session = await desk.new_session()
        threaded = RunConfig(tool_thread_pool_config=ToolThreadPoolConfig(max_workers=2))

        result = await sagacity.asaga("par-4", lambda: desk.turn(session, "go", threaded))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert orders.log == ["pick SKU-1", "unpick pick-SKU-1"]
        calls = calls_of(sagacity.history("par-4"))
        assert calls["p-1"] == ["INTENT", "EXECUTED", "COMPENSATING", "COMPENSATED"]
        assert calls["p-2"] == ["INTENT", "FAILED"]
