"""`SagaTool`: the journaling decorator around one tool, and the hot path of a call."""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import functools
import inspect
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sagacity._history import CallState
from sagacity._scope import CurrentCall, SagaScope, _call, current_scope
from sagacity.annotations import Reversibility
from sagacity.approval import ApprovalRequest
from sagacity.approval._check import check_approved
from sagacity.errors import (
    AppendConflictError,
    ApprovalError,
    ApprovalExpiredError,
    ApprovalMissingError,
    ApprovalNotFoundError,
    ApprovalRejectedError,
    ConfigurationError,
    InDoubtError,
    JournalError,
    NoSagaError,
    ReplayMismatchError,
    SagaStateError,
    SerializationError,
)
from sagacity.journal import JournalEntry, JsonValue, Phase, sha256_hex, to_json

if TYPE_CHECKING:
    from sagacity.saga import Sagacity

__all__ = [
    "ApprovalHandler",
    "ExceptionClassifier",
    "FailureKind",
    "SagaTool",
    "awaiting_approval_message",
    "default_classifier",
]


class FailureKind(enum.Enum):
    """How an exception from a tool is journaled, and what it does to the saga."""

    FAILURE = "failure"
    """FAILED; the saga fails and compensates."""
    RETRYABLE = "retryable"
    """FAILED, marked retryable (a retry the framework asked for); the saga goes on."""
    OUTCOME_UNKNOWN = "outcome_unknown"
    """FAILED with the outcome unknown (cancelled, timed out): in doubt, never compensated;
    the saga fails."""
    CONTROL_FLOW = "control_flow"
    """The framework's own control flow (a pause, a deferral): journaled as a FAILED that
    neither fails the saga nor leaves the call in doubt, then passed on unchanged."""


ExceptionClassifier = Callable[[BaseException], FailureKind | None]
"""Returns how to journal an exception, or None to leave it to the next classifier."""

ApprovalHandler = Callable[[ApprovalRequest], Any]
"""Called when a call must wait for approval: returns what the tool call returns, or
raises the framework's own pause."""

_UNKNOWN_OUTCOME_TYPES = (
    asyncio.CancelledError,
    concurrent.futures.CancelledError,
    TimeoutError,
    KeyboardInterrupt,
    SystemExit,
)


def default_classifier(error: BaseException) -> FailureKind:
    """Cancellation, timeouts and interpreter exits leave the outcome unknown; all else fails."""
    if isinstance(error, _UNKNOWN_OUTCOME_TYPES):
        return FailureKind.OUTCOME_UNKNOWN
    return FailureKind.FAILURE


def awaiting_approval_message(request: ApprovalRequest) -> str:
    """The text an agent's model is given when a call waits for approval."""
    return (
        f"[AWAITING_APPROVAL] {request.tool_name} was not run: it needs a human's approval "
        f"(request {request.request_id}, sha256 {request.input_sha256[:12]}). Do not call it "
        "again; tell the user it is waiting for approval."
    )


