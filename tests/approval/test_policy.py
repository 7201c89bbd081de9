"""The approval policy in the core: who started a saga, four eyes, N approvers, the hook.

Every test runs on memory, SQLite and PostgreSQL. The policy lives in journal payloads
and the check every run goes through, so an APPROVED row written straight into the
journal is held to it too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from typing import Any

import pytest

from sagacity import (
    ApprovalAlreadyGivenError,
    ApprovalMissingError,
    ApprovalRequest,
    ConfigurationError,
    Phase,
    Reversibility,
    Sagacity,
    SagaOutcome,
    SagaStateError,
    SelfApprovalError,
    compensable,
)
from tests.approval._policy import (
    SAGA,
    WIRE,
    OpenSagacity,
    Treasury,
    book_then,
    inject_approval,
    phases_of,
    tools_of,
    waiting_saga,
)


class TestStartedBy:
    def test_the_starter_is_in_the_first_entry_and_the_request(self, sagacity: Sagacity) -> None:
        """`started_by` rides in the saga's first entry and in the AWAITING_APPROVAL."""
        waiting = waiting_saga(sagacity, started_by="alice")
        first, *_, awaiting = sagacity.history(SAGA)
        assert (first.phase, first.payload["started_by"]) == (Phase.INTENT, "alice")
        assert awaiting.phase is Phase.AWAITING_APPROVAL
        assert awaiting.payload["started_by"] == "alice"
        assert waiting.request.started_by == "alice"
        (shown,) = sagacity.pending(SAGA)
        assert (shown.started_by, shown.to_json()["started_by"]) == ("alice", "alice")

    def test_the_request_reads_the_starter_from_the_journal_not_the_store(
        self, sagacity: Sagacity
    ) -> None:
        """A stored request (which an attacker can edit) never says who started the saga."""
        waiting_saga(sagacity, started_by="alice")
        (stored,) = sagacity.approvals.pending(SAGA)
        assert stored.started_by in (None, "alice")  # the store may not keep it at all
        (shown,) = sagacity.pending(SAGA)
        assert shown.started_by == "alice"
        with pytest.raises(SelfApprovalError):
            sagacity.approve(SAGA, approver="alice")

    def test_a_later_run_cannot_claim_another_starter(self, sagacity: Sagacity) -> None:
        """Who started a saga does not change: re-opening it as someone else is refused."""
        tools = tools_of(sagacity, Treasury())
        with sagacity.join(SAGA, started_by="alice") as scope, scope.entered():
            tools["book"]("P-1")
        before = sagacity.history(SAGA)
        with (
            pytest.raises(SagaStateError, match=r"started by 'alice'.*'mallory'"),
            sagacity.join(SAGA, started_by="mallory"),
        ):
            pass
        with sagacity.join(SAGA, started_by="alice") as scope:  # the same principal may
            assert scope.started_by == "alice"
        assert sagacity.history(SAGA) == before

    def test_a_resumed_run_keeps_the_journaled_starter(self, sagacity: Sagacity) -> None:
        """A run opened without `started_by` asks under the starter its journal records."""
        tools = tools_of(sagacity, Treasury())
        with sagacity.join("two-step", started_by="alice") as scope, scope.entered():
            tools["book"]("P-1")  # the first request of a saga that arrives in several
        with sagacity.join("two-step") as scope, scope.entered():
            tools["wire"](**WIRE)
        (request,) = sagacity.pending("two-step")
        assert request.started_by == "alice"
        with pytest.raises(SelfApprovalError):
            sagacity.approve("two-step", approver="alice")

    def test_join_records_the_starter(self, sagacity: Sagacity) -> None:
        """`join(started_by=...)` starts a saga whose requests name that principal."""
        tools = tools_of(sagacity, Treasury())
        with sagacity.join("mcp-1", started_by="agent@ops") as scope, scope.entered():
            tools["wire"](**WIRE)
        (request,) = sagacity.pending("mcp-1")
        assert request.started_by == "agent@ops"
        assert sagacity.history("mcp-1")[0].payload["started_by"] == "agent@ops"

    def test_asaga_records_the_starter(self, sagacity: Sagacity) -> None:
        """`asaga(started_by=...)` records the starter like `saga`."""
        tools = tools_of(sagacity, Treasury())

        async def work() -> Any:
            return tools["wire"](**WIRE)

        result = asyncio.run(sagacity.asaga(SAGA, work, started_by="alice"))
        assert [r.started_by for r in result.pending] == ["alice"]

    def test_a_blank_starter_is_refused(self, sagacity: Sagacity) -> None:
        """`started_by` must name someone: a blank one is refused before anything is written."""
        with pytest.raises(ValueError, match="started_by must name"):
            sagacity.saga(SAGA, lambda: None, started_by="  ")
        assert sagacity.history(SAGA) == []


