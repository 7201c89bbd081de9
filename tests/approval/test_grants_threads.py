"""Threads racing for the last of a grant, each with its own Sagacity (its own connection).

A barrier releases them together onto the last call or the last amount of a grant:
exactly one is covered and runs, the others ask. A revocation racing consumers: nothing
consumes after the REVOKED entry. SQLite and PostgreSQL.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from sagacity import (
    Phase,
    Reversibility,
    Sagacity,
    SagaOutcome,
    SagaStateError,
    compensable,
    verify,
)

RAN, ASKED = SagaOutcome.COMPLETED, SagaOutcome.AWAITING_APPROVAL
RACERS = 4


class Till:
    """A payment tool whose every run is noted, shared by the racing instances."""

    def __init__(self) -> None:
        self.paid: list[str] = []
        self.lock = threading.Lock()

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def pay(self, amount: Any, ref: str) -> str:
        """Pay; the note is the effect."""
        with self.lock:
            self.paid.append(ref)
        return "paid"


@pytest.fixture
def instances(shared_store_url: str) -> Iterator[Callable[[], Sagacity]]:
    """Sagacity instances on one database, each with its own connection, closed after."""
    opened: list[Sagacity] = []

    def build() -> Sagacity:
        instance = Sagacity.from_url(shared_store_url)
        opened.append(instance)
        return instance

    yield build
    for instance in opened:
        instance.close()


def _race(racers: list[Sagacity], till: Till, amount: Any, prefix: str) -> list[SagaOutcome]:
    """Each racer pays `amount` in its own saga, all released at once by a barrier."""
    barrier = threading.Barrier(len(racers))

    def one(number: int) -> SagaOutcome:
        sagacity = racers[number]
        tool = sagacity.tool("pay")
        ref = f"{prefix}-{number}"
        barrier.wait(timeout=60)
        return sagacity.saga(ref, lambda: tool(amount=amount, ref=ref), started_by="alice").outcome

    with ThreadPoolExecutor(len(racers)) as pool:
        return list(pool.map(one, range(len(racers))))


def _racers(build: Callable[[], Sagacity], till: Till) -> list[Sagacity]:
    racers = [build() for _ in range(RACERS)]
    for racer in racers:
        racer.wrap(till)
    return racers


def _revoke_at_once(revokers: list[Sagacity], grant_id: str) -> list[str]:
    """Each revoker revokes the grant, all released at once: what each was told."""
    barrier = threading.Barrier(len(revokers))

    def revoke(number: int) -> str:
        barrier.wait(timeout=60)
        try:
            revokers[number].revoke(grant_id, revoked_by=f"r{number}")
        except SagaStateError as refused:
            return "refused" if "was revoked at" in str(refused) else str(refused)
        return "revoked"

    with ThreadPoolExecutor(len(revokers)) as pool:
        return list(pool.map(revoke, range(len(revokers))))


class TestLastOfTheBudget:
    @pytest.mark.parametrize("round_", range(3))
    def test_the_last_amount_goes_to_one_racer(
        self, instances: Callable[[], Sagacity], round_: int
    ) -> None:
        """70 of 100 used, four calls of 30 at once: one runs, three ask, 100 used."""
        till = Till()
        racers = _racers(instances, till)
        owner = racers[0]
        grant = owner.grant(
            "pay", grantor="carol", max_calls=100, max_amount=100, amount_field="amount", ttl=600
        )
        first = owner.tool("pay")
        assert (
            owner.saga("first", lambda: first(amount=70, ref="first"), started_by="alice").outcome
            is RAN
        )

        outcomes = _race(racers, till, 30, "race")

        assert sorted(outcomes, key=str) == sorted([RAN] + [ASKED] * (RACERS - 1), key=str)
        assert len(till.paid) == 2
        shown = owner.get_grant(grant.grant_id)
        assert (shown.used_calls, shown.used_amount, shown.state) == (2, "100", "exhausted")
        chain = owner.history(f"grant-{grant.grant_id}")
        assert [e.phase for e in chain] == [Phase.GRANTED, Phase.GRANT_USED, Phase.GRANT_USED]
        assert chain[2].payload["saga_id"] == till.paid[1]  # type: ignore[index,call-overload]
        assert verify(owner.journal).ok

    def test_the_last_call_goes_to_one_racer(self, instances: Callable[[], Sagacity]) -> None:
        """max_calls=1, four calls at once: one runs; decimal-string amounts are never summed."""
        till = Till()
        racers = _racers(instances, till)
        grant = racers[0].grant("pay", grantor="carol", max_calls=1, ttl=600)

        outcomes = _race(racers, till, "0.10", "race")

        assert outcomes.count(RAN) == 1
        assert outcomes.count(ASKED) == RACERS - 1
        assert len(till.paid) == 1
        assert racers[0].get_grant(grant.grant_id).state == "exhausted"


class TestRevocationRace:
    def test_nothing_consumes_after_the_revocation(self, instances: Callable[[], Sagacity]) -> None:
        """Consumers loop until asked; revoked while they run, no use follows the REVOKED."""
        till = Till()
        racers = _racers(instances, till)
        revoker = instances()
        grant = revoker.grant("pay", grantor="carol", max_calls=100_000, ttl=600)
        chain_id = f"grant-{grant.grant_id}"
        consumed = threading.Event()
        uses = [0] * RACERS

        def consume(number: int) -> str:
            sagacity = racers[number]
            tool = sagacity.tool("pay")
            for count in range(1, 100_000):
                ref = f"c{number}-{count}"
                outcome = sagacity.saga(
                    ref, functools.partial(tool, amount=1, ref=ref), started_by="alice"
                ).outcome
                if outcome is ASKED:
                    return ref
                uses[number] += 1
                if all(uses):
                    consumed.set()
            raise AssertionError("the revocation never stopped the consumer")

        with ThreadPoolExecutor(RACERS) as pool:
            asked = [pool.submit(consume, n) for n in range(RACERS)]
            assert consumed.wait(timeout=120), "the consumers never all consumed"
            revoker.revoke(grant.grant_id, revoked_by="dave", reason="race")
            last = [future.result(timeout=120) for future in asked]

        chain = revoker.history(chain_id)
        assert chain[-1].phase is Phase.REVOKED  # nothing consumed after it
        used = {e.payload["saga_id"] for e in chain if e.phase is Phase.GRANT_USED}  # type: ignore[index,call-overload]
        assert used == set(till.paid)
        for ref in last:  # each consumer's first call after the revocation asked
            assert [e.phase for e in revoker.history(ref)] == [Phase.AWAITING_APPROVAL]
        assert verify(revoker.journal).ok

    def test_of_two_revocations_at_once_one_is_refused(
        self, instances: Callable[[], Sagacity]
    ) -> None:
        """One REVOKED in the chain; the other revoker is told it was revoked already."""
        revokers = [instances() for _ in range(RACERS)]
        for round_ in range(5):
            grant = revokers[0].grant("pay", grantor="carol", max_calls=1, ttl=600)
            said = _revoke_at_once(revokers, grant.grant_id)
            assert sorted(said) == ["refused"] * (RACERS - 1) + ["revoked"], round_
            chain = revokers[0].history(f"grant-{grant.grant_id}")
            assert [e.phase for e in chain] == [Phase.GRANTED, Phase.REVOKED]
            shown = revokers[0].get_grant(grant.grant_id)
            assert (shown.state, shown.revoked_by) == ("revoked", f"r{said.index('revoked')}")
        assert verify(revokers[0].journal).ok
