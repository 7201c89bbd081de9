"""`control_tools=True`: ending a saga and retrying its undos with a plain `tools/call`.

The proxy is `examples/mcp_proxy_stdio.py --control-tools` in its own process, in front
of `mcp-server-git` (installed from PyPI by the dev extra) or of an SDK-built upstream
whose tool takes a control tool's name; the client is the official MCP Python SDK over
stdio, sending only standard methods. `mcp_server` is driven in process.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import CallToolResult

from sagacity import ConfigurationError, Phase, Sagacity, compensable, verify
from sagacity.integrations.mcp import (
    COMPENSATE_TOOL,
    END_TOOL,
    SagaEnding,
    mcp_proxy,
    mcp_server,
    request_end_saga,
)
from sagacity.integrations.mcp._control import control_tools_listed
from tests.integrations.mcp._processes import ROOT, factory, server_params
from tests.integrations.mcp._shop import meta, text
from tests.integrations.mcp.test_end_and_retry import Lockers
from tests.integrations.mcp.test_third_party import (
    PROXY,
    git,
    git_upstream,
    proxy_params,
)

CONTROL = [COMPENSATE_TOOL, END_TOOL]
COLLIDING = [sys.executable, "-m", "tests.integrations.mcp._colliding_server"]


def ending(result: CallToolResult) -> dict[str, Any]:
    """The structured answer of a control tool, checked against its text twin."""
    assert not result.is_error, text(result)
    structured = result.structured_content
    assert structured is not None
    assert json.loads(text(result)) == structured
    assert SagaEnding.model_validate(structured).model_dump(mode="json") == structured
    return structured


def git_control_proxy(database: str, repo: Path) -> StdioServerParameters:
    return proxy_params(
        database,
        "--control-tools",
        "--compensate",
        "git_add=git_reset:repo_path",
        upstream=git_upstream(repo),
    )


class TestControlToolsThroughTheStdioProxy:
    async def test_a_failed_undo_is_retried_with_a_tool_call_once_the_cause_is_fixed(
        self, sqlite_url: str, repo: Path
    ) -> None:
        """A locked index fails `git_reset`; unlocked, `sagacity_compensate` resets it, once."""
        at = {"repo_path": str(repo)}
        async with Client(git_control_proxy(sqlite_url, repo)) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            await client.call_tool("git_add", {**at, "files": ["a.txt"]}, meta=meta("c1"))
            await client.call_tool("git_add", {**at, "files": ["missing.txt"]}, meta=meta("c1"))
            lock = repo / ".git" / "index.lock"
            lock.write_text("")  # another git process holds the index
            # `_meta` naming the saga must not make the control tool one of its calls.
            ended = ending(await client.call_tool(END_TOOL, {"saga_id": "c1"}, meta=meta("c1")))
            still_locked = ending(await client.call_tool(COMPENSATE_TOOL, {"saga_id": "c1"}))
            staged = git(repo, "diff", "--cached", "--name-only")
            lock.unlink()
            retried = ending(
                await client.call_tool(COMPENSATE_TOOL, {"saga_id": "c1"}, meta=meta("c1"))
            )
            again = ending(await client.call_tool(COMPENSATE_TOOL, {"saga_id": "c1"}))
            by_request = await request_end_saga(client, "c1")

        assert [name for name in listed if name in CONTROL] == CONTROL  # after the upstream's
        compensate, end = listed[COMPENSATE_TOOL], listed[END_TOOL]
        assert compensate.input_schema["required"] == ["saga_id"]
        assert compensate.output_schema is not None
        assert set(compensate.output_schema["properties"]) == {
            "saga_id", "outcome", "compensated", "compensation_failed", "in_doubt", "pending",
            "compensation_waiting", "waiting_tools",
        }  # fmt: skip
        assert compensate.annotations is not None
        assert end.annotations is not None
        assert (compensate.annotations.destructive_hint, end.annotations.destructive_hint) == (
            True,
            True,
        )
        assert compensate.annotations.read_only_hint is False
        assert compensate.annotations.idempotent_hint is True

        (failed_undo,) = ended["compensation_failed"]
        assert (ended["outcome"], ended["compensated"]) == ("COMPENSATION_FAILED", [])
        assert still_locked["outcome"] == "COMPENSATION_FAILED"
        assert staged == "a.txt\n"  # the undo has not run yet
        assert retried == {
            "saga_id": "c1",
            "outcome": "COMPENSATED",
            "compensated": [failed_undo],
            "compensation_failed": [],
            "in_doubt": [],
            "pending": [],
            "compensation_waiting": [],
            "waiting_tools": [],
        }
        assert again == retried
        assert by_request.model_dump(exclude={"meta"}) == retried  # the request's own lists
        assert git(repo, "diff", "--cached", "--name-only") == ""
        with Sagacity.from_url(sqlite_url) as journal:
            entries = journal.history("c1")
            assert {e.tool_name for e in entries} == {"git_add", None}  # no control tool journaled
            assert [e.phase for e in entries].count(Phase.COMPENSATED) == 1  # reset ran once
            assert verify(journal.journal, "c1").ok

    async def test_unknown_open_and_completed_sagas_are_refused_naming_the_saga(
        self, sqlite_url: str, repo: Path
    ) -> None:
        """Each refusal is an `isError` result with the request's text; nothing is undone."""
        at = {"repo_path": str(repo)}
        async with Client(git_control_proxy(sqlite_url, repo)) as client:
            unknown = await client.call_tool(COMPENSATE_TOOL, {"saga_id": "nope"})
            unknown_end = await client.call_tool(END_TOOL, {"saga_id": "nope"})
            await client.call_tool("git_add", {**at, "files": ["a.txt"]}, meta=meta("c2"))
            still_open = await client.call_tool(COMPENSATE_TOOL, {"saga_id": "c2"})
            completed = ending(await client.call_tool(END_TOOL, {"saga_id": "c2"}))
            nothing_to_undo = await client.call_tool(COMPENSATE_TOOL, {"saga_id": "c2"})
            wrong = await client.call_tool(COMPENSATE_TOOL, {"saga": "c2"})
            empty = await client.call_tool(END_TOOL, {"saga_id": ""})

        assert unknown.is_error
        assert text(unknown) == "tool 'sagacity_compensate': saga 'nope' has no journal entries"
        assert unknown_end.is_error
        assert "saga 'nope' has no journal entries" in text(unknown_end)
        assert still_open.is_error
        assert "saga 'c2' is still open; end it with sagacity/end first" in text(still_open)
        assert completed["outcome"] == "COMPLETED"
        assert nothing_to_undo.is_error
        assert "saga 'c2' ended COMPLETED: there is nothing to compensate" in text(nothing_to_undo)
        for bad in (wrong, empty):
            assert bad.is_error
            assert "arguments must be {'saga_id': <a non-empty string>}" in text(bad)
        assert git(repo, "diff", "--cached", "--name-only") == "a.txt\n"  # left as it was
        with Sagacity.from_url(sqlite_url) as journal:
            assert journal.history("nope") == []

    async def test_the_tools_are_absent_when_the_option_is_off(
        self, sqlite_url: str, repo: Path
    ) -> None:
        """Without `--control-tools` the listing is the upstream's alone, and a call is unknown."""
        params = proxy_params(sqlite_url, upstream=git_upstream(repo))
        async with Client(params) as client:
            listed = [tool.name for tool in (await client.list_tools()).tools]
            with pytest.raises(MCPError, match="Unknown tool: sagacity_compensate"):
                await client.call_tool(COMPENSATE_TOOL, {"saga_id": "x"})

        assert "git_status" in listed
        assert not set(listed) & set(CONTROL)

    def test_an_upstream_tool_with_a_control_name_is_refused_at_start(
        self, sqlite_url: str
    ) -> None:
        """The proxy lists the upstream before it serves, says which name collides, exits 1."""
        command = [sys.executable, str(PROXY), sqlite_url, "--control-tools", "--", *COLLIDING]
        finished = subprocess.run(
            [*command[:-1], COLLIDING[-1], "--at-start"],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )

        assert finished.returncode == 1
        assert finished.stderr.strip() == (
            "mcp_proxy_stdio.py: mcp_proxy: the upstream server has a tool named "
            "'sagacity_end', the name of a control tool that control_tools=True adds; a "
            "client could not tell them apart. Turn control_tools off, or rename the tool"
        )

    async def test_without_the_option_the_upstreams_own_tool_of_that_name_is_served(
        self, sqlite_url: str
    ) -> None:
        """Off, the name is the upstream's: listed and called as any upstream tool."""
        params = proxy_params(sqlite_url, upstream=[*COLLIDING, "--at-start"])
        async with Client(params) as client:
            listed = [tool.name for tool in (await client.list_tools()).tools]
            answered = await client.call_tool(END_TOOL, {"saga_id": "u"}, meta=meta("u"))

        assert listed == ["note", "rename", "sagacity_end"]
        assert text(answered) == "upstream ended u"
        with Sagacity.from_url(sqlite_url) as journal:
            assert [e.tool_name for e in journal.history("u")] == [
                "sagacity_end",
                "sagacity_end",
            ]  # journaled as the upstream's call, INTENT and EXECUTED


