"""The tools ADK is given: its own `FunctionTool`s, declared as the undecorated tools are.

Also what they are called with (ADK's call ids, its context) and how a saga spans several
requests of one session (`Sagacity.join`).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.adk.utils._function_call_names import REQUEST_CONFIRMATION_FUNCTION_CALL_NAME
from google.genai import types

import sagacity.integrations.adk as adk
from sagacity import (
    ApprovalNotFoundError,
    CompensationContext,
    NoSagaError,
    Sagacity,
    SagaOutcome,
    compensable,
    compensation,
    current_call,
)
from sagacity.integrations.adk import (
    REQUEST_CONFIRMATION,
    as_function_tool,
    confirmation_message,
    function_tools,
)
from tests.integrations.adk._agents import (
    USER,
    Desk,
    Orders,
    SwallowErrors,
    final_text,
    phases,
    scripted,
)

TOOLS = [
    "reserve_inventory",
    "charge_card",
    "ship",
    "book_courier",
    "pick",
    "label",
    "send_wire_transfer",
    "delete_account",
]


class Notes:
    """A tool that takes ADK's context itself."""

    def __init__(self) -> None:
        self.contexts: list[ToolContext] = []

    @compensable(by="erase")
    def note(self, text: str, tool_context: ToolContext) -> str:
        """Write a note into the session state."""
        self.contexts.append(tool_context)
        tool_context.state["note"] = text
        return f"noted {text}"

    @compensation
    def erase(self, ctx: CompensationContext) -> None:
        """Nothing to undo here."""


class TestExports:
    def test_public_names(self) -> None:
        """The adapter's public names, sorted."""
        assert adk.__all__ == [
            "CONFIRMATION_SOURCE",
            "REQUEST_CONFIRMATION",
            "RESUMER",
            "AdkResumer",
            "as_function_tool",
            "confirmation_message",
            "confirmation_requests",
            "function_tools",
        ]
        assert REQUEST_CONFIRMATION == REQUEST_CONFIRMATION_FUNCTION_CALL_NAME


class TestDeclarations:
    @pytest.mark.parametrize("name", TOOLS)
    def test_each_tool_is_declared_as_unwrapped(self, name: str) -> None:
        """ADK declares the wrapped tool exactly as it declares the plain method."""
        orders = Orders()
        with Sagacity.from_url("memory://") as sagacity:
            (tool,) = [t for t in function_tools(sagacity, orders) if t.name == name]
        plain = FunctionTool(getattr(orders, name))
        assert isinstance(tool, FunctionTool)
        assert tool._get_declaration() == plain._get_declaration()

    def test_a_tool_taking_adks_context_is_declared_without_it(self) -> None:
        """A tool's own `ToolContext` parameter stays out of the declaration, as ADK leaves it."""
        notes = Notes()
        with Sagacity.from_url("memory://") as sagacity:
            (tool,) = function_tools(sagacity, notes)
        declaration = tool._get_declaration()
        assert declaration == FunctionTool(notes.note)._get_declaration()
        assert declaration is not None
        assert isinstance(declaration.parameters_json_schema, dict)
        assert list(declaration.parameters_json_schema["properties"]) == ["text"]


