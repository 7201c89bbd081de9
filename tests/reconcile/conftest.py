"""Building the doubts of the reconcile tests, one way per source, on each backend.

Each builder leaves the call `charge#1` (or the approved `wire#1`, or the refund of
`charge#1`) of saga `pay-1` in doubt the way its source does, with the effect landed in
the provider's ledger or not, and returns what the worker that meets the doubt reports:

- kill: a real child process SIGKILLed between INTENT and EXECUTED (or inside its
  compensation); a worker here takes the expired lease and compensates (or resumes).
- timeout: the tool raises TimeoutError (FAILED `outcome_unknown`); the run's own end
  meets the doubt.
- cancel: the async tool's task is cancelled mid-call; the run's own end meets it.
- takeover: the worker stalls inside the call past its lease (a fake clock); another
  worker takes the saga over and compensates (or resumes) it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sagacity import (
    InMemoryApprovalStore,
    InMemoryJournal,
    LeaseLostError,
    Sagacity,
    SagaResult,
)
from sagacity.testing import FakeClock
from tests.processes._kill import run_until_killed
from tests.reconcile._payments import AsyncPayments, Died, Mode, Payments, Stop


@dataclasses.dataclass
class Recovered:
    """What the worker that met the doubt reported, and where to look."""

    result: SagaResult
    sagacity: Sagacity
    payments: Payments

    def ledger(self) -> list[str]:
        return self.payments.provider.lines()


class Workers:
    """Sagacity instances over one store (one journal object for memory://), closed at the end."""

    def __init__(self, url: str, ledger: Path) -> None:
        self.url = url
        self.ledger = ledger
        self.opened: list[Sagacity] = []
        self._memory = (InMemoryJournal(), InMemoryApprovalStore()) if url == "memory://" else None

    def open(self, **options: Any) -> Sagacity:
        if self._memory is not None:
            sagacity = Sagacity(*self._memory, **options)
        else:
            sagacity = Sagacity.from_url(self.url, **options)
        self.opened.append(sagacity)
        return sagacity

    def close(self) -> None:
        for sagacity in self.opened:
            sagacity.close()

    # -- a compensable charge in doubt -----------------------------------------------------

    def charge(self, source: str, *, landed: bool, mode: Mode) -> Recovered:
        point = "after-charge" if landed else "before-charge"
        if source == "kill":
            run_until_killed(
                "tests.reconcile._child", "charge", self.url, str(self.ledger), point,
                when=f"inside {point}",
            )  # fmt: skip
            return self.recover(mode, lambda s: s.compensate("pay-1"))
        if source == "timeout":
            sagacity = self.open()
            payments = Payments(self.ledger, mode=mode, stops={point: Stop.TIMEOUT})
            payments.journal = sagacity.journal
            tools = {t.name: t for t in sagacity.wrap(payments)}

            def work() -> None:
                tools["reserve"]("SKU-1")
                tools["charge"]("19.99")

            return Recovered(sagacity.saga("pay-1", work), sagacity, payments)
        if source == "cancel":
            sagacity = self.open()
            apayments = AsyncPayments(self.ledger, mode=mode, stops={point: Stop.HANG})
            apayments.journal = sagacity.journal
            tools = {t.name: t for t in sagacity.wrap(apayments)}

            async def awork() -> None:
                tools["reserve"]("SKU-1")
                task = asyncio.ensure_future(tools["charge"]("19.99"))
                await apayments.started.wait()
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    raise RuntimeError("the charge was cancelled") from None

            return Recovered(asyncio.run(sagacity.asaga("pay-1", awork)), sagacity, apayments)
        assert source == "takeover"
        return self.taken_over(point, mode, lambda s: s.compensate("pay-1"))

    def recover(self, mode: Mode, then: Callable[[Sagacity], SagaResult]) -> Recovered:
        """A worker here, with the tools and their reconcilers, meets the doubt."""
        sagacity = self.open(lease_wait=15)
        payments = Payments(self.ledger, mode=mode, journal=sagacity.journal)
        sagacity.wrap(payments)
        return Recovered(then(sagacity), sagacity, payments)

    def taken_over(
        self, point: str, mode: Mode, then: Callable[[Sagacity], SagaResult], *, wire: bool = False
    ) -> Recovered:
        clock = FakeClock()
        stale = self.open(clock=clock, lease_ttl=60)
        new = self.open(clock=clock, lease_ttl=60)
        taker = Payments(self.ledger, mode=mode, journal=new.journal)
        new.wrap(taker)
        results: list[SagaResult] = []

        def take_over() -> None:
            clock.advance(seconds=120)  # the worker stalls past its lease
            thread = threading.Thread(target=lambda: results.append(then(new)))
            thread.start()
            thread.join()

        stalled = Payments(self.ledger, stops={point: Stop.CALLBACK}, callback=take_over)
        tools = {t.name: t for t in stale.wrap(stalled)}
        if wire:
            stale.saga("pay-1", lambda: (tools["reserve"]("SKU-1"), tools["wire"]("50", "bob")))
            stale.approve("pay-1", approver="alice")
            with pytest.raises((LeaseLostError, Died)):
                stale.resume_saga("pay-1")
        else:

            def work() -> None:
                tools["reserve"]("SKU-1")
                tools["charge"]("19.99")

            with pytest.raises((LeaseLostError, Died)):
                stale.saga("pay-1", work)
        assert len(results) == 1, "the taking worker did not report"
        return Recovered(results[0], new, taker)

    # -- an approved IRREVERSIBLE wire in doubt, not sent ----------------------------------

    def wire_not_sent(self, source: str) -> Recovered:
        """The approved wire stopped before it was sent; the worker meeting it resumes."""
        if source == "kill":
            run_until_killed(
                "tests.reconcile._child", "wire", self.url, str(self.ledger), "-",
                when="inside before-wire",
            )  # fmt: skip
            return self.recover(Mode.HONEST, lambda s: s.resume_saga("pay-1"))
        if source == "takeover":
            return self.taken_over(
                "before-wire", Mode.HONEST, lambda s: s.resume_saga("pay-1"), wire=True
            )
        sagacity = self.open()
        if source == "timeout":
            payments = Payments(self.ledger, stops={"before-wire": Stop.TIMEOUT})
            tools = {t.name: t for t in sagacity.wrap(payments)}
            sagacity.saga("pay-1", lambda: (tools["reserve"]("SKU-1"), tools["wire"]("50", "bob")))
            sagacity.approve("pay-1", approver="alice")
            return Recovered(sagacity.resume_saga("pay-1"), sagacity, payments)
        assert source == "cancel"
        apayments = AsyncPayments(self.ledger, stops={"before-wire": Stop.HANG})
        tools = {t.name: t for t in sagacity.wrap(apayments)}

        async def ask() -> None:
            tools["reserve"]("SKU-1")
            await tools["wire"]("50", "bob")

        async def resumed() -> None:  # the framework gives up on the cancelled call, and returns
            task = asyncio.ensure_future(tools["wire"]("50", "bob"))
            await apayments.started.wait()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        async def scenario() -> SagaResult:
            await sagacity.asaga("pay-1", ask)
            sagacity.approve("pay-1", approver="alice")
            return await sagacity.aresume_saga("pay-1", resumed)

        return Recovered(asyncio.run(scenario()), sagacity, apayments)

    # -- a refund in doubt -----------------------------------------------------------------

    def refund(self, source: str, *, landed: bool, mode: Mode) -> Recovered:
        """The refund of `charge#1` stopped after (landed) or before its effect."""
        point = "after-refund" if landed else "before-refund"
        if source == "kill":
            run_until_killed(
                "tests.reconcile._child", "refund", self.url, str(self.ledger), point,
                when=f"inside {point}",
            )  # fmt: skip
            return self.recover(mode, lambda s: s.compensate("pay-1"))
        assert source == "timeout"
        sagacity = self.open()
        payments = Payments(self.ledger, mode=mode, stops={point: Stop.TIMEOUT})
        tools = {t.name: t for t in sagacity.wrap(payments)}

        def work() -> None:
            tools["reserve"]("SKU-1")
            tools["charge"]("19.99")
            tools["ship"]("Berlin")

        return Recovered(sagacity.saga("pay-1", work), sagacity, payments)


@pytest.fixture
def workers(store_url: str, tmp_path: Path) -> Iterator[Workers]:
    """Workers on each backend, memory included."""
    made = Workers(store_url, tmp_path / "ledger")
    yield made
    made.close()


@pytest.fixture
def shared_workers(shared_store_url: str, tmp_path: Path) -> Iterator[Workers]:
    """Workers on the backends processes share: SQLite and PostgreSQL."""
    made = Workers(shared_store_url, tmp_path / "ledger")
    yield made
    made.close()
