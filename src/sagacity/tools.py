"""`SagaTool`: the journaling decorator around one tool."""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any

from sagacity import _telemetry
from sagacity._call import PAUSE, REPLAY, Call
from sagacity._classify import ExceptionClassifier, FailureKind, default_classifier
from sagacity._offloop import FinishedThenCancelled
from sagacity._owner import SagaOwner
from sagacity._scope import CurrentCall, SagaScope, call_var, current_scope
from sagacity.annotations import Retry, Reversibility
from sagacity.approval import ApprovalRequest
from sagacity.errors import ConfigurationError, NoSagaError, SerializationError
from sagacity.journal import JournalEntry, JsonValue, to_json
from sagacity.journal._group import AppendWithdrawn, CommittedThenCancelled

__all__ = [
    "ApprovalHandler",
    "ExceptionClassifier",
    "FailureKind",
    "SagaTool",
    "awaiting_approval_message",
    "default_classifier",
]


_JOURNALED_CANCELS = (AppendWithdrawn, CommittedThenCancelled, FinishedThenCancelled)
"""The cancels sagacity raises once the journal holds what the cancelled call did."""

ApprovalHandler = Callable[[ApprovalRequest], Any]
"""Called when a call must wait for approval: returns what the tool call returns, or
raises the framework's own pause."""


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
        owner: SagaOwner,
        func: Callable[..., Any],
        *,
        name: str,
        description: str,
        reversibility: Reversibility,
        excluded: frozenset[str] = frozenset(),
        retry: Retry | None = None,
        approval_reason: str | None = None,
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
        self.retry = retry
        """How often a failed call is tried again; None for never."""
        self.approval_reason = approval_reason
        """Set, every call waits for approval as an IRREVERSIBLE one does, whatever its
        reversibility (a workflow gate), with this reason shown to the approver."""
        self.result_where = f"tool {name!r} result"
        """Names the tool's result in a `SerializationError`."""
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
            retry=self.retry,
            approval_reason=self.approval_reason,
        )

    def input_of(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, JsonValue]:
        """Bind arguments to parameter names, apply defaults and convert them to JSON.

        This dict is what is journaled, hashed for approval and handed to compensations.
        """
        arguments = self._bind_plain(args, kwargs)
        if arguments is not None:
            if self.excluded:
                arguments = {n: v for n, v in arguments.items() if n not in self.excluded}
            try:  # plain parameters: nothing to flatten, and no location to format ahead
                return to_json(arguments)  # type: ignore[return-value]  # a dict stays a dict
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
        if not kwargs and len(args) == len(names):
            return dict(zip(names, args, strict=False))  # all given by position
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
        call = Call(self, scope, args, kwargs, call_id)
        decision, value = call.begin()
        if decision is REPLAY:
            return value
        if decision is PAUSE:
            return (on_approval_needed or awaiting_approval_message)(value)
        span = None if _telemetry.current is None else call.traced()
        token = call_var.set(CurrentCall(scope.saga_id, call.call_id, self.name))
        try:
            while True:
                try:
                    result = self.func(*args, **kwargs)
                    break
                except BaseException as error:
                    wait = call.retry(error)
                    if wait is None:
                        call.failed(error)
                        raise
                time.sleep(wait)
        finally:
            call_var.reset(token)
            if span is not None:
                span.detach()
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

        A sync tool is called directly on the loop's thread, as its framework would. The
        journal's writes are awaited, never waited on: the event loop runs other tasks
        while an entry is committed, and the tool starts only once its INTENT is.
        """
        kwargs = kwargs or {}
        scope = self._scope()
        if scope is None:
            outcome = self.func(*args, **kwargs)
            return await outcome if inspect.isawaitable(outcome) else outcome
        call = Call(self, scope, args, kwargs, call_id, deferred=True)
        try:
            if call.refused is not None:
                await scope.gate(call.refused)  # journals the refusal off the loop, and raises it
            decision, value = await call.abegin()
            if decision is REPLAY:
                return value
            if decision is PAUSE:
                paused = (on_approval_needed or awaiting_approval_message)(value)
                return await paused if inspect.isawaitable(paused) else paused
            span = None if _telemetry.current is None else call.traced()
            token = call_var.set(CurrentCall(scope.saga_id, call.call_id, self.name))
            try:
                while True:
                    try:
                        result = self.func(*args, **kwargs)
                        if inspect.isawaitable(result):
                            result = await result
                        break
                    except BaseException as error:
                        failure = error
                        wait = await call.aretry(error)
                        if wait is None:
                            await call.afailed(error)
                            raise
                    await call.abackoff(wait, failure)
            finally:
                call_var.reset(token)
                if span is not None:
                    span.detach()
            await call.aexecuted(result)
        except _JOURNALED_CANCELS as cancelled:
            # What the journal holds is recorded by now; the caller gets the plain cancel
            # that Python 3.11's `asyncio.timeout` turns into its TimeoutError (it takes
            # no subclass), with the message an anyio scope knows as its own.
            raise asyncio.CancelledError(*cancelled.args) from cancelled
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
        return Call(self, scope, args, kwargs or {}, call_id, peek=True).pending_request()

    async def apending_approval(
        self,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
    ) -> ApprovalRequest | None:
        """`pending_approval` from async code, its journal and store I/O off the loop.

        They run on a worker thread (see `SagaScope.gate`); a cancel waits for them.
        """
        scope = self._scope()
        if scope is None:
            return None
        call = await _apeek(self, scope, args, kwargs or {}, call_id)
        return await scope.gate(call.pending_request)

    def decline(
        self,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
        source: str,
        reason: str = "",
    ) -> JournalEntry | None:
        """For a framework's own "no": journal REJECTED for this call's request.

        The call is not run, even if sagacity holds an approval for it, and the saga
        goes on: the framework tells its model. `source` names where the rejection came
        from (say, "openai-agents state.reject"). Returns the REJECTED entry, or None when
        no saga is open or the call was never asked.
        """
        scope = self._scope()
        if scope is None:
            return None
        call = Call(self, scope, args, kwargs or {}, call_id, peek=True)
        return call.decline(source=source, reason=reason)

    async def adecline(
        self,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
        source: str,
        reason: str = "",
    ) -> JournalEntry | None:
        """`decline` from async code, its journal and store I/O off the loop."""
        scope = self._scope()
        if scope is None:
            return None
        call = await _apeek(self, scope, args, kwargs or {}, call_id)
        return await scope.gate(lambda: call.decline(source=source, reason=reason))

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


async def _apeek(
    tool: SagaTool,
    scope: SagaScope,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    call_id: str | None,
) -> Call:
    """The call a framework asks about, its id peeked, not taken.

    A refused id or input is journaled off the loop, and raised.
    """
    call = Call(tool, scope, args, kwargs, call_id, peek=True, deferred=True)
    if call.refused is not None:
        await scope.gate(call.refused)  # raises the refusal
    return call
