"""The public API as users type-check it: `mypy --strict tests/typing` must pass."""

from __future__ import annotations

import asyncio

from sagacity import (
    ApprovalRequest,
    CompensationContext,
    CompensationReport,
    CurrentCall,
    Evidence,
    JournalEntry,
    ReconcileContext,
    Reconciled,
    ReconcileSubject,
    Reversibility,
    Sagacity,
    SagaOutcome,
    SagaResult,
    SagaTool,
    StandingGrant,
    Verdict,
    VerificationReport,
    compensable,
    compensation,
    current_call,
    verify,
)


class Payments:
    @compensable(by="refund")
    def charge(self, customer: str, amount: str) -> str:
        call: CurrentCall | None = current_call()
        return f"ch-{customer}-{amount}-{call.call_id if call else ''}"

    @compensation
    def refund(self, ctx: CompensationContext) -> None:
        print(ctx.saga_id, ctx.tool_name, ctx.call_id, ctx.input, ctx.result)

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    async def wire(self, amount: str) -> str:
        return amount


def use() -> None:
    sagacity: Sagacity = Sagacity.from_url("memory://", approval_ttl=60)
    tools: list[SagaTool] = sagacity.wrap(Payments())
    names: list[str] = [tool.name for tool in tools]
    result: SagaResult = sagacity.saga("s-1", lambda: names)
    outcome: SagaOutcome = result.outcome
    report: CompensationReport | None = result.compensation
    pending: list[ApprovalRequest] = result.pending
    approved: JournalEntry = sagacity.approve("s-1", approver="alice")
    resumed: SagaResult = sagacity.resume_saga("s-1")
    checked: VerificationReport = verify(sagacity.journal)
    ok: bool = checked.ok
    print(outcome, report, pending, approved, resumed, ok)


async def use_async(sagacity: Sagacity) -> SagaResult:
    async def work() -> int:
        await asyncio.sleep(0)
        return 1

    return await sagacity.asaga("s-2", work)


class Reconciling:
    """A tool that says how to find out whether its call, or its undo, took effect."""

    @compensable(by="refund", reconcile="find", reconcile_compensation="find", reconcile_timeout=5)
    def charge(self, amount: str) -> str:
        return amount

    def refund(self, ctx: CompensationContext) -> None: ...

    def find(self, ctx: ReconcileContext) -> Reconciled:
        evidence: Evidence = Evidence.of(ctx.call_id, {"amount": ctx.input.get("amount")})
        if ctx.subject is ReconcileSubject.COMPENSATION:
            return Reconciled.unknown("refunds cannot be looked up", evidence=evidence)
        verdict: Reconciled = Reconciled.landed(f"ch-{ctx.attempt}", evidence=evidence)
        return verdict if verdict.verdict is Verdict.LANDED else Reconciled.did_not_land()


def settle_by_hand(sagacity: Sagacity) -> JournalEntry:
    verdicts: list[JournalEntry] = sagacity.reconcile("order-1")
    assert sagacity.has_reconciler("charge", ReconcileSubject.CALL) or not verdicts
    return sagacity.resolve(
        "order-1",
        "charge#1",
        executed=True,
        result="ch-1",
        by="ops",
        evidence="ch-1",
        evidence_sha256="0" * 64,
    )


def grant_ahead(sagacity: Sagacity) -> list[str | None]:
    grant: StandingGrant = sagacity.grant(
        "pay", grantor="carol", max_calls=3, ttl=3600, match={"payee": {"equals": "ACME"}}
    )
    left: int = sagacity.get_grant(grant.grant_id).remaining_calls
    assert left >= 0
    revoked: StandingGrant = sagacity.revoke(grant.grant_id, revoked_by="dave")
    return [g.remaining_amount for g in sagacity.grants("pay")] + [revoked.revoked_by]
