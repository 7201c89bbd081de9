r"""Put any MCP server that runs over stdio under sagas: a proxy an MCP host can launch.

    python examples/mcp_proxy_stdio.py sqlite:///sagacity.db \\
        --compensate git_add=git_reset:repo_path \\
        -- python -m mcp_server_git --repository ./repo

The host (Claude Desktop, the MCP Inspector, an agent using the MCP Python SDK) launches
this script instead of the server; the script launches the server and forwards every
tool call to it, journaled in the sagacity database under the saga each call names in
`_meta["sagacity/saga_id"]`. Resources, prompts and completions pass through unjournaled.
If the server's process dies, the proxy starts it again before the next call.

`--compensate TOOL=UNDO[:KEY,KEY...]` undoes calls of TOOL by calling UNDO with the
listed keys of the call's arguments (all of them when no key is listed);
`--irreversible TOOL` makes TOOL wait for approval whatever it declares;
`--read-only TOOL` runs TOOL with nothing to undo; `--is-error TOOL=fail|retry|result`
sets what an upstream `isError` result of TOOL does to the saga; `--control-tools` also
lists the tools `sagacity_compensate` and `sagacity_end`, so that a client that can call
only tools can retry a saga's failed undos and end a saga (any client of this proxy may
then end or compensate any saga of the database: turn it on for trusted clients only).
One saga may span several proxies (one per upstream server): a call waits for its saga
while another proxy's call holds it, `--lease-wait SECONDS` at most (30 by default; 0
answers at once that the saga is busy).
A configuration the proxy refuses is printed on stderr, and the script exits with 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Mapping
from typing import Any, cast

from mcp import Client, StdioServerParameters
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult

from sagacity import ConfigurationError, Sagacity
from sagacity.integrations.mcp import Compensate, IsErrorPolicy, mcp_proxy


def compensation(spec: str) -> tuple[str, Compensate]:
    """`TOOL=UNDO[:KEY,KEY...]` as the tool's name and its `Compensate`."""
    tool, _, undo = spec.partition("=")
    undo_tool, _, keys = undo.partition(":")
    if not tool or not undo_tool:
        raise argparse.ArgumentTypeError(f"--compensate {spec!r}: write TOOL=UNDO[:KEY,...]")
    if not keys:
        return tool, Compensate(tool=undo_tool)
    names = keys.split(",")

    def args(call_input: dict[str, Any], result: CallToolResult) -> Mapping[str, Any]:
        return {name: call_input[name] for name in names if name in call_input}

    return tool, Compensate(tool=undo_tool, args=args)


def policy(spec: str) -> tuple[str, IsErrorPolicy]:
    """`TOOL=fail|retry|result` as the tool's name and its `isError` policy."""
    tool, _, value = spec.partition("=")
    if not tool or value not in ("fail", "retry", "result"):
        raise argparse.ArgumentTypeError(f"--is-error {spec!r}: write TOOL=fail|retry|result")
    return tool, cast(IsErrorPolicy, value)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("database", help="the sagacity database URL (sqlite:///…, postgresql://…)")
    parser.add_argument("--compensate", type=compensation, action="append", default=[])
    parser.add_argument("--irreversible", action="append", default=[])
    parser.add_argument("--read-only", action="append", default=[])
    parser.add_argument("--is-error", type=policy, action="append", default=[])
    parser.add_argument("--name", default="sagacity-proxy", help="the proxy's name to clients")
    parser.add_argument(
        "--lease-wait",
        type=float,
        default=30.0,
        help="seconds a call waits for its saga while another proxy of the saga holds it "
        "(default 30; 0 answers at once that the saga is busy)",
    )
    parser.add_argument(
        "--control-tools",
        action="store_true",
        help="also list the tools sagacity_compensate and sagacity_end",
    )
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        parser.error("give the upstream server's command after --")
    split = argv.index("--")
    arguments = parser.parse_args(argv[:split])
    arguments.command = argv[split + 1 :]
    if not arguments.command:
        parser.error("give the upstream server's command after --")
    return arguments


def upstream_factory(command: list[str]) -> Callable[[], Client]:
    """A new client of the upstream server each time: the proxy reconnects with it."""
    return lambda: Client(StdioServerParameters(command=command[0], args=command[1:]))


async def serve(arguments: argparse.Namespace) -> None:
    sagacity = Sagacity.from_url(arguments.database)
    proxy = await mcp_proxy(
        sagacity,
        upstream_factory(arguments.command),
        dict(arguments.compensate),
        irreversible=arguments.irreversible,
        read_only=arguments.read_only,
        is_error=dict(arguments.is_error),
        name=arguments.name,
        control_tools=arguments.control_tools,
        lease_wait=arguments.lease_wait,
    )
    try:
        async with stdio_server() as (read, write):
            await proxy.run(read, write, proxy.create_initialization_options())
    finally:
        await proxy.aclose()


if __name__ == "__main__":
    try:
        asyncio.run(serve(parse()))
    except ConfigurationError as error:
        sys.exit(f"mcp_proxy_stdio.py: {error}")
