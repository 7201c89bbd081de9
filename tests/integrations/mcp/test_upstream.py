"""The proxy's upstream as a real process: relays, progress, cancellation, death and return.

The upstream is the SDK's own `MCPServer` (`_relay_server.py`) run over stdio in a child
process, reached through a factory so the proxy owns, watches and reopens the connection;
the proxy's client is the official SDK `Client`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError, StdioServerParameters, types
from mcp.types import SERVER_INFO_META_KEY

from sagacity import ConfigurationError, Phase, Sagacity, SagaOutcome, verify
from sagacity.integrations.mcp import (
    PROCESS_TOKEN,
    Compensate,
    ProxyServer,
    mcp_proxy,
    request_end_saga,
)
from tests.integrations.mcp._processes import factory, kill, pid_of, relay_server
from tests.integrations.mcp._shop import meta, phases, text

TOOLS = [
    "steps", "shout", "ask_model", "ask_user", "roots", "echo_meta", "slow", "hold", "refuse",
    "grow",
]  # fmt: skip


@contextlib.asynccontextmanager
async def proxied(
    tmp_path: Path, sagacity: Sagacity, *, mode: str = "legacy", **options: Any
) -> AsyncIterator[ProxyServer]:
    """A proxy over the relay server, its pid in `tmp_path / "pid"`; closed afterwards."""
    params = relay_server(tmp_path / "pid", tmp_path)
    options.setdefault("read_only", TOOLS)
    proxy = await mcp_proxy(sagacity, factory(params, mode=mode), **options)
    try:
        yield proxy
    finally:
        await proxy.aclose()


async def gone(proxy: ProxyServer) -> None:
    """Wait until the proxy has seen its upstream's line close."""
    for _ in range(200):
        if not proxy.connection.is_open:
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the proxy did not notice its upstream die")


class TestProgressAndMeta:
    @pytest.mark.parametrize("mode", ["legacy", "auto"])
    async def test_progress_reaches_the_client_in_and_out_of_sagas(
        self, tmp_path: Path, mode: str
    ) -> None:
        """The upstream's progress notifications reach the client, with their values."""
        sagacity = Sagacity.from_url("memory://")
        seen: list[tuple[float, float | None, str | None]] = []

        async def progress(value: float, total: float | None, message: str | None) -> None:
            seen.append((value, total, message))

        async with (
            proxied(tmp_path, sagacity, mode=mode) as proxy,
            Client(proxy, mode=mode) as client,
        ):
            inside = await client.call_tool(
                "steps", {"count": 2}, progress_callback=progress, meta=meta("p")
            )
            outside = await client.call_tool("steps", {"count": 1}, progress_callback=progress)

        assert (text(inside), text(outside)) == ("did 2 steps", "did 1 steps")
        assert seen == [(1, 2, "step 1"), (2, 2, "step 2"), (1, 1, "step 1")]
        assert phases(sagacity.history("p")) == [
            ("INTENT", "steps", f"steps#1.{PROCESS_TOKEN}"),
            ("EXECUTED", "steps", f"steps#1.{PROCESS_TOKEN}"),
        ]

    async def test_client_meta_reaches_the_upstream_without_sagacity_keys(
        self, tmp_path: Path
    ) -> None:
        """A client's own `_meta` is forwarded; sagacity's keys and the journal input stay home."""
        sagacity = Sagacity.from_url("memory://")
        async with proxied(tmp_path, sagacity) as proxy, Client(proxy, mode="legacy") as client:
            sent = {
                **meta("m", "call-1"),
                "traceparent": "00-ab-cd-01",
                "sagacity/approved": True,  # means nothing here, and is not sent on
                "io.modelcontextprotocol/clientInfo": {"name": "forged"},  # the leg's own
            }
            result = await client.call_tool("echo_meta", {}, meta=sent)  # type: ignore[arg-type]

        echoed = json.loads(text(result))
        # The upstream leg has a progress token of its own (progress is relayed per leg).
        assert isinstance(echoed.pop("progress_token"), int)
        assert echoed == {"traceparent": "00-ab-cd-01"}
        (intent,) = [e for e in sagacity.history("m") if e.phase is Phase.INTENT]
        assert intent.payload["input"] == {}  # the _meta is not part of the call's input