class TestFourEyes:
    def test_the_starter_cannot_approve(self, sagacity: Sagacity) -> None:
        """The saga's starter is refused with SelfApprovalError (403) and nothing is journaled."""
        waiting = waiting_saga(sagacity, started_by="alice")
        before = sagacity.history(SAGA)
        with pytest.raises(SelfApprovalError, match="'alice' started the saga") as refused:
            sagacity.approve(SAGA, approver="alice")
        assert refused.value.status_code == 403
        assert sagacity.history(SAGA) == before
        sagacity.approve(SAGA, approver="bob")
        result = sagacity.resume_saga(SAGA)
        assert (result.outcome, waiting.treasury.calls["wire"]) == (SagaOutcome.COMPLETED, 1)

    def test_an_injected_self_approval_does_not_count(self, sagacity: Sagacity) -> None:
        """A correctly hashed APPROVED by the starter, written into the journal, runs nothing."""
        waiting = waiting_saga(sagacity, started_by="alice")
        inject_approval(sagacity, waiting.request, "alice")
        with pytest.raises(ApprovalMissingError, match=r"'alice' does not count.*four eyes"):
            sagacity.resume_saga(SAGA)
        assert waiting.treasury.calls["wire"] == 0
        (shown,) = sagacity.pending(SAGA)
        assert (shown.state, shown.approvals) == ("waiting", ())
        sagacity.approve(SAGA, approver="bob")
        assert sagacity.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED
        assert waiting.treasury.wired == [("900.00", "ACME", 0)]

    def test_a_forged_request_cannot_name_another_starter(self, sagacity: Sagacity) -> None:
        """An AWAITING_APPROVAL appended with another `started_by` cannot be approved.

        Someone with database access asks again for the call, naming 'mallory' as the
        starter so that alice, who started the saga, could approve it: the journal's first
        record of the starter wins, and the request is refused as tampered.
        """
        waiting = waiting_saga(sagacity, started_by="alice")
        real = waiting.request
        forged = sagacity.journal.append(
            SAGA,
            Phase.AWAITING_APPROVAL,
            tool_name=real.tool_name,
            call_id=real.call_id,
            payload={
                "request_id": "forged",
                "input": real.input,
                "input_sha256": real.input_sha256,
                "reason": real.reason,
                "expires_at": None,
                "started_by": "mallory",
            },
        )
        sagacity.approvals.save(dataclasses.replace(real, request_id="forged", seq=forged.seq))
        (shown,) = [r for r in sagacity.pending(SAGA) if r.request_id == "forged"]
        assert shown.state == "tampered"
        assert "recorded 'alice' first" in str(shown.problem)
        with pytest.raises(ApprovalMissingError, match="recorded 'alice' first"):
            sagacity.approve(SAGA, approver="alice", request_id="forged")
        assert waiting.treasury.calls["wire"] == 0

    def test_without_a_starter_anyone_may_approve(self, sagacity: Sagacity) -> None:
        """A saga started without `started_by` keeps the one-approver rule of before."""
        waiting = waiting_saga(sagacity, started_by=None)
        assert waiting.request.started_by is None
        assert "started_by" not in sagacity.history(SAGA)[-1].payload
        sagacity.approve(SAGA, approver="alice")
        assert sagacity.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED


class TestApprovers:
    @pytest.mark.parametrize("approvers", [0, -1, True, 1.5, "2", 101])
    def test_a_bad_count_is_refused_at_wrap_time(self, approvers: Any) -> None:
        """`approvers` must be a whole number from 1: anything else names the tool."""

        class Vault:
            @compensable(reversibility=Reversibility.IRREVERSIBLE, approvers=approvers)
            def open_vault(self) -> None: ...

        with pytest.raises(ConfigurationError, match=r"tool 'open_vault'.*approvers"):
            Sagacity.from_url("memory://").wrap(Vault())

    def test_more_than_one_on_a_compensatable_tool_is_refused(self) -> None:
        """A tool that never waits for approval cannot declare approvers."""

        class Ledger:
            @compensable(by="undo", approvers=2)
            def post(self) -> None: ...

            def undo(self) -> None: ...

        with pytest.raises(ConfigurationError, match=r"'post' declares approvers=2.*COMPENSATABLE"):
            Sagacity.from_url("memory://").wrap(Ledger())

    def test_two_different_approvers_run_it_exactly_once(self, sagacity: Sagacity) -> None:
        """One approval does not run it; the same approver twice is refused; two run it once."""
        waiting = waiting_saga(sagacity, wire="big_wire")
        assert waiting.request.approvers_required == 2
        assert sagacity.history(SAGA)[-1].payload["approvers_required"] == 2

        sagacity.approve(SAGA, approver="bob")
        (shown,) = sagacity.pending(SAGA)
        assert (shown.state, [a.approver for a in shown.approvals]) == ("waiting", ["bob"])
        with pytest.raises(ApprovalMissingError, match=r"1 of 2 approvals \(by 'bob'\)"):
            sagacity.resume_saga(SAGA)
        assert waiting.treasury.calls["big_wire"] == 0

        before = sagacity.history(SAGA)
        with pytest.raises(ApprovalAlreadyGivenError, match=r"'bob'.*approves a request once"):
            sagacity.approve(SAGA, approver="bob")
        for disguised in ("bob ", " bob", "bob\n"):  # not a second principal
            with pytest.raises(ValueError, match="has spaces around it"):
                sagacity.approve(SAGA, approver=disguised)
        assert sagacity.history(SAGA) == before

        sagacity.approve(SAGA, approver="carol")
        (shown,) = sagacity.pending(SAGA)
        assert shown.state == "approved"
        assert shown.to_json()["approvers_required"] == 2
        with pytest.raises(ApprovalAlreadyGivenError, match="2 of 2 needed"):
            sagacity.approve(SAGA, approver="dave")

        result = sagacity.resume_saga(SAGA)
        assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "big-900.00-ACME")
        assert waiting.treasury.calls["big_wire"] == 1
        assert phases_of(sagacity)[-6:] == [
            "AWAITING_APPROVAL",
            "APPROVED",
            "APPROVED",
            "INTENT",
            "EXECUTED",
            "ENDED",
        ]

    def test_the_starter_does_not_count_among_the_n(self, sagacity: Sagacity) -> None:
        """With two required, the starter's injected approval plus one real one is one."""
        waiting = waiting_saga(sagacity, wire="big_wire", started_by="alice")
        inject_approval(sagacity, waiting.request, "alice")
        sagacity.approve(SAGA, approver="bob")
        with pytest.raises(ApprovalMissingError, match="1 of 2 approvals"):
            sagacity.resume_saga(SAGA)
        assert waiting.treasury.calls["big_wire"] == 0

    def test_an_injected_duplicate_counts_once(self, sagacity: Sagacity) -> None:
        """The same principal's approval written twice is one approval of the two needed."""
        waiting = waiting_saga(sagacity, wire="big_wire")
        sagacity.approve(SAGA, approver="bob")
        inject_approval(sagacity, waiting.request, "bob")
        with pytest.raises(ApprovalMissingError, match="1 of 2 approvals"):
            sagacity.resume_saga(SAGA)
        assert waiting.treasury.calls["big_wire"] == 0

    def test_a_native_resume_also_needs_all_approvers(self, sagacity: Sagacity) -> None:
        """The framework calling the tool again is held to the same count as resume_saga."""
        waiting = waiting_saga(sagacity, wire="big_wire")
        sagacity.approve(SAGA, approver="bob")
        with pytest.raises(ApprovalMissingError, match="1 of 2"):
            sagacity.resume_saga(SAGA, book_then(waiting.tools, "big_wire"))
        assert waiting.treasury.calls["big_wire"] == 0
        sagacity.approve(SAGA, approver="carol")
        result = sagacity.resume_saga(SAGA, book_then(waiting.tools, "big_wire"))
        assert (result.outcome, waiting.treasury.calls) == (
            SagaOutcome.COMPLETED,
            {"book": 1, "big_wire": 1},
        )

    def test_a_forged_request_cannot_ask_for_fewer(self, sagacity: Sagacity) -> None:
        """An AWAITING_APPROVAL written into the journal without the count still needs two.

        The worker that runs the call wrapped the tool, and its declaration is the floor.
        """
        waiting = waiting_saga(sagacity, wire="big_wire")
        real = waiting.request
        forged_entry = sagacity.journal.append(
            SAGA,
            Phase.AWAITING_APPROVAL,
            tool_name=real.tool_name,
            call_id=real.call_id,
            payload={
                "request_id": "forged",
                "input": real.input,
                "input_sha256": real.input_sha256,
                "reason": real.reason,
                "expires_at": None,
            },
        )
        sagacity.approvals.save(
            dataclasses.replace(real, request_id="forged", seq=forged_entry.seq)
        )
        sagacity.approve(SAGA, approver="bob", request_id="forged")
        (shown,) = [r for r in sagacity.pending(SAGA) if r.request_id == "forged"]
        assert (shown.approvers_required, shown.state) == (2, "waiting")
        with pytest.raises(ApprovalMissingError, match="1 of 2 approvals"):
            sagacity.resume_saga(SAGA, request_id="forged")
        assert waiting.treasury.calls["big_wire"] == 0

    def test_an_adapters_copy_of_the_tool_asks_for_as_many(self, sagacity: Sagacity) -> None:
        """A SagaTool an adapter rebuilds from the wrapped one still needs the declared count."""
        treasury = Treasury()
        (original,) = [t for t in sagacity.wrap(treasury) if t.name == "big_wire"]
        copy = original.excluding()  # what adapters do to leave injected parameters out
        result = sagacity.saga(SAGA, lambda: copy(**WIRE))
        assert [r.approvers_required for r in result.pending] == [2]


