"""Sagas that span many MCP requests: the scope a call runs in, its call id, the end.

The saga stays open in the journal between requests; `end_saga` (or the `sagacity/end`
request) closes it. While calls of a saga are running in this process they share one
`SagaScope`, so that appends and call ids are serialized; between calls nothing is kept
in memory and everything is re-read from the journal, which makes a restart, or another
server process, see the same saga.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import re
import secrets
import threading
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

# No public API opens a saga's scope for one request while the saga stays open across
# requests, as `Sagacity.saga` does for one call of its work: the scope, its context
# variable and the journal index below are internal, used in this module only.
from sagacity.adapter import (
    CONTROL_FLOW,
    FinishedThenCancelled,
    SagaHistory,
    SagaScope,
    entries_async,
    finished_off_loop,
    payload_of,
    seal_for_replay,
)
from sagacity.annotations import Reversibility
from sagacity.approval import ApprovalRequest
from sagacity.errors import (
    ReplayMismatchError,
    SagaNotFoundError,
    SagaStateError,
    SerializationError,
)
from sagacity.integrations.mcp._wire import SAGA_ID_META
from sagacity.journal import sha256_hex
from sagacity.saga import Sagacity, SagaOutcome, SagaResult
from sagacity.tools import SagaTool, awaiting_approval_message

__all__ = [
    "OpenSagas",
    "ToolCall",
    "current_tool_call",
    "open_sagas",
    "read_history",
]

PROCESS_TOKEN = secrets.token_hex(4)
"""Put in every call id this process makes (`tool#3.5f0c9a2e`): two proxies or servers
serving one saga count from the same journal, and this keeps their ids apart."""


# -- one tools/call -----------------------------------------------------------------------


class ToolCall:
    """One `tools/call` inside a saga: picks its call id and notes an approval wait."""

    __slots__ = ("awaiting", "call_id", "claimed", "saga")

    def __init__(self, saga: _OpenSaga, call_id: str | None) -> None:
        self.saga = saga
        self.call_id = call_id
        """The id the client sent in `_meta["sagacity/call_id"]`, if any."""
        self.awaiting: ApprovalRequest | None = None
        """Set when the call waits for approval instead of running."""
        self.claimed: str | None = None
        """The call id this request runs under, held until the request returns."""

    def call_id_for(self, tool: SagaTool, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        """The call id this call is journaled under, held by this request until it returns.

        The client's `sagacity/call_id` when it sent one. Otherwise, for an IRREVERSIBLE
        tool with a request still waiting in this saga, that request's call: sending the
        approved input again runs it, other input is refused. Otherwise, for a tool whose
        call with the same input left through MCP's control flow (a URL elicitation),
        that call: sent again, it runs again under its id. Otherwise the next
        `tool#n.<process token>` of the saga, `n` counted from the journal.

        Raises:
            ReplayMismatchError: Another request of the saga is running under the id
                (journaled REFUSED; nothing runs).
        """
        saga = self.saga
        with saga.scope.lock:
            call_id = self.call_id or self._earlier_call(tool, args, kwargs)
            if call_id is None:
                call_id = saga.next_call_id(tool.name)
            saga.claim(call_id, tool, args, kwargs)
            self.claimed = call_id
            return call_id

    async def acall_id_for(
        self, tool: SagaTool, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> str:
        """`call_id_for` from async code: its reads and refusal run off the loop.

        It runs as an approval gate of the saga (`SagaScope.gate`): alone among the
        saga's loop-side work, in the order the requests came.
        """
        return await self.saga.scope.gate(lambda: self.call_id_for(tool, args, kwargs))

    def _earlier_call(
        self, tool: SagaTool, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> str | None:
        """The journaled call that a call without a client id continues, if any."""
        try:
            digest = sha256_hex(tool.input_of(args, kwargs))
        except (SerializationError, TypeError):
            return None  # the core refuses the call, and journals why
        waiting = (
            self.saga.waiting_call(tool.name, digest)
            if tool.reversibility is Reversibility.IRREVERSIBLE
            else None
        )
        return waiting or self.saga.left_call(tool.name, digest)

    def approval_needed(self, request: ApprovalRequest) -> str:
        """The `on_approval_needed` handler: note the request, answer the waiting text."""
        self.awaiting = request
        return awaiting_approval_message(request)


_tool_call: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar(
    "sagacity_mcp_tool_call", default=None
)


def current_tool_call() -> ToolCall | None:
    """The saga-bound `tools/call` running in this context, if any."""
    return _tool_call.get()


class _OpenSaga:
    """A saga with calls running in this process; dropped when the last one returns."""

    __slots__ = ("counters", "idle", "joined", "opening", "running", "running_ids", "scope")

    scope: SagaScope
    """The saga's scope, set once it is joined: every request of it runs in this one."""

    def __init__(self) -> None:
        self.joined: contextlib.AbstractContextManager[SagaScope] | None = None
        """The join of the saga (its lease), held while any request of it runs here."""
        self.opening = threading.Lock()
        """Held while the saga is joined or let go: one request does it, the others wait."""
        self.counters: dict[str, int] = {}
        self.running = 0
        self.running_ids: set[str] = set()
        """Call ids that a request of this saga is running under now."""
        self.idle: concurrent.futures.Future[None] | None = None
        """Set by an ending that waits for the running requests; settled once they left."""

    def claim(
        self, call_id: str, tool: SagaTool, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> None:
        """Hold `call_id` for one request, refusing a second request under it meanwhile.

        A client that sends two calls under one `sagacity/call_id` at once (two calls of
        a model turn given one id, or a retry while the first attempt still runs) would
        otherwise have them share a journal entry, an approval request or a replayed
        result. The second is refused before anything of it runs; once the first has
        returned, the id is the journal's: the same call again replays, another call is
        refused by the core.

        Raises:
            ReplayMismatchError: A request of this saga is running under `call_id`.
        """
        scope = self.scope
        with scope.lock:
            if call_id not in self.running_ids:
                self.running_ids.add(call_id)
                return
            try:
                digest: str | None = sha256_hex(tool.input_of(args, kwargs))
            except (SerializationError, TypeError):
                digest = None
            refusal = ReplayMismatchError(
                f"saga {scope.saga_id!r}: call id {call_id!r} is in use by another request of "
                f"the saga that is still running; this call of tool {tool.name!r} is not run. "
                "Give every call its own id, and send a call again only once it has answered"
            )
            scope.refuse(
                refusal,
                tool_name=tool.name,
                call_id=call_id,
                reason="duplicate_call_id",
                request_id=None,
                input_sha256=digest,
            )
            raise refusal

    def release(self, call_id: str) -> None:
        """Let `call_id` be used again: the request holding it has returned."""
        with self.scope.lock:
            self.running_ids.discard(call_id)

    def next_call_id(self, tool_name: str) -> str:
        """`tool#n.<process token>`, `n` one past every id of the tool in the journal or here.

        Counting from the journal keeps ids readable and ordered across requests and
        restarts; the process token keeps apart two processes that count to the same `n`
        (each reads the journal before the other has written its call).
        """
        pattern = re.compile(re.escape(tool_name) + r"#(\d+)(?:\.[0-9a-f]+)?")
        journaled = [
            int(match.group(1))
            for entry in self.scope.history.entries
            if entry.call_id and (match := pattern.fullmatch(entry.call_id))
        ]
        number = max([self.counters.get(tool_name, 0), *journaled]) + 1
        self.counters[tool_name] = number
        return f"{tool_name}#{number}.{PROCESS_TOKEN}"

    def left_call(self, tool_name: str, input_sha256: str) -> str | None:
        """The newest call of this tool and input whose latest attempt left as control flow."""
        for call in reversed(self.scope.history.latest_call.values()):
            if (
                call.intent.tool_name == tool_name
                and call.kind == CONTROL_FLOW
                and sha256_hex(payload_of(call.intent).get("input")) == input_sha256
                and call.intent.call_id is not None
            ):
                return call.intent.call_id
        return None

    def waiting_call(self, tool_name: str, input_sha256: str) -> str | None:
        """The call id of a stored approval request of this tool: same input first, then newest."""
        scope = self.scope
        if scope.history.sealed is not None:  # ended: the journal's request, run or not
            asked = [
                e.call_id
                for e in scope.history.asked.values()
                if e.tool_name == tool_name and payload_of(e).get("input_sha256") == input_sha256
            ]
            return asked[-1] if asked else None
        waiting = [r for r in scope.owner.pending(scope.saga_id) if r.tool_name == tool_name]
        if not waiting:
            return None
        same = [r for r in waiting if r.input_sha256 == input_sha256]
        return (same or waiting)[-1].call_id


class OpenSagas:
    """The sagas of one `Sagacity` that MCP calls are running in, in this process."""

    def __init__(self, sagacity: Sagacity) -> None:
        self.sagacity = sagacity
        self._lock = threading.Lock()
        self._open: dict[str, _OpenSaga] = {}
        self._ending: set[str] = set()

    @contextlib.asynccontextmanager
    async def tool_call(
        self, saga_id: str, call_id: str | None, *, lease_wait: float | None = None
    ) -> AsyncIterator[ToolCall]:
        """Run the body as one call of saga `saga_id`: its scope is open, its calls journal.

        Joining the saga (its lease, its journal) and letting it go run on worker threads
        the loop awaits, finished even if the task is cancelled meanwhile. A saga another
        process holds is waited for up to `lease_wait` seconds (by default the
        Sagacity's `lease_wait`).

        Raises:
            SagaStateError: The saga has ended, or is being ended.
        """
        saga = await self._enter(saga_id, lease_wait)
        call = ToolCall(saga, call_id)
        call_token = _tool_call.set(call)
        try:
            with saga.scope.entered():
                yield call
        finally:
            _tool_call.reset(call_token)
            await self._leave(saga_id, saga, call.claimed)

    async def _enter(self, saga_id: str, lease_wait: float | None = None) -> _OpenSaga:
        try:
            saga = await finished_off_loop(lambda: self._join(saga_id, lease_wait))
        except FinishedThenCancelled as cancelled:
            await self._leave(saga_id, cancelled.result)
            raise
        try:
            # Approvals, other servers' calls and an ending may have been journaled
            # elsewhere since the last call: the journal, not memory, says where it stands.
            await saga.scope.gate(lambda: self._read(saga_id, saga))
        except BaseException:
            await self._leave(saga_id, saga)
            raise
        return saga

    def _join(self, saga_id: str, lease_wait: float | None = None) -> _OpenSaga:
        """Count a request in the saga, joining it if no other request holds it here."""
        with self._lock:
            if saga_id in self._ending:
                raise SagaStateError(
                    f"saga {saga_id!r} is being ended; no call may join it. Start a new saga"
                )
            saga = self._open.get(saga_id)
            if saga is None:
                saga = self._open[saga_id] = _OpenSaga()
            saga.running += 1
        try:
            with saga.opening:
                if saga.joined is None:
                    joined: contextlib.AbstractContextManager[SagaScope]
                    joined = self.sagacity.join(saga_id, wait=lease_wait)
                    try:
                        saga.scope = joined.__enter__()
                    except SagaStateError as refused:
                        joined = self._replaying(saga_id, refused)
                        saga.scope = joined.__enter__()
                    saga.joined = joined
        except BaseException:
            self._let_go(saga_id, saga)
            raise
        return saga

    def _replaying(
        self, saga_id: str, refused: SagaStateError
    ) -> contextlib.AbstractContextManager[SagaScope]:
        """A scope of a saga that ended after it paused: it only replays, and takes no lease.

        A client that sends a paused call again after the call was run elsewhere (`sagacity
        resume`, the inbox, a worker) gets its journaled result; any other call is refused
        with what the journal says. Nothing is appended. Raises `refused`, the join's
        refusal, for a saga that did not end or never paused.
        """
        history = SagaHistory.of(saga_id, self.sagacity.history(saga_id))
        if not seal_for_replay(history):
            raise refused
        return contextlib.nullcontext(SagaScope(self.sagacity, saga_id, history))

    @staticmethod
    def _read(saga_id: str, saga: _OpenSaga) -> None:
        """Read the saga's journal again; refuse a saga that has ended, unless it replays."""
        saga.scope.refresh()
        ended = saga.scope.history.ended
        if ended is not None and not seal_for_replay(saga.scope.history):
            raise SagaStateError(
                f"saga {saga_id!r} ended {saga.scope.history.outcome} at seq {ended.seq}; "
                "a saga id is used once: start a new saga"
            )
        # A call that failed in an earlier request fails the saga: the core then
        # refuses IRREVERSIBLE calls in it, as it does once a call of `Sagacity.saga`
        # work has failed.
        if saga.scope.history.has_failed_call():
            saga.scope.failed = True

    async def _leave(self, saga_id: str, saga: _OpenSaga, claimed: str | None = None) -> None:
        """Count the request out on a worker thread, finished through any cancel."""
        await finished_off_loop(lambda: self._let_go(saga_id, saga, claimed))

    def _let_go(self, saga_id: str, saga: _OpenSaga, claimed: str | None = None) -> None:
        """Let go of the call id the request held; the last request lets the saga go."""
        if claimed is not None:
            saga.release(claimed)  # here, not on the loop: a gate may hold the scope's lock
        with self._lock:
            saga.running -= 1
            if saga.running:
                return
        with saga.opening:
            with self._lock:
                if saga.running:
                    return  # a request came meanwhile: it keeps the join
                joined, saga.joined = saga.joined, None
            if joined is not None:
                joined.__exit__(None, None, None)
        with self._lock:
            if saga.running:
                return
            if self._open.get(saga_id) is saga:
                del self._open[saga_id]
            idle, saga.idle = saga.idle, None
        if idle is not None:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                idle.set_result(None)  # unless the ending that waited was cancelled

    @contextlib.contextmanager
    def ending(self, saga_id: str) -> Iterator[None]:
        """Hold off calls and other endings of the saga while the body runs.

        Raises:
            MCPError: The saga is being ended or compensated already.
        """
        with self._lock:
            if saga_id in self._ending or saga_id in self._open:
                raise MCPError(
                    code=INVALID_PARAMS,
                    message=f"saga {saga_id!r} is being ended or has calls running; try again",
                )
            self._ending.add(saga_id)
        try:
            yield
        finally:
            with self._lock:
                self._ending.discard(saga_id)

    async def end(self, saga_id: str) -> SagaResult:
        """End the saga: see `end_saga`."""
        with self._lock:
            if saga_id in self._ending:
                raise SagaStateError(f"saga {saga_id!r} is being ended already")
            self._ending.add(saga_id)
            running = self._open.get(saga_id)
            idle = None
            if running is not None:
                idle = running.idle = concurrent.futures.Future()
        try:
            if idle is not None:
                await asyncio.wrap_future(idle)  # settled by the last request to leave
            return await self._end(saga_id)
        finally:
            with self._lock:
                self._ending.discard(saga_id)

    async def _end(self, saga_id: str) -> SagaResult:
        history = await read_history(self.sagacity, saga_id)
        if not history.entries:
            raise SagaNotFoundError(
                f"saga {saga_id!r} has no journal entries: no journaled call carried it in "
                f"_meta[{SAGA_ID_META!r}]"
            )
        if history.ended is not None:
            return SagaResult(saga_id=saga_id, outcome=SagaOutcome(history.outcome))
        # No call of the saga runs in this process now, so a call that may have had its
        # effect with no result known is in doubt: an INTENT without an outcome, an unknown
        # outcome, or a control-flow exit (a URL elicitation) that was not sent again. Like
        # a failure, it makes the saga compensate, and it is listed, never undone.
        if history.has_failed_call() or any(
            history.may_have_run(call) for call in history.calls.values()
        ):
            return await self.sagacity.acompensate(saga_id)
        pending = await asyncio.to_thread(self.sagacity.pending, saga_id)
        if pending:
            return SagaResult(
                saga_id=saga_id, outcome=SagaOutcome.AWAITING_APPROVAL, pending=pending
            )
        return await self.sagacity.asaga(saga_id, _nothing)


async def _nothing() -> None:
    """The work of a saga ended over MCP: its calls ran in earlier requests."""


async def read_history(sagacity: Sagacity, saga_id: str) -> SagaHistory:
    """The saga's history, its journal read without blocking the loop."""
    return SagaHistory.of(saga_id, await entries_async(sagacity.journal, saga_id))


_registry_lock = threading.Lock()
_registry: weakref.WeakKeyDictionary[Sagacity, OpenSagas] = weakref.WeakKeyDictionary()


def open_sagas(sagacity: Sagacity) -> OpenSagas:
    """The one `OpenSagas` of `sagacity` in this process, shared by its servers and proxies."""
    with _registry_lock:
        found = _registry.get(sagacity)
        if found is None:
            found = _registry[sagacity] = OpenSagas(sagacity)
        return found
