"""Decisions are read from the journal through the approval check's own counting."""

from __future__ import annotations

import asyncio
import datetime
import gc
import sqlite3
import threading
from collections.abc import Iterator

import pytest

from sagacity import Decision, DecisionOutcome, Phase, Sagacity
from sagacity.testing import FakeClock
from sagacity.worker import DecisionEvents
from tests.worker._shop import Shop, pause


@pytest.fixture
def shop() -> Shop:
    return Shop()


def _open_connections() -> int:
    """How many SQLite connections this process holds open, collected or not."""
    count = 0
    for found in gc.get_objects():
        if isinstance(found, sqlite3.Connection):
            try:
                found.total_changes  # noqa: B018 - raises on a closed connection
            except sqlite3.ProgrammingError:
                continue
            count += 1
    return count


@pytest.fixture
def paused(store_url: str, shop: Shop) -> Iterator[Sagacity]:
    """A Sagacity on each backend with saga 'w-1' waiting for approval of its wire."""
    instance = Sagacity.from_url(store_url)
    instance.wrap(shop)
    pause(instance, "w-1")
    yield instance
    instance.close()


class TestReadingDecisions:
    def test_no_decision_while_it_waits(self, paused: Sagacity) -> None:
        """A request nobody decided has no decision, and a wait for it times out."""
        with DecisionEvents(paused, poll_interval=0.01) as events:
            assert events.decisions("w-1") == []
            with pytest.raises(TimeoutError, match="saga 'w-1': no decision"):
                events.wait("w-1", timeout=0.05)

    def test_an_approval_is_a_decision_with_who_and_what(self, paused: Sagacity) -> None:
        """APPROVED names the approver, the request, the call, the input and its hash."""
        request = paused.pending("w-1")[0]
        entry = paused.approve("w-1", approver="alice")
        with DecisionEvents(paused) as events:
            decision = events.wait("w-1", timeout=5)
        assert decision == Decision(
            saga_id="w-1",
            request_id=request.request_id,
            call_id=request.call_id,
            tool="wire",
            outcome=DecisionOutcome.APPROVED,
            decided_by="alice",
            decided_at=datetime.datetime.fromisoformat(entry.recorded_at),
            seq=entry.seq,
            input={"amount": 100, "to": "acme"},
            input_sha256=request.input_sha256,
            approvers=("alice",),
            via="python",
            resumer="work",
        )
        assert decision.to_json()["outcome"] == "approved"

    def test_a_rejection_is_a_decision_with_its_reason(self, paused: Sagacity) -> None:
        """REJECTED carries the principal and the reason given."""
        paused.reject("w-1", approver="bob", reason="wrong account", via="slack")
        with DecisionEvents(paused) as events:
            decision = events.wait("w-1", timeout=5)
        assert (decision.outcome, decision.decided_by, decision.reason, decision.via) == (
            DecisionOutcome.REJECTED,
            "bob",
            "wrong account",
            "slack",
        )

    def test_an_edit_is_a_decision_naming_the_new_request(self, paused: Sagacity) -> None:
        """EDITED names the request that replaced the old one; the new one waits."""
        old = paused.pending("w-1")[0]
        new = paused.edit("w-1", approver="carol", new_input={"amount": 90, "to": "acme"})
        with DecisionEvents(paused) as events:
            decision = events.wait("w-1", request_id=old.request_id, timeout=5)
            assert (decision.outcome, decision.replaced_by) == (
                DecisionOutcome.EDITED,
                new.request_id,
            )
            with pytest.raises(TimeoutError):
                events.wait("w-1", timeout=0.05)  # the newest request is the new one


