"""The workflow routes: runs and their stage flow, gates, approve / reject / resume, expiry."""

from __future__ import annotations

import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI
from fastapi.testclient import TestClient

from sagacity import Phase, Sagacity
from sagacity.server import Principal, TokenAuth, router
from sagacity.server._auth import bind
from sagacity.server._workflow_routes import workflow_router
from sagacity.testing import FakeClock
from sagacity.workflows import WorkflowRuntime
from tests.server._bank import ALICE, BOB, OLGA, TOKENS, VIEWER, bearer, token_auth
from tests.server._live import live_server
from tests.workflows._refund import REQUEST, Ledger, RefundWorkflow

RUN = "refund-1"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def served(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Sagacity, WorkflowRuntime, Ledger]]:
    """A SQLite Sagacity with the refund workflow's runtime built in this process."""
    sagacity = Sagacity.from_url(f"sqlite:///{tmp_path / 'sagacity.db'}", clock=clock)
    ledger = Ledger(tmp_path / "ledger.txt")
    runtime = WorkflowRuntime(sagacity, [RefundWorkflow(ledger)])
    yield sagacity, runtime, ledger
    sagacity.close()


@pytest.fixture
def client(served: tuple[Sagacity, WorkflowRuntime, Ledger]) -> Iterator[TestClient]:
    """The server's router over the Sagacity; it finds the runtime built on it."""
    app = FastAPI()
    app.include_router(router(served[0], token_auth(), ui=False))
    with TestClient(app) as test_client:
        yield test_client


def paused(served: tuple[Sagacity, WorkflowRuntime, Ledger], run_id: str = RUN) -> None:
    served[1].start("refund-request", REQUEST, run_id=run_id)


def flow(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["name"], s["status"]) for s in body["stages"]]


class TestReading:
    def test_the_run_with_its_stage_flow_and_gate(
        self, client: TestClient, served: tuple[Sagacity, WorkflowRuntime, Ledger]
    ) -> None:
        """GET a run: status, current stage, stage flow, and the gate's exact value and hash."""
        paused(served)
        response = client.get(f"/sagacity/workflows/{RUN}", headers=VIEWER)
        assert response.status_code == 200
        body = response.json()
        assert body["status"] == "PAUSED_AT_GATE"
        assert body["current_stage"] == "wire"
        assert flow(body) == [
            ("reserve_funds", "EXECUTED"),
            ("wire", "AWAITING_APPROVAL"),
            ("notify", "PENDING"),
        ]
        gate = served[1].get(RUN).gate
        assert gate is not None
        assert body["gate"]["input_sha256"] == gate.input_sha256
        assert body["gate"]["value"]["amount"] == "120.00"
        assert body["gate"]["stage"] == "wire"
        assert body["gate"]["workflow"] == "refund-request"
        assert body["gate"]["expires_at"] == gate.expires_at.isoformat()  # type: ignore[union-attr]

    def test_lists_runs_by_status_and_the_gates(
        self, client: TestClient, served: tuple[Sagacity, WorkflowRuntime, Ledger]
    ) -> None:
        """GET /workflows filters by status; GET /gates lists what waits, with its hash."""
        paused(served, "refund-1")
        paused(served, "refund-2")
        served[1].reject_gate("refund-2", "wire", "bob", "duplicate")
        runs = client.get("/sagacity/workflows", headers=VIEWER).json()
        assert [(r["run_id"], r["status"]) for r in runs] == [
            ("refund-1", "PAUSED_AT_GATE"),
            ("refund-2", "COMPENSATED"),
        ]
        waiting = client.get("/sagacity/workflows?status=PAUSED_AT_GATE", headers=VIEWER)
        assert [r["run_id"] for r in waiting.json()] == ["refund-1"]
        gates = client.get("/sagacity/gates", headers=VIEWER).json()
        assert [(g["run_id"], g["stage"], g["state"]) for g in gates] == [
            ("refund-1", "wire", "waiting")
        ]
        # The gate is the core's approval request: the approvals list shows it too.
        approvals = client.get("/sagacity/approvals", headers=VIEWER).json()
        assert [a["request_id"] for a in approvals] == [gates[0]["request_id"]]

    def test_unknown_run_and_bad_status(self, client: TestClient) -> None:
        """An unknown run is 404 naming it; an unknown status is 422."""
        missing = client.get("/sagacity/workflows/nope", headers=VIEWER)
        assert missing.status_code == 404
        assert "nope" in missing.json()["message"]
        assert client.get("/sagacity/workflows?status=DONE", headers=VIEWER).status_code == 422

    def test_reading_needs_a_principal(self, client: TestClient) -> None:
        """No token: 401."""
        assert client.get("/sagacity/workflows").status_code == 401
        assert client.get("/sagacity/gates").status_code == 401


