"""A lingering join parks its saga's lease for the next join here: adopted, never trusted blindly.

`Sagacity.join(..., linger=s)` keeps the lease after the block, renewed, and the saga's next
lease keeper in the process adopts it without a commit. The tests attack it: another
worker wanting the saga, entries appended while it is parked, a lease lost while parked,
two threads adopting at once, a parked process killed or ending.
"""

from __future__ import annotations

import datetime
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sagacity import (
    ConfigurationError,
    InDoubtError,
    LeaseLostError,
    Phase,
    SagaBusyError,
    Sagacity,
    SagaOutcome,
    SagaStateError,
    compensable,
    compensation,
)
from sagacity.audit import verify
from sagacity.integrations._engine import Ran, run_call
from sagacity.journal import SagaLease
from sagacity.testing import FakeClock
from tests._shop import Shop, journal_intent
from tests.processes._kill import kill

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC)


def call(
    sagacity: Sagacity,
    shop: object,
    saga_id: str,
    n: int,
    *,
    linger: float = 30.0,
    tool: str = "charge_card",
) -> Ran:
    """Run the saga's call `charge-<n>` as an engine's step does, lingering `linger` s."""
    tools = {t.name: t for t in sagacity.wrap(shop)}
    arguments: dict[str, Any] = (
        {"amount": f"{n}.00", "card": "4242"}
        if tool == "charge_card"
        else {"amount": f"{n}.00", "to": "ACME"}
    )
    return run_call(
        sagacity,
        saga_id,
        tools[tool],
        call_id=f"charge-{n}",
        arguments=arguments,
        approved=False,
        resumer="test",
        linger=linger,
    )


def phases(sagacity: Sagacity, saga_id: str) -> list[tuple[str, str | None]]:
    return [(e.phase.value, e.call_id) for e in sagacity.history(saga_id)]


class Counted:
    """Counts a journal's lease takes and releases, and can refuse them."""

    def __init__(self, sagacity: Sagacity, monkeypatch: pytest.MonkeyPatch) -> None:
        self.takes = self.releases = 0
        self.refuse = False
        journal = sagacity.journal
        take, release = journal.acquire_lease, journal.release_lease

        def counted_take(*args: Any, **kwargs: Any) -> SagaLease:
            self.takes += 1
            if self.refuse:
                raise AssertionError("the lease was taken, not adopted")
            return take(*args, **kwargs)

        def counted_release(lease: SagaLease) -> None:
            self.releases += 1
            if self.refuse:
                raise AssertionError("the lease was released, not kept")
            release(lease)

        monkeypatch.setattr(journal, "acquire_lease", counted_take)
        monkeypatch.setattr(journal, "release_lease", counted_release)


@pytest.fixture
def pair(shared_store_url: str) -> Iterator[tuple[Sagacity, Sagacity]]:
    """Two workers on one store; leases last a minute, so none is waited out here.

    The second waits up to a minute for a busy saga (`lease_wait`), the first not at all.
    """
    one = Sagacity.from_url(shared_store_url, lease_ttl=60.0)
    two = Sagacity.from_url(shared_store_url, lease_ttl=60.0, lease_wait=60.0)
    try:
        yield one, two
    finally:
        one.close()
        two.close()


class TestLingerOption:
    @pytest.mark.parametrize("linger", [-1.0, math.inf, math.nan, "2", True])
    def test_linger_must_be_finite_seconds(self, linger: Any) -> None:
        """A negative, infinite or non-number linger is refused before any lease is taken."""
        with (
            Sagacity.from_url("memory://") as sagacity,
            pytest.raises(ConfigurationError, match="linger"),
            sagacity.join("s", linger=linger),
        ):
            pass  # pragma: no cover - never entered


