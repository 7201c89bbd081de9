"""Acting on sagas from the command line: approve, reject, compensate, resolve, resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sagacity import Phase, Sagacity, SagaOutcome, compensable
from tests.cli._run import run_cli

TOOLS = '''
import os
import time
from sagacity import CompensationContext, Reversibility, compensable, compensation


class Bank:
    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def wire(self, amount: str) -> str:
        """Send a wire."""
        with open("wired.txt", "a") as out:
            out.write(amount + "\\n")
        return "wt-" + amount


class Shop:
    @compensable(by="refund")
    def charge(self, amount: int) -> str:
        """Charge a card."""
        return f"ch-{amount}"

    @compensation
    def refund(self, ctx: CompensationContext) -> None:
        if os.path.exists("provider_down"):
            raise ConnectionError("the payment provider is down")
        with open("refunded.txt", "a") as out:
            out.write(ctx.result + "\\n")

    @compensable(by="refund")
    def ship(self, address: str) -> str:
        """Hand the parcel to a carrier that refuses it."""
        raise ValueError("no such street")


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def slow_wire(amount: str) -> str:
    """Send a wire, slowly."""
    with open("started.txt", "w") as out:
        out.write("started")
    time.sleep(60)
    return "never"
'''


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    """A module of tools the command can import, as a user's application would have."""
    (tmp_path / "bank_tools.py").write_text(TOOLS)
    return tmp_path


def waiting_wire(database: str, *, slow: bool = False) -> tuple[Sagacity, str]:
    """A saga that asked to wire 10: (its Sagacity, the request's input hash)."""
    sys.path.insert(0, str(Path(database).parent))
    try:
        import bank_tools
    finally:
        sys.path.pop(0)
    sagacity = Sagacity.from_url(f"sqlite:///{database}")
    if slow:
        (tool,) = sagacity.wrap(bank_tools.slow_wire)
    else:
        (tool,) = sagacity.wrap(bank_tools.Bank())
    waiting = sagacity.saga("w-1", lambda: tool(amount="10"))
    assert waiting.outcome is SagaOutcome.AWAITING_APPROVAL
    return sagacity, waiting.pending[0].input_sha256


def phases(sagacity: Sagacity, saga_id: str) -> list[str]:
    return [entry.phase.value for entry in sagacity.journal.entries(saga_id)]


