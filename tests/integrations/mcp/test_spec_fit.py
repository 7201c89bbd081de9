"""The proxy as the MCP specification says, against real servers from npm.

`server-everything` declares list changes and logging and offers more tools to a client
that can sample, elicit and list roots; `server-filesystem` reads its client's roots to
narrow where it may write. The client is the official MCP Python SDK, in the handshake
era (`mode="legacy"`: the era of these servers and of stdio hosts), and the MCP
Inspector CLI for the stdio proxy.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import (
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsResult,
    LoggingMessageNotificationParams,
    Root,
    TextContent,
    ToolListChangedNotification,
)

from sagacity import Sagacity
from sagacity.integrations.mcp import mcp_proxy
from sagacity.integrations.mcp._proxy_server import ProxyServer
from tests.integrations.mcp._npm import npm_command
from tests.integrations.mcp._processes import ROOT
from tests.integrations.mcp._shop import meta, text

PROXY = ROOT / "examples" / "mcp_proxy_stdio.py"


def stdio(command: list[str]) -> Client:
    return Client(StdioServerParameters(command=command[0], args=command[1:]), mode="legacy")


@contextlib.asynccontextmanager
async def proxied(command: list[str], **options: Any) -> AsyncIterator[ProxyServer]:
    sagacity = Sagacity.from_url("memory://")
    proxy = await mcp_proxy(sagacity, lambda: stdio(command), **options)
    try:
        yield proxy
    finally:
        await proxy.aclose()
        sagacity.close()


async def sample(
    context: ClientRequestContext, params: CreateMessageRequestParams
) -> CreateMessageResult:
    return CreateMessageResult(
        role="assistant", content=TextContent(type="text", text="ok"), model="scripted"
    )


async def elicit(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="decline")


def roots_of(*paths: Path) -> Any:
    async def list_roots(context: ClientRequestContext) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=p.as_uri()) for p in paths])  # type: ignore[arg-type]

    return list_roots


class TestEverything:
    @pytest.fixture
    def everything(self) -> list[str]:
        return [*npm_command("mcp-server-everything"), "stdio"]

    async def test_the_proxy_declares_what_it_relays(self, everything: list[str]) -> None:
        """It declares listChanged as the upstream does, and logging, in the documented call too."""
        async with stdio(everything) as direct:
            upstream = direct.server_capabilities
        async with proxied(everything) as proxy, Client(proxy, mode="legacy") as client:
            declared = client.server_capabilities
            options = proxy.create_initialization_options().capabilities
            with pytest.warns(MCPDeprecationWarning):  # from 2026-07-28; this is 2025's era
                await client.set_logging_level("debug")  # was "Method not found"
        assert upstream.tools is not None
        assert upstream.logging is not None
        for capabilities in (declared, options):
            assert capabilities.tools is not None
            assert capabilities.tools.list_changed == bool(upstream.tools.list_changed)
            for kind in ("resources", "prompts"):
                theirs, ours = getattr(upstream, kind), getattr(capabilities, kind)
                assert ours is not None
                assert ours.list_changed == bool(theirs.list_changed)
            assert capabilities.logging is not None
        assert upstream.tools.list_changed  # the case that mattered: declared false before

    async def test_set_level_reaches_the_upstream(self, everything: list[str]) -> None:
        """After logging/setLevel, the upstream's log messages reach the client."""
        received: list[LoggingMessageNotificationParams] = []
        got = anyio.Event()

        async def on_log(params: LoggingMessageNotificationParams) -> None:
            received.append(params)
            got.set()

        async with (
            proxied(everything, read_only=["toggle-simulated-logging"]) as proxy,
            Client(proxy, mode="legacy", logging_callback=on_log) as client,
        ):
            with pytest.warns(MCPDeprecationWarning):
                await client.set_logging_level("debug")
            started = await client.call_tool("toggle-simulated-logging", {}, meta=meta("log-1"))
            assert not started.is_error, text(started)
            with anyio.fail_after(30):
                await got.wait()
        assert received
        assert received[0].level in (
            "debug",
            "info",
            "notice",
            "warning",
            "error",
            "critical",
            "alert",
            "emergency",
        )

    @pytest.mark.parametrize("capable", [False, True])
    async def test_the_client_sees_the_tools_it_would_see_directly(
        self, everything: list[str], capable: bool
    ) -> None:
        """Sampling, elicitation and roots are declared upstream only as the client does."""
        callbacks: dict[str, Any] = (
            {
                "sampling_callback": sample,
                "elicitation_callback": elicit,
                "list_roots_callback": roots_of(ROOT),
            }
            if capable
            else {}
        )
        async with Client(
            StdioServerParameters(command=everything[0], args=everything[1:]),
            mode="legacy",
            **callbacks,
        ) as direct:
            expected = sorted(t.name for t in (await direct.list_tools()).tools)
        async with (
            proxied(everything) as proxy,
            Client(proxy, mode="legacy", **callbacks) as client,
        ):
            listed = sorted(t.name for t in (await client.list_tools()).tools)
        assert listed == expected


