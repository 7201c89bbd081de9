"""What an approver reviews with `sagacity pending`: every request whole, its edits, its deadline.

On a terminal one block per request, never cut to the terminal's width; an edited request
names its editor, when, each field changed and the input before; a workflow gate's
expiry is its timeout, in the table, the blocks and the JSON.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from sagacity import Reversibility, Sagacity, compensable
from sagacity.workflows import WorkflowRuntime, gate, stage, workflow
from tests.cli._run import restore_triggers_after, run_cli
from tests.cli._terminal import run_on_terminal

IBAN = "DE89 3704 0044 0532 0130 00"


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def wire(amount: str, to: str) -> str:
    """Send a wire."""
    return "wt-1"


@workflow("payout", description="Pay a supplier")
class Payout:
    @stage(order=1)
    def prepare(self, amount: str) -> str:
        """Work out the amount."""
        return amount

    @stage(order=2)
    @gate(reason="money leaves the bank", timeout_seconds=60)
    def pay(self, amount: str) -> str:
        """Pay it."""
        return f"paid {amount}"


def edited_wire(database: Path) -> tuple[str, str, str]:
    """w-1 asked to wire 980.00 EUR; alice edited it to 98000.00 EUR.

    Returns the new request's id, hash and the time of the edit (its AWAITING_APPROVAL).
    """
    sagacity = Sagacity.from_url(f"sqlite:///{database}")
    try:
        (tool,) = sagacity.wrap(wire)
        sagacity.saga("w-1", lambda: tool(amount="980.00 EUR", to=IBAN))
        new = sagacity.edit(
            "w-1", approver="alice", new_input={"amount": "98000.00 EUR", "to": IBAN}
        )
        (entry,) = [e for e in sagacity.journal.entries("w-1") if e.seq == new.seq]
        return new.request_id, new.input_sha256, entry.recorded_at
    finally:
        sagacity.close()


def pending_json(database: Path) -> list[dict[str, object]]:
    done = run_cli("pending", "--json", "--database", str(database))
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


class TestNothingIsCut:
    @pytest.mark.parametrize("columns", [40, 120])
    def test_a_narrow_terminal_shows_the_whole_input_and_hash(
        self, tmp_path: Path, columns: int
    ) -> None:
        """At 40 or 120 columns the amount, the IBAN and all 64 digits of the hash are there."""
        database = tmp_path / "s.db"
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        try:
            (tool,) = sagacity.wrap(wire)
            (request,) = sagacity.saga("w-1", lambda: tool(amount="98000.00 EUR", to=IBAN)).pending
        finally:
            sagacity.close()
        code, shown = run_on_terminal(
            "pending", "--database", str(database), columns=columns
        ).finish()
        assert code == 0, shown
        assert "…" not in shown
        assert shown.splitlines()[0] == f"request {request.request_id} of saga w-1"
        assert f"  sha256   {request.input_sha256}\n" in shown
        assert '"amount": "98000.00 EUR",' in shown
        assert f'"to": "{IBAN}"' in shown
        assert "  expires  never\n" in shown
        assert "  state    waiting, 0 of 1 approval\n" in shown


class TestAnEditedRequest:
    def test_the_terminal_block_names_the_editor_and_what_it_was(self, tmp_path: Path) -> None:
        """Edited by alice at the edit's time; amount before and after; the input before."""
        database = tmp_path / "s.db"
        _, digest, edited_at = edited_wire(database)
        code, shown = run_on_terminal("pending", "--database", str(database), columns=60).finish()
        assert code == 0, shown
        assert f"  edited by alice at {edited_at}\n" in shown
        assert '    amount: "980.00 EUR" -> "98000.00 EUR"\n' in shown
        assert f'    before: {{"amount": "980.00 EUR", "to": "{IBAN}"}}\n' in shown
        assert f"  sha256   {digest}\n" in shown

    def test_the_table_says_it_was_edited_and_lists_the_change(self, tmp_path: Path) -> None:
        """Without a terminal: the state says edited by whom and when; the change follows."""
        database = tmp_path / "s.db"
        request_id, _, edited_at = edited_wire(database)
        done = run_cli("pending", "--database", str(database))
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert f"waiting (edited by alice at {edited_at})" in lines[1]
        assert lines[2:] == [
            f"request {request_id}: edited by alice at {edited_at}",
            f'request {request_id}:   amount: "980.00 EUR" -> "98000.00 EUR"',
            f'request {request_id}:   before: {{"amount": "980.00 EUR", "to": "{IBAN}"}}',
        ]

    def test_json_has_the_edits_with_a_field_level_diff(self, tmp_path: Path) -> None:
        """`edits`: editor, time, the replaced request, the input and hash before, the changes."""
        database = tmp_path / "s.db"
        request_id, _, edited_at = edited_wire(database)
        (document,) = pending_json(database)
        assert document["request_id"] == request_id
        assert document["edited_by"] == "alice"
        (edit,) = document["edits"]  # type: ignore[misc]
        assert edit["edited_by"] == "alice"
        assert edit["edited_at"] == edited_at
        assert edit["request_id"] == request_id
        assert edit["before"] == {"amount": "980.00 EUR", "to": IBAN}
        assert edit["changes"] == [
            {"field": "amount", "kind": "changed", "before": "980.00 EUR", "after": "98000.00 EUR"}
        ]

    def test_a_request_never_edited_has_no_edits(self, tmp_path: Path) -> None:
        """`edits` is an empty list, and no line follows the table."""
        database = tmp_path / "s.db"
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        try:
            (tool,) = sagacity.wrap(wire)
            sagacity.saga("w-1", lambda: tool(amount="1.00 EUR", to=IBAN))
        finally:
            sagacity.close()
        (document,) = pending_json(database)
        assert document["edits"] == []
        assert len(run_cli("pending", "--database", str(database)).stdout.splitlines()) == 2


