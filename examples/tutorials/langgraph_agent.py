"""Tutorial 4a: a LangGraph agent whose approval is given, and resumed, in other processes.

Run it with `python examples/tutorials/langgraph_agent.py` (needs `sagacity[langchain]`).
A scripted chat model plays the agent, so no API key is needed. Three processes share
two SQLite files: sagacity's journal and LangGraph's checkpoints (`SqliteSaver`):

1. the agent's process runs an order whose shipping fails (LangChain hands the error to
   the model, which says "done"; the saga is COMPENSATED anyway), then a wire transfer
   that pauses the graph with `interrupt()` and exits;
2. a human approves the request with `sagacity approve`;
3. a worker resumes the graph thread from the checkpoint with `Command(resume=True)`:
   the wire transfer runs once, and the model gives its answer.

With `InMemorySaver` instead, step 3 would find no thread: sagacity warns about that
(`InMemoryCheckpointerWarning`) at the pause.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
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
        print(f"  WIRE SENT: {amount} to {to}")
        return f"wire-{amount}-{to}"


class ScriptedModel(GenericFakeChatModel):
    """LangChain's own fake chat model, answering with the turns it is given."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        return self


def turn(name: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


def build_agent(sagacity: Sagacity, saver: SqliteSaver, *turns: AIMessage | str) -> Any:
    model = ScriptedModel(messages=iter(turns))
    # For a real model, replace the line above with (needs langchain-openai):
    # model = langchain.chat_models.init_chat_model("openai:gpt-4.1")
    return create_agent(
        model,
        langchain_tools(sagacity, Shop()),
        # Hands tool errors to the model, which carries on: only the journal knows.
        middleware=[ToolErrorMiddleware(on_error=lambda error, request: f"failed: {error}")],
        checkpointer=saver,  # persistent: another process resumes the thread
    )


def agent(folder: str) -> None:
    """Process 1: a failed order, then a wire transfer that pauses the graph."""
    sagacity = Sagacity.from_url(f"sqlite:///{folder}/sagacity.db")
    with SqliteSaver.from_conn_string(f"{folder}/checkpoints.db") as saver:
        graph = build_agent(
            sagacity,
            saver,
            turn("reserve_inventory", "call-1", sku="SKU-42", qty=2),
            turn("ship_order", "call-2", address="1 Main St"),
            "All done: your order is on its way.",
            turn("send_wire_transfer", "call-3", amount="250.00", to="ACME"),
        )
        order: Any = {"configurable": {"thread_id": "order-1001"}}
        result = sagacity.saga(
            "order-1001", lambda: graph.invoke({"messages": [("user", "Ship 1001")]}, order)
        )
        print(f"  the model said {result.value['messages'][-1].content!r}")
        print(f"  order-1001: {result.outcome.name}")

        wire: Any = {"configurable": {"thread_id": "wire-1002"}}
        paused = sagacity.saga(
            "wire-1002", lambda: graph.invoke({"messages": [("user", "Pay ACME")]}, wire)
        )
        (interrupt,) = paused.value["__interrupt__"]
        asked = interrupt.value  # what the approver must see: tool, input, hash, request id
        print(f"  wire-1002: {paused.outcome.name}: {asked['tool_name']} {asked['input']}")
        print(f"  sha256 {asked['input_sha256']}")
    sagacity.close()


def resume(folder: str) -> None:
    """Process 3: the same graph, built anew on the same checkpoints, resumes the thread."""
    sagacity = Sagacity.from_url(f"sqlite:///{folder}/sagacity.db")
    with SqliteSaver.from_conn_string(f"{folder}/checkpoints.db") as saver:
        graph = build_agent(sagacity, saver, "The wire transfer is sent.")
        wire: Any = {"configurable": {"thread_id": "wire-1002"}}
        print(f"  the thread waits on: {graph.get_state(wire).interrupts[0].value['tool_name']}")
        result = sagacity.resume_saga("wire-1002", lambda: graph.invoke(Command(resume=True), wire))
        print(f"  the model said {result.value['messages'][-1].content!r}")
        print(f"  wire-1002: {result.outcome.name}")
        for entry in sagacity.history("wire-1002"):
            print(f"    {entry.seq} {entry.phase.name:<17} {entry.call_id or ''}")
    sagacity.close()


def run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    print(done.stdout, end="")
    return done.stdout


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        print("process 1, the agent:")
        sha256 = run(sys.executable, __file__, "agent", folder).split("sha256 ")[1].split()[0]
        print("a human approves what they reviewed:")
        database = f"sqlite:///{Path(folder, 'sagacity.db')}"
        run(
            sys.executable, "-m", "sagacity.cli", "approve", "wire-1002",
            "--approver", "alice@treasury", "--sha256", sha256, "--database", database,
        )  # fmt: skip
        print("process 3, a worker resumes the thread:")
        run(sys.executable, __file__, "resume", folder)


if __name__ == "__main__":
    if sys.argv[1:2] == ["agent"]:
        agent(sys.argv[2])
    elif sys.argv[1:2] == ["resume"]:
        resume(sys.argv[2])
    else:
        main()
