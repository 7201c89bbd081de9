"""What travels over MCP: the `_meta` keys, the `sagacity/end` request, tool results.

A saga reaches an MCP server as request metadata: each `tools/call` names its saga in
`_meta["sagacity/saga_id"]` and, optionally, its call in `_meta["sagacity/call_id"]`.
A call that waits for approval answers the `[AWAITING_APPROVAL]` text with
`_meta["sagacity/approval"]`; a `sagacity/end` request ends a saga, and a
`sagacity/compensate` request runs the compensations of an ended saga again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, cast

from mcp import Client
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp.types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    SERVER_INFO_META_KEY,
    CallToolRequestParams,
    CallToolResult,
    Request,
    RequestParams,
    RequestParamsMeta,
    Result,
    TextContent,
)
from pydantic import Field

from sagacity.approval import ApprovalRequest
from sagacity.saga import SagaResult
from sagacity.tools import FailureKind, awaiting_approval_message

__all__ = [
    "APPROVAL_META",
    "CALL_ID_META",
    "COMPENSATE_METHOD",
    "END_METHOD",
    "EXTENSION_ID",
    "SAGA_ID_META",
    "CompensateSagaRequest",
    "EndSagaParams",
    "EndSagaRequest",
    "EndSagaResult",
    "IsErrorPolicy",
    "SagaOf",
    "UpstreamToolError",
    "awaiting_result",
    "call_id_from_meta",
    "classify_mcp_error",
    "error_result",
    "request_compensate_saga",
    "request_end_saga",
    "saga_from_meta",
    "saga_meta",
    "without_identity",
]

SAGA_ID_META = "sagacity/saga_id"
"""The `_meta` key of a `tools/call` that names the saga the call belongs to."""
CALL_ID_META = "sagacity/call_id"
"""The `_meta` key of a `tools/call` that names the call (a stable idempotency key)."""
APPROVAL_META = "sagacity/approval"
"""The `_meta` key of a result whose call waits for approval: `ApprovalRequest.to_json()`."""
END_METHOD = "sagacity/end"
"""The request method that ends a saga: params `{"sagaId": ...}`."""
COMPENSATE_METHOD = "sagacity/compensate"
"""The request method that runs an ended saga's compensations again: params `{"sagaId": ...}`."""
EXTENSION_ID = "sagacity/saga"
"""The extension identifier servers advertise under `capabilities.extensions`."""

IsErrorPolicy = Literal["fail", "retry", "result"]
"""What an upstream `isError` result does to the saga.

- `"fail"`: journaled FAILED; the saga fails and is compensated when it ends.
- `"retry"`: journaled FAILED `retryable`; the saga goes on while the model corrects its
  arguments, and fails (the call in doubt) if no later call of the tool succeeds.
- `"result"`: journaled EXECUTED with the error result, a known outcome; the saga goes on.
"""

SagaOf = Callable[[ServerRequestContext[Any, Any], CallToolRequestParams], str | None]
"""Returns the saga a `tools/call` belongs to, or None to run it outside any saga."""


def saga_meta(saga_id: str, call_id: str | None = None) -> RequestParamsMeta:
    """The `_meta` of a `tools/call` that joins saga `saga_id`, as call `call_id` if given.

    `await client.call_tool("charge_card", {...}, meta=saga_meta("order-123", "toolu_01"))`
    """
    meta: dict[str, Any] = {SAGA_ID_META: saga_id}
    if call_id is not None:
        meta[CALL_ID_META] = call_id
    return cast(RequestParamsMeta, meta)


def saga_from_meta(
    ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
) -> str | None:
    """Read the saga id from the request's `_meta["sagacity/saga_id"]` (the default).

    Raises:
        ValueError: The key is present but not a non-empty string.
    """
    return _meta_string(params.meta, SAGA_ID_META)


def call_id_from_meta(params: CallToolRequestParams) -> str | None:
    """Read the call id from `_meta["sagacity/call_id"]`, if the client sent one."""
    return _meta_string(params.meta, CALL_ID_META)


def _meta_string(meta: Mapping[str, Any] | None, key: str) -> str | None:
    if not meta or key not in meta:
        return None
    value = meta[key]
    if not isinstance(value, str) or not value:
        raise ValueError(f"request _meta[{key!r}] must be a non-empty string, not {value!r}")
    return value


