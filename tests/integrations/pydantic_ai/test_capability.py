"""`SagaCapability`: the agent's other toolsets journaled under the saga, by policy."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import DeferredToolResults, FunctionToolset
from pydantic_ai.tools import ToolDefinition

from sagacity import (
    CompensationContext,
    ConfigurationError,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
    verify,
)
from sagacity.integrations.pydantic_ai import (
    JournalPolicy,
    SagaCapability,
    SagaToolset,
    saga_toolset,
)
from sagacity.testing import memory_sagacity
from tests.integrations.pydantic_ai._agents import (
    OrderTools,
    ScriptedModel,
    agent_with,
    call,
    journal_of,
)
from tests.integrations.pydantic_ai.test_compensation import RecoverToolErrors


class Helpdesk:
    """An upstream toolset sagacity did not wrap (as an MCP server's would be)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.recalled: list[tuple[dict[str, Any], Any]] = []

    def toolset(self) -> FunctionToolset[Any]:
        return FunctionToolset(
            [self.lookup_order, self.send_email, self.close_ticket, self.transfer_funds]
        )

    def lookup_order(self, order: str) -> str:
        """Look an order up."""
        self.calls.append("lookup_order")
        return f"{order}: paid"

    def send_email(self, to: str, body: str) -> str:
        """Send an e-mail."""
        self.calls.append("send_email")
        return "msg-1"

    def close_ticket(self, ticket: int) -> str:
        """Close a support ticket."""
        self.calls.append("close_ticket")
        if ticket < 0:
            raise RuntimeError(f"no ticket {ticket}")
        return f"closed-{ticket}"

    def transfer_funds(self, amount: str) -> str:
        """Move money between accounts."""
        self.calls.append("transfer_funds")
        return f"tx-{amount}"

    def recall_email(self, ctx: CompensationContext) -> None:
        self.recalled.append((ctx.input, ctx.result))


def capability(sagacity: Sagacity, desk: Helpdesk, **options: Any) -> SagaCapability[Any]:
    return SagaCapability(
        sagacity,
        compensations={"send_email": desk.recall_email},
        irreversible=["transfer_funds"],
        read_only=["lookup_order"],
        **options,
    )


class TestForeignTools:
    async def test_foreign_tools_are_journaled_as_the_policy_says(self, sagacity: Sagacity) -> None:
        """Each tool of another toolset is journaled as the policy says.

        Read-only: not journaled. Given a compensation: undone with the exact input and result.
        Unlisted, with `unlisted=COMPENSATABLE`: journaled, and left dirty
        (COMPENSATION_FAILED) when the saga fails. A saga_toolset tool under the capability
        is journaled once, as declared.
        """
        desk, shop = Helpdesk(), OrderTools()
        model = ScriptedModel(
            [call("lookup_order", "c-1", order="o-7")],
            [call("reserve_inventory", "c-2", sku="SKU-1")],
            [call("send_email", "c-3", to="ann@example.com", body="shipped")],
            [call("close_ticket", "c-4", ticket=42)],
            [call("ship_order", "c-5", address="1 Main St")],
            "All done.",
        )
        agent = agent_with(
            model,
            desk.toolset(),
            saga_toolset(sagacity, shop),
            capabilities=[capability(sagacity, desk, unlisted=Reversibility.COMPENSATABLE)],
        )

        result = await sagacity.asaga("desk-1", lambda: agent.run("Handle ticket 42."))

        assert desk.calls == ["lookup_order", "send_email", "close_ticket"]
        assert journal_of(sagacity, "desk-1") == [
            ("INTENT", "reserve_inventory", "c-2"),
            ("EXECUTED", "reserve_inventory", "c-2"),
            ("INTENT", "send_email", "c-3"),
            ("EXECUTED", "send_email", "c-3"),
            ("INTENT", "close_ticket", "c-4"),
            ("EXECUTED", "close_ticket", "c-4"),
            ("INTENT", "ship_order", "c-5"),
            ("FAILED", "ship_order", "c-5"),
            ("COMPENSATION_FAILED", "close_ticket", "c-4"),
            ("COMPENSATING", "send_email", "c-3"),
            ("COMPENSATED", "send_email", "c-3"),
            ("COMPENSATING", "reserve_inventory", "c-2"),
            ("COMPENSATED", "reserve_inventory", "c-2"),
            ("ENDED", None, None),
        ]
        assert result.outcome is SagaOutcome.COMPENSATION_FAILED
        assert result.compensation is not None
        [dirty] = result.compensation.failed
        assert (dirty.tool_name, dirty.call_id) == ("close_ticket", "c-4")
        assert "no compensation" in (dirty.error or "")
        assert desk.recalled == [({"to": "ann@example.com", "body": "shipped"}, "msg-1")]
        assert shop.undone == [("release_inventory", "res-SKU-1-1")]
        intents = {
            e.tool_name: e.payload for e in sagacity.history("desk-1") if e.phase.name == "INTENT"
        }
        assert intents["send_email"]["reversibility"] == "COMPENSATABLE"
        assert intents["close_ticket"]["reversibility"] == "COMPENSATABLE"
        assert verify(sagacity.journal, "desk-1").ok

    @pytest.mark.parametrize("recover_first", [True, False])
    async def test_failure_another_capability_recovers_still_fails_the_saga(
        self, sagacity: Sagacity, recover_first: bool
    ) -> None:
        """A failure another capability recovers still fails the saga.

        Whatever the order of capabilities, the journal sits below their hooks: the call is
        FAILED and the saga compensates.
        """
        desk = Helpdesk()
        saga = capability(sagacity, desk, unlisted=Reversibility.COMPENSATABLE)
        recover = RecoverToolErrors()
        model = ScriptedModel(
            [call("send_email", "c-1", to="ann@example.com", body="hi")],
            [call("close_ticket", "c-2", ticket=-1)],
            "All done.",
        )
        agent = agent_with(
            model,
            desk.toolset(),
            capabilities=[recover, saga] if recover_first else [saga, recover],
        )

        result = await sagacity.asaga("desk-2", lambda: agent.run("go"))

        assert model.tool_returns()[1] == ("c-2", "success", "could not do it: no ticket -1")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert journal_of(sagacity, "desk-2")[3] == ("FAILED", "close_ticket", "c-2")
        assert desk.recalled == [({"to": "ann@example.com", "body": "hi"}, "msg-1")]

    async def test_irreversible_foreign_tool_pauses_and_runs_once_approved(
        self, sagacity: Sagacity
    ) -> None:
        """An IRREVERSIBLE tool of another toolset pauses and runs once approved.

        It pauses natively like a wrapped one and runs once, after sagacity's approval, when
        the run is resumed natively: without work the resume is refused and nothing runs.
        """
        desk = Helpdesk()
        model = ScriptedModel([call("transfer_funds", "c-1", amount="90.00")], "Moved.")
        agent = agent_with(
            model, desk.toolset(), capabilities=[capability(sagacity, desk)], deferred=True
        )
        first = await sagacity.asaga("desk-3", lambda: agent.run("Move 90."))
        assert first.outcome is SagaOutcome.AWAITING_APPROVAL
        assert (
            first.pending[0].reason
            == "transfer_funds is IRREVERSIBLE: Move money between accounts."
        )

        sagacity.approve("desk-3", approver="carol@ops")
        with pytest.raises(ConfigurationError, match="'transfer_funds'"):
            await sagacity.aresume_saga("desk-3")  # sagacity has no function to call
        assert desk.calls == []
        result = await sagacity.aresume_saga(
            "desk-3",
            lambda: agent.run(
                message_history=first.value.all_messages(),
                deferred_tool_results=DeferredToolResults(approvals={"c-1": True}),
            ),
        )

        assert result.outcome is SagaOutcome.COMPLETED
        assert desk.calls == ["transfer_funds"]
        assert [phase for phase, _, _ in journal_of(sagacity, "desk-3")] == [
            "AWAITING_APPROVAL",
            "APPROVED",
            "INTENT",
            "EXECUTED",
            "ENDED",
        ]

    async def test_unlisted_tools_wait_for_approval_by_default(self, sagacity: Sagacity) -> None:
        """By default an unlisted tool is IRREVERSIBLE: a tool nobody declared waits for approval.

        It has no compensation, so the core's rule applies: it must not run unapproved.
        """
        desk = Helpdesk()
        model = ScriptedModel([call("close_ticket", "c-1", ticket=3)])
        agent = agent_with(
            model, desk.toolset(), capabilities=[SagaCapability(sagacity)], deferred=True
        )

        result = await sagacity.asaga("desk-4", lambda: agent.run("go"))

        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        assert desk.calls == []
        assert journal_of(sagacity, "desk-4") == [("AWAITING_APPROVAL", "close_ticket", "c-1")]
        assert result.pending[0].reason == "close_ticket is IRREVERSIBLE: Close a support ticket."
        assert JournalPolicy(memory_sagacity()).unlisted is Reversibility.IRREVERSIBLE

    async def test_policy_names_are_the_names_the_model_calls(self, sagacity: Sagacity) -> None:
        """The policy's names are the names the model calls.

        The capability wraps the assembled toolset, so a prefixed toolset's tools are declared
        and journaled by their prefixed names.
        """
        desk = Helpdesk()
        saga = SagaCapability(
            sagacity,
            compensations={"desk_send_email": desk.recall_email},
            unlisted=Reversibility.COMPENSATABLE,
        )
        model = ScriptedModel(
            [call("desk_send_email", "c-1", to="ann@example.com", body="hi")],
            [call("desk_close_ticket", "c-2", ticket=-5)],
        )
        agent = agent_with(model, desk.toolset().prefixed("desk"), capabilities=[saga])

        result = await sagacity.asaga("desk-5", lambda: agent.run("go"))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert journal_of(sagacity, "desk-5")[:4] == [
            ("INTENT", "desk_send_email", "c-1"),
            ("EXECUTED", "desk_send_email", "c-1"),
            ("INTENT", "desk_close_ticket", "c-2"),
            ("FAILED", "desk_close_ticket", "c-2"),
        ]
        assert len(desk.recalled) == 1

    async def test_one_toolset_under_the_saga_without_the_capability(
        self, sagacity: Sagacity
    ) -> None:
        """`SagaToolset` with a `JournalPolicy` puts just one toolset under the saga."""
        desk = Helpdesk()
        policy = JournalPolicy(
            sagacity,
            compensations={"send_email": desk.recall_email},
            read_only=["lookup_order"],
            unlisted=Reversibility.COMPENSATABLE,
        )
        model = ScriptedModel(
            [call("lookup_order", "c-1", order="o-1")],
            [call("send_email", "c-2", to="ann@example.com", body="hi")],
            [call("close_ticket", "c-3", ticket=-1)],
        )
        agent = agent_with(model, SagaToolset(desk.toolset(), policy))

        result = await sagacity.asaga("desk-6", lambda: agent.run("go"))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert journal_of(sagacity, "desk-6") == [
            ("INTENT", "send_email", "c-2"),
            ("EXECUTED", "send_email", "c-2"),
            ("INTENT", "close_ticket", "c-3"),
            ("FAILED", "close_ticket", "c-3"),
            ("COMPENSATING", "send_email", "c-2"),
            ("COMPENSATED", "send_email", "c-2"),
            ("ENDED", None, None),
        ]


class TestJournalPolicy:
    def test_a_tool_declared_twice_is_refused(self) -> None:
        """One tool, one declaration: naming it in two lists is a ConfigurationError."""
        with pytest.raises(ConfigurationError, match="'send_email' is declared twice"):
            JournalPolicy(
                memory_sagacity(),
                compensations={"send_email": lambda: None},
                read_only=["send_email"],
            )

    def test_a_compensation_with_the_wrong_signature_is_refused_at_once(self) -> None:
        """The compensation is checked when the policy is built, not when a refund is due."""

        def recall(ctx: CompensationContext, extra: int) -> None: ...

        with pytest.raises(ConfigurationError, match="no arguments or one CompensationContext"):
            SagaCapability(memory_sagacity(), compensations={"send_email": recall})

    def test_a_compensated_name_must_be_a_sagacity_tool_name(self) -> None:
        """Compensations are kept under sagacity tool names: the error says how to rename.

        MCP allows '/' in a name, sagacity does not; '-' and '.' are fine.
        """
        with pytest.raises(ConfigurationError, match=r"'mail/send'.*toolset\.renamed"):
            JournalPolicy(memory_sagacity(), compensations={"mail/send": lambda: None})

        policy = JournalPolicy(memory_sagacity(), compensations={"send-email.v2": lambda: None})
        tool = policy.tool_for("send-email.v2", ToolDefinition(name="send-email.v2"))
        assert tool is not None
        assert tool.reversibility is Reversibility.COMPENSATABLE

    def test_building_the_capability_again_keeps_its_compensation(self) -> None:
        """A second capability with the same compensation is fine; another is refused.

        Another agent or a copy may declare it again; another compensation for the same tool
        name is refused.
        """
        sagacity, desk = memory_sagacity(), Helpdesk()
        SagaCapability(sagacity, compensations={"send_email": desk.recall_email})
        SagaCapability(sagacity, compensations={"send_email": desk.recall_email})

        with pytest.raises(ConfigurationError, match="already wrapped"):
            SagaCapability(sagacity, compensations={"send_email": lambda: None})

    def test_a_compensated_name_may_not_shadow_a_wrapped_tool(self) -> None:
        """A foreign tool may not take the name of a tool `Sagacity.wrap` declared."""
        sagacity = memory_sagacity()
        saga_toolset(sagacity, OrderTools())

        with pytest.raises(ConfigurationError, match="'reserve_inventory' is already wrapped"):
            SagaCapability(sagacity, compensations={"reserve_inventory": lambda: None})

    def test_tools_of_another_sagacity_are_refused(self) -> None:
        """A SagaTool journals into the Sagacity that wrapped it, and no other."""
        other = memory_sagacity()
        tools = other.wrap(OrderTools())

        with pytest.raises(ConfigurationError, match="another Sagacity"):
            saga_toolset(memory_sagacity(), *tools)

    def test_wrapped_tools_may_be_given_to_saga_toolset(self) -> None:
        """`saga_toolset` takes the SagaTools `Sagacity.wrap` returned, as declared."""
        sagacity = memory_sagacity()

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def purge(path: str) -> None:
            """Delete files."""

        toolset = saga_toolset(sagacity, *sagacity.wrap(purge))

        tool = toolset.policy.tool_for("purge", ToolDefinition(name="purge"))
        assert tool is not None
        assert tool.reversibility is Reversibility.IRREVERSIBLE