class TestRelays:
    async def test_sampling_elicitation_and_roots_reach_the_proxys_client(
        self, tmp_path: Path
    ) -> None:
        """What the upstream asks of its client, the proxy asks of its own, and answers back."""
        sagacity = Sagacity.from_url("memory://")
        asked: list[str] = []

        async def sampling(
            context: Any, params: types.CreateMessageRequestParams
        ) -> types.CreateMessageResult:
            content = params.messages[0].content
            asked.append(f"sample:{content.text if isinstance(content, types.TextContent) else ''}")
            return types.CreateMessageResult(
                role="assistant",
                content=types.TextContent(type="text", text="a haiku"),
                model="scripted",
            )

        async def elicitation(
            context: Any, params: types.ElicitRequestParams
        ) -> types.ElicitResult:
            asked.append(f"elicit:{params.message}")
            return types.ElicitResult(action="accept", content={"colour": "teal"})

        async def roots(context: Any) -> types.ListRootsResult:
            asked.append("roots")
            return types.ListRootsResult(roots=[types.Root(uri="file:///srv/project")])

        async with (
            proxied(tmp_path, sagacity) as proxy,
            Client(
                proxy,
                mode="legacy",
                sampling_callback=sampling,
                elicitation_callback=elicitation,
                list_roots_callback=roots,
            ) as client,
        ):
            sampled = await client.call_tool("ask_model", {"prompt": "write"}, meta=meta("r"))
            elicited = await client.call_tool("ask_user", {"question": "colour?"}, meta=meta("r"))
            rooted = await client.call_tool("roots", {}, meta=meta("r"))

        assert (text(sampled), text(elicited)) == ("a haiku", "accept:teal")
        assert rooted.structured_content == {"result": ["file:///srv/project"]}
        assert asked == ["sample:write", "elicit:colour?", "roots"]

    async def test_a_client_without_sampling_gets_a_clear_upstream_error(
        self, tmp_path: Path
    ) -> None:
        """The client's refusal reaches the upstream, whose error reaches the client, journaled."""
        sagacity = Sagacity.from_url("memory://")
        async with proxied(tmp_path, sagacity) as proxy, Client(proxy, mode="legacy") as client:
            with pytest.raises(MCPError, match="Sampling not supported"):
                await client.call_tool("ask_model", {"prompt": "x"}, meta=meta("n"))

        intent, failed = sagacity.history("n")
        assert (intent.phase, failed.phase, failed.payload["kind"]) == (
            Phase.INTENT,
            Phase.FAILED,
            "failure",
        )

    async def test_logs_and_tool_list_changes_are_relayed(self, tmp_path: Path) -> None:
        """Log messages and `tools/list_changed` reach the client; the new tool is journaled."""
        sagacity = Sagacity.from_url("memory://")
        logs: list[Any] = []
        notices: list[str] = []

        async def logging_callback(params: types.LoggingMessageNotificationParams) -> None:
            logs.append((params.level, params.data))

        async def handler(message: Any) -> None:
            notices.append(type(message).__name__)

        async with (
            proxied(tmp_path, sagacity) as proxy,
            Client(
                proxy, mode="legacy", logging_callback=logging_callback, message_handler=handler
            ) as client,
        ):
            await client.call_tool("shout", {"message": "disk almost full"}, meta=meta("l"))
            await client.call_tool("grow", {}, meta=meta("l"))
            for _ in range(100):
                if "ToolListChangedNotification" in notices:
                    break
                await asyncio.sleep(0.02)
            listed = [tool.name for tool in (await client.list_tools()).tools]
            grown = await client.call_tool("grown", {}, meta=meta("l"))

        assert logs == [("warning", "disk almost full")]
        assert "ToolListChangedNotification" in notices
        assert listed == [*TOOLS, "grown"]
        # A tool that claims nothing is IRREVERSIBLE: it waits, and the upstream is not called.
        assert text(grown).startswith("[AWAITING_APPROVAL] grown was not run")


class TestUndoRelays:
    async def test_an_undo_run_by_end_asks_the_client_that_ended_the_saga(
        self, tmp_path: Path
    ) -> None:
        """An undo run by `sagacity/end` elicits the client that sent the request.

        Another client of the proxy spoke last; the upstream's elicitation during the undo
        still reaches the client whose request runs it, not the latest one.
        """
        sagacity = Sagacity.from_url("memory://")
        asked: list[str] = []

        def answering(who: str) -> Any:
            async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
                asked.append(f"{who}:{params.message}")
                return types.ElicitResult(action="accept", content={"colour": "teal"})

            return elicit

        undo = Compensate(tool="ask_user", args=lambda input, result: {"question": "undo?"})
        async with (
            proxied(
                tmp_path,
                sagacity,
                read_only=[t for t in TOOLS if t not in ("steps", "ask_user")],
                compensations={"steps": undo},
            ) as proxy,
            Client(proxy, mode="legacy", elicitation_callback=answering("ender")) as ender,
            Client(proxy, mode="legacy", elicitation_callback=answering("other")) as other,
        ):
            await ender.call_tool("steps", {"count": 1}, meta=meta("u"))
            with pytest.raises(MCPError, match="Sampling not supported"):
                await ender.call_tool("ask_model", {"prompt": "x"}, meta=meta("u"))
            await other.list_tools()  # the other client is now the proxy's latest
            ending = await request_end_saga(ender, "u")

        assert ending.outcome == "COMPENSATED"
        assert asked == ["ender:undo?"]


