"""`JournalPolicy`: which tools of a PydanticAI toolset are journaled, and how."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, NoReturn

from pydantic_ai.tools import ToolDefinition

from sagacity.annotations import Reversibility, compensable
from sagacity.errors import ConfigurationError
from sagacity.integrations.pydantic_ai._calls import journaled_tool
from sagacity.integrations.pydantic_ai._classify import classify_exception
from sagacity.journal import JsonValue
from sagacity.saga import Sagacity
from sagacity.tools import SagaTool

__all__ = ["JournalPolicy", "register_compensation", "wrapped_tool"]

_COMPENSATION_ATTRIBUTE = "__sagacity_pydantic_ai_compensation__"

_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""The tool names `Sagacity.wrap` accepts."""


class JournalPolicy:
    """Which tools of a toolset are journaled, and how.

    Tools wrapped by `Sagacity.wrap` are journaled as they were declared, whether they are
    given here or only share the name the agent calls them by. Any other tool (an MCP
    server's, a plain function toolset's) is known only by that name, so its
    reversibility and compensation are given here; a tool given nothing is IRREVERSIBLE.

    Args:
        sagacity: The Sagacity whose sagas the calls are journaled in.
        tools: Tools wrapped by `Sagacity.wrap`, journaled as declared.
        compensations: Other tools that are COMPENSATABLE, each with its compensation (a
            callable taking no arguments or one `CompensationContext`), checked now.
        irreversible: Other tools that are IRREVERSIBLE: every call waits for a human's
            approval of its exact input.
        read_only: Other tools that change nothing: called straight through, not journaled.
            The name is all that is checked: whatever the toolset runs under it is trusted
            to change nothing. A name `Sagacity.wrap` declared is journaled all the same.
        unlisted: The reversibility every other tool is journaled with; IRREVERSIBLE (the
            default) makes each of its calls wait for a human's approval. Such a tool has
            no compensation: with COMPENSATABLE, a failed saga records COMPENSATION_FAILED
            for it and ends COMPENSATION_FAILED, naming it as still dirty.

    Raises:
        ConfigurationError: A tool is named twice, a compensation has the wrong signature,
            a name with a compensation is not a valid sagacity tool name, or the Sagacity
            already has a tool of that name with another compensation.
    """

    def __init__(
        self,
        sagacity: Sagacity,
        *,
        tools: Iterable[SagaTool] = (),
        compensations: Mapping[str, Callable[..., Any]] | None = None,
        irreversible: Collection[str] = (),
        read_only: Collection[str] = (),
        unlisted: Reversibility = Reversibility.IRREVERSIBLE,
    ) -> None:
        tools = list(tools)
        self.sagacity = sagacity
        self.unlisted = unlisted
        self.token = uuid.uuid4().hex[:16]
        """Tells this policy's marks in tool metadata from those of another SagaToolset."""
        self._journaled: dict[str, SagaTool] = {}
        """The tools given by `tools`, by name."""
        self._built: dict[tuple[str, Reversibility], SagaTool] = {}
        """The journaled tools of the other names, built on their first call."""
        self._reversibility: dict[str, Reversibility] = {}
        """The declared reversibility of tools not wrapped by `Sagacity.wrap`."""
        self._read_only = frozenset(read_only)
        compensations = dict(compensations or {})
        where: dict[str, str] = {}
        groups: list[tuple[str, Iterable[str]]] = [
            ("wrapped by Sagacity.wrap", [tool.name for tool in tools]),
            ("given a compensation", compensations),
            ("IRREVERSIBLE", irreversible),
            ("read-only", read_only),
        ]
        for group, names in groups:
            for name in names:
                if name in where:
                    raise ConfigurationError(
                        f"tool {name!r} is declared twice ({where[name]} and {group}); "
                        "declare each tool once"
                    )
                where[name] = group
        for tool in tools:
            if tool.owner is not sagacity:
                raise ConfigurationError(
                    f"tool {tool.name!r} was wrapped by another Sagacity; wrap it with the "
                    "Sagacity that journals this toolset"
                )
            self._journaled[tool.name] = journaled_tool(
                sagacity, tool.name, tool.description, tool.reversibility
            )
        for name, compensation in compensations.items():
            register_compensation(sagacity, name, compensation)
            self._reversibility[name] = Reversibility.COMPENSATABLE
        for name in irreversible:
            self._reversibility[name] = Reversibility.IRREVERSIBLE
        sagacity.add_classifier(classify_exception)

    def tool_for(self, name: str, tool_def: ToolDefinition) -> SagaTool | None:
        """The journaled tool a call of `name` runs through; None for a read-only tool.

        In order: a tool given by `tools`; a name given a compensation or declared
        IRREVERSIBLE here; a tool of this name wrapped by the Sagacity (its reversibility,
        and its compensation, which the walk finds by name); a read-only name; `unlisted`.
        """
        found = self._journaled.get(name)
        if found is not None:
            return found
        description = tool_def.description or ""
        reversibility = self._reversibility.get(name)
        if reversibility is None:
            wrapped = wrapped_tool(self.sagacity, name)
            if wrapped is not None:
                reversibility = wrapped.reversibility
                description = wrapped.description or description
            elif name in self._read_only:
                return None
            else:
                reversibility = self.unlisted
        found = self._built.get((name, reversibility))
        if found is None:
            found = journaled_tool(self.sagacity, name, description, reversibility)
            self._built[name, reversibility] = found
        return found

    def mark(self, name: str, tool_def: ToolDefinition) -> dict[str, JsonValue]:
        """What this policy records in the tool's metadata (never sent to the model)."""
        tool = self.tool_for(name, tool_def)
        return {
            "policy": self.token,
            "journaled": tool is not None,
            "reversibility": None if tool is None else tool.reversibility.value,
        }


def wrapped_tool(sagacity: Sagacity, name: str) -> SagaTool | None:
    """The tool `Sagacity.wrap` declared under `name`, if there is one."""
    try:
        return sagacity.tool(name)
    except ConfigurationError:
        return None


def register_compensation(sagacity: Sagacity, name: str, compensation: Callable[..., Any]) -> None:
    """Declare a foreign tool's compensation through `Sagacity.wrap`, which checks it now.

    The tool registered under `name` only carries the compensation: its calls run through
    the PydanticAI toolset. Declaring the same compensation again (a second agent, a
    copy of the capability) is a no-op.
    """
    if not _TOOL_NAME.fullmatch(name):
        raise ConfigurationError(
            f"PydanticAI tool {name!r} is given a compensation, but sagacity keeps "
            "compensations under tool names of 1 to 64 letters, digits, '_', '-' or '.'; "
            f"expose the tool under another name with toolset.renamed({{'new_name': {name!r}}})"
        )
    existing = wrapped_tool(sagacity, name)
    if existing is not None:
        if getattr(existing.func, _COMPENSATION_ATTRIBUTE, None) == compensation:
            return
        raise ConfigurationError(
            f"tool {name!r} is already wrapped by this Sagacity ({existing.func.__qualname__}); "
            "a PydanticAI tool given a compensation must not share its name with another tool"
        )

    def foreign_tool(**tool_args: Any) -> NoReturn:
        raise ConfigurationError(
            f"tool {name!r} belongs to a PydanticAI toolset and runs only through it; resume "
            "its saga with Sagacity.aresume_saga(saga_id, work), work re-running the agent"
        )

    foreign_tool.__name__ = name
    foreign_tool.__qualname__ = f"pydantic_ai_tool.{name}"
    setattr(foreign_tool, _COMPENSATION_ATTRIBUTE, compensation)
    sagacity.wrap(compensable(by=compensation, name=name)(foreign_tool))
