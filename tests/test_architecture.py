"""Modules import one way, stay small and keep private names (docs/architecture.md).

Each rule is a checker over a package folder, run on `src/sagacity/`; a list of known
exceptions names what breaks it today while a split is under way. A list can only
shrink: an entry that no longer breaks the rule fails its test until it is removed.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import sagacity

PACKAGE = Path(sagacity.__file__).parent

LINE_LIMIT = 500
"""A module past this many lines holds more than one concept: split it (STYLE.md)."""

KNOWN_CYCLES: set[tuple[str, ...]] = set()  # none today: keep it so
"""Import cycles being removed, each from its first module in sorted order back to it."""

KNOWN_OVERSIZED: set[str] = set()  # none today: keep it so
"""Modules over `LINE_LIMIT` lines today."""

KNOWN_PRIVATE_IMPORTS: set[tuple[str, str]] = set()
"""(importing module, `module._name` it imports): private names crossing modules today."""


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path) -> dict[str, Path]:
    """Every module of `package` (a folder with an `__init__.py`) by its dotted name."""
    return {module_name(path, package): path for path in sorted(package.rglob("*.py"))}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Import:
    """One name a module imports, wherever the statement is: type-only, in a function."""

    importer: str
    """The module whose code imports it."""
    module: str
    """The module it is read from, relative imports resolved."""
    name: str | None
    """The name imported from `module`; None for `import module`."""


def imports(package: Path) -> list[Import]:
    found = []
    for importer, path in modules(package).items():
        # A module's relative imports count from its package; an __init__ is its package.
        home = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found += [Import(importer=importer, module=a.name, name=None) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = home.split(".")[: len(home.split(".")) - node.level + 1]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                found += [Import(importer=importer, module=module, name=a.name) for a in node.names]
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    """Every module of `package` and the modules of `package` it imports."""
    known = modules(package)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for item in imports(package):
        submodule = f"{item.module}.{item.name}"
        target = submodule if submodule in known else item.module
        if target in known and target != item.importer:
            graph[item.importer].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components: the modules that reach each other through imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for imported in sorted(graph[name]):
            if imported not in index:
                visit(imported)
                low[name] = min(low[name], low[imported])
            elif imported in stack:
                low[name] = min(low[name], index[imported])
        if low[name] == index[name]:
            component: set[str] = set()
            while not component or name not in component:
                component.add(stack.pop())
            components.append(component)

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return components


def import_cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Every import cycle, as the chain from its first module (sorted) back to it."""
    cycles: set[tuple[str, ...]] = set()

    def walk(path: list[str], component: set[str]) -> None:
        start = path[0]
        for imported in sorted(graph[path[-1]] & component):
            if imported == start:
                cycles.add((*path, start))
            elif imported > start and imported not in path:
                walk([*path, imported], component)

    for component in strongly_connected(graph):
        for start in sorted(component):
            walk([start], component)
    return cycles


def oversized(package: Path, limit: int = LINE_LIMIT) -> dict[str, int]:
    """The modules of `package` over `limit` lines, with their line counts."""
    counts = {
        name: len(path.read_text(encoding="utf-8").splitlines())
        for name, path in modules(package).items()
    }
    return {name: lines for name, lines in counts.items() if lines > limit}


def private_names_imported(package: Path) -> set[tuple[str, str]]:
    """(importer, `module._name`): a module's private name imported by another module.

    Private modules (`from sagacity.journal import _sqlite`) and dunders are not names.
    """
    known = modules(package)
    return {
        (item.importer, f"{item.module}.{item.name}")
        for item in imports(package)
        if item.name is not None
        and item.name.startswith("_")
        and not item.name.startswith("__")
        and item.module in known
        and item.module != item.importer
        and f"{item.module}.{item.name}" not in known
    }


def chains(cycles: set[tuple[str, ...]]) -> list[str]:
    return [" -> ".join(cycle) for cycle in sorted(cycles)]


class TestModuleDependencies:
    def test_no_import_cycle(self) -> None:
        """No module reaches itself through imports, type-only and function-level ones included."""
        new = import_cycles(import_graph(PACKAGE)) - KNOWN_CYCLES
        assert chains(new) == []

    def test_known_cycles_are_still_cycles(self) -> None:
        """A known cycle that is gone is removed from `KNOWN_CYCLES`, so none comes back."""
        gone = KNOWN_CYCLES - import_cycles(import_graph(PACKAGE))
        assert chains(gone) == [], "no longer a cycle: remove it from KNOWN_CYCLES"

    def test_the_facade_is_thin(self) -> None:
        """`saga.py` delegates: it stays well under the 600 lines that call for a split."""
        lines = (PACKAGE / "saga.py").read_text(encoding="utf-8").count("\n")
        assert lines < 500

    def test_the_hot_path_does_not_import_the_facade(self) -> None:
        """Tools, calls and scopes know their Sagacity through a Protocol, not `saga.py`."""
        graph = import_graph(PACKAGE)
        hot_path = (
            "sagacity.tools",
            "sagacity._call",
            "sagacity._call_outcome",
            "sagacity._scope",
            "sagacity._gates",
            "sagacity._saga_run",
        )
        for module in hot_path:
            assert "sagacity.saga" not in graph[module], module


