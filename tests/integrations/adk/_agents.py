"""Tools, a scripted ADK model and a session runner shared by the Google ADK tests."""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import AsyncGenerator, Sequence
from decimal import Decimal
from typing import Any

from google.adk.agents import LlmAgent, RunConfig
from google.adk.apps import App
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService, Session
from google.adk.tools import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from pydantic import PrivateAttr

from sagacity import (
    CompensationContext,
    CurrentCall,
    JournalEntry,
    Reversibility,
    compensable,
    compensation,
    current_call,
)

APP = "orders-app"
USER = "customer-1"

Call = tuple[str, str, dict[str, Any]]
"""(tool name, call id, arguments) of one function call the scripted model makes."""


class Orders:
    """An order desk with sync and async tools; every call and undo is logged."""

    def __init__(self, *, ship_fails: bool = False) -> None:
        self.log: list[str] = []
        self.started = threading.Event()
        """Set once `book_courier` or `pick` has started: a failing `label` waits for it."""
        self.picking = threading.Event()
        """Set by a failing `label` before it raises: lets a waiting `pick` finish."""
        self.calls: collections.Counter[str] = collections.Counter()
        self.seen: dict[str, CurrentCall | None] = {}
        self.ship_fails = ship_fails
        self.courier_release = asyncio.Event()

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int = 1) -> str:
        """Reserve stock for an order.

        Args:
            sku: The stock-keeping unit.
            qty: How many to reserve.
        """
        self._called("reserve_inventory", sku)
        self.log.append(f"reserve {sku} x{qty}")
        return f"res-{sku}-{qty}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        self.log.append(f"release {ctx.result}")

    @compensable(by="refund")
    async def charge_card(self, amount: str, card: str) -> str:
        """Charge the customer's card."""
        await asyncio.sleep(0)
        self._called("charge_card", amount)
        self.log.append(f"charge {amount}")
        return f"ch-{amount}"

    @compensation
    async def refund(self, ctx: CompensationContext) -> None:
        self.log.append(f"refund {ctx.result}")

    @compensable(by="cancel_shipment")
    def ship(self, order_id: str) -> str:
        """Hand the parcel to the courier."""
        self._called("ship", order_id)
        if self.ship_fails:
            raise RuntimeError("courier down")
        self.log.append(f"ship {order_id}")
        return f"sh-{order_id}"

    @compensation
    def cancel_shipment(self, ctx: CompensationContext) -> None:
        self.log.append(f"cancel {ctx.result}")

    @compensable(by="cancel_courier")
    async def book_courier(self, slot: str) -> str:
        """Book a courier for a pick-up slot; waits until the test lets it finish."""
        self._called("book_courier", slot)
        self.started.set()
        try:
            await self.courier_release.wait()
        except asyncio.CancelledError:
            self.log.append(f"courier {slot} cancelled")
            raise
        self.log.append(f"courier {slot}")
        return f"courier-{slot}"

    @compensation
    def cancel_courier(self, ctx: CompensationContext) -> None:
        self.log.append(f"cancel {ctx.result}")

    @compensable(by="unpick")
    def pick(self, sku: str) -> str:
        """Pick an item off the shelf; blocks its thread until a failing `label` lets it go."""
        self._called("pick", sku)
        self.started.set()
        assert self.picking.wait(timeout=10)
        self.log.append(f"pick {sku}")
        return f"pick-{sku}"

    @compensation
    def unpick(self, ctx: CompensationContext) -> None:
        self.log.append(f"unpick {ctx.result}")

    @compensable(by="unlabel")
    async def label(self, order_id: str) -> str:
        """Print a label; fails once the courier booking (or a pick) is under way."""
        self._called("label", order_id)
        assert await asyncio.to_thread(self.started.wait, 10)
        self.picking.set()
        raise RuntimeError("printer jammed")

    @compensation
    def unlabel(self, ctx: CompensationContext) -> None:
        self.log.append(f"unlabel {ctx.result}")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: Decimal, to: str) -> str:
        """Wire money to another bank.

        Args:
            amount: How much, in euros.
            to: The beneficiary.
        """
        self._called("send_wire_transfer", f"{amount}")
        self.log.append(f"wire {amount} to {to}")
        return f"wire-{amount}-{to}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    async def delete_account(self, account: str) -> str:
        """Close a customer's account for good."""
        await asyncio.sleep(0)
        self._called("delete_account", account)
        self.log.append(f"delete {account}")
        return f"deleted-{account}"

    def _called(self, tool: str, key: str) -> None:
        self.calls[tool] += 1
        self.seen[f"{tool} {key}"] = current_call()


