"""architecture.md's "Where to look first" table points at code that exists.

Each row names a file under `src/sagacity/` and functions, classes or `Class.method`s
that must be defined in that file: a row left behind by a move or a rename fails here.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import sagacity
from tests.docs._blocks import DOCS

ARCHITECTURE = DOCS / "architecture.md"
SOURCE = Path(sagacity.__file__).parent
SECTION = "## Where to look first"

_CODE = re.compile(r"`([^`]+)`")


@dataclass(frozen=True, kw_only=True)
class Row:
    """One row of the table."""

    question: str
    """The question, or the one of the row above when the cell is empty."""
    file: str
    """The file, relative to `src/sagacity/`."""
    names: tuple[str, ...]
    """The functions, classes or `Class.method`s to read there."""


def table_rows(markdown: str) -> list[Row]:
    """The rows of the table under the "Where to look first" heading of `markdown`."""
    lines = markdown.splitlines()
    start = lines.index(SECTION) + 1
    rows: list[Row] = []
    in_table = False
    question = ""
    for line in lines[start:]:
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            if in_table:
                break
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not in_table:  # the header, then its rule
            assert cells == ["question", "file", "function or method"], cells
            in_table = True
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        assert len(cells) == 3, f"a row has three cells: {line!r}"
        question = cells[0] or question
        (file,) = _CODE.findall(cells[1]) or [""]
        rows.append(Row(question=question, file=file, names=tuple(_CODE.findall(cells[2]))))
    return rows


def defined_names(path: Path) -> set[str]:
    """The top-level functions and classes of a module, and each class's `Class.method`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        if isinstance(node, ast.ClassDef):
            found |= {
                f"{node.name}.{member.name}"
                for member in node.body
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            }
    return found


def unresolved(rows: list[Row], source: Path) -> list[str]:
    """What the rows name that `source` lacks: a missing file, or a name not defined in it."""
    problems = []
    for row in rows:
        where = f"{row.question} {row.file or '(no file)'}"
        path = source / row.file
        if not row.file or not path.is_file():
            problems.append(f"{where}: no such file")
            continue
        if not row.names:
            problems.append(f"{where}: names no function or method")
        defined = defined_names(path)
        problems += [
            f"{where}: {name} is not defined there" for name in row.names if name not in defined
        ]
    return problems


class TestWhereToLookFirst:
    def test_every_row_names_code_that_exists(self) -> None:
        """Each file of the table exists and defines each function and `Class.method` named."""
        rows = table_rows(ARCHITECTURE.read_text(encoding="utf-8"))
        assert unresolved(rows, SOURCE) == []

    def test_the_table_answers_the_questions_a_newcomer_asks(self) -> None:
        """The approval's path, the journal, a saga's end, ids and auth each have a row."""
        rows = table_rows(ARCHITECTURE.read_text(encoding="utf-8"))
        named = {(row.file, name) for row in rows for name in row.names}
        assert {
            ("_call.py", "Call.begin"),
            ("approval/_check.py", "verified_request"),
            ("approval/_check.py", "check_approved"),
            ("approval/_lifecycle.py", "ApprovalLifecycle.consume"),
            ("approval/_lifecycle.py", "ApprovalLifecycle.resumable"),
            ("_outcome.py", "SagaEnding.finish"),
            ("compensation/_runner.py", "CompensationRunner.run"),
            ("journal/_entry.py", "entry_hash"),
            ("audit/_verify.py", "verify"),
            ("_ids.py", "require_id"),
            ("server/_auth.py", "authenticate"),
        } <= named
        assert len({row.question for row in rows}) >= 20


class TestTheCheckCanFail:
    TABLE = """\
## Where to look first

| question | file | function or method |
|---|---|---|
| Real? | `approval/_check.py` | `check_approved` |
| | `approval/_lifecycle.py` | `ApprovalLifecycle.resumable` |
| Moved? | `approval/_gone.py` | `check_approved` |
| Renamed? | `approval/_check.py` | `check_everything`, `verified_request` |
| A method? | `approval/_lifecycle.py` | `ApprovalLifecycle.approve_twice` |
| A class? | `approval/_nope.py` | `Nope.method` |
| Empty? | `_ids.py` | |

## The next section

| question | file | function or method |
|---|---|---|
| Not read | `nowhere.py` | `nothing` |
"""

    def test_a_bogus_row_is_reported(self) -> None:
        """A missing file, function or method is named with its question; a real row is not."""
        rows = table_rows(self.TABLE)
        assert [row.question for row in rows] == [
            "Real?",
            "Real?",
            "Moved?",
            "Renamed?",
            "A method?",
            "A class?",
            "Empty?",
        ]
        assert unresolved(rows, SOURCE) == [
            "Moved? approval/_gone.py: no such file",
            "Renamed? approval/_check.py: check_everything is not defined there",
            "A method? approval/_lifecycle.py: ApprovalLifecycle.approve_twice is not defined "
            "there",
            "A class? approval/_nope.py: no such file",
            "Empty? _ids.py: names no function or method",
        ]

    def test_a_method_resolves_in_its_own_class_only(self, tmp_path: Path) -> None:
        """`Class.method` must be a method of that class, not a function of the module."""
        (tmp_path / "mod.py").write_text(
            "def helper():\n    pass\n\nclass Box:\n    def open(self):\n        pass\n",
            encoding="utf-8",
        )
        rows = [
            Row(question="Q?", file="mod.py", names=("Box.open", "Box.helper", "open", "helper"))
        ]
        assert unresolved(rows, tmp_path) == [
            "Q? mod.py: Box.helper is not defined there",
            "Q? mod.py: open is not defined there",
        ]

    @pytest.mark.parametrize("header", ["| question | file |", "| file | question | function |"])
    def test_a_table_of_another_shape_is_refused(self, header: str) -> None:
        """A table whose columns changed fails loudly instead of checking nothing."""
        with pytest.raises(AssertionError):
            table_rows(f"{SECTION}\n\n{header}\n|---|---|\n| Q? | `_ids.py` |\n")
