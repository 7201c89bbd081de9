"""An upstream MCP server, run as its own process, that asks its client for things.

`python -m tests.integrations.mcp._relay_server MARKER_DIR`: the SDK's own `MCPServer`
over stdio, with tools that report progress, log, sample, elicit, list roots, echo the
`_meta` they were sent, take their time (writing `cancelled` to the marker directory if
they are cancelled) and add a tool (announcing the change); and a resource template, a
prompt and completions, for the proxy to pass through.
"""

from __future__ import annotations

import asyncio
import sys
import warnings
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import Completion, SamplingMessage, TextContent
from pydantic import BaseModel

warnings.simplefilter("ignore")  # the SDK marks sampling, roots and logging deprecated

MARKER = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
server = MCPServer("relay-upstream", version="1.0")


@server.tool()
async def steps(count: int, ctx: Context) -> str:
    """Reports progress `count` times, then answers."""
    for step in range(1, count + 1):
        await ctx.report_progress(step, count, f"step {step}")
    return f"did {count} steps"


@server.tool()
async def shout(message: str, ctx: Context) -> str:
    """Logs `message` at warning level, then answers."""
    await ctx.warning(message, logger_name="relay")
    return "logged"


@server.tool()
async def ask_model(prompt: str, ctx: Context) -> str:
    """Asks the client's model to complete `prompt`."""
    reply = await ctx.request_context.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
        max_tokens=20,
    )
    content = reply.content
    return content.text if isinstance(content, TextContent) else repr(content)


class Answer(BaseModel):
    colour: str


@server.tool()
async def ask_user(question: str, ctx: Context) -> str:
    """Asks the client's user `question`."""
    answer = await ctx.elicit(question, Answer)
    return f"{answer.action}:{answer.data.colour if answer.data else ''}"


@server.tool()
async def roots(ctx: Context) -> list[str]:
    """The client's roots."""
    listed = await ctx.request_context.session.list_roots()
    return [str(root.uri) for root in listed.roots]


@server.tool()
async def echo_meta(ctx: Context) -> dict[str, Any]:
    """The `_meta` this call was sent with."""
    return dict(ctx.request_context.meta or {})


@server.tool()
async def slow(seconds: float) -> str:
    """Sleeps `seconds`; writes `cancelled` to the marker directory if cancelled."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        (MARKER / "cancelled").write_text("cancelled")
        raise
    return "slept"


@server.tool()
async def hold(name: str) -> str:
    """Writes `NAME.started` to the marker directory, then answers once `NAME.go` is there."""
    (MARKER / f"{name}.started").write_text("started")
    while not (MARKER / f"{name}.go").exists():
        await asyncio.sleep(0.01)
    return f"held {name}"


@server.tool()
def refuse(reason: str) -> str:
    """Raises with `reason`: an `isError` result."""
    raise ValueError(reason)


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds a tool `grown` and tells the client the tool list changed."""

    def grown() -> str:
        """A tool added while the server runs."""
        return "grown"

    server.add_tool(grown)
    await ctx.request_context.session.send_tool_list_changed()
    return "added"


@server.resource("note://{topic}")
def note(topic: str) -> str:
    """A note about `topic`."""
    return f"a note about {topic}"


@server.prompt()
def review(change: str) -> str:
    """Ask for a review of `change`."""
    return f"Please review: {change}"


@server.completion()
async def complete(ref: Any, argument: Any, context: Any) -> Completion:
    """Topics that start with what was typed."""
    return Completion(values=[t for t in ("billing", "shipping") if t.startswith(argument.value)])


if __name__ == "__main__":
    server.run("stdio")
