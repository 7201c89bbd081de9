"""A LangChain agent whose failed order is undone, and whose wire transfer waits for a human.

Run it with `.venv/bin/python examples/langchain_agent.py`: a scripted model plays the
agent, so no API key is needed.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import ToolErrorMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from sagacity import CompensationContext, Reversibility, Sagacity, compensable, compensation
from sagacity.integrations.langchain import langchain_tools


class Shop:
    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int) -> str:
        """Reserve stock of an item."""
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        print(f"  undo: released {ctx.result}")

    @compensable(by="refund_card")
    def charge_card(self, amount_cents: int) -> str:
        """Charge the customer's card."""
        return f"ch-{amount_cents}"

    @compensation
    def refund_card(self, ctx: CompensationContext) -> None:
        print(f"  undo: refunded {ctx.result}")

    @compensable(by="cancel_shipment")
    def ship_order(self, address: str) -> str:
        """Book the shipment."""
        raise RuntimeError("the carrier rejected the address")

    @compensation
    def cancel_shipment(self) -> None:
        print("  undo: cancelled the shipment")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        """Send money by wire; it cannot be recalled."""
        return f"wire-{amount}-{to}"


class ScriptedModel(GenericFakeChatModel):
    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        return self


def turn(name: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


def show(sagacity: Sagacity, saga_id: str) -> None:
    for entry in sagacity.history(saga_id):
        fields = [str(entry.seq), entry.phase.name, entry.tool_name, entry.call_id]
        print("  " + " ".join(field for field in fields if field))


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        sagacity = Sagacity.from_url(f"sqlite:///{folder}/sagacity.db")
        tools = langchain_tools(sagacity, Shop())
        model = ScriptedModel(
            messages=iter(
                [
                    turn("reserve_inventory", "call-1", sku="SKU-42", qty=2),
                    turn("charge_card", "call-2", amount_cents=1999),
                    turn("ship_order", "call-3", address="1 Main St"),
                    "All done: your order is on its way.",
                    turn("send_wire_transfer", "call-4", amount="250.00", to="ACME"),
                    "The wire transfer is sent.",
                ]
            )
        )
        # For a real model, replace the scripted one with (needs langchain-openai):
        # from langchain.chat_models import init_chat_model
        # model = init_chat_model("openai:gpt-4.1")
        saver = SqliteSaver(sqlite3.connect(f"{folder}/checkpoints.db", check_same_thread=False))
        agent = create_agent(  # the saver persists: another process could resume the wire
            model,
            tools,
            # Hands tool errors to the model, which carries on: only the journal knows.
            middleware=[ToolErrorMiddleware(on_error=lambda error, request: f"failed: {error}")],
            checkpointer=saver,
        )

        order: Any = {"configurable": {"thread_id": "order"}}
        result = sagacity.saga(
            "order-1001", lambda: agent.invoke({"messages": [("user", "Ship order 1001")]}, order)
        )
        print(f"order-1001: the model said {result.value['messages'][-1].content!r}")
        print(f"order-1001: {result.outcome.name}")
        show(sagacity, "order-1001")

        wire: Any = {"configurable": {"thread_id": "wire"}}
        paused = sagacity.saga(
            "wire-1002", lambda: agent.invoke({"messages": [("user", "Pay ACME")]}, wire)
        )
        (question,) = paused.value["__interrupt__"]
        request = question.value
        print(f"wire-1002: {paused.outcome.name}: {request['tool_name']} {request['input']}")
        print(f"  sha256 {request['input_sha256']}")
        sagacity.approve("wire-1002", approver="alice", expected_sha256=request["input_sha256"])
        resumed = sagacity.resume_saga(
            "wire-1002", lambda: agent.invoke(Command(resume={"approved": True}), wire)
        )
        print(f"wire-1002: {resumed.outcome.name} after alice approved")
        show(sagacity, "wire-1002")
        saver.conn.close()
        sagacity.close()


if __name__ == "__main__":
    main()
