"""The documentation runs: README's quick start, and every CLI command is documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sagacity.cli import _COMMANDS

ROOT = Path(__file__).resolve().parent.parent


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


class TestReadme:
    def test_starts_with_the_two_commands(self) -> None:
        """The first code block of the README is `make demo` then `make test`."""
        text = (ROOT / "README.md").read_text(encoding="utf-8")
        first_block = text.split("```")[1].strip().splitlines()
        assert first_block[0].startswith("make demo")
        assert first_block[1].startswith("make test")

    def test_quick_start_runs(self, capsys: pytest.CaptureFixture[str]) -> None:
        """The quick start is at most 20 lines of code, compensates and prints COMPENSATED."""
        (code,) = python_blocks(ROOT / "README.md")
        assert len([line for line in code.splitlines() if line.strip()]) <= 20
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
        assert capsys.readouterr().out.splitlines() == [
            "released res-SKU-42-2",
            "SagaOutcome.COMPENSATED",
        ]

    def test_says_to_serve_the_site_not_to_open_its_file(self) -> None:
        """The site's search needs a server: the README says how to serve it, not a file:// path."""
        text = (ROOT / "README.md").read_text(encoding="utf-8")
        assert "site/index.html" not in text
        assert "python -m http.server -d site" in text
        assert "mkdocs serve" in text
        assert "search works when the site is served: python -m http.server -d site" in (
            ROOT / "mkdocs.yml"
        ).read_text(encoding="utf-8")

    def test_says_what_make_test_takes_and_installs(self) -> None:
        """The README's make test: its time on two cores, and the chromium the Makefile installs."""
        readme = (ROOT / "README.md").read_text(encoding="utf-8")
        makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
        (test_target,) = re.findall(r"^test: (.*)$", makefile, re.M)
        assert "browser" in test_target.split()
        browser = makefile.split("\nbrowser:\n", 1)[1].split("\n\n", 1)[0]
        assert "apt-get install -y -qq chromium" in browser
        first_block = readme.split("```")[1]
        assert "about 3\u20136 minutes on two cores" in first_block
        assert "installs Debian's chromium with apt if missing" in first_block
        assert "`make test` takes\nabout 3\u20136 minutes on two cores" in readme

    def test_links_into_the_site(self) -> None:
        """The README points to the quick start, the tutorials and the API reference."""
        text = (ROOT / "README.md").read_text(encoding="utf-8")
        for target in ["docs/quickstart.md", "docs/tutorials/index.md", "docs/reference/api.md"]:
            assert f"]({target})" in text


class TestCliDocs:
    @pytest.mark.parametrize("command", sorted(_COMMANDS))
    def test_every_command_is_documented(self, command: str) -> None:
        """docs/cli.md has a section for every command."""
        text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
        assert f"## `sagacity {command}" in text


class TestDocsLinks:
    def test_relative_links_resolve(self) -> None:
        """Every relative Markdown link in README and docs/ names a file that exists."""
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
            prose = re.sub(r"```.*?```", "", page.read_text("utf-8"), flags=re.S)
            for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", prose):
                assert (page.parent / target).exists(), f"{page.name} links to {target}"


class TestAdapterGuide:
    def test_the_example_of_writing_an_adapter_runs(self) -> None:
        """The `Sagacity.join` example of docs/integrations.md runs and its asserts hold."""
        (code,) = python_blocks(ROOT / "docs" / "integrations.md")
        exec(compile(code, "integrations.md", "exec"), {"__name__": "integrations_md"})