class TestDeciding:
    def test_approve_records_the_principal_and_an_operator_resumes(
        self,
        client: TestClient,
        served: tuple[Sagacity, WorkflowRuntime, Ledger],
    ) -> None:
        """The approver journaled is the token's principal; the run goes on when resumed."""
        paused(served)
        sha = client.get(f"/sagacity/workflows/{RUN}", headers=VIEWER).json()["gate"][
            "input_sha256"
        ]
        approved = client.post(
            f"/sagacity/workflows/{RUN}/gates/wire/approve",
            json={"sha256": sha, "approver": "mallory"},
            headers=ALICE,
        )
        assert approved.status_code == 200, approved.text
        assert approved.json()["gate"]["state"] == "approved"
        assert served[2].lines() == ["reserve A-17 120.00"]
        # An approver may not push the run on; an operator may.
        assert client.post(f"/sagacity/workflows/{RUN}/resume", headers=ALICE).status_code == 403
        done = client.post(f"/sagacity/workflows/{RUN}/resume", headers=OLGA)
        assert done.status_code == 200
        assert done.json()["status"] == "COMPLETED"
        assert done.json()["result"] == "notice-wire-A-17"
        assert len(served[2].lines()) == 3
        (entry,) = [e for e in served[0].history(RUN) if e.phase is Phase.APPROVED]
        assert entry.payload["approver"] == "alice"
        assert entry.payload["via"] == "api"

    def test_approve_with_another_hash_is_a_conflict(
        self, client: TestClient, served: tuple[Sagacity, WorkflowRuntime, Ledger]
    ) -> None:
        """A hash the gate does not wait for is 409; nothing is approved."""
        paused(served)
        response = client.post(
            f"/sagacity/workflows/{RUN}/gates/wire/approve",
            json={"sha256": "a" * 64},
            headers=ALICE,
        )
        assert response.status_code == 409
        assert response.json()["error"] == "ApprovalHashMismatchError"
        assert served[1].get(RUN).gate.state == "waiting"  # type: ignore[union-attr]

    def test_a_gate_cannot_be_edited_through_the_approvals_routes(
        self, client: TestClient, served: tuple[Sagacity, WorkflowRuntime, Ledger]
    ) -> None:
        """The generic edit route refuses a gate (422), journaling nothing."""
        paused(served)
        gate = served[1].get(RUN).gate
        assert gate is not None
        before = served[0].history(RUN)
        response = client.post(
            f"/sagacity/approvals/{gate.request_id}/edit",
            json={
                "sha256": gate.input_sha256,
                "input": {"reservation": {**gate.value, "amount": "1.00"}},
            },
            headers=ALICE,
        )
        assert response.status_code == 422, response.text
        assert response.json()["error"] == "ApprovalInputError"
        assert "gate of workflow 'refund-request'" in response.json()["message"]
        assert served[0].history(RUN) == before

    def test_approve_needs_the_hash_and_the_role(
        self, client: TestClient, served: tuple[Sagacity, WorkflowRuntime, Ledger]
    ) -> None:
        """Without a sha256 the body is refused (422); a viewer or operator may not approve."""
        paused(served)
        url = f"/sagacity/workflows/{RUN}/gates/wire/approve"
        assert client.post(url, json={}, headers=ALICE).status_code == 422
        sha = served[1].get(RUN).gate.input_sha256  # type: ignore[union-attr]
        assert client.post(url, json={"sha256": sha}, headers=VIEWER).status_code == 403
        assert client.post(url, json={"sha256": sha}, headers=OLGA).status_code == 403

    def test_reject_compensates(
        self, client: TestClient, served: tuple[Sagacity, WorkflowRuntime, Ledger]
    ) -> None:
        """Reject with a reason: the reservation is released and the rejecter journaled."""
        paused(served)
        response = client.post(
            f"/sagacity/workflows/{RUN}/gates/wire/reject",
            json={"reason": "customer already refunded"},
            headers=BOB,
        )
        assert response.status_code == 200
        body = response.json()
        assert body["status"] == "COMPENSATED"
        assert flow(body)[1] == ("wire", "REJECTED")
        assert served[2].lines() == ["reserve A-17 120.00", "release res-A-17"]
        (entry,) = [e for e in served[0].history(RUN) if e.phase is Phase.REJECTED]
        assert (entry.payload["approver"], entry.payload["reason"], entry.payload["via"]) == (
            "bob",
            "customer already refunded",
            "api",
        )

    def test_no_gate_at_that_stage_is_404(
        self, client: TestClient, served: tuple[Sagacity, WorkflowRuntime, Ledger]
    ) -> None:
        """Approving a stage without a waiting gate, or a stage that does not exist, is 404."""
        paused(served)
        for stage in ("notify", "transfer"):
            response = client.post(
                f"/sagacity/workflows/{RUN}/gates/{stage}/reject",
                json={"reason": "x"},
                headers=BOB,
            )
            assert response.status_code == 404, stage
            assert response.json()["error"] == "ApprovalNotFoundError"

    def test_run_ids_with_slashes(
        self, client: TestClient, served: tuple[Sagacity, WorkflowRuntime, Ledger]
    ) -> None:
        """A run id holding '/' is one path parameter, read and decided like any other."""
        paused(served, "tenant/7/refund")
        body = client.get("/sagacity/workflows/tenant/7/refund", headers=VIEWER).json()
        assert body["run_id"] == "tenant/7/refund"
        response = client.post(
            "/sagacity/workflows/tenant/7/refund/gates/wire/reject",
            json={"reason": "test"},
            headers=BOB,
        )
        assert response.json()["status"] == "COMPENSATED"