class TestAdoption:
    def test_the_next_join_adopts_the_parked_lease_and_reads_no_journal(
        self, sagacity: Sagacity, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """No take, no release, no read of the saga: one head read, then the appends."""
        shop = Shop()
        assert call(sagacity, shop, "s-1", 1).result == "ch-1.00"
        counted = Counted(sagacity, monkeypatch)
        counted.refuse = True
        head_reads: list[tuple[str, int] | None] = []
        listing = sagacity.journal.list_entries

        def head_read(*, after: tuple[str, int] | None = None, limit: int = 1000) -> list[Any]:
            head_reads.append(after)
            return listing(after=after, limit=limit)

        def unread(saga_id: str) -> Any:
            raise AssertionError(f"saga {saga_id!r} was read")

        monkeypatch.setattr(sagacity.journal, "list_entries", head_read)
        monkeypatch.setattr(sagacity.approval, "history", unread)
        assert call(sagacity, shop, "s-1", 2).result == "ch-2.00"
        assert call(sagacity, shop, "s-1", 1).result == "ch-1.00"  # replayed, kept entries
        monkeypatch.undo()
        assert head_reads == [("s-1", 2), ("s-1", 4)]
        assert phases(sagacity, "s-1") == [
            ("INTENT", "charge-1"),
            ("EXECUTED", "charge-1"),
            ("INTENT", "charge-2"),
            ("EXECUTED", "charge-2"),
        ]
        assert shop.calls["charge_card"] == 2

    def test_the_saga_s_end_in_this_process_adopts_it_too(
        self, pair: tuple[Sagacity, Sagacity], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """compensate() (lease_wait 0) right after a parked call: adopted, not busy.

        The end frees the lease: another worker takes the saga at once.
        """
        one, two = pair
        shop = Shop()
        call(one, shop, "s-2", 1)
        counted = Counted(one, monkeypatch)
        result = one.compensate("s-2")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert shop.log == ["charge 1.00", "refund ch-1.00"]
        assert counted.takes == 0
        # Ended: a join now finds the saga used, not busy.
        with pytest.raises(SagaStateError, match="ended COMPENSATED"), two.join("s-2", wait=0):
            pass  # pragma: no cover - never entered

    def test_a_lease_near_expiry_is_released_and_taken_afresh(
        self, store_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Less than a third of its time to live left: not adopted, one release, one take."""
        clock = FakeClock(T0)
        # Renewed every 200 s: not during the test, so the clock alone says what is left.
        with Sagacity.from_url(store_url, clock=clock, lease_ttl=600.0) as sagacity:
            shop = Shop()
            call(sagacity, shop, "s-3", 1, linger=6000)
            counted = Counted(sagacity, monkeypatch)
            clock.advance(401)  # 199 s of 600 left
            assert call(sagacity, shop, "s-3", 2, linger=0).result == "ch-2.00"
            assert (counted.takes, counted.releases) == (1, 2)  # the parked, then its own
            assert [e.phase for e in sagacity.history("s-3")] == [
                Phase.INTENT,
                Phase.EXECUTED,
                Phase.INTENT,
                Phase.EXECUTED,
            ]

    def test_two_threads_joining_at_once_take_turns(
        self, store_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """One adopts the parked lease; the other finds the saga busy, waits, then goes.

        The calls never interleave: each INTENT is followed by its own EXECUTED.
        """
        with Sagacity.from_url(store_url, lease_ttl=60.0, lease_wait=60.0) as sagacity:
            refused = threading.Event()
            journal = sagacity.journal
            take = journal.acquire_lease

            def take_noting_refusal(*args: Any, **kwargs: Any) -> SagaLease:
                try:
                    return take(*args, **kwargs)
                except SagaBusyError:
                    refused.set()
                    raise

            monkeypatch.setattr(journal, "acquire_lease", take_noting_refusal)
            inside = threading.Event()

            class Gated:
                """Charge 2, once inside, waits until the other thread was refused the lease."""

                @compensable(by="refund")
                def charge_card(self, amount: str, card: str) -> str:
                    if amount == "2.00":
                        inside.set()
                        assert refused.wait(60), "the other thread never tried the lease"
                    return f"ch-{amount}"

                @compensation
                def refund(self) -> None:
                    """Nothing to undo here."""

            gated = Gated()
            call(sagacity, gated, "s-4", 1)
            results: dict[int, Any] = {}
            errors: list[BaseException] = []

            def step(n: int) -> None:
                try:
                    results[n] = call(sagacity, gated, "s-4", n).result
                except BaseException as error:  # reported by the assertion below
                    errors.append(error)

            first = threading.Thread(target=step, args=(2,))
            first.start()
            assert inside.wait(60), errors
            second = threading.Thread(target=step, args=(3,))
            second.start()
            first.join(60)
            second.join(60)
            assert errors == []
            assert results == {2: "ch-2.00", 3: "ch-3.00"}
            entries = sagacity.history("s-4")
            pairs = [(e.phase.value, e.call_id) for e in entries]
            assert pairs == [
                ("INTENT", "charge-1"),
                ("EXECUTED", "charge-1"),
                ("INTENT", "charge-2"),
                ("EXECUTED", "charge-2"),
                ("INTENT", "charge-3"),
                ("EXECUTED", "charge-3"),
            ]
            assert verify(journal, "s-4").ok


class TestNotKept:
    def test_a_call_that_raised_lets_the_saga_go_at_once(
        self, pair: tuple[Sagacity, Sagacity]
    ) -> None:
        """After a failed call, another worker takes the saga with no wait."""
        one, two = pair
        shop = Shop(ship_fails=True)
        tools = {t.name: t for t in one.wrap(shop)}
        with pytest.raises(RuntimeError):
            run_call(
                one,
                "s-5",
                tools["ship"],
                call_id="ship-1",
                arguments={"order_id": "o-1"},
                approved=False,
                resumer="test",
                linger=600,
            )
        with two.join("s-5", wait=0) as scope:
            assert scope.failed

    def test_a_call_that_waits_for_a_human_lets_the_saga_go_at_once(
        self, pair: tuple[Sagacity, Sagacity]
    ) -> None:
        """A request left pending: the human's process rejects with no wait."""
        one, two = pair
        ran = call(one, Shop(), "s-6", 1, linger=600, tool="send_wire_transfer")
        assert ran.request_id is not None
        two.wrap(Shop())
        result = two.reject("s-6", approver="alice", reason="no")  # its lease, no wait
        assert result.outcome is SagaOutcome.COMPENSATED
        assert [e.phase for e in two.history("s-6")][-2:] == [Phase.REJECTED, Phase.ENDED]

    def test_closing_the_sagacity_releases_what_it_parked(
        self, pair: tuple[Sagacity, Sagacity]
    ) -> None:
        """Busy while parked (a zero wait is refused as ever), free once the owner closes."""
        one, two = pair
        call(one, Shop(), "s-7", 1, linger=600)
        with pytest.raises(SagaBusyError), two.join("s-7", wait=0):
            pass  # pragma: no cover - never entered
        one.close()
        with two.join("s-7", wait=0) as scope:
            assert [e.phase for e in scope.history.entries] == [Phase.INTENT, Phase.EXECUTED]


class TestAnotherWorker:
    def test_another_worker_waits_about_the_linger_then_gets_the_saga(
        self, pair: tuple[Sagacity, Sagacity]
    ) -> None:
        """Released by the renewer once the linger passed: no expiry waited, no TAKEN_OVER."""
        one, two = pair
        call(one, Shop(), "s-8", 1, linger=0.3)
        started = time.monotonic()
        assert call(two, Shop(), "s-8", 2, linger=0).result == "ch-2.00"  # waits (lease_wait)
        waited = time.monotonic() - started
        assert waited < 30, f"waited {waited:.1f} s: the lease expired, it was not released"
        assert phases(two, "s-8") == [
            ("INTENT", "charge-1"),
            ("EXECUTED", "charge-1"),
            ("INTENT", "charge-2"),
            ("EXECUTED", "charge-2"),
        ]

    def test_an_entry_appended_while_parked_is_read(self, store_url: str) -> None:
        """An INTENT another writer journaled meanwhile moves the head: the call is in doubt.

        Trusting the kept history would have run the charge a second time.
        """
        with Sagacity.from_url(store_url, lease_ttl=60.0) as sagacity:
            shop = Shop()
            call(sagacity, shop, "s-9", 1)
            journal_intent(
                sagacity,
                "s-9",
                "charge-2",
                tool_name="charge_card",
                tool_input={"amount": "2.00", "card": "4242"},
            )
            with pytest.raises(InDoubtError):
                call(sagacity, shop, "s-9", 2)
            assert shop.calls["charge_card"] == 1
            assert [e.phase for e in sagacity.history("s-9")] == [
                Phase.INTENT,
                Phase.EXECUTED,
                Phase.INTENT,
            ]

    def test_a_lease_lost_while_parked_appends_nothing(self, shared_store_url: str) -> None:
        """Taken over after its expiry (the holder's clock stood still): the adopter is fenced.

        Its next call adopts the lease it still believes in, reads the moved head, and its
        INTENT is refused: the tool never runs, nothing of its lands after the takeover.
        """
        # Renewed every 200 s: not during the test.
        one = Sagacity.from_url(shared_store_url, clock=FakeClock(T0), lease_ttl=600.0)
        later = FakeClock(T0 + datetime.timedelta(hours=1))
        two = Sagacity.from_url(shared_store_url, clock=later, lease_ttl=60.0)
        try:
            shop = Shop()
            call(one, shop, "s-10", 1, linger=600)
            assert call(two, Shop(), "s-10", 9, linger=0).result == "ch-9.00"
            with pytest.raises(LeaseLostError):
                call(one, shop, "s-10", 2, linger=600)
            assert shop.calls["charge_card"] == 1
            assert phases(two, "s-10") == [
                ("INTENT", "charge-1"),
                ("EXECUTED", "charge-1"),
                ("TAKEN_OVER", None),
                ("INTENT", "charge-9"),
                ("EXECUTED", "charge-9"),
            ]
            assert verify(two.journal, "s-10").ok
        finally:
            one.close()
            two.close()


def linger_child(url: str, ledger: Path, saga_id: str, linger: float) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.processes._linger_child", url, str(ledger), saga_id,
         str(linger)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert child.stdout is not None
    line = child.stdout.readline()
    if line != "parked\n":
        child.kill()
        _, errors = child.communicate(timeout=30)
        raise AssertionError(f"the child said {line!r}: {errors}")
    return child


def charge_in(url: str, ledger: Path, saga_id: str, **options: Any) -> Callable[[], Ran]:
    """A call `charge-2` of the saga by a worker of this process, with the child's tools."""
    from tests.processes._lease_child import Ledger

    def run() -> Ran:
        with Sagacity.from_url(url, lease_ttl=60.0, **options) as sagacity:
            tools = {t.name: t for t in sagacity.wrap(Ledger(ledger))}
            return run_call(
                sagacity,
                saga_id,
                tools["charge"],
                call_id="charge-2",
                arguments={"amount": "2.00"},
                approved=False,
                resumer="test",
            )

    return run


def ledger_lines(ledger: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in ledger.read_text().splitlines()]


@pytest.mark.slow
class TestParkedProcesses:
    def test_another_process_waits_for_a_parked_saga_about_the_linger(
        self, shared_store_url: str, tmp_path: Path
    ) -> None:
        """The child parks for 3 s and stays alive: this worker waits, then gets the saga.

        Released by the child's renewer (no TAKEN_OVER), long before the lease's expiry.
        """
        ledger = tmp_path / "ledger"
        child = linger_child(shared_store_url, ledger, "p-1", 3.0)
        try:
            with pytest.raises(SagaBusyError):  # refused at once, as for any holder
                charge_in(shared_store_url, ledger, "p-1")()
            started = time.monotonic()
            assert charge_in(shared_store_url, ledger, "p-1", lease_wait=60)().result == "ch-2.00"
            assert time.monotonic() - started < 30
        finally:
            child.communicate("exit\n", timeout=60)
        assert child.returncode == 0
        with Sagacity.from_url(shared_store_url) as sagacity:
            assert [e.phase for e in sagacity.history("p-1")] == [Phase.INTENT, Phase.EXECUTED] * 2
        assert ledger_lines(ledger) == ["charge 1.00", "charge 2.00"]

    def test_a_process_that_exits_releases_what_it_parked(
        self, shared_store_url: str, tmp_path: Path
    ) -> None:
        """Parked for 10 minutes, the child exits normally: its at-exit hook frees the saga."""
        ledger = tmp_path / "ledger"
        child = linger_child(shared_store_url, ledger, "p-2", 600)
        child.communicate("exit\n", timeout=60)
        assert child.returncode == 0
        assert charge_in(shared_store_url, ledger, "p-2")().result == "ch-2.00"  # no wait
        with Sagacity.from_url(shared_store_url) as sagacity:
            assert Phase.TAKEN_OVER not in [e.phase for e in sagacity.history("p-2")]

    def test_a_killed_parked_process_is_taken_over_at_once(
        self, shared_store_url: str, tmp_path: Path
    ) -> None:
        """SIGKILL while parked: the next worker here sees its holder gone and takes over.

        TAKEN_OVER is journaled after the dead worker's entries, which stay as they were.
        """
        ledger = tmp_path / "ledger"
        child = linger_child(shared_store_url, ledger, "p-3", 600)
        try:
            with Sagacity.from_url(shared_store_url) as sagacity:
                before = sagacity.history("p-3")
        finally:
            kill(child)
            child.communicate(timeout=30)
        assert charge_in(shared_store_url, ledger, "p-3")().result == "ch-2.00"  # no wait
        with Sagacity.from_url(shared_store_url) as sagacity:
            after = sagacity.history("p-3")
            assert verify(sagacity.journal, "p-3").ok
        assert after[:2] == before
        assert [e.phase for e in after] == [
            Phase.INTENT,
            Phase.EXECUTED,
            Phase.TAKEN_OVER,
            Phase.INTENT,
            Phase.EXECUTED,
        ]
        assert ledger_lines(ledger) == ["charge 1.00", "charge 2.00"]