class TestCalls:
    async def test_the_tool_gets_adks_context_and_the_journal_leaves_it_out(
        self, sagacity: Sagacity
    ) -> None:
        """The context reaches the tool; the journaled input is the model's arguments alone.

        The tool's write to the session state lands in the session.
        """
        notes = Notes()
        desk = Desk(
            scripted([("note", "n-1", {"text": "fragile"})]), function_tools(sagacity, notes)
        )
        session = await desk.new_session()

        result = await sagacity.asaga("note-1", lambda: desk.turn(session, "note it"))

        assert result.outcome is SagaOutcome.COMPLETED
        assert [c.function_call_id for c in notes.contexts] == ["n-1"]
        assert (await desk.session(session)).state["note"] == "fragile"
        assert sagacity.history("note-1")[0].payload["input"] == {"text": "fragile"}

    async def test_outside_a_saga_compensable_tools_run_straight_through(self) -> None:
        """No saga open: a COMPENSATABLE tool runs unjournaled, with no call in scope."""
        orders = Orders()
        with Sagacity.from_url("memory://") as sagacity:
            desk = Desk(
                scripted([("reserve_inventory", "c-1", {"sku": "SKU-1"})]),
                function_tools(sagacity, orders),
            )
            session = await desk.new_session()
            events = await desk.turn(session, "reserve")
        assert final_text(events) == "done"
        assert orders.log == ["reserve SKU-1 x1"]
        assert orders.seen["reserve_inventory SKU-1"] is None

    async def test_outside_a_saga_an_irreversible_call_never_runs(self) -> None:
        """No saga open: ADK holds the wire for confirmation; a confirmation raises NoSagaError."""
        orders = Orders()
        with Sagacity.from_url("memory://") as sagacity:
            desk = Desk(
                scripted([("send_wire_transfer", "w-1", {"amount": "5.00", "to": "ACME"})]),
                function_tools(sagacity, orders),
            )
            session = await desk.new_session()
            await desk.turn(session, "wire")
            message = confirmation_message(await desk.session(session), "w-1")
            with pytest.raises(NoSagaError, match="'send_wire_transfer' is IRREVERSIBLE"):
                await desk.turn(session, message)
        assert orders.calls["send_wire_transfer"] == 0

    async def test_confirming_a_call_adk_never_paused_names_it(self, sagacity: Sagacity) -> None:
        """`confirmation_message` for a call with no confirmation request: ApprovalNotFoundError."""
        desk = Desk(scripted(), function_tools(sagacity, Orders()))
        session = await desk.new_session()
        with pytest.raises(ApprovalNotFoundError, match="'call-9'"):
            confirmation_message(await desk.session(session), "call-9")

    def test_as_function_tool_takes_one_wrapped_tool(self) -> None:
        """`as_function_tool` turns one `SagaTool` into a `FunctionTool` of the same name."""
        with Sagacity.from_url("memory://") as sagacity:
            (tool,) = [t for t in sagacity.wrap(Orders()) if t.name == "ship"]
            built = as_function_tool(tool)
        assert (built.name, built.description) == ("ship", "Hand the parcel to the courier.")


class TestSyncRunner:
    def test_runner_run_inside_a_sync_saga_is_journaled(self, sqlite_url: str) -> None:
        """ADK's sync `Runner.run` inside `Sagacity.saga`: journaled, and compensated.

        ADK runs the agent on a thread of its own, with the caller's context copied.
        """
        orders = Orders(ship_fails=True)
        with Sagacity.from_url(sqlite_url) as sagacity:
            desk = Desk(
                scripted(
                    [("reserve_inventory", "s-1", {"sku": "SKU-1"})],
                    [("ship", "s-2", {"order_id": "o-1"})],
                ),
                function_tools(sagacity, orders),
                plugins=[SwallowErrors()],
            )
            session = asyncio.run(desk.new_session())
            message = types.Content(role="user", parts=[types.Part.from_text(text="ship")])

            result = sagacity.saga(
                "sync-1",
                lambda: list(
                    desk.runner.run(user_id=USER, session_id=session, new_message=message)
                ),
            )

            assert result.outcome is SagaOutcome.COMPENSATED
            assert orders.log == ["reserve SKU-1 x1", "release res-SKU-1-1"]
            assert [p[0] for p in phases(sagacity.history("sync-1"))][:4] == [
                "INTENT",
                "EXECUTED",
                "INTENT",
                "FAILED",
            ]