DORA = bearer("tok-dora")
"""Dora approves and resumes: both roles."""


def both_roles_auth() -> TokenAuth:
    """The test principals, and dora, who is an approver and an operator."""
    return TokenAuth.from_tokens(
        {**TOKENS, "tok-dora": Principal("dora", frozenset({"approver", "operator"}))}
    )


class TestApproveOverHttp:
    """The approve route on a real server (uvicorn, HTTP): when it runs the stage, and not."""

    def sha(self, base: str) -> str:
        gate = httpx.get(f"{base}/sagacity/workflows/{RUN}", headers=VIEWER).json()["gate"]
        sha: str = gate["input_sha256"]
        return sha

    def test_an_approver_who_is_an_operator_approves_and_the_run_goes_on(
        self, served: tuple[Sagacity, WorkflowRuntime, Ledger]
    ) -> None:
        """Where the workflow is registered, approving with both roles runs the gated stages."""
        paused(served)
        app = FastAPI()
        app.include_router(router(served[0], both_roles_auth(), ui=False))
        with live_server(app) as base:
            done = httpx.post(
                f"{base}/sagacity/workflows/{RUN}/gates/wire/approve",
                json={"sha256": self.sha(base)},
                headers=DORA,
            )
        assert done.status_code == 200, done.text
        body = done.json()
        assert (body["status"], body["result"], body["gate"]) == (
            "COMPLETED",
            "notice-wire-A-17",
            None,
        )
        assert flow(body) == [
            ("reserve_funds", "EXECUTED"),
            ("wire", "EXECUTED"),
            ("notify", "EXECUTED"),
        ]
        assert served[2].lines() == [
            "reserve A-17 120.00",
            "wire 120.00 to DE89370400440532013000",
            "notify wire-A-17",
        ]
        (entry,) = [e for e in served[0].history(RUN) if e.phase is Phase.APPROVED]
        assert entry.payload["approver"] == "dora"

    def test_an_approver_only_leaves_the_run_approved_for_an_operator(
        self, served: tuple[Sagacity, WorkflowRuntime, Ledger]
    ) -> None:
        """Approving without the operator role records the approval and runs nothing."""
        paused(served)
        app = FastAPI()
        app.include_router(router(served[0], both_roles_auth(), ui=False))
        with live_server(app) as base:
            approved = httpx.post(
                f"{base}/sagacity/workflows/{RUN}/gates/wire/approve",
                json={"sha256": self.sha(base)},
                headers=ALICE,
            )
            assert approved.status_code == 200, approved.text
            assert (approved.json()["status"], approved.json()["gate"]["state"]) == (
                "PAUSED_AT_GATE",
                "approved",
            )
            assert served[2].lines() == ["reserve A-17 120.00"]
            resumed = httpx.post(f"{base}/sagacity/workflows/{RUN}/resume", headers=OLGA)
        assert resumed.json()["status"] == "COMPLETED"
        assert len(served[2].lines()) == 3

    def test_where_the_workflow_is_not_registered(
        self, tmp_path: Path, served: tuple[Sagacity, WorkflowRuntime, Ledger]
    ) -> None:
        """Without the workflow's runtime the gate route is 404; the approvals route approves.

        The run then goes on where its workflow is registered.
        """
        paused(served)
        elsewhere = Sagacity.from_url(f"sqlite:///{tmp_path / 'sagacity.db'}")
        app = FastAPI()
        app.include_router(router(elsewhere, both_roles_auth(), ui=False))
        try:
            with live_server(app) as base:
                gate = served[1].get(RUN).gate
                assert gate is not None
                refused = httpx.post(
                    f"{base}/sagacity/workflows/{RUN}/gates/wire/approve",
                    json={"sha256": gate.input_sha256},
                    headers=DORA,
                )
                assert refused.status_code == 404
                assert refused.json()["message"] == (
                    f"run {RUN!r}: no WorkflowRuntime is built in this server's process; build "
                    "one on the served Sagacity (or pass it to workflow_router)"
                )
                approved = httpx.post(
                    f"{base}/sagacity/approvals/{gate.request_id}/approve",
                    json={"sha256": gate.input_sha256},
                    headers=DORA,
                )
                assert approved.status_code == 200, approved.text
                assert approved.json()["ready"] is True
        finally:
            elsewhere.close()
        assert served[2].lines() == ["reserve A-17 120.00"]
        assert served[1].get(RUN).gate.state == "approved"  # type: ignore[union-attr]
        assert served[1].resume(RUN).status.value == "COMPLETED"
        assert len(served[2].lines()) == 3


