"""Approvers racing over real HTTP: one approval per principal, whatever the timing."""

from __future__ import annotations

import threading

import httpx

from sagacity import Phase, Sagacity
from sagacity.server import create_app
from tests.server._bank import ALICE, BOB, Bank, start_wire, token_auth
from tests.server._live import live_server


def test_one_principal_racing_itself_is_journaled_once(sagacity: Sagacity, bank: Bank) -> None:
    """Eight simultaneous approvals by alice: one 200, the others 409, one APPROVED entry."""
    start_wire(sagacity, bank, "race-1")
    request = sagacity.pending("race-1")[0]
    statuses: list[int] = []
    barrier = threading.Barrier(8)
    app = create_app(sagacity, token_auth(), ui=False)
    with live_server(app) as base:

        def approve() -> None:
            barrier.wait()
            response = httpx.post(
                f"{base}/sagacity/approvals/{request.request_id}/approve",
                json={"sha256": request.input_sha256},
                headers=ALICE,
                timeout=30,
            )
            statuses.append(response.status_code)

        threads = [threading.Thread(target=approve) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(statuses) == [200] + [409] * 7
    approved = [e for e in sagacity.journal.entries("race-1") if e.phase is Phase.APPROVED]
    assert len(approved) == 1


def test_two_principals_at_once_both_count(sagacity: Sagacity, bank: Bank) -> None:
    """Alice and Bob approve a two-approver request at the same moment: both count."""
    start_wire(sagacity, bank, "race-2", big=True)
    request = sagacity.pending("race-2")[0]
    statuses: list[int] = []
    barrier = threading.Barrier(2)
    app = create_app(sagacity, token_auth(), ui=False)
    with live_server(app) as base:

        def approve(headers: dict[str, str]) -> None:
            barrier.wait()
            response = httpx.post(
                f"{base}/sagacity/approvals/{request.request_id}/approve",
                json={"sha256": request.input_sha256},
                headers=headers,
                timeout=30,
            )
            statuses.append(response.status_code)

        threads = [threading.Thread(target=approve, args=(h,)) for h in (ALICE, BOB)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert statuses == [200, 200]
    (now,) = sagacity.pending("race-2")
    assert now.state == "approved"
    assert sorted(a.approver for a in now.approvals) == ["alice", "bob"]
