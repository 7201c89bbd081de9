"""Every page's examples run as written, and print what the page says they print."""

from __future__ import annotations

import sqlite3
import sys
import uuid
from pathlib import Path

import pytest

from tests._postgres import admin_connection, require_server, server_url, with_query
from tests.docs._blocks import (
    ROOT,
    PageError,
    blocks,
    examples,
    orphan_outputs,
    pages,
    unaccounted,
)
from tests.docs._run import EXAMPLES, PageRunner, normalised, run_as_script

PAGES = pages()


def _runs_code(page: Path) -> bool:
    try:
        return bool(examples(page))
    except PageError:
        return True  # run, so that the error names the page


POSTGRES_VARIABLES = ("SAGACITY_DATABASE_URL", "SAGACITY_TEST_DATABASE_URL")


def needs_postgres(page: Path) -> bool:
    """A page whose code reads the database URL from the environment runs on PostgreSQL."""
    try:
        code = "".join(example.block.code for example in examples(page))
    except PageError:
        return False
    return any(variable in code for variable in POSTGRES_VARIABLES)


def page_schema(request: pytest.FixtureRequest) -> dict[str, str]:
    """Both URL variables, naming a fresh schema of the test server dropped after the test."""
    require_server()
    server = server_url()  # read before the variables name the page's schema
    schema = "sagacity_docs_" + uuid.uuid4().hex[:12]

    def drop() -> None:
        with admin_connection(server) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    request.addfinalizer(drop)
    return dict.fromkeys(POSTGRES_VARIABLES, with_query(server, schema=schema))


ISOLATED_PAGES = {
    ROOT / "docs" / "integrations" / "crewai.md",
    ROOT / "docs" / "tutorials" / "crewai.md",
}
"""Pages whose framework cannot share this venv: tests/integrations/crewai runs them in
.venv-crewai (`make test-crewai`), and checks that this set names them."""

BROWSER_PAGES = {ROOT / "docs" / "tutorials" / "worker-langgraph.md"}
"""Pages whose program drives Debian's chromium: without it they skip loudly (and fail
under `CI=true`), as the inbox's browser tests do."""

DBOS_SQLITE_PAGES = {ROOT / "docs" / "tutorials" / "dbos.md"}
"""Pages whose DBOS keeps its system database in SQLite: on Python 3.12 and later DBOS
writes `unixepoch('subsec')`, which SQLite has only from 3.42 (pyenv's 3.12.1 and 3.13.0
here link 3.40.1). There the page skips, naming both versions."""

PAGES_WITH_CODE = [
    pytest.param(page, marks=[pytest.mark.postgres] if needs_postgres(page) else [])
    for page in PAGES
    if _runs_code(page) and page not in ISOLATED_PAGES
]


def run_page(
    page: Path,
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Run the page's blocks in order in `folder`; fail where one prints something else."""
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    name = "docs_" + "".join(c if c.isalnum() else "_" for c in page_id(page))
    with PageRunner(name, capfd, folder) as runner:
        for example in examples(page):
            printed = runner.run(example)
            if example.expected is not None:
                assert normalised(printed) == normalised(example.expected), (
                    f"{example.block.where} printed something else than the page shows"
                )


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name


class TestPages:
    @pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=page_id)
    def test_examples_run_and_print_what_the_page_shows(
        self,
        page: Path,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str],
        request: pytest.FixtureRequest,
    ) -> None:
        """Each python block runs in order in one namespace; each shown output is printed.

        A page that reads `SAGACITY_DATABASE_URL` (or `SAGACITY_TEST_DATABASE_URL`) gets
        a fresh schema of the test PostgreSQL server in both, dropped afterwards; without
        a server it skips loudly, and fails under `CI=true`.
        """
        if needs_postgres(page):
            for variable, url in page_schema(request).items():
                monkeypatch.setenv(variable, url)
        if page in BROWSER_PAGES:
            from tests.server.browser.conftest import chromium_path

            chromium_path()
        if page in DBOS_SQLITE_PAGES and sys.version_info >= (3, 12):
            if sqlite3.sqlite_version_info < (3, 42):
                pytest.skip(
                    f"DBOS on Python {sys.version_info[0]}.{sys.version_info[1]} needs "
                    f"SQLite 3.42 or later for its system database; this Python links "
                    f"{sqlite3.sqlite_version}"
                )
        run_page(page, tmp_path, monkeypatch, capfd)

    @pytest.mark.parametrize("page", PAGES, ids=page_id)
    def test_every_shown_output_belongs_to_a_block_that_runs(self, page: Path) -> None:
        """An `<!-- output -->` block follows a python block that runs, so it is checked.

        Reading the page also checks the convention: every fence closes, every fragment
        says why it is not run.
        """
        orphans = [block.where for block in orphan_outputs(page)]
        assert orphans == []

    def test_every_block_is_run_shown_output_checked_or_a_fragment(self) -> None:
        """No block is left unexamined: each runs, is an output, is checked, or says why not."""
        offenders = [offender for page in PAGES for offender in unaccounted(page)]
        assert offenders == [], "blocks neither run nor marked:\n" + "\n".join(offenders)


