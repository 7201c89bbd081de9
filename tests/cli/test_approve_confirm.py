"""`sagacity approve` never approves blind: a hash typed, or the request shown and confirmed.

Without `--sha256` the command shows the tool, the whole input and its hash on a terminal
and asks; with no terminal it refuses and journals nothing. Either way it prints what it
approved.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sagacity import Reversibility, Sagacity, compensable
from tests.cli._run import run_cli
from tests.cli._terminal import run_on_terminal

IBAN = "DE89 3704 0044 0532 0130 00"


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def wire(amount: str, to: str) -> str:
    """Send a wire."""
    return "wt-1"


def waiting_wire(database: Path, amount: str = "5000.00 EUR") -> str:
    """Saga w-1 waits to wire `amount`: the request's hash."""
    sagacity = Sagacity.from_url(f"sqlite:///{database}")
    try:
        (tool,) = sagacity.wrap(wire)
        (request,) = sagacity.saga("w-1", lambda: tool(amount=amount, to=IBAN)).pending
        return request.input_sha256
    finally:
        sagacity.close()


def approvals(database: Path) -> list[dict[str, object]]:
    """The payloads of saga w-1's APPROVED entries."""
    sagacity = Sagacity.from_url(f"sqlite:///{database}")
    try:
        return [
            dict(e.payload)
            for e in sagacity.journal.entries("w-1")
            if e.phase.value == "APPROVED" and isinstance(e.payload, dict)
        ]
    finally:
        sagacity.close()