class ScriptedModel(BaseLlm):
    """ADK's `BaseLlm`, answering from a script: one list of calls (or a text) per turn.

    After the script it answers "done". Each request it is sent is kept in `requests`.
    """

    model: str = "scripted"
    _turns: list[list[Call] | str] = PrivateAttr(default_factory=list)
    _requests: list[LlmRequest] = PrivateAttr(default_factory=list)

    def enqueue(self, *turns: list[Call] | str) -> ScriptedModel:
        """Add turns to the script."""
        self._turns.extend(turns)
        return self

    @property
    def requests(self) -> list[LlmRequest]:
        """The requests ADK sent, in order."""
        return self._requests

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Answer the next turn of the script."""
        self._requests.append(llm_request)
        turn = self._turns.pop(0) if self._turns else "done"
        if isinstance(turn, str):
            parts = [types.Part.from_text(text=turn)]
        else:
            parts = [
                types.Part(
                    function_call=types.FunctionCall(id=call_id or None, name=name, args=args)
                )
                for name, call_id, args in turn
            ]
        yield LlmResponse(content=types.Content(role="model", parts=parts))

    def tool_responses(self) -> dict[str, dict[str, Any]]:
        """Every function response in the last request ADK sent, by call id."""
        last = self._requests[-1]
        return {
            part.function_response.id or "": part.function_response.response or {}
            for content in last.contents
            for part in content.parts or []
            if part.function_response is not None
        }


def scripted(*turns: list[Call] | str) -> ScriptedModel:
    """A model that makes these tool calls, one list per turn, then answers "done"."""
    return ScriptedModel().enqueue(*turns)


class SwallowErrors(BasePlugin):
    """A plugin whose `on_tool_error_callback` turns every tool error into an answer."""

    def __init__(self) -> None:
        super().__init__(name="swallow_errors")
        self.errors: list[BaseException] = []

    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        """Answer the model with the error's text, as a helpful plugin would."""
        self.errors.append(error)
        return {"error": f"{type(error).__name__}: {error}"}


class Desk:
    """One agent behind ADK's real `Runner`, and its session service."""

    def __init__(
        self,
        model: BaseLlm,
        tools: Sequence[Any],
        *,
        sessions: BaseSessionService | None = None,
        plugins: Sequence[BasePlugin] = (),
    ) -> None:
        self.agent = LlmAgent(
            name="orders", model=model, instruction="Handle the order.", tools=list(tools)
        )
        self.sessions = sessions if sessions is not None else InMemorySessionService()
        self.runner = Runner(
            app=App(name=APP, root_agent=self.agent, plugins=list(plugins)),
            session_service=self.sessions,
        )

    async def new_session(self, session_id: str | None = None) -> str:
        """Create a session (of that id, if given); return its id."""
        session = await self.sessions.create_session(
            app_name=APP, user_id=USER, session_id=session_id
        )
        return session.id

    async def session(self, session_id: str) -> Session:
        """The session as the service holds it now."""
        session = await self.sessions.get_session(app_name=APP, user_id=USER, session_id=session_id)
        assert session is not None
        return session

    async def turn(
        self, session_id: str, message: str | types.Content, run_config: RunConfig | None = None
    ) -> list[Event]:
        """Run one user turn through the runner; return its events."""
        if isinstance(message, str):
            message = types.Content(role="user", parts=[types.Part.from_text(text=message)])
        return [
            event
            async for event in self.runner.run_async(
                user_id=USER, session_id=session_id, new_message=message, run_config=run_config
            )
        ]


def final_text(events: list[Event]) -> str:
    """The text of the last event that has text."""
    texts = [
        part.text
        for event in events
        if event.content is not None
        for part in event.content.parts or []
        if part.text
    ]
    return texts[-1] if texts else ""


def phases(entries: list[JournalEntry]) -> list[tuple[str, str | None, str | None]]:
    """(phase, tool name, call id) of each entry: what the tests compare journals to."""
    return [(entry.phase.value, entry.tool_name, entry.call_id) for entry in entries]