class SagaTool:
    """A tool whose calls are journaled inside a saga; made by `Sagacity.wrap`.

    Calling it is calling the tool: it keeps the tool's `__name__`, docstring and
    signature, so frameworks derive the same schema. A sync tool stays sync; an async
    tool's call returns a coroutine.
    """

    # Set by functools.update_wrapper; declared so that type checkers see them.
    __name__: str
    __qualname__: str
    __wrapped__: Callable[..., Any]

    def __init__(
        self,
        owner: Sagacity,
        func: Callable[..., Any],
        *,
        name: str,
        description: str,
        reversibility: Reversibility,
        excluded: frozenset[str] = frozenset(),
    ) -> None:
        self.owner = owner
        self.func = func
        self.name = name
        """The name agents call it by."""
        self.description = description
        """Its description: the docstring."""
        self.reversibility = reversibility
        """How far its effect can be undone."""
        self.excluded = excluded
        """Parameters left out of the journaled input (framework-injected ones)."""
        self.is_async = inspect.iscoroutinefunction(func)
        self.signature = inspect.signature(func)
        parameters = self.signature.parameters.values()
        # Signature.bind costs 4 µs a call; a tool of plain parameters is bound by hand.
        self._plain: tuple[str, ...] | None = (
            tuple(p.name for p in parameters)
            if all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters)
            else None
        )
        self._defaults = {p.name: p.default for p in parameters if p.default is not p.empty}
        functools.update_wrapper(self, func)
        if self.is_async and hasattr(inspect, "markcoroutinefunction"):
            inspect.markcoroutinefunction(self)  # lets frameworks see an async tool (3.12+)

    def __repr__(self) -> str:
        return f"<SagaTool {self.name} {self.reversibility.name}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the tool: journaled inside a saga, straight through outside one."""
        if self.is_async:
            return self.ainvoke(args, kwargs)
        return self.invoke(args, kwargs)

    def excluding(self, *names: str) -> SagaTool:
        """Return a copy that leaves these parameters out of the journaled input."""
        return SagaTool(
            self.owner,
            self.func,
            name=self.name,
            description=self.description,
            reversibility=self.reversibility,
            excluded=self.excluded | frozenset(names),
        )

    def input_of(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, JsonValue]:
        """Bind arguments to parameter names, apply defaults and convert them to JSON.

        This dict is what is journaled, hashed for approval and handed to compensations.
        """
        arguments = self._bind_plain(args, kwargs)
        if arguments is not None:
            try:  # plain parameters: nothing to flatten, and no location to format ahead
                return {n: to_json(v) for n, v in arguments.items() if n not in self.excluded}
            except SerializationError:
                pass  # convert again below, to name the argument in the error
        else:
            bound = self.signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = bound.arguments
        result: dict[str, JsonValue] = {}
        for param_name, value in arguments.items():
            if param_name in self.excluded:
                continue
            kind = self.signature.parameters[param_name].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                for key, item in value.items():
                    result[key] = to_json(item, where=f"tool {self.name!r} argument {key!r}")
            else:
                result[param_name] = to_json(
                    value, where=f"tool {self.name!r} argument {param_name!r}"
                )
        return result

    def _bind_plain(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Bind as `Signature.bind` + `apply_defaults` would; None leaves it to them."""
        names = self._plain
        if names is None or len(args) > len(names):
            return None
        arguments = dict(zip(names, args, strict=False))  # args may be fewer than names
        used = 0
        for name in names[len(args) :]:
            if name in kwargs:
                arguments[name] = kwargs[name]
                used += 1
            elif name in self._defaults:
                arguments[name] = self._defaults[name]
            else:
                return None  # missing: let Signature.bind raise its TypeError
        if used != len(kwargs):
            return None  # unknown or repeated names: likewise
        return arguments

    def invoke(
        self,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
        on_approval_needed: ApprovalHandler | None = None,
    ) -> Any:
        """Call a sync tool through the journal.

        Args:
            args: Positional arguments for the tool.
            kwargs: Keyword arguments for the tool.
            call_id: The framework's tool-call id; sagacity makes one when None.
            on_approval_needed: What an IRREVERSIBLE call that waits returns or raises;
                by default the `[AWAITING_APPROVAL]` text.

        Raises:
            TypeError: The tool is async: its coroutine would never be awaited here.
        """
        if self.is_async:
            raise TypeError(
                f"tool {self.name!r} is async: call `await tool.ainvoke(...)` (or await the "
                "tool), not invoke"
            )
        kwargs = kwargs or {}
        scope = self._scope()
        if scope is None:
            return self.func(*args, **kwargs)
        call = _Call(self, scope, args, kwargs, call_id)
        decision, value = call.begin()
        if decision is _REPLAY:
            return value
        if decision is _PAUSE:
            return (on_approval_needed or awaiting_approval_message)(value)
        token = _call.set(CurrentCall(scope.saga_id, call.call_id, self.name))
        try:
            result = self.func(*args, **kwargs)
        except BaseException as error:
            call.failed(error)
            raise
        finally:
            _call.reset(token)
        call.executed(result)
        return result

    async def ainvoke(
        self,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
        on_approval_needed: ApprovalHandler | None = None,
    ) -> Any:
        """Call a tool through the journal from async code (see `invoke`).

        A sync tool is called directly on the loop's thread, as its framework would.
        """
        kwargs = kwargs or {}
        scope = self._scope()
        if scope is None:
            outcome = self.func(*args, **kwargs)
            return await outcome if inspect.isawaitable(outcome) else outcome
        call = _Call(self, scope, args, kwargs, call_id)
        decision, value = call.begin()
        if decision is _REPLAY:
            return value
        if decision is _PAUSE:
            paused = (on_approval_needed or awaiting_approval_message)(value)
            return await paused if inspect.isawaitable(paused) else paused
        token = _call.set(CurrentCall(scope.saga_id, call.call_id, self.name))
        try:
            result = self.func(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        except BaseException as error:
            call.failed(error)
            raise
        finally:
            _call.reset(token)
        call.executed(result)
        return result

    def pending_approval(
        self,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
    ) -> ApprovalRequest | None:
        """For a framework's approval policy: must this call wait for a human?

        Returns the approval request the call waits on, journaling AWAITING_APPROVAL and
        storing a new request if it has not been asked yet; None when the call may run
        now (not IRREVERSIBLE, no saga open, already run, or approved and every check
        passes). The call itself checks again when it runs.

        Raises:
            ApprovalError: The request was rejected, or the input no longer matches what
                was approved.
        """
        scope = self._scope()
        if scope is None:
            return None
        # Without a framework id, look at the id the call itself will take next: asking
        # must not use it up, or the call would not find its own request.
        return _Call(self, scope, args, kwargs or {}, call_id, peek=True).pending_request()

    def _scope(self) -> SagaScope | None:
        scope = current_scope()
        if scope is None:
            if (
                self.reversibility is Reversibility.IRREVERSIBLE
                and not self.owner.allow_irreversible_outside_saga
            ):
                raise NoSagaError(
                    f"tool {self.name!r} is IRREVERSIBLE and was called outside a saga: run it "
                    "inside Sagacity.saga(...) so that it waits for approval, or build "
                    "Sagacity with allow_irreversible_outside_saga=True"
                )
            return None
        if scope.owner is not self.owner:
            raise ConfigurationError(
                f"tool {self.name!r} was wrapped by another Sagacity than the one running saga "
                f"{scope.saga_id!r}; wrap the tools with the Sagacity that runs the saga"
            )
        return scope


_CONFLICT_RETRIES = 8
"""How often an approved call re-checks after another writer appended to its saga first."""

_REPLAY = object()
_PAUSE = object()
_RUN = object()


class _Call:
    """One call on the hot path: decide, journal INTENT, then EXECUTED or FAILED."""

    __slots__ = ("args", "call_id", "input", "intent", "kwargs", "request", "scope", "tool")

    def __init__(
        self,
        tool: SagaTool,
        scope: SagaScope,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        call_id: str | None,
        *,
        peek: bool = False,
    ) -> None:
        self.tool = tool
        self.scope = scope
        self.args = args
        self.kwargs = kwargs
        self.input = tool.input_of(args, kwargs)  # SerializationError before anything runs
        if call_id:
            self.call_id = call_id
        elif peek:
            self.call_id = scope.peek_call_id(tool.name)
        else:
            self.call_id = scope.next_call_id(tool.name)
        self.intent: JournalEntry | None = None
        self.request: ApprovalRequest | None = None

    def begin(self) -> tuple[object, Any]:
        """Return (_REPLAY, result), (_PAUSE, request) or (_RUN, None) after INTENT."""
        scope, tool = self.scope, self.tool
        with scope.lock:
            if scope.closed:
                raise SagaStateError(
                    f"saga {scope.saga_id!r}: its work returned before tool {tool.name!r} was "
                    "called, so the call is not run. Consume a streamed run inside the work"
                )
            prior = scope.history.latest_call.get(self.call_id)
            if prior is not None:
                try:
                    replayed = self._replay(prior)
                except (InDoubtError, ReplayMismatchError) as refusal:
                    scope.refusal = refusal  # nothing ran: the saga stays open, not failed
                    raise
                if replayed is not None:
                    return replayed
            payload: dict[str, JsonValue] = {
                "input": self.input,
                "reversibility": tool.reversibility.value,
            }
            if tool.reversibility is Reversibility.IRREVERSIBLE:
                if scope.failed:
                    raise SagaStateError(
                        f"saga {scope.saga_id!r}: a call has failed, so the saga will be "
                        f"compensated; IRREVERSIBLE tool {tool.name!r} is not run. Run it in a "
                        "new saga if it is still wanted"
                    )
                return self._begin_approved(payload)
            self.intent = scope.append(
                Phase.INTENT, tool_name=tool.name, call_id=self.call_id, payload=payload
            )
        return _RUN, None

    def _begin_approved(self, payload: dict[str, JsonValue]) -> tuple[object, Any]:
        """Check the approval and journal INTENT as one step against other workers.

        Workers resuming the same saga at once each see the approval unused. The INTENT is
        appended only if the journal is still as the check read it; if another worker
        appended first, the check runs again on what it wrote, so the approved call runs
        once.
        """
        scope = self.scope
        for _ in range(_CONFLICT_RETRIES):
            try:
                self.request = self._approved_request()  # re-reads the journal
            except ApprovalError as refusal:
                scope.refusal = refusal
                raise
            if self.request is None:
                return _PAUSE, self._request_approval()
            payload["request_id"] = self.request.request_id
            try:
                self.intent = scope.append(
                    Phase.INTENT,
                    tool_name=self.tool.name,
                    call_id=self.call_id,
                    payload=payload,
                    expected_seq=scope.history.last_seq,
                )
            except AppendConflictError:
                continue
            return _RUN, None
        raise JournalError(
            f"saga {scope.saga_id!r}: the INTENT of approved call {self.call_id!r} lost "
            f"{_CONFLICT_RETRIES} races with other writers of the saga; it was not run, resume "
            "again"
        )

    def _replay(self, prior: CallState) -> tuple[object, Any] | None:
        saga, name = self.scope.saga_id, self.tool.name
        if prior.intent.tool_name != name:
            raise ReplayMismatchError(
                f"saga {saga!r}: call id {self.call_id!r} was used by tool "
                f"{prior.intent.tool_name!r} at seq {prior.intent.seq}; tool {name!r} is not "
                "run under it. Give every call its own id"
            )
        if prior.executed:
            before = _payload(prior.intent).get("input")
            if sha256_hex(before) != sha256_hex(self.input):
                raise ReplayMismatchError(
                    f"saga {saga!r}: call {self.call_id!r} of tool {name!r} already ran at seq "
                    f"{prior.intent.seq} with other input; it is not run again. Call it under "
                    "a new call id, or undo the saga with Sagacity.compensate"
                )
            assert prior.outcome is not None
            return _REPLAY, _payload(prior.outcome).get("result")
        if prior.in_doubt:
            raise InDoubtError(
                f"saga {saga!r}: call {self.call_id!r} of tool {name!r} has an INTENT at seq "
                f"{prior.intent.seq} with no known outcome; it may have run. Resolve it with "
                "Sagacity.resolve before running it again"
            )
        return None  # it failed with a known outcome: running it again is a retry

    def _asked(self) -> tuple[JournalEntry, ApprovalRequest] | None:
        """The AWAITING_APPROVAL entry and stored request of this call, if it was asked.

        Raises:
            ApprovalRejectedError: It was asked and rejected.
            ApprovalNotFoundError: It was asked, but the request is no longer stored.
        """
        scope = self.scope
        scope.refresh()  # the approval may have been recorded by another process
        asked = [e for e in scope.history.awaiting.values() if e.call_id == self.call_id]
        if not asked:
            return None
        awaiting = asked[-1]
        request_id = str(_payload(awaiting).get("request_id"))
        request = scope.owner.approvals.get(request_id)
        if request is None:
            rejected = scope.history.rejected(awaiting.seq)
            if rejected is not None:
                raise ApprovalRejectedError(
                    f"saga {scope.saga_id!r}: request {request_id} for tool {self.tool.name!r} "
                    f"was rejected: {_payload(rejected).get('reason')}"
                )
            raise ApprovalNotFoundError(
                f"saga {scope.saga_id!r}: approval request {request_id} for call "
                f"{self.call_id!r} is no longer stored; the call is not run"
            )
        return awaiting, request

    def _approved_request(self) -> ApprovalRequest | None:
        """The request this call answers, checked; None when it has not been asked yet.

        Raises:
            ApprovalExpiredError: The request expired; a new one was made in its place,
                so that the saga can still be approved properly.
        """
        asked = self._asked()
        if asked is None:
            return None
        _, request = asked
        try:
            self._check(request)
        except ApprovalExpiredError as expired:
            renewed = self._request_approval(replaces=request)
            raise ApprovalExpiredError(
                f"{expired}; request {renewed.request_id} now asks for the same call: approve "
                "it, then resume the saga"
            ) from None
        return request

    def _check(self, request: ApprovalRequest) -> None:
        check_approved(
            request,
            self.scope.history,
            input_sha256=sha256_hex(self.input),
            now=self.scope.owner.now(),
        )

    def pending_request(self) -> ApprovalRequest | None:
        """Return the request this call must wait on, asking for one if there is none.

        None means the call may run now: it is not IRREVERSIBLE, it ran before (and
        will be replayed), or its approval passes every check.
        """
        if self.tool.reversibility is not Reversibility.IRREVERSIBLE:
            return None
        with self.scope.lock:
            if self.scope.closed:  # asking would journal a request after the saga ended
                raise SagaStateError(
                    f"saga {self.scope.saga_id!r}: its work returned before tool "
                    f"{self.tool.name!r} was called, so no approval is asked. Consume a "
                    "streamed run inside the work"
                )
            prior = self.scope.history.latest_call.get(self.call_id)
            if prior is not None and prior.executed:
                return None
            try:
                asked = self._asked()
                if asked is None:
                    return self._request_approval()
                _, request = asked
                self._check(request)
            except ApprovalMissingError:
                return request  # asked and not yet approved: still waiting
            except ApprovalExpiredError:
                return self._request_approval(replaces=request)  # expired: ask again
            except ApprovalError as refusal:
                self.scope.refusal = refusal
                raise
            return None

    def _request_approval(self, *, replaces: ApprovalRequest | None = None) -> ApprovalRequest:
        """Journal AWAITING_APPROVAL and store the request; `replaces` an expired one."""
        scope, tool, owner = self.scope, self.tool, self.scope.owner
        now = owner.now()
        ttl = owner.approval_ttl
        expires_at = None if ttl is None else now + ttl
        request_id = uuid.uuid4().hex
        digest = sha256_hex(self.input)
        reason = (
            f"{tool.name} is IRREVERSIBLE: {tool.description.strip().splitlines()[0]}"
            if (tool.description.strip())
            else f"{tool.name} is IRREVERSIBLE"
        )
        payload: dict[str, JsonValue] = {
            "request_id": request_id,
            "input": self.input,
            "input_sha256": digest,
            "reason": reason,
            "expires_at": None if expires_at is None else expires_at.isoformat(),
        }
        if replaces is not None:
            payload["replaces"] = replaces.request_id
        entry = scope.append(
            Phase.AWAITING_APPROVAL, tool_name=tool.name, call_id=self.call_id, payload=payload
        )
        request = ApprovalRequest(
            request_id=request_id,
            saga_id=scope.saga_id,
            seq=entry.seq,
            call_id=self.call_id,
            tool_name=tool.name,
            input=self.input,
            input_sha256=digest,
            reason=reason,
            requested_at=now,
            expires_at=expires_at,
        )
        owner.approvals.save(request)
        if replaces is not None:
            owner.approvals.delete(replaces.request_id)
        scope.awaiting.append(request)
        return request

    def executed(self, result: Any) -> None:
        """Journal EXECUTED; an approved call consumes its request."""
        try:
            payload: JsonValue = {
                "result": to_json(result, where=f"tool {self.tool.name!r} result")
            }
        except SerializationError as error:
            # The effect has happened: record it, even if its result has no JSON form.
            payload = {"result": None, "unserializable_result": f"{error}: {result!r:.500}"}
        assert self.intent is not None
        try:
            self.scope.append(
                Phase.EXECUTED,
                tool_name=self.tool.name,
                call_id=self.call_id,
                ref_seq=self.intent.seq,
                payload=payload,
            )
        except BaseException:
            # The INTENT stays in doubt: the saga must not end COMPLETED if the work
            # swallows the error.
            self.scope.failed = True
            raise
        self.scope.suspended.discard(self.call_id)  # ran again after a pause: not paused now
        self._consume_request()

    def failed(self, error: BaseException) -> None:
        """Journal FAILED with the error's kind; mark the saga failed when the kind says so."""
        kind = self.scope.owner.classify(error)
        if kind in (FailureKind.FAILURE, FailureKind.OUTCOME_UNKNOWN):
            self.scope.failed = True
        if kind is FailureKind.CONTROL_FLOW:
            self.scope.suspended.add(self.call_id)  # the framework paused mid-call
        else:
            self.scope.suspended.discard(self.call_id)
        assert self.intent is not None
        try:
            self.scope.append(
                Phase.FAILED,
                tool_name=self.tool.name,
                call_id=self.call_id,
                ref_seq=self.intent.seq,
                payload={
                    "kind": kind.value,
                    "error": {"type": type(error).__qualname__, "message": str(error)},
                },
            )
        except JournalError as journal_error:
            raise journal_error from error
        self._consume_request()  # the approval was used: a retry must be approved again

    def _consume_request(self) -> None:
        if self.request is not None:
            self.scope.owner.approvals.delete(self.request.request_id)


def _payload(entry: JournalEntry) -> dict[str, Any]:
    return entry.payload if isinstance(entry.payload, dict) else {}
