"""Run the examples of one page: in-page blocks in one namespace, snippet programs as scripts."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from sagacity import Sagacity
from tests.docs._blocks import ROOT, Example

EXAMPLES = ROOT / "examples"
PROGRAM_TIMEOUT = 180


def normalised(text: str) -> str:
    """Text with trailing blanks and blank lines gone: what a reader can tell apart."""
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def script_environment() -> dict[str, str]:
    """The environment a snippet program runs in: `examples/` and the repository importable."""
    env = dict(os.environ)
    paths = [str(EXAMPLES), str(ROOT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
    env["PYTHONUNBUFFERED"] = "1"
    # The programs run as a user runs them, but warnings still fail them here.
    env["PYTHONWARNINGS"] = "error"
    return env


def run_program(example: Example, program: Path, folder: Path) -> str:
    """Run `program` as a script in `folder`; its stdout, or a failure naming the page."""
    if not program.is_file():
        pytest.fail(f"{example.block.where}: the snippet {program} does not exist")
    return _script_output(program, folder, f"{example.block.where}: {program.name}")


def _script_output(script: Path, folder: Path, what: str) -> str:
    """Run `script` with `python` in `folder`; its stdout, or a failure naming `what`."""
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=folder,
        env=script_environment(),
        capture_output=True,
        text=True,
        timeout=PROGRAM_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            f"{what} exited {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )
    return done.stdout


class PageRunner:
    """Runs the blocks of one page top to bottom in one module namespace, as one script."""

    def __init__(self, name: str, capfd: pytest.CaptureFixture[str], folder: Path) -> None:
        self.module = types.ModuleType(name)
        self.capfd = capfd
        self.folder = folder
        self._opened: list[Sagacity] = []

    def __enter__(self) -> PageRunner:
        # Registered, so that dataclasses, pydantic and pickle find the page's classes.
        sys.modules[self.module.__name__] = self.module
        # Every Sagacity the page builds is kept, even one whose name a later block
        # rebinds: the page's script ends at __exit__, which closes what it left open.
        init = Sagacity.__init__
        opened = self._opened

        def kept(instance: Sagacity, *args: Any, **kwargs: Any) -> None:
            init(instance, *args, **kwargs)
            opened.append(instance)

        self._init = init
        Sagacity.__init__ = kept  # type: ignore[method-assign, assignment]
        return self

    def __exit__(self, *exc_info: object) -> None:
        sys.modules.pop(self.module.__name__, None)
        Sagacity.__init__ = self._init  # type: ignore[method-assign]
        # What a reader's process would close as it exits is closed now, not left for
        # the collector during a later test (Python 3.13 warns of each unclosed database).
        while self._opened:
            self._opened.pop().close()

    def run(self, example: Example) -> str:
        """Run one block; what it printed."""
        self.capfd.readouterr()
        program = example.block.snippet
        if program is not None:
            return run_program(example, program, self.folder)
        # Padded so that a traceback's line numbers are the page's.
        source = "\n" * example.block.line + example.block.code
        code = compile_as_script(source, example.block.where)
        exec(code, self.module.__dict__)  # the page's own code, as a reader runs it
        return self.capfd.readouterr().out


def compile_as_script(source: str, where: str) -> types.CodeType:
    """`source` compiled as `python page.py` compiles it: a top-level `await` is refused.

    A reader pastes a page's blocks into a file and runs it; `await` outside a function
    runs only in a notebook or an async REPL, so a page awaits through `asyncio.run(...)`.
    """
    try:
        return compile(source, where, "exec", dont_inherit=True)
    except SyntaxError as error:
        try:
            compile(source, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        except SyntaxError:
            raise error from None
        pytest.fail(
            f"{where}: line {error.lineno}: {error.msg}: it does not run as a script; "
            "await through asyncio.run(...)"
        )


def run_as_script(page: Path, examples: list[Example], folder: Path) -> None:
    """Run the page's in-page blocks as one file with `python`.

    Fails unless it exits 0 and prints each output the page shows, in order. The file is
    not named after the page: `pydantic_ai.py` would shadow the framework it imports.
    """
    script = folder / "docs_page_script.py"
    script.write_text("\n".join(example.block.code for example in examples), encoding="utf-8")
    printed = normalised(_script_output(script, folder, f"{page.name} run as a script"))
    for example in examples:
        if example.expected is None:
            continue
        shown = normalised(example.expected)
        assert shown in printed, f"{example.block.where}: the script does not print it"
        printed = printed[printed.index(shown) + len(shown) :]
