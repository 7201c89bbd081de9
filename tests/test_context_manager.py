"""`with Sagacity.from_url(...) as sagacity:` closes the journal and the approval store."""

from __future__ import annotations

import pytest

from sagacity import JournalError, Sagacity, SagaOutcome
from tests._shop import Shop, phases, tools_of


def _order(sagacity: Sagacity, saga_id: str) -> SagaOutcome:
    tools = tools_of(sagacity, Shop())
    return sagacity.saga(saga_id, lambda: tools["reserve_inventory"]("SKU-1", 2)).outcome


class TestContextManager:
    def test_block_gives_the_instance_and_keeps_what_it_journaled(
        self, shared_store_url: str
    ) -> None:
        """The block's target is the Sagacity itself; a later one reads the saga it ran."""
        sagacity = Sagacity.from_url(shared_store_url)
        with sagacity as entered:
            assert entered is sagacity
            assert _order(entered, "order-1") is SagaOutcome.COMPLETED
        with Sagacity.from_url(shared_store_url) as reopened:
            assert phases(reopened.history("order-1")) == [
                ("INTENT", "reserve_inventory", None),
                ("EXECUTED", "reserve_inventory", 1),
                ("ENDED", None, None),
            ]

    def test_stores_are_closed_after_the_block(self, shared_store_url: str) -> None:
        """After the block, the journal and the approval store refuse to be used."""
        with Sagacity.from_url(shared_store_url) as sagacity:
            _order(sagacity, "order-1")
        with pytest.raises(JournalError):
            sagacity.journal.entries("order-1")
        with pytest.raises(JournalError):
            sagacity.approvals.pending()
        sagacity.close()  # closing again, as a finally might, is harmless

    def test_an_error_in_the_block_propagates_and_closes(self, shared_store_url: str) -> None:
        """An exception raised in the block is not swallowed, and the stores still close."""
        with pytest.raises(KeyError, match="boom"), Sagacity.from_url(shared_store_url) as sagacity:
            raise KeyError("boom")
        with pytest.raises(JournalError):
            sagacity.journal.entries("order-1")

    def test_memory_stores_work_in_a_block(self) -> None:
        """A memory:// Sagacity runs sagas in a block like the others."""
        with Sagacity.from_url("memory://") as sagacity:
            assert _order(sagacity, "order-1") is SagaOutcome.COMPLETED
            assert [e.phase.value for e in sagacity.history("order-1")] == [
                "INTENT",
                "EXECUTED",
                "ENDED",
            ]
