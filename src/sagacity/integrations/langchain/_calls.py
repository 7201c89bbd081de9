"""One tool-call id, one call: a second call under a framework id in one run is refused.

A model may answer one turn with two tool calls that carry the same id. Under that id the
journal, the approval request and the replay would stand for both, so that one request
would be shown for two calls, or a second call would replay the first's result. The calls
of one run of the saga's work are therefore tracked by id: the first call of an id owns
it (or the call the journal already holds under it), and another call under it is refused
before anything of it runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from sagacity.adapter import SagaScope, payload_of
from sagacity.errors import ReplayMismatchError, SerializationError
from sagacity.journal import sha256_hex
from sagacity.tools import SagaTool

__all__ = ["aone_call_per_id", "one_call_per_id"]


@dataclasses.dataclass(slots=True)
class _Use:
    """The call that owns an id in one run: its tool, its input's hash, and if it runs now."""

    tool_name: str
    input_sha256: str
    running: int = 0


class _RunCalls:
    """The framework call ids used in one run of a saga's work (one saga scope)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.uses: dict[str, _Use] = {}


_runs_lock = threading.Lock()
_runs: weakref.WeakKeyDictionary[SagaScope, _RunCalls] = weakref.WeakKeyDictionary()


def _run_of(scope: SagaScope) -> _RunCalls:
    with _runs_lock:
        run = _runs.get(scope)
        if run is None:
            run = _runs[scope] = _RunCalls()
        return run


@contextlib.contextmanager
def one_call_per_id(
    tool: SagaTool,
    scope: SagaScope | None,
    call_id: str | None,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> Iterator[None]:
    """Run the body as the one call of `call_id` in this run, or refuse it.

    The owner of an id is the call the journal holds under it (its latest INTENT or
    AWAITING_APPROVAL), else the first call of the run. A call of another tool or input
    than the owner, while the owner was called in this run, or the owner's own call
    again while it is still running, is a second call under one id.

    Raises:
        ReplayMismatchError: A second call under the id: journaled REFUSED, not run, and
            raised from the saga when its work returns.
    """
    claim = _claim(tool, scope, call_id, args, kwargs)
    if claim.refusal is not None:
        claim.refuse()
    try:
        yield
    finally:
        claim.release()


@contextlib.asynccontextmanager
async def aone_call_per_id(
    tool: SagaTool,
    scope: SagaScope | None,
    call_id: str | None,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> AsyncIterator[None]:
    """`one_call_per_id` from async code: a refusal is journaled off the loop."""
    if scope is not None:
        await scope.settled()  # the claim reads the history under the scope's lock
    claim = _claim(tool, scope, call_id, args, kwargs)
    if scope is not None and claim.refusal is not None:
        await scope.gate(claim.refuse)
    try:
        yield
    finally:
        claim.release()


@dataclasses.dataclass(slots=True)
class _Claim:
    """A call's claim on its id in this run: the use it counts as running, or its refusal."""

    scope: SagaScope | None
    tool: SagaTool
    call_id: str
    run: _RunCalls | None = None
    use: _Use | None = None
    refusal: ReplayMismatchError | None = None
    digest: str = ""

    def refuse(self) -> None:
        """Journal the refusal (REFUSED) and raise it."""
        scope, refusal = self.scope, self.refusal
        assert scope is not None
        assert refusal is not None
        with scope.lock:
            scope.refuse(
                refusal,
                tool_name=self.tool.name,
                call_id=self.call_id,
                reason="duplicate_call_id",
                request_id=None,
                input_sha256=self.digest,
            )
            scope.refusal = refusal  # raised when the work returns, even if LangChain caught it
        raise refusal

    def release(self) -> None:
        if self.run is not None and self.use is not None:
            with self.run.lock:
                self.use.running -= 1


def _claim(
    tool: SagaTool,
    scope: SagaScope | None,
    call_id: str | None,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> _Claim:
    if scope is None or call_id is None:
        return _Claim(scope, tool, call_id or "")
    try:
        digest = sha256_hex(tool.input_of(args, kwargs))
    except (SerializationError, TypeError):
        return _Claim(scope, tool, call_id)  # the core refuses the call, and says why
    run = _run_of(scope)
    with run.lock:
        use = run.uses.get(call_id)
        if use is None:
            journaled = _journaled_use(scope, call_id)
            if journaled is not None and (journaled.tool_name, journaled.input_sha256) != (
                tool.name,
                digest,
            ):
                return _Claim(scope, tool, call_id)  # not the journal's: the core refuses it
            use = run.uses[call_id] = _Use(tool.name, digest)
        elif (use.tool_name, use.input_sha256) != (tool.name, digest) or use.running:
            refusal = _twice(scope, tool, call_id, digest, use)
            return _Claim(scope, tool, call_id, refusal=refusal, digest=digest)
        use.running += 1
    return _Claim(scope, tool, call_id, run, use, digest=digest)


def _journaled_use(scope: SagaScope, call_id: str) -> _Use | None:
    """The call the journal holds under `call_id`: its newest INTENT or AWAITING_APPROVAL."""
    with scope.lock:
        history = scope.history
        intent = history.latest_call.get(call_id)
        asked = history.asked.get(call_id)
    if intent is not None and (asked is None or intent.intent.seq > asked.seq):
        return _Use(
            intent.intent.tool_name or "",
            sha256_hex(payload_of(intent.intent).get("input")),
        )
    if asked is not None:
        return _Use(asked.tool_name or "", str(payload_of(asked).get("input_sha256")))
    return None


def _twice(
    scope: SagaScope, tool: SagaTool, call_id: str, digest: str, owner: _Use
) -> ReplayMismatchError:
    if (owner.tool_name, owner.input_sha256) == (tool.name, digest):
        other = "the same call, which is still running"
    else:
        other = f"a call of tool {owner.tool_name!r} with input sha256 {owner.input_sha256[:12]}…"
    return ReplayMismatchError(
        f"saga {scope.saga_id!r}: tool-call id {call_id!r} was given to two calls in one run: "
        f"{other}, and this call of tool {tool.name!r} with input sha256 {digest[:12]}…; "
        "this one is not run. A tool-call id must name one call: have the model call it "
        "again, under an id of its own"
    )
