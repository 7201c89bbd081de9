"""`mcp_server`: wrapped tools served over MCP in sagas spanning requests.

One saga spans many `tools/call` requests; the journal sees the failure that MCP hides
behind `is_error`; the saga ends when the client or the server says so.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from typing import Any

import pytest
from mcp import Client, MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp.types import INVALID_PARAMS, URL_ELICITATION_REQUIRED, ElicitRequestURLParams

from sagacity import (
    CompensationContext,
    Phase,
    Sagacity,
    SagaOutcome,
    compensable,
    compensation,
    verify,
)
from sagacity.integrations.mcp import PROCESS_TOKEN as TOKEN
from sagacity.integrations.mcp import (
    SAGA_ID_META,
    end_saga,
    mcp_server,
    request_end_saga,
)
from tests.integrations.mcp._shop import Shop, meta, phases, scripted_model, text

ORDER_SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("reserve_inventory", {"sku": "A-1", "qty": 2}),
    ("charge_card", {"amount": "25.00"}),
    ("ship_order", {"address": "1 Main St"}),
]


class Notes:
    """A tool that takes MCP's Context, and one published under another name."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @compensable(by="forget")
    async def add_note(self, body: str, ctx: Context) -> str:
        """Add a note to the order."""
        self.seen.append(str(ctx.request_id))
        return f"note:{body}"

    @compensable(by="forget", name="tag_order")
    def tag(self, tag: str, urgent: bool = False) -> dict[str, str]:
        """Tag the order."""
        return {"tag": tag, "urgent": str(urgent)}

    def forget(self) -> None:
        """Nothing to undo here."""


