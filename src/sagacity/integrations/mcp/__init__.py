"""MCP servers whose tool calls are journaled in sagas, and a proxy for any MCP server.

```python
from mcp import Client
from sagacity.integrations.mcp import end_saga, mcp_server, saga_meta

server = mcp_server(sagacity, OrderTools(), name="shop")        # an MCPServer
async with Client(server) as client:
    await client.call_tool("reserve_inventory", {"sku": "A-1", "qty": 2},
                           meta=saga_meta("order-123"))
result = await end_saga(sagacity, "order-123")                  # compensates if a call failed
```

A saga spans many `tools/call` requests: each names it in `_meta["sagacity/saga_id"]`
(and may name its call in `_meta["sagacity/call_id"]`), and it stays open until
`end_saga` or a `sagacity/end` request ends it (`sagacity/compensate` retries the failed
undos of an ended saga; `control_tools=True` also lists both as the tools `sagacity_end`
and `sagacity_compensate`, for clients that can call only tools). Tools are registered
as functions with their own signatures, below the place where MCP turns an exception
into a generic `is_error` result, so the journal sees the raw exception. `mcp_proxy` puts
an upstream server's tools under sagas, with compensations that call other upstream tools; given a
factory of clients it restarts a dead upstream before a call is journaled, and relays
progress, sampling, elicitation, roots, logs and list changes. MCP has
no native pause: an IRREVERSIBLE call answers the `[AWAITING_APPROVAL]` text, and once
`Sagacity.approve` has recorded a human's approval, sending the call again runs it once.
A `sagacity/call_id` names one call: another tool under it, or a second request under it
while the first still runs, is refused before it runs. See `docs/integrations/mcp.md`.
"""

from __future__ import annotations

try:
    import mcp.server.mcpserver as _mcpserver  # noqa: F401  (only checks the extra)
except ImportError as error:  # pragma: no cover - exercised with the extra missing
    raise ImportError(
        "sagacity.integrations.mcp needs the MCP Python SDK 2.x: pip install 'sagacity[mcp]'"
    ) from error

from sagacity.integrations.mcp._control import COMPENSATE_TOOL, END_TOOL, SagaEnding
from sagacity.integrations.mcp._end import end_saga
from sagacity.integrations.mcp._proxied import Compensate, Reconcile
from sagacity.integrations.mcp._proxy import mcp_proxy
from sagacity.integrations.mcp._proxy_server import ProxyServer
from sagacity.integrations.mcp._sagas import PROCESS_TOKEN
from sagacity.integrations.mcp._server import SagaExtension, mcp_server, tool_function
from sagacity.integrations.mcp._upstream import UpstreamFactory, UpstreamUnavailableError
from sagacity.integrations.mcp._wire import (
    APPROVAL_META,
    CALL_ID_META,
    COMPENSATE_METHOD,
    END_METHOD,
    EXTENSION_ID,
    SAGA_ID_META,
    CompensateSagaRequest,
    EndSagaParams,
    EndSagaRequest,
    EndSagaResult,
    IsErrorPolicy,
    SagaOf,
    UpstreamToolError,
    classify_mcp_error,
    request_compensate_saga,
    request_end_saga,
    saga_from_meta,
    saga_meta,
)

__all__ = [
    "APPROVAL_META",
    "CALL_ID_META",
    "COMPENSATE_METHOD",
    "COMPENSATE_TOOL",
    "END_METHOD",
    "END_TOOL",
    "EXTENSION_ID",
    "PROCESS_TOKEN",
    "SAGA_ID_META",
    "Compensate",
    "CompensateSagaRequest",
    "EndSagaParams",
    "EndSagaRequest",
    "EndSagaResult",
    "IsErrorPolicy",
    "ProxyServer",
    "Reconcile",
    "SagaEnding",
    "SagaExtension",
    "SagaOf",
    "UpstreamFactory",
    "UpstreamToolError",
    "UpstreamUnavailableError",
    "classify_mcp_error",
    "end_saga",
    "mcp_proxy",
    "mcp_server",
    "request_compensate_saga",
    "request_end_saga",
    "saga_from_meta",
    "saga_meta",
    "tool_function",
]
