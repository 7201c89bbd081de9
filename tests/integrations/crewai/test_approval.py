"""IRREVERSIBLE tools wait for sagacity's hash-bound approval, never for CrewAI's prompt."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from crewai.hooks import (
    ToolCallHookContext,
    clear_before_tool_call_hooks,
    register_before_tool_call_hook,
)

from sagacity import ApprovalError, ApprovalMissingError, SagaBusyError, Sagacity, SagaOutcome
from tests.integrations.crewai._crew import PATHS, Shop, crew, model_of, phases, shop_tools

WIRE = {"amount": 900, "to": "ACME"}
BEFORE = [[("reserve_stock", {"sku": "A", "qty": 1})], [("send_wire", WIRE)], "Wire sent."]


def first_run(url: str, shop: Shop, path: str, saga_id: str) -> str:
    """Process 1: the crew runs, the wire waits; returns the request's sha256."""
    with Sagacity.from_url(url) as sagacity:
        built = crew(shop_tools(sagacity, shop), BEFORE, path=path)
        result = sagacity.saga(saga_id, built.kickoff)
        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        assert "Wire sent." in str(result.value)  # the model's word; the journal disagrees
        assert any("[AWAITING_APPROVAL] send_wire" in turn for turn in model_of(built).turns)
        (request,) = result.pending
        assert (request.tool_name, request.input) == ("send_wire", WIRE)
        return request.input_sha256


def approve(url: str, saga_id: str, sha256: str) -> None:
    """Process 2: a human approves what they reviewed."""
    with Sagacity.from_url(url) as sagacity:
        (request,) = sagacity.pending(saga_id)
        sagacity.approve(
            saga_id,
            approver="alice",
            request_id=request.request_id,
            expected_sha256=sha256,
        )


def resume(url: str, shop: Shop, path: str, saga_id: str, script: list[Any]) -> Any:
    """Process 3: the crew runs again under the saga, as a worker would."""
    with Sagacity.from_url(url) as sagacity:
        built = crew(shop_tools(sagacity, shop), script, path=path)
        return sagacity.resume_saga(saga_id, built.kickoff)


@pytest.fixture(autouse=True)
def _no_hooks() -> Iterator[None]:
    yield
    clear_before_tool_call_hooks()