class TestWhatCountsAsADecision:
    def test_two_approvers_needed_one_is_not_a_decision(self, store_url: str) -> None:
        """With approvers=2, the first approval decides nothing; the second approves."""
        from tests.server._bank import Bank

        with Sagacity.from_url(store_url) as sagacity:
            bank = Bank()
            sagacity.wrap(bank)
            sagacity.saga("big", lambda: sagacity.tool("wire_big")(amount="9", to="x"))
            sagacity.approve("big", approver="alice")
            with DecisionEvents(sagacity, poll_interval=0.01) as events:
                with pytest.raises(TimeoutError):
                    events.wait("big", timeout=0.05)
                sagacity.approve("big", approver="bob")
                decision = events.wait("big", timeout=5)
        assert decision.approvers == ("alice", "bob")
        assert decision.decided_by == "bob"

    def test_an_unsigned_approval_row_is_no_decision_where_signatures_are_required(
        self, tmp_path: object, shop: Shop
    ) -> None:
        """Under require_signed_approvals, an APPROVED row written without a key decides nothing."""
        from sagacity.audit import generate_key

        url = f"sqlite:///{tmp_path}/signed.db"
        key = generate_key()
        with Sagacity.from_url(
            url, approval_signing_key=key, require_signed_approvals=True
        ) as sagacity:
            sagacity.wrap(shop)
            pause(sagacity, "w-1")
            request = sagacity.pending("w-1")[0]
            # Someone with database access appends an approval of the right hash, unsigned.
            sagacity.journal.append(
                "w-1",
                Phase.APPROVED,
                tool_name="wire",
                call_id=request.call_id,
                ref_seq=request.seq,
                payload={
                    "request_id": request.request_id,
                    "approver": "mallory",
                    "input_sha256": request.input_sha256,
                },
            )
            with DecisionEvents(sagacity, poll_interval=0.01) as events:
                with pytest.raises(TimeoutError):
                    events.wait("w-1", timeout=0.05)
                sagacity.approve("w-1", approver="alice")  # signed with the key
                assert events.wait("w-1", timeout=5).decided_by == "alice"

    def test_an_expired_request_is_expired(self, tmp_path: object, shop: Shop) -> None:
        """A request past its expires_at, undecided, is EXPIRED at that time."""
        clock = FakeClock()
        with Sagacity.from_url(
            f"sqlite:///{tmp_path}/ttl.db", approval_ttl=60, clock=clock
        ) as sagacity:
            sagacity.wrap(shop)
            pause(sagacity, "w-1")
            expires_at = sagacity.pending("w-1")[0].expires_at
            with DecisionEvents(sagacity, poll_interval=0.01) as events:
                with pytest.raises(TimeoutError):
                    events.wait("w-1", timeout=0.02)
                clock.advance(61)
                decision = events.wait("w-1", timeout=5)
        assert decision.outcome is DecisionOutcome.EXPIRED
        assert decision.seq is None
        assert decision.decided_at == expires_at


class TestFollowing:
    def test_follow_yields_decisions_made_elsewhere_once_each(
        self, shared_store_url: str, shop: Shop
    ) -> None:
        """A second Sagacity on the database decides; the follower sees each decision once."""
        with (
            Sagacity.from_url(shared_store_url) as mine,
            Sagacity.from_url(shared_store_url) as theirs,
        ):
            mine.wrap(shop)
            for saga_id in ("f-1", "f-2", "f-3"):
                pause(mine, saga_id)
            mine.approve("f-1", approver="early")  # before following: not news
            events = DecisionEvents(mine, poll_interval=0.02)
            seen: list[tuple[str, str]] = []
            following = events.follow(timeout=10)  # from now on

            def follow() -> None:
                for decision in following:
                    seen.append((decision.saga_id, decision.outcome.value))
                    if len(seen) == 2:
                        events.close()

            follower = threading.Thread(target=follow)
            follower.start()
            theirs.approve("f-2", approver="alice")
            theirs.reject("f-3", approver="bob", reason="no")
            follower.join(20)
        assert sorted(seen) == [("f-2", "approved"), ("f-3", "rejected")]

    def test_async_wait_and_follow(self, paused: Sagacity) -> None:
        """await_decision and afollow give the same decisions without blocking the loop."""

        async def main() -> tuple[Decision, Decision]:
            with DecisionEvents(paused, poll_interval=0.02) as events:
                waiting = asyncio.ensure_future(events.await_decision("w-1", timeout=10))
                following = events.afollow(timeout=10)
                first = asyncio.ensure_future(anext(following))
                await asyncio.sleep(0)  # both are waiting now; the loop stays free
                await asyncio.to_thread(paused.approve, "w-1", approver="alice")
                return await waiting, await first

        waited, followed = asyncio.run(main())
        assert waited == followed
        assert waited.outcome is DecisionOutcome.APPROVED

    def test_an_async_follower_left_early_closes_its_watch(self, paused: Sagacity) -> None:
        """An afollow dropped after its first decision closes its watch when its loop ends.

        Its watch's SQLite connection is closed by then, not left for the garbage
        collector to find (Python 3.13 warns of each such unclosed database).
        """
        opened_before = _open_connections()

        async def main() -> Decision:
            with DecisionEvents(paused, poll_interval=0.02) as events:
                following = events.afollow(timeout=10)
                first = asyncio.ensure_future(anext(following))
                await asyncio.sleep(0)
                await asyncio.to_thread(paused.approve, "w-1", approver="alice")
                return await first

        assert asyncio.run(main()).outcome is DecisionOutcome.APPROVED
        assert _open_connections() == opened_before

    def test_async_wait_times_out(self, paused: Sagacity) -> None:
        """await_decision raises TimeoutError after its timeout."""

        async def main() -> None:
            with DecisionEvents(paused, poll_interval=0.01) as events:
                await events.await_decision("w-1", timeout=0.1)

        with pytest.raises(TimeoutError):
            asyncio.run(main())
