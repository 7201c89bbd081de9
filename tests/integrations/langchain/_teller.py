"""A scripted chat model for the resume tests: its turn follows from the graph's messages.

A hold, then the wire, then it repeats what the bank answered. Because each turn is read
from the tool messages it was given, the graph resumed in another process (a worker)
gets the same script.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from tests.integrations.langchain._agents import tool_call

HOLD = tool_call("place_hold", "call-h", account="ACME-ops", amount="250.00")
WIRE = tool_call("send_wire_transfer", "call-w", amount="250.00", to="ACME")


class Teller(BaseChatModel):
    """A hold, then the wire, then "The bank says: <what the wire's tool message said>".

    `greedy` asks for one more hold after the wire.
    """

    greedy: bool = False

    @property
    def _llm_type(self) -> str:
        return "teller"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Teller:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        answers = [m for m in messages if isinstance(m, ToolMessage)]
        script: list[dict[str, Any]] = [HOLD, WIRE]
        if self.greedy:
            script.append(tool_call("place_hold", "call-h2", account="ACME-ops", amount="1.00"))
        if len(answers) < len(script):
            message = AIMessage(content="", tool_calls=[script[len(answers)]])
        else:
            wire = next(m for m in answers if m.tool_call_id == "call-w")
            message = AIMessage(content=f"The bank says: {wire.content}")
        return ChatResult(generations=[ChatGeneration(message=message)])
