"""The low-level MCP server of a proxy: lists, forwards, relays and passes through."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from mcp import Client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    REQUEST_TIMEOUT,
    CallToolRequestParams,
    CallToolResult,
    CompleteRequestParams,
    CompleteResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    GetPromptRequestParams,
    GetPromptResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    ServerCapabilities,
    Tool,
)

from sagacity.approval import ApprovalRequest
from sagacity.errors import SagacityError
from sagacity.integrations.mcp._control import (
    CONTROL_TOOLS,
    call_control_tool,
    control_tools_listed,
)
from sagacity.integrations.mcp._end import handle_compensate_request, handle_end_request
from sagacity.integrations.mcp._proxy_caps import (
    attach_client_side,
    declared_as_upstream,
    upstream_capabilities,
)
from sagacity.integrations.mcp._sagas import ToolCall, open_sagas
from sagacity.integrations.mcp._upstream import (
    Connection,
    Forwarding,
    UpstreamUnavailableError,
    downstream,
    forwarding,
    serving_connection,
    serving_session,
)
from sagacity.integrations.mcp._wire import (
    COMPENSATE_METHOD,
    END_METHOD,
    EXTENSION_ID,
    EndSagaParams,
    EndSagaResult,
    SagaOf,
    UpstreamToolError,
    awaiting_result,
    call_id_from_meta,
    error_result,
    without_identity,
)
from sagacity.saga import Sagacity
from sagacity.tools import SagaTool

if TYPE_CHECKING:
    from mcp.shared.dispatcher import ProgressFnT

    from sagacity.integrations.mcp._proxy_tools import ProxiedTools

__all__ = ["ProxyServer", "forwarded_meta"]

logger = logging.getLogger(__name__)

APPROVAL_ELICITATION_TIMEOUT = 600.0
"""Seconds the proxy waits for its client's user to answer the approval offer; then the
call answers the waiting result (the saga is not held meanwhile)."""

_PROTOCOL_PREFIX = "io.modelcontextprotocol/"
_LOG_LEVEL_META = "io.modelcontextprotocol/logLevel"


def forwarded_meta(meta: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The client's `_meta` as sent on to the upstream.

    Sagacity's own keys stay with the proxy (its saga is not the upstream's), the
    protocol's envelope keys are the upstream session's to stamp, and `progressToken` is
    replaced by the upstream session's own (progress is relayed back under the client's).
    The log-level opt-in is kept, so an upstream's log messages reach a client that
    asked for them.
    """
    if not meta:
        return None
    kept = {
        key: value
        for key, value in meta.items()
        if key not in ("progressToken", "progress_token")
        and not key.startswith("sagacity/")
        and (not key.startswith(_PROTOCOL_PREFIX) or key == _LOG_LEVEL_META)
    }
    return kept or None


class ProxyServer(Server[Any]):
    """The server `mcp_proxy` returns: a low-level MCP `Server` and its upstream connection.

    Serve it like any low-level server (`await proxy.run(read, write,
    proxy.create_initialization_options())`, or `mcp.Client(proxy)` in-process); close it
    with `await proxy.aclose()`, which closes an upstream client the proxy opened itself.
    """

    connection: Connection
    """The upstream connection its calls are forwarded through."""

    @classmethod
    def build(
        cls,
        name: str,
        sagacity: Sagacity,
        proxied: ProxiedTools,
        connection: Connection,
        saga_of: SagaOf,
        *,
        elicit_approval: bool = True,
        lease_wait: float | None = None,
    ) -> ProxyServer:
        """The proxy's server, with a handler for each upstream capability it passes on."""
        handler = _Handlers(sagacity, proxied, connection, saga_of, elicit_approval)
        handler.lease_wait = lease_wait
        capabilities = upstream_capabilities(connection)
        passed: dict[str, Any] = {}
        if capabilities.get("resources") is not None:
            passed.update(
                on_list_resources=handler.list_resources,
                on_list_resource_templates=handler.list_resource_templates,
                on_read_resource=handler.read_resource,
            )
        if capabilities.get("prompts") is not None:
            passed.update(on_list_prompts=handler.list_prompts, on_get_prompt=handler.get_prompt)
        if capabilities.get("completions") is not None:
            passed["on_completion"] = handler.complete
        server = cls(
            name,
            on_list_tools=handler.list_tools,
            on_call_tool=handler.call_tool,
            get_tool_input_schema=handler.input_schema,
            **passed,
        )
        server.connection = connection
        server.add_request_handler(END_METHOD, EndSagaParams, handler.end)
        server.add_request_handler(COMPENSATE_METHOD, EndSagaParams, handler.compensate)
        attach_client_side(server, connection, logging="logging" in capabilities)
        server.extensions[EXTENSION_ID] = {}
        return server

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> ServerCapabilities:
        """What it serves, and the list changes and logging it relays (see `_proxy_caps`)."""
        capabilities = super().get_capabilities(
            notification_options,
            experimental_capabilities,
            extensions,
            protocol_version=protocol_version,
        )
        return declared_as_upstream(capabilities, self.connection, protocol_version)

    async def aclose(self) -> None:
        """Close the upstream client this proxy opened (a `Client` you passed stays open)."""
        await self.connection.aclose()


