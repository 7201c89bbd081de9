"""Each adapter, imported without its framework, says which extra to install."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys
    from importlib.abc import MetaPathFinder

    class Block(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in sys.argv[1].split(","):
                raise ImportError(f"blocked: {name}")
            return None

    sys.meta_path.insert(0, Block())
    try:
        __import__(sys.argv[2])
    except ImportError as error:
        print(error)
    else:
        print("imported")
    """
)


class TestImportGuards:
    @pytest.mark.parametrize(
        ("adapter", "blocked", "extra"),
        [
            ("langchain", "langchain_core,langchain,langgraph", "sagacity[langchain]"),
            ("openai_agents", "agents", "sagacity[openai-agents]"),
            ("pydantic_ai", "pydantic_ai", "sagacity[pydantic-ai]"),
            ("mcp", "mcp", "sagacity[mcp]"),
            ("adk", "google", "sagacity[adk]"),
            ("temporal", "temporalio", "sagacity[temporal]"),
            ("dbos", "dbos", "sagacity[dbos]"),
        ],
    )
    def test_the_error_names_the_extra(self, adapter: str, blocked: str, extra: str) -> None:
        """Without the framework, importing the adapter raises an ImportError naming its extra."""
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, blocked, f"sagacity.integrations.{adapter}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert extra in done.stdout
        assert "pip install" in done.stdout
