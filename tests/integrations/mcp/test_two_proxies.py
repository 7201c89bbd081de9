"""One saga across two MCP servers: two stdio proxy processes, one database.

Each proxy holds the saga's lease while a call of it runs there; a call of the same
saga at the other proxy waits for it (`--lease-wait`, 30 s by default) instead of
being refused, so that parallel calls to both servers all run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from sagacity import Phase, Sagacity, verify
from sagacity.integrations.mcp import request_compensate_saga, request_end_saga
from tests.integrations.mcp._processes import ROOT
from tests.integrations.mcp._shop import meta, text

PROXY = ROOT / "examples" / "mcp_proxy_stdio.py"


READ_ONLY = ("--read-only", "hold", "--read-only", "steps")


def proxy(database: str, marker: Path, *options: str) -> Client:
    """The stdio proxy in front of the relay server, with `options`."""
    upstream = [sys.executable, "-m", "tests.integrations.mcp._relay_server", str(marker)]
    return Client(
        StdioServerParameters(
            command=sys.executable,
            args=[
                str(PROXY),
                database,
                *options,
                "--",
                *upstream,
            ],
            cwd=str(ROOT),
        )
    )


async def started(marker: Path, name: str) -> None:
    with anyio.fail_after(30):
        while not (marker / f"{name}.started").exists():
            await anyio.sleep(0.01)


class TestOneSagaTwoProxies:
    async def test_a_call_waits_for_the_other_proxys_call_and_both_run(
        self, sqlite_url: str, tmp_path: Path
    ) -> None:
        """While proxy A's call holds the saga, proxy B's call waits, then runs; B ends it."""
        results: dict[str, object] = {}
        async with (
            proxy(sqlite_url, tmp_path, *READ_ONLY) as first,
            proxy(sqlite_url, tmp_path, *READ_ONLY) as second,
            anyio.create_task_group() as group,
        ):

            async def call(name: str, client: Client, tool: str, args: dict[str, object]) -> None:
                results[name] = await client.call_tool(tool, args, meta=meta("both"))

            group.start_soon(call, "a", first, "hold", {"name": "a"})
            await started(tmp_path, "a")  # A's call runs upstream, holding the saga
            group.start_soon(call, "b", second, "steps", {"count": 1})  # waits for A's
            (tmp_path / "a.go").write_text("go")
        async with proxy(sqlite_url, tmp_path, *READ_ONLY) as second:
            ended = await request_end_saga(second, "both")

        for name in ("a", "b"):
            assert not results[name].is_error, text(results[name])  # type: ignore[attr-defined]
        assert ended.outcome == "COMPLETED"
        with Sagacity.from_url(sqlite_url) as journal:
            phases = [(e.phase, e.tool_name) for e in journal.history("both")]
            assert verify(journal.journal, "both").ok
        assert phases == [
            (Phase.INTENT, "hold"),
            (Phase.EXECUTED, "hold"),
            (Phase.INTENT, "steps"),
            (Phase.EXECUTED, "steps"),
            (Phase.ENDED, None),
        ]

    async def test_without_waiting_the_other_proxy_says_the_saga_is_busy(
        self, sqlite_url: str, tmp_path: Path
    ) -> None:
        """`--lease-wait 0`: B's call is refused at once, naming the saga; nothing journaled."""
        async with (
            proxy(sqlite_url, tmp_path, *READ_ONLY) as first,
            proxy(sqlite_url, tmp_path, *READ_ONLY, "--lease-wait", "0") as second,
            anyio.create_task_group() as group,
        ):

            async def hold() -> None:
                await first.call_tool("hold", {"name": "a"}, meta=meta("busy"))

            group.start_soon(hold)
            await started(tmp_path, "a")
            refused = await second.call_tool("steps", {"count": 1}, meta=meta("busy"))
            (tmp_path / "a.go").write_text("go")
        assert refused.is_error
        assert "busy" in text(refused)
        assert "'busy'" in text(refused)
        with Sagacity.from_url(sqlite_url) as journal:
            assert [e.tool_name for e in journal.history("busy")] == ["hold", "hold"]

    async def test_ending_where_an_undo_is_missing_names_the_tool_whose_proxy_runs_it(
        self, sqlite_url: str, tmp_path: Path
    ) -> None:
        """Ended at B, the undo of A's call waits for A: the answer names its tool."""
        async with (
            proxy(sqlite_url, tmp_path, "--compensate", "steps=steps:count") as first,
            proxy(sqlite_url, tmp_path, "--compensate", "refuse=steps") as second,
        ):
            done = await first.call_tool("steps", {"count": 2}, meta=meta("undo"))
            failed = await second.call_tool("refuse", {"reason": "no stock"}, meta=meta("undo"))
            ended = await request_end_saga(second, "undo")
            rest = await request_compensate_saga(first, "undo")

        assert not done.is_error, text(done)
        assert failed.is_error  # journaled FAILED: the saga is compensated
        assert ended.outcome == "NEEDS_ATTENTION"
        assert ended.waiting_tools == ["steps"]
        assert len(ended.compensation_waiting) == 1
        assert rest.outcome == "COMPENSATED"
        assert rest.compensated == ended.compensation_waiting
