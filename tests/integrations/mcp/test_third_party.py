"""The proxy as an MCP host runs it: its own process over stdio, in front of real servers.

The servers are third-party packages the dev extra installs from PyPI (`mcp-server-git`,
`mcp-server-time`); the proxy is `examples/mcp_proxy_stdio.py`; the client is the official
MCP Python SDK over stdio. Approvals are given by another `Sagacity` on the same database,
as a human's approval page would.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import SERVER_INFO_META_KEY

from sagacity import Phase, Sagacity, verify
from sagacity.integrations.mcp import (
    APPROVAL_META,
    request_compensate_saga,
    request_end_saga,
)
from tests.integrations.mcp._processes import ROOT, require_module
from tests.integrations.mcp._shop import meta, text

PROXY = ROOT / "examples" / "mcp_proxy_stdio.py"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def proxy_params(database: str, *options: str, upstream: list[str]) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=[str(PROXY), database, *options, "--", *upstream],
        cwd=str(ROOT),
    )


def git_upstream(repo: Path) -> list[str]:
    return [sys.executable, "-m", "mcp_server_git", "--repository", str(repo)]


@contextlib.asynccontextmanager
async def git_proxy(database: str, repo: Path) -> AsyncIterator[Client]:
    """A client of the stdio proxy in front of `mcp-server-git`; `git_add` undone by `git_reset`."""
    params = proxy_params(
        database, "--compensate", "git_add=git_reset:repo_path", upstream=git_upstream(repo)
    )
    async with Client(params) as client:
        yield client


class TestGitThroughTheProxy:
    async def test_listing_matches_the_upstream_and_results_carry_the_proxys_name(
        self, sqlite_url: str, repo: Path
    ) -> None:
        """Tools and prompts as `mcp-server-git` lists them; its identity stamp is replaced."""
        upstream = StdioServerParameters(command=sys.executable, args=git_upstream(repo)[1:])
        async with Client(upstream) as direct:
            tools = (await direct.list_tools()).tools
            prompts = (await direct.list_prompts()).prompts
        async with git_proxy(sqlite_url, repo) as client:
            listed = (await client.list_tools()).tools
            proxied_prompts = (await client.list_prompts()).prompts
            status = await client.call_tool("git_status", {"repo_path": str(repo)}, meta=meta("s"))
            info = client.server_info

        assert listed == tools
        assert proxied_prompts == prompts
        assert "a.txt" in text(status)
        assert (status.meta or {})[SERVER_INFO_META_KEY]["name"] == "sagacity-proxy"
        assert info is not None
        assert info.name == "sagacity-proxy"

    async def test_a_failed_add_undoes_the_earlier_add_and_a_retried_end_agrees(
        self, sqlite_url: str, repo: Path
    ) -> None:
        """`git_add` of a missing file fails the saga; the staged `a.txt` is reset by the undo."""
        (repo / "b.txt").write_text("b\n")
        at = {"repo_path": str(repo)}
        async with git_proxy(sqlite_url, repo) as client:
            await client.call_tool("git_status", at, meta=meta("g1"))
            await client.call_tool("git_add", {**at, "files": ["a.txt"]}, meta=meta("g1"))
            staged = git(repo, "diff", "--cached", "--name-only")
            missing = await client.call_tool(
                "git_add", {**at, "files": ["missing.txt"]}, meta=meta("g1")
            )
            ended = await request_end_saga(client, "g1")
            again = await request_end_saga(client, "g1")

        assert staged == "a.txt\n"
        assert missing.is_error
        assert git(repo, "diff", "--cached", "--name-only") == ""  # undone
        assert ended.outcome == "COMPENSATED"
        # In reverse order: the add reset, then the status (nothing to undo) recorded.
        assert [i.split(".")[0] for i in ended.compensated] == ["git_add#1", "git_status#1"]
        assert again == ended  # the same lists, read from the ENDED entry
        with Sagacity.from_url(sqlite_url) as journal:
            assert [e.phase.name for e in journal.history("g1")] == [
                "INTENT", "EXECUTED",  # git_status
                "INTENT", "EXECUTED",  # git_add a.txt
                "INTENT", "FAILED",  # git_add missing.txt
                "COMPENSATING", "COMPENSATED",  # git_reset
                "COMPENSATING", "COMPENSATED",  # git_status: nothing to undo
                "ENDED",
            ]  # fmt: skip
            assert verify(journal.journal, "g1").ok

    async def test_a_commit_waits_for_approval_then_runs_once(
        self, sqlite_url: str, repo: Path
    ) -> None:
        """`git_commit` claims no undo: it waits; approved elsewhere and sent again, it commits."""
        at = {"repo_path": str(repo)}
        with Sagacity.from_url(sqlite_url) as approvals:
            async with git_proxy(sqlite_url, repo) as client:
                await client.call_tool("git_add", {**at, "files": ["a.txt"]}, meta=meta("g2"))
                commit = {**at, "message": "add a"}
                waiting = await client.call_tool("git_commit", commit, meta=meta("g2"))
                before = git(repo, "log", "--oneline").count("\n")
                request = (waiting.meta or {})[APPROVAL_META]
                approvals.approve(
                    "g2", approver="lead@example.com", expected_sha256=request["input_sha256"]
                )
                committed = await client.call_tool("git_commit", commit, meta=meta("g2"))
                replayed = await client.call_tool(
                    "git_commit", commit, meta=meta("g2", request["call_id"])
                )
                ended = await request_end_saga(client, "g2")

            assert text(waiting).startswith("[AWAITING_APPROVAL] git_commit was not run")
            assert before == 1
            assert text(committed).startswith("Changes committed successfully")
            assert text(replayed) == text(committed)  # the journaled result, not a second commit
            assert git(repo, "log", "--format=%s").splitlines() == ["add a", "start"]
            assert ended.outcome == "COMPLETED"

    async def test_a_failed_undo_is_retried_with_sagacity_compensate(
        self, sqlite_url: str, repo: Path
    ) -> None:
        """A locked index fails `git_reset`; once unlocked, `sagacity/compensate` resets it."""
        at = {"repo_path": str(repo)}
        async with git_proxy(sqlite_url, repo) as client:
            await client.call_tool("git_add", {**at, "files": ["a.txt"]}, meta=meta("g3"))
            await client.call_tool("git_add", {**at, "files": ["missing.txt"]}, meta=meta("g3"))
            lock = repo / ".git" / "index.lock"
            lock.write_text("")  # another git process holds the index
            ended = await request_end_saga(client, "g3")
            lock.unlink()
            retried = await request_compensate_saga(client, "g3")
            again = await request_compensate_saga(client, "g3")
            with pytest.raises(MCPError, match="'nope' has no journal entries"):
                await request_compensate_saga(client, "nope")

        assert (ended.outcome, ended.compensation_failed) == (
            "COMPENSATION_FAILED",
            [ended.compensation_failed[0]],
        )
        assert (retried.outcome, retried.compensated) == ("COMPENSATED", ended.compensation_failed)
        assert again == retried
        assert git(repo, "diff", "--cached", "--name-only") == ""

    async def test_an_open_or_completed_saga_is_not_compensated_by_request(
        self, sqlite_url: str, repo: Path
    ) -> None:
        """`sagacity/compensate` refuses an open saga (end it) and a completed one."""
        at = {"repo_path": str(repo)}
        async with git_proxy(sqlite_url, repo) as client:
            await client.call_tool("git_add", {**at, "files": ["a.txt"]}, meta=meta("g4"))
            with pytest.raises(MCPError, match="'g4' is still open"):
                await request_compensate_saga(client, "g4")
            completed = await request_end_saga(client, "g4")
            with pytest.raises(MCPError, match="'g4' ended COMPLETED: there is nothing"):
                await request_compensate_saga(client, "g4")

        assert completed.outcome == "COMPLETED"
        assert git(repo, "diff", "--cached", "--name-only") == "a.txt\n"  # left as it was


class TestIsError:
    async def test_a_read_only_error_lets_the_model_retry_another_fails_the_saga(
        self, sqlite_url: str, repo: Path
    ) -> None:
        """A read-only error is the call's result; `--is-error` makes it retry or fail instead."""
        bad = {"repo_path": str(repo / "nowhere")}
        async with git_proxy(sqlite_url, repo) as client:
            wrong = await client.call_tool("git_log", bad, meta=meta("r1"))
            right = await client.call_tool("git_log", {"repo_path": str(repo)}, meta=meta("r1"))
            ended = await request_end_saga(client, "r1")
        options = ("--is-error", "git_log=retry", "--is-error", "git_status=fail")
        params = proxy_params(sqlite_url, *options, upstream=git_upstream(repo))
        async with Client(params) as strict:
            await strict.call_tool("git_log", bad, meta=meta("r2"))
            await strict.call_tool("git_log", {"repo_path": str(repo)}, meta=meta("r2"))
            retried = await request_end_saga(strict, "r2")
            await strict.call_tool("git_log", bad, meta=meta("r3"))
            given_up = await request_end_saga(strict, "r3")
            await strict.call_tool("git_status", bad, meta=meta("r4"))
            failed = await request_end_saga(strict, "r4")

        assert (wrong.is_error, right.is_error) == (True, False)
        with Sagacity.from_url(sqlite_url) as journal:
            first, second = journal.history("r1")[:2]
            assert (first.phase, second.phase) == (Phase.INTENT, Phase.EXECUTED)
            assert second.payload["result"]["is_error"] is True
            assert ended.outcome == "COMPLETED"
            kinds = [e.payload["kind"] for e in journal.history("r2") if e.phase is Phase.FAILED]
            assert (kinds, retried.outcome) == (["retryable"], "COMPLETED")  # answered by a success
            assert (given_up.outcome, len(given_up.in_doubt)) == ("NEEDS_ATTENTION", 1)
            assert (failed.outcome, failed.in_doubt) == ("COMPENSATED", [])


