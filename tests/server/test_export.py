"""GET /sagacity/export streams what the audit exporters write, a chunk at a time."""

from __future__ import annotations

import io

from fastapi.testclient import TestClient

from sagacity import Phase, Sagacity
from sagacity.audit import export_csv, export_jsonl, read_jsonl, verify_entries
from tests.server._bank import VIEWER


def _fill(sagacity: Sagacity, sagas: int, calls: int) -> None:
    for n in range(sagas):
        for c in range(calls):
            sagacity.journal.append(
                f"exp-{n:03d}",
                Phase.INTENT,
                tool_name="t",
                call_id=f"c{c}",
                payload={"input": {"note": '<script>alert(1)</script>, "quoted"\n' * 3}},
            )


def test_jsonl_equals_the_exporter_and_verifies(client: TestClient, sagacity: Sagacity) -> None:
    """The streamed JSON Lines are byte-identical to export_jsonl and verify on their own."""
    _fill(sagacity, 10, 30)
    expected = io.StringIO()
    export_jsonl(sagacity.journal, expected)
    chunks = 0
    body = b""
    with client.stream("GET", "/sagacity/export", headers=VIEWER) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        for chunk in response.iter_raw():
            chunks += 1
            body += chunk
    assert body.decode() == expected.getvalue()
    assert chunks > 1  # streamed, not built whole
    entries = list(read_jsonl(body.decode().splitlines()))
    assert len(entries) == 300
    assert verify_entries(entries).ok


def test_csv_and_one_saga(client: TestClient, sagacity: Sagacity) -> None:
    """format=csv equals export_csv; saga_id= exports that saga only."""
    _fill(sagacity, 3, 4)
    expected = io.StringIO()
    export_csv(sagacity.journal, expected, "exp-001")
    response = client.get(
        "/sagacity/export", params={"format": "csv", "saga_id": "exp-001"}, headers=VIEWER
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert response.text == expected.getvalue()
    assert response.text.count("exp-001") == 4
    assert "exp-000" not in response.text


def test_unknown_saga_is_404(client: TestClient) -> None:
    """Exporting a saga that has no entries is 404, not an empty file."""
    response = client.get("/sagacity/export", params={"saga_id": "ghost"}, headers=VIEWER)
    assert response.status_code == 404
    assert response.json()["saga_id"] == "ghost"