class TestAGateExpires:
    def test_a_gate_s_timeout_is_its_expiry(self, tmp_path: Path) -> None:
        """The gate expires 60 s after it was asked: in the JSON, the table and the block."""
        database = tmp_path / "s.db"
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        try:
            runtime = WorkflowRuntime(sagacity, workflows=[Payout])
            run = runtime.start("payout", "120.00 EUR")
            (gate_request,) = runtime.pending_gates(run.run_id)
        finally:
            sagacity.close()
        deadline = gate_request.requested_at + datetime.timedelta(seconds=60)
        assert gate_request.expires_at == deadline  # what the runtime expires it at
        (document,) = pending_json(database)
        assert document["expires_at"] == deadline.isoformat()
        table = run_cli("pending", "--database", str(database)).stdout.splitlines()
        assert deadline.isoformat() in table[1]
        assert "never" not in table[1]
        code, shown = run_on_terminal("pending", "--database", str(database)).finish()
        assert code == 0, shown
        assert f"  expires  {deadline.isoformat()} (in " in shown


class TestAnUnreadableSaga:
    def test_a_gate_of_a_run_whose_journal_cannot_be_read_is_listed(self, tmp_path: Path) -> None:
        """A row edited outside sagacity: the gate is listed as tampered, exit 0, no edits."""
        database = tmp_path / "s.db"
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        try:
            runtime = WorkflowRuntime(sagacity, workflows=[Payout])
            run = runtime.start("payout", "120.00 EUR")
        finally:
            sagacity.close()
        restore_triggers_after(
            database,
            f"UPDATE sagacity_journal SET phase = 'BOGUS' WHERE saga_id = '{run.run_id}' "
            "AND seq = 3",
        )
        (document,) = pending_json(database)
        assert document["tool_name"] == "payout.pay"
        assert document["state"] == "tampered"
        assert document["expires_at"] is None  # nothing can be read of its timeout
        assert document["edits"] == []
        code, shown = run_on_terminal("pending", "--database", str(database)).finish()
        assert code == 0, shown
        assert "  state    tampered, 0 of 1 approval; not approvable: saga " in shown


class TestHiddenCharacters:
    def test_a_bidi_override_in_the_input_is_shown_as_an_escape(self, tmp_path: Path) -> None:
        r"""A right-to-left override that would reverse the IBAN on screen is shown as \u202e."""
        database = tmp_path / "s.db"
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        try:
            (tool,) = sagacity.wrap(wire)
            sagacity.saga("w-1", lambda: tool(amount="10.00 EUR", to="\u202e00 0130"))
        finally:
            sagacity.close()
        code, shown = run_on_terminal("pending", "--database", str(database)).finish()
        assert code == 0, shown
        assert '"to": "\\u202e00 0130"' in shown
        assert "\u202e" not in shown
