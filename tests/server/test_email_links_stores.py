"""A link's single use on every backend: memory, SQLite and PostgreSQL, and across servers."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from sagacity import Sagacity
from sagacity._stores import open_stores
from sagacity.server import create_app
from sagacity.server._links import ApprovalLinks
from sagacity.server._nonces import NonceStore, nonce_store_for
from tests.server._bank import ALICE, BOB, Bank, start_wire, token_auth

SECRET = "link-secret-for-the-tests-0123456789abcdef"
NOW = datetime.datetime(2026, 12, 6, 12, 0, tzinfo=datetime.UTC)
LATER = NOW + datetime.timedelta(hours=1)


@pytest.fixture
def marks(store_url: str) -> Iterator[NonceStore]:
    """The mark store beside the approval requests of each backend."""
    journal, approvals = open_stores(store_url)
    store = nonce_store_for(approvals)
    yield store
    store.close()
    journal.close()
    approvals.close()


class TestMarks:
    def test_a_mark_is_taken_once(self, marks: NonceStore) -> None:
        """The first take wins; the same nonce again is refused; scopes are apart."""
        assert marks.take("email-link", "n-1", by="alice", now=NOW, until=LATER)
        assert not marks.take("email-link", "n-1", by="bob", now=NOW, until=LATER)
        assert marks.take("slack-request", "n-1", by="U1", now=NOW, until=LATER)
        assert marks.take("email-link", "n-2", by="alice", now=NOW, until=LATER)

    def test_a_mark_is_forgotten_once_what_it_guards_expired(self, marks: NonceStore) -> None:
        """Past `until` a mark is purged (the link is refused for its age by then)."""
        assert marks.take("email-link", "n-1", by="alice", now=NOW, until=LATER)
        after = LATER + datetime.timedelta(seconds=1)
        assert marks.take("email-link", "n-2", by="alice", now=after, until=after)  # purges
        assert marks.take("email-link", "n-1", by="alice", now=after, until=after)


class TestAcrossServers:
    def test_racing_servers_take_a_mark_once(self, shared_store_url: str) -> None:
        """Two servers' stores, eight threads, one nonce: exactly one take wins."""
        opened = [open_stores(shared_store_url) for _ in range(2)]
        stores = [nonce_store_for(approvals) for _, approvals in opened]
        start = threading.Barrier(8)
        wins: list[bool] = []
        lock = threading.Lock()

        def take(store: NonceStore) -> None:
            start.wait()
            won = store.take("email-link", "race", by="x", now=NOW, until=LATER)
            with lock:
                wins.append(won)

        threads = [threading.Thread(target=take, args=(stores[i % 2],)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        for store in stores:
            store.close()
        for journal, approvals in opened:
            journal.close()
            approvals.close()
        assert sorted(wins) == [False] * 7 + [True]

    def test_a_link_used_on_one_server_is_refused_by_another(
        self, shared_store_url: str, bank: Bank
    ) -> None:
        """Two server processes over one database: the second opening is refused."""
        first = Sagacity.from_url(shared_store_url)
        second = Sagacity.from_url(shared_store_url)
        first.wrap(bank)
        links = [ApprovalLinks(SECRET, inbox_url="http://testserver/sagacity/ui") for _ in "ab"]
        try:
            start_wire(first, bank, "order-1")
            (request,) = first.pending("order-1")
            path = links[0].make(request).removeprefix("http://testserver")
            with (
                TestClient(create_app(first, token_auth(), ui={"links": links[0]})) as a,
                TestClient(create_app(second, token_auth(), ui={"links": links[1]})) as b,
            ):
                opened = a.get(path, headers=ALICE, follow_redirects=False)
                reused = b.get(path, headers=BOB, follow_redirects=False)
            assert opened.status_code == 303
            assert reused.status_code == 410
            assert "used already" in reused.text
        finally:
            for made in links:
                made.close()
            first.close()
            second.close()