class TestACollisionListedLater:
    async def test_tools_list_and_the_call_are_refused_once_the_upstream_takes_the_name(
        self, tmp_path: Path
    ) -> None:
        """An upstream that adds `sagacity_end` and says so: listing and calling it refused."""
        sagacity = Sagacity.from_url("memory://")
        notices: list[str] = []

        async def handler(message: Any) -> None:
            notices.append(type(message).__name__)

        params = server_params(tmp_path / "pid", *COLLIDING)
        proxy = await mcp_proxy(sagacity, factory(params), control_tools=True)
        try:
            async with Client(proxy, mode="legacy", message_handler=handler) as client:
                before = [tool.name for tool in (await client.list_tools()).tools]
                await client.call_tool("rename", {}, meta=meta("r"))
                for _ in range(200):
                    if "ToolListChangedNotification" in notices:
                        break
                    await asyncio.sleep(0.02)
                with pytest.raises(MCPError, match="now lists a tool named 'sagacity_end'"):
                    await client.list_tools()
                refused = await client.call_tool(END_TOOL, {"saga_id": "r"})
        finally:
            await proxy.aclose()

        assert before == ["note", "rename", *CONTROL]
        assert refused.is_error
        assert "now lists a tool named 'sagacity_end'" in text(refused)
        assert [e.phase for e in sagacity.history("r")] == [Phase.INTENT, Phase.EXECUTED]


