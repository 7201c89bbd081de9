"""What one call journals once it has begun: EXECUTED or FAILED, and the retries between.

`Call` (in `_call`) decides a call and journals its INTENT; this base journals the rest,
on the same object (a base class, so that no call goes through another object).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from typing import Any, Protocol

from sagacity import _telemetry
from sagacity._classify import FailureKind, error_json
from sagacity._history import NOT_STARTED
from sagacity._offloop import finished_off_loop
from sagacity._scope import SagaScope
from sagacity.annotations import Retry, Reversibility
from sagacity.approval import ApprovalRequest
from sagacity.errors import JournalError, SerializationError
from sagacity.journal import JournalEntry, JsonValue, Phase, to_json
from sagacity.journal._group import CommittedThenCancelled

__all__ = ["CallOutcome", "JournaledTool"]

# On Python 3.11 `Phase.INTENT` goes through EnumType.__getattr__ (0.07 µs): the hot path
# uses these.
_INTENT, _EXECUTED = Phase.INTENT, Phase.EXECUTED


class JournaledTool(Protocol):
    """What the hot path needs of a `SagaTool` (a Protocol: `tools` imports the hot path)."""

    name: str
    description: str
    reversibility: Reversibility
    retry: Retry | None
    result_where: str
    approval_reason: str | None

    def input_of(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, JsonValue]:
        """Bind and convert the call's arguments."""
        ...