class TestImportGuard:
    def test_missing_sdk_names_the_extra(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without MCP SDK 2.x the import fails with the pip command that installs it."""
        monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)
        for name in [n for n in sys.modules if n.startswith("sagacity.integrations.mcp")]:
            monkeypatch.delitem(sys.modules, name)
        with pytest.raises(ImportError, match=r"pip install 'sagacity\[mcp\]'"):
            importlib.import_module("sagacity.integrations.mcp")


class TestSchema:
    async def test_tools_list_as_the_unwrapped_functions_do(self) -> None:
        """The tool list equals that of a server registering the originals.

        Names, descriptions, input and output schemas equal those of a server that registers the
        original functions: sync, async, with a Context, renamed.
        """
        shop, notes = Shop(), Notes()
        plain: MCPServer[Any] = MCPServer("shop")
        for func in (
            shop.charge_card,
            shop.reserve_inventory,
            shop.send_wire_transfer,
            shop.ship_order,
            notes.add_note,
        ):
            plain.tool()(func)
        plain.tool(name="tag_order")(notes.tag)
        wrapped = mcp_server(Sagacity.from_url("memory://"), Shop(), Notes(), name="shop")

        async with Client(plain) as unwrapped, Client(wrapped) as journaled:
            expected = {t.name: t for t in (await unwrapped.list_tools()).tools}
            listed = {t.name: t for t in (await journaled.list_tools()).tools}

        assert listed == expected
        assert sorted(listed) == [
            "add_note",
            "charge_card",
            "reserve_inventory",
            "send_wire_transfer",
            "ship_order",
            "tag_order",
        ]

    async def test_context_is_injected_and_left_out_of_the_input(self) -> None:
        """MCP's Context is injected, and left out of the journaled input.

        A tool's Context parameter still receives MCP's Context; the journaled input holds only the
        arguments the client sent.
        """
        sagacity = Sagacity.from_url("memory://")
        notes = Notes()
        async with Client(mcp_server(sagacity, notes)) as client:
            result = await client.call_tool("add_note", {"body": "fragile"}, meta=meta("n-1"))
            tagged = await client.call_tool("tag_order", {"tag": "vip"}, meta=meta("n-1"))

        assert text(result) == "note:fragile"
        assert tagged.structured_content == {"tag": "vip", "urgent": "False"}
        assert len(notes.seen) == 1
        entries = sagacity.history("n-1")
        assert [e.payload["input"] for e in entries if e.phase is Phase.INTENT] == [
            {"body": "fragile"},
            {"tag": "vip", "urgent": False},
        ]


class TestSwallowedFailure:
    async def test_failed_third_call_undoes_the_first_two_in_reverse(
        self, sagacity: Sagacity
    ) -> None:
        """A failed third call undoes the first two, in reverse.

        The client only sees a generic is_error and the model says "done"; the saga still ends
        COMPENSATED, charge refunded before the stock is released.
        """
        shop = Shop()
        async with Client(mcp_server(sagacity, shop, name="shop")) as client:
            said, results = await scripted_model(client, "order-1", ORDER_SCRIPT)
            ended = await request_end_saga(client, "order-1")

        assert said.startswith("All done")
        assert [r.is_error for r in results] == [False, False, True]
        assert text(results[2]) == "Error executing tool ship_order"  # the cause is hidden
        assert (ended.outcome, ended.compensated) == (
            "COMPENSATED",
            [f"charge_card#1.{TOKEN}", f"reserve_inventory#1.{TOKEN}"],
        )
        assert shop.events[-2:] == [
            ("refund_card", "ch-25.00"),
            ("release_inventory", "res-A-1-2"),
        ]
        entries = sagacity.history("order-1")
        assert phases(entries) == [
            ("INTENT", "reserve_inventory", f"reserve_inventory#1.{TOKEN}"),
            ("EXECUTED", "reserve_inventory", f"reserve_inventory#1.{TOKEN}"),
            ("INTENT", "charge_card", f"charge_card#1.{TOKEN}"),
            ("EXECUTED", "charge_card", f"charge_card#1.{TOKEN}"),
            ("INTENT", "ship_order", f"ship_order#1.{TOKEN}"),
            ("FAILED", "ship_order", f"ship_order#1.{TOKEN}"),
            ("COMPENSATING", "charge_card", f"charge_card#1.{TOKEN}"),
            ("COMPENSATED", "charge_card", f"charge_card#1.{TOKEN}"),
            ("COMPENSATING", "reserve_inventory", f"reserve_inventory#1.{TOKEN}"),
            ("COMPENSATED", "reserve_inventory", f"reserve_inventory#1.{TOKEN}"),
            ("ENDED", None, None),
        ]
        assert entries[5].payload == {
            "kind": "failure",
            "error": {"type": "RuntimeError", "message": "courier API answered 503 for depot 7"},
        }
        assert verify(sagacity.journal, "order-1").ok

    async def test_server_side_end_saga_compensates_too(self, sqlite_url: str) -> None:
        """`end_saga` on the server side compensates as well.

        `end_saga(sagacity, id)` on the server ends the saga the same way, with the compensation
        report in its result.
        """
        sagacity = Sagacity.from_url(sqlite_url)
        async with Client(mcp_server(sagacity, Shop())) as client:
            await scripted_model(client, "order-2", ORDER_SCRIPT)

        result = await end_saga(sagacity, "order-2")

        assert result.outcome is SagaOutcome.COMPENSATED
        assert result.compensation is not None
        assert [ref.call_id for ref in result.compensation.compensated] == [
            f"charge_card#1.{TOKEN}",
            f"reserve_inventory#1.{TOKEN}",
        ]

    async def test_saga_without_failure_ends_completed(self) -> None:
        """Two calls that succeed end COMPLETED; nothing is undone."""
        sagacity, shop = Sagacity.from_url("memory://"), Shop()
        async with Client(mcp_server(sagacity, shop)) as client:
            await scripted_model(client, "order-3", ORDER_SCRIPT[:2])
            ended = await request_end_saga(client, "order-3")

        assert (ended.outcome, ended.compensated) == ("COMPLETED", [])
        assert [e[0] for e in shop.events] == ["reserve_inventory", "charge_card"]


class Slots:
    """A booking that fails on its first attempt and succeeds when retried."""

    def __init__(self) -> None:
        self.attempts = 0
        self.cancelled: list[Any] = []

    @compensable(by="cancel")
    def book(self, slot: str) -> str:
        """Book a delivery slot."""
        self.attempts += 1
        if self.attempts == 1:
            raise RuntimeError("slot service answered 500")
        return f"booked-{slot}"

    def cancel(self, ctx: CompensationContext) -> None:
        """Cancel a booked slot."""
        self.cancelled.append(ctx.result)


class TestEndReadsTheJournal:
    async def test_a_failed_attempt_retried_with_success_still_compensates(self) -> None:
        """A call that failed and then succeeded on a retry under its call id still fails the saga.

        Every attempt counts, as in `Sagacity.saga`: ending compensates, and the retried
        booking is undone.
        """
        sagacity, slots = Sagacity.from_url("memory://"), Slots()
        async with Client(mcp_server(sagacity, slots)) as client:
            first = await client.call_tool("book", {"slot": "7"}, meta=meta("r1", "tc-1"))
            retried = await client.call_tool("book", {"slot": "7"}, meta=meta("r1", "tc-1"))
            ended = await request_end_saga(client, "r1")

        assert (first.is_error, text(retried)) == (True, "booked-7")
        assert (ended.outcome, ended.compensated) == ("COMPENSATED", ["tc-1"])
        assert slots.cancelled == ["booked-7"]
        assert [e.phase.name for e in sagacity.history("r1")] == [
            "INTENT",
            "FAILED",
            "INTENT",
            "EXECUTED",
            "COMPENSATING",
            "COMPENSATED",
            "ENDED",
        ]

    async def test_an_intent_left_without_outcome_is_in_doubt_and_compensates(self) -> None:
        """An INTENT with no outcome, as a crashed server leaves it, makes ending compensate.

        Nothing of the saga runs any more, so the call may or may not have run: it is listed
        in doubt and never undone, while the call that did run is undone.
        """
        sagacity, shop = Sagacity.from_url("memory://"), Shop()
        async with Client(mcp_server(sagacity, shop)) as client:
            await client.call_tool("reserve_inventory", {"sku": "A", "qty": 1}, meta=meta("c1"))
            sagacity.journal.append(
                "c1",
                Phase.INTENT,
                tool_name="charge_card",
                call_id="toolu_crashed",
                payload={
                    "input": {"amount": "5", "card": "4242"},
                    "reversibility": "COMPENSATABLE",
                },
            )
            ended = await request_end_saga(client, "c1")

        assert (ended.outcome, ended.compensated, ended.in_doubt) == (
            "NEEDS_ATTENTION",
            [f"reserve_inventory#1.{TOKEN}"],
            ["toolu_crashed"],
        )
        assert shop.events == [("reserve_inventory", "A", 1), ("release_inventory", "res-A-1")]


class TestSagaAcrossRequests:
    async def test_call_ids_count_on_across_requests_and_restarts(self, sqlite_url: str) -> None:
        """Call ids count on across requests and restarts.

        Without a client call id, calls are `tool#n` numbered from the journal: a restarted server
        goes on from where the saga stands, never reusing an id.
        """
        first = Sagacity.from_url(sqlite_url)
        async with Client(mcp_server(first, Shop())) as client:
            for sku in ("A", "B"):
                await client.call_tool("reserve_inventory", {"sku": sku, "qty": 1}, meta=meta("s"))
        first.close()
        restarted = Sagacity.from_url(sqlite_url)
        async with Client(mcp_server(restarted, Shop())) as client:
            await client.call_tool("reserve_inventory", {"sku": "C", "qty": 1}, meta=meta("s"))
            await client.call_tool("charge_card", {"amount": "1"}, meta=meta("s", "tool-use-9"))

        intents = [e for e in restarted.history("s") if e.phase is Phase.INTENT]
        assert [e.call_id for e in intents] == [
            f"reserve_inventory#1.{TOKEN}",
            f"reserve_inventory#2.{TOKEN}",
            f"reserve_inventory#3.{TOKEN}",
            "tool-use-9",
        ]

    async def test_calls_without_a_saga_run_unjournaled(self) -> None:
        """Calls naming no saga run unjournaled; IRREVERSIBLE ones are refused.

        A call whose request names no saga runs as the plain tool; an IRREVERSIBLE one is refused
        with a message naming the tool, and does not run.
        """
        sagacity, shop = Sagacity.from_url("memory://"), Shop()
        async with Client(mcp_server(sagacity, shop)) as client:
            plain = await client.call_tool("reserve_inventory", {"sku": "A", "qty": 1})
            wire = await client.call_tool("send_wire_transfer", {"amount": "9", "to": "X"})

        assert text(plain) == "res-A-1"
        assert wire.is_error
        assert "'send_wire_transfer' is IRREVERSIBLE and was called outside a saga" in text(wire)
        assert shop.events == [("reserve_inventory", "A", 1)]
        assert sagacity.journal.list_sagas() == []

    async def test_ended_saga_refuses_further_calls(self) -> None:
        """An ended saga refuses further calls; ending again is idempotent.

        After its end, a call naming the saga is refused with the saga's name and outcome, and does
        not run; a second end answers the recorded outcome.
        """
        sagacity, shop = Sagacity.from_url("memory://"), Shop()
        async with Client(mcp_server(sagacity, shop)) as client:
            await scripted_model(client, "done-1", ORDER_SCRIPT[:1])
            first = await request_end_saga(client, "done-1")
            late = await client.call_tool("charge_card", {"amount": "5"}, meta=meta("done-1"))
            again = await request_end_saga(client, "done-1")

        assert (first.outcome, again.outcome) == ("COMPLETED", "COMPLETED")
        assert late.is_error
        assert "saga 'done-1' ended COMPLETED" in text(late)
        assert [e[0] for e in shop.events] == ["reserve_inventory"]

    async def test_ending_an_unknown_saga_is_an_mcp_error(self) -> None:
        """`sagacity/end` for a saga with no journaled call answers an MCP error naming it."""
        async with Client(mcp_server(Sagacity.from_url("memory://"), Shop())) as client:
            with pytest.raises(MCPError) as raised:
                await request_end_saga(client, "never-started")

        assert raised.value.code == INVALID_PARAMS
        assert "saga 'never-started' has no journal entries" in raised.value.message

    async def test_malformed_saga_id_is_refused(self) -> None:
        """A saga id that is not a non-empty string is refused naming the `_meta` key."""
        shop = Shop()
        async with Client(mcp_server(Sagacity.from_url("memory://"), shop)) as client:
            result = await client.call_tool(
                "reserve_inventory", {"sku": "A", "qty": 1}, meta={SAGA_ID_META: 42}
            )

        assert result.is_error
        assert "_meta['sagacity/saga_id'] must be a non-empty string" in text(result)
        assert shop.events == []

    async def test_saga_of_picks_the_saga_without_meta(self) -> None:
        """A `saga_of` hook names the saga for hosts that cannot set `_meta`."""
        sagacity, shop = Sagacity.from_url("memory://"), Shop()
        server = mcp_server(sagacity, shop, saga_of=lambda ctx, params: "host-session-1")
        async with Client(server) as client:
            await client.call_tool("reserve_inventory", {"sku": "A", "qty": 1})
            await client.call_tool("charge_card", {"amount": "3"})

        assert [e.call_id for e in sagacity.history("host-session-1")] == [
            f"reserve_inventory#1.{TOKEN}",
            f"reserve_inventory#1.{TOKEN}",
            f"charge_card#1.{TOKEN}",
            f"charge_card#1.{TOKEN}",
        ]

    async def test_end_waits_for_a_running_call(self) -> None:
        """Ending waits for the saga's running call.

        Ending while a call of the saga runs waits for it: its EXECUTED comes before ENDED, and a
        call arriving meanwhile is refused.
        """

        class Slow:
            def __init__(self) -> None:
                self.started = asyncio.Event()
                self.finish = asyncio.Event()

            @compensable(by="undo")
            async def pack(self, box: str) -> str:
                """Pack a box."""
                self.started.set()
                await self.finish.wait()
                return f"packed-{box}"

            def undo(self) -> None:
                """Unpack."""

        sagacity, slow = Sagacity.from_url("memory://"), Slow()
        async with Client(mcp_server(sagacity, slow)) as client:
            packing = asyncio.create_task(client.call_tool("pack", {"box": "1"}, meta=meta("w")))
            await slow.started.wait()
            ending = asyncio.create_task(end_saga(sagacity, "w"))
            await asyncio.sleep(0.05)
            refused = await client.call_tool("pack", {"box": "2"}, meta=meta("w"))
            assert not ending.done()
            slow.finish.set()
            packed, ended = await packing, await ending

        assert text(packed) == "packed-1"
        assert "saga 'w' is being ended" in text(refused)
        assert ended.outcome is SagaOutcome.COMPLETED
        assert [e.phase.name for e in sagacity.history("w")] == ["INTENT", "EXECUTED", "ENDED"]


class Drive:
    """A cloud folder that asks the user to sign in (URL elicitation) until they have."""

    def __init__(self) -> None:
        self.signed_in = False
        self.shared: list[str] = []
        self.unshared: list[str] = []

    @compensable(by="unshare")
    def share_folder(self, folder: str) -> str:
        """Share a cloud folder with the customer."""
        self.shared.append(folder)  # the effect happens before the sign-in is asked for
        if not self.signed_in:
            raise UrlElicitationRequiredError(
                [ElicitRequestURLParams(message="Sign in", url="https://example.com/o")]
            )
        return f"shared-{folder}"

    @compensation
    def unshare(self, ctx: CompensationContext) -> None:
        self.unshared.append(ctx.result)


class TestControlFlow:
    @pytest.mark.parametrize("call_id", [None, "toolu_5"], ids=["no-call-id", "call-id"])
    async def test_a_url_elicitation_sent_again_runs_under_its_call_id(
        self, call_id: str | None
    ) -> None:
        """URL elicitation passes through as control flow; the call sent again supersedes it.

        MCP's URL elicitation request reaches the client as its protocol error and is
        journaled FAILED of kind `control_flow`, which does not fail the saga. Once the
        user signed in, the client sends the call again: with its `sagacity/call_id`, or
        without one (then the call of that tool and input that left as control flow is
        taken again). It runs under the same id, and the saga ends COMPLETED.
        """
        sagacity, drive = Sagacity.from_url("memory://"), Drive()
        async with Client(mcp_server(sagacity, drive)) as client:
            with pytest.raises(MCPError) as raised:
                await client.call_tool("share_folder", {"folder": "x"}, meta=meta("f", call_id))
            drive.signed_in = True
            again = await client.call_tool("share_folder", {"folder": "x"}, meta=meta("f", call_id))
            ended = await request_end_saga(client, "f")

        assert raised.value.code == URL_ELICITATION_REQUIRED
        assert text(again) == "shared-x"
        expected_id = call_id or f"share_folder#1.{TOKEN}"
        assert phases(sagacity.history("f")) == [
            ("INTENT", "share_folder", expected_id),
            ("FAILED", "share_folder", expected_id),
            ("INTENT", "share_folder", expected_id),
            ("EXECUTED", "share_folder", expected_id),
            ("ENDED", None, None),
        ]
        assert sagacity.history("f")[1].payload["kind"] == "control_flow"
        assert (ended.outcome, ended.in_doubt) == ("COMPLETED", [])

    async def test_an_elicitation_left_standing_is_in_doubt(self) -> None:
        """A call that acted and then asked for a sign-in that never came is in doubt.

        Ending the saga does not take the control-flow exit for "nothing happened": the
        folder may be shared, its result is unknown. The saga is compensated (the
        reservation is undone), the share is listed in doubt and never undone, and the
        saga ends NEEDS_ATTENTION.
        """
        sagacity, drive, shop = Sagacity.from_url("memory://"), Drive(), Shop()
        async with Client(mcp_server(sagacity, drive, shop)) as client:
            await client.call_tool("reserve_inventory", {"sku": "A", "qty": 1}, meta=meta("g"))
            with pytest.raises(MCPError):
                await client.call_tool("share_folder", {"folder": "x"}, meta=meta("g"))
            ended = await request_end_saga(client, "g")

        assert (ended.outcome, ended.compensated, ended.in_doubt) == (
            "NEEDS_ATTENTION",
            [f"reserve_inventory#1.{TOKEN}"],
            [f"share_folder#1.{TOKEN}"],
        )
        assert (drive.shared, drive.unshared) == (["x"], [])
        assert shop.events == [("reserve_inventory", "A", 1), ("release_inventory", "res-A-1")]
        assert sagacity.history("g")[-1].payload["in_doubt"] == [f"share_folder#1.{TOKEN}"]
