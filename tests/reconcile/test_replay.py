"""A saga run again after a crash: its doubts are reconciled before the work runs.

A framework that re-runs its step (LangGraph from a checkpoint) calls the tool again under
the same call id: landed, the journaled result is replayed and the tool is not run; did
not land, the tool runs, once. `Sagacity.reconcile` asks without walking or resuming.
"""

from __future__ import annotations

import asyncio

import pytest

from sagacity import (
    ApprovalAlreadyUsedError,
    CompensationContext,
    Phase,
    ReconcileContext,
    Reconciled,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
)


class Shop:
    def __init__(self, answer: Reconciled) -> None:
        self.answer = answer
        self.ran = 0

    @compensable(by="refund", reconcile="find")
    def charge(self, amount: int) -> str:
        self.ran += 1
        return f"ch-{amount}-run"

    def refund(self, ctx: CompensationContext) -> None: ...

    def find(self, ctx: ReconcileContext) -> Reconciled:
        return self.answer


def crashed(sagacity: Sagacity) -> None:
    """The journal a process killed inside `charge` (framework id `tc-1`) leaves."""
    sagacity.journal.append(
        "s",
        Phase.INTENT,
        tool_name="charge",
        call_id="tc-1",
        payload={"input": {"amount": 3}, "reversibility": "COMPENSATABLE"},
    )


@pytest.mark.parametrize(
    ("answer", "value", "ran"),
    [(Reconciled.landed("ch-3"), "ch-3", 0), (Reconciled.did_not_land(), "ch-3-run", 1)],
)
def test_a_rerun_replays_what_landed_and_runs_what_did_not(
    store_url: str, answer: Reconciled, value: str, ran: int
) -> None:
    """The framework's second call under `tc-1` gets the reconciled result, or runs once."""
    with Sagacity.from_url(store_url) as sagacity:
        crashed(sagacity)
        shop = Shop(answer)
        (charge,) = sagacity.wrap(shop)
        result = sagacity.saga("s", lambda: charge.invoke((), {"amount": 3}, call_id="tc-1"))
        assert result.outcome is SagaOutcome.COMPLETED
        assert (result.value, shop.ran) == (value, ran)


def test_reconcile_asks_without_walking(store_url: str) -> None:
    """`Sagacity.reconcile` journals the verdict and leaves the saga open."""
    with Sagacity.from_url(store_url) as sagacity:
        crashed(sagacity)
        sagacity.wrap(Shop(Reconciled.unknown("not yet")))
        (verdict,) = sagacity.reconcile("s")
        assert verdict.payload["verdict"] == "unknown"
        assert verdict.payload["reason"] == "not yet"
        assert sagacity.history("s")[-1] == verdict  # nothing walked, nothing ended


def test_a_sync_resume_of_an_async_call_asks_once(store_url: str) -> None:
    """`resume_saga` of an async approved call in doubt asks its reconciler once.

    It cannot tell: one RECONCILED, the resume refused; a human finds it was not sent, and
    the next resume sends it once.
    """
    asked: list[str] = []
    sent: list[str] = []

    async def find(ctx: ReconcileContext) -> Reconciled:
        asked.append(ctx.call_id)
        return Reconciled.unknown("the bank's API is down")

    @compensable(reversibility=Reversibility.IRREVERSIBLE, reconcile=find)
    async def wire(amount: str) -> str:
        sent.append(amount)
        return f"wr-{amount}"

    with Sagacity.from_url(store_url) as sagacity:
        (tool,) = sagacity.wrap(wire)

        async def ask() -> None:
            await tool("9")

        asyncio.run(sagacity.asaga("w", ask))
        (request,) = sagacity.pending("w")
        sagacity.approve("w", approver="alice")
        sagacity.journal.append(  # the process killed inside the approved call leaves this
            "w",
            Phase.INTENT,
            tool_name="wire",
            call_id=request.call_id,
            payload={
                "input": {"amount": "9"},
                "reversibility": "IRREVERSIBLE",
                "request_id": request.request_id,
            },
        )
        with pytest.raises(ApprovalAlreadyUsedError):
            sagacity.resume_saga("w")
        assert asked == [request.call_id]
        assert [e.phase for e in sagacity.history("w")].count(Phase.RECONCILED) == 1
        sagacity.resolve("w", request.call_id, executed=False, by="ops")
        result = sagacity.resume_saga("w")
        assert (result.outcome, result.value, sent) == (SagaOutcome.COMPLETED, "wr-9", ["9"])
