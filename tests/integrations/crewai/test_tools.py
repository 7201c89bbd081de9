"""The CrewAI tools: the schema the model sees, and what they refuse at wrap time."""

from __future__ import annotations

import pytest
from crewai.tools import tool

from sagacity import (
    ConfigurationError,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
    compensation,
    current_call,
)
from sagacity.integrations.crewai import SagaCrewTool, as_crew_tool, crew_tools
from tests.integrations.crewai._crew import PATHS, Shop, crew, phases, shop_tools


class TestDefinitions:
    def test_the_schema_is_crewais_own_for_the_undecorated_function(self) -> None:
        """Name, description and argument schema equal what `@tool` derives unwrapped."""
        with Sagacity.from_url("memory://") as sagacity:
            (wrapped,) = [t for t in shop_tools(sagacity, Shop()) if t.name == "reserve_stock"]

        def reserve_stock(sku: str, qty: int) -> str:
            """Reserve stock for an order."""
            return ""

        plain = tool("reserve_stock")(reserve_stock)
        assert isinstance(wrapped, SagaCrewTool)
        assert (wrapped.name, wrapped.description) == (plain.name, plain.description)
        assert wrapped.args_schema.model_json_schema() == plain.args_schema.model_json_schema()

    def test_crewais_cache_is_refused(self) -> None:
        """A `cache_function` would let CrewAI answer for the journal: refused, named."""
        with Sagacity.from_url("memory://") as sagacity:
            (saga_tool,) = [t for t in sagacity.wrap(Shop()) if t.name == "charge_card"]
            with pytest.raises(ConfigurationError, match=r"'charge_card'.*cache_function"):
                as_crew_tool(saga_tool, cache_function=lambda *_: True)
            assert crew_tools(sagacity)[:0] == []


class TestAttacks:
    def test_an_argument_with_no_json_form_is_refused_and_fails_the_saga(self) -> None:
        """An infinite price passes CrewAI's validation; sagacity refuses it, nothing runs."""
        shop = Shop()
        prices: list[float] = []

        @compensable(reversibility=Reversibility.REVERSIBLE, by=lambda: None)
        def set_price(price: float) -> str:
            """Set the item's price."""
            prices.append(price)
            return "ok"

        script = [
            [("reserve_stock", {"sku": "A", "qty": 1})],
            [("set_price", {"price": float("inf")})],
            "Priced.",
        ]
        with Sagacity.from_url("memory://") as sagacity:
            tools = [*shop_tools(sagacity, shop), *crew_tools(sagacity, set_price)]
            result = sagacity.saga("bad-1", crew(tools, script, path="native").kickoff)
            journal = phases(sagacity, "bad-1")
        assert prices == []
        assert result.outcome is SagaOutcome.COMPENSATED
        assert ("REFUSED", "set_price#1") in journal
        assert shop.effects == [("reserve", "A", 1), ("release", "res-A-1")]

    def test_a_hostile_tool_input_string_is_journaled_as_given(self) -> None:
        """A bidi control and a newline in an argument are journaled exactly, once."""
        shop = Shop()
        hostile = "A\u202e\nB"
        script = [[("reserve_stock", {"sku": hostile, "qty": 1})], "Reserved."]
        with Sagacity.from_url("memory://") as sagacity:
            result = sagacity.saga(
                "bad-2", crew(shop_tools(sagacity, shop), script, path="native").kickoff
            )
            (intent,) = [e for e in sagacity.history("bad-2") if e.phase.name == "INTENT"]
        assert result.outcome is SagaOutcome.COMPLETED
        assert intent.payload["input"] == {"sku": hostile, "qty": 1}  # type: ignore[index]
        assert shop.effects == [("reserve", hostile, 1)]


@compensation
def _unbook() -> None:
    BOOKED.append("unbooked")


BOOKED: list[str] = []


@compensable(by=_unbook)
async def book_slot(slot: str) -> str:
    """Book a delivery slot."""
    call = current_call()
    BOOKED.append(f"{slot} under {call.call_id if call else None}")
    return f"slot-{slot}"


@compensable(by=_unbook)
async def confirm_slot(slot: str) -> str:
    """Confirm the slot with the courier."""
    raise RuntimeError("courier refused")


@pytest.mark.parametrize("path", PATHS)
class TestAsyncTools:
    def test_an_async_tool_is_journaled_and_undone_on_both_paths(self, path: str) -> None:
        """CrewAI runs an async tool's coroutine itself; the saga sees its failure."""
        BOOKED.clear()
        script = [[("book_slot", {"slot": "9am"})], [("confirm_slot", {"slot": "9am"})], "Done."]
        with Sagacity.from_url("memory://") as sagacity:
            tools = crew_tools(sagacity, book_slot, confirm_slot)
            result = sagacity.saga("async-1", crew(tools, script, path=path).kickoff)
            journal = phases(sagacity, "async-1")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert BOOKED == ["9am under book_slot#1", "unbooked"]
        assert journal[:4] == [
            ("INTENT", "book_slot#1"),
            ("EXECUTED", "book_slot#1"),
            ("INTENT", "confirm_slot#1"),
            ("FAILED", "confirm_slot#1"),
        ]

    async def test_an_async_kickoff_under_asaga(self, path: str) -> None:
        """`await crew.kickoff_async()` inside `Sagacity.asaga` journals the same way."""
        BOOKED.clear()
        script = [[("book_slot", {"slot": "10am"})], [("confirm_slot", {"slot": "10am"})], "Done."]
        with Sagacity.from_url("memory://") as sagacity:
            built = crew(crew_tools(sagacity, book_slot, confirm_slot), script, path=path)
            result = await sagacity.asaga("async-2", built.kickoff_async)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert BOOKED == ["10am under book_slot#1", "unbooked"]
