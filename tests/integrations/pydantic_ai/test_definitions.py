"""What the model is sent is unchanged by sagacity; the package and its extra."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from pydantic_ai import FunctionToolset

from sagacity import Sagacity, compensable
from sagacity.integrations import pydantic_ai as adapter
from sagacity.integrations.pydantic_ai import SagaCapability, saga_toolset
from tests.integrations.pydantic_ai._agents import OrderTools, ScriptedModel, agent_with

ROOT = Path(__file__).resolve().parents[3]


@compensable(by=lambda: None, name="book_room")
def reserve_room(hotel: str, nights: int = 1, *, late_checkout: bool = False) -> str:
    """Book a hotel room.

    Args:
        hotel: The hotel's name.
        nights: How many nights.
        late_checkout: Whether to ask for a late checkout.
    """
    return f"{hotel}-{nights}"


async def sent_definitions(*toolsets: Any, capabilities: Any = ()) -> list[Any]:
    """The tool definitions one model request of an agent with these toolsets carries."""
    model = ScriptedModel("ok")
    await agent_with(model, *toolsets, capabilities=capabilities).run("hello")
    return model.tool_definitions[0]


def without_metadata(definition: Any) -> dict[str, Any]:
    fields = dataclasses.asdict(definition)
    del fields["metadata"]
    return fields


class TestToolDefinitions:
    async def test_definitions_sent_to_the_model_are_those_of_the_plain_functions(
        self, sagacity: Sagacity
    ) -> None:
        """The definitions sent to the model are those of the plain functions.

        Name, description, argument schema and every other field the model sees are what
        PydanticAI derives from the unwrapped functions (sync, async, methods, RunContext,
        Google docstrings, a `compensable(name=...)` rename).
        """
        shop = OrderTools()
        plain = FunctionToolset(
            [
                shop.charge_card,
                shop.delete_account,
                shop.reserve_inventory,
                shop.send_wire,
                shop.ship_order,
            ]
        )
        plain.add_function(reserve_room, name="book_room")

        wrapped = await sent_definitions(saga_toolset(sagacity, shop, reserve_room))
        unwrapped = await sent_definitions(plain)

        assert [d.name for d in wrapped] == [
            "charge_card",
            "delete_account",
            "reserve_inventory",
            "send_wire",
            "ship_order",
            "book_room",
        ]
        assert [without_metadata(d) for d in wrapped] == [without_metadata(d) for d in unwrapped]
        for definition, original in zip(wrapped, unwrapped, strict=True):
            assert (definition.name, definition.description, definition.parameters_json_schema) == (
                original.name,
                original.description,
                original.parameters_json_schema,
            )
        book_room = wrapped[-1]
        assert book_room.description == "Book a hotel room."
        assert book_room.parameters_json_schema["properties"]["nights"] == {
            "default": 1,
            "description": "How many nights.",
            "type": "integer",
        }

    async def test_metadata_says_how_each_tool_is_journaled(self, sagacity: Sagacity) -> None:
        """The one addition is `metadata["sagacity"]`, which PydanticAI never sends."""
        toolset = saga_toolset(sagacity, OrderTools())

        marks = {d.name: d.metadata["sagacity"] for d in await sent_definitions(toolset)}

        assert {name: mark["reversibility"] for name, mark in marks.items()} == {
            "charge_card": "COMPENSATABLE",
            "delete_account": "IRREVERSIBLE",
            "reserve_inventory": "COMPENSATABLE",
            "send_wire": "IRREVERSIBLE",
            "ship_order": "COMPENSATABLE",
        }
        assert {mark["policy"] for mark in marks.values()} == {toolset.policy.token}
        assert all(mark["journaled"] for mark in marks.values())

    async def test_definitions_under_the_capability_are_unchanged(self, sagacity: Sagacity) -> None:
        """The capability changes no other toolset's definitions but for the metadata."""

        def lookup(order: str) -> str:
            """Look an order up."""
            return order

        def refund(order: str, cents: int) -> str:
            """Refund an order."""
            return order

        toolset = FunctionToolset([lookup, refund])
        saga = SagaCapability(sagacity, read_only=["lookup"])

        wrapped = await sent_definitions(toolset, capabilities=[saga])
        unwrapped = await sent_definitions(toolset)

        assert [without_metadata(d) for d in wrapped] == [without_metadata(d) for d in unwrapped]
        assert [d.metadata["sagacity"]["journaled"] for d in wrapped] == [False, True]


class TestPackage:
    def test_public_names(self) -> None:
        """The adapter's public API, pinned."""
        assert adapter.__all__ == [
            "DENIAL_SOURCE",
            "METADATA_KEY",
            "RESUMER",
            "JournalPolicy",
            "PydanticAIResumer",
            "SagaCapability",
            "SagaToolset",
            "classify_exception",
            "saga_toolset",
        ]

    def test_import_without_the_extra_names_it(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With PydanticAI missing, importing the adapter says which extra to install."""
        monkeypatch.setitem(sys.modules, "pydantic_ai", None)
        for name in list(sys.modules):
            if name.startswith("sagacity.integrations.pydantic_ai"):
                monkeypatch.delitem(sys.modules, name)

        with pytest.raises(ImportError, match=r"pip install 'sagacity\[pydantic-ai\]'"):
            importlib.import_module("sagacity.integrations.pydantic_ai")

    def test_the_extra_allows_the_installed_version_and_later_minors(self) -> None:
        """The `pydantic-ai` extra holds the installed PydanticAI and later minors, not 3.0."""
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        [line] = project["optional-dependencies"]["pydantic-ai"]
        requirement = Requirement(line)
        installed = importlib.metadata.version(requirement.name)

        assert requirement.name == "pydantic-ai-slim"
        assert requirement.specifier.contains(installed)
        major, minor = (int(part) for part in installed.split(".")[:2])
        assert requirement.specifier.contains(f"{major}.{minor + 1}.0")
        assert not requirement.specifier.contains(f"{major + 1}.0.0")