class CallOutcome:
    """The outcome half of a `Call`: EXECUTED, FAILED, a retry, or FAILED `not_started`."""

    __slots__ = ("attempt", "call_id", "input", "intent", "request", "scope", "span", "tool")

    attempt: int
    call_id: str
    input: dict[str, JsonValue]
    intent: JournalEntry | None
    request: ApprovalRequest | None
    scope: SagaScope
    span: _telemetry.ToolSpan | None
    tool: JournaledTool

    async def _anot_started(self, cancelled: BaseException) -> None:
        """Journal FAILED `not_started` after a committed INTENT whose tool was not started.

        If that FAILED cannot be journaled, the INTENT stays in doubt: the saga is
        marked failed.
        """
        payload: dict[str, JsonValue] = {"kind": NOT_STARTED, "error": error_json(cancelled)}
        if self.attempt > 1:
            payload["attempt"] = self.attempt
        try:
            await self._aappend_outcome(Phase.FAILED, payload)
        except CommittedThenCancelled:
            raise  # cancelled again: the FAILED is durable all the same
        except BaseException:
            self.scope.fail(cancelled)
            raise

    def retry(self, error: BaseException) -> float | None:
        """After a failed attempt: journal it and the next INTENT; return the wait, or None.

        None when the tool declares no retries, they are used up, or the error is not one
        to retry: then `failed` journals the final outcome.
        """
        if not self._retries(error):
            return None
        with self.scope.lock:
            self._append_outcome(Phase.FAILED, self._retried_payload(error), error)
            self.attempt += 1
            self.intent = self.scope.append(
                _INTENT,
                tool_name=self.tool.name,
                call_id=self.call_id,
                payload=self._retry_intent(),
            )
        return self._retry_delay()

    async def aretry(self, error: BaseException) -> float | None:
        """`retry` from async code: the loop awaits both appends.

        Cut short (a cancel, a journal error), there is no next attempt: the call failed
        with `error`, and so does the saga. A next INTENT committed under a cancel is
        answered by FAILED `not_started` (see `abackoff`).
        """
        if not self._retries(error):
            return None
        try:
            await self._aappend_outcome(Phase.FAILED, self._retried_payload(error), error)
            self.attempt += 1
            self.intent = await self.scope.aappend(
                _INTENT,
                tool_name=self.tool.name,
                call_id=self.call_id,
                payload=self._retry_intent(),
            )
        except CommittedThenCancelled as cancelled:
            self.scope.fail(error)
            if cancelled.entry.phase is _INTENT:
                self.intent = cancelled.entry
                await self._anot_started(cancelled)
            raise
        except BaseException:
            # The FAILED, or the INTENT after it, may be missing: in doubt either way.
            self.scope.fail(error)
            raise
        return self._retry_delay()

    async def abackoff(self, wait: float, error: BaseException) -> None:
        """Wait `wait` seconds before the next attempt, whose INTENT is journaled.

        Cancelled meanwhile, that attempt never began: FAILED `not_started` says so,
        journaled through any further cancel, and the saga fails with `error`, the last
        attempt's, since no attempt of the call succeeded.
        """
        try:
            await asyncio.sleep(wait)
        except BaseException as cancelled:
            self.scope.fail(error)
            await self._anot_started(cancelled)
            raise

    def _retries(self, error: BaseException) -> bool:
        policy = self.tool.retry
        return not (
            policy is None
            or self.attempt > policy.retries
            or not isinstance(error, policy.retry_on)
            or self.scope.owner.classify(error) is not FailureKind.FAILURE
        )

    def _retried_payload(self, error: BaseException) -> JsonValue:
        assert self.intent is not None
        return {"kind": "retried", "attempt": self.attempt, "error": error_json(error)}

    def _retry_intent(self) -> JsonValue:
        return {
            "input": self.input,
            "reversibility": self.tool.reversibility._value_,
            "attempt": self.attempt,
        }

    def _retry_delay(self) -> float:
        assert self.tool.retry is not None
        return self.tool.retry.delay(self.attempt - 1)

    def executed(self, result: Any) -> None:
        """Journal EXECUTED; an approved call consumes its request.

        Raises:
            TypeError: The tool returned an unread generator: its effect would happen as
                it is read, after the call was journaled as done. Journaled FAILED.
        """
        payload = self._result_payload(result)
        if isinstance(payload, TypeError):
            self.failed(payload)
            raise payload
        try:
            self._append_outcome(_EXECUTED, payload)
        except BaseException:
            # The INTENT stays in doubt: the saga must not end COMPLETED if the work
            # swallows the error.
            self.scope.failed = True
            raise
        self.scope.suspended.discard(self.call_id)  # ran again after a pause: not paused now
        self._consume_request()

    async def aexecuted(self, result: Any) -> None:
        """`executed` from async code: the loop awaits the EXECUTED entry's commit."""
        payload = self._result_payload(result)
        if isinstance(payload, TypeError):
            await self.afailed(payload)
            raise payload
        try:
            await self._aappend_outcome(_EXECUTED, payload)
        except CommittedThenCancelled:
            raise  # the outcome is durable: the call is not in doubt
        except BaseException:
            self.scope.failed = True  # the INTENT stays in doubt (see `executed`)
            raise
        self.scope.suspended.discard(self.call_id)
        await self._aconsume_request()

    def _result_payload(self, result: Any) -> JsonValue | TypeError:
        """The EXECUTED payload, or the refusal of a result that is an unread generator."""
        if inspect.isgenerator(result) or inspect.isasyncgen(result):
            if inspect.isgenerator(result):
                result.close()  # never started: nothing in it ran
            return TypeError(
                f"tool {self.tool.name!r} returned a {type(result).__name__}, which runs as it "
                "is read; return the collected result instead"
            )
        try:
            return {"result": to_json(result, where=self.tool.result_where)}
        except SerializationError as error:
            # The effect has happened: record it, even if its result has no JSON form.
            return {"result": None, "unserializable_result": f"{error}: {result!r:.500}"}

    def failed(self, error: BaseException) -> None:
        """Journal FAILED with the error's kind; mark the saga failed when the kind says so."""
        payload = self._failure_payload(error)
        try:
            self._append_outcome(Phase.FAILED, payload, error)
        except JournalError as journal_error:
            raise journal_error from error
        self._consume_request()  # the approval was used: a retry must be approved again

    async def afailed(self, error: BaseException) -> None:
        """`failed` from async code: the loop awaits the FAILED entry's commit."""
        payload = self._failure_payload(error)
        try:
            await self._aappend_outcome(Phase.FAILED, payload, error)
        except JournalError as journal_error:
            raise journal_error from error
        await self._aconsume_request()

    def _failure_payload(self, error: BaseException) -> JsonValue:
        """Classify `error`, mark the saga as its kind says, and return the FAILED payload."""
        kind = self.scope.owner.classify(error)
        if kind in (FailureKind.FAILURE, FailureKind.OUTCOME_UNKNOWN):
            self.scope.fail(error)
        if kind is FailureKind.CONTROL_FLOW:
            self.scope.suspended.add(self.call_id)  # the framework paused mid-call
        else:
            self.scope.suspended.discard(self.call_id)
        payload: dict[str, JsonValue] = {"kind": kind.value, "error": error_json(error)}
        if kind is FailureKind.OUTCOME_UNKNOWN:
            _telemetry.logger.warning(
                "saga %r: call %r of tool %r is in doubt (%s): its effect may exist",
                self.scope.saga_id,
                self.call_id,
                self.tool.name,
                type(error).__name__,
            )
        if self.attempt > 1:
            payload["attempt"] = self.attempt
        return payload

    def _append_outcome(
        self, phase: Phase, payload: JsonValue, error: BaseException | None = None
    ) -> None:
        assert self.intent is not None
        entry = self.scope.append(
            phase,
            tool_name=self.tool.name,
            call_id=self.call_id,
            ref_seq=self.intent.seq,
            payload=payload,
        )
        span = self.span  # None unless sagacity.observability.instrument() ran
        if span is not None:
            span.outcome(entry, error)

    async def _aappend_outcome(
        self, phase: Phase, payload: JsonValue, error: BaseException | None = None
    ) -> None:
        assert self.intent is not None
        entry = await self.scope.aappend(
            phase,
            tool_name=self.tool.name,
            call_id=self.call_id,
            ref_seq=self.intent.seq,
            payload=payload,
        )
        span = self.span
        if span is not None:
            span.outcome(entry, error)

    def traced(self) -> _telemetry.ToolSpan | None:
        """Start the call's live span after its INTENT, when tracing is installed.

        The span is current while the tool runs, so spans the tool makes are its
        children; the caller detaches it once the tool returns or raises.
        """
        tracing = _telemetry.current  # None unless sagacity.observability.instrument() ran
        if tracing is None:
            return None
        assert self.intent is not None
        tool = self.tool
        self.span = tracing.tool_started(
            self.intent,
            description=tool.description,
            reversibility=tool.reversibility._value_,
            arguments=self.input,
        )
        return self.span

    def _consume_request(self) -> None:
        if self.request is not None:
            self.scope.owner.approval.consume(self.request)

    async def _aconsume_request(self) -> None:
        """`_consume_request` off the loop, finished even if the task is cancelled."""
        if self.request is not None:
            await finished_off_loop(self._consume_request)