class UpstreamToolError(Exception):
    """The upstream tool answered `is_error=True`: journaled as FAILED."""

    def __init__(self, tool_name: str, result: CallToolResult, *, retryable: bool = False) -> None:
        text = " ".join(c.text for c in result.content if isinstance(c, TextContent))
        super().__init__(f"upstream tool {tool_name!r} returned an error: {text}")
        self.tool_name = tool_name
        """The upstream tool."""
        self.result = result
        """Its error result, handed to the proxy's client unchanged."""
        self.retryable = retryable
        """Whether the tool's `is_error` policy is `"retry"`: the saga goes on."""


def classify_mcp_error(error: BaseException) -> FailureKind | None:
    """Journal MCP's own exceptions by what they mean.

    A URL elicitation request is MCP control flow (the client completes it and calls
    again); a request that timed out or whose connection closed may have run upstream,
    so its outcome is unknown; an upstream error result under the `"retry"` policy is
    retryable.
    """
    if isinstance(error, UpstreamToolError) and error.retryable:
        return FailureKind.RETRYABLE
    if isinstance(error, UrlElicitationRequiredError):
        return FailureKind.CONTROL_FLOW
    if isinstance(error, MCPError) and error.code in (REQUEST_TIMEOUT, CONNECTION_CLOSED):
        return FailureKind.OUTCOME_UNKNOWN
    return None


class EndSagaParams(RequestParams):
    """Params of a `sagacity/end` request."""

    saga_id: str
    """The saga to end (`sagaId` on the wire)."""


class EndSagaRequest(Request[EndSagaParams, Literal["sagacity/end"]]):
    """A `sagacity/end` request: end a saga that spans many tool calls."""

    method: Literal["sagacity/end"] = "sagacity/end"
    params: EndSagaParams


class EndSagaResult(Result):
    """How a saga ended, as answered to a `sagacity/end` request."""

    saga_id: str
    """The saga."""
    outcome: str
    """A `SagaOutcome` value: COMPLETED, COMPENSATED, COMPENSATION_FAILED, NEEDS_ATTENTION
    (compensated, with calls in doubt) or AWAITING_APPROVAL."""
    compensated: list[str] = Field(default_factory=list)
    """Call ids whose compensation ran, in the order they ran."""
    compensation_failed: list[str] = Field(default_factory=list)
    """Call ids whose compensation raised: still dirty."""
    in_doubt: list[str] = Field(default_factory=list)
    """Call ids whose outcome is unknown: never compensated, for a human to resolve."""
    pending: list[str] = Field(default_factory=list)
    """Approval request ids the saga still waits on (outcome AWAITING_APPROVAL)."""
    compensation_waiting: list[str] = Field(default_factory=list)
    """Call ids whose undo this server does not have (outcome NEEDS_ATTENTION): a
    `sagacity/compensate` sent to the server of their tools runs it, and the rest."""
    waiting_tools: list[str] = Field(default_factory=list)
    """The tools of `compensation_waiting`, in the same order: whose server runs the rest."""

    @classmethod
    def of(cls, result: SagaResult, ended: Mapping[str, Any] | None = None) -> EndSagaResult:
        """Describe a `SagaResult` for the wire.

        `ended` is the payload of the saga's ENDED entry: when given, its lists are the
        answer, so a request sent again for an ended saga answers what the journal holds.
        """
        report = result.compensation
        if ended is not None:
            return cls(
                saga_id=result.saga_id,
                outcome=str(ended.get("outcome", result.outcome.value)),
                compensated=_ids(ended.get("compensated")),
                compensation_failed=_ids(ended.get("compensation_failed")),
                in_doubt=_ids(ended.get("in_doubt")),
                pending=[request.request_id for request in result.pending],
                compensation_waiting=_ids(ended.get("compensation_waiting")),
                waiting_tools=[ref.tool_name for ref in report.waiting] if report else [],
            )
        return cls(
            saga_id=result.saga_id,
            outcome=result.outcome.value,
            compensated=[ref.call_id for ref in report.compensated] if report else [],
            compensation_failed=[ref.call_id for ref in report.failed] if report else [],
            in_doubt=[ref.call_id for ref in report.in_doubt] if report else [],
            pending=[request.request_id for request in result.pending],
            compensation_waiting=[ref.call_id for ref in report.waiting] if report else [],
            waiting_tools=[ref.tool_name for ref in report.waiting] if report else [],
        )