class TestJoinAcrossRequests:
    async def test_one_saga_over_three_requests_of_one_session(self, shared_store_url: str) -> None:
        """Each user turn joins the saga by id (`Sagacity.join`), in two processes' stead.

        The last turn fails; ending the saga undoes what all the turns did, in reverse.
        """
        orders = Orders(ship_fails=True)
        model = scripted(
            [("reserve_inventory", "t1-1", {"sku": "SKU-1"})],
            "reserved",
            [("charge_card", "t2-1", {"amount": "40.00", "card": "4242"})],
            "charged",
            [("ship", "t3-1", {"order_id": "o-1"})],
        )
        with Sagacity.from_url(shared_store_url) as first:
            desk = Desk(model, function_tools(first, orders))
            session = await desk.new_session()
            with first.join("conv-1") as scope, scope.entered():
                assert final_text(await desk.turn(session, "reserve")) == "reserved"
        with Sagacity.from_url(shared_store_url) as second:
            desk.agent.tools = list(function_tools(second, orders))
            with second.join("conv-1") as scope, scope.entered():
                assert final_text(await desk.turn(session, "charge")) == "charged"
            with (
                pytest.raises(RuntimeError, match="courier down"),
                second.join("conv-1") as scope,
                scope.entered(),
            ):
                await desk.turn(session, "ship")

            ended = await second.acompensate("conv-1")

            assert ended.outcome is SagaOutcome.COMPENSATED
            assert orders.log == [
                "reserve SKU-1 x1",
                "charge 40.00",
                "refund ch-40.00",
                "release res-SKU-1-1",
            ]
            assert [p for p in phases(second.history("conv-1")) if p[0] != "COMPENSATING"] == [
                ("INTENT", "reserve_inventory", "t1-1"),
                ("EXECUTED", "reserve_inventory", "t1-1"),
                ("INTENT", "charge_card", "t2-1"),
                ("EXECUTED", "charge_card", "t2-1"),
                ("INTENT", "ship", "t3-1"),
                ("FAILED", "ship", "t3-1"),
                ("COMPENSATED", "charge_card", "t2-1"),
                ("COMPENSATED", "reserve_inventory", "t1-1"),
                ("ENDED", None, None),
            ]
        assert current_call() is None


class TestCallIds:
    async def test_a_call_the_model_sent_without_an_id_gets_adks_id(
        self, sagacity: Sagacity
    ) -> None:
        """ADK gives an id-less call an `adk-…` id, stored in the session: that is the call id."""
        orders = Orders()
        desk = Desk(
            scripted([("reserve_inventory", "", {"sku": "SKU-1"})]),
            function_tools(sagacity, orders),
        )
        session = await desk.new_session()

        await sagacity.asaga("ids-1", lambda: desk.turn(session, "reserve"))

        (intent, _, _) = sagacity.history("ids-1")
        assert intent.call_id is not None
        assert intent.call_id.startswith("adk-")
        stored = [
            call.id
            for event in (await desk.session(session)).events
            for call in event.get_function_calls()
        ]
        assert stored == [intent.call_id]
        seen = orders.seen["reserve_inventory SKU-1"]
        assert seen is not None
        assert seen.call_id == intent.call_id

    async def test_a_hostile_call_id_is_refused_and_nothing_runs(self, sagacity: Sagacity) -> None:
        """A model's call id holding a newline and a bidi control: REFUSED, the tool not run.

        The saga fails on it and ends COMPENSATED, naming the character.
        """
        orders = Orders()
        desk = Desk(
            scripted([("reserve_inventory", "evil\u202eid\n", {"sku": "SKU-1"})]),
            function_tools(sagacity, orders),
        )
        session = await desk.new_session()

        result = await sagacity.asaga("ids-2", lambda: desk.turn(session, "reserve"))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert orders.log == []
        assert phases(sagacity.history("ids-2")) == [
            ("REFUSED", "reserve_inventory", None),
            ("ENDED", None, None),
        ]
        assert "U+000A" in str(result.error)


class TestDoc:
    def test_the_page_names_the_pinned_range(self) -> None:
        """docs/integrations/adk.md states the range the extra pins."""
        root = Path(__file__).resolve().parents[3]
        pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
        (pinned,) = re.findall(r'^adk = \["google-adk(.*)"\]$', pyproject, re.M)
        page = (root / "docs" / "integrations" / "adk.md").read_text(encoding="utf-8")
        assert f"`{pinned}`" in page
