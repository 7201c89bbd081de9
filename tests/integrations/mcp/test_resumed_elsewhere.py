"""No stranded client: a call run outside the MCP server is answered from the journal.

An MCP client's paused call answers `[AWAITING_APPROVAL]`; its "resume" is sending the
call again. When the approved call was run elsewhere (`sagacity resume --tools` in
another process), which ended the saga, the call sent again gets the journaled result,
or the journaled failure, instead of "the saga ended": nothing runs twice, nothing is
journaled, and any other call is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from sagacity import Sagacity
from sagacity.integrations.mcp import end_saga, mcp_server
from tests.integrations._bank import (
    Bank,
    approve_and_run_elsewhere,
    approve_elsewhere,
    ledger_lines,
    worker_process,
)
from tests.integrations.mcp._shop import meta, text

WIRE = {"amount": "250.00", "to": "ACME"}


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.txt"
    monkeypatch.setenv("SAGACITY_TEST_LEDGER", str(path))
    return path


class TestApprovedCallRunElsewhere:
    async def test_the_call_sent_again_gets_the_transfer_id(
        self, sqlite_url: str, ledger: Path
    ) -> None:
        """Sent again (without and with its call id), the wire answers its journaled result.

        Another call, and the wire with another input, are refused: the saga ended.
        """
        with Sagacity.from_url(sqlite_url) as sagacity:
            async with Client(mcp_server(sagacity, Bank())) as client:
                hold = {"account": "ACME-ops", "amount": "250.00"}
                await client.call_tool("place_hold", hold, meta=meta("mcp-1"))
                waiting = await client.call_tool("send_wire_transfer", WIRE, meta=meta("mcp-1"))
                assert text(waiting).startswith("[AWAITING_APPROVAL]")
                (request,) = sagacity.pending("mcp-1")
                ran = approve_and_run_elsewhere("mcp-1", sqlite_url, ledger)
                assert ran.stdout.startswith("saga 'mcp-1': COMPLETED"), ran.stdout + ran.stderr
                before = sagacity.history("mcp-1")

                again = await client.call_tool("send_wire_transfer", WIRE, meta=meta("mcp-1"))
                by_id = await client.call_tool(
                    "send_wire_transfer", WIRE, meta=meta("mcp-1", request.call_id)
                )
                other = await client.call_tool("place_hold", hold, meta=meta("mcp-1"))
                changed = await client.call_tool(
                    "send_wire_transfer", {**WIRE, "amount": "9999.00"}, meta=meta("mcp-1")
                )

            assert (again.is_error, text(again)) == (False, "wt-250.00-ACME")
            assert (by_id.is_error, text(by_id)) == (False, "wt-250.00-ACME")
            assert other.is_error
            assert "saga 'mcp-1' ended COMPLETED at seq" in text(other)
            assert "of tool 'place_hold' is not run" in text(other)
            assert changed.is_error
            assert "of tool 'send_wire_transfer' is not run" in text(changed)
            assert ledger_lines(ledger) == ["hold ACME-ops 250.00", "wire 250.00 ACME"]
            assert sagacity.history("mcp-1") == before

    async def test_a_failure_elsewhere_is_what_the_client_is_told(
        self, sqlite_url: str, ledger: Path
    ) -> None:
        """The wire failed in the CLI, which released the hold: sent again, it answers why."""
        with Sagacity.from_url(sqlite_url) as sagacity:
            async with Client(mcp_server(sagacity, Bank())) as client:
                hold = {"account": "ACME-ops", "amount": "250.00"}
                await client.call_tool("place_hold", hold, meta=meta("mcp-2"))
                await client.call_tool("send_wire_transfer", WIRE, meta=meta("mcp-2"))
                approve_and_run_elsewhere("mcp-2", sqlite_url, ledger, bank_down=True)

                again = await client.call_tool("send_wire_transfer", WIRE, meta=meta("mcp-2"))

            assert again.is_error
            assert "saga 'mcp-2' ended COMPENSATED" in text(again)
            assert "RuntimeError: the bank refused the transfer to ACME" in text(again)
            assert ledger_lines(ledger) == [
                "hold ACME-ops 250.00",
                "refused 250.00 ACME",
                "release hold-ACME-ops",
            ]

    async def test_a_saga_that_never_paused_is_still_refused_on_entry(
        self, sqlite_url: str, ledger: Path
    ) -> None:
        """A saga that ended without asking for approval has nothing to replay: refused on entry."""
        with Sagacity.from_url(sqlite_url) as sagacity:
            async with Client(mcp_server(sagacity, Bank())) as client:
                hold = {"account": "ACME-ops", "amount": "1.00"}
                await client.call_tool("place_hold", hold, meta=meta("mcp-3"))
                assert (await end_saga(sagacity, "mcp-3")).outcome.value == "COMPLETED"
                late = await client.call_tool("place_hold", hold, meta=meta("mcp-3"))

            assert text(late).startswith("tool 'place_hold': saga 'mcp-3' ended COMPLETED")
            assert ledger_lines(ledger) == ["hold ACME-ops 1.00"]


class TestWorker:
    async def test_a_worker_runs_the_approved_call_and_the_client_gets_its_result(
        self, sqlite_url: str, ledger: Path
    ) -> None:
        """Approved with the CLI, the wire runs in `sagacity worker`; sent again, it answers.

        The worker runs the call once, with its journaled input, and ends the saga; the
        client's call sent again gets the journaled transfer id.
        """
        with Sagacity.from_url(sqlite_url) as sagacity:
            async with Client(mcp_server(sagacity, Bank())) as client:
                waiting = await client.call_tool("send_wire_transfer", WIRE, meta=meta("mcp-w"))
                assert text(waiting).startswith("[AWAITING_APPROVAL]")
                assert "resumer" not in sagacity.history("mcp-w")[-1].payload
                app = "tests.integrations.mcp._worker_app:worker"
                with worker_process(app, sqlite_url, ledger) as worker:
                    approve_elsewhere("mcp-w", sqlite_url, ledger)
                    worker.wait_for("saga 'mcp-w': request")

                again = await client.call_tool("send_wire_transfer", WIRE, meta=meta("mcp-w"))

            assert (again.is_error, text(again)) == (False, "wt-250.00-ACME")
            assert ledger_lines(ledger) == ["wire 250.00 ACME"]
            assert sagacity.history("mcp-w")[-1].payload["outcome"] == "COMPLETED"
