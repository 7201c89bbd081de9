"""A graph paused for approval under an in-memory checkpointer warns: elsewhere it is lost."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver, MemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from sagacity import Sagacity, SagacityWarning, SagaOutcome
from sagacity.integrations.langchain import InMemoryCheckpointerWarning, langchain_tools
from tests.integrations.langchain._agents import (
    OrderTools,
    calls,
    prebuilt_agent,
    scripted,
    tool_call,
)

REQUEST: Any = {"messages": [("user", "Pay ACME 250.00 by wire.")]}
CONFIG: Any = {"configurable": {"thread_id": "thread-1"}}


def wire_agent(sagacity: Sagacity, shop: OrderTools, checkpointer: Any) -> Any:
    """`create_agent` whose scripted model asks for one wire transfer, then says it is sent."""
    model = scripted(
        calls(tool_call("send_wire_transfer", "call-9", amount="250.00", to="ACME")), "Sent."
    )
    return prebuilt_agent(model, langchain_tools(sagacity, shop), checkpointer=checkpointer)


class TestInMemoryCheckpointer:
    @pytest.mark.parametrize("saver", [InMemorySaver, MemorySaver])
    def test_the_pause_warns_naming_the_saga_tool_and_what_to_use(
        self, sqlite_url: str, saver: type[InMemorySaver]
    ) -> None:
        """The warning names saga, tool and request, and says which checkpointer to use."""
        sagacity = Sagacity.from_url(sqlite_url)
        agent = wire_agent(sagacity, OrderTools(), saver())
        with pytest.warns(InMemoryCheckpointerWarning) as caught:
            paused = sagacity.saga("wire-1", lambda: agent.invoke(REQUEST, CONFIG))
        assert paused.outcome is SagaOutcome.AWAITING_APPROVAL
        (request,) = paused.pending
        (warning,) = caught
        message = str(warning.message)
        assert "saga 'wire-1': 'send_wire_transfer' (call 'call-9')" in message
        assert repr(request.request_id) in message
        assert "SqliteSaver" in message
        assert "PostgresSaver" in message
        assert issubclass(InMemoryCheckpointerWarning, SagacityWarning)
        assert issubclass(SagacityWarning, UserWarning)
        sagacity.close()

    def test_the_warning_loses_nothing_the_approval_still_works_in_this_process(
        self, sqlite_url: str
    ) -> None:
        """A warning, not a refusal: in one process, approve and resume run the wire once."""
        sagacity, shop = Sagacity.from_url(sqlite_url), OrderTools()
        agent = wire_agent(sagacity, shop, InMemorySaver())
        with pytest.warns(InMemoryCheckpointerWarning):
            paused = sagacity.saga("wire-1", lambda: agent.invoke(REQUEST, CONFIG))
        (request,) = paused.pending
        sagacity.approve("wire-1", approver="alice", expected_sha256=request.input_sha256)
        resumed = sagacity.resume_saga("wire-1", lambda: agent.invoke(Command(resume=True), CONFIG))
        assert resumed.outcome is SagaOutcome.COMPLETED
        assert shop.ran == [("send_wire_transfer", ("250.00", "ACME"))]
        sagacity.close()

    def test_a_restart_under_memory_saver_really_loses_the_thread(self, sqlite_url: str) -> None:
        """What the warning is about: a new saver (another process) has no paused thread."""
        sagacity = Sagacity.from_url(sqlite_url)
        with pytest.warns(InMemoryCheckpointerWarning):
            sagacity.saga(
                "wire-1",
                lambda: wire_agent(sagacity, OrderTools(), InMemorySaver()).invoke(REQUEST, CONFIG),
            )
        restarted = wire_agent(sagacity, OrderTools(), InMemorySaver())
        assert restarted.get_state(CONFIG).interrupts == ()
        sagacity.close()


class TestWarningsAsErrors:
    def test_an_error_filter_refuses_the_pause_and_nothing_runs(self, sqlite_url: str) -> None:
        """Warnings as errors refuse the pause: ended COMPENSATED with its text, nothing ran.

        The test suite runs with `filterwarnings = error`, as a cautious deployment may.
        """
        sagacity, shop = Sagacity.from_url(sqlite_url), OrderTools()
        model = scripted(
            calls(tool_call("send_wire_transfer", "call-9", amount="250.00", to="ACME")), "Sent."
        )
        agent = prebuilt_agent(
            model, langchain_tools(sagacity, shop), checkpointer=InMemorySaver(), swallow=False
        )
        result = sagacity.saga("wire-1", lambda: agent.invoke(REQUEST, CONFIG))
        assert result.outcome is SagaOutcome.COMPENSATED
        assert isinstance(result.error, InMemoryCheckpointerWarning)
        assert shop.ran == []
        phases = [entry.phase.name for entry in sagacity.history("wire-1")]
        assert phases == ["AWAITING_APPROVAL", "ENDED"]
        ended = sagacity.history("wire-1")[-1].payload
        assert ended["error"]["type"] == "InMemoryCheckpointerWarning"
        assert "SqliteSaver" in ended["error"]["message"]
        assert sagacity.pending("wire-1") == []
        sagacity.close()

    def test_a_swallowing_framework_keeps_the_request_approvable(self, sqlite_url: str) -> None:
        """Swallowed by middleware, the refusal loses nothing: approve, resume, it runs once.

        The request stays pending and `resume_saga` without work runs the approved input.
        """
        sagacity, shop = Sagacity.from_url(sqlite_url), OrderTools()
        model = scripted(
            calls(tool_call("send_wire_transfer", "call-9", amount="250.00", to="ACME")), "Sent."
        )
        agent = prebuilt_agent(model, langchain_tools(sagacity, shop), checkpointer=InMemorySaver())
        result = sagacity.saga("wire-1", lambda: agent.invoke(REQUEST, CONFIG))
        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        (request,) = result.pending
        sagacity.approve("wire-1", approver="alice", expected_sha256=request.input_sha256)
        assert sagacity.resume_saga("wire-1").outcome is SagaOutcome.COMPLETED
        assert shop.ran == [("send_wire_transfer", ("250.00", "ACME"))]
        sagacity.close()


class TestPersistentCheckpointer:
    def test_sqlite_saver_pauses_silently_and_a_new_saver_resumes_the_thread(
        self, sqlite_url: str, tmp_path: Path
    ) -> None:
        """No warning with SqliteSaver; a fresh graph on the same file resumes and pays once."""
        checkpoints = tmp_path / "checkpoints.db"
        sagacity = Sagacity.from_url(sqlite_url)
        with sqlite3.connect(checkpoints, check_same_thread=False) as first:
            agent = wire_agent(sagacity, OrderTools(), SqliteSaver(first))
            paused = sagacity.saga("wire-1", lambda: agent.invoke(REQUEST, CONFIG))
        first.close()
        (request,) = paused.pending
        sagacity.approve("wire-1", approver="alice", expected_sha256=request.input_sha256)

        # Another process: new stores, new tools, a new saver on the same checkpoint file.
        worker, shop = Sagacity.from_url(sqlite_url), OrderTools()
        with sqlite3.connect(checkpoints, check_same_thread=False) as second:
            again = wire_agent(worker, shop, SqliteSaver(second))
            (interrupt,) = again.get_state(CONFIG).interrupts
            assert interrupt.value["request_id"] == request.request_id
            resumed = worker.resume_saga(
                "wire-1", lambda: again.invoke(Command(resume=True), CONFIG)
            )
        second.close()
        assert resumed.outcome is SagaOutcome.COMPLETED
        assert shop.ran == [("send_wire_transfer", ("250.00", "ACME"))]
        sagacity.close()
        worker.close()

    def test_no_checkpointer_does_not_warn_it_tells_the_model(self, sqlite_url: str) -> None:
        """Without a checkpointer nothing pauses: the model reads [AWAITING_APPROVAL], unwarned."""
        sagacity = Sagacity.from_url(sqlite_url)
        agent = wire_agent(sagacity, OrderTools(), None)
        result = sagacity.saga("wire-1", lambda: agent.invoke(REQUEST, CONFIG))
        assert result.outcome is SagaOutcome.AWAITING_APPROVAL
        texts = [str(m.content) for m in result.value["messages"]]
        assert any(text.startswith("[AWAITING_APPROVAL]") for text in texts)
        sagacity.close()
