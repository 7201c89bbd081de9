"""The core's modules import each other in one direction only (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import sagacity

PACKAGE = Path(sagacity.__file__).parent
OUTSIDE_THE_CORE = ("sagacity.integrations", "sagacity.journal.postgres")
"""Extras: each imports the core, never the other way (test_core_without_extras)."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def core_imports() -> dict[str, set[str]]:
    """Every core module and the core modules it imports, type-only imports included."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    core = {name: path for name, path in modules.items() if not name.startswith(OUTSIDE_THE_CORE)}
    graph: dict[str, set[str]] = {}
    for name, path in core.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        # A package's __init__ re-exports its own modules: that edge is not a dependency.
        graph[name] = {m for m in found if m in core and m != name and not m.startswith(name + ".")}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return None
        for imported in sorted(graph[name]):
            cycle = visit(imported, [*path, name])
            if cycle is not None:
                return cycle
        done.add(name)
        return None

    for name in sorted(graph):
        cycle = visit(name, [])
        if cycle is not None:
            return cycle
    return None


class TestModuleDependencies:
    def test_no_import_cycle_among_core_modules(self) -> None:
        """No core module reaches itself through imports, `TYPE_CHECKING` ones included."""
        assert find_cycle(core_imports()) is None

    def test_the_check_finds_a_cycle(self) -> None:
        """The cycle finder names the modules of a cycle, so the test above can fail."""
        graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
        assert find_cycle(graph) == ["a", "b", "c", "a"]

    def test_the_facade_is_thin(self) -> None:
        """`saga.py` delegates: it stays well under the 600 lines that call for a split."""
        lines = (PACKAGE / "saga.py").read_text(encoding="utf-8").count("\n")
        assert lines < 500

    def test_the_hot_path_does_not_import_the_facade(self) -> None:
        """Tools, calls and scopes know their Sagacity through a Protocol, not `saga.py`."""
        graph = core_imports()
        for module in ("sagacity.tools", "sagacity._call", "sagacity._scope"):
            assert "sagacity.saga" not in graph[module], module


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
