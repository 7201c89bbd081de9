"""A scripted SDK model for the resume tests: its turn follows from the run's input.

A hold, then the wire, then it repeats the last tool output it was given. Because each
turn is read from the input, a run resumed in another process (a worker, with a model of
its own) gets the same script.
"""

from __future__ import annotations

from typing import Any

from agents import RunContextWrapper
from agents.testing import ScriptedModel, assistant_message

from tests.integrations.openai_agents._orders import call

PROMPT = "Hold 250.00 on ACME-ops, then wire it to ACME."


class Teller(ScriptedModel):
    """A hold, then the wire; then "The bank says: <the last tool output>"."""

    def __init__(self) -> None:
        super().__init__([])

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> Any:
        items = [] if isinstance(input, str) else list(input)
        outputs = [
            item["output"]
            for item in items
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        if not outputs:
            self.enqueue([call("place_hold", "call-h", account="ACME-ops", amount="250.00")])
        elif len(outputs) == 1:
            self.enqueue([call("send_wire_transfer", "call-w", amount="250.00", to="ACME")])
        else:
            self.enqueue([assistant_message(f"The bank says: {outputs[-1]}")])
        return await super().get_response(system_instructions, input, *args, **kwargs)


def told(context: RunContextWrapper[Any], error: Exception) -> str:
    """The tools' failure message: the error itself, not the SDK's generic text."""
    return f"failed: {error}"
