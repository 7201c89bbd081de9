"""CrewAI's automatic re-runs are one call, each attempt journaled; repeats replay."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sagacity import FailureKind, Sagacity, SagaOutcome, compensable, compensation
from sagacity.integrations.crewai import RERUN_REASON, crew_tools
from tests.integrations.crewai._crew import PATHS, Shop, crew, phases, shop_tools


@pytest.fixture
def saga_store(shared_store_url: str) -> Iterator[Sagacity]:
    with Sagacity.from_url(shared_store_url) as instance:
        yield instance


class TestReActReruns:
    def test_each_rerun_is_journaled_under_the_call_and_none_runs(
        self, saga_store: Sagacity
    ) -> None:
        """ReAct re-runs a failed call 5 times: each is REFUSED under its call id, not run."""
        shop = Shop()
        script = [[("print_label", {"order": "o-1"})], "Done."]
        result = saga_store.saga(
            "rerun-1", crew(shop_tools(saga_store, shop), script, path="react").kickoff
        )

        assert result.outcome is SagaOutcome.COMPENSATED
        journal = saga_store.history("rerun-1")
        assert [(e.phase.name, e.call_id) for e in journal[:2]] == [
            ("INTENT", "print_label#1"),
            ("FAILED", "print_label#1"),
        ]
        refused = [e for e in journal if e.phase.name == "REFUSED"]
        assert len(refused) == 5
        assert {e.call_id for e in refused} == {"print_label#1"}
        assert {e.payload["reason"] for e in refused} == {RERUN_REASON}  # type: ignore[index]
        assert "label printer offline" in refused[0].payload["error"]  # type: ignore[index]

    def test_an_effect_whose_outcome_is_unknown_never_runs_twice(
        self, saga_store: Sagacity
    ) -> None:
        """A tool that acted, then timed out: re-runs are refused as in doubt; one effect."""
        effects: list[str] = []

        @compensation
        def undo_payout() -> None:
            effects.append("undone")

        @compensable(by=undo_payout)
        def payout(amount: int) -> str:
            """Pay out to the customer."""
            effects.append(f"paid {amount}")
            raise TimeoutError("bank did not answer")

        script = [[("payout", {"amount": 7})], "Paid."]
        tools = crew_tools(saga_store, payout)
        result = saga_store.saga("rerun-2", crew(tools, script, path="react").kickoff)

        assert effects == ["paid 7"]
        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        journal = phases(saga_store, "rerun-2")
        assert journal[:2] == [("INTENT", "payout#1"), ("FAILED", "payout#1")]
        assert ("INTENT", "payout#1") not in journal[2:]

    def test_a_retryable_failure_is_retried_under_the_same_idempotency_key(
        self, saga_store: Sagacity
    ) -> None:
        """A failure classified retryable does not fail the saga: CrewAI's re-run is attempt 2."""
        keys: list[str] = []
        attempts = iter([ConnectionResetError("reset"), None])

        @compensation
        def undo() -> None: ...

        @compensable(by=undo)
        def book(slot: str) -> str:
            """Book a delivery slot."""
            from sagacity import current_call

            call = current_call()
            assert call is not None
            keys.append(call.call_id)
            error = next(attempts)
            if error is not None:
                raise error
            return f"booked {slot}"

        saga_store.add_classifier(
            lambda e: FailureKind.RETRYABLE if isinstance(e, ConnectionResetError) else None
        )
        script = [[("book", {"slot": "9am"})], "Booked."]
        result = saga_store.saga(
            "rerun-3", crew(crew_tools(saga_store, book), script, path="react").kickoff
        )

        assert result.outcome is SagaOutcome.COMPLETED
        assert keys == ["book#1", "book#1"]
        assert phases(saga_store, "rerun-3")[:4] == [
            ("INTENT", "book#1"),
            ("FAILED", "book#1"),
            ("INTENT", "book#1"),
            ("EXECUTED", "book#1"),
        ]


@pytest.mark.parametrize("path", PATHS)
class TestRepeats:
    def test_a_repeat_in_the_saga_is_replayed_from_the_journal(
        self, saga_store: Sagacity, path: str
    ) -> None:
        """The same call twice: one effect, one INTENT/EXECUTED, the same result both times."""
        shop = Shop()
        script = [
            [("reserve_stock", {"sku": "A", "qty": 1})],
            [("charge_card", {"amount": 5})],
            [("reserve_stock", {"sku": "A", "qty": 1})],
            "Reserved.",
        ]
        built = crew(shop_tools(saga_store, shop), script, path=path)
        result = saga_store.saga("repeat-1", built.kickoff)

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.effects == [("reserve", "A", 1), ("charge", 5)]
        assert phases(saga_store, "repeat-1") == [
            ("INTENT", "reserve_stock#1"),
            ("EXECUTED", "reserve_stock#1"),
            ("INTENT", "charge_card#1"),
            ("EXECUTED", "charge_card#1"),
            ("ENDED", None),
        ]

    def test_crewais_cache_never_serves_another_sagas_effect(
        self, saga_store: Sagacity, path: str
    ) -> None:
        """One crew object, two sagas, the same call: each saga has, and undoes, its own."""
        shop = Shop()
        tools = shop_tools(saga_store, shop)
        reserve = [("reserve_stock", {"sku": "A", "qty": 1})]
        script = [reserve, "Reserved.", reserve, [("print_label", {"order": "o"})], "Done."]
        built = crew(tools, script, path=path, cache=True)

        first = saga_store.saga("repeat-2", built.kickoff)
        second = saga_store.saga("repeat-3", built.kickoff)

        assert first.outcome is SagaOutcome.COMPLETED
        assert second.outcome is SagaOutcome.COMPENSATED
        assert shop.effects == [("reserve", "A", 1), ("reserve", "A", 1), ("release", "res-A-1")]
        assert phases(saga_store, "repeat-3")[:2] == [
            ("INTENT", "reserve_stock#1"),
            ("EXECUTED", "reserve_stock#1"),
        ]

    def test_replay_repeats_off_runs_a_repeat_as_a_new_call(
        self, saga_store: Sagacity, path: str
    ) -> None:
        """`replay_repeats=False`: the second call is its own effect, under its own id."""
        shop = Shop()
        script = [
            [("charge_card", {"amount": 5})],
            [("reserve_stock", {"sku": "A", "qty": 1})],
            [("charge_card", {"amount": 5})],
            "Charged twice.",
        ]
        built = crew(shop_tools(saga_store, shop, replay_repeats=False), script, path=path)
        saga_store.saga("repeat-4", built.kickoff)

        assert shop.effects.count(("charge", 5)) == 2
        assert [c for p, c in phases(saga_store, "repeat-4") if p == "EXECUTED"] == [
            "charge_card#1",
            "reserve_stock#1",
            "charge_card#2",
        ]
        assert shop.keys == ["charge_card#1", "reserve_stock#1", "charge_card#2"]