class TestFilesystemRoots:
    async def test_a_write_outside_the_clients_root_fails(self, tmp_path: Path) -> None:
        """The client's narrower root reaches server-filesystem: a write outside it fails."""
        wide = tmp_path / "wide"
        narrow = wide / "narrow"
        narrow.mkdir(parents=True)
        command = [*npm_command("mcp-server-filesystem"), str(wide)]
        async with (
            # write_file as read-only: run without approval, its isError kept as its result
            proxied(command, read_only=["list_allowed_directories", "write_file"]) as proxy,
            Client(proxy, mode="legacy", list_roots_callback=roots_of(narrow)) as client,
        ):
            allowed = text(await client.call_tool("list_allowed_directories", {}))
            for _ in range(200):  # the server applies the roots it read after answering
                if (
                    str(wide.resolve()) + "\n" not in allowed + "\n"
                    and str(narrow.resolve()) in allowed
                ):
                    break
                await anyio.sleep(0.05)
                allowed = text(await client.call_tool("list_allowed_directories", {}))
            outside = await client.call_tool(
                "write_file", {"path": str(wide / "escape.txt"), "content": "x"}, meta=meta("fs-1")
            )
            inside = await client.call_tool(
                "write_file", {"path": str(narrow / "ok.txt"), "content": "y"}, meta=meta("fs-1")
            )
        assert str(narrow.resolve()) in allowed
        assert outside.is_error
        assert not (wide / "escape.txt").exists()
        assert not inside.is_error, text(inside)
        assert (narrow / "ok.txt").read_text() == "y"


class TestListChanges:
    async def test_a_burst_of_tool_list_changes_reaches_the_client_once(self) -> None:
        """Three tools/list_changed from the upstream in a row: the client is told once."""
        server: MCPServer[Any] = MCPServer("restless")

        async def restart(ctx: Context) -> str:
            """Say the tools changed, three times, as an upstream restarting does."""
            for _ in range(3):
                await ctx.request_context.session.send_tool_list_changed()
            return "restarted"

        server.add_tool(restart, annotations=None)
        told: list[object] = []

        async def on_message(message: object) -> None:
            if isinstance(message, ToolListChangedNotification):
                told.append(message)

        sagacity = Sagacity.from_url("memory://")
        proxy = await mcp_proxy(
            sagacity, lambda: Client(server, mode="legacy"), read_only=["restart"]
        )
        try:
            async with Client(proxy, mode="legacy", message_handler=on_message) as client:
                await client.call_tool("restart", {})
                await client.list_tools()  # waits for the proxy to have listed them again
                with anyio.move_on_after(0.5):  # no second notification arrives meanwhile
                    while len(told) < 2:
                        await anyio.sleep(0.01)
        finally:
            await proxy.aclose()
            sagacity.close()
        assert len(told) == 1


class TestInspectorCli:
    def test_the_stdio_proxy_answers_the_inspector(self, tmp_path: Path) -> None:
        """The MCP Inspector CLI lists the tools and sets the log level through the proxy."""
        inspector = npm_command("mcp-inspector")
        everything = [*npm_command("mcp-server-everything"), "stdio"]
        target = [sys.executable, str(PROXY), f"sqlite:///{tmp_path / 's.db'}", "--", *everything]

        def run(*method: str) -> dict[str, Any]:
            done = subprocess.run(
                [*inspector, "--cli", *method, "--", *target],
                capture_output=True,
                text=True,
                timeout=120,
                cwd=ROOT,
                check=False,
            )
            assert done.returncode == 0, done.stderr + done.stdout
            return dict(json.loads(done.stdout))

        listed = run("--method", "tools/list")
        assert "echo" in {tool["name"] for tool in listed["tools"]}
        assert run("--method", "logging/setLevel", "--log-level", "debug") == {}
