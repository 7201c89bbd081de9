"""LangGraph's control flow: its exceptions pass through, and approvals pause the graph."""

from __future__ import annotations

import threading
import warnings
from typing import NoReturn

from langchain_core.runnables.config import var_child_runnable_config
from langgraph.checkpoint.memory import InMemorySaver, PersistentDict
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.errors import GraphBubbleUp
from langgraph.types import interrupt

from sagacity.approval import ApprovalRequest
from sagacity.errors import ApprovalError, SagacityWarning
from sagacity.journal import JsonValue
from sagacity.tools import FailureKind

__all__ = [
    "APPROVAL_INTERRUPT",
    "INTERRUPT_LOCK",
    "InMemoryCheckpointerWarning",
    "can_interrupt",
    "classify_langgraph_error",
    "interrupt_value",
    "pause_graph",
    "run_provenance",
    "warn_if_in_memory",
]

APPROVAL_INTERRUPT = "sagacity.approval"
"""The `kind` in the value of every interrupt sagacity raises to wait for an approval."""


def classify_langgraph_error(error: BaseException) -> FailureKind | None:
    """Classify LangGraph's `GraphBubbleUp` as control flow, and nothing else.

    An `interrupt()`, a `Command(graph=PARENT)` or a drain request raised inside a tool
    is journaled FAILED of kind `control_flow` and passed on: it does not fail the saga,
    and as the tool may have acted before it raised, the call is in doubt until it runs
    again under its call id (LangGraph re-runs the node on resume).
    """
    return FailureKind.CONTROL_FLOW if isinstance(error, GraphBubbleUp) else None


class InMemoryCheckpointerWarning(SagacityWarning):
    """A graph paused for approval under a checkpointer that lives only in this process.

    The approval itself is journaled and can be given from anywhere, but the graph's
    thread (its messages, the paused call) is in this process's memory: resumed from
    another process, or after a restart, the thread starts anew and the paused call is
    never asked again. Compile the graph with a persistent checkpointer.
    """


def _checkpointer() -> object | None:
    config = var_child_runnable_config.get()
    if config is None:
        return None
    configurable = config.get("configurable") or {}
    return configurable.get(CONFIG_KEY_CHECKPOINTER)


def run_provenance() -> dict[str, str | None]:
    """What LangGraph's config says of the run making a call, for `initiated_by`.

    `thread_id`: the `configurable` thread the run checkpoints under (what a resume names).
    A tool's config holds no run id of the graph's run (the `run_id` given to `invoke` is
    its root run's, not passed down) and no model: neither is recorded.
    """
    config = var_child_runnable_config.get()
    configurable = (config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    return {"thread_id": None if thread is None else str(thread)}


def can_interrupt() -> bool:
    """Tell whether this call runs in a LangGraph node whose graph has a checkpointer.

    Only there can `interrupt()` pause the run and `Command(resume=...)` resume it. A
    graph run puts its checkpointer in the config of every node it runs; a tool invoked
    outside a graph, or in a graph compiled without one, finds none.
    """
    return _checkpointer() is not None


def warn_if_in_memory(request: ApprovalRequest) -> None:
    """Warn when the graph about to pause for `request` keeps its thread in memory only.

    `InMemorySaver` (alias `MemorySaver`) holds the paused thread in this process; one
    built with `factory=PersistentDict` writes it to a file and is not warned about.
    Given here, when the pause happens, because that is the last moment the run can be
    saved: after this process exits, `Command(resume=...)` elsewhere finds no thread.
    """
    saver = _checkpointer()
    if isinstance(saver, InMemorySaver) and not isinstance(saver.storage, PersistentDict):
        warnings.warn(
            InMemoryCheckpointerWarning(
                f"saga {request.saga_id!r}: {request.tool_name!r} (call {request.call_id!r}) "
                f"paused the graph for approval request {request.request_id!r} under "
                f"LangGraph's {type(saver).__name__}, which keeps the thread in this process "
                "only: resumed from another process or after a restart, the thread starts "
                "anew and the paused call is lost. Compile the graph with a persistent "
                "checkpointer: SqliteSaver (langgraph-checkpoint-sqlite, in the 'langchain' "
                "extra) or PostgresSaver (langgraph-checkpoint-postgres)."
            ),
            stacklevel=2,
        )


def interrupt_value(
    request: ApprovalRequest | None,
    *,
    saga_id: str,
    tool_name: str,
    call_id: str | None,
    refused: ApprovalError | None = None,
) -> dict[str, JsonValue]:
    """The value of the interrupt that waits for `request`: what the approver must see.

    It is `{"kind": APPROVAL_INTERRUPT, **request.to_json(), "refused": ...}`. `refused`
    says why an earlier resume was refused. When no request is stored any more (it was
    rejected, or the saga ended), `request` is None and the value names the saga, tool
    and call, with `request_id` None.
    """
    described: dict[str, JsonValue] = (
        {"request_id": None, "saga_id": saga_id, "call_id": call_id, "tool_name": tool_name}
        if request is None
        else request.to_json()
    )
    return {
        "kind": APPROVAL_INTERRUPT,
        **described,
        "refused": None if refused is None else f"{type(refused).__name__}: {refused}",
    }


INTERRUPT_LOCK = threading.Lock()
"""Held around the `interrupt()` calls sagacity makes.

`interrupt()` numbers a task's calls with a counter and hands each the resume value of
its number (`langgraph/types.py`, `interrupt`); two threads of one `ToolNode` calling it
at once can each take the other's number. sagacity's own calls take turns.
"""


def pause_graph(value: dict[str, JsonValue]) -> NoReturn:
    """Pause the graph with an interrupt carrying `value`.

    In a node that was resumed, `interrupt()` first hands back the resume values given
    for this task's earlier interrupts, one per call. They were read before the call
    got here (a "no" among them was honoured), so it asks again until LangGraph pauses.
    """
    with INTERRUPT_LOCK:
        while True:
            interrupt(value)
