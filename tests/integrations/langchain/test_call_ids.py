"""A tool-call id names one call: reused for two calls in a turn, or for a swapped tool, refused."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from sagacity import (
    ApprovalHashMismatchError,
    ApprovalToolMismatchError,
    ReplayMismatchError,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
)
from sagacity.audit import verify
from sagacity.integrations.langchain import langchain_tools
from tests.integrations.langchain._agents import (
    AsyncOrderTools,
    GraphRun,
    OrderTools,
    build_graph,
    calls,
    input_sha256,
    journal_of,
    scripted,
    tool_call,
    tool_messages,
)

REQUEST = {"messages": [HumanMessage("Pay ACME and BETA by wire.")]}
WIRE_A = {"amount": "250.00", "to": "ACME"}
WIRE_B = {"amount": "75.00", "to": "BETA"}
WIRE_TURN = calls(tool_call("send_wire_transfer", "call-9", **WIRE_A))
TWO_WIRES_ONE_ID = calls(
    tool_call("send_wire_transfer", "call-9", **WIRE_A),
    tool_call("send_wire_transfer", "call-9", **WIRE_B),
)
TWICE = "tool-call id 'call-9' was given to two calls in one run"


class Accounts:
    """Another IRREVERSIBLE tool, to swap in under an approved wire's call id."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def close_account(self, account: str) -> str:
        """Close a customer's account for good."""
        self.ran.append(("close_account", account))
        return f"closed-{account}"


class AsyncAccounts:
    """The same tool, async."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    async def close_account(self, account: str) -> str:
        """Close a customer's account for good."""
        await asyncio.sleep(0)
        self.ran.append(("close_account", account))
        return f"closed-{account}"


class Shop:
    """The order tools and the account tools of one flavour, and what ran of both."""

    def __init__(self, sagacity: Sagacity, is_async: bool) -> None:
        self.orders = AsyncOrderTools() if is_async else OrderTools()
        self.accounts = AsyncAccounts() if is_async else Accounts()
        self.tools = langchain_tools(sagacity, self.orders, self.accounts)

    @property
    def ran(self) -> list[tuple[str, Any]]:
        return [*self.orders.ran, *self.accounts.ran]


def make_run(
    sagacity: Sagacity,
    flavour: tuple[str, bool],
    *turns: AIMessage | str,
    shop: Shop | None = None,
    **options: Any,
) -> tuple[GraphRun, Shop]:
    graph_kind, is_async = flavour
    shop = shop or Shop(sagacity, is_async)
    graph = build_graph(graph_kind, scripted(*turns), shop.tools)
    return GraphRun(sagacity, graph, is_async=is_async, **options), shop


def refused_payloads(sagacity: Sagacity, saga_id: str) -> list[dict[str, Any]]:
    return [e.payload for e in sagacity.history(saga_id) if e.phase.name == "REFUSED"]


