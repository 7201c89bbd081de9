"""A failure CrewAI swallows still fails the saga, which compensates in reverse order."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from crewai.tools import ToolFailurePolicy

from sagacity import Sagacity, SagaOutcome
from tests.integrations.crewai._crew import PATHS, Shop, crew, model_of, phases, shop_tools

ORDER = [
    [("reserve_stock", {"sku": "SKU-1", "qty": 2})],
    [("charge_card", {"amount": 40})],
    [("print_label", {"order": "o-123"})],
    "Done: the order ships today.",
]


@pytest.fixture
def saga_store(store_url: str) -> Iterator[Sagacity]:
    with Sagacity.from_url(store_url) as instance:
        yield instance


@pytest.mark.parametrize("path", PATHS)
class TestSwallowedFailure:
    def test_the_saga_compensates_in_reverse_although_the_crew_says_done(
        self, saga_store: Sagacity, path: str
    ) -> None:
        """CrewAI hands the model "Error executing tool"; the saga still ends COMPENSATED."""
        shop = Shop()
        built = crew(shop_tools(saga_store, shop), ORDER, path=path)

        result = saga_store.saga("order-1", built.kickoff)

        assert result.outcome is SagaOutcome.COMPENSATED
        assert str(result.error) == "label printer offline"
        assert "Done: the order ships today." in str(result.value)
        assert any("label printer offline" in turn for turn in model_of(built).turns)
        assert shop.effects == [
            ("reserve", "SKU-1", 2),
            ("charge", 40),
            ("refund", "ch-40"),
            ("release", "res-SKU-1-2"),
        ]
        journal = phases(saga_store, "order-1")
        assert journal[:6] == [
            ("INTENT", "reserve_stock#1"),
            ("EXECUTED", "reserve_stock#1"),
            ("INTENT", "charge_card#1"),
            ("EXECUTED", "charge_card#1"),
            ("INTENT", "print_label#1"),
            ("FAILED", "print_label#1"),
        ]
        assert journal[-5:] == [
            ("COMPENSATING", "charge_card#1"),
            ("COMPENSATED", "charge_card#1"),
            ("COMPENSATING", "reserve_stock#1"),
            ("COMPENSATED", "reserve_stock#1"),
            ("ENDED", None),
        ]

    def test_a_crew_that_succeeds_completes(self, saga_store: Sagacity, path: str) -> None:
        """Nothing failed: COMPLETED, and nothing is undone."""
        shop = Shop()
        shop.fail_label = False
        built = crew(shop_tools(saga_store, shop), ORDER, path=path)
        result = saga_store.saga("order-2", built.kickoff)
        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.effects == [("reserve", "SKU-1", 2), ("charge", 40), ("label", "o-123")]

    def test_the_raise_policy_ends_the_crew_and_compensates(
        self, saga_store: Sagacity, path: str
    ) -> None:
        """With `ToolFailurePolicy.RAISE` the crew raises; the saga compensates the same way."""
        shop = Shop()
        tools = shop_tools(saga_store, shop, tool_failure_policy=ToolFailurePolicy.RAISE)
        result = saga_store.saga("order-3", crew(tools, ORDER, path=path).kickoff)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert shop.effects[-2:] == [("refund", "ch-40"), ("release", "res-SKU-1-2")]
