"""What the journal hands out is a copy: changing it never changes the journal.

An entry's payload (returned by `append`, read by `entries`) and a replayed call's
result are the caller's own, on every backend: the in-memory journal's stored objects
included. The journal still verifies, and a compensation gets what was journaled.
"""

from __future__ import annotations

from typing import Any

from sagacity import CompensationContext, Phase, Sagacity, SagaOutcome, compensable, verify


def payload_of(sagacity: Sagacity, seq: int) -> Any:
    return sagacity.history("order-1")[seq - 1].payload


class TestEntries:
    def test_a_returned_entrys_payload_is_the_callers_own(self, sagacity: Sagacity) -> None:
        """Changing the payload `append` returned changes neither what is read nor the chain."""
        asked = {"input": {"lines": [{"sku": "SKU-1", "qty": 2}]}}
        entry = sagacity.journal.append("order-1", Phase.INTENT, tool_name="t", payload=asked)
        entry.payload["input"]["lines"].append("forged")  # type: ignore[index, call-overload, union-attr]
        asked["input"]["lines"][0]["qty"] = 99
        assert payload_of(sagacity, 1) == {"input": {"lines": [{"sku": "SKU-1", "qty": 2}]}}
        assert verify(sagacity.journal).ok

    def test_a_read_entrys_payload_is_the_readers_own(self, sagacity: Sagacity) -> None:
        """Changing the payload `entries` read changes neither the next read nor the chain."""
        sagacity.journal.append("order-1", Phase.INTENT, payload={"input": {"ids": [1, 2]}})
        (read,) = sagacity.journal.entries("order-1")
        read.payload["input"]["ids"].append(3)  # type: ignore[index, call-overload, union-attr]
        read.payload["forged"] = True  # type: ignore[index, call-overload]
        assert payload_of(sagacity, 1) == {"input": {"ids": [1, 2]}}
        assert verify(sagacity.journal).ok


class TestReplay:
    def test_a_replayed_result_changed_by_the_work_is_not_what_is_compensated(
        self, sagacity: Sagacity
    ) -> None:
        """A replayed result the work edits is its own: replays, journal, compensation keep it."""
        undone: list[Any] = []

        def release(ctx: CompensationContext) -> None:
            undone.append(ctx.result)
            ctx.result["holds"].clear()  # a compensation's own edit stays its own too

        @compensable(by=release)
        def reserve(sku: str) -> dict[str, Any]:
            return {"holds": ["h-1", "h-2"]}

        (tool,) = sagacity.wrap(reserve)
        replays: list[Any] = []

        def work() -> None:
            tool.invoke(("SKU-1",), call_id="reserve#1")
            replayed = tool.invoke(("SKU-1",), call_id="reserve#1")
            replayed["holds"].append("forged")
            replays.append(tool.invoke(("SKU-1",), call_id="reserve#1"))
            raise RuntimeError("payment declined")

        result = sagacity.saga("order-1", work)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert replays == [{"holds": ["h-1", "h-2"]}]
        assert undone == [{"holds": []}]  # the list it cleared: its own copy
        executed = [e for e in sagacity.history("order-1") if e.phase is Phase.EXECUTED]
        assert [e.payload for e in executed] == [{"result": {"holds": ["h-1", "h-2"]}}]
        assert verify(sagacity.journal).ok

    def test_the_compensation_gets_the_journaled_result(self, sagacity: Sagacity) -> None:
        """Edited by the work through a replay, the result reaches the compensation whole."""
        undone: list[Any] = []

        def release(ctx: CompensationContext) -> None:
            undone.append(ctx.result)

        @compensable(by=release)
        def reserve(sku: str) -> dict[str, Any]:
            return {"holds": ["h-1"]}

        (tool,) = sagacity.wrap(reserve)

        def work() -> None:
            tool.invoke(("SKU-1",), call_id="reserve#1")
            tool.invoke(("SKU-1",), call_id="reserve#1")["holds"][0] = "h-999"
            raise RuntimeError("payment declined")

        assert sagacity.saga("order-1", work).outcome is SagaOutcome.COMPENSATED
        assert undone == [{"holds": ["h-1"]}]
        assert verify(sagacity.journal).ok
