"""A payment provider the tests can ask, and tools whose doubts its reconcilers settle.

The provider is a ledger file shared by processes: one line per effect (`charge KEY
AMOUNT`, `refund CHARGE`, `wire KEY AMOUNT`, `reserve SKU`, `release RES`). The tools
hand `ctx.call_id` / `current_call().call_id` to it as the idempotency key, and the
reconcilers look that key up, as a real integration asks its provider.

`stop` names a point where a tool stops as the test wants: `Stop.HANG` prints
`inside POINT` and sleeps until killed (a child process), `Stop.TIMEOUT` raises
`TimeoutError`, `Stop.TAKEOVER` calls the test's callback (another worker takes the saga
over) and then dies. Points: `before-charge`, `after-charge`, `before-wire`,
`before-refund`, `after-refund`.
"""

from __future__ import annotations

import asyncio
import enum
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sagacity import (
    CompensationContext,
    Evidence,
    Phase,
    ReconcileContext,
    Reconciled,
    Reversibility,
    SideEffectJournal,
    compensable,
    compensation,
    current_call,
)


class Stop(enum.Enum):
    HANG = "hang"
    TIMEOUT = "timeout"
    CALLBACK = "callback"


class Mode(enum.Enum):
    """How the reconcilers answer."""

    HONEST = "honest"
    """They ask the provider."""
    UNKNOWN = "unknown"
    """They cannot tell."""
    RAISE = "raise"
    """They raise."""
    HANG = "hang"
    """They never answer."""
    LIE = "lie"
    """The call's EXECUTED reaches the journal as they are asked, and they say it did not land."""


class Died(Exception):
    """A stalled worker, taken over, gives up (it would have been killed)."""


class Provider:
    """The ledger file: what happened in the world."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self, line: str) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []

    def find(self, prefix: str) -> str | None:
        return next((line for line in self.lines() if line.startswith(prefix)), None)


class Payments:
    """reserve (no reconciler), charge (both reconcilers), wire (IRREVERSIBLE, reconciled)."""

    def __init__(
        self,
        ledger: Path,
        *,
        mode: Mode = Mode.HONEST,
        stops: dict[str, Stop] | None = None,
        callback: Callable[[], None] | None = None,
        journal: SideEffectJournal | None = None,
    ) -> None:
        self.provider = Provider(ledger)
        self.mode = mode
        self.stops = dict(stops or {})
        self.callback = callback
        self.journal = journal
        self.asked: list[tuple[str, str, str]] = []
        self.released = threading.Event()  # lets a hanging reconciler go at the end

    def point(self, name: str) -> None:
        stop = self.stops.pop(name, None)
        if stop is Stop.HANG:
            print(f"inside {name}", flush=True)
            time.sleep(600)
        elif stop is Stop.TIMEOUT:
            raise TimeoutError(f"{name}: the provider did not answer in time")
        elif stop is Stop.CALLBACK:
            assert self.callback is not None
            self.callback()
            raise Died(f"{name}: this worker stalled and was taken over")

    @compensable(by="release")
    def reserve(self, sku: str) -> str:
        self.provider.record(f"reserve {sku}")
        return f"res-{sku}"

    @compensation
    def release(self, ctx: CompensationContext) -> None:
        self.provider.record(f"release {ctx.result}")

    @compensable(
        by="refund",
        reconcile="find_charge",
        reconcile_compensation="find_refund",
        reconcile_timeout=0.5,
    )
    def charge(self, amount: str) -> str:
        key = self.key()
        self.point("before-charge")
        self.provider.record(f"charge {key} {amount}")
        self.point("after-charge")
        return f"ch-{key}"

    @compensation
    def refund(self, ctx: CompensationContext) -> None:
        self.point("before-refund")
        self.provider.record(f"refund {ctx.result}")
        self.point("after-refund")

    @compensable(reversibility=Reversibility.IRREVERSIBLE, reconcile="find_wire")
    def wire(self, amount: str, to: str) -> str:
        key = self.key()
        self.point("before-wire")
        self.provider.record(f"wire {key} {amount}")
        return f"wr-{key}"

    @compensable(by="release")
    def ship(self, to: str) -> str:
        raise RuntimeError("courier down")

    def key(self) -> str:
        call = current_call()
        assert call is not None
        return call.call_id

    # -- reconcilers: they only read -------------------------------------------------------

    def find_charge(self, ctx: ReconcileContext) -> Reconciled:
        return self.answer(ctx, f"charge {ctx.call_id} ", f"ch-{ctx.call_id}")

    def find_wire(self, ctx: ReconcileContext) -> Reconciled:
        return self.answer(ctx, f"wire {ctx.call_id} ", f"wr-{ctx.call_id}")

    def find_refund(self, ctx: ReconcileContext) -> Reconciled:
        return self.answer(ctx, f"refund {ctx.result}", None)

    def answer(self, ctx: ReconcileContext, prefix: str, result: str | None) -> Reconciled:
        self.asked.append((ctx.subject.value, ctx.tool_name, ctx.call_id))
        if self.mode is Mode.UNKNOWN:
            return Reconciled.unknown("the provider's search is down")
        if self.mode is Mode.RAISE:
            raise ConnectionError("provider unreachable")
        if self.mode is Mode.HANG:
            self.released.wait(30)
            return Reconciled.unknown("too late")
        if self.mode is Mode.LIE:
            self.late_executed(ctx, result)
            return Reconciled.did_not_land(reason="no such charge, honest")
        line = self.provider.find(prefix)
        if line is None:
            return Reconciled.did_not_land(evidence=Evidence.of(f"search:{prefix.strip()}", "[]"))
        return Reconciled.landed(result, evidence=Evidence.of(line.split()[1], line))

    def late_executed(self, ctx: ReconcileContext, result: str | None) -> None:
        """The call's EXECUTED lands in the journal while the reconciler is asked."""
        assert self.journal is not None
        intent = [
            e
            for e in self.journal.entries(ctx.saga_id)
            if e.phase is Phase.INTENT and e.call_id == ctx.call_id
        ][-1]
        self.journal.append(
            ctx.saga_id,
            Phase.EXECUTED,
            tool_name=ctx.tool_name,
            call_id=ctx.call_id,
            ref_seq=intent.seq,
            payload={"result": result},
        )


class AsyncPayments(Payments):
    """The same tools, async: a cancelled task leaves its call in doubt."""

    def __init__(self, ledger: Path, **options: object) -> None:
        super().__init__(ledger, **options)  # type: ignore[arg-type]
        self.started = asyncio.Event()

    @compensable(
        by="refund",
        reconcile="find_charge",
        reconcile_compensation="find_refund",
        reconcile_timeout=0.5,
    )
    async def charge(self, amount: str) -> str:  # type: ignore[override]
        key = self.key()
        self.provider.record(f"charge {key} {amount}") if "after-charge" in self.stops else None
        self.started.set()
        if self.stops.pop("after-charge", None) or self.stops.pop("before-charge", None):
            await asyncio.sleep(600)  # cancelled here
        return f"ch-{key}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE, reconcile="find_wire")
    async def wire(self, amount: str, to: str) -> str:  # type: ignore[override]
        key = self.key()
        self.started.set()
        if self.stops.pop("before-wire", None):
            await asyncio.sleep(600)  # cancelled here, before the wire was sent
        self.provider.record(f"wire {key} {amount}")
        return f"wr-{key}"