class TestOneIdForTwoCalls:
    @pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
    async def test_create_agent_asks_for_the_first_wire_and_refuses_the_second(
        self, stores: tuple[Sagacity, Sagacity], is_async: bool
    ) -> None:
        """Two wires of one turn under one id: one request, for the first; the second refused.

        The second is refused before anything of it runs, journaled REFUSED with its own
        input's hash, and the saga raises the refusal. The request shown is the first
        wire's alone: approved, it runs once, and the second never does.
        """
        sagacity, approver = stores
        run, shop = make_run(
            sagacity, ("create_agent", is_async), TWO_WIRES_ONE_ID, "Sent.", max_concurrency=1
        )

        with pytest.raises(ReplayMismatchError, match=TWICE):
            await run.start("dup-1", REQUEST)

        assert shop.ran == []
        assert journal_of(sagacity, "dup-1") == [
            ("AWAITING_APPROVAL", "send_wire_transfer", "call-9"),
            ("REFUSED", "send_wire_transfer", "call-9"),
        ]
        (refused,) = refused_payloads(sagacity, "dup-1")
        assert (refused["reason"], refused["request_id"], refused["input_sha256"]) == (
            "duplicate_call_id",
            None,
            input_sha256(WIRE_B),
        )
        (request,) = approver.pending("dup-1")
        assert (request.input, request.state) == (WIRE_A, "waiting")
        assert [i.value["request_id"] for i in run.interrupts()] == [request.request_id]

        approver.approve("dup-1", approver="alice", expected_sha256=input_sha256(WIRE_A))
        result = await run.resume("dup-1", True)

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.ran == [("send_wire_transfer", ("250.00", "ACME"))]
        (sent, refused_message) = tool_messages(result.value)
        assert sent == ("call-9", "success", "wire-250.00-ACME")
        assert refused_message[:2] == ("call-9", "error")
        assert refused_message[2].startswith(f"failed: saga 'dup-1': {TWICE}")
        assert [phase for phase, _, _ in journal_of(sagacity, "dup-1")] == [
            "AWAITING_APPROVAL",
            "REFUSED",
            "APPROVED",
            "INTENT",
            "EXECUTED",
            "ENDED",
        ]
        assert verify(sagacity.journal, "dup-1").ok

    async def test_a_tool_node_refuses_the_second_wire_on_every_run(
        self, stores: tuple[Sagacity, Sagacity]
    ) -> None:
        """A hand-built ToolNode runs both calls again on resume: the second is refused again.

        The first wire, approved, runs once; the second, under the same id, never runs and
        each refusal is journaled.
        """
        sagacity, approver = stores
        run, shop = make_run(sagacity, ("tool_node", True), TWO_WIRES_ONE_ID, "Sent.")

        with pytest.raises(ReplayMismatchError, match=TWICE):
            await run.start("dup-2", REQUEST)
        (request,) = approver.pending("dup-2")
        assert request.input == WIRE_A
        approver.approve("dup-2", approver="alice")

        with pytest.raises(ReplayMismatchError, match=TWICE):
            await run.resume("dup-2", True)

        assert shop.ran == [("send_wire_transfer", ("250.00", "ACME"))]
        assert [phase for phase, _, _ in journal_of(sagacity, "dup-2")] == [
            "AWAITING_APPROVAL",
            "REFUSED",
            "APPROVED",
            "INTENT",
            "REFUSED",
            "EXECUTED",
        ]
        assert [p["input_sha256"] for p in refused_payloads(sagacity, "dup-2")] == [
            input_sha256(WIRE_B),
            input_sha256(WIRE_B),
        ]

    async def test_a_sync_tool_node_never_runs_the_second_wire(
        self, stores: tuple[Sagacity, Sagacity]
    ) -> None:
        """Under `invoke` the threads decide which wire asks first; only that one ever runs.

        Whichever call of the id is journaled first owns it: one request is shown, for its
        input alone, and the other call is refused on every run, by the duplicate check or
        by the approval check of the request it does not match. (A refusal that pauses the
        node may cancel the owner before it starts: it runs on a later resume.)
        """
        sagacity, approver = stores
        run, shop = make_run(sagacity, ("tool_node", False), TWO_WIRES_ONE_ID, "Sent.")

        refused: str | None = None
        try:
            await run.start("dup-3", REQUEST)
        except ReplayMismatchError as refusal:
            refused = str(refusal)
        assert refused is None or TWICE in refused
        (request,) = approver.pending("dup-3")
        assert request.input in (WIRE_A, WIRE_B)
        approver.approve("dup-3", approver="alice")

        for _ in range(3):
            with pytest.raises((ReplayMismatchError, ApprovalHashMismatchError)):
                await run.resume("dup-3", True)
            if shop.ran:
                break

        ran = (request.input["amount"], request.input["to"])
        assert shop.ran == [("send_wire_transfer", ran)]
        intents = [e for e in sagacity.history("dup-3") if e.phase.name == "INTENT"]
        assert [e.payload["input"] for e in intents] == [request.input]
        assert {p["input_sha256"] for p in refused_payloads(sagacity, "dup-3")} == {
            input_sha256(WIRE_B if request.input == WIRE_A else WIRE_A)
        }

    async def test_two_reservations_under_one_id_run_once(self, sqlite_url: str) -> None:
        """Not only approvals: a second compensable call under a used id is refused too.

        The first reservation runs; the second is refused instead of replaying the
        first's result; the saga raises the refusal and stays open to be compensated.
        """
        sagacity = Sagacity.from_url(sqlite_url)
        turn = calls(
            tool_call("reserve_inventory", "call-1", sku="SKU-1", qty=1),
            tool_call("reserve_inventory", "call-1", sku="SKU-2", qty=5),
        )
        run, shop = make_run(
            sagacity, ("create_agent", False), turn, "Reserved.", max_concurrency=1
        )

        with pytest.raises(ReplayMismatchError, match="tool-call id 'call-1' was given"):
            await run.start("dup-4", REQUEST)

        assert shop.ran == [("reserve_inventory", ("SKU-1", 1))]
        assert journal_of(sagacity, "dup-4") == [
            ("INTENT", "reserve_inventory", "call-1"),
            ("EXECUTED", "reserve_inventory", "call-1"),
            ("REFUSED", "reserve_inventory", "call-1"),
        ]
        undone = sagacity.compensate("dup-4")
        assert undone.outcome is SagaOutcome.COMPENSATED
        assert shop.orders.undone == [("release_inventory", "res-SKU-1-1")]
        sagacity.close()


