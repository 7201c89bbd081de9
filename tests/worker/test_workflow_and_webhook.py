"""A workflow gate approved through the REST API resumes its run; the webhook tells decisions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from sagacity import Sagacity, SagaOutcome, Worker
from sagacity.server import WebhookNotifier, create_app, sign_body
from sagacity.workflows import WorkflowRuntime, WorkflowStatus
from tests.server._bank import ALICE, Bank, start_wire, token_auth
from tests.server.test_notify import SECRET, Receiver
from tests.workflows._refund import REQUEST, Ledger, RefundWorkflow


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sagacity.db'}"


class TestWorkflowGates:
    def test_a_gate_approved_through_the_api_resumes_its_run(
        self, url: str, tmp_path: Path
    ) -> None:
        """An approver-only approval on a server without the workflow; the worker runs on."""
        ledger = Ledger(tmp_path / "ledger.txt")
        with Sagacity.from_url(url) as workers_side, Sagacity.from_url(url) as server_side:
            runtime = WorkflowRuntime(workers_side, [RefundWorkflow(ledger)])
            handle = runtime.start("refund-request", REQUEST, run_id="refund-1")
            assert handle.status is WorkflowStatus.PAUSED_AT_GATE
            assert workers_side.history("refund-1")[-1].payload["resumer"] == "workflow"
            with TestClient(create_app(server_side, token_auth(), ui=False)) as client:
                (request,) = client.get("/sagacity/approvals", headers=ALICE).json()
                answer = client.post(
                    f"/sagacity/approvals/{request['request_id']}/approve",
                    json={"sha256": request["input_sha256"]},
                    headers=ALICE,
                )
                assert answer.status_code == 200, answer.text
            assert Worker(workers_side).run_once() == 1
            assert runtime.get("refund-1").status is WorkflowStatus.COMPLETED
            assert ledger.lines() == [
                "reserve A-17 120.00",
                "wire 120.00 to DE89370400440532013000",
                "notify wire-A-17",
            ]
            assert Worker(workers_side).run_once() == 0  # once
            del runtime

    def test_a_gate_rejected_where_the_workflow_is_not_is_undone_by_the_worker(
        self, url: str, tmp_path: Path
    ) -> None:
        """`reject` without the stages leaves the undo; the worker with the runtime does it."""
        ledger = Ledger(tmp_path / "ledger.txt")
        with Sagacity.from_url(url) as workers_side, Sagacity.from_url(url) as elsewhere:
            runtime = WorkflowRuntime(workers_side, [RefundWorkflow(ledger)])
            runtime.start("refund-request", REQUEST, run_id="refund-3")
            rejected = elsewhere.reject("refund-3", approver="bob", reason="duplicate")
            assert rejected.outcome is SagaOutcome.NEEDS_ATTENTION
            assert Worker(workers_side).run_once() == 1
            assert runtime.get("refund-3").status is WorkflowStatus.COMPENSATED
            assert ledger.lines() == ["reserve A-17 120.00", "release res-A-17"]
            del runtime

    def test_without_the_workflow_registered_the_run_is_left_and_reported(
        self, url: str, tmp_path: Path
    ) -> None:
        """A worker with no runtime for the workflow leaves the run, naming why."""
        ledger = Ledger(tmp_path / "ledger.txt")
        with Sagacity.from_url(url) as first:
            runtime = WorkflowRuntime(first, [RefundWorkflow(ledger)])
            runtime.start("refund-request", REQUEST, run_id="refund-2")
            first.approve("refund-2", approver="alice")
            del runtime
        with Sagacity.from_url(url) as bare:
            worker = Worker(bare)
            assert worker.run_once() == 0
            assert worker.health.unroutable == ("refund-2",)
        assert ledger.lines() == ["reserve A-17 120.00"]


class TestWebhookDecisions:
    @pytest.fixture
    def receiver(self) -> Iterator[Receiver]:
        made = Receiver()
        yield made
        made.close()

    def test_decisions_made_elsewhere_are_delivered_signed(
        self, url: str, receiver: Receiver
    ) -> None:
        """An approval and a rejection from another Sagacity reach the webhook, signed."""
        bank = Bank()
        notifier = WebhookNotifier(receiver.url, SECRET)
        with Sagacity.from_url(url, on_approval_request=notifier) as mine:
            mine.wrap(bank)
            start_wire(mine, bank, "hook-1")
            start_wire(mine, bank, "hook-2")
            receiver.wait_for(2)  # the two requests
            notifier.announce_decisions(mine, poll_interval=0.02)
            with Sagacity.from_url(url) as theirs:
                theirs.approve("hook-1", approver="alice", via="cli")
                assert theirs.reject("hook-2", approver="bob", reason="no").outcome in (
                    SagaOutcome.COMPENSATED,
                    SagaOutcome.NEEDS_ATTENTION,
                )
            receiver.wait_for(4)
            notifier.close()
        decided = receiver.received[2:]
        events = sorted(headers["x-sagacity-event"] for headers, _ in decided)
        assert events == ["approval.approved", "approval.rejected"]
        for headers, body in decided:
            payload = json.loads(body)
            assert headers["webhook-id"] == f"msg_{payload['request_id']}.{payload['outcome']}"
            assert headers["webhook-signature"] == sign_body(
                SECRET,
                body,
                webhook_id=headers["webhook-id"],
                timestamp=int(headers["webhook-timestamp"]),
            )
        by_saga = {json.loads(body)["saga_id"]: json.loads(body) for _, body in decided}
        assert (by_saga["hook-1"]["decided_by"], by_saga["hook-1"]["via"]) == ("alice", "cli")
        assert (by_saga["hook-2"]["reason"], by_saga["hook-2"]["via"]) == ("no", "python")