class TestPassThrough:
    @pytest.mark.parametrize("mode", ["legacy", "auto"])
    async def test_resources_prompts_and_completions_pass_through_unjournaled(
        self, tmp_path: Path, mode: str
    ) -> None:
        """Read-only requests reach the upstream and answer as it does; nothing is journaled."""
        sagacity = Sagacity.from_url("memory://")
        async with (
            proxied(tmp_path, sagacity, mode=mode) as proxy,
            Client(proxy, mode=mode) as client,
        ):
            templates = await client.list_resource_templates()
            read = await client.read_resource("note://billing")
            prompt = await client.get_prompt("review", {"change": "PR 7"})
            completed = await client.complete(
                types.ResourceTemplateReference(type="ref/resource", uri="note://{topic}"),
                {"name": "topic", "value": "bi"},
            )

        assert [t.uri_template for t in templates.resource_templates] == ["note://{topic}"]
        (contents,) = read.contents
        assert isinstance(contents, types.TextResourceContents)
        assert contents.text == "a note about billing"
        message = prompt.messages[0].content
        assert isinstance(message, types.TextContent)
        assert message.text == "Please review: PR 7"
        assert completed.completion.values == ["billing"]
        assert sagacity.journal.list_sagas() == []


class TestIdentity:
    async def test_results_carry_the_proxys_identity(self, tmp_path: Path) -> None:
        """A 2026-07-28 result is stamped with the proxy's `serverInfo`, not the upstream's."""
        sagacity = Sagacity.from_url("memory://")
        async with (
            proxied(tmp_path, sagacity, mode="auto", name="shop-proxy") as proxy,
            Client(proxy) as client,
        ):
            result = await client.call_tool("steps", {"count": 0}, meta=meta("i"))
            replayed = await client.call_tool("steps", {"count": 0}, meta=meta("i", "same"))
            again = await client.call_tool("steps", {"count": 0}, meta=meta("i", "same"))

        for answer in (result, replayed, again):
            assert (answer.meta or {})[SERVER_INFO_META_KEY]["name"] == "shop-proxy"
        # The journal keeps what the upstream answered, its stamp included: evidence.
        executed = next(e for e in sagacity.history("i") if e.phase is Phase.EXECUTED)
        stamp = executed.payload["result"]["meta"][SERVER_INFO_META_KEY]
        assert stamp["name"] == "relay-upstream"


class TestDeadUpstream:
    async def test_a_dead_upstream_is_restarted_before_the_next_call_is_journaled(
        self, tmp_path: Path
    ) -> None:
        """After kill -9, the next call starts a new upstream and runs; nothing is in doubt."""
        sagacity = Sagacity.from_url("memory://")
        async with (
            proxied(tmp_path, sagacity, reconnect_backoff=0.05) as proxy,
            Client(proxy, mode="legacy") as client,
        ):
            await client.call_tool("steps", {"count": 1}, meta=meta("d"))
            first = kill(tmp_path / "pid")
            await gone(proxy)
            after = await client.call_tool("steps", {"count": 1}, meta=meta("d"))
            listed = await client.list_tools()
            ended = await request_end_saga(client, "d")

        assert text(after) == "did 1 steps"
        assert pid_of(tmp_path / "pid") != first
        assert [tool.name for tool in listed.tools] == TOOLS
        assert [e.phase.name for e in sagacity.history("d")] == [
            "INTENT", "EXECUTED", "INTENT", "EXECUTED", "ENDED",
        ]  # fmt: skip
        assert (ended.outcome, ended.in_doubt) == ("COMPLETED", [])

    async def test_a_given_client_whose_upstream_died_refuses_calls_before_intent(
        self, tmp_path: Path
    ) -> None:
        """A `Client` passed in is never reopened: after kill -9, calls are refused, unjournaled."""
        sagacity = Sagacity.from_url("memory://")
        params = relay_server(tmp_path / "pid", tmp_path)
        async with Client(params, mode="legacy") as upstream:
            proxy = await mcp_proxy(sagacity, upstream, read_only=TOOLS)
            async with Client(proxy, mode="legacy") as client:
                await client.call_tool("steps", {"count": 1}, meta=meta("g"))
                kill(tmp_path / "pid")
                await gone(proxy)
                refused = await client.call_tool("steps", {"count": 1}, meta=meta("g"))

        assert refused.is_error
        assert text(refused) == (
            "tool 'steps': the connection to upstream server 'relay-upstream' is closed; nothing "
            "was sent or journaled. Build the proxy again on an open connection, or pass "
            "mcp_proxy a factory (lambda: Client(...)) so that it reconnects by itself"
        )
        assert [e.phase.name for e in sagacity.history("g")] == ["INTENT", "EXECUTED"]

    async def test_an_upstream_that_stays_down_fails_calls_before_intent(
        self, tmp_path: Path
    ) -> None:
        """Every reconnect fails: the call is refused by name, unjournaled; listing fails."""
        sagacity = Sagacity.from_url("memory://")
        params = relay_server(tmp_path / "pid", tmp_path)
        broken = StdioServerParameters(command=sys.executable, args=["-c", "raise SystemExit(3)"])
        made: list[Client] = []

        def flaky() -> Client:
            made.append(Client(params if not made else broken, mode="legacy"))
            return made[-1]

        proxy = await mcp_proxy(
            sagacity, flaky, read_only=TOOLS, reconnect_attempts=2, reconnect_backoff=0.01
        )
        try:
            async with Client(proxy, mode="legacy") as client:
                await client.call_tool("steps", {"count": 1}, meta=meta("s"))
                kill(tmp_path / "pid")
                await gone(proxy)
                refused = await client.call_tool("steps", {"count": 1}, meta=meta("s"))
                with pytest.raises(MCPError) as listing:
                    await client.list_tools()
        finally:
            await proxy.aclose()

        assert refused.is_error
        assert text(refused).startswith(
            "tool 'steps': upstream server 'relay-upstream' is down and 2 attempts to reconnect "
            "failed ("
        )
        assert "nothing was sent or journaled" in text(refused)
        assert "is down" in str(listing.value)
        assert [e.phase.name for e in sagacity.history("s")] == ["INTENT", "EXECUTED"]

    async def test_a_call_in_flight_when_the_upstream_dies_stays_in_doubt(
        self, tmp_path: Path
    ) -> None:
        """The call was sent: it may have run, so it is journaled unknown and never undone."""
        sagacity = Sagacity.from_url("memory://")
        async with proxied(tmp_path, sagacity) as proxy, Client(proxy, mode="legacy") as client:
            await client.call_tool("steps", {"count": 1}, meta=meta("f"))
            call = asyncio.create_task(
                client.call_tool("slow", {"seconds": 30}, meta=meta("f", "slow-1"))
            )
            while not any(e.phase is Phase.INTENT for e in sagacity.history("f")[2:]):
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)  # sent, and the upstream is sleeping in it
            kill(tmp_path / "pid")
            result = await call
            ended = await request_end_saga(client, "f")

        assert result.is_error
        assert "the call may have run there, so it is journaled in doubt" in text(result)
        failed = sagacity.history("f")[3]
        assert (failed.phase, failed.call_id, failed.payload["kind"]) == (
            Phase.FAILED,
            "slow-1",
            "outcome_unknown",
        )
        assert (ended.outcome, ended.in_doubt) == (SagaOutcome.NEEDS_ATTENTION.value, ["slow-1"])
        assert verify(sagacity.journal, "f").ok


class TestCancellation:
    async def test_a_cancelled_call_is_forwarded_and_in_doubt(self, tmp_path: Path) -> None:
        """A client's timeout cancels the upstream's handler too; the call is journaled unknown."""
        sagacity = Sagacity.from_url("memory://")
        async with proxied(tmp_path, sagacity) as proxy, Client(proxy, mode="legacy") as client:
            with pytest.raises(MCPError) as timed_out:
                await client.call_tool(
                    "slow", {"seconds": 30}, read_timeout_seconds=1, meta=meta("c", "slow-c")
                )
            for _ in range(200):
                if (tmp_path / "cancelled").exists():
                    break
                await asyncio.sleep(0.025)
            for _ in range(200):
                if len(sagacity.history("c")) == 2:
                    break
                await asyncio.sleep(0.025)

        assert timed_out.value.error.code == types.REQUEST_TIMEOUT
        assert (tmp_path / "cancelled").read_text() == "cancelled"  # the upstream stopped
        intent, failed = sagacity.history("c")
        assert (failed.phase, failed.ref_seq, failed.payload["kind"]) == (
            Phase.FAILED,
            intent.seq,
            "outcome_unknown",
        )


class TestConfiguration:
    async def test_an_unknown_is_error_policy_is_refused(self, tmp_path: Path) -> None:
        """`is_error` values are checked when the proxy is built, naming the tool."""
        sagacity = Sagacity.from_url("memory://")
        with pytest.raises(ConfigurationError, match="is_error\\['steps'\\] is 'ignore'"):
            async with proxied(tmp_path, sagacity, is_error={"steps": "ignore"}):
                pass
        with pytest.raises(ConfigurationError, match="is_error names 'nope'"):
            async with proxied(tmp_path, sagacity, is_error={"nope": "retry"}):
                pass
