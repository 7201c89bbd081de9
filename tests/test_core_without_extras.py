"""The core imports and works with every extra's packages blocked (DESIGN.md §2)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKED = [
    "psycopg", "psycopg_pool", "langchain", "langchain_core", "langgraph", "agents",
    "pydantic_ai", "mcp", "fastapi", "starlette", "uvicorn", "pydantic", "google",
]  # fmt: skip

SCRIPT = textwrap.dedent(
    """
    import sys
    from importlib.abc import MetaPathFinder

    BLOCKED = set(sys.argv[1].split(","))

    class Block(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked: {name}")
            return None

    sys.meta_path.insert(0, Block())

    import sagacity, sagacity.audit, sagacity.cli, sagacity.testing
    from sagacity import Sagacity, compensable, SagaOutcome

    @compensable(by="undo")
    def step() -> str:
        raise RuntimeError("boom")

    def undo() -> None:
        print("undone")

    s = Sagacity.from_url(sys.argv[2])
    (tool,) = s.wrap(step)

    def work():
        try:
            tool()
        except RuntimeError:
            pass

    assert s.saga("s-1", work).outcome is SagaOutcome.COMPENSATED
    assert sagacity.audit.verify(s.journal).ok
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print("loaded:", loaded)
    """
)


class TestCoreWithoutExtras:
    def test_core_works_with_extras_blocked(self, tmp_path: object) -> None:
        """No extra's package is imported by the core, on memory and SQLite."""
        for url in ("memory://", f"sqlite:///{tmp_path}/core.db"):
            done = subprocess.run(
                [sys.executable, "-c", SCRIPT, ",".join(BLOCKED), url],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            assert done.stdout.splitlines() == ["loaded: []"]

    def test_postgres_url_names_the_extra(self) -> None:
        """Asking for PostgreSQL without its driver says which extra to install."""
        script = SCRIPT.split("import sagacity,")[0] + textwrap.dedent(
            """
            from sagacity import Sagacity
            try:
                Sagacity.from_url("postgresql://localhost/db")
            except ImportError as error:
                print(error)
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script, ",".join(BLOCKED)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert "sagacity[postgres]" in done.stdout, done.stderr
