"""The server shows each open saga's worker: the REST listing, STALLED, and the inbox pages."""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from sagacity import Phase, Sagacity
from sagacity.server import TokenAuth, create_app
from tests.server._bank import TOKENS, VIEWER
from tests.server.test_ui import UI, sign_in

HOUR = datetime.timedelta(hours=1)


def _stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture
def leased(store_url: str) -> Iterator[tuple[Sagacity, str, str]]:
    """Three sagas: one whose holder elsewhere stopped renewing, one held, one ended.

    Yields the Sagacity, the dead lease's expiry and the live lease's expiry.
    """
    sagacity = Sagacity.from_url(store_url)
    journal = sagacity.journal
    now = sagacity.now()
    for saga_id in ("far-dead", "far-live", "ended"):
        journal.append(saga_id, Phase.INTENT, tool_name="t", call_id="t#1", payload={})
    journal.append("ended", Phase.ENDED, payload={"outcome": "COMPLETED"})
    journal.acquire_lease("far-dead", "far-host:4242:ab:ns1", now=now - HOUR, expires_at=now - HOUR)
    journal.acquire_lease("far-live", "far-host:4243:ab:ns1", now=now, expires_at=now + HOUR)
    yield sagacity, _stamp(now - HOUR), _stamp(now + HOUR)
    sagacity.close()


@pytest.fixture
def client(leased: tuple[Sagacity, str, str]) -> Iterator[TestClient]:
    app = create_app(leased[0], TokenAuth.from_tokens(TOKENS))
    with TestClient(app) as test_client:
        yield test_client


class TestRestListing:
    def test_each_open_saga_shows_its_worker(
        self, client: TestClient, leased: tuple[Sagacity, str, str]
    ) -> None:
        """GET /sagacity/sagas: worker and stalled for each saga; null for one that ended."""
        _, expired, until = leased
        body = client.get("/sagacity/sagas", headers=VIEWER).json()
        listed = {s["saga_id"]: s for s in body["sagas"]}
        assert listed["far-dead"]["worker"] == {
            "live": False,
            "holder": "far-host:4242:ab:ns1",
            "expires_at": expired,
            "since": expired,
            "gone": False,
        }
        assert listed["far-dead"]["stalled"] is True
        assert listed["far-live"]["worker"] == {
            "live": True,
            "holder": "far-host:4243:ab:ns1",
            "expires_at": until,
            "since": None,
            "gone": False,
        }
        assert listed["far-live"]["stalled"] is False
        assert (listed["ended"]["worker"], listed["ended"]["stalled"]) == (None, False)

    def test_status_stalled_lists_the_open_sagas_nobody_works_on(self, client: TestClient) -> None:
        """?status=STALLED: the saga whose lease expired unrenewed, not the held one."""
        body = client.get("/sagacity/sagas", params={"status": "STALLED"}, headers=VIEWER).json()
        assert [s["saga_id"] for s in body["sagas"]] == ["far-dead"]
        bad = client.get("/sagacity/sagas", params={"status": "STALE"}, headers=VIEWER)
        assert bad.status_code == 422


class TestInbox:
    def test_the_sagas_page_shows_workers_and_filters_stalled(
        self, client: TestClient, leased: tuple[Sagacity, str, str]
    ) -> None:
        """The sagas page has a Worker column and a STALLED filter; the saga page says it."""
        _, expired, until = leased
        sign_in(client, "tok-viewer")
        page = client.get(f"{UI}/sagas").text
        assert 'href="/sagacity/ui/sagas?status=STALLED"' in page
        assert (
            f"no live worker since {expired} (far-host:4242:ab:ns1 stopped renewing its lease)"
        ) in page
        assert f"held by far-host:4243:ab:ns1 until {until}" in page
        stalled = client.get(f"{UI}/sagas", params={"status": "STALLED"}).text
        assert 'data-saga="far-dead"' in stalled
        assert 'data-saga="far-live"' not in stalled
        assert 'data-saga="ended"' not in stalled
        saga = client.get(f"{UI}/saga", params={"id": "far-dead"}).text
        assert (
            '<p class="worker" id="worker"><strong>Stalled:</strong> Worker: no live worker '
            f"since {expired} (far-host:4242:ab:ns1 stopped renewing its lease)</p>"
        ) in saga
        ended = client.get(f"{UI}/saga", params={"id": "ended"}).text
        assert 'id="worker"' not in ended
