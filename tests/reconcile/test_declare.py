"""Declaring reconcilers: checked at wrap() like `by`; sync or async; their answers checked."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest

from sagacity import (
    CompensationContext,
    ConfigurationError,
    Evidence,
    Phase,
    ReconcileContext,
    Reconciled,
    ReconcileSubject,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
    compensation,
)


def noop(ctx: CompensationContext) -> None:
    """A compensation that undoes nothing."""


class TestWrapTimeChecks:
    def test_a_name_that_names_nothing_is_refused(self) -> None:
        """reconcile="missing" fails at wrap(), naming the tool and the option."""

        class Tools:
            @compensable(by="undo", reconcile="find")
            def act(self) -> None: ...

            @compensation
            def undo(self) -> None: ...

        with pytest.raises(ConfigurationError, match=r"tool 'act' names reconcile='find'"):
            Sagacity.from_url("memory://").wrap(Tools())

    def test_a_reconciler_that_takes_no_context_is_refused(self) -> None:
        """It must take one ReconcileContext."""

        @compensable(by=noop, reconcile=lambda: Reconciled.unknown())
        def act() -> None: ...

        with pytest.raises(ConfigurationError, match="must take one ReconcileContext"):
            Sagacity.from_url("memory://").wrap(act)

    def test_a_compensation_reconciler_on_an_irreversible_tool_is_refused(self) -> None:
        """An IRREVERSIBLE tool has no compensation to reconcile."""

        @compensable(
            reversibility=Reversibility.IRREVERSIBLE,
            reconcile_compensation=lambda ctx: Reconciled.unknown(),
        )
        def wire() -> None: ...

        with pytest.raises(ConfigurationError, match="IRREVERSIBLE and declares reconcile_comp"):
            Sagacity.from_url("memory://").wrap(wire)

    @pytest.mark.parametrize("timeout", [0, -1, float("inf"), "5", True])
    def test_a_bad_timeout_is_refused(self, timeout: Any) -> None:
        """reconcile_timeout must be a positive finite number of seconds."""

        @compensable(by=noop, reconcile=lambda ctx: None, reconcile_timeout=timeout)
        def act() -> None: ...

        with pytest.raises(ConfigurationError, match="reconcile_timeout must be"):
            Sagacity.from_url("memory://").wrap(act)


class TestEvidence:
    def test_evidence_of_hashes_bytes_text_and_json_canonically(self) -> None:
        """Bytes as they are, text as UTF-8, JSON as its RFC 8785 form."""
        assert Evidence.of("r", b"\x00").sha256 == hashlib.sha256(b"\x00").hexdigest()
        assert Evidence.of("r", "é").sha256 == hashlib.sha256("é".encode()).hexdigest()
        assert (
            Evidence.of("r", {"b": 1, "a": [1.0]}).sha256
            == hashlib.sha256(b'{"a":[1],"b":1}').hexdigest()
        )


def charge_in_doubt(reconcile: Any, **options: Any) -> tuple[Sagacity, Any]:
    """A saga whose charge timed out after charging, its reconciler `reconcile`."""
    refunds: list[Any] = []

    def refund(ctx: CompensationContext) -> None:
        refunds.append(ctx.result)

    @compensable(by=refund, reconcile=reconcile, **options)
    def charge(amount: int) -> str:
        raise TimeoutError("no answer")

    sagacity = Sagacity.from_url("memory://")
    return sagacity, (sagacity.wrap(charge)[0], refunds)


class TestAnswers:
    def test_the_context_is_the_call_as_journaled(self) -> None:
        """The reconciler gets the saga, tool, call id, exact input, attempt and subject."""
        seen: list[ReconcileContext] = []

        def find(ctx: ReconcileContext) -> Reconciled:
            seen.append(ctx)
            return Reconciled.landed("ch-9")

        sagacity, (charge, refunds) = charge_in_doubt(find)
        result = sagacity.saga("s", lambda: charge(7))
        assert result.outcome is SagaOutcome.COMPENSATED
        assert refunds == ["ch-9"]
        assert seen == [
            ReconcileContext(
                saga_id="s",
                tool_name="charge",
                call_id="charge#1",
                input={"amount": 7},
                attempt=1,
                subject=ReconcileSubject.CALL,
            )
        ]

    def test_an_async_reconciler_is_awaited_on_the_saga_loop(self) -> None:
        """An async reconciler answers an async saga, on its loop."""
        loops: list[asyncio.AbstractEventLoop] = []

        async def find(ctx: ReconcileContext) -> Reconciled:
            loops.append(asyncio.get_running_loop())
            return Reconciled.landed("ch-1")

        sagacity, (charge, refunds) = charge_in_doubt(find)

        async def main() -> SagaOutcome:
            async def work() -> None:
                charge(1)

            result = await sagacity.asaga("s", work)
            assert loops == [asyncio.get_running_loop()]
            return result.outcome

        assert asyncio.run(main()) is SagaOutcome.COMPENSATED
        assert refunds == ["ch-1"]

    def test_an_async_reconciler_answers_a_sync_saga(self) -> None:
        """From sync code an async reconciler runs on a loop of its own."""

        async def find(ctx: ReconcileContext) -> Reconciled:
            await asyncio.sleep(0)
            return Reconciled.did_not_land()

        sagacity, (charge, refunds) = charge_in_doubt(find)
        assert sagacity.saga("s", lambda: charge(1)).outcome is SagaOutcome.COMPENSATED
        assert refunds == []

    @pytest.mark.parametrize(
        ("answer", "failure"),
        [
            ("landed", "invalid_answer"),
            (Reconciled.landed(object()), "invalid_answer"),
            (Reconciled.landed(evidence=Evidence(reference="r", sha256="xyz")), "invalid_answer"),
        ],
    )
    def test_an_answer_that_is_not_a_verdict_leaves_the_doubt(
        self, answer: Any, failure: str
    ) -> None:
        """A wrong type, an unconvertible result or malformed evidence: unknown, journaled."""
        sagacity, (charge, refunds) = charge_in_doubt(lambda ctx: answer)
        result = sagacity.saga("s", lambda: charge(1))
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert refunds == []
        (verdict,) = [e for e in sagacity.history("s") if e.phase is Phase.RECONCILED]
        assert verdict.payload["failure"] == failure
        assert verdict.payload["verdict"] == "unknown"

    def test_an_async_reconciler_past_its_timeout_is_cancelled(self) -> None:
        """An async reconciler that hangs is cancelled at its timeout; the doubt stays."""
        cancelled: list[bool] = []

        async def find(ctx: ReconcileContext) -> Reconciled:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise
            return Reconciled.landed("late")

        sagacity, (charge, _refunds) = charge_in_doubt(find, reconcile_timeout=0.05)

        async def main() -> SagaOutcome:
            async def work() -> None:
                charge(1)

            return (await sagacity.asaga("s", work)).outcome

        assert asyncio.run(main()) is SagaOutcome.NEEDS_ATTENTION
        assert cancelled == [True]
        (verdict,) = [e for e in sagacity.history("s") if e.phase is Phase.RECONCILED]
        assert verdict.payload["failure"] == "timed_out"