class TestConvention:
    """The reader of the pages: fragments, outputs and snippets, on pages written here."""

    def write(self, tmp_path: Path, text: str) -> Path:
        page = tmp_path / "page.md"
        page.write_text(text, encoding="utf-8")
        return page

    def test_a_fragment_is_not_run_and_keeps_its_reason(self, tmp_path: Path) -> None:
        """The line above a block marks it a fragment; the reason is kept, the block skipped."""
        page = self.write(
            tmp_path,
            "<!-- fragment: needs a real model -->\n```python\nmodel()\n```\n\n"
            "```python\nprint(1)\n```\n<!-- output -->\n```text\n1\n```\n",
        )
        (fragment, _, shown) = blocks(page)
        assert fragment.fragment == "needs a real model"
        assert [example.block.line for example in examples(page)] == [6]
        assert examples(page)[0].expected == "1\n"
        assert shown.output

    def test_a_fragment_without_a_reason_is_refused(self, tmp_path: Path) -> None:
        """`<!-- fragment: -->` with nothing after it is an error naming the page and line."""
        page = self.write(tmp_path, "text\n<!-- fragment: -->\n```python\nx\n```\n")
        with pytest.raises(PageError, match=r"page.md:2: a fragment must say why"):
            blocks(page)

    def test_an_unclosed_block_is_refused(self, tmp_path: Path) -> None:
        """A fence that never closes would hide the rest of the page: it is an error."""
        page = self.write(tmp_path, "```python\nprint(1)\n")
        with pytest.raises(PageError, match="not closed"):
            blocks(page)

    def test_an_output_after_a_fragment_is_an_orphan(self, tmp_path: Path) -> None:
        """An output shown for a block that does not run could never be checked."""
        page = self.write(
            tmp_path,
            "<!-- fragment: shown only -->\n```python\nprint(2)\n```\n"
            "<!-- output -->\n```text\n2\n```\n",
        )
        assert [block.line for block in orphan_outputs(page)] == [6]

    def test_an_unmarked_shell_block_is_named(self, tmp_path: Path) -> None:
        """A block that is neither run nor marked is an offender, named by page and line."""
        page = self.write(
            tmp_path,
            "```sh\nmake demo\n```\n\n<!-- fragment: a diagram -->\n```\na -> b\n```\n",
        )
        assert unaccounted(page) == [f"{page}:1: a sh block is not run"]

    def test_a_checked_block_needs_a_real_test_naming_the_page(self, tmp_path: Path) -> None:
        """`checked:` counts only when the test exists and its file names the page."""
        real = "tests/docs/test_formats.py::TestTokensFile::test_the_tokens_file_shown_loads"
        server = ROOT / "docs" / "server.md"
        for test, reason in [
            ("tests/docs/test_formats.py::TestTokensFile::test_gone", "has no test_gone"),
            ("tests/nowhere.py::test_x", "not tests/<file>.py::<test> of an existing file"),
            (real, "does not name page.md"),
        ]:
            page = self.write(tmp_path, f"<!-- checked: {test} -->\n```toml\nx = 1\n```\n")
            (offender,) = unaccounted(page)
            assert offender.endswith(reason), offender
        assert not [o for o in unaccounted(server) if "test_the_tokens_file_shown_loads" in o]
        (block,) = [b for b in blocks(server) if b.language == "toml"]
        assert block.checked == real

    def test_indented_blocks_in_lists_are_read(self, tmp_path: Path) -> None:
        """A block indented under a list item is dedented and run like any other."""
        page = self.write(tmp_path, "- step\n\n    ```python\n    x = 1\n    print(x)\n    ```\n")
        (example,) = examples(page)
        assert example.block.code == "x = 1\nprint(x)\n"

    def test_a_snippet_block_names_its_program(self, tmp_path: Path) -> None:
        """A block that only includes a file is that program, run as a script."""
        page = self.write(tmp_path, '```python\n--8<-- "examples/tutorials/first_saga.py"\n```\n')
        (example,) = examples(page)
        assert example.block.snippet == ROOT / "examples" / "tutorials" / "first_saga.py"

    def test_a_wrong_output_fails(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str],
    ) -> None:
        """A block that prints something else than its shown output fails, naming the line."""
        page = self.write(
            tmp_path, "```python\nprint('a')\n```\n<!-- output -->\n```text\nb\n```\n"
        )
        with pytest.raises(AssertionError, match=r"page.md:1 printed something else"):
            run_page(page, tmp_path, monkeypatch, capfd)

    def test_a_right_output_and_trailing_blanks_pass(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str],
    ) -> None:
        """Trailing spaces and blank lines are not told apart; everything else is."""
        page = self.write(
            tmp_path,
            "```python\nprint('a  ')\nprint()\n```\n<!-- output -->\n```text\na\n```\n",
        )
        run_page(page, tmp_path, monkeypatch, capfd)

    def test_a_raising_block_fails_with_the_page_line(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str],
    ) -> None:
        """A traceback points at the page and the line in it, not at a temporary file."""
        page = self.write(tmp_path, "text\n\n```python\nx = 1\nraise KeyError(x)\n```\n")
        with pytest.raises(KeyError) as raised:
            run_page(page, tmp_path, monkeypatch, capfd)
        frame = raised.traceback[-1]
        assert (Path(str(frame.path)).name, frame.lineno + 1) == ("page.md:3", 5)

    def test_a_failing_snippet_program_fails_with_its_output(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str],
    ) -> None:
        """A snippet block runs its file as a script; a non-zero exit fails with its stderr."""
        program = tmp_path / "broken.py"
        program.write_text("import sys\nprint('started')\nsys.exit('no database')\n")
        page = self.write(tmp_path, f'```python\n--8<-- "{program}"\n```\n')
        with pytest.raises(pytest.fail.Exception, match=r"(?s)exited 1.*started.*no database"):
            run_page(page, tmp_path, monkeypatch, capfd)

    def test_blocks_share_one_namespace_and_asyncio_run_runs(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str],
    ) -> None:
        """A later block sees an earlier block's names; `asyncio.run` runs as in a script."""
        page = self.write(
            tmp_path,
            "```python\nimport asyncio\nvalue = 41\n```\n\n"
            "```python\nasyncio.run(asyncio.sleep(0))\nprint(value + 1)\n```\n",
        )
        monkeypatch.chdir(tmp_path)
        with PageRunner("docs_convention_shared", capfd, tmp_path) as runner:
            printed = [runner.run(example) for example in examples(page)]
        assert printed == ["", "42\n"]

    def test_a_top_level_await_fails_as_in_a_script(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str],
    ) -> None:
        """`await` outside a function runs in a notebook, not in `python page.py`: refused."""
        page = self.write(
            tmp_path, "```python\nimport asyncio\n\nawait asyncio.sleep(0)\nprint(1)\n```\n"
        )
        with pytest.raises(pytest.fail.Exception) as failed:
            run_page(page, tmp_path, monkeypatch, capfd)
        assert str(failed.value).startswith(
            f"{page}:1: line 4: 'await' outside function: it does not run as a script; "
            "await through asyncio.run(...)"
        )
        assert capfd.readouterr().out == ""

    def test_a_syntax_error_is_raised_as_it_is(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str],
    ) -> None:
        """Any other syntax error is Python's own, naming the page and the line."""
        page = self.write(tmp_path, "```python\nprint(1\n```\n")
        with pytest.raises(SyntaxError) as raised:
            run_page(page, tmp_path, monkeypatch, capfd)
        assert raised.value.filename == f"{page}:1"


