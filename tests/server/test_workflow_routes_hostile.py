"""The workflow routes under bad input and late decisions: a clear 4xx, never a 500.

Every refusal names what was wrong (the field, the run and its status) and journals
nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from sagacity import Sagacity
from sagacity.server import router
from sagacity.testing import FakeClock
from sagacity.workflows import WorkflowRuntime
from tests.server._bank import ALICE, BOB, OLGA, VIEWER, token_auth
from tests.workflows._guarded import GuardedPayout
from tests.workflows._refund import REQUEST, Ledger, RefundWorkflow

RUN = "refund-1"
APPROVE = f"/sagacity/workflows/{RUN}/gates/wire/approve"
REJECT = f"/sagacity/workflows/{RUN}/gates/wire/reject"
JSON = {"content-type": "application/json"}

Served = tuple[Sagacity, WorkflowRuntime, Ledger]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def served(tmp_path: Path, clock: FakeClock) -> Iterator[Served]:
    """A SQLite Sagacity with the refund workflow's runtime, its run paused at the gate."""
    sagacity = Sagacity.from_url(f"sqlite:///{tmp_path / 'sagacity.db'}", clock=clock)
    ledger = Ledger(tmp_path / "ledger.txt")
    runtime = WorkflowRuntime(sagacity, [RefundWorkflow(ledger)])
    runtime.start("refund-request", REQUEST, run_id=RUN)
    yield sagacity, runtime, ledger
    sagacity.close()


@pytest.fixture
def client(served: Served) -> Iterator[TestClient]:
    """The server's router over the Sagacity; a 500 comes back as a response, not raised."""
    app = FastAPI()
    app.include_router(router(served[0], token_auth(), ui=False))
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def sha_of(served: Served) -> str:
    gate = served[1].get(RUN).gate
    assert gate is not None
    return gate.input_sha256


class TestBadBodies:
    @pytest.mark.parametrize(
        ("url", "body", "names"),
        [
            (APPROVE, b"{not json", "JSON decode error"),
            (APPROVE, b"[1]", "body: Input should be a valid dictionary"),
            (APPROVE, b"{}", "body.sha256: Field required"),
            (APPROVE, b'{"sha256": 5}', "body.sha256: Input should be a valid string"),
            (APPROVE, b'{"sha256": "ABC"}', "body.sha256: String should match pattern"),
            (APPROVE, b'{"sha256": null}', "body.sha256: Input should be a valid string"),
            (APPROVE, b"", "body: Field required"),
            (REJECT, b"{}", "body.reason: Field required"),
            (REJECT, b'{"reason": ""}', "body.reason: String should have at least 1"),
            (REJECT, b'{"reason": ["no"]}', "body.reason: Input should be a valid string"),
            (
                REJECT,
                b'{"reason": "' + b"x" * 4001 + b'"}',
                "body.reason: String should have at most",
            ),
        ],
    )
    def test_a_bad_body_is_a_4xx_naming_the_field(
        self, client: TestClient, served: Served, url: str, body: bytes, names: str
    ) -> None:
        """Malformed JSON or a wrong field: 4xx, the message names it, the gate still waits."""
        entries = len(served[0].history(RUN))
        response = client.post(url, content=body, headers={**ALICE, **JSON})
        assert 400 <= response.status_code < 500, response.text
        assert names in response.json()["message"]
        assert len(served[0].history(RUN)) == entries
        assert served[1].get(RUN).gate.state == "waiting"  # type: ignore[union-attr]

    @pytest.mark.parametrize(
        ("path", "names"),
        [
            ("/sagacity/workflows/refund-1/gates/wi%20re/approve", "path.stage"),
            ("/sagacity/workflows/refund-1/gates/wi%E2%80%AEre/approve", "path.stage"),
            ("/sagacity/workflows/refund-1/gates/" + "w" * 49 + "/approve", "path.stage"),
            ("/sagacity/workflows/refund%001/gates/wire/approve", "path.run_id"),
            ("/sagacity/workflows/" + "r" * 513 + "/gates/wire/approve", "path.run_id"),
        ],
    )
    def test_a_hostile_stage_or_run_in_the_path_is_422_naming_it(
        self, client: TestClient, served: Served, path: str, names: str
    ) -> None:
        """A control, bidi or overlong name in the path is refused before anything is read."""
        response = client.post(path, json={"sha256": sha_of(served)}, headers=ALICE)
        assert response.status_code == 422
        assert names in response.json()["message"]
        assert served[1].get(RUN).gate.state == "waiting"  # type: ignore[union-attr]

    @pytest.mark.parametrize(
        ("stage", "says"),
        [("reserve_funds", "no gate waits before stage 'reserve_funds'"), ("nope", "no stage")],
    )
    def test_a_stage_without_a_waiting_gate_is_404(
        self, client: TestClient, served: Served, stage: str, says: str
    ) -> None:
        """A stage that is not gated, or not of the workflow: 404 naming it."""
        response = client.post(
            f"/sagacity/workflows/{RUN}/gates/{stage}/approve",
            json={"sha256": sha_of(served)},
            headers=ALICE,
        )
        assert response.status_code == 404
        assert says in response.json()["message"]

    @pytest.mark.parametrize(
        ("url", "body"),
        [(APPROVE, b'{"sha256": NaN}'), (REJECT, b'{"reason": "\\ud800"}')],
    )
    def test_a_value_json_cannot_echo_is_still_a_422(
        self, client: TestClient, url: str, body: bytes
    ) -> None:
        """`NaN` and an escaped lone surrogate parse, fail validation, and answer 422."""
        response = client.post(url, content=body, headers={**ALICE, **JSON})
        assert response.status_code == 422
        answer = response.json()
        assert answer["error"] == "ValidationError"
        field = "sha256" if url == APPROVE else "reason"
        assert f"body.{field}: " in answer["message"]


