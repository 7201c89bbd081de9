"""Parallel native calls, and one saga held open across requests with `Sagacity.join`."""

from __future__ import annotations

import threading

from sagacity import Sagacity, SagaOutcome
from tests.integrations.crewai._crew import Shop, crew, phases, shop_tools


class TestParallelCalls:
    def test_a_failing_sibling_fails_the_saga_and_the_other_is_undone(
        self, shared_store_url: str
    ) -> None:
        """One model turn, three calls on CrewAI's thread pool, one fails: all journaled."""
        shop = Shop()
        shop.release_label = threading.Event()
        turn = [
            ("reserve_stock", {"sku": "A", "qty": 1}),
            ("print_label", {"order": "o-9"}),
            ("charge_card", {"amount": 12}),
        ]
        with Sagacity.from_url(shared_store_url) as sagacity:
            built = crew(shop_tools(sagacity, shop), [turn, "All done."], path="native")

            def kickoff() -> object:
                return built.kickoff()

            def run() -> object:
                # The label waits until both siblings are journaled: the calls overlap.
                def siblings_done() -> None:
                    shop.label_started.wait(30)
                    while len(shop.effects) < 2:
                        threading.Event().wait(0.01)
                    assert shop.release_label is not None
                    shop.release_label.set()

                helper = threading.Thread(target=siblings_done)
                helper.start()
                try:
                    return kickoff()
                finally:
                    helper.join()

            result = sagacity.saga("par-1", run)
            journal = phases(sagacity, "par-1")

        assert result.outcome is SagaOutcome.COMPENSATED
        assert sorted(shop.effects[:2]) == [("charge", 12), ("reserve", "A", 1)]
        assert sorted(shop.effects[2:]) == [("refund", "ch-12"), ("release", "res-A-1")]
        assert sorted(shop.keys[:2]) == ["charge_card#1", "reserve_stock#1"]
        assert ("FAILED", "print_label#1") in journal
        assert {c for p, c in journal if p == "EXECUTED"} == {"reserve_stock#1", "charge_card#1"}
        assert {c for p, c in journal if p == "COMPENSATED"} == {"reserve_stock#1", "charge_card#1"}


class TestJoin:
    def test_two_requests_of_one_saga_share_its_journal(self, shared_store_url: str) -> None:
        """Request 1 reserves; request 2's crew fails; compensate undoes request 1's effect."""
        shop = Shop()
        with Sagacity.from_url(shared_store_url) as sagacity:
            tools = shop_tools(sagacity, shop)
            first = crew(
                tools, [[("reserve_stock", {"sku": "B", "qty": 3})], "Reserved."], path="native"
            )
            second = crew(
                tools,
                [
                    [("reserve_stock", {"sku": "B", "qty": 3})],
                    [("print_label", {"order": "o-b"})],
                    "Shipped.",
                ],
                path="react",
            )
            for request in (first, second):
                with sagacity.join("cart-1") as scope, scope.entered():
                    request.kickoff()
            result = sagacity.compensate("cart-1")
            journal = phases(sagacity, "cart-1")

        assert result.outcome is SagaOutcome.COMPENSATED
        assert shop.effects == [("reserve", "B", 3), ("release", "res-B-3")]
        assert journal[:4] == [
            ("INTENT", "reserve_stock#1"),
            ("EXECUTED", "reserve_stock#1"),
            ("INTENT", "print_label#1"),
            ("FAILED", "print_label#1"),
        ]