SCRIPT_PAGES = sorted((ROOT / "docs" / "integrations").glob("*.md"))
"""Pages a reader copies into a file and runs: each framework's page."""


class TestScripts:
    @pytest.mark.parametrize(
        "page",
        [
            p
            for p in SCRIPT_PAGES
            if _runs_code(p) and not needs_postgres(p) and p not in ISOLATED_PAGES
        ],
        ids=page_id,
    )
    def test_the_page_runs_as_one_script(self, page: Path, tmp_path: Path) -> None:
        """The page's blocks, pasted into one file, run with `python` and print what it shows."""
        run_as_script(page, examples(page), tmp_path)

    def test_the_openai_agents_and_pydantic_ai_pages_are_run_as_scripts(self) -> None:
        """The pages that opened with a top-level `await` are among those run as scripts."""
        names = {page.name for page in SCRIPT_PAGES if _runs_code(page)}
        assert {"openai_agents.md", "pydantic_ai.md"} <= names


class TestTutorials:
    def test_every_tutorial_program_is_shown_and_so_run(self) -> None:
        """Each program under examples/tutorials/ is a snippet of a page: it runs and is read."""
        shown = {
            example.block.snippet
            for page in PAGES
            for example in examples(page)
            if example.block.snippet is not None
        }
        programs = set((EXAMPLES / "tutorials").glob("*.py"))
        assert programs - shown == set()

    def test_every_tutorial_shows_its_output(self) -> None:
        """A tutorial's program is followed by the output the tests compare."""
        for page in sorted((ROOT / "docs" / "tutorials").glob("*.md")):
            for example in examples(page):
                if example.block.snippet is not None:
                    assert example.expected, f"{example.block.where} shows no output"
