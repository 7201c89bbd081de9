"""What a run journals is what happened: refusals with any text, and the stages it runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sagacity import (
    CompensationContext,
    Phase,
    ReplayMismatchError,
    Reversibility,
    Sagacity,
    compensable,
    compensation,
    verify,
)
from sagacity.workflows import (
    CheckContext,
    CheckResult,
    StageCheck,
    WorkflowRuntime,
    WorkflowStatus,
    check,
    gate,
    stage,
    workflow,
)


@pytest.fixture
def sagacity(store_url: str) -> Iterator[Sagacity]:
    """A Sagacity on each backend (memory, SQLite, PostgreSQL)."""
    instance = Sagacity.from_url(store_url)
    yield instance
    instance.close()


class SaysNo(StageCheck):
    """Fails with a reason that holds a lone surrogate."""

    def check(self, ctx: CheckContext) -> CheckResult:
        return CheckResult.fail(f"{ctx.value} is over \ud800 the limit")


class Breaks(StageCheck):
    """Raises with a message that holds a lone surrogate."""

    def check(self, ctx: CheckContext) -> CheckResult:
        raise ValueError("limit table \udfff unreadable")


def _ledger_workflow(refusal: type[StageCheck]) -> tuple[object, list[str]]:
    log: list[str] = []

    @workflow("lone-surrogate")
    class Payout:
        @stage(order=1)
        @compensable(by="unhold")
        def hold(self, amount: int) -> int:
            log.append(f"hold {amount}")
            return amount

        @compensation
        def unhold(self, ctx: CompensationContext) -> None:
            log.append(f"unhold {ctx.result}")

        @stage(order=2)
        @check(refusal)
        def pay(self, amount: int) -> str:
            log.append(f"pay {amount}")
            return f"pay-{amount}"

    return Payout(), log


class TestRefusalText:
    @pytest.mark.parametrize(
        ("refusal", "detail"),
        [
            (SaysNo, "7 is over \\ud800 the limit"),
            (Breaks, "Breaks.check raised ValueError: limit table \\udfff unreadable"),
        ],
    )
    def test_a_lone_surrogate_is_journaled_escaped(
        self, sagacity: Sagacity, refusal: type[StageCheck], detail: str
    ) -> None:
        """The REFUSED entry is journaled with the surrogate escaped; the stage is CHECK_FAILED."""
        message = (
            f"run 'ls-1': check {refusal.__qualname__} refused stage 'pay': {detail}; the stage "
            "was not run and the run compensates"
        )
        payout, log = _ledger_workflow(refusal)
        handle = WorkflowRuntime(sagacity, [payout]).start("lone-surrogate", 7, run_id="ls-1")
        assert handle.status is WorkflowStatus.COMPENSATED
        assert [(s.name, s.status.value, s.reason) for s in handle.stages] == [
            ("hold", "COMPENSATED", None),
            ("pay", "CHECK_FAILED", detail),
        ]
        assert handle.error == detail
        assert log == ["hold 7", "unhold 7"]
        (refused,) = [e for e in sagacity.history("ls-1") if e.phase is Phase.REFUSED]
        assert (refused.call_id, refused.payload) == (
            "pay",
            {
                "reason": "check_failed",
                "check": refusal.__qualname__,
                "detail": detail,
                "error": message,
            },
        )
        (ended,) = [e for e in sagacity.history("ls-1") if e.phase is Phase.ENDED]
        assert ended.payload["error"] == {"type": "CheckFailedError", "message": message}
        assert verify(sagacity.journal, "ls-1").ok

    def test_other_text_is_kept_as_it_is(self, sagacity: Sagacity) -> None:
        """Only lone surrogates are escaped: other non-ASCII text is journaled unchanged."""

        class Accented(StageCheck):
            def check(self, ctx: CheckContext) -> CheckResult:
                return CheckResult.fail("dépasse la limite de 5 € 🙂")

        payout, _ = _ledger_workflow(Accented)
        handle = WorkflowRuntime(sagacity, [payout]).start("lone-surrogate", 7, run_id="ls-2")
        assert handle.stages[1].reason == "dépasse la limite de 5 € 🙂"


# -- a definition redeployed while a run waits ----------------------------------------------


LOG: list[str] = []


@workflow("payout-v")
class PayoutV1:
    """The definition a run is started with: hold → pay (gated) → notify."""

    @stage(order=1)
    @compensable(by="unhold")
    def hold(self, amount: int) -> int:
        LOG.append(f"hold {amount}")
        return amount

    @compensation
    def unhold(self, ctx: CompensationContext) -> None:
        LOG.append(f"unhold {ctx.result}")

    @stage(order=2)
    @gate(reason="money leaves")
    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def pay(self, amount: int) -> int:
        LOG.append(f"pay {amount}")
        return amount

    @stage(order=3)
    def notify(self, amount: int) -> str:
        LOG.append(f"notify {amount}")
        return f"paid {amount}"


@workflow("payout-v")
class PayoutInserted(PayoutV1):
    """Redeployed with a stage between the gate's approval and the approved stage."""

    @stage(order=1)
    @compensable(by="unhold")
    def hold(self, amount: int) -> int:
        return super().hold(amount)

    @stage(order=2)
    def double(self, amount: int) -> int:
        LOG.append(f"double {amount}")
        return amount

    @stage(order=3)
    @gate(reason="money leaves")
    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def pay(self, amount: int) -> int:
        return super().pay(amount)

    @stage(order=4)
    def notify(self, amount: int) -> str:
        return super().notify(amount)