SWAPS = {
    "irreversible": ("close_account", {"account": "ACME-1"}),
    "compensable": ("reserve_inventory", {"sku": "SKU-9", "qty": 1}),
}


class TestToolSwap:
    @pytest.mark.parametrize("swap", sorted(SWAPS))
    async def test_another_tool_edited_into_the_paused_call_is_refused(
        self, stores: tuple[Sagacity, Sagacity], flavour: tuple[str, bool], swap: str
    ) -> None:
        """The paused wire swapped for another tool with `update_state`: refused, not run.

        The approval names the wire; the other tool under its call id is refused before
        it runs, journaled REFUSED (tool_mismatch), and the approved request stays as it
        was, for the wire alone.
        """
        sagacity, approver = stores
        run, shop = make_run(sagacity, flavour, WIRE_TURN, "Done.")
        first = await run.start("swap-1", REQUEST)
        (request,) = approver.pending("swap-1")
        approver.approve("swap-1", approver="alice", expected_sha256=request.input_sha256)
        (asked,) = [m for m in first.value["messages"] if getattr(m, "tool_calls", None)]
        name, args = SWAPS[swap]
        edited = calls(tool_call(name, "call-9", **args))
        edited.id = asked.id
        run.graph.update_state(run.config, {"messages": [edited]})

        with pytest.raises(ApprovalToolMismatchError, match="was asked for tool"):
            await run.resume("swap-1", True)

        assert shop.ran == []
        assert journal_of(sagacity, "swap-1") == [
            ("AWAITING_APPROVAL", "send_wire_transfer", "call-9"),
            ("APPROVED", "send_wire_transfer", "call-9"),
            ("REFUSED", name, "call-9"),
        ]
        (refused,) = refused_payloads(sagacity, "swap-1")
        assert (refused["reason"], refused["request_id"]) == ("tool_mismatch", request.request_id)
        assert [(r.tool_name, r.state) for r in approver.pending("swap-1")] == [
            ("send_wire_transfer", "approved")
        ]

    @pytest.mark.parametrize("swap", sorted(SWAPS))
    async def test_a_fresh_run_reusing_the_approved_id_for_another_tool_is_refused(
        self, stores: tuple[Sagacity, Sagacity], flavour: tuple[str, bool], swap: str
    ) -> None:
        """A new graph run in the saga calls another tool under the approved wire's id.

        It is refused and journaled REFUSED; nothing runs. The approval still belongs to
        the wire: resuming the paused thread runs it once.
        """
        sagacity, approver = stores
        run, shop = make_run(sagacity, flavour, WIRE_TURN, "Sent.")
        await run.start("swap-2", REQUEST)
        approver.approve("swap-2", approver="alice")
        name, args = SWAPS[swap]
        fresh, _ = make_run(
            sagacity,
            flavour,
            calls(tool_call(name, "call-9", **args)),
            "Done.",
            shop=shop,
            thread_id="thread-2",
        )

        with pytest.raises(ApprovalToolMismatchError, match="was asked for tool"):
            await fresh.run_in("swap-2", REQUEST)

        assert shop.ran == []
        assert [(r["reason"], r["request_id"]) for r in refused_payloads(sagacity, "swap-2")] == [
            ("tool_mismatch", approver.pending("swap-2")[0].request_id)
        ]

        result = await run.resume("swap-2", True)

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.ran == [("send_wire_transfer", ("250.00", "ACME"))]

    async def test_a_later_turn_reusing_the_id_of_the_wire_is_refused(
        self, stores: tuple[Sagacity, Sagacity], flavour: tuple[str, bool]
    ) -> None:
        """The model's next turn reuses the id of the wire that just ran, for another tool.

        In the same run of the graph it is the second call under one id: refused and
        journaled REFUSED before it runs; the framework tells the model and the saga raises.
        """
        sagacity, approver = stores
        reuse = calls(tool_call("reserve_inventory", "call-9", sku="SKU-9", qty=1))
        run, shop = make_run(sagacity, flavour, WIRE_TURN, reuse, "Done.")
        await run.start("swap-3", REQUEST)
        approver.approve("swap-3", approver="alice")

        with pytest.raises(ReplayMismatchError, match=TWICE):
            await run.resume("swap-3", True)

        assert shop.ran == [("send_wire_transfer", ("250.00", "ACME"))]
        assert journal_of(sagacity, "swap-3") == [
            ("AWAITING_APPROVAL", "send_wire_transfer", "call-9"),
            ("APPROVED", "send_wire_transfer", "call-9"),
            ("INTENT", "send_wire_transfer", "call-9"),
            ("EXECUTED", "send_wire_transfer", "call-9"),
            ("REFUSED", "reserve_inventory", "call-9"),
        ]

    async def test_a_fresh_run_reusing_the_id_of_the_wire_that_ran_is_refused(
        self, stores: tuple[Sagacity, Sagacity], flavour: tuple[str, bool]
    ) -> None:
        """After the approved wire ran, a new run of the saga calls another tool under its id.

        The journal holds the wire's INTENT and EXECUTED under that id: the other tool is
        refused (`ReplayMismatchError`) and does not run.
        """
        sagacity, approver = stores
        second = calls(tool_call("send_wire_transfer", "call-10", **WIRE_B))
        run, shop = make_run(sagacity, flavour, WIRE_TURN, second, "Sent.")
        await run.start("swap-4", REQUEST)
        approver.approve("swap-4", approver="alice")
        waiting = await run.resume("swap-4", True)
        assert [r.call_id for r in waiting.pending] == ["call-10"]
        reuse = calls(tool_call("reserve_inventory", "call-9", sku="SKU-9", qty=1))
        fresh, _ = make_run(sagacity, flavour, reuse, "Done.", shop=shop, thread_id="thread-2")

        with pytest.raises(ReplayMismatchError, match="was used by tool 'send_wire_transfer'"):
            await fresh.run_in("swap-4", REQUEST)

        assert shop.ran == [("send_wire_transfer", ("250.00", "ACME"))]
        assert [e for e in journal_of(sagacity, "swap-4") if e[2] == "call-9"] == [
            ("AWAITING_APPROVAL", "send_wire_transfer", "call-9"),
            ("APPROVED", "send_wire_transfer", "call-9"),
            ("INTENT", "send_wire_transfer", "call-9"),
            ("EXECUTED", "send_wire_transfer", "call-9"),
        ]
