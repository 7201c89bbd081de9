"""Tutorial 3: the agent pauses, a human approves with the CLI, a second process resumes.

Run it with `python examples/tutorials/approval_across_processes.py`. Three processes
share one SQLite journal, as they would on one machine:

1. the agent's process asks for an IRREVERSIBLE wire transfer: the tool is not called,
   the saga ends its run AWAITING_APPROVAL, and the process exits;
2. a human reviews the request and approves it with `sagacity approve`, giving the
   SHA-256 of the input they reviewed (a hash that does not match is refused);
3. a worker process resumes the saga: the approved call runs exactly once, with the
   input that was approved.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from sagacity import CompensationContext, Reversibility, Sagacity, compensable, compensation


class Treasury:
    @compensable(by="release_budget")
    def hold_budget(self, amount: str) -> str:
        print(f"  held {amount} of the budget")
        return "hold-1"

    @compensation
    def release_budget(self, ctx: CompensationContext) -> None:
        print(f"  undo: released {ctx.result}")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        """Send money by wire: it cannot be recalled, so a human approves it first."""
        print(f"  WIRE SENT: {amount} to {to}")
        return "wire-77"


def agent(url: str) -> None:
    """Process 1: run the saga until the wire transfer waits for approval."""
    sagacity = Sagacity.from_url(url)
    tools = {tool.name: tool for tool in sagacity.wrap(Treasury())}

    def work() -> object:
        tools["hold_budget"]("2500.00")
        return tools["send_wire_transfer"]("2500.00", "ACME GmbH")

    result = sagacity.saga("payout-9", work)
    print(f"  the tool returned to the model: {str(result.value)[:40]}...")
    print(f"  outcome: {result.outcome.name}")
    (request,) = result.pending
    print(f"  waiting: {request.tool_name} {request.input}")
    print(f"  sha256 {request.input_sha256}")
    sagacity.close()


def resume(url: str) -> None:
    """Process 3: a worker that wraps the same tools resumes the approved saga."""
    sagacity = Sagacity.from_url(url)
    sagacity.wrap(Treasury())  # the approved call runs here, so its tool must be wrapped
    result = sagacity.resume_saga("payout-9")
    print(f"  outcome: {result.outcome.name}, the tool returned {result.value!r}")
    for entry in sagacity.history("payout-9"):
        print(f"  {entry.seq} {entry.phase.name:<17} {entry.tool_name or ''}")
    sagacity.close()


def run(*command: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    print(done.stdout, end="")
    print(done.stderr, end="")
    return done


def sagacity_command(*arguments: str) -> subprocess.CompletedProcess[str]:
    """The `sagacity` command, from the environment this program runs in."""
    return run(sys.executable, "-m", "sagacity.cli", *arguments)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder, 'sagacity.db')}"

        print("process 1, the agent:")
        asked = run(sys.executable, __file__, "agent", url)
        sha256 = asked.stdout.split("sha256 ")[1].split()[0]

        print("a human approves with the hash of another input: refused")
        wrong = sagacity_command(
            "approve", "payout-9", "--approver", "alice@treasury", "--sha256", "0" * 64,
            "--database", url,
        )  # fmt: skip
        print(f"  exit status {wrong.returncode}")

        print("the human approves the input they reviewed:")
        sagacity_command(
            "approve", "payout-9", "--approver", "alice@treasury", "--sha256", sha256,
            "--database", url,
        )  # fmt: skip

        print("process 3, a worker resumes:")
        run(sys.executable, __file__, "resume", url)


if __name__ == "__main__":
    if sys.argv[1:2] == ["agent"]:
        agent(sys.argv[2])
    elif sys.argv[1:2] == ["resume"]:
        resume(sys.argv[2])
    else:
        main()