@pytest.mark.parametrize("path", PATHS)
class TestApprovalAcrossProcesses:
    def test_the_approved_wire_runs_once_and_the_reservation_is_not_redone(
        self, shared_store_url: str, path: str
    ) -> None:
        """Pause, approve elsewhere, re-run the crew: the wire runs once with its input."""
        shop = Shop()
        sha = first_run(shared_store_url, shop, path, "pay-1")
        assert shop.effects == [("reserve", "A", 1)]
        approve(shared_store_url, "pay-1", sha)

        result = resume(shared_store_url, shop, path, "pay-1", BEFORE)

        assert result.outcome is SagaOutcome.COMPLETED
        assert shop.effects == [("reserve", "A", 1), ("wire", 900, "ACME")]
        assert shop.keys[-1] == "send_wire#1"
        with Sagacity.from_url(shared_store_url) as sagacity:
            assert [p for p, c in phases(sagacity, "pay-1") if c == "send_wire#1"] == [
                "AWAITING_APPROVAL",
                "APPROVED",
                "INTENT",
                "EXECUTED",
            ]

    def test_a_changed_argument_is_not_run(self, shared_store_url: str, path: str) -> None:
        """Approved 900, the resumed model asks 9000: nothing is wired; 9000 waits on its own."""
        shop = Shop()
        sha = first_run(shared_store_url, shop, path, "pay-2")
        approve(shared_store_url, "pay-2", sha)
        changed = [[("send_wire", {"amount": 9000, "to": "ACME"})], "Wire sent."]

        result = resume(shared_store_url, shop, path, "pay-2", changed)

        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        assert shop.effects == [("reserve", "A", 1)]
        # The approved 900 stays approved and unused; 9000 waits for a decision of its own.
        assert [r.input for r in result.pending] == [WIRE, {"amount": 9000, "to": "ACME"}]

    def test_a_swapped_tool_is_not_run_on_the_approval(
        self, shared_store_url: str, path: str
    ) -> None:
        """Approved the wire, the resumed model closes an account instead: neither runs."""
        shop = Shop()
        sha = first_run(shared_store_url, shop, path, "pay-3")
        approve(shared_store_url, "pay-3", sha)
        swapped = [[("close_account", {"account": "ACME"})], "Closed."]

        result = resume(shared_store_url, shop, path, "pay-3", swapped)

        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        assert shop.effects == [("reserve", "A", 1)]
        assert [r.tool_name for r in result.pending] == ["send_wire", "close_account"]

    def test_a_yes_at_crewais_console_prompt_approves_nothing(
        self, shared_store_url: str, path: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A before_tool_call hook asks the console, a human types "yes": the wire still waits."""
        monkeypatch.setattr(builtins, "input", lambda *_: "yes")
        answers: list[str] = []

        def console_approval(context: ToolCallHookContext) -> bool | None:
            if context.tool_name == "send_wire":
                answers.append(context.request_human_input(prompt="Send the wire?"))
                return None if answers[-1] == "yes" else False
            return None

        register_before_tool_call_hook(console_approval)
        shop = Shop()
        first_run(shared_store_url, shop, path, "pay-4")
        assert answers == ["yes"]
        said_yes = [[("send_wire", WIRE)], "The human said yes, so the wire is sent."]

        with pytest.raises(ApprovalMissingError, match="no approval is journaled"):
            resume(shared_store_url, shop, path, "pay-4", said_yes)

        assert shop.effects == [("reserve", "A", 1)]
        with Sagacity.from_url(shared_store_url) as sagacity:
            journal = [p for p, _ in phases(sagacity, "pay-4")]
        assert journal.count("AWAITING_APPROVAL") == 1
        assert "APPROVED" not in journal
        assert "INTENT" not in journal[journal.index("AWAITING_APPROVAL") :]


class TestSameCallIdSwap:
    def test_another_tool_under_the_approved_call_id_is_refused(
        self, shared_store_url: str
    ) -> None:
        """The core refuses a second tool under the approved call's id: nothing runs."""
        shop = Shop()
        sha = first_run(shared_store_url, shop, "native", "pay-5")
        approve(shared_store_url, "pay-5", sha)
        with Sagacity.from_url(shared_store_url) as sagacity:
            close = next(t for t in shop_tools(sagacity, shop) if t.name == "close_account")

            def swap() -> Any:
                return close.saga_tool.invoke((), {"account": "ACME"}, call_id="send_wire#1")

            with pytest.raises(ApprovalError):
                sagacity.resume_saga("pay-5", swap)
        assert shop.effects == [("reserve", "A", 1)]


class TestWaitingInTheCall:
    def test_the_call_waits_for_the_approval_and_runs_in_the_same_run(
        self, sqlite_url: str
    ) -> None:
        """`approval_wait`: the crew's call waits until a human approves, then wires once."""
        shop = Shop()
        with Sagacity.from_url(sqlite_url) as sagacity, Sagacity.from_url(sqlite_url) as human:
            stop = threading.Event()

            def approver() -> None:
                while not stop.is_set():
                    pending = human.pending("pay-6")
                    if pending:
                        human.approve(
                            "pay-6",
                            approver="bob",
                            request_id=pending[0].request_id,
                            expected_sha256=pending[0].input_sha256,
                        )
                        return
                    stop.wait(0.05)

            thread = threading.Thread(target=approver)
            thread.start()
            built = crew(shop_tools(sagacity, shop, approval_wait=30), BEFORE, path="native")
            try:
                result = sagacity.saga("pay-6", built.kickoff)
            finally:
                stop.set()
                thread.join()

            assert result.outcome is SagaOutcome.COMPLETED
            assert shop.effects == [("reserve", "A", 1), ("wire", 900, "ACME")]
            assert [p for p, c in phases(sagacity, "pay-6") if c == "send_wire#1"] == [
                "AWAITING_APPROVAL",
                "APPROVED",
                "INTENT",
                "EXECUTED",
            ]

    def test_without_a_decision_the_call_gives_up_and_the_saga_waits(self, sqlite_url: str) -> None:
        """No decision within `approval_wait`: the model is told it waits; nothing ran."""
        shop = Shop()
        with Sagacity.from_url(sqlite_url) as sagacity:
            built = crew(shop_tools(sagacity, shop, approval_wait=0.3), BEFORE, path="native")
            result = sagacity.saga("pay-7", built.kickoff)
        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        assert shop.effects == [("reserve", "A", 1)]

    def test_a_rejection_waits_for_the_run_and_then_compensates(self, sqlite_url: str) -> None:
        """A reject while the call waits is refused (the crew holds the saga); later it undoes."""
        shop = Shop()
        refused: list[Exception] = []
        with Sagacity.from_url(sqlite_url) as sagacity, Sagacity.from_url(sqlite_url) as human:
            stop = threading.Event()

            def rejecter() -> None:
                while not stop.is_set():
                    pending = human.pending("pay-8")
                    if pending:
                        with pytest.raises(SagaBusyError) as busy:
                            human.reject("pay-8", approver="bob", reason="no")
                        refused.append(busy.value)
                        return
                    stop.wait(0.05)

            thread = threading.Thread(target=rejecter)
            thread.start()
            built = crew(shop_tools(sagacity, shop, approval_wait=2), BEFORE, path="native")
            try:
                result = sagacity.saga("pay-8", built.kickoff)
            finally:
                stop.set()
                thread.join()
            rejected = sagacity.reject("pay-8", approver="bob", reason="no")

        assert len(refused) == 1
        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        assert rejected.outcome is SagaOutcome.COMPENSATED
        assert shop.effects == [("reserve", "A", 1), ("release", "res-A-1")]