class TestModuleSize:
    def test_no_module_over_the_limit(self) -> None:
        """Every module is at most `LINE_LIMIT` lines, but those being split now."""
        over = oversized(PACKAGE)
        assert {name: lines for name, lines in over.items() if name not in KNOWN_OVERSIZED} == {}

    def test_known_oversized_modules_are_still_over(self) -> None:
        """A module split below the limit is removed from `KNOWN_OVERSIZED`."""
        gone = sorted(KNOWN_OVERSIZED - set(oversized(PACKAGE)))
        assert gone == [], "now within the limit: remove it from KNOWN_OVERSIZED"


class TestPrivateNames:
    def test_no_private_name_crosses_a_module(self) -> None:
        """A name shared between modules is public in its module (`Append`, not `_Append`)."""
        assert sorted(private_names_imported(PACKAGE) - KNOWN_PRIVATE_IMPORTS) == []

    def test_known_private_imports_are_still_made(self) -> None:
        """A private import that is gone is removed from `KNOWN_PRIVATE_IMPORTS`."""
        gone = sorted(KNOWN_PRIVATE_IMPORTS - private_names_imported(PACKAGE))
        assert gone == [], "no longer imported: remove it from KNOWN_PRIVATE_IMPORTS"


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A package that breaks every rule once, and keeps each rule once just inside."""
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from pkg.a import A\n",
        # a -> b -> a, b's import type-only and relative.
        "a.py": "from pkg.b import B\n\nclass A: ...\n",
        "b.py": (
            "from typing import TYPE_CHECKING\n\n"
            "if TYPE_CHECKING:\n    from .a import A\n\nclass B: ...\n"
        ),
        # c -> sub.d -> sub (an __init__) -> c, the last import inside a function.
        "c.py": "from pkg.sub import d\n",
        "sub/__init__.py": "def later() -> None:\n    from .. import c\n",
        "sub/d.py": (
            "import pkg.sub\n\nfrom ._e import _hidden, shown\nfrom pkg.sub._e import __all__\n"
        ),
        "sub/_e.py": "__all__ = ['shown']\n_hidden = 1\nshown = 2\n",
        "sub/f.py": "from pkg import _big\nfrom pkg._big import _own as kept\n",
        "_big.py": "_own = 0\n" + "x = 1\n" * (LINE_LIMIT - 1) + "y = 2\n",
        "fits.py": "x = 1\n" * LINE_LIMIT,
    }
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


class TestTheChecksCanFail:
    def test_cycles_are_reported_as_chains(self, package: Path) -> None:
        """Both cycles are found, type-only and function-level imports included."""
        assert chains(import_cycles(import_graph(package))) == [
            "pkg.a -> pkg.b -> pkg.a",
            "pkg.c -> pkg.sub.d -> pkg.sub -> pkg.c",
        ]

    def test_every_cycle_of_a_component_is_reported(self) -> None:
        """Two cycles through one module are two chains, each reported once."""
        graph = {"a": {"b", "c"}, "b": {"a"}, "c": {"a"}, "d": {"a"}}
        assert chains(import_cycles(graph)) == ["a -> b -> a", "a -> c -> a"]

    def test_an_oversized_module_is_reported(self, package: Path) -> None:
        """A module one line over the limit is reported with its count; one at the limit is not."""
        assert oversized(package) == {"pkg._big": LINE_LIMIT + 1}

    def test_a_private_import_is_reported(self, package: Path) -> None:
        """`from ._e import _hidden` and `from pkg._big import _own` are caught, modules not."""
        assert private_names_imported(package) == {
            ("pkg.sub.d", "pkg.sub._e._hidden"),
            ("pkg.sub.f", "pkg._big._own"),
        }


def private_imports(path: Path) -> list[str]:
    """The private names of the core a module imports: `sagacity._x`, or `_name`s."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sagacity"):
            if node.module.startswith("sagacity.integrations"):
                continue  # the integration's own modules
            if any(part.startswith("_") for part in node.module.split(".")):
                found.append(node.module)
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [
                a.name
                for a in node.names
                if a.name.startswith("sagacity")
                and any(p.startswith("_") for p in a.name.split("."))
            ]
    return found


class TestIntegrationsUsePublicNames:
    def test_no_integration_imports_a_private_name_of_the_core(self) -> None:
        """Adapters use the public API and `sagacity.adapter`, never the core's internals."""
        offenders = {
            module_name(path): private_imports(path)
            for path in (PACKAGE / "integrations").rglob("*.py")
            if private_imports(path)
        }
        assert offenders == {}

    def test_the_check_sees_a_private_import(self, tmp_path: Path) -> None:
        """A module importing `sagacity._scope` or a `_name` is caught, so the test can fail."""
        module = tmp_path / "adapter.py"
        module.write_text(
            "from sagacity._scope import SagaScope\nfrom sagacity.saga import _run\n",
            encoding="utf-8",
        )
        assert private_imports(module) == ["sagacity._scope", "sagacity.saga._run"]
