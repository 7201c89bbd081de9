"""Tutorial: a decision in the inbox resumes a paused LangGraph agent, by itself.

Run it with `python examples/tutorials/worker_langgraph.py` (needs `sagacity[langchain,
server]`, Playwright, and Debian's chromium: `make browser`). A scripted chat model plays
the agent, so no API key is needed. Four parts share a SQLite journal and LangGraph's
SQLite checkpoints:

1. the agent holds 250.00 on the treasury account, then asks for a wire transfer, which
   pauses the graph (`interrupt()`); the graph's thread id is the saga id;
2. `sagacity serve`'s inbox (here, the same app served by uvicorn in a thread) shows the
   request; a human signs in with chromium and approves it (then, for a second order,
   rejects it);
3. `sagacity worker --app worker_langgraph:worker`, in a process of its own, holds the
   same graph and `LangGraphResumer`: the decision resumes the graph's thread with
   `Command(resume=...)`. Approved, the wire runs once, in the worker, and the agent's
   last message names the transfer id. Rejected, the worker releases the hold (the inbox
   has no tools) and the agent is told no.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.sqlite import SqliteSaver

from sagacity import CompensationContext, Reversibility, Sagacity, compensable, compensation
from sagacity.integrations.langchain import RESUMER, LangGraphResumer, langchain_tools
from sagacity.worker import Worker

HERE = Path(__file__).resolve().parent


class Treasury:
    """A hold on the treasury account (released if the payment does not go out), and a wire."""

    @compensable(by="release_hold")
    def place_hold(self, amount: str) -> str:
        """Hold an amount on the treasury account until the transfer is sent."""
        print(f"  treasury: held {amount}", flush=True)
        return f"hold-{amount}"

    @compensation
    def release_hold(self, ctx: CompensationContext) -> None:
        print(f"  treasury: released {ctx.result}", flush=True)

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        """Send money by wire transfer; it cannot be recalled."""
        print(f"  treasury: WIRED {amount} to {to}", flush=True)
        return f"TX-{to}-{amount}"


class ScriptedTeller(BaseChatModel):
    """The agent's model, scripted: a hold, then the wire, then a sentence on the outcome.

    Each turn follows from the tool messages so far, so the worker's copy of the graph
    continues the script where the paused one stopped.
    """

    @property
    def _llm_type(self) -> str:
        return "scripted-teller"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedTeller:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        answers = [m for m in messages if isinstance(m, ToolMessage)]
        if not answers:
            call = {"name": "place_hold", "args": {"amount": "250.00"}, "id": "call-hold"}
            reply = AIMessage(content="", tool_calls=[{**call, "type": "tool_call"}])
        elif len(answers) == 1:
            args = {"amount": "250.00", "to": "ACME"}
            call = {"name": "send_wire_transfer", "args": args, "id": "call-wire"}
            reply = AIMessage(content="", tool_calls=[{**call, "type": "tool_call"}])
        elif str(answers[-1].content).startswith("[REJECTED]"):
            reason = str(answers[-1].content).split("was rejected: ", 1)[1].split(".")[0]
            reply = AIMessage(content=f"I did not send the wire: it was rejected ({reason}).")
        else:
            reply = AIMessage(content=f"Done: the transfer {answers[-1].content} is on its way.")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def agent_graph(sagacity: Sagacity, checkpoints: str) -> Any:
    """The agent: the model, the treasury's tools under sagas, a checkpointer on a file."""
    saver = SqliteSaver(sqlite3.connect(checkpoints, check_same_thread=False))
    return create_agent(ScriptedTeller(), langchain_tools(sagacity, Treasury()), checkpointer=saver)


def worker() -> Worker:
    """What `sagacity worker --app worker_langgraph:worker` runs: LangGraph pauses resume."""
    sagacity = Sagacity.from_url(os.environ["SAGACITY_DATABASE_URL"])
    graph = agent_graph(sagacity, os.environ["CHECKPOINTS"])
    return Worker(sagacity, {RESUMER: LangGraphResumer(graph)}, poll_interval=0.05)


# -- the rest plays the agent's process, the inbox and the human --------------------------


