"""A scripted CrewAI model and the shop the tests' crews work in."""

from __future__ import annotations

import json
import threading
from typing import Any

from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM
from pydantic import Field

from sagacity import (
    CompensationContext,
    Reversibility,
    Sagacity,
    compensable,
    compensation,
    current_call,
)
from sagacity.integrations.crewai import crew_tools

PATHS = ["native", "react"]
"""CrewAI's two tool-calling paths: the model's native function calls, and ReAct text."""


class ScriptedLLM(BaseLLM):
    """A CrewAI model that answers from a script: tool calls, then a final answer.

    Each step is a list of `(tool, arguments)` (one model turn; several run in parallel on
    the native path) or a final answer string. On the native path the turn is a list of
    OpenAI-style tool calls with ids; on the ReAct path it is CrewAI's text format.
    """

    script: list[Any] = Field(default_factory=list)
    native: bool = True
    turns: list[str] = Field(default_factory=list)
    """The conversation the model was shown in each turn (prompts, tool results)."""

    def call(
        self,
        messages: Any,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
        **kwargs: Any,
    ) -> Any:
        if isinstance(messages, str):
            self.turns.append(messages)
        else:
            self.turns.append("\n".join(str(m.get("content")) for m in messages))
        step = self.script.pop(0)
        if isinstance(step, str):
            return step if self.native else f"Thought: I know it now\nFinal Answer: {step}"
        if self.native:
            return [
                {
                    "id": f"call_{len(self.turns)}_{n}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
                for n, (name, arguments) in enumerate(step)
            ]
        ((name, arguments),) = step  # the ReAct format has one action a turn
        return f"Thought: next step\nAction: {name}\nAction Input: {json.dumps(arguments)}"

    def supports_function_calling(self) -> bool:
        return self.native

    def supports_stop_words(self) -> bool:
        return not self.native

    def get_context_window_size(self) -> int:
        return 100_000


def crew(tools: list[Any], script: list[Any], *, path: str, **crew_options: Any) -> Crew:
    """One agent with `tools`, one task, driven by `script` on `path`."""
    llm = ScriptedLLM(model="scripted", script=list(script), native=path == "native")
    agent = Agent(
        role="clerk", goal="handle the order", backstory="a careful clerk", llm=llm, tools=tools
    )
    task = Task(description="Handle order 123.", expected_output="a short report", agent=agent)
    return Crew(agents=[agent], tasks=[task], **crew_options)


def model_of(built: Crew) -> ScriptedLLM:
    llm = built.agents[0].llm
    assert isinstance(llm, ScriptedLLM)
    return llm


class Shop:
    """Tools with effects the tests count: stock, payments, labels, wires."""

    def __init__(self) -> None:
        self.effects: list[tuple[Any, ...]] = []
        self.keys: list[str] = []
        """The idempotency key (`current_call().call_id`) each effect was handed."""
        self.lock = threading.Lock()
        self.fail_label = True
        self.label_started = threading.Event()
        self.release_label: threading.Event | None = None

    def _effect(self, *effect: Any) -> None:
        call = current_call()
        with self.lock:
            self.effects.append(effect)
            self.keys.append(call.call_id if call is not None else "-")

    @compensable(by="release_stock")
    def reserve_stock(self, sku: str, qty: int) -> str:
        """Reserve stock for an order."""
        self._effect("reserve", sku, qty)
        return f"res-{sku}-{qty}"

    @compensation
    def release_stock(self, ctx: CompensationContext) -> None:
        self._effect("release", ctx.result)

    @compensable(by="refund")
    def charge_card(self, amount: int) -> str:
        """Charge the customer's card."""
        self._effect("charge", amount)
        return f"ch-{amount}"

    @compensation
    def refund(self, ctx: CompensationContext) -> None:
        self._effect("refund", ctx.result)

    @compensable(by="void_label")
    def print_label(self, order: str) -> str:
        """Print the shipping label."""
        if self.release_label is not None:
            self.label_started.set()
            self.release_label.wait(30)
        if self.fail_label:
            raise RuntimeError("label printer offline")
        self._effect("label", order)
        return f"label-{order}"

    @compensation
    def void_label(self, ctx: CompensationContext) -> None:
        self._effect("void", ctx.result)

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire(self, amount: int, to: str) -> str:
        """Send a wire transfer."""
        self._effect("wire", amount, to)
        return f"wire-{amount}-{to}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def close_account(self, account: str) -> str:
        """Close a customer account."""
        self._effect("close", account)
        return f"closed-{account}"


def shop_tools(sagacity: Sagacity, shop: Shop, **options: Any) -> list[Any]:
    return crew_tools(sagacity, shop, **options)


def phases(sagacity: Sagacity, saga_id: str) -> list[tuple[str, str | None]]:
    """The saga's journal as (phase, call id)."""
    return [(e.phase.name, e.call_id) for e in sagacity.history(saga_id)]