def _ids(value: Any) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


class CompensateSagaRequest(Request[EndSagaParams, Literal["sagacity/compensate"]]):
    """A `sagacity/compensate` request: run an ended saga's compensations again."""

    method: Literal["sagacity/compensate"] = "sagacity/compensate"
    params: EndSagaParams


async def request_compensate_saga(client: Client, saga_id: str) -> EndSagaResult:
    """Ask a sagacity MCP server or proxy to retry the failed compensations of a saga.

    The client side of `sagacity/compensate`: for a saga that ended COMPENSATION_FAILED
    (or NEEDS_ATTENTION, once its calls in doubt are resolved), the walk runs again and
    never repeats an undo already journaled COMPENSATED.

    Raises:
        MCPError: The server refused (no such saga, it is still open, or it completed).
    """
    request = CompensateSagaRequest(params=EndSagaParams(saga_id=saga_id))
    return await client.session.send_request(request, EndSagaResult)


async def request_end_saga(client: Client, saga_id: str) -> EndSagaResult:
    """Ask a sagacity MCP server or proxy to end a saga: the client side of `sagacity/end`.

    Raises:
        MCPError: The server refused (no such saga, or it is being ended already).
    """
    request = EndSagaRequest(params=EndSagaParams(saga_id=saga_id))
    return await client.session.send_request(request, EndSagaResult)


ResultT = TypeVar("ResultT", bound=Result)


def without_identity(result: ResultT) -> ResultT:
    """`result` without the upstream's `serverInfo` stamp: the proxy answers as itself.

    The SDK stamps a result's `_meta` with the server's identity unless the handler set
    one; an upstream's result passed on unchanged would carry the upstream's.
    """
    meta = result.meta
    if not meta or SERVER_INFO_META_KEY not in meta:
        return result
    rest = {key: value for key, value in meta.items() if key != SERVER_INFO_META_KEY}
    return result.model_copy(update={"meta": rest or None})


def error_result(message: str) -> CallToolResult:
    """An `is_error` tool result carrying `message` (a refusal: nothing ran)."""
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def awaiting_result(
    request: ApprovalRequest,
    produced: CallToolResult | None,
    output_schema: Mapping[str, Any] | None = None,
) -> CallToolResult:
    """The result of a call that waits for approval: the `[AWAITING_APPROVAL]` text.

    Nothing failed and nothing ran, so it is a normal result, whose structured content is
    the text too when the tool's output schema holds a string (`{"result": text}` for
    the schema MCP derives from `-> str`). A tool whose output schema cannot hold the
    text gets it as an `is_error` result instead: clients check a normal result against
    the output schema, and would reject it. Either way `_meta["sagacity/approval"]` holds
    the request (`ApprovalRequest.to_json()`: its id, call id, tool, input and hash), so
    a host can show it to a human and knows which call to send again once approved.

    Args:
        request: The approval request the call waits on.
        produced: What MCP made of the text returned in the tool's place, if it did.
        output_schema: The tool's output schema, when nothing was produced.
    """
    approval = request.to_json()
    if produced is not None and not produced.is_error:
        meta = {**(produced.meta or {}), APPROVAL_META: approval}
        return produced.model_copy(update={"meta": meta})
    text = awaiting_approval_message(request)
    result: dict[str, Any] = {
        "content": [{"type": "text", "text": text}],
        "_meta": {APPROVAL_META: approval},
    }
    structured = None if produced is not None else _text_as_structured(text, output_schema)
    if structured is not None:
        result["structuredContent"] = structured
    elif produced is not None or output_schema:
        result["isError"] = True
    return CallToolResult.model_validate(result)


def _text_as_structured(text: str, schema: Mapping[str, Any] | None) -> Any:
    """`text` shaped to fit `schema`, when a string fits it; else None."""
    if not schema:
        return None
    if schema.get("type") == "string":
        return text
    properties = schema.get("properties")
    if schema.get("type") == "object" and isinstance(properties, Mapping):
        result = properties.get("result")
        if (
            isinstance(result, Mapping)
            and result.get("type", "string") == "string"
            and set(schema.get("required", ())) <= {"result"}
        ):
            return {"result": text}
    return None
