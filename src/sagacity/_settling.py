"""Settling doubts from the facade: a human's finding, or the tools' reconcilers, asked now.

A mixin of `Sagacity` (as `_deciding.py` is), so that `saga.py` stays thin: `resolve` and
`resolve_compensation` (a human's finding, with its evidence), `reconcile` (ask the
reconcilers now), and the pass `resume_saga` makes before it runs anything.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from sagacity._ids import require_id, require_name
from sagacity._reconcile import ReconcileSubject, check_evidence
from sagacity._reconciling import Reconciling, settle_call, settle_compensation
from sagacity.journal import JournalEntry, SideEffectJournal

if TYPE_CHECKING:
    from sagacity._history import SagaHistory
    from sagacity._leasing import LeaseKeeper

__all__ = ["DoubtSettling"]


class DoubtSettling:
    """`Sagacity.resolve`, `resolve_compensation` and `reconcile`."""

    journal: SideEffectJournal
    _reconciling: Reconciling

    if TYPE_CHECKING:

        def _leased(self, saga_id: str, *, opening: bool = False) -> LeaseKeeper: ...

        def _history(self, saga_id: str, *, must_exist: bool = False) -> SagaHistory: ...

    def resolve(
        self,
        saga_id: str,
        call_id: str,
        *,
        executed: bool,
        result: Any = None,
        by: str,
        reason: str | None = None,
        evidence: str | None = None,
        evidence_sha256: str | None = None,
    ) -> JournalEntry:
        """Record a human's finding on an in-doubt call: it ran (with `result`) or not.

        A call resolved as executed is compensated by the next `compensate`, which then
        ends the saga COMPENSATED once nothing else is in doubt. `reason`, how they found
        out, is journaled with the finding when given, and so is the evidence: a
        reference (`evidence`, say the provider's charge id) and the SHA-256 of what was
        read (`evidence_sha256`), both or neither.

        Raises:
            ValueError: Only one of `evidence` and `evidence_sha256` is given, or either
                is malformed.
            SagaStateError: The call is not in doubt.
        """
        require_name(by, "by")
        require_id(call_id, f"saga {saga_id!r}: call id")
        found = _evidence(saga_id, call_id, evidence, evidence_sha256)
        with self._leased(saga_id) as keeper:
            history = keeper.hold(self._history(saga_id, must_exist=True))
            return settle_call(
                self.journal,
                history,
                call_id,
                executed=executed,
                result=result,
                by=by,
                reason=reason,
                evidence=found,
            )

    def resolve_compensation(
        self,
        saga_id: str,
        call_id: str,
        *,
        compensated: bool,
        by: str,
        reason: str | None = None,
        evidence: str | None = None,
        evidence_sha256: str | None = None,
    ) -> JournalEntry:
        """Settle a compensation in doubt: it took effect, or the next walk runs it again.

        `reason` and the evidence (see `resolve`) are journaled with the finding when given.
        """
        require_name(by, "by")
        require_id(call_id, f"saga {saga_id!r}: call id")
        found = _evidence(saga_id, call_id, evidence, evidence_sha256)
        with self._leased(saga_id) as keeper:
            history = keeper.hold(self._history(saga_id, must_exist=True))
            return settle_compensation(
                self.journal,
                history,
                call_id,
                compensated=compensated,
                by=by,
                reason=reason,
                evidence=found,
            )

    def has_reconciler(
        self, tool_name: str, subject: ReconcileSubject = ReconcileSubject.CALL
    ) -> bool:
        """Whether a tool wrapped here declares a reconciler for its calls (or compensations)."""
        return self._reconciling.registry.get(tool_name, subject) is not None

    def reconcile(self, saga_id: str) -> list[JournalEntry]:
        """Ask the reconcilers wrapped here about the saga's doubts now; return the verdicts.

        Each call or compensation in doubt whose tool declares a reconciler is asked once;
        each answer is journaled (RECONCILED, then what it implies). `compensate` and
        `resume_saga` do this themselves first; this is for an operator who wants the
        answers without walking or resuming.

        Raises:
            SagaNotFoundError: The journal has no such saga.
            SagaBusyError: Another worker holds the saga.
        """
        with self._leased(saga_id) as keeper:
            history = keeper.hold(self._history(saga_id, must_exist=True))
            before = history.last_seq
            if history.ended is None or history.outcome != "COMPLETED":
                self._reconciling.settle(history, walking=history.ended is not None)
            return [e for e in history.entries if e.seq > before and e.phase.name == "RECONCILED"]

    def _reconcile_before(self, saga_id: str) -> None:
        """Before a resume: settle the open saga's doubts its reconcilers can answer."""
        if not self._reconciling.registry:
            return
        with self._leased(saga_id) as keeper:
            history = keeper.hold(self._history(saga_id))
            if history.ended is None:
                self._reconciling.settle(history, walking=False)

    async def _areconcile_before(self, saga_id: str) -> None:
        """`_reconcile_before` from async code: async reconcilers on this loop."""
        if not self._reconciling.registry:
            return
        async with self._leased(saga_id) as keeper:
            history = keeper.hold(await asyncio.to_thread(self._history, saga_id))
            if history.ended is None:
                await self._reconciling.asettle(history, walking=False)


def _evidence(saga_id: str, call_id: str, reference: str | None, sha256: str | None) -> Any:
    if reference is None and sha256 is None:
        return None
    if reference is None or sha256 is None:
        raise ValueError(
            f"saga {saga_id!r} call {call_id!r}: give the evidence reference and its sha256 "
            "together, or neither"
        )
    return check_evidence(reference, sha256, f"saga {saga_id!r} call {call_id!r}")
