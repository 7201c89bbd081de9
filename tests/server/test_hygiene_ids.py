"""Ids holding `/` reach their own routes only, over real HTTP (uvicorn on loopback).

The server decodes `%2F` before routing; the JSON API splits on the raw path instead,
so a percent-encoded id is one segment and can never be read as another id and a
route suffix.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from sagacity import Phase, Sagacity
from sagacity.server import create_app
from tests.server._bank import OLGA, VIEWER, token_auth
from tests.server._live import live_server


@pytest.fixture
def base(sagacity: Sagacity) -> Iterator[str]:
    """A live server over `sagacity`."""
    with live_server(create_app(sagacity, token_auth(), ui=False)) as url:
        yield url


def _doubt(sagacity: Sagacity, saga_id: str, call_id: str) -> None:
    sagacity.journal.append(
        saga_id, Phase.INTENT, tool_name="reserve", call_id=call_id, payload={"input": {}}
    )


def _phases(sagacity: Sagacity, saga_id: str) -> list[tuple[str, str | None]]:
    return [(e.phase.value, e.call_id) for e in sagacity.journal.entries(saga_id)]


class TestResolve:
    def test_an_encoded_call_id_is_resolved_on_its_own_saga(
        self, sagacity: Sagacity, base: str
    ) -> None:
        """Saga `A`, call `B/calls/C` is resolved there, not as saga `A/calls/B`, call `C`."""
        _doubt(sagacity, "A", "B/calls/C")
        _doubt(sagacity, "A/calls/B", "C")
        answer = httpx.post(
            f"{base}/sagacity/sagas/A/calls/B%2Fcalls%2FC/resolve",
            json={"executed": False},
            headers=OLGA,
        )
        assert answer.status_code == 200, answer.text
        assert (answer.json()["saga_id"], answer.json()["call_id"]) == ("A", "B/calls/C")
        assert _phases(sagacity, "A") == [("INTENT", "B/calls/C"), ("FAILED", "B/calls/C")]
        assert _phases(sagacity, "A/calls/B") == [("INTENT", "C")]

    def test_an_encoded_saga_id_is_resolved_on_itself(self, sagacity: Sagacity, base: str) -> None:
        """Saga `A/calls/B`, call `C`, percent-encoded, is that saga's call."""
        _doubt(sagacity, "A", "B/calls/C")
        _doubt(sagacity, "A/calls/B", "C")
        answer = httpx.post(
            f"{base}/sagacity/sagas/A%2Fcalls%2FB/calls/C/resolve",
            json={"executed": False},
            headers=OLGA,
        )
        assert answer.status_code == 200, answer.text
        assert _phases(sagacity, "A/calls/B") == [("INTENT", "C"), ("FAILED", "C")]
        assert _phases(sagacity, "A") == [("INTENT", "B/calls/C")]

    def test_an_unencoded_slash_reaches_no_route(self, sagacity: Sagacity, base: str) -> None:
        """`/sagas/A/calls/B/calls/C/resolve` names no saga and call: 404, nothing journaled."""
        _doubt(sagacity, "A", "B/calls/C")
        _doubt(sagacity, "A/calls/B", "C")
        answer = httpx.post(
            f"{base}/sagacity/sagas/A/calls/B/calls/C/resolve",
            json={"executed": False},
            headers=OLGA,
        )
        assert answer.status_code == 404, answer.text
        assert _phases(sagacity, "A") == [("INTENT", "B/calls/C")]
        assert _phases(sagacity, "A/calls/B") == [("INTENT", "C")]


class TestRead:
    def test_a_saga_named_like_a_route_suffix_is_read_as_itself(
        self, sagacity: Sagacity, base: str
    ) -> None:
        """`GET /sagas/Q%2Fverify` is saga `Q/verify`; `GET /sagas/Q/verify` verifies `Q`."""
        _doubt(sagacity, "Q", "q-1")
        _doubt(sagacity, "Q/verify", "v-1")
        detail = httpx.get(f"{base}/sagacity/sagas/Q%2Fverify", headers=VIEWER)
        assert detail.status_code == 200, detail.text
        assert detail.json()["summary"]["saga_id"] == "Q/verify"
        assert [e["call_id"] for e in detail.json()["entries"]] == ["v-1"]
        verified = httpx.get(f"{base}/sagacity/sagas/Q/verify", headers=VIEWER)
        assert verified.status_code == 200, verified.text
        body = verified.json()
        assert (body["ok"], body["sagas"], body["entries"]) == (True, 1, 1)

    def test_a_percent_in_an_id_is_kept(self, sagacity: Sagacity, base: str) -> None:
        """`50%2Foff` percent-encoded as `50%252Foff` is that id, not `50/off`."""
        _doubt(sagacity, "50%2Foff", "c-1")
        _doubt(sagacity, "50/off", "c-2")
        detail = httpx.get(f"{base}/sagacity/sagas/50%252Foff", headers=VIEWER)
        assert detail.status_code == 200, detail.text
        assert detail.json()["summary"]["saga_id"] == "50%2Foff"

    def test_the_openapi_document_names_plain_parameters(self, base: str) -> None:
        """Clients generated from the schema see `{saga_id}` and `{call_id}`, one segment each."""
        paths = httpx.get(f"{base}/openapi.json").json()["paths"]
        assert "/sagacity/sagas/{saga_id}/calls/{call_id}/resolve" in paths
        assert "/sagacity/sagas/{saga_id}/verify" in paths