def start_inbox(database: str) -> tuple[str, Any]:
    """Serve the approval inbox (what `sagacity serve` serves) on a free port."""
    import uvicorn

    from sagacity.server import Principal, TokenAuth, create_app

    ada = Principal("ada@treasury", frozenset({"approver"}))
    auth = TokenAuth.from_tokens({"ada-token": ada})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(create_app(database, auth), port=port, log_level="warning")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


def decide_in_the_browser(inbox: str, request_id: str, reject_because: str | None) -> None:
    """Ada signs in with chromium and approves (or rejects) the request on its page."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        browser = playwright.chromium.launch(
            executable_path=chromium, headless=True, args=["--no-sandbox"]
        )
        page = browser.new_page()
        page.goto(f"{inbox}/sagacity/ui/")
        page.fill("#token", "ada-token")
        page.click("button[type=submit]")
        page.wait_for_selector("text=Signed in as")
        page.goto(f"{inbox}/sagacity/ui/requests/{request_id}")
        if reject_because is None:
            page.click("#approve")
            page.wait_for_selector("text=Approved by ada@treasury")
        else:
            page.fill("#reason", reject_because)
            page.click("#reject")
            page.wait_for_selector("text=REJECTED")
        browser.close()


def wait_until_ended(sagacity: Sagacity, saga_id: str, outcome: str) -> None:
    """Wait for the saga's journal to end with `outcome` (the worker's resume is done)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ended = [e for e in sagacity.history(saga_id) if e.phase.name == "ENDED"]
        if ended and ended[-1].payload["outcome"] == outcome:
            return
        time.sleep(0.1)
    raise RuntimeError(f"saga {saga_id!r} did not end {outcome}")


def order(sagacity: Sagacity, graph: Any, saga_id: str) -> str:
    """The agent's run: it pauses on the wire; returns the request the inbox shows."""
    config: Any = {"configurable": {"thread_id": saga_id}}
    request = {"messages": [HumanMessage("Pay ACME 250.00 by wire; hold it first.")]}
    paused = sagacity.saga(saga_id, lambda: graph.invoke(request, config))
    (waiting,) = paused.pending
    print(
        f"{saga_id}: the agent paused ({paused.outcome.name}): {waiting.tool_name} {waiting.input}"
    )
    return waiting.request_id


def last_message(graph: Any, saga_id: str) -> str:
    config: Any = {"configurable": {"thread_id": saga_id}}
    return str(graph.get_state(config).values["messages"][-1].content)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        database = f"sqlite:///{folder}/sagacity.db"
        checkpoints = f"{folder}/checkpoints.db"
        sagacity = Sagacity.from_url(database)
        graph = agent_graph(sagacity, checkpoints)
        inbox, server = start_inbox(database)
        env = {
            **os.environ,
            "SAGACITY_DATABASE_URL": database,
            "CHECKPOINTS": checkpoints,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        }
        running = subprocess.Popen(
            [sys.executable, "-m", "sagacity.cli", "worker", "--app", "worker_langgraph:worker"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert running.stdout is not None
        assert "watching for decisions" in running.stdout.readline()

        print("the agent's process:")
        approved = order(sagacity, graph, "wire-7001")
        print("ada approves it in the inbox (chromium)")
        decide_in_the_browser(inbox, approved, reject_because=None)
        wait_until_ended(sagacity, "wire-7001", "COMPLETED")
        print(f"wire-7001: the agent's last message: {last_message(graph, 'wire-7001')}")

        rejected = order(sagacity, graph, "wire-7002")
        print("ada rejects it in the inbox (chromium)")
        decide_in_the_browser(inbox, rejected, reject_because="vendor not verified")
        wait_until_ended(sagacity, "wire-7002", "COMPENSATED")
        print(f"wire-7002: the agent's last message: {last_message(graph, 'wire-7002')}")

        running.send_signal(signal.SIGTERM)
        worked, _ = running.communicate(timeout=60)
        print("the worker's process:")
        for line in worked.splitlines():
            if "treasury" in line:
                print(line)
        for saga_id in ("wire-7001", "wire-7002"):
            print(f"{saga_id}'s journal:")
            for entry in sagacity.history(saga_id):
                print(f"  {entry.seq} {entry.phase.name:<17} {entry.tool_name or ''}".rstrip())
        server.should_exit = True
        sagacity.close()


if __name__ == "__main__":
    main()
