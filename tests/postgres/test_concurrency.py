"""Appends to one saga from many threads and processes at once, against the real server."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from sagacity import Phase
from sagacity.journal.postgres import PostgresJournal
from tests._postgres import with_query
from tests.postgres._checks import Acked, assert_sound, timed_append

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]


def run_threads(count: int, work: Callable[[int], list[Acked]]) -> list[Acked]:
    """Start `count` threads together on `work(index) -> list[Acked]`; re-raise any error."""
    barrier = threading.Barrier(count)
    results: list[list[Acked]] = [[] for _ in range(count)]
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait()
            results[index] = work(index)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [acked for result in results for acked in result]


def appends(journal: PostgresJournal, saga_id: str, count: int) -> list[Acked]:
    """Append `count` INTENT entries to one saga, timing each."""
    return [
        timed_append(lambda n=n: journal.append(saga_id, Phase.INTENT, payload=n))
        for n in range(count)
    ]


class TestManyWritersOnOneSaga:
    @pytest.mark.slow
    def test_sixteen_threads_share_one_journal(self, pg_url: str) -> None:
        """16 threads x 200 appends through one journal: one chain of 3,200, few retries.

        Threads that collide on a seq queue on the saga's lock from then on, so the
        retries stay a handful, not one per append.
        """
        journal = PostgresJournal(with_query(pg_url, pool_max_size="16"))
        try:
            acked = run_threads(
                16,
                lambda _: appends(journal, "order-1", 200),
            )
            assert_sound(journal, "order-1", acked)
            assert len(acked) == 3200
            assert journal.stats.retries < 64  # of 3,200 appends
        finally:
            journal.close()

    @pytest.mark.slow
    def test_sixteen_threads_each_with_its_own_journal(self, pg_url: str) -> None:
        """16 workers with their own pools x 200 appends: they queue on the saga's lock."""
        url = with_query(pg_url, pool_max_size="1")
        journals = [PostgresJournal(url) for _ in range(16)]
        try:
            acked = run_threads(
                16,
                lambda i: appends(journals[i], "order-1", 200),
            )
            assert_sound(journals[0], "order-1", acked)
            assert len(acked) == 3200
            # A worker loses a seq now and then, then queues on the lock.
            assert sum(j.stats.retries for j in journals) < 160  # of 3,200 appends
        finally:
            for journal in journals:
                journal.close()

    @pytest.mark.slow
    def test_four_processes(self, pg_url: str) -> None:
        """4 processes x 200 appends to one saga: 800 entries in one verified chain."""
        workers = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.postgres._worker", "append", pg_url, "s", "200"],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        for worker in workers:
            assert worker.stdout is not None
            assert worker.stdout.readline().strip() == "ready"
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        acked: list[Acked] = []
        for worker in workers:
            out, _ = worker.communicate(timeout=60)
            assert worker.returncode == 0
            *lines, _retries = out.splitlines()
            acked += [Acked(*json.loads(line)) for line in lines]
        journal = PostgresJournal(pg_url)
        try:
            assert len(acked) == 800
            assert_sound(journal, "s", acked)
        finally:
            journal.close()

    @pytest.mark.parametrize("seen", [False, True], ids=["unseen", "read-first"])
    def test_sixty_four_writers_race_on_the_first_append(self, pg_url: str, seen: bool) -> None:
        """64 workers append the first entries of a new saga at once: seq 1..64, one chain.

        Workers that read the (empty) saga first all try seq 1 on the fast path: 63
        lose it on the primary key and take the locked path; none is dropped.
        """
        url = with_query(pg_url, pool_max_size="1")
        journals = [PostgresJournal(url) for _ in range(64)]
        try:
            if seen:
                for journal in journals:
                    assert journal.entries("new-saga") == []
            acked = run_threads(
                64,
                lambda i: appends(journals[i], "new-saga", 1),
            )
            assert_sound(journals[0], "new-saga", acked)
            conflicts = sum(j.stats.conflicts for j in journals)
            if seen:
                assert conflicts >= 63
            else:
                assert conflicts == 0  # unseen sagas go straight to the lock
        finally:
            for journal in journals:
                journal.close()