class _Handlers:
    """The proxy's request handlers, over its tools and its upstream connection."""

    def __init__(
        self,
        sagacity: Sagacity,
        proxied: ProxiedTools,
        connection: Connection,
        saga_of: SagaOf,
        elicit_approval: bool,
    ) -> None:
        self.elicit_approval = elicit_approval
        self.sagacity = sagacity
        self.proxied = proxied
        self.connection = connection
        self.saga_of = saga_of
        self.sagas = open_sagas(sagacity)
        self.lease_wait: float | None = None  # for a saga another proxy holds

    def input_schema(self, tool: str) -> dict[str, Any] | None:
        for listed in self._listed():
            if listed.name == tool:
                return listed.input_schema
        return None

    async def _upstream(self, ctx: ServerRequestContext[Any, Any]) -> Client:
        """The open upstream client for a request, reconnecting first if it has gone.

        Raises:
            MCPError: The upstream is down and cannot be reached again.
        """
        self.connection.note_session(ctx.session)
        try:
            return await self.connection.ensure_open()
        except UpstreamUnavailableError as error:
            raise MCPError(code=INTERNAL_ERROR, message=str(error)) from None

    # -- tools ---------------------------------------------------------------------

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        """The upstream's tools as it lists them; an MCP error while it is down.

        With control tools, `sagacity_compensate` and `sagacity_end` follow; an upstream
        that has come to list a tool of either name since the proxy was built is
        refused with an MCP error naming it, rather than either tool being hidden.
        """
        await self._upstream(ctx)
        if self.proxied.collisions:
            raise MCPError(code=INTERNAL_ERROR, message=self._collision_message())
        return ListToolsResult(tools=self._listed())

    def _listed(self) -> list[Tool]:
        if not self.proxied.control_tools:
            return self.proxied.listed
        return [*self.proxied.listed, *control_tools_listed()]

    def _collision_message(self) -> str:
        names = ", ".join(map(repr, self.proxied.collisions))
        return (
            f"the upstream server now lists a tool named {names}, the name of a control tool "
            "the proxy adds (control_tools=True); a client could not tell them apart, so "
            "neither is listed or called. Rename the upstream tool, or turn control_tools off"
        )

    async def control_tool(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult:
        """A call of a control tool: the request's handler, outside any saga, unjournaled."""
        if self.proxied.collisions:
            return error_result(f"tool {params.name!r}: {self._collision_message()}")
        with self._serving(ctx):
            return await call_control_tool(self.sagacity, params.name, params.arguments)

    async def end(
        self, ctx: ServerRequestContext[Any, Any], params: EndSagaParams
    ) -> EndSagaResult:
        with self._serving(ctx):
            return await handle_end_request(self.sagacity, params)

    async def compensate(
        self, ctx: ServerRequestContext[Any, Any], params: EndSagaParams
    ) -> EndSagaResult:
        with self._serving(ctx):
            return await handle_compensate_request(self.sagacity, params)

    @contextlib.contextmanager
    def _serving(self, ctx: ServerRequestContext[Any, Any]) -> Iterator[None]:
        """Serve the body for this request's client.

        An undo the body runs may have its upstream elicit, sample or log: that reaches
        the client of this request, not the proxy's latest client.
        """
        self.connection.note_session(ctx.session)
        token = downstream(ctx.session)
        try:
            yield
        finally:
            serving_session.reset(token)

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult:
        if self.proxied.control_tools and params.name in CONTROL_TOOLS:
            return await self.control_tool(ctx, params)
        tool = self.proxied.wrapped.get(params.name)
        if tool is None or params.name not in {t.name for t in self.proxied.listed}:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        self.connection.note_session(ctx.session)
        try:
            # Before anything is journaled: a call to an upstream that has gone was never
            # sent, so it is refused here (or sent once the upstream is back), not left
            # in doubt.
            await self.connection.ensure_open()
        except UpstreamUnavailableError as error:
            return error_result(f"tool {params.name!r}: {error}")
        arguments = dict(params.arguments or {})
        try:
            saga_id = self.saga_of(ctx, params)
            call_id = call_id_from_meta(params)
        except ValueError as error:
            return error_result(f"tool {params.name!r}: {error}")
        serving = serving_connection.set(
            self.connection
        )  # forwarded through this proxy's connection
        session = downstream(ctx.session)
        extra = forwarding.set(Forwarding(forwarded_meta(_wire_meta(ctx)), _progress_relay(ctx)))
        try:
            if saga_id is None:
                return await self._run(ctx, tool, params.name, arguments, None)
            async with self.sagas.tool_call(saga_id, call_id, lease_wait=self.lease_wait) as call:
                result = await self._run(ctx, tool, params.name, arguments, call)
            # The user is asked with the saga let go: while they answer, an approver's
            # rejection (the approval page, the CLI) must be able to take its lease.
            request = call.awaiting
            if request is None or not await self._answered_accept(ctx, request):
                return result
            wait = self.lease_wait
            async with self.sagas.tool_call(saga_id, call.claimed, lease_wait=wait) as again:
                if not await _approved(again, request):
                    return result  # accepted, but no approver has approved: still waiting
                return await self._run(ctx, tool, params.name, arguments, again)
        except SagacityError as error:  # raised on entering: the saga has ended
            return error_result(f"tool {params.name!r}: {error}")
        finally:
            forwarding.reset(extra)
            serving_session.reset(session)
            serving_connection.reset(serving)

    async def _run(
        self,
        ctx: ServerRequestContext[Any, Any],
        tool: SagaTool,
        name: str,
        arguments: dict[str, Any],
        call: ToolCall | None,
    ) -> CallToolResult:
        try:
            if call is None:
                value = await tool.ainvoke((), arguments)
            else:
                call_id = await call.acall_id_for(tool, (), arguments)
                value = await tool.ainvoke(
                    (), arguments, call_id=call_id, on_approval_needed=call.approval_needed
                )
        except UpstreamToolError as error:
            return without_identity(error.result)
        except SagacityError as error:
            return error_result(f"tool {name!r}: {error}")
        except MCPError as error:
            if error.error.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                raise  # the upstream's own protocol error (a URL elicitation): passed on
            # Not the client's connection to the proxy: the upstream's, mid-call. Said
            # as a tool error, so the client does not take it for its own line dropping.
            return error_result(
                f"tool {name!r}: the upstream server did not answer ({error.error.message}); "
                "the call may have run there, so it is journaled in doubt and will not be "
                "undone automatically: resolve it with Sagacity.resolve before sending it again"
            )
        except Exception:
            # As MCPServer does: the exception stays in the server's log and the journal.
            logger.exception("Tool %r raised an unexpected exception", name)
            return error_result(f"Error executing tool {name}")
        if call is not None and call.awaiting is not None:
            schema = next((t.output_schema for t in self.proxied.listed if t.name == name), None)
            return awaiting_result(call.awaiting, None, schema)
        if isinstance(value, CallToolResult):
            return without_identity(value)
        # A call replayed from the journal returns its journaled result.
        return without_identity(CallToolResult.model_validate(value))

    async def _answered_accept(
        self, ctx: ServerRequestContext[Any, Any], request: ApprovalRequest
    ) -> bool:
        """Offer the client's user to wait for the approval; whether they accepted.

        Where the client can elicit a form, the user is told what waits and for whom, and
        asked to answer once an approver has decided. The answer decides nothing: only an
        APPROVED entry in the journal for exactly this request lets the call run, checked
        again by the core when it runs. Without elicitation (or if the client cannot be
        asked on this connection, or does not answer within
        `APPROVAL_ELICITATION_TIMEOUT`) the call answers the waiting result, as before.
        Called outside the saga's scope, so that the saga's lease is not held meanwhile.
        """
        if not self.elicit_approval or not _can_elicit(ctx):
            return False
        message = (
            f"{request.tool_name} waits for a named approver's approval in sagacity (saga "
            f"{request.saga_id!r}, request {request.request_id}, input sha256 "
            f"{request.input_sha256[:12]}). Answering here does not approve it. Once it has "
            "been approved, accept to run it now; decline to leave it waiting."
        )
        try:
            answer = await ctx.session.send_request(
                ElicitRequest(
                    params=ElicitRequestFormParams(
                        message=message, requested_schema={"type": "object", "properties": {}}
                    )
                ),
                ElicitResult,
                request_read_timeout_seconds=APPROVAL_ELICITATION_TIMEOUT,
            )
        except Exception:  # the client could not be asked on this connection, or timed out
            logger.debug("approval elicitation for %s not answered", request.request_id)
            return False
        return answer.action == "accept"

    # -- read-only pass-through: not journaled ----------------------------------------

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        client = await self._upstream(ctx)
        result = await client.list_resources(cursor=params.cursor if params else None)
        return without_identity(result)

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListResourceTemplatesResult:
        client = await self._upstream(ctx)
        result = await client.list_resource_templates(cursor=params.cursor if params else None)
        return without_identity(result)

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: ReadResourceRequestParams
    ) -> ReadResourceResult:
        client = await self._upstream(ctx)
        return without_identity(await client.read_resource(str(params.uri)))

    async def list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListPromptsResult:
        client = await self._upstream(ctx)
        return without_identity(await client.list_prompts(cursor=params.cursor if params else None))

    async def get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: GetPromptRequestParams
    ) -> GetPromptResult:
        client = await self._upstream(ctx)
        return without_identity(await client.get_prompt(params.name, params.arguments))

    async def complete(
        self, ctx: ServerRequestContext[Any, Any], params: CompleteRequestParams
    ) -> CompleteResult:
        client = await self._upstream(ctx)
        context = params.context.arguments if params.context is not None else None
        argument = {"name": params.argument.name, "value": params.argument.value}
        return without_identity(await client.complete(params.ref, argument, context))


async def _approved(call: ToolCall, request: ApprovalRequest) -> bool:
    """Whether the journal, read again on entering the saga, holds `request`'s approval.

    A saga that ended meanwhile answers from its journal: the call's result, or why it
    was not run (rejected).
    """
    scope = call.saga.scope
    await scope.settled()  # the history is read under the scope's lock
    with scope.lock:
        return bool(scope.history.approvals(request.seq)) or scope.history.sealed is not None


def _can_elicit(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def _wire_meta(ctx: ServerRequestContext[Any, Any]) -> Mapping[str, Any]:
    """The request's `_meta` as the client sent it (the parsed one renames its keys)."""
    raw = (ctx.params or {}).get("_meta")
    return raw if isinstance(raw, Mapping) else {}


def _progress_relay(ctx: ServerRequestContext[Any, Any]) -> ProgressFnT:
    """Relays the upstream's progress to the client, if it asked for progress.

    `report_progress` sends it under the client's own token (or, in process, calls the
    client's callback); it does nothing when the client asked for none.
    """
    session = ctx.session

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        await session.report_progress(progress, total, message)

    return relay
