"""A worker puts an approved call left in doubt (a worker killed mid-call) to its reconciler."""

from __future__ import annotations

import pytest

from sagacity import (
    Evidence,
    Phase,
    ReconcileContext,
    Reconciled,
    Reversibility,
    Sagacity,
    Worker,
    compensable,
)
from tests.worker._shop import Shop, pause


class CheckedShop(Shop):
    """The wire's bank can be asked whether a transfer under the call's id went out."""

    def __init__(self, sent: dict[str, str] | None) -> None:
        super().__init__()
        self.sent = sent  # None: the bank cannot tell
        self.asked = 0

    @compensable(reversibility=Reversibility.IRREVERSIBLE, reconcile="find_wire")
    def wire(self, amount: int, to: str) -> str:
        """Wire money."""
        return super().wire(amount, to)

    def find_wire(self, ctx: ReconcileContext) -> Reconciled:
        self.asked += 1
        evidence = Evidence.of(f"transfers?key={ctx.call_id}", str(self.sent).encode())
        if self.sent is None:
            return Reconciled.unknown("the bank did not answer", evidence=evidence)
        found = self.sent.get(ctx.call_id)
        if found is None:
            return Reconciled.did_not_land(evidence=evidence)
        return Reconciled.landed(found, evidence=evidence)


def killed_mid_wire(sagacity: Sagacity, saga_id: str) -> str:
    """Pause, approve, and leave the approved wire's INTENT with no outcome; its call id."""
    pause(sagacity, saga_id)
    sagacity.approve(saga_id, approver="alice")
    (asked,) = [e for e in sagacity.history(saga_id) if e.phase is Phase.AWAITING_APPROVAL]
    sagacity.journal.append(
        saga_id,
        Phase.INTENT,
        tool_name="wire",
        call_id=asked.call_id,
        payload={
            "input": asked.payload["input"],
            "reversibility": "IRREVERSIBLE",
            "request_id": asked.payload["request_id"],
        },
    )
    assert asked.call_id is not None
    return asked.call_id


@pytest.mark.parametrize(
    ("sent", "log", "outcome"),
    [
        ({}, ["hold 100", "wire 100 to acme"], "COMPLETED"),  # did not land: runs once
        (None, ["hold 100"], None),  # unknown: stays in doubt for a human
    ],
    ids=["did-not-land", "unknown"],
)
def test_a_worker_reconciles_an_approved_call_in_doubt_before_resuming(
    store_url: str, sent: dict[str, str] | None, log: list[str], outcome: str | None
) -> None:
    shop = CheckedShop(sent)
    with Sagacity.from_url(store_url) as sagacity:
        sagacity.wrap(shop)
        killed_mid_wire(sagacity, "w-9")
        worker = Worker(sagacity)
        worker.run_once()
        worker.run_once()  # an unknown is not asked again until the journal changes
        entries = sagacity.history("w-9")
    assert shop.log == log
    assert shop.asked == 1
    assert [e.payload["verdict"] for e in entries if e.phase is Phase.RECONCILED] == [
        "did_not_land" if sent is not None else "unknown"
    ]
    ended = [e.payload["outcome"] for e in entries if e.phase is Phase.ENDED]
    assert ended == ([outcome] if outcome else [])


def test_a_wire_the_bank_says_went_out_is_not_sent_again(store_url: str) -> None:
    with Sagacity.from_url(store_url) as sagacity:
        shop = CheckedShop({})
        sagacity.wrap(shop)
        call_id = killed_mid_wire(sagacity, "w-10")
        shop.sent = {call_id: "tx-bank-7"}
        Worker(sagacity).run_once()
        entries = sagacity.history("w-10")
    assert shop.log == ["hold 100"]  # the wire is not sent a second time
    assert [e.phase.value for e in entries][-3:-1] == ["RECONCILED", "EXECUTED"]
    assert entries[-1].payload["outcome"] == "COMPLETED"
