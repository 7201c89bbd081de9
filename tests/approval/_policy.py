"""Tools and helpers for the approval policy tests: a treasury whose wires need approvers."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import Any

from sagacity import (
    ApprovalRequest,
    CompensationContext,
    JournalEntry,
    Phase,
    Reversibility,
    Sagacity,
    SagaOutcome,
    SagaTool,
    compensable,
    compensation,
)

SAGA = "payout-1"
WIRE = {"amount": "900.00", "to": "ACME"}


class Treasury:
    """Book a payout (compensable), then wire it: once alone, or with two approvers."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        self.wired: list[tuple[str, str, int]] = []
        self.undone: list[str] = []

    @compensable(by="unbook")
    def book(self, ref: str) -> str:
        """Book the payout in the ledger."""
        self.calls["book"] += 1
        return f"bk-{ref}"

    @compensation
    def unbook(self, ctx: CompensationContext) -> None:
        self.undone.append(str(ctx.result))

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def wire(self, amount: str, to: str, days: int = 0) -> str:
        """Wire money; one approver."""
        self.calls["wire"] += 1
        self.wired.append((amount, to, days))
        return f"wire-{amount}-{to}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE, approvers=2)
    def big_wire(self, amount: str, to: str) -> str:
        """Wire a large sum; two different approvers."""
        self.calls["big_wire"] += 1
        self.wired.append((amount, to, 0))
        return f"big-{amount}-{to}"


def tools_of(sagacity: Sagacity, treasury: Treasury) -> dict[str, SagaTool]:
    """Wrap the treasury and index its tools by name."""
    return {tool.name: tool for tool in sagacity.wrap(treasury)}


def book_then(tools: dict[str, SagaTool], wire: str = "wire", **args: Any) -> Callable[[], Any]:
    """Work that books the payout, then calls the IRREVERSIBLE `wire` tool."""

    def work() -> Any:
        tools["book"]("P-1")
        return tools[wire](**(args or WIRE))

    return work


OpenSagacity = Callable[..., Sagacity]


@dataclasses.dataclass
class Waiting:
    """A saga that booked a payout and waits for approval of its wire."""

    sagacity: Sagacity
    treasury: Treasury
    tools: dict[str, SagaTool]
    request: ApprovalRequest


def waiting_saga(
    sagacity: Sagacity, *, wire: str = "wire", started_by: str | None = "alice"
) -> Waiting:
    """Run the payout saga until its wire waits for approval."""
    treasury = Treasury()
    tools = tools_of(sagacity, treasury)
    result = sagacity.saga(SAGA, book_then(tools, wire), started_by=started_by)
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    (request,) = result.pending
    return Waiting(sagacity=sagacity, treasury=treasury, tools=tools, request=request)


def inject_approval(
    sagacity: Sagacity, request: ApprovalRequest, approver: str, **extra: Any
) -> JournalEntry:
    """Append a correctly hashed APPROVED with the journal's own API, bypassing `approve`.

    What someone with write access to the database can do.
    """
    return sagacity.journal.append(
        request.saga_id,
        Phase.APPROVED,
        tool_name=request.tool_name,
        call_id=request.call_id,
        ref_seq=request.seq,
        payload={
            "request_id": request.request_id,
            "approver": approver,
            "input_sha256": request.input_sha256,
            **extra,
        },
    )


def phases_of(sagacity: Sagacity, saga_id: str = SAGA) -> list[str]:
    """The phases of the saga's journal, in order."""
    return [entry.phase.value for entry in sagacity.history(saga_id)]