class TestConcurrentApprovals:
    def test_one_approver_racing_itself_is_recorded_once(self, shared_store_url: str) -> None:
        """Eight workers approving as 'bob' at once journal one APPROVED; the rest are refused."""
        first = Sagacity.from_url(shared_store_url)
        waiting = waiting_saga(first, wire="big_wire")
        workers = [Sagacity.from_url(shared_store_url) for _ in range(8)]
        outcomes: list[str] = []
        barrier = threading.Barrier(len(workers))

        def approve(worker: Sagacity) -> None:
            barrier.wait()
            try:
                worker.approve(SAGA, approver="bob")
                outcomes.append("approved")
            except ApprovalAlreadyGivenError:
                outcomes.append("refused")

        threads = [threading.Thread(target=approve, args=(w,)) for w in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        try:
            assert sorted(outcomes) == ["approved"] + ["refused"] * 7
            approved = [e for e in first.history(SAGA) if e.phase is Phase.APPROVED]
            assert [e.payload["approver"] for e in approved] == ["bob"]
            assert waiting.treasury.calls["big_wire"] == 0
        finally:
            for instance in [first, *workers]:
                instance.close()


class TestNotifyHook:
    def test_called_once_per_request_after_it_is_committed(
        self, open_sagacity: OpenSagacity
    ) -> None:
        """The hook gets each new request once, when its AWAITING_APPROVAL is in the journal."""
        seen: list[tuple[ApprovalRequest, list[str]]] = []
        sagacity: Sagacity

        def hook(request: ApprovalRequest) -> None:
            seen.append((request, [e.phase.value for e in sagacity.history(request.saga_id)]))

        sagacity = open_sagacity(on_approval_request=hook)
        waiting = waiting_saga(sagacity)
        ((request, journal_then),) = seen
        assert request == waiting.request
        assert journal_then == ["INTENT", "EXECUTED", "AWAITING_APPROVAL"]
        # Approving and running the call asks nothing new; another saga's call asks again.
        sagacity.approve(SAGA, approver="bob")
        assert sagacity.resume_saga(SAGA, book_then(waiting.tools)).outcome is (
            SagaOutcome.COMPLETED
        )
        assert len(seen) == 1
        sagacity.saga("payout-2", book_then(waiting.tools))
        assert [r.saga_id for r, _ in seen] == [SAGA, "payout-2"]

    def test_a_raising_hook_does_not_fail_the_call(
        self, open_sagacity: OpenSagacity, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An exception from the hook is logged on `sagacity`; the saga waits as usual."""
        calls: list[str] = []

        def hook(request: ApprovalRequest) -> None:
            calls.append(request.request_id)
            raise ConnectionError("webhook down")

        sagacity = open_sagacity(on_approval_request=hook)
        with caplog.at_level(logging.ERROR, logger="sagacity"):
            waiting = waiting_saga(sagacity)
        assert calls == [waiting.request.request_id]
        (record,) = [r for r in caplog.records if r.name == "sagacity"]
        assert waiting.request.request_id in record.getMessage()
        assert record.exc_info is not None
        assert "webhook down" in str(record.exc_info[1])
        assert [r.request_id for r in sagacity.pending(SAGA)] == calls
        sagacity.approve(SAGA, approver="bob")
        assert sagacity.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED
