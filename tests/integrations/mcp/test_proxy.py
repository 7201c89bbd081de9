"""`mcp_proxy`: an upstream MCP server's tools under sagas.

Calls are journaled on the proxy, undone by other upstream tools, and their reversibility is
read from the tool annotations.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult

from sagacity import ConfigurationError, Phase, Reversibility, Sagacity, SagaOutcome, verify
from sagacity.integrations.mcp import (
    APPROVAL_META,
    Compensate,
    end_saga,
    mcp_proxy,
    request_end_saga,
)
from sagacity.integrations.mcp import PROCESS_TOKEN as TOKEN
from tests.integrations.mcp._shop import (
    Branch,
    Warehouse,
    check_calls,
    meta,
    phases,
    scripted_model,
    text,
)

UNDO = {
    "reserve": Compensate(
        tool="release",
        args=lambda call_input, result: {"reservation": result.structured_content["result"]},
    ),
    "charge-card": Compensate(
        tool="refund",
        args=lambda call_input, result: {"charge_id": result.structured_content["charge_id"]},
    ),
    "ship": Compensate(tool="cancel_shipment"),
    "slow_label": Compensate(tool="release", args=lambda call_input, result: {"reservation": ""}),
}

BRANCH_UNDO = {
    "reserve": Compensate(
        tool="release", args=lambda call_input, result: {"reservation": text(result)}
    ),
    "ship": Compensate(tool="cancel_shipment"),
}


@contextlib.asynccontextmanager
async def connected() -> AsyncIterator[tuple[Warehouse, Client]]:
    """The upstream server and a client connected to it in-process.

    Not a fixture: the client's task group must be left by the task that entered it.
    """
    upstream = Warehouse()
    async with Client(upstream.server) as client:
        yield upstream, client


class TestListing:
    async def test_tools_are_listed_exactly_as_upstream_lists_them(self) -> None:
        """Every tool, with its name, description, schemas and annotations, unchanged."""
        async with connected() as (_, upstream):
            proxy = await mcp_proxy(Sagacity.from_url("memory://"), upstream, UNDO)
            async with Client(proxy) as client:
                listed = (await client.list_tools()).tools

            assert listed == (await upstream.list_tools()).tools


class TestReversibility:
    async def test_defaults_follow_the_annotations(self) -> None:
        """Reversibility defaults follow the tool annotations.

        Read-only runs journaled with nothing to undo; a configured tool runs COMPENSATABLE; a tool
        without annotations (destructive, not idempotent by MCP's defaults) waits for approval and
        does not reach the upstream.
        """
        async with connected() as (upstream, client_of_upstream):
            sagacity = Sagacity.from_url("memory://")
            proxy = await mcp_proxy(sagacity, client_of_upstream, UNDO)
            async with Client(proxy) as client:
                stock = await client.call_tool("check_stock", {"sku": "A"}, meta=meta("r"))
                await client.call_tool("reserve", {"sku": "A", "qty": 1}, meta=meta("r"))
                wire = await client.call_tool("wire", {"amount": "5", "to": "X"}, meta=meta("r"))

            assert stock.structured_content == {"result": 7}
            assert not wire.is_error
            assert text(wire).startswith("[AWAITING_APPROVAL] wire was not run")
            assert wire.structured_content == {"result": text(wire)}  # fits `-> str`'s schema
            assert [name for name, _ in upstream.calls] == ["check_stock", "reserve"]
            intents = [e for e in sagacity.history("r") if e.phase is Phase.INTENT]
            assert [(e.tool_name, e.payload["reversibility"]) for e in intents] == [
                ("check_stock", "REVERSIBLE"),
                ("reserve", "COMPENSATABLE"),
            ]

    async def test_configuration_overrides_the_annotations(self) -> None:
        """`irreversible=` makes an annotated tool wait; `read_only=` lets one run."""
        async with connected() as (upstream, client_of_upstream):
            sagacity = Sagacity.from_url("memory://")
            proxy = await mcp_proxy(
                sagacity, client_of_upstream, irreversible=["check_stock"], read_only=["wire"]
            )
            async with Client(proxy) as client:
                stock = await client.call_tool("check_stock", {"sku": "A"}, meta=meta("o"))
                wire = await client.call_tool("wire", {"amount": "5", "to": "X"}, meta=meta("o"))

            # `-> int` has an output schema the text cannot fit: it comes as is_error
            assert (stock.is_error, stock.structured_content) == (True, None)
            assert text(stock).startswith("[AWAITING_APPROVAL] check_stock was not run")
            assert text(wire) == "wire-5-X"
            assert upstream.calls == [("wire", ("5", "X"))]

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"compensations": {"nope": Compensate(tool="release")}}, "names 'nope'"),
            ({"compensations": {"reserve": Compensate(tool="undo_all")}}, "names 'undo_all'"),
            ({"irreversible": ["reserve"], "read_only": ["reserve"]}, "both irreversible and"),
        ],
    )
    async def test_configuration_errors_name_the_tool(
        self, options: dict[str, Any], message: str
    ) -> None:
        """A name the upstream does not offer, or a tool configured twice, is refused."""
        async with connected() as (_, upstream):
            with pytest.raises(ConfigurationError, match=message):
                await mcp_proxy(Sagacity.from_url("memory://"), upstream, **options)

    def test_an_irreversible_compensate_is_refused(self) -> None:
        """An effect with an undo is not IRREVERSIBLE: saying so is a configuration error."""
        with pytest.raises(ConfigurationError, match="cannot be IRREVERSIBLE"):
            Compensate(tool="release", reversibility=Reversibility.IRREVERSIBLE)


class TestSwallowedFailure:
    async def test_upstream_error_result_compensates_in_reverse(self, sagacity: Sagacity) -> None:
        """An upstream is_error result fails the saga, undone in reverse.

        The upstream's is_error result reaches the client unchanged and the model says "done"; the
        saga ends COMPENSATED, the undo tools called upstream in reverse with arguments mapped from
        each call's input and result.
        """
        async with connected() as (upstream, client_of_upstream):
            proxy = await mcp_proxy(sagacity, client_of_upstream, UNDO)
            async with Client(proxy) as client:
                said, results = await scripted_model(
                    client,
                    "order-9",
                    [
                        ("reserve", {"sku": "A", "qty": 2}),
                        ("charge-card", {"amount": "25.00"}),
                        ("ship", {"address": "1 Main St"}),
                    ],
                )
                ended = await request_end_saga(client, "order-9")

            assert said.startswith("All done")
            assert [r.is_error for r in results] == [False, False, True]
            assert text(results[2]) == "Error executing tool ship"
            assert (ended.outcome, ended.compensated) == (
                "COMPENSATED",
                [f"charge_card#1.{TOKEN}", f"reserve#1.{TOKEN}"],
            )
            assert upstream.calls == [
                ("reserve", ("A", 2)),
                ("charge-card", "25.00"),
                ("ship", "1 Main St"),
                ("refund", "ch-25.00"),
                ("release", "res-A-2"),
            ]
            entries = sagacity.history("order-9")
            assert phases(entries) == [
                ("INTENT", "reserve", f"reserve#1.{TOKEN}"),
                ("EXECUTED", "reserve", f"reserve#1.{TOKEN}"),
                ("INTENT", "charge_card", f"charge_card#1.{TOKEN}"),
                ("EXECUTED", "charge_card", f"charge_card#1.{TOKEN}"),
                ("INTENT", "ship", f"ship#1.{TOKEN}"),
                ("FAILED", "ship", f"ship#1.{TOKEN}"),
                ("COMPENSATING", "charge_card", f"charge_card#1.{TOKEN}"),
                ("COMPENSATED", "charge_card", f"charge_card#1.{TOKEN}"),
                ("COMPENSATING", "reserve", f"reserve#1.{TOKEN}"),
                ("COMPENSATED", "reserve", f"reserve#1.{TOKEN}"),
                ("ENDED", None, None),
            ]
            assert entries[5].payload["error"] == {
                "type": "UpstreamToolError",
                "message": "upstream tool 'ship' returned an error: Error executing tool ship",
            }
            assert entries[3].payload["result"]["structured_content"] == {"charge_id": "ch-25.00"}
            assert verify(sagacity.journal, "order-9").ok

    async def test_failing_undo_leaves_the_saga_dirty(self) -> None:
        """An undo whose upstream call answers is_error is COMPENSATION_FAILED, named."""
        async with connected() as (_, client_of_upstream):
            sagacity = Sagacity.from_url("memory://")
            broken = {"reserve": Compensate(tool="ship", args=lambda i, r: {"address": "?"})}
            proxy = await mcp_proxy(
                sagacity,
                client_of_upstream,
                broken,
                read_only=["ship"],
                is_error={"ship": "fail"},  # read-only tools default to "retry"
            )
            async with Client(proxy) as client:
                await client.call_tool("reserve", {"sku": "A", "qty": 1}, meta=meta("d"))
                await client.call_tool("ship", {"address": "x"}, meta=meta("d"))
                ended = await request_end_saga(client, "d")

            assert (ended.outcome, ended.compensation_failed) == (
                "COMPENSATION_FAILED",
                [f"reserve#1.{TOKEN}"],
            )
            failed = sagacity.history("d")[-2]
            assert failed.phase is Phase.COMPENSATION_FAILED
            assert "upstream tool 'ship' returned an error" in failed.payload["error"]


class TestApproval:
    async def test_approved_call_reaches_the_upstream_once(self) -> None:
        """An approved call reaches the upstream exactly once.

        Waiting, refused before approval and with changed input, then forwarded once with the
        approved input; sending it again with its call id replays the result.
        """
        async with connected() as (upstream, client_of_upstream):
            sagacity = Sagacity.from_url("memory://")
            proxy = await mcp_proxy(sagacity, client_of_upstream, UNDO)
            wire = {"amount": "100", "to": "ACME"}
            async with Client(proxy) as client:
                waiting = await client.call_tool("wire", wire, meta=meta("w", "tc-1"))
                early = await client.call_tool("wire", wire, meta=meta("w", "tc-1"))
                sagacity.approve("w", approver="alice@ops")
                changed = await client.call_tool(
                    "wire", {**wire, "amount": "1"}, meta=meta("w", "tc-1")
                )
                ran = await client.call_tool("wire", wire, meta=meta("w", "tc-1"))
                again = await client.call_tool("wire", wire, meta=meta("w", "tc-1"))
                ended = await request_end_saga(client, "w")

            assert (waiting.meta or {})[APPROVAL_META]["call_id"] == "tc-1"
            assert early.is_error
            assert changed.is_error
            assert text(ran) == text(again) == "wire-100-ACME"
            assert again.structured_content == {"result": "wire-100-ACME"}
            assert upstream.calls == [("wire", ("100", "ACME"))]
            assert ended.outcome == "COMPLETED"

    async def test_after_a_failure_the_core_refuses_the_approved_call(self) -> None:
        """After a failed call, an approved IRREVERSIBLE call is refused and never forwarded.

        The refusal is the core's own check, its message passed to the client as an
        is_error result; the saga then ends COMPENSATED with nothing left waiting.
        """
        async with connected() as (upstream, client_of_upstream):
            sagacity = Sagacity.from_url("memory://")
            proxy = await mcp_proxy(sagacity, client_of_upstream, UNDO)
            wire = {"amount": "100", "to": "ACME"}
            async with Client(proxy) as client:
                await client.call_tool("wire", wire, meta=meta("f"))
                sagacity.approve("f", approver="alice@ops")
                await client.call_tool("ship", {"address": "y"}, meta=meta("f"))
                refused = await client.call_tool("wire", wire, meta=meta("f"))
                ended = await request_end_saga(client, "f")

        assert refused.is_error
        assert text(refused) == (
            "tool 'wire': saga 'f': a call has failed, so the saga will be compensated; "
            "IRREVERSIBLE tool 'wire' is not run. "
            "Run it in a new saga if it is still wanted"
        )
        assert upstream.calls == [("ship", "y")]
        assert (ended.outcome, ended.pending) == ("COMPENSATED", [])

    async def test_resume_saga_forwards_the_approved_call_through_the_bound_connection(
        self,
    ) -> None:
        """`aresume_saga` runs an approved proxied call outside any request, once.

        It goes through the connection the proxy bound, with the stored input, and ends
        the saga COMPLETED with the upstream's result.
        """
        async with connected() as (upstream, client_of_upstream):
            sagacity = Sagacity.from_url("memory://")
            proxy = await mcp_proxy(sagacity, client_of_upstream, UNDO)
            async with Client(proxy) as client:
                await client.call_tool("wire", {"amount": "7", "to": "ACME"}, meta=meta("rs"))
            sagacity.approve("rs", approver="alice@ops")
            resumed = await sagacity.aresume_saga("rs")

        assert resumed.outcome is SagaOutcome.COMPLETED
        assert text(resumed.value) == "wire-7-ACME"
        assert upstream.calls == [("wire", ("7", "ACME"))]


class TestParallel:
    async def test_parallel_forwarding_and_an_upstream_timeout(self) -> None:
        """Parallel forwarding journals whole; an upstream timeout is in doubt.

        Calls forwarded in parallel journal without gaps; one the upstream does not answer in time
        is in doubt (it may have run there) and is not compensated.
        """
        upstream = Warehouse()
        sagacity = Sagacity.from_url("memory://")
        async with Client(upstream.server, read_timeout_seconds=1.0) as client_of_upstream:
            proxy = await mcp_proxy(sagacity, client_of_upstream, UNDO)
            async with Client(proxy) as client:
                results = await asyncio.gather(
                    client.call_tool("reserve", {"sku": "A", "qty": 1}, meta=meta("p", "a")),
                    client.call_tool("slow_label", {"order": "7"}, meta=meta("p", "b")),
                    client.call_tool("check_stock", {"sku": "A"}, meta=meta("p", "c")),
                    return_exceptions=True,
                )
            ended = await end_saga(sagacity, "p")

        timed_out = results[1]
        assert isinstance(timed_out, CallToolResult)
        assert timed_out.is_error
        assert text(timed_out).startswith("tool 'slow_label': the upstream server did not answer")
        assert "journaled in doubt" in text(timed_out)
        entries = sagacity.history("p")
        calls = check_calls(
            [e for e in entries if e.phase in (Phase.INTENT, Phase.EXECUTED, Phase.FAILED)]
        )
        assert calls["b"] == [Phase.INTENT, Phase.FAILED]
        assert next(e for e in entries if e.phase is Phase.FAILED).payload["kind"] == (
            "outcome_unknown"
        )
        assert ended.outcome is SagaOutcome.NEEDS_ATTENTION
        assert ended.compensation is not None
        assert [r.call_id for r in ended.compensation.in_doubt] == ["b"]
        assert sorted(r.call_id for r in ended.compensation.compensated) == ["a", "c"]
        assert verify(sagacity.journal, "p").ok


class TestReconnect:
    async def test_rebuilt_proxy_compensates_through_the_new_connection(self) -> None:
        """A rebuilt proxy compensates through its new connection.

        Building the proxy again with the same Sagacity (after the upstream reconnects) is allowed,
        and compensations then go through the new connection.
        """
        sagacity = Sagacity.from_url("memory://")
        first, second = Warehouse(), Warehouse()
        async with Client(first.server) as old_connection:
            proxy = await mcp_proxy(sagacity, old_connection, UNDO)
            async with Client(proxy) as client:
                await client.call_tool("reserve", {"sku": "A", "qty": 1}, meta=meta("x"))
                await client.call_tool("ship", {"address": "y"}, meta=meta("x"))
        async with Client(second.server) as new_connection:
            await mcp_proxy(sagacity, new_connection, UNDO)
            result = await end_saga(sagacity, "x")

        assert result.outcome is SagaOutcome.COMPENSATED
        assert second.calls == [("release", "res-A-1")]

    async def test_another_upstream_with_the_same_tool_names_needs_a_prefix(self) -> None:
        """Two upstreams sharing tool names need a prefix.

        Two different upstream servers with one tool name clash in the journal unless one gets a
        prefix; with it, the journal names the tool apart.
        """
        sagacity = Sagacity.from_url("memory://")
        other: MCPServer[Any] = MCPServer("another-warehouse")

        @other.tool()
        def check_stock(sku: str) -> int:
            """Stock elsewhere."""
            return 1

        async with Client(Warehouse().server) as first, Client(other) as second:
            await mcp_proxy(sagacity, first, UNDO)
            with pytest.raises(ConfigurationError, match="give this upstream another prefix"):
                await mcp_proxy(sagacity, second)
            proxy = await mcp_proxy(sagacity, second, read_only=["check_stock"], prefix="east.")
            async with Client(proxy) as client:
                await client.call_tool("check_stock", {"sku": "A"}, meta=meta("z"))

        assert sagacity.history("z")[0].tool_name == "east_check_stock"


class TestTwoUpstreams:
    async def test_each_proxy_reaches_its_own_upstream(self) -> None:
        """Two upstreams that give the same server name: each proxy reaches its own.

        While alice's connection is open, a proxy of bob's server under the same journal
        names is refused, and alice's proxy still answers "alice". With a prefix, each proxy
        forwards to its own upstream, and a saga spanning both, ended through bob's proxy,
        undoes each reservation on the upstream that made it.
        """
        sagacity = Sagacity.from_url("memory://")
        alice, bob = Branch("alice"), Branch("bob")
        async with Client(alice.server) as to_alice, Client(bob.server) as to_bob:
            alices = await mcp_proxy(sagacity, to_alice, BRANCH_UNDO)
            with pytest.raises(ConfigurationError, match="bound to another open connection"):
                await mcp_proxy(sagacity, to_bob, BRANCH_UNDO)
            bobs = await mcp_proxy(sagacity, to_bob, BRANCH_UNDO, prefix="bob.")
            async with Client(alices) as via_alice, Client(bobs) as via_bob:
                answers = [
                    text(await via.call_tool("whoami", {}, meta=meta("two")))
                    for via in (via_alice, via_bob)
                ]
                await via_alice.call_tool("reserve", {"sku": "A"}, meta=meta("two"))
                await via_bob.call_tool("reserve", {"sku": "B"}, meta=meta("two"))
                await via_alice.call_tool("ship", {"address": "x"}, meta=meta("two"))
                ended = await request_end_saga(via_bob, "two")

        assert answers == ["alice", "bob"]
        assert (ended.outcome, ended.compensated) == (
            "COMPENSATED",
            [
                f"bob_reserve#1.{TOKEN}",
                f"reserve#1.{TOKEN}",
                f"bob_whoami#1.{TOKEN}",
                f"whoami#1.{TOKEN}",
            ],
        )
        assert alice.calls == [
            ("whoami", None),
            ("reserve", "A"),
            ("ship", "x"),
            ("release", "alice-A"),
        ]
        assert bob.calls == [("whoami", None), ("reserve", "B"), ("release", "bob-B")]

    async def test_a_proxy_whose_connection_closed_sends_nothing_elsewhere(self) -> None:
        """A proxy whose upstream connection closed refuses calls; they reach no other upstream.

        Building the proxy again on a new connection re-binds the journaled tools, but the
        old proxy, still served, does not forward through the new connection: its call is
        refused by name, and nothing is sent or journaled.
        """
        sagacity = Sagacity.from_url("memory://")
        alice, bob = Branch("alice"), Branch("bob")
        async with Client(alice.server) as to_alice:
            alices = await mcp_proxy(sagacity, to_alice, BRANCH_UNDO)
        async with Client(bob.server) as to_bob, Client(alices) as via_alice:
            await mcp_proxy(sagacity, to_bob, BRANCH_UNDO)
            stale = await via_alice.call_tool("whoami", {}, meta=meta("stale"))

        assert stale.is_error
        assert text(stale) == (
            "tool 'whoami': the connection to upstream server 'warehouse' is closed; "
            "nothing was sent or journaled. Build the proxy again on an open connection, or "
            "pass mcp_proxy a factory (lambda: Client(...)) so that it reconnects by itself"
        )
        assert (alice.calls, bob.calls) == ([], [])
        assert sagacity.history("stale") == []


class TestCompensateLater:
    async def test_compensating_from_another_event_loop_is_refused_then_retried(self) -> None:
        """`Sagacity.compensate` runs async compensations on a fresh event loop.

        The upstream connection belongs to the proxy's loop, so each undo there is refused
        by name, nothing is sent, and the saga is COMPENSATION_FAILED; compensating again
        from the proxy's loop undoes what is left.
        """
        sagacity = Sagacity.from_url("memory://")
        async with connected() as (upstream, client_of_upstream):
            proxy = await mcp_proxy(sagacity, client_of_upstream, UNDO)
            async with Client(proxy) as client:
                await client.call_tool("reserve", {"sku": "A", "qty": 1}, meta=meta("late"))
                await client.call_tool("ship", {"address": "y"}, meta=meta("late"))
            elsewhere = await asyncio.to_thread(sagacity.compensate, "late")
            sent_meanwhile = list(upstream.calls)
            here = await sagacity.acompensate("late")

        assert elsewhere.outcome is SagaOutcome.COMPENSATION_FAILED
        assert elsewhere.compensation is not None
        assert "belongs to another event loop" in str(elsewhere.compensation.failed[0].error)
        assert sent_meanwhile == [("reserve", ("A", 1)), ("ship", "y")]
        assert here.outcome is SagaOutcome.COMPENSATED
        assert upstream.calls[-1] == ("release", "res-A-1")

    async def test_compensating_through_a_closed_connection_names_it(self) -> None:
        """An undo whose connection has closed is refused by name, and retried once rebuilt.

        Nothing is sent; the saga is COMPENSATION_FAILED until the proxy is built again on
        a new connection and the saga compensated again through it.
        """
        sagacity = Sagacity.from_url("memory://")
        first, second = Warehouse(), Warehouse()
        async with Client(first.server) as old_connection:
            proxy = await mcp_proxy(sagacity, old_connection, UNDO)
            async with Client(proxy) as client:
                await client.call_tool("reserve", {"sku": "A", "qty": 1}, meta=meta("gone"))
                await client.call_tool("ship", {"address": "y"}, meta=meta("gone"))
        closed = await sagacity.acompensate("gone")
        async with Client(second.server) as new_connection:
            await mcp_proxy(sagacity, new_connection, UNDO)
            retried = await sagacity.acompensate("gone")

        assert closed.outcome is SagaOutcome.COMPENSATION_FAILED
        assert closed.compensation is not None
        assert str(closed.compensation.failed[0].error) == (
            "UpstreamUnavailableError: tool 'reserve': the connection to upstream server "
            "'warehouse' is closed; nothing was sent or journaled. Build the proxy again on an "
            "open connection, or pass mcp_proxy a factory (lambda: Client(...)) so that it "
            "reconnects by itself"
        )
        assert first.calls == [("reserve", ("A", 1)), ("ship", "y")]
        assert retried.outcome is SagaOutcome.COMPENSATED
        assert second.calls == [("release", "res-A-1")]
