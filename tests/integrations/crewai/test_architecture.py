"""The architecture rules see the CrewAI adapter, in the venv where it also imports."""

from __future__ import annotations

from tests.test_architecture import (
    PACKAGE,
    import_cycles,
    import_graph,
    modules,
    oversized,
    private_imports,
)

ADAPTER = "sagacity.integrations.crewai"


class TestCrewAdapterShape:
    def test_the_rules_cover_every_module_of_the_adapter(self) -> None:
        """Its modules are among those the architecture test walks."""
        names = {name for name in modules(PACKAGE) if name.startswith(ADAPTER)}
        assert names == {
            ADAPTER,
            f"{ADAPTER}._calls",
            f"{ADAPTER}._resumer",
            f"{ADAPTER}._tools",
        }

    def test_it_uses_public_names_stays_small_and_has_no_cycle(self) -> None:
        """No private core name, no module over the limit, no import cycle through it."""
        folder = PACKAGE / "integrations" / "crewai"
        assert {p.name: private_imports(p) for p in folder.glob("*.py") if private_imports(p)} == {}
        assert {m: n for m, n in oversized(PACKAGE).items() if m.startswith(ADAPTER)} == {}
        cycles = import_cycles(import_graph(PACKAGE))
        assert [c for c in cycles if any(m.startswith(ADAPTER) for m in c)] == []

    def test_the_adapter_imports_with_crewai_here(self) -> None:
        """In this venv the subpackage imports and exports its names."""
        import sagacity.integrations.crewai as adapter

        assert {"crew_tools", "CrewResumer", "SagaCrewTool"} <= set(adapter.__all__)