@workflow("payout-v")
class PayoutRenumbered(PayoutV1):
    """Redeployed with the same stages in the same order, numbered otherwise, new bodies."""

    @stage(order=10)
    @compensable(by="unhold")
    def hold(self, amount: int) -> int:
        return super().hold(amount)

    @stage(order=20)
    @gate(reason="money leaves")
    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def pay(self, amount: int) -> int:
        LOG.append("pay, as redeployed")
        return super().pay(amount)

    @stage(order=30)
    def notify(self, amount: int) -> str:
        return super().notify(amount)


@pytest.fixture
def approved(shared_store_url: str) -> str:
    """A run of PayoutV1 paused at its gate and approved; yields the store's URL."""
    LOG.clear()
    first = Sagacity.from_url(shared_store_url)
    try:
        runtime = WorkflowRuntime(first, [PayoutV1])
        gate_of = runtime.start("payout-v", 5, run_id="pv-1").gate
        assert gate_of is not None
        runtime.approve_gate("pv-1", "pay", "alice", sha256=gate_of.input_sha256)
    finally:
        first.close()
    return shared_store_url


class TestRedeployedDefinition:
    def test_a_stage_inserted_is_refused_and_nothing_runs(self, approved: str) -> None:
        """Resumed by a definition with a stage inserted: refused, naming run and difference."""
        redeployed = Sagacity.from_url(approved)
        try:
            before = redeployed.history("pv-1")
            runtime = WorkflowRuntime(redeployed, [PayoutInserted])
            with pytest.raises(ReplayMismatchError) as refused:
                runtime.resume("pv-1")
            assert str(refused.value) == (
                "run 'pv-1' of workflow 'payout-v' was started with the stages ['hold', 'pay', "
                "'notify'], but the workflow registered here has ['hold', 'double', 'pay', "
                "'notify']: stage 2 of the run is 'pay', here it is 'double'. Nothing was run; "
                "resume the run where the definition it was started with is registered"
            )
            assert redeployed.history("pv-1") == before
            assert LOG == ["hold 5"]
        finally:
            redeployed.close()
        # Where the definition it was started with is registered, the run goes on.
        again = Sagacity.from_url(approved)
        try:
            done = WorkflowRuntime(again, [PayoutV1]).resume("pv-1")
            assert done.status is WorkflowStatus.COMPLETED
            assert done.result == "paid 5"
            assert LOG == ["hold 5", "pay 5", "notify 5"]
            assert verify(again.journal, "pv-1").ok
        finally:
            again.close()

    def test_a_stage_removed_is_refused(self, approved: str) -> None:
        """A definition with fewer stages is refused too: the first difference is named."""

        @workflow("payout-v")
        class PayoutShort(PayoutV1):
            notify = None  # type: ignore[assignment]

        redeployed = Sagacity.from_url(approved)
        try:
            with pytest.raises(
                ReplayMismatchError, match="stage 3 of the run is 'notify', here it is no stage"
            ):
                WorkflowRuntime(redeployed, [PayoutShort]).resume("pv-1")
            assert LOG == ["hold 5"]
        finally:
            redeployed.close()

    def test_the_same_stages_renumbered_go_on(self, approved: str) -> None:
        """Only the stages' names and order are compared: new numbers and bodies are allowed."""
        redeployed = Sagacity.from_url(approved)
        try:
            done = WorkflowRuntime(redeployed, [PayoutRenumbered]).resume("pv-1")
            assert done.status is WorkflowStatus.COMPLETED
            assert LOG == ["hold 5", "pay, as redeployed", "pay 5", "notify 5"]
        finally:
            redeployed.close()