class TestLateDecisions:
    def test_a_gate_of_a_completed_run_cannot_be_approved_or_rejected(
        self, client: TestClient, served: Served
    ) -> None:
        """After the run completed: 404 naming the run's status; nothing is journaled."""
        sha = sha_of(served)
        assert client.post(APPROVE, json={"sha256": sha}, headers=ALICE).status_code == 200
        done = client.post(f"/sagacity/workflows/{RUN}/resume", headers=OLGA)
        assert done.json()["status"] == "COMPLETED"
        entries = len(served[0].history(RUN))
        for response in (
            client.post(APPROVE, json={"sha256": sha}, headers=BOB),
            client.post(REJECT, json={"reason": "too late"}, headers=BOB),
        ):
            assert response.status_code == 404
            assert "(the run is COMPLETED)" in response.json()["message"]
        assert len(served[0].history(RUN)) == entries
        assert len(served[2].lines()) == 3  # reserve, wire, notify: once each

    def test_a_gate_of_a_compensated_run_cannot_be_approved(
        self, client: TestClient, served: Served
    ) -> None:
        """Rejected and compensated: approving it, by either route, is 404 and runs nothing."""
        sha = sha_of(served)
        (request,) = served[0].pending(RUN)
        rejected = client.post(REJECT, json={"reason": "duplicate"}, headers=BOB)
        assert rejected.json()["status"] == "COMPENSATED"
        entries = len(served[0].history(RUN))
        late = client.post(APPROVE, json={"sha256": sha}, headers=ALICE)
        assert late.status_code == 404
        assert "(the run is COMPENSATED)" in late.json()["message"]
        core = client.post(
            f"/sagacity/approvals/{request.request_id}/approve",
            json={"sha256": sha},
            headers=ALICE,
        )
        assert core.status_code == 404
        resumed = client.post(f"/sagacity/workflows/{RUN}/resume", headers=OLGA)
        assert resumed.json()["status"] == "COMPENSATED"
        assert len(served[0].history(RUN)) == entries
        assert served[2].lines() == ["reserve A-17 120.00", "release res-A-17"]

    def test_a_gate_approved_past_its_timeout_is_refused_and_the_run_compensates(
        self, client: TestClient, served: Served, clock: FakeClock
    ) -> None:
        """Approved through the API after the timeout: 403 (expired), the run is undone."""
        sha = sha_of(served)
        clock.advance(3601)
        late = client.post(APPROVE, json={"sha256": sha}, headers=ALICE)
        assert late.status_code == 403
        assert late.json()["error"] == "ApprovalExpiredError"
        run = client.get(f"/sagacity/workflows/{RUN}", headers=VIEWER).json()
        assert run["status"] == "COMPENSATED"
        assert served[2].lines() == ["reserve A-17 120.00", "release res-A-17"]


class TestBusyRun:
    def test_resume_while_another_worker_runs_the_approved_stage_is_409(
        self, tmp_path: Path
    ) -> None:
        """The worker inside the gated stage holds the run: the route answers 409, runs nothing."""
        url = f"sqlite:///{tmp_path / 'busy.db'}"
        served, working = Sagacity.from_url(url), Sagacity.from_url(url)
        try:
            payer, bystander = GuardedPayout(), GuardedPayout()
            worker = WorkflowRuntime(working, [payer])
            here = WorkflowRuntime(served, [bystander])
            worker.start("guarded-payout", 30, run_id="busy-1")
            worker.approve_gate("busy-1", "pay", "alice")
            payer.release.clear()
            resumed: list[Any] = []
            thread = threading.Thread(target=lambda: resumed.append(worker.resume("busy-1")))
            thread.start()
            assert payer.paying.wait(10)
            app = FastAPI()
            app.include_router(router(served, token_auth(), ui=False))
            with TestClient(app, raise_server_exceptions=False) as client:
                busy = client.post("/sagacity/workflows/busy-1/resume", headers=OLGA)
                assert busy.status_code == 409
                assert busy.json()["error"] == "SagaBusyError"
                payer.release.set()
                thread.join(10)
                done = client.post("/sagacity/workflows/busy-1/resume", headers=OLGA)
                assert done.json()["status"] == "COMPLETED"
            assert resumed[0].status.value == "COMPLETED"
            assert payer.log == ["hold 30", "pay 30", "receipt payment-30"]
            assert bystander.log == []
            assert here.get("busy-1").result == "receipt-payment-30"
        finally:
            served.close()
            working.close()