class TestWithoutATerminal:
    def test_no_hash_and_no_terminal_is_refused_and_nothing_is_journaled(
        self, tmp_path: Path
    ) -> None:
        """Exit 2 with one line that asks for --sha256; no APPROVED, no output."""
        database = tmp_path / "s.db"
        waiting_wire(database)
        done = run_cli("approve", "w-1", "--approver", "bob", "--database", str(database))
        assert done.returncode == 2
        assert done.stdout == ""
        assert done.stderr == (
            "sagacity approve: saga 'w-1': give --sha256 with the whole hash of the input you "
            "reviewed (sagacity pending --saga w-1 shows it); without --sha256, approve shows "
            "the request and asks you to confirm, which needs a terminal. Nothing was approved\n"
        )
        assert approvals(database) == []

    def test_with_the_hash_it_prints_the_tool_input_and_hash_it_approved(
        self, tmp_path: Path
    ) -> None:
        """The approval's line, then the request, tool, whole input and hash approved."""
        database = tmp_path / "s.db"
        digest = waiting_wire(database)
        done = run_cli(
            "approve", "w-1", "--approver", "bob", "--sha256", digest, "--database", str(database)
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == "saga 'w-1': APPROVED at seq 2 by bob"
        assert lines[1:] == [
            "  tool    wire",
            f'  input   {{"amount": "5000.00 EUR", "to": "{IBAN}"}}',
            f"  sha256  {digest}",
        ]
        assert [a["approver"] for a in approvals(database)] == ["bob"]


class TestOnATerminal:
    def test_the_request_is_shown_whole_and_approved_once_confirmed(self, tmp_path: Path) -> None:
        """Tool, whole input and hash before the question; the APPROVED is bound to that hash."""
        database = tmp_path / "s.db"
        digest = waiting_wire(database)
        terminal = run_on_terminal(
            "approve", "w-1", "--approver", "bob", "--database", str(database), columns=40
        )
        shown = terminal.read_until("Type yes to approve: ")
        assert "  tool     wire\n" in shown
        assert f"  sha256   {digest}\n" in shown
        assert '"amount": "5000.00 EUR",' in shown
        assert f'"to": "{IBAN}"' in shown
        assert shown.endswith("Approve this exact input as bob? Type yes to approve: ")
        assert approvals(database) == []  # nothing before the answer
        terminal.answer("yes")
        code, output = terminal.finish()
        assert code == 0, output
        assert "saga 'w-1': APPROVED at seq 2 by bob\n" in output
        assert f'  input   {{"amount": "5000.00 EUR", "to": "{IBAN}"}}\n' in output
        assert output.endswith(f"  sha256  {digest}\n")
        (approved,) = approvals(database)
        assert approved["approver"] == "bob"
        assert approved["input_sha256"] == digest

    @pytest.mark.parametrize("answer", ["no", "", "y"])
    def test_anything_but_yes_approves_nothing(self, tmp_path: Path, answer: str) -> None:
        """Exit 2, said so, and no APPROVED in the journal."""
        database = tmp_path / "s.db"
        waiting_wire(database)
        terminal = run_on_terminal(
            "approve", "w-1", "--approver", "bob", "--database", str(database)
        )
        terminal.read_until("Type yes to approve: ")
        terminal.answer(answer)
        code, output = terminal.finish()
        assert code == 2
        assert output.endswith(
            "sagacity approve: saga 'w-1': not approved; nothing was journaled\n"
        )
        assert approvals(database) == []

    def test_an_edited_request_says_who_edited_it_and_what_it_was(self, tmp_path: Path) -> None:
        """Before confirming, the approver sees the editor, the time and the amount before."""
        database = tmp_path / "s.db"
        waiting_wire(database, amount="980.00 EUR")
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        try:
            edited = sagacity.edit(
                "w-1", approver="alice", new_input={"amount": "98000.00 EUR", "to": IBAN}
            )
            (entry,) = [
                e
                for e in sagacity.journal.entries("w-1")
                if e.phase.value == "AWAITING_APPROVAL" and e.seq == edited.seq
            ]
        finally:
            sagacity.close()
        terminal = run_on_terminal(
            "approve", "w-1", "--approver", "bob", "--database", str(database)
        )
        shown = terminal.read_until("Type yes to approve: ")
        terminal.answer("no")
        terminal.finish()
        before = json.dumps({"amount": "980.00 EUR", "to": IBAN}, separators=(", ", ": "))
        assert f"  edited by alice at {entry.recorded_at}\n" in shown
        assert '    amount: "980.00 EUR" -> "98000.00 EUR"\n' in shown
        assert f"    before: {before}\n" in shown
        assert '"amount": "98000.00 EUR",' in shown


class TestTheEditor:
    def test_the_editor_is_refused_before_being_asked(self, tmp_path: Path) -> None:
        """Four eyes: alice, who edited the input, is told so at once; nothing is journaled."""
        database = tmp_path / "s.db"
        waiting_wire(database, amount="980.00 EUR")
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        try:
            edited = sagacity.edit(
                "w-1", approver="alice", new_input={"amount": "98000.00 EUR", "to": IBAN}
            )
        finally:
            sagacity.close()
        terminal = run_on_terminal(
            "approve", "w-1", "--approver", "alice", "--database", str(database)
        )
        code, output = terminal.finish()
        assert code == 2
        assert "Type yes" not in output
        assert output == (
            f"sagacity approve: saga 'w-1': 'alice' edited the input of request "
            f"{edited.request_id} for tool 'wire', so they cannot approve it; another "
            "principal must approve it\n"
        )
        assert approvals(database) == []


class TestARefusedApproval:
    def test_a_second_approval_by_the_same_person_is_reported_once(self, tmp_path: Path) -> None:
        """The core's refusal is the command's error, on one line: no warning line repeats it."""
        database = tmp_path / "s.db"
        sha = waiting_wire(database)
        command = ("approve", "w-1", "--approver", "bob", "--sha256", sha, "--database")
        assert run_cli(*command, str(database)).returncode == 0
        done = run_cli(*command, str(database))
        assert done.returncode == 2, done.stderr
        assert "warning:" not in done.stderr
        assert done.stderr.count("bob") == 1, done.stderr
        assert [a["approver"] for a in approvals(database)] == ["bob"]