class TestApprove:
    def test_approve_then_resume_with_tools(self, bank: Path) -> None:
        """Approve with the hash in upper case; resume imports the tool and runs it once."""
        database = str(bank / "s.db")
        sagacity, digest = waiting_wire(database)
        done = run_cli(
            "approve", "w-1", "--approver", "bob", "--sha256", digest.upper(),
            "--database", database,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("saga 'w-1': APPROVED at seq 2 by bob\n")
        again = run_cli(
            "approve", "w-1", "--approver", "carol", "--sha256", digest, "--database", database
        )
        assert again.returncode == 2
        assert "was approved by 'bob'" in again.stderr
        resumed = run_cli(
            "resume", "w-1", "--tools", "bank_tools:Bank", "--database", database,
            cwd=bank, env={"PYTHONPATH": str(bank)},
        )  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout == "saga 'w-1': COMPLETED\nresult: \"wt-10\"\n"
        assert (bank / "wired.txt").read_text() == "10\n"
        assert phases(sagacity, "w-1") == [
            "AWAITING_APPROVAL", "APPROVED", "INTENT", "EXECUTED", "ENDED"
        ]  # fmt: skip
        twice = run_cli(
            "resume", "w-1", "--tools", "bank_tools:Bank", "--database", database,
            cwd=bank, env={"PYTHONPATH": str(bank)},
        )  # fmt: skip
        assert twice.returncode == 2
        assert (bank / "wired.txt").read_text() == "10\n"
        sagacity.close()

    def test_a_hash_prefix_or_a_different_hash_is_refused(self, bank: Path) -> None:
        """A prefix is refused; a wrong hash shows the first digit where the two differ."""
        database = str(bank / "s.db")
        sagacity, digest = waiting_wire(database)
        prefix = run_cli(
            "approve", "w-1", "--approver", "bob", "--sha256", digest[:12], "--database", database
        )
        assert prefix.returncode == 2
        assert prefix.stderr == (
            f"sagacity approve: saga 'w-1': --sha256: give the whole SHA-256, 64 hex digits, "
            f"not {digest[:12]!r} (it is the first 12 digits of the request's {digest}); a "
            "prefix is not enough: the approval is bound to the exact hash\n"
        )
        bad_prefix = "0" * 12 if not digest.startswith("0") else "1" * 12
        other = run_cli(
            "approve", "w-1", "--approver", "bob", "--sha256", bad_prefix, "--database", database
        )
        assert "(it differs from the request's " in other.stderr
        assert " at digit 1)" in other.stderr
        wrong = digest[:20] + ("0" if digest[20] != "0" else "1") + digest[21:]
        differs = run_cli(
            "approve", "w-1", "--approver", "bob", "--sha256", wrong, "--database", database
        )
        assert differs.returncode == 2
        assert "differs from the request's at digit 21" in differs.stderr
        assert f"given   {wrong}" in differs.stderr
        assert f"request {digest}" in differs.stderr
        assert phases(sagacity, "w-1") == ["AWAITING_APPROVAL"]
        sagacity.close()

    @pytest.mark.parametrize("command", ["approve", "reject"])
    def test_an_empty_approver_is_refused(self, bank: Path, command: str) -> None:
        """A blank name is one line and exit 2; nothing is journaled."""
        database = str(bank / "s.db")
        sagacity, _ = waiting_wire(database)
        extra = ["--reason", "no"] if command == "reject" else []
        done = run_cli(command, "w-1", "--approver", "  ", *extra, "--database", database)
        assert done.returncode == 2
        assert done.stderr == (
            f"sagacity {command}: --approver must name a person or service, not '  '\n"
        )
        assert phases(sagacity, "w-1") == ["AWAITING_APPROVAL"]
        sagacity.close()

    def test_an_unknown_saga(self, bank: Path) -> None:
        """Approving a saga that does not exist names it, exit 1."""
        database = str(bank / "s.db")
        waiting_wire(database)[0].close()
        done = run_cli("approve", "nope", "--approver", "bob", "--database", database)
        assert (done.returncode, done.stderr) == (
            1,
            "sagacity approve: saga 'nope' has no journal entries\n",
        )


class TestReject:
    def test_reject_records_who_and_why_and_ends_the_saga(self, bank: Path) -> None:
        """REJECTED names the approver and reason; the saga ends; the tool never ran."""
        database = str(bank / "s.db")
        sagacity, _ = waiting_wire(database)
        done = run_cli(
            "reject", "w-1", "--approver", "carol", "--reason", "wrong account",
            "--database", database,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout == "saga 'w-1': COMPENSATED\n"
        rejected = sagacity.journal.entries("w-1")[1]
        assert rejected.phase is Phase.REJECTED
        assert rejected.payload["approver"] == "carol"
        assert rejected.payload["reason"] == "wrong account"
        assert not (bank / "wired.txt").exists()
        sagacity.close()


class TestResolveAndCompensate:
    def test_an_in_doubt_call_resolved_then_compensated(self, tmp_path: Path) -> None:
        """Resolve --executed --result JSON, then compensate: the undo sees that result."""
        undone: list[object] = []

        @compensable(by=lambda ctx: undone.append(ctx.result))
        def charge(amount: int) -> str:
            raise TimeoutError("no answer")

        database = str(tmp_path / "s.db")
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        (tool,) = sagacity.wrap(charge)
        assert sagacity.saga("pay-1", lambda: tool(amount=5)).outcome is SagaOutcome.NEEDS_ATTENTION
        bad = run_cli(
            "resolve", "pay-1", "charge#1", "--executed", "--result", "{not json",
            "--by", "ops", "--database", database,
        )  # fmt: skip
        assert bad.returncode == 2
        assert bad.stderr.startswith("sagacity resolve: --result is not JSON: ")
        done = run_cli(
            "resolve", "pay-1", "charge#1", "--executed", "--result", '{"charge": "ch_9"}',
            "--by", "ops@example.com", "--database", database,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(
            "saga 'pay-1': call 'charge#1' resolved as executed by ops@example.com (EXECUTED at"
        )
        # The undo is declared in this process: compensate here, as the tool's owner would.
        result = sagacity.compensate("pay-1")
        assert result.outcome is SagaOutcome.COMPENSATED
        assert undone == [{"charge": "ch_9"}]
        sagacity.close()

    def test_resolve_not_executed_and_compensate_from_the_command_line(
        self, tmp_path: Path
    ) -> None:
        """A call found not to have run needs no undo: compensate ends the saga COMPENSATED."""

        @compensable(by=lambda: None)
        def charge(amount: int) -> str:
            raise TimeoutError("no answer")

        database = str(tmp_path / "s.db")
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        (tool,) = sagacity.wrap(charge)
        sagacity.saga("pay-1", lambda: tool(amount=5))
        sagacity.close()
        done = run_cli(
            "resolve", "pay-1", "charge#1", "--not-executed", "--by", "ops", "--database", database
        )
        assert done.returncode == 0, done.stderr
        assert "resolved as not executed by ops (FAILED at seq 4)" in done.stdout
        again = run_cli(
            "resolve", "pay-1", "charge#1", "--not-executed", "--by", "ops", "--database", database
        )
        assert again.returncode == 2
        assert "is not in doubt" in again.stderr
        compensated = run_cli("compensate", "pay-1", "--database", database)
        assert compensated.returncode == 0, compensated.stderr
        assert compensated.stdout == "saga 'pay-1': COMPENSATED\n"
        assert run_cli("doubts", "--database", database).stdout == (
            "no call or compensation is in doubt\n"
        )

    def test_compensate_a_completed_saga_is_refused(self, tmp_path: Path) -> None:
        """Nothing failed, nothing to undo: exit 2 with the journal's reason."""

        @compensable(by=lambda: None)
        def note(text: str) -> str:
            return "ok"

        database = str(tmp_path / "s.db")
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        (tool,) = sagacity.wrap(note)
        sagacity.saga("n-1", lambda: tool(text="x"))
        sagacity.close()
        done = run_cli("compensate", "n-1", "--database", database)
        assert done.returncode == 2
        assert done.stderr.startswith("sagacity compensate: saga 'n-1' ended COMPLETED at seq 3")


class TestCompensateWithTools:
    def test_the_application_s_compensations_run_from_the_command_line(
        self, bank: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A refund that failed is retried from the command line, found through --tools."""
        monkeypatch.chdir(bank)
        sys.path.insert(0, str(bank))
        try:
            import bank_tools
        finally:
            sys.path.pop(0)
        database = str(bank / "s.db")
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        charge, ship = sagacity.wrap(bank_tools.Shop())

        def work() -> None:
            charge(amount=5)
            ship(address="1 Main St")

        (bank / "provider_down").touch()
        assert sagacity.saga("o-1", work).outcome is SagaOutcome.COMPENSATION_FAILED
        sagacity.close()
        (bank / "provider_down").unlink()
        done = run_cli(
            "compensate", "o-1", "--tools", "bank_tools:Shop", "--database", database,
            cwd=bank, env={"PYTHONPATH": str(bank)},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout == "saga 'o-1': COMPENSATED (compensated charge)\n"
        assert (bank / "refunded.txt").read_text() == "ch-5\n"


class TestResumeMistakes:
    @pytest.mark.parametrize(
        ("spec", "message"),
        [
            ("bank_tools", "--tools 'bank_tools': give module:object"),
            ("no_such_module:X", "--tools 'no_such_module:X': cannot import 'no_such_module'"),
            ("bank_tools:Nope", "--tools 'bank_tools:Nope': 'bank_tools' has no 'Nope'"),
        ],
    )
    def test_bad_tools(self, bank: Path, spec: str, message: str) -> None:
        """Each mistake is one line naming the --tools value, exit 2."""
        database = str(bank / "s.db")
        waiting_wire(database)[0].close()
        done = run_cli(
            "resume", "w-1", "--tools", spec, "--database", database,
            cwd=bank, env={"PYTHONPATH": str(bank)},
        )  # fmt: skip
        assert done.returncode == 2
        assert done.stderr.startswith(f"sagacity resume: {message}")
        assert done.stderr.count("\n") == 1


class TestInterrupt:
    def test_ctrl_c_is_one_line_and_130(self, bank: Path) -> None:
        """Ctrl-C during a resume: exit 130, one line, what was committed stays journaled."""
        database = str(bank / "s.db")
        sagacity, _ = waiting_wire(database, slow=True)
        sagacity.approve("w-1", approver="bob")
        process = subprocess.Popen(
            [sys.executable, "-m", "sagacity.cli", "resume", "w-1", "--tools",
             "bank_tools:slow_wire", "--database", database],
            cwd=bank,
            env={**os.environ, "PYTHONPATH": str(bank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not (bank / "started.txt").exists():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the tool never started: {process.communicate()}")
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=30)
        assert process.returncode == 130
        assert err.splitlines() == [
            "sagacity resume: warning: saga 'w-1': call 'slow_wire#1' of tool 'slow_wire' is in "
            "doubt (KeyboardInterrupt): its effect may exist",
            "sagacity resume: interrupted; what was committed before stays in the journal",
        ]
        assert phases(sagacity, "w-1")[:3] == ["AWAITING_APPROVAL", "APPROVED", "INTENT"]
        sagacity.close()