class TestControlToolsOnMcpServer:
    async def test_the_same_tools_are_listed_and_retry_a_failed_undo(self) -> None:
        """`mcp_server(control_tools=True)`: as the proxy lists them; the retry frees once."""
        sagacity = Sagacity.from_url("memory://")
        lockers = Lockers()
        async with Client(mcp_server(sagacity, lockers, control_tools=True)) as client:
            listed = (await client.list_tools()).tools
            await client.call_tool("book", {"locker": "L1"}, meta=meta("m"))
            await client.call_tool("jam", {"locker": "L2"}, meta=meta("m"))
            failed = ending(await client.call_tool(END_TOOL, {"saga_id": "m"}, meta=meta("m")))
            lockers.api_down = False
            retried = ending(
                await client.call_tool(COMPENSATE_TOOL, {"saga_id": "m"}, meta=meta("m"))
            )
            ghost = await client.call_tool(COMPENSATE_TOOL, {"saga_id": "ghost"})

        assert [tool for tool in listed if tool.name in CONTROL] == control_tools_listed()
        assert failed["outcome"] == "COMPENSATION_FAILED"
        assert (retried["outcome"], retried["compensated"]) == (
            "COMPENSATED",
            failed["compensation_failed"],
        )
        assert lockers.freed == ["booked-L1"]
        assert ghost.is_error
        assert text(ghost) == "tool 'sagacity_compensate': saga 'ghost' has no journal entries"
        assert {e.tool_name for e in sagacity.history("m")} == {"book", "jam", None}

    async def test_off_by_default(self) -> None:
        """Without the option the tool list is exactly the wrapped tools."""
        async with Client(mcp_server(Sagacity.from_url("memory://"), Lockers())) as client:
            listed = [tool.name for tool in (await client.list_tools()).tools]

        assert listed == ["book", "jam"]

    def test_a_wrapped_tool_with_a_control_name_is_refused(self) -> None:
        """A source tool named `sagacity_end` collides: a `ConfigurationError` naming it."""

        @compensable(name="sagacity_end", by=lambda: None)
        def close(order: str) -> str:
            return order

        with pytest.raises(ConfigurationError, match="'sagacity_end', the name of a control"):
            mcp_server(Sagacity.from_url("memory://"), close, control_tools=True)

    async def test_a_control_tool_is_answered_while_the_upstream_is_not_asked(
        self, tmp_path: Path
    ) -> None:
        """A control tool of the proxy needs no upstream tool: the listing is the proxy's."""
        sagacity = Sagacity.from_url("memory://")
        params = server_params(tmp_path / "pid", *COLLIDING)
        proxy = await mcp_proxy(sagacity, factory(params), control_tools=True)
        try:
            async with Client(proxy, mode="legacy") as client:
                await client.call_tool("note", {"text": "hi"}, meta=meta("n"))
                ended = ending(await client.call_tool(END_TOOL, {"saga_id": "n"}))
        finally:
            await proxy.aclose()

        assert ended["outcome"] == "COMPLETED"
        assert [e.phase for e in sagacity.history("n")][-1] is Phase.ENDED
