"""Read the code blocks of a Markdown page the way the documentation tests run them.

The convention every page follows:

- every ```python block runs, top to bottom, in one namespace per page, in a temporary
  working directory, with the repository's `examples/` importable;
- unless the line right above it is `<!-- fragment: <why it is not run> -->`;
- a ```text block right after a python block, with `<!-- output -->` on the line above
  it, is what that python block prints;
- any other block is a fragment, an output, or `<!-- checked: tests/….py::Class::test -->`:
  that test (which names the page) reads the block and feeds it to the real parser;
- a python block whose only line is a snippet include (`--8<-- "examples/….py"`) is a
  whole program: it runs as a script in its own process, and its output is compared.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})(?P<info>[^`\n]*)$")
_FRAGMENT = re.compile(r"^\s*<!--\s*fragment:(?P<reason>.*?)-->\s*$")
_CHECKED = re.compile(r"^\s*<!--\s*checked:\s*(?P<test>\S+)\s*-->\s*$")
_OUTPUT = re.compile(r"^\s*<!--\s*output\s*-->\s*$")
_SNIPPET = re.compile(r"""^\s*-{2}8<-{2}\s+["'](?P<path>[^"']+)["']\s*$""")


class PageError(Exception):
    """A page breaks the convention: a fragment without a reason, an unclosed fence."""


@dataclass(frozen=True, kw_only=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    """The Markdown file it is in."""
    line: int
    """The 1-based line of its opening fence."""
    language: str
    """The first word of the fence's info string (`python`, `text`, ``)."""
    code: str
    """Its body, dedented to the fence's indentation."""
    fragment: str | None
    """The reason given by a `<!-- fragment: … -->` line right above it, else None."""
    output: bool
    """True when `<!-- output -->` is the line right above it."""
    checked: str | None = None
    """The test a `<!-- checked: tests/….py::Class::test -->` line right above it names."""

    @property
    def where(self) -> str:
        """`docs/page.md:12`, for messages."""
        return f"{shown(self.page)}:{self.line}"

    @property
    def snippet(self) -> Path | None:
        """The program a block that only includes a snippet shows, else None."""
        lines = [line for line in self.code.splitlines() if line.strip()]
        if len(lines) == 1 and (match := _SNIPPET.match(lines[0])):
            return ROOT / match["path"]
        return None


@dataclass(frozen=True, kw_only=True)
class Example:
    """A python block to run, with the output the page shows for it, if any."""

    block: Block
    """The python block."""
    expected: str | None
    """The `<!-- output -->` text block after it, or None when the page shows none."""


def shown(page: Path) -> str:
    """The page's path relative to the repository when it is in it, for messages."""
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def blocks(page: Path) -> list[Block]:
    """Every fenced block of `page`, in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, ticks = opening["indent"], opening["ticks"]
        body: list[str] = []
        end = index + 1
        while end < len(lines):
            stripped = lines[end].strip()
            if stripped.startswith(ticks) and not stripped.strip(ticks[0]):
                break
            body.append(lines[end][len(indent) :] if lines[end].startswith(indent) else lines[end])
            end += 1
        else:
            raise PageError(f"{shown(page)}:{index + 1}: the code block is not closed")
        above = lines[index - 1] if index > 0 else ""
        fragment = _FRAGMENT.match(above)
        if fragment and not fragment["reason"].strip():
            raise PageError(f"{shown(page)}:{index}: a fragment must say why it is not run")
        found.append(
            Block(
                page=page,
                line=index + 1,
                language=(opening["info"].split() or [""])[0].lower(),
                code="\n".join(body) + "\n",
                fragment=fragment["reason"].strip() if fragment else None,
                output=bool(_OUTPUT.match(above)),
                checked=checked["test"] if (checked := _CHECKED.match(above)) else None,
            )
        )
        index = end + 1
    return found


def examples(page: Path) -> list[Example]:
    """The python blocks of `page` that run, each with the output the page shows for it."""
    found = blocks(page)
    runs: list[Example] = []
    for position, block in enumerate(found):
        if block.language not in ("python", "py") or block.fragment is not None:
            continue
        after = found[position + 1] if position + 1 < len(found) else None
        expected = after.code if after and after.output else None
        runs.append(Example(block=block, expected=expected))
    return runs


def orphan_outputs(page: Path) -> list[Block]:
    """`<!-- output -->` blocks that follow no python block that runs."""
    found = blocks(page)
    orphans = []
    for position, block in enumerate(found):
        if not block.output:
            continue
        before = found[position - 1] if position else None
        if (
            before is None
            or before.language not in ("python", "py")
            or before.fragment is not None
            or block.language != "text"
        ):
            orphans.append(block)
    return orphans


def missing_test(test: str, page: Path) -> str | None:
    """Why `tests/….py::Class::test` is not a test reading `page`; None when it is one."""
    path, _, names = test.partition("::")
    file = ROOT / path
    if not names or not file.is_file() or not path.startswith("tests/"):
        return f"{test} is not tests/<file>.py::<test> of an existing file"
    source = file.read_text(encoding="utf-8")
    scope: list[ast.stmt] = ast.parse(source).body
    for name in names.split("::"):
        found = [
            node
            for node in scope
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name == name
        ]
        if not found:
            return f"{path} has no {name}"
        scope = found[0].body
    if page.name not in source:
        return f"{path} does not name {page.name}"
    return None


def unaccounted(page: Path) -> list[str]:
    """`page:line` of each block neither run, nor an output, nor a fragment, nor checked."""
    offenders = []
    for block in blocks(page):
        if block.fragment is not None or block.output:
            continue
        if block.language in ("python", "py"):
            continue
        if block.checked is None:
            offenders.append(f"{block.where}: a {block.language or 'plain'} block is not run")
        elif reason := missing_test(block.checked, page):
            offenders.append(f"{block.where}: {reason}")
    return offenders


def pages() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
