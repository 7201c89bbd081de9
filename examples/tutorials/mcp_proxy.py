"""Tutorial 4d: a real MCP server's tools under sagas, through sagacity's MCP proxy.

Run it with `python examples/tutorials/mcp_proxy.py` (needs `sagacity[mcp]` and the
`mcp-server-time` package, which the dev extra installs). The upstream is a real,
third-party MCP server started over stdio (`python -m mcp_server_time`); the proxy lists
exactly its tools, forwards every call, and journals each one under the saga the
request's `_meta` names. A scripted MCP client plays the model. With a real model, serve
`proxy` to your MCP host over stdio instead (see docs/integrations/mcp.md).

1. `get_current_time` is annotated `readOnlyHint: true`: journaled (what the agent read
   is evidence) and run straight through. The client ends the saga with a
   `sagacity/end` request.
2. `convert_time` is listed in `irreversible=[...]`: whatever its annotations say, it
   waits for a named human's approval; sent again after `Sagacity.approve`, it runs once.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile

from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from sagacity import Sagacity
from sagacity.integrations.mcp import mcp_proxy, request_end_saga, saga_meta

UPSTREAM = StdioServerParameters(
    command=sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"]
)


def text_of(result: CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))


async def main(url: str) -> None:
    sagacity = Sagacity.from_url(url)
    async with Client(UPSTREAM) as upstream:
        proxy = await mcp_proxy(sagacity, upstream, irreversible=["convert_time"])
        async with Client(proxy) as client:  # in memory here; a host would use stdio
            names = [tool.name for tool in (await client.list_tools()).tools]
            print(f"the proxy lists the upstream's tools: {names}")

            print("saga 'lookup-1':")
            berlin = await client.call_tool(
                "get_current_time", {"timezone": "Europe/Berlin"}, meta=saga_meta("lookup-1")
            )
            print(f"  get_current_time -> timezone {json.loads(text_of(berlin))['timezone']}")
            ended = await request_end_saga(client, "lookup-1")
            print(f"  ended: {ended.outcome}")

            print("saga 'convert-1':")
            question = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "UTC"}
            call = saga_meta("convert-1", "toolu_01")
            first = await client.call_tool("convert_time", question, meta=call)
            print(f"  convert_time -> {text_of(first)[:34]}...")
            (request,) = sagacity.pending("convert-1")
            print(f"  waiting: {request.tool_name} {request.input}")
            sagacity.approve(
                "convert-1", approver="alice@ops", expected_sha256=request.input_sha256
            )
            again = await client.call_tool("convert_time", question, meta=call)
            target = json.loads(text_of(again))["target"]
            print(f"  sent again after approval -> target {target['timezone']}")
            print(f"  ended: {(await request_end_saga(client, 'convert-1')).outcome}")

    for saga_id in ("lookup-1", "convert-1"):
        print(f"journal of {saga_id}:")
        for entry in sagacity.history(saga_id):
            print(f"  {entry.seq} {entry.phase.name:<17} {entry.tool_name or ''}".rstrip())
    sagacity.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(main(f"sqlite:///{folder}/sagacity.db"))
