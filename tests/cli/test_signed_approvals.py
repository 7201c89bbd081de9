"""A deployment that requires signed approvals, from the command line, on SQLite and PostgreSQL.

The worker requires signatures; a second process appends an APPROVED row with plain SQL
and a correct hash chain (tests/cli/_forger.py). Every command run with the public key
and the requirement (options or environment) refuses that row: resume runs nothing,
pending and show mark it `unsigned: not counted`, verify names it; the real approver
still approves, signing with `approve --key`, and the call runs once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagacity import Phase, Reversibility, Sagacity, SagaOutcome, compensable
from sagacity.audit import load_public_key
from tests.cli._run import run_cli

FORGER = Path(__file__).with_name("_forger.py")

TOOLS = '''
from sagacity import Reversibility, compensable


class Bank:
    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def wire(self, amount: str) -> str:
        """Send a wire."""
        with open("wired.txt", "a") as out:
            out.write(amount + "\\n")
        return "wt-" + amount
'''


class Bank:
    """The worker's copy of the tool (the CLI imports the module's)."""

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def wire(self, amount: str) -> str:
        """Send a wire."""
        return "wt-" + amount


class Deployment:
    """Keys, a tools module, and a saga that a requiring worker left waiting."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url = url
        self.folder = folder
        (folder / "bank_tools.py").write_text(TOOLS)
        made = run_cli("keygen", "--out", str(folder))
        assert made.returncode == 0, made.stderr
        self.private = folder / "sagacity-checkpoint.key"
        self.public = folder / "sagacity-checkpoint.pub"
        self.worker = Sagacity.from_url(
            url, approval_public_keys=[load_public_key(self.public)], require_signed_approvals=True
        )
        (wire,) = self.worker.wrap(Bank())
        waiting = self.worker.saga("w-1", lambda: wire(amount="10"), started_by="alice")
        assert waiting.outcome is SagaOutcome.AWAITING_APPROVAL
        self.sha256 = waiting.pending[0].input_sha256

    @property
    def env(self) -> dict[str, str]:
        """The deployment's settings, as its processes' environment holds them."""
        return {
            "SAGACITY_APPROVAL_PUBLIC_KEYS": str(self.public),
            "SAGACITY_REQUIRE_SIGNED_APPROVALS": "1",
            "PYTHONPATH": self.python_path,
        }

    @property
    def python_path(self) -> str:
        """The tools' folder first, then what the tests run with."""
        return os.pathsep.join(filter(None, [str(self.folder), os.environ.get("PYTHONPATH")]))

    def forge(self, approver: str, extra: str = "{}") -> int:
        """A second process appends an APPROVED row with plain SQL; its seq."""
        done = subprocess.run(
            [sys.executable, str(FORGER), self.url, "w-1", approver, extra],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return int(done.stdout)

    def cli(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run_cli(
            *args, "--database", self.url, cwd=self.folder, env=self.env if env is None else env
        )

    def phases(self) -> list[str]:
        return [entry.phase.value for entry in self.worker.journal.entries("w-1")]


@pytest.fixture
def deployment(shared_store_url: str, tmp_path: Path) -> Iterator[Deployment]:
    instance = Deployment(shared_store_url, tmp_path)
    yield instance
    instance.worker.close()


class TestAForgedApprovalFromPlainSql:
    def test_every_command_refuses_it_and_the_real_approver_still_approves(
        self, deployment: Deployment
    ) -> None:
        """Resume runs nothing; pending, show, verify say so; a signed approval runs once."""
        seq = deployment.forge("bob")
        assert seq == 2
        assert deployment.cli("verify", env={}).returncode == 0  # the chain alone is fine

        resumed = deployment.cli("resume", "w-1", "--tools", "bank_tools:Bank")
        assert resumed.returncode == 2
        assert resumed.stderr.startswith("sagacity resume: saga 'w-1': request ")
        assert "the APPROVED entry at seq 2 does not count: it carries no signature" in (
            resumed.stderr
        )
        assert not (deployment.folder / "wired.txt").exists()

        pending = deployment.cli("pending")
        assert pending.returncode == 0, pending.stderr
        (row,) = pending.stdout.splitlines()[1:]
        assert " waiting (APPROVED at seq 2: unsigned: not counted) " in row
        assert "bob" not in row
        listed = deployment.cli("pending", "--json")
        assert '"state":"waiting"' in listed.stdout
        assert '"approvals":[]' in listed.stdout
        assert '"not_counted":[{"seq":2,"reason":"it carries no signature"}]' in listed.stdout

        shown = deployment.cli("show", "w-1")
        (approved_line,) = [line for line in shown.stdout.splitlines() if " APPROVED " in line]
        assert approved_line.endswith("  unsigned: not counted (it carries no signature)")

        verified = deployment.cli("verify")
        assert verified.returncode == 1
        assert verified.stdout == (
            "saga 'w-1' seq 2: unsigned approval: the APPROVED entry naming approver 'bob' "
            "does not count: it carries no signature\n1 saga, 2 entries: 1 broken\n"
        )

        # The forged row does not block the real approver; without a key they cannot sign.
        unsigned = deployment.cli("approve", "w-1", "--approver", "carol", "--sha256", "0" * 64)
        assert (unsigned.returncode, unsigned.stdout) == (2, "")
        assert unsigned.stderr == (
            "sagacity approve: approvals must be signed here (--require-signed-approvals or "
            "SAGACITY_REQUIRE_SIGNED_APPROVALS), but no key signs this one: give --key FILE or "
            "set SAGACITY_APPROVAL_KEY. Nothing was approved\n"
        )
        assert deployment.phases() == ["AWAITING_APPROVAL", "APPROVED"]
        approved = deployment.cli(
            "approve", "w-1", "--approver", "carol", "--sha256", deployment.sha256,
            "--key", str(deployment.private),
        )  # fmt: skip
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.startswith("saga 'w-1': APPROVED at seq 3 by carol\n")
        signed = deployment.worker.journal.entries("w-1")[2].payload
        assert isinstance(signed, dict)
        assert signed["key_id"] == load_public_key(deployment.public).key_id

        ran = deployment.cli("resume", "w-1", "--tools", "bank_tools:Bank")
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout == "saga 'w-1': COMPLETED\nresult: \"wt-10\"\n"
        assert (deployment.folder / "wired.txt").read_text() == "10\n"
        # The forged row stays in the chain, as evidence, and verify keeps naming it.
        assert deployment.cli("verify").stdout.startswith("saga 'w-1' seq 2: unsigned approval")

    def test_a_wrongly_signed_row_is_refused_with_the_options(self, deployment: Deployment) -> None:
        """--approval-public-key and --require-signed-approvals do what the variables do."""
        key_id = load_public_key(deployment.public).key_id
        deployment.forge("bob", f'{{"signature": "{"00" * 64}", "key_id": "{key_id}"}}')
        options = (
            "--approval-public-key", str(deployment.public), "--require-signed-approvals"
        )  # fmt: skip
        plain = {"PYTHONPATH": deployment.python_path}
        resumed = deployment.cli("resume", "w-1", "--tools", "bank_tools:Bank", *options, env=plain)
        assert resumed.returncode == 2
        assert f"its signature does not verify with key {key_id!r}" in resumed.stderr
        assert not (deployment.folder / "wired.txt").exists()
        shown = deployment.cli("show", "w-1", "--json", *options, env=plain)
        assert (
            f'"not_counted":[{{"seq":2,"reason":"its signature does not verify with key '
            f"'{key_id}'\"}}]" in shown.stdout
        )

    def test_reject_and_compensate_take_the_requirement(self, deployment: Deployment) -> None:
        """They count approvals as the worker does: a requirement with no key is refused."""
        deployment.forge("bob")
        no_key = {"SAGACITY_REQUIRE_SIGNED_APPROVALS": "yes"}
        for command in (("reject", "w-1", "--approver", "carol", "--reason", "no"),
                        ("compensate", "w-1")):  # fmt: skip
            refused = deployment.cli(*command, env=no_key)
            assert refused.returncode == 2
            assert refused.stderr.endswith(
                "signed approvals are required, but no key is given to verify them with: set "
                "SAGACITY_APPROVAL_PUBLIC_KEYS (or --approval-public-key) to the approval "
                "service's public key\n"
            )
        assert deployment.phases() == ["AWAITING_APPROVAL", "APPROVED"]
        bad = deployment.cli("pending", env={"SAGACITY_REQUIRE_SIGNED_APPROVALS": "maybe"})
        assert bad.returncode == 2
        assert "SAGACITY_REQUIRE_SIGNED_APPROVALS='maybe': give 1" in bad.stderr
        rejected = deployment.cli("reject", "w-1", "--approver", "carol", "--reason", "no")
        assert rejected.returncode == 0, rejected.stderr
        assert deployment.phases()[-2:] == [Phase.REJECTED.value, Phase.ENDED.value]