class TestTwoProxyProcesses:
    async def test_call_ids_of_two_proxies_in_one_saga_never_collide(self, sqlite_url: str) -> None:
        """Two proxy processes over `mcp-server-time` serve one saga in turn: ids stay apart."""
        require_module("mcp_server_time", "mcp-server-time")
        upstream = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]
        args = {"timezone": "Europe/Paris"}
        async with (
            Client(proxy_params(sqlite_url, upstream=upstream)) as first,
            Client(proxy_params(sqlite_url, upstream=upstream)) as second,
        ):
            for client in (first, second, first, second):
                result = await client.call_tool("get_current_time", args, meta=meta("two"))
                assert not result.is_error, text(result)
            bad_zone = await second.call_tool(
                "get_current_time", {"timezone": "Mars/Olympus"}, meta=meta("two")
            )
            ended = await request_end_saga(first, "two")

        with Sagacity.from_url(sqlite_url) as journal:
            ids = [str(e.call_id) for e in journal.history("two") if e.phase is Phase.INTENT]
            assert len(ids) == len(set(ids)) == 5
            parsed = [re.fullmatch(r"get_current_time#(\d+)\.([0-9a-f]{8})", i) for i in ids]
            assert [int(m[1]) for m in parsed if m] == [1, 2, 3, 4, 5]
            first_token, second_token = (m[2] for m in parsed[:2] if m)
            assert first_token != second_token  # one token per process
            assert [m[2] for m in parsed if m] == [
                first_token, second_token, first_token, second_token, second_token,
            ]  # fmt: skip
            assert bad_zone.is_error  # read-only: journaled as its result, the saga goes on
            assert ended.outcome == "COMPLETED"
            assert verify(journal.journal, "two").ok
