"""No stranded graph: a call run outside LangGraph is replayed by the graph's own resume.

The graph pauses on the wire transfer; the approval and the approved call are made with
the CLI in other processes (`sagacity approve`, `sagacity resume --tools`), which end the
saga. The graph's native resume (`Command(resume=True)` inside `resume_saga`) then
replays what the journal holds instead of raising `ApprovalAlreadyUsedError`: the agent
is told the transfer id, the failure or the rejection, and nothing runs twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage

from sagacity import ReplayMismatchError, Sagacity, SagaOutcome
from sagacity.audit import verify
from sagacity.integrations.langchain import langchain_tools
from tests.integrations._bank import (
    Bank,
    approve_and_run_elsewhere,
    ledger_lines,
    reject_elsewhere,
)
from tests.integrations.langchain._agents import GraphRun, build_graph, tool_call
from tests.integrations.langchain._teller import Teller

REQUEST = {"messages": [HumanMessage("Hold 250.00 on ACME-ops, then wire it to ACME.")]}


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("SAGACITY_TEST_LEDGER", str(path))
    return path


@pytest.fixture(params=["create_agent-sync", "tool_node-async"])
def shape(request: pytest.FixtureRequest) -> tuple[str, bool]:
    graph_kind, mode = request.param.split("-")
    return graph_kind, mode == "async"


def paused_graph(sagacity: Sagacity, shape: tuple[str, bool], *, greedy: bool = False) -> GraphRun:
    graph_kind, is_async = shape
    tools = langchain_tools(sagacity, Bank())
    graph = build_graph(graph_kind, Teller(greedy=greedy), tools)  # type: ignore[arg-type]  # any chat model
    return GraphRun(sagacity, graph, is_async=is_async)


def last_message(state: Any) -> str:
    return str(state["messages"][-1].content)


class TestApprovedCallRunElsewhere:
    async def test_the_graph_resume_replays_the_transfer_id(
        self, sqlite_url: str, ledger: Path, shape: tuple[str, bool]
    ) -> None:
        """`sagacity resume` ran the wire; the graph's resume tells the agent its transfer id.

        The tool ran once (one ledger line, one EXECUTED), the replay journaled nothing
        and the result says so (`replayed`, the ENDED outcome).
        """
        with Sagacity.from_url(sqlite_url) as sagacity:
            run = paused_graph(sagacity, shape)
            paused = await run.start("wire-1", REQUEST)
            assert paused.outcome is SagaOutcome.AWAITING_APPROVAL

            ran = approve_and_run_elsewhere("wire-1", sqlite_url, ledger)
            assert ran.returncode == 0, ran.stderr
            assert ran.stdout.startswith("saga 'wire-1': COMPLETED")
            before = sagacity.history("wire-1")

            resumed = await run.resume("wire-1", True)

            assert (resumed.outcome, resumed.replayed) == (SagaOutcome.COMPLETED, True)
            assert last_message(resumed.value) == "The bank says: wt-250.00-ACME"
            assert run.interrupts() == []
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "wire 250.00 ACME"]
            assert sagacity.history("wire-1") == before
            assert [e.phase.name for e in before].count("EXECUTED") == 2
            assert verify(sagacity.journal, saga_id="wire-1").ok

    async def test_a_failure_elsewhere_is_what_the_agent_is_told(
        self, sqlite_url: str, ledger: Path, shape: tuple[str, bool]
    ) -> None:
        """The wire failed in the CLI (the hold was released there): the graph learns why."""
        with Sagacity.from_url(sqlite_url) as sagacity:
            run = paused_graph(sagacity, shape)
            await run.start("wire-2", REQUEST)
            ran = approve_and_run_elsewhere("wire-2", sqlite_url, ledger, bank_down=True)
            assert ran.stdout.startswith("saga 'wire-2': COMPENSATED"), ran.stdout + ran.stderr

            resumed = await run.resume("wire-2", True)

            assert (resumed.outcome, resumed.replayed) == (SagaOutcome.COMPENSATED, True)
            told = last_message(resumed.value)
            assert told.startswith("The bank says: ")
            assert "call 'call-w' of tool 'send_wire_transfer' failed at seq" in told
            assert "RuntimeError: the bank refused the transfer to ACME" in told
            assert ledger_lines(ledger) == [
                "hold ACME-ops 250.00",
                "refused 250.00 ACME",
                "release hold-ACME-ops",
            ]


class TestRejectedElsewhere:
    async def test_the_graph_resume_gives_the_agent_langgraphs_no(
        self, sqlite_url: str, ledger: Path, shape: tuple[str, bool]
    ) -> None:
        """Rejected with the CLI (hold released there): the resume tells the agent no."""
        with Sagacity.from_url(sqlite_url) as sagacity:
            run = paused_graph(sagacity, shape)
            paused = await run.start("wire-3", REQUEST)
            (request,) = paused.pending
            rejected = reject_elsewhere("wire-3", sqlite_url, ledger)
            assert rejected.returncode == 0, rejected.stderr
            before = sagacity.history("wire-3")

            resumed = await run.resume("wire-3", True)

            assert (resumed.outcome, resumed.replayed) == (SagaOutcome.COMPENSATED, True)
            assert last_message(resumed.value) == (
                f"The bank says: [REJECTED] send_wire_transfer was not run: approval request "
                f"{request.request_id} was rejected: not this week. Do not call it again; tell "
                "the user it was not done."
            )
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "release hold-ACME-ops"]
            assert sagacity.history("wire-3") == before


class TestAttacks:
    async def test_a_new_call_in_the_replay_is_refused_and_journals_nothing(
        self, sqlite_url: str, ledger: Path, shape: tuple[str, bool]
    ) -> None:
        """The agent asks for another hold after the replayed wire: it is not run."""
        with Sagacity.from_url(sqlite_url) as sagacity:
            run = paused_graph(sagacity, shape, greedy=True)
            await run.start("wire-4", REQUEST)
            approve_and_run_elsewhere("wire-4", sqlite_url, ledger)
            before = sagacity.history("wire-4")

            resumed = await run.resume("wire-4", True)

            assert resumed.replayed
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "wire 250.00 ACME"]
            assert sagacity.history("wire-4") == before
            (refused,) = [
                m for m in resumed.value["messages"]
                if isinstance(m, ToolMessage) and m.tool_call_id == "call-h2"
            ]  # fmt: skip
            assert "saga 'wire-4' ended COMPLETED at seq" in str(refused.content)
            assert "call 'call-h2' of tool 'place_hold' is not run" in str(refused.content)

    @pytest.mark.parametrize(
        ("edit", "refusal"),
        [
            ({"amount": "9999.00", "to": "ACME"}, "already ran at seq 5 with other input"),
            ({"name": "place_hold", "account": "x", "amount": "1"}, "was used by tool"),
        ],
    )
    async def test_an_edited_paused_call_is_refused_not_replayed(
        self, sqlite_url: str, ledger: Path, edit: dict[str, str], refusal: str
    ) -> None:
        """A changed argument or another tool under the call id, edited into the thread, is refused.

        The journal's checks of tool and input hold in a replay as in any run: the
        refusal is raised and nothing runs.
        """
        with Sagacity.from_url(sqlite_url) as sagacity:
            run = paused_graph(sagacity, ("tool_node", False))
            await run.start("wire-5", REQUEST)
            approve_and_run_elsewhere("wire-5", sqlite_url, ledger)
            state = run.graph.get_state(run.config)
            asking = state.values["messages"][-1]
            name = edit.pop("name", "send_wire_transfer")
            edited = asking.model_copy(update={"tool_calls": [tool_call(name, "call-w", **edit)]})
            run.graph.update_state(run.config, {"messages": [edited]}, as_node="agent")

            with pytest.raises(ReplayMismatchError, match=refusal):
                await run.resume("wire-5", True)

            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "wire 250.00 ACME"]
