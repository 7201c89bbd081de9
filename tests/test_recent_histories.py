"""A saga joined again on the worker that let it go skips the read, unless its journal moved."""

from __future__ import annotations

from typing import Any

import pytest

from sagacity import Sagacity
from sagacity.integrations._engine import run_call
from tests._shop import Shop


def call(sagacity: Sagacity, shop: Shop, saga_id: str, n: int) -> Any:
    """Run the saga's call `charge-<n>` through a join of its own, as an engine's step does."""
    tool = {t.name: t for t in sagacity.wrap(shop)}["charge_card"]
    return run_call(
        sagacity,
        saga_id,
        tool,
        call_id=f"charge-{n}",
        arguments={"amount": f"{n}.00", "card": "4242"},
        approved=False,
        resumer="test",
    ).result


class TestRecentHistories:
    def test_the_next_join_on_the_same_worker_reads_nothing(
        self, sagacity: Sagacity, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The lease's head is the head this worker left: the kept entries are the journal."""
        shop = Shop()
        assert call(sagacity, shop, "s-1", 1) == "ch-1.00"

        def unread(saga_id: str) -> list[Any]:
            raise AssertionError(f"saga {saga_id!r} was read")

        monkeypatch.setattr(sagacity.journal, "entries", unread)
        assert call(sagacity, shop, "s-1", 2) == "ch-2.00"
        assert call(sagacity, shop, "s-1", 1) == "ch-1.00"  # replayed from the kept entries
        monkeypatch.undo()
        phases = [(e.phase.value, e.call_id) for e in sagacity.history("s-1")]
        assert phases == [
            ("INTENT", "charge-1"),
            ("EXECUTED", "charge-1"),
            ("INTENT", "charge-2"),
            ("EXECUTED", "charge-2"),
        ]
        assert shop.calls["charge_card"] == 2

    def test_what_another_worker_appended_meanwhile_is_read(self, shared_store_url: str) -> None:
        """Its entries moved the head: a call it ran replays here, it does not run twice."""
        shop = Shop()
        with Sagacity.from_url(shared_store_url) as one, Sagacity.from_url(shared_store_url) as two:
            call(one, shop, "s-2", 1)
            call(two, shop, "s-2", 2)
            assert call(one, shop, "s-2", 2) == "ch-2.00"
            assert call(one, shop, "s-2", 3) == "ch-3.00"
            phases = [e.phase.value for e in one.history("s-2")]
        assert shop.calls["charge_card"] == 3
        assert phases == ["INTENT", "EXECUTED"] * 3

    def test_a_decision_journaled_meanwhile_is_read(self, shared_store_url: str) -> None:
        """An approval appended by a human's process moves the head too: the wire runs."""
        shop = Shop()
        with (
            Sagacity.from_url(shared_store_url) as worker,
            Sagacity.from_url(shared_store_url) as human,
        ):
            tool = {t.name: t for t in worker.wrap(shop)}["send_wire_transfer"]
            arguments = {"amount": "40.00", "to": "ACME"}

            def wire(approved: bool) -> Any:
                return run_call(
                    worker,
                    "s-3",
                    tool,
                    call_id="wire-1",
                    arguments=arguments,
                    approved=approved,
                    resumer="test",
                )

            assert wire(False).request_id is not None
            human.approve("s-3", approver="alice")
            assert wire(True).result == "wire-40.00-ACME"
        assert shop.calls["send_wire_transfer"] == 1
