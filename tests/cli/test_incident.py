"""On call: every state an operator meets has a truthful status, an action and an exit code.

The states are built with real processes (a saga killed with SIGKILL inside a tool and
inside a compensation, a refund that raises, a rejection where the tools are not, a
mistyped database) and acted on only through the installed `sagacity` command, run from
the application's folder as an operator does, and the real `sagacity serve` process.
Each test asserts what is printed, the exit code and the journal.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from sagacity import Sagacity
from sagacity.server import hash_token
from tests._postgres import admin_connection, require_server, server_url, with_query
from tests.docs._blocks import ROOT, blocks
from tests.processes._kill import kill, running_until
from tests.server._live import _free_port

pytestmark = pytest.mark.slow

INSTALLED = Path(sys.executable).with_name("sagacity")
TOOLS = Path(__file__).with_name("_incident_tools.py")
CLI_PAGE = ROOT / "docs" / "cli.md"
THEATRE = "theatre:Theatre"
TOKENS = {"tok-ann": ("ann", "approver"), "tok-ops": ("ops", "operator")}


def sagacity_command(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed `sagacity` command, run from `folder` with no PYTHONPATH."""
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    for name in ("SAGACITY_DATABASE_URL", "PYTHONPATH"):
        environment.pop(name, None)
    return subprocess.run(
        [str(INSTALLED), *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=environment,
    )


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """The application's folder: its tools module `theatre.py`, where the operator stands."""
    folder = tmp_path / "app"
    folder.mkdir()
    shutil.copy(TOOLS, folder / "theatre.py")
    return folder


def story(app: Path, url: str, saga_id: str, kind: str) -> str:
    """Run the application's saga in a process of its own; how its run ended."""
    done = subprocess.run(
        [sys.executable, "theatre.py", url, saga_id, kind],
        cwd=app, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def killed(app: Path, url: str, saga_id: str, kind: str, *, inside: str) -> None:
    """Run the saga and SIGKILL its process once it is inside `inside` (charge or refund)."""
    flag = app / f"hang_{inside}"
    flag.touch()
    command = [sys.executable, "theatre.py", url, saga_id, kind]
    try:
        with running_until(command, f"inside {inside}", cwd=app) as child:
            kill(child)
    finally:
        flag.unlink()
    # The dead process's lease (1 s) runs out: wait for it, as the operator would.
    waiter = Sagacity.from_url(url, lease_wait=15)
    try:
        with waiter.join(saga_id):
            pass
    finally:
        waiter.close()


def journal(url: str, saga_id: str) -> list[tuple[str, str | None, Any]]:
    """The saga's entries: phase, tool, and the payload of ENDED and COMPENSATION_FAILED."""
    reader = Sagacity.from_url(url)
    try:
        return [
            (
                e.phase.value,
                e.tool_name,
                e.payload if e.phase.value in ("ENDED", "COMPENSATION_FAILED") else None,
            )
            for e in reader.history(saga_id)
            if e.phase.value != "TAKEN_OVER"
        ]
    finally:
        reader.close()


def ledger(app: Path) -> list[str]:
    path = app / "ledger.txt"
    return path.read_text().splitlines() if path.exists() else []


def ended(outcome: str, **lists: list[str]) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "outcome": outcome,
        "compensated": [],
        "compensation_failed": [],
        "in_doubt": [],
    }
    return {**payload, **lists}


WAITING_SEAT = (
    "the undo runs where the tools are: no compensation for tool 'hold_seat' (call "
    "'hold_seat#1') is registered in this process, so the walk stopped before it and "
    "journaled nothing for 1 call(s). Run 'sagacity compensate {saga} --tools MODULE:OBJECT' "
    "naming the object that holds the saga's tools, or Sagacity.compensate('{saga}') in a "
    "worker that wraps them\n"
)

ASKED = [
    ("INTENT", "hold_seat", None),
    ("EXECUTED", "hold_seat", None),
    ("AWAITING_APPROVAL", "book_show", None),
]


class TestRejectWhereTheToolsAreNot:
    def test_reject_records_the_decision_and_leaves_the_undo(
        self, app: Path, shared_store_url: str
    ) -> None:
        """`sagacity reject` without --tools: REJECTED, no COMPENSATION_FAILED, exit 6.

        It says how to run the undo; `compensate --tools` from the app's folder does.
        """
        url = shared_store_url
        assert story(app, url, "r-1", "ask") == "AWAITING_APPROVAL"
        done = sagacity_command(
            app, "reject", "r-1", "--approver", "ann", "--reason", "sold out", "--database", url
        )
        assert done.returncode == 6, done.stderr
        assert done.stdout == (
            "saga 'r-1': NEEDS_ATTENTION (not run here hold_seat)\nrejected; "
            + WAITING_SEAT.format(saga="r-1")
        )
        (shown,) = [b for b in blocks(CLI_PAGE) if b.checked and "test_reject_records" in b.checked]
        assert shown.code == done.stdout  # docs/cli.md shows this very output
        assert journal(url, "r-1") == [
            *ASKED,
            ("REJECTED", "book_show", None),
            ("ENDED", None, ended("NEEDS_ATTENTION", compensation_waiting=["hold_seat#1"])),
        ]
        assert ledger(app) == ["hold A1"]

        finished = sagacity_command(app, "compensate", "r-1", "--tools", THEATRE, "--database", url)
        assert finished.returncode == 0, finished.stderr
        assert finished.stdout == "saga 'r-1': COMPENSATED (compensated hold_seat)\n"
        assert journal(url, "r-1")[5:] == [
            ("COMPENSATING", "hold_seat", None),
            ("COMPENSATED", "hold_seat", None),
            ("ENDED", None, ended("COMPENSATED", compensated=["hold_seat#1"])),
        ]
        assert ledger(app) == ["hold A1", "release hold-A1"]

    def test_reject_with_tools_compensates_at_once(self, app: Path, sqlite_url: str) -> None:
        """With --tools, found in the working directory, the rejection undoes the hold: exit 0."""
        assert story(app, sqlite_url, "r-2", "ask") == "AWAITING_APPROVAL"
        done = sagacity_command(
            app, "reject", "r-2", "--approver", "ann", "--reason", "sold out",
            "--tools", THEATRE, "--database", sqlite_url,
        )  # fmt: skip
        assert (done.returncode, done.stdout) == (
            0,
            "saga 'r-2': COMPENSATED (compensated hold_seat)\n",
        ), done.stderr
        assert ledger(app) == ["hold A1", "release hold-A1"]


class TestTheTutorial:
    """docs/tutorials/approval-across-processes.md: its sentence on `sagacity reject`."""

    EXAMPLE = ROOT / "examples" / "tutorials"
    REJECT = ("reject", "payout-9", "--approver", "carol", "--reason", "wrong payee")

    def asked(self, tmp_path: Path, name: str) -> str:
        url = f"sqlite:///{tmp_path / name}"
        subprocess.run(
            [sys.executable, "-c", f"import approval_across_processes as t; t.agent({url!r})"],
            cwd=self.EXAMPLE, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return url

    def test_reject_with_the_tools_releases_the_hold(self, tmp_path: Path) -> None:
        """Run from the example's folder with --tools: released, COMPENSATED, exit 0."""
        url = self.asked(tmp_path, "a.db")
        tools = ("--tools", "approval_across_processes:Treasury")
        done = sagacity_command(self.EXAMPLE, *self.REJECT, *tools, "--database", url)
        assert (done.returncode, done.stdout) == (
            0,
            "  undo: released hold-1\nsaga 'payout-9': COMPENSATED (compensated hold_budget)\n",
        ), done.stderr
        assert [phase for phase, _, _ in journal(url, "payout-9")][3:] == [
            "REJECTED",
            "COMPENSATING",
            "COMPENSATED",
            "ENDED",
        ]

    def test_reject_without_them_says_where_the_release_runs(self, tmp_path: Path) -> None:
        """Without --tools: REJECTED, nothing released or failed, exit 6."""
        url = self.asked(tmp_path, "b.db")
        done = sagacity_command(self.EXAMPLE, *self.REJECT, "--database", url)
        assert done.returncode == 6, done.stderr
        assert "rejected; the undo runs where the tools are" in done.stdout
        assert [phase for phase, _, _ in journal(url, "payout-9")][3:] == ["REJECTED", "ENDED"]


class TestARefundThatRaises:
    def test_compensate_says_dirty_until_the_refund_runs(
        self, app: Path, shared_store_url: str
    ) -> None:
        """Without the tools exit 6, with them and the provider down 5, once it is up 0.

        Without the tools nothing new is journaled as failed; with them, each failure is.
        """
        url = shared_store_url
        (app / "refund_down").touch()
        assert story(app, url, "o-1", "order") == "COMPENSATION_FAILED"
        before = journal(url, "o-1")
        assert [phase for phase, _, _ in before].count("COMPENSATION_FAILED") == 1

        elsewhere = sagacity_command(app, "compensate", "o-1", "--database", url)
        assert elsewhere.returncode == 6, elsewhere.stderr
        assert elsewhere.stdout.startswith(
            "saga 'o-1': NEEDS_ATTENTION (compensated hold_seat; failed charge_card; not run "
            "here charge_card)\n"
            "not compensated here; the undo runs where the tools are: no compensation for "
            "tool 'charge_card' (call 'charge_card#1') is registered in this process"
        )
        after = journal(url, "o-1")
        assert after[: len(before)] == before
        assert after[len(before) :] == [
            (
                "ENDED",
                None,
                ended(
                    "NEEDS_ATTENTION",
                    compensated=["hold_seat#1"],
                    compensation_failed=["charge_card#1"],
                    compensation_waiting=["charge_card#1"],
                ),
            )
        ]

        still_down = sagacity_command(
            app, "compensate", "o-1", "--tools", THEATRE, "--database", url
        )
        assert still_down.returncode == 5, still_down.stderr
        assert still_down.stdout == (
            "saga 'o-1': COMPENSATION_FAILED (compensated hold_seat; failed charge_card)\n"
            "still dirty: a compensation failed (the error is in 'sagacity show o-1 "
            "--payloads'); fix its cause and run 'sagacity compensate o-1 --tools "
            "theatre:Theatre'\n"
        )
        assert journal(url, "o-1")[-2][:2] == ("COMPENSATION_FAILED", "charge_card")

        (app / "refund_down").unlink()
        fixed = sagacity_command(app, "compensate", "o-1", "--tools", THEATRE, "--database", url)
        assert fixed.returncode == 0, fixed.stderr
        assert fixed.stdout == ("saga 'o-1': COMPENSATED (compensated hold_seat, charge_card)\n")
        assert ledger(app) == ["hold A1", "charge 40", "release hold-A1", "refund ch-40"]


class TestKilled:
    def test_inside_a_tool(self, app: Path, shared_store_url: str) -> None:
        """The charge in doubt: exit 5 naming doubts and resolve; settled, then exit 0."""
        url = shared_store_url
        killed(app, url, "k-1", "order", inside="charge")
        dirty = sagacity_command(app, "compensate", "k-1", "--tools", THEATRE, "--database", url)
        assert dirty.returncode == 5, dirty.stderr
        assert dirty.stdout == (
            "saga 'k-1': NEEDS_ATTENTION (compensated hold_seat; in doubt charge_card)\n"
            "still dirty: a call or compensation is in doubt; 'sagacity doubts' lists it, "
            "'sagacity resolve' settles it, then run 'sagacity compensate k-1 --tools "
            "theatre:Theatre'\n"
        )
        assert journal(url, "k-1")[-1] == (
            "ENDED",
            None,
            ended("NEEDS_ATTENTION", compensated=["hold_seat#1"], in_doubt=["charge_card#1"]),
        )
        settled = sagacity_command(
            app, "resolve", "k-1", "charge_card#1", "--not-executed", "--by", "ann",
            "--database", url,
        )  # fmt: skip
        assert settled.returncode == 0, settled.stderr
        clean = sagacity_command(app, "compensate", "k-1", "--tools", THEATRE, "--database", url)
        assert (clean.returncode, clean.stdout) == (
            0,
            "saga 'k-1': COMPENSATED (compensated hold_seat)\n",
        ), clean.stderr
        assert ledger(app) == ["hold A1", "release hold-A1"]

    def test_inside_a_compensation(self, app: Path, shared_store_url: str) -> None:
        """The refund in doubt is never run again: the release runs, exit 5."""
        url = shared_store_url
        killed(app, url, "k-2", "order", inside="refund")
        assert journal(url, "k-2")[-1][:2] == ("COMPENSATING", "charge_card")
        dirty = sagacity_command(app, "compensate", "k-2", "--tools", THEATRE, "--database", url)
        assert dirty.returncode == 5, dirty.stderr
        assert dirty.stdout.startswith(
            "saga 'k-2': NEEDS_ATTENTION (compensated hold_seat; in doubt charge_card)\n"
            "still dirty: a call or compensation is in doubt"
        )
        assert ledger(app) == ["hold A1", "charge 40", "release hold-A1"]


class TestResume:
    def test_a_resume_that_ends_dirty_exits_5(self, app: Path, sqlite_url: str) -> None:
        """The approved booking fails and the release raises: COMPENSATION_FAILED, exit 5."""
        assert story(app, sqlite_url, "v-1", "ask") == "AWAITING_APPROVAL"
        listed = sagacity_command(app, "pending", "--json", "--database", sqlite_url)
        digest = orjson.loads(listed.stdout.splitlines()[0])["input_sha256"]
        approved = sagacity_command(
            app, "approve", "v-1", "--approver", "ann", "--sha256", digest,
            "--database", sqlite_url,
        )  # fmt: skip
        assert approved.returncode == 0, approved.stderr
        (app / "box_office_down").touch()
        (app / "seat_desk_down").touch()
        done = sagacity_command(app, "resume", "v-1", "--tools", THEATRE, "--database", sqlite_url)
        assert done.returncode == 5, done.stderr
        assert done.stdout.startswith(
            "saga 'v-1': COMPENSATION_FAILED (failed hold_seat)\nstill dirty: a compensation failed"
        )
        assert journal(sqlite_url, "v-1")[-1][2]["outcome"] == "COMPENSATION_FAILED"
        assert ledger(app) == ["hold A1"]


class TestTools:
    def test_a_module_elsewhere_names_pythonpath(self, app: Path, tmp_path: Path) -> None:
        """Run away from the app's folder, --tools says where it looked and what to set."""
        url = f"sqlite:///{tmp_path / 'j.db'}"
        assert story(app, url, "t-1", "ask") == "AWAITING_APPROVAL"
        done = sagacity_command(
            tmp_path, "compensate", "t-1", "--tools", THEATRE, "--database", url
        )
        assert done.returncode == 2
        assert done.stderr == (
            "sagacity compensate: --tools 'theatre:Theatre': cannot import 'theatre': No "
            f"module named 'theatre'; it is looked for in the working directory ({tmp_path}) "
            "and on PYTHONPATH: run the command from the application's folder, or set "
            "PYTHONPATH to it\n"
        )
        assert journal(url, "t-1") == ASKED


# -- the real server ----------------------------------------------------------------------


def tokens_file(folder: Path) -> Path:
    path = folder / "tokens.toml"
    path.write_text(
        "".join(
            f'[[token]]\nsha256 = "{hash_token(token)}"\nprincipal = "{name}"\nroles = ["{role}"]\n'
            for token, (name, role) in TOKENS.items()
        ),
        encoding="utf-8",
    )
    return path


class Server:
    """`sagacity serve`, the installed command, run from the app's folder on a free port."""

    def __init__(self, app: Path, *args: str) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        environment = dict(os.environ)
        for name in ("SAGACITY_DATABASE_URL", "PYTHONPATH"):
            environment.pop(name, None)
        self.process = subprocess.Popen(
            [str(INSTALLED), "serve", "--port", str(self.port),
             "--tokens", str(tokens_file(app)), *args],
            cwd=app, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def up(self) -> str:
        """Wait until it answers its health check; the answer's status."""
        deadline = 30.0
        waited = 0.0
        while True:
            try:
                return str(httpx.get(f"{self.base}/sagacity/health", timeout=1).json()["status"])
            except httpx.TransportError:
                assert self.process.poll() is None, self.process.communicate()[1]
                assert waited < deadline, "the server did not start"
                # Waiting on a port that will open: there is no event to wait on.
                try:
                    self.process.wait(timeout=0.1)
                except subprocess.TimeoutExpired:
                    waited += 0.1

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.communicate(timeout=15)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


def pending_request(base: str) -> dict[str, Any]:
    (listed,) = httpx.get(
        f"{base}/sagacity/approvals", headers={"Authorization": "Bearer tok-ann"}
    ).json()
    assert isinstance(listed, dict)
    return listed


class TestServe:
    def test_the_inbox_reject_warns_and_journals_no_failure(
        self, app: Path, shared_store_url: str, servers: list[Server]
    ) -> None:
        """The inbox's reject where the tools are not: a warning, not a success banner.

        The warning names how to run the undo; the journal has REJECTED and no
        COMPENSATION_FAILED.
        """
        url = shared_store_url
        assert story(app, url, "s-1", "ask") == "AWAITING_APPROVAL"
        server = Server(app, "--database", url)
        servers.append(server)
        assert server.up() == "ok"
        request = pending_request(server.base)
        with httpx.Client(base_url=server.base) as browser:
            form = browser.get("/sagacity/ui/sign-in")
            nonce = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert nonce is not None
            browser.post(
                "/sagacity/ui/sign-in",
                data={"csrf": nonce.group(1), "token": "tok-ann", "next": ""},
            )
            page = browser.get("/sagacity/ui/")
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert csrf is not None
            done = browser.post(
                "/sagacity/ui/requests/reject",
                data={"csrf": csrf.group(1), "request_id": request["request_id"],
                      "reason": "sold out"},
                follow_redirects=True,
            )  # fmt: skip
        assert done.status_code == 200, done.text
        warning = re.search(r'<p class="warning" role="alert">([^<]*)</p>', done.text)
        assert warning is not None, done.text
        assert warning.group(1) == (
            "The undo has not run: no compensation for tool &#39;hold_seat&#39; (call "
            "&#39;hold_seat#1&#39;) is registered in this server, so nothing was undone and "
            "no failure was journaled; the saga is NEEDS_ATTENTION. The undo runs where the "
            "tools are: &#39;sagacity compensate s-1 --tools MODULE:OBJECT&#39;, a worker "
            "that wraps them, or this server started with --tools MODULE:OBJECT."
        )
        assert "the saga ended" not in done.text
        assert journal(url, "s-1") == [
            *ASKED,
            ("REJECTED", "book_show", None),
            ("ENDED", None, ended("NEEDS_ATTENTION", compensation_waiting=["hold_seat#1"])),
        ]
        finished = sagacity_command(app, "compensate", "s-1", "--tools", THEATRE, "--database", url)
        assert finished.returncode == 0, finished.stderr
        assert ledger(app) == ["hold A1", "release hold-A1"]

    def test_serve_with_tools_runs_the_undo(
        self, app: Path, sqlite_url: str, servers: list[Server]
    ) -> None:
        """`sagacity serve --tools theatre:Theatre`: the API's reject releases the seat."""
        assert story(app, sqlite_url, "s-2", "ask") == "AWAITING_APPROVAL"
        server = Server(app, "--database", sqlite_url, "--tools", THEATRE)
        servers.append(server)
        server.up()
        request = pending_request(server.base)
        done = httpx.post(
            f"{server.base}/sagacity/approvals/{request['request_id']}/reject",
            json={"reason": "sold out"},
            headers={"Authorization": "Bearer tok-ann"},
        )
        assert done.status_code == 200, done.text
        assert done.json()["outcome"] == "COMPENSATED"
        assert ledger(app) == ["hold A1", "release hold-A1"]

    def test_the_api_reject_without_tools_lists_what_waits(
        self, app: Path, sqlite_url: str, servers: list[Server]
    ) -> None:
        """The JSON answer says NEEDS_ATTENTION and lists the compensation left waiting."""
        assert story(app, sqlite_url, "s-3", "ask") == "AWAITING_APPROVAL"
        server = Server(app, "--database", sqlite_url)
        servers.append(server)
        server.up()
        request = pending_request(server.base)
        done = httpx.post(
            f"{server.base}/sagacity/approvals/{request['request_id']}/reject",
            json={"reason": "sold out"},
            headers={"Authorization": "Bearer tok-ann"},
        )
        assert done.status_code == 200, done.text
        answer = done.json()
        assert answer["outcome"] == "NEEDS_ATTENTION"
        assert [ref["call_id"] for ref in answer["compensation"]["waiting"]] == ["hold_seat#1"]
        assert answer["compensation"]["failed"] == []


class TestAMistypedDatabase:
    def test_serve_refuses_a_sqlite_file_that_does_not_exist(
        self, app: Path, servers: list[Server]
    ) -> None:
        """Exit 1 naming the file and how a first deployment creates it; no file is made."""
        server = Server(app, "--database", "sagacty.db")
        servers.append(server)
        _, err = server.process.communicate(timeout=60)
        assert server.process.returncode == 1
        assert err == (
            "sagacity serve: no SQLite database at 'sagacty.db'; a first deployment creates it "
            "with 'sagacity init --database URL' (or 'sagacity serve --create'); otherwise "
            "check the URL for a typo\n"
        )
        assert not (app / "sagacty.db").exists()

    def test_serve_refuses_a_postgres_schema_that_does_not_exist(
        self, app: Path, servers: list[Server]
    ) -> None:
        """A PostgreSQL schema that does not exist: exit 1, and it is not created."""
        require_server()
        schema = f"sagacty_{uuid.uuid4().hex[:12]}"
        server = Server(app, "--database", with_query(server_url(), schema=schema))
        servers.append(server)
        try:
            _, err = server.process.communicate(timeout=60)
            assert server.process.returncode == 1
            assert err.endswith(
                f"(schema {schema}): no schema {schema!r} (nothing was created); a first "
                "deployment creates it with 'sagacity init --database URL' (or 'sagacity "
                "serve --create'); otherwise check the URL for a typo\n"
            )
        finally:
            with admin_connection() as conn:
                found = conn.execute(
                    "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
                    (schema,),
                ).fetchone()
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        assert found == (0,)

    def test_init_then_serve(self, app: Path, servers: list[Server]) -> None:
        """`sagacity init` creates it (and says so once), then serve answers ok."""
        made = sagacity_command(app, "init", "--database", "theatre.db")
        assert (made.returncode, made.stdout) == (0, "sqlite:///theatre.db: created\n")
        again = sagacity_command(app, "init", "--database", "theatre.db")
        assert again.stdout == (
            "sqlite:///theatre.db: already holds a sagacity journal; nothing changed\n"
        )
        server = Server(app, "--database", "theatre.db")
        servers.append(server)
        assert server.up() == "ok"

    def test_serve_create_makes_it(self, app: Path, servers: list[Server]) -> None:
        """`sagacity serve --create` on a first deployment creates the file and serves."""
        server = Server(app, "--database", "first.db", "--create")
        servers.append(server)
        assert server.up() == "ok"
        assert (app / "first.db").is_file()