class TestExpiry:
    def test_expire_route_fails_timed_out_gates(
        self,
        client: TestClient,
        served: tuple[Sagacity, WorkflowRuntime, Ledger],
        clock: FakeClock,
    ) -> None:
        """An operator's POST /gates/expire compensates the runs past their gate's timeout."""
        paused(served)
        assert client.post("/sagacity/workflows/expire-gates", headers=OLGA).json() == []
        clock.advance(3600)
        assert client.post("/sagacity/workflows/expire-gates", headers=ALICE).status_code == 403
        expired = client.post("/sagacity/workflows/expire-gates", headers=OLGA).json()
        assert [(r["run_id"], r["status"]) for r in expired] == [(RUN, "COMPENSATED")]
        assert served[2].lines() == ["reserve A-17 120.00", "release res-A-17"]

    def test_the_app_expires_gates_periodically(
        self, served: tuple[Sagacity, WorkflowRuntime, Ledger], clock: FakeClock
    ) -> None:
        """While the app is up, a task expires timed-out gates every expire_interval seconds."""
        _, runtime, ledger = served
        app = FastAPI()
        app.include_router(workflow_router(runtime, expire_interval=0.05))
        paused(served)
        clock.advance(3600)
        with TestClient(app):
            deadline = time.monotonic() + 10
            while runtime.get(RUN).status.value != "COMPENSATED":
                assert time.monotonic() < deadline, "the gate was not expired"
                time.sleep(0.05)
        assert ledger.lines() == ["reserve A-17 120.00", "release res-A-17"]


def test_a_runtime_given_explicitly_is_served(tmp_path: Path) -> None:
    """workflow_router(runtime) serves that runtime, whichever Sagacity the server binds."""
    sagacity = Sagacity.from_url(f"sqlite:///{tmp_path / 'other.db'}")
    runtime = WorkflowRuntime(sagacity, [RefundWorkflow(Ledger(tmp_path / "l.txt"), Decimal(1))])
    runtime.start("refund-request", REQUEST, run_id="r-9")
    bound = Sagacity.from_url("memory://")
    app = FastAPI()
    top = APIRouter(dependencies=[Depends(bind(token_auth(), bound))])
    top.include_router(workflow_router(runtime, expire_interval=None))
    app.include_router(top)
    with TestClient(app) as client:
        body = client.get("/sagacity/workflows/r-9", headers=VIEWER).json()
    assert body["status"] == "COMPENSATED"
    sagacity.close()
