"""Provenance of a decision: what initiated the call, and why the approver approved it.

Each AWAITING_APPROVAL records `initiated_by`: the agent (the adapter that ran the call),
the human who started the saga, or plain code. Each APPROVED records the approver's own
`justification` when they gave one; a tool declared `justification_required=True` has
its requests record `justification_required`, and an approval without one is refused.
Both are read back from the journal, never from the request store. Each APPROVED and
REJECTED records `via`: the channel the decision came through ("python", "cli", "api",
"inbox", "email", "slack", or an application's own name).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import re
from collections.abc import Iterator

from sagacity._decisions import WORK
from sagacity._history import SagaHistory, payload_of
from sagacity.annotations import Reversibility
from sagacity.approval._request import ApprovalRequest
from sagacity.errors import ApprovalError, ConfigurationError
from sagacity.journal import JsonValue

__all__ = [
    "AGENT_ADAPTERS",
    "AGENT_FIELDS",
    "MAX_JUSTIFICATION",
    "PYTHON_VIA",
    "agent_run",
    "check_justification_required",
    "checked_justification",
    "checked_via",
    "initiated_of",
    "initiator",
    "with_provenance",
]

AGENT_ADAPTERS = frozenset({"adk", "crewai", "langgraph", "openai_agents", "pydantic_ai"})
"""The resumer names of adapters whose calls an agent's model made."""

MAX_JUSTIFICATION = 2000
"""The longest justification accepted, in characters: a reason, not a document."""


PYTHON_VIA = "python"
"""The channel of a decision made by calling `Sagacity.approve` or `reject` in Python."""

_VIA = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def checked_via(via: object) -> str:
    """The channel to journal with a decision: `via`, or "python" when None.

    Raises:
        ValueError: It is not a short lowercase name (`^[a-z][a-z0-9_-]{0,31}$`); nothing
            is journaled.
    """
    if via is None:
        return PYTHON_VIA
    if not isinstance(via, str) or _VIA.fullmatch(via) is None:
        shown = via if not isinstance(via, str) else via[:40] + ("…" if len(via) > 40 else "")
        raise ValueError(
            f"via must name the channel of the decision as a short lowercase name "
            f"(^[a-z][a-z0-9_-]{{0,31}}$, such as 'cli' or 'slack'), not {shown!r}"
        )
    return via


AGENT_FIELDS = ("model", "run_id", "thread_id", "trace_id", "invocation_id", "agent")
"""What an adapter may record of the agent run that made a call, in `initiated_by`."""

_MAX_AGENT_FIELD = 200
"""The longest agent field kept, in characters: an identifier, not a document."""

_agent_var: contextvars.ContextVar[dict[str, JsonValue] | None] = contextvars.ContextVar(
    "sagacity_agent_run", default=None
)


@contextlib.contextmanager
def agent_run(**fields: object) -> Iterator[None]:
    """Record, for the requests asked inside the block, what the framework says of its run.

    An adapter wraps the call of a tool in it with what its framework exposes at that
    call: `model` (the model's name), `run_id`, and where the framework has them
    `thread_id`, `trace_id`, `invocation_id` and `agent` (the agent's name). A field the
    framework does not give is left out (None): nothing is guessed. Each value is kept as
    text of at most 200 characters; each request of an agent adapter journals them in its
    `initiated_by`, beside the adapter's name.

    Raises:
        ValueError: A field is not one of `AGENT_FIELDS`.
    """
    unknown = sorted(set(fields) - set(AGENT_FIELDS))
    if unknown:
        raise ValueError(f"agent_run records {list(AGENT_FIELDS)}, not {unknown}")
    kept: dict[str, JsonValue] = {}
    for name in AGENT_FIELDS:
        value = fields.get(name)
        if value is None:
            continue
        text = value if isinstance(value, str) else str(value)
        if text.strip():
            kept[name] = text[:_MAX_AGENT_FIELD]
    token = _agent_var.set(kept or None)
    try:
        yield
    finally:
        _agent_var.reset(token)


def initiator(resumer: str | None, started_by: str | None) -> dict[str, JsonValue]:
    """What initiated a call that asks now, for its AWAITING_APPROVAL's `initiated_by`.

    An adapter's call was made by the agent's model (with what `agent_run` recorded of
    its run: model, run id); any other call by the human who started the saga
    (`started_by`) when one is named, else by the application's code (`via` the workflow,
    engine or plain work that ran it).
    """
    if resumer in AGENT_ADAPTERS:
        return {"by": "agent", "adapter": resumer, **(_agent_var.get() or {})}
    if started_by is not None:
        return {"by": "human", "principal": started_by}
    return {"by": "code", "via": resumer or WORK}


def initiated_of(history: SagaHistory, request: ApprovalRequest) -> dict[str, JsonValue] | None:
    """The `initiated_by` its AWAITING_APPROVAL journaled; None when it records none."""
    awaiting = history.awaiting.get(request.request_id)
    initiated = payload_of(awaiting).get("initiated_by") if awaiting is not None else None
    return initiated if isinstance(initiated, dict) else None


def with_provenance(
    request: ApprovalRequest, history: SagaHistory, required: set[str]
) -> ApprovalRequest:
    """`request` with what its AWAITING_APPROVAL records of its call's initiator."""
    awaiting = history.awaiting.get(request.request_id)
    payload = payload_of(awaiting) if awaiting is not None else {}
    initiated = payload.get("initiated_by")
    return dataclasses.replace(
        request,
        initiated_by=initiated if isinstance(initiated, dict) else None,
        justification_required=_required(payload, request.tool_name, required),
    )


def checked_justification(
    request: ApprovalRequest,
    history: SagaHistory,
    justification: object,
    required: set[str],
) -> str | None:
    """The justification to journal with an approval of `request`; None when none is given.

    Raises:
        ApprovalError: It is not text, is longer than `MAX_JUSTIFICATION`, or is missing
            (or blank) while the tool requires one. Nothing is journaled.
    """
    where = f"saga {history.saga_id!r}: request {request.request_id} for tool {request.tool_name!r}"
    if justification is not None and not isinstance(justification, str):
        raise ApprovalError(
            f"{where}: the justification must be text, not {type(justification).__name__}"
        )
    if justification is not None and len(justification) > MAX_JUSTIFICATION:
        raise ApprovalError(
            f"{where}: the justification is {len(justification)} characters; at most "
            f"{MAX_JUSTIFICATION} are kept. Shorten it"
        )
    given = justification if justification is not None and justification.strip() else None
    awaiting = history.awaiting.get(request.request_id)
    payload = payload_of(awaiting) if awaiting is not None else {}
    if given is None and _required(payload, request.tool_name, required):
        raise ApprovalError(
            f"{where}: the tool requires a justification with every approval; approve "
            "again saying why (justification=..., sagacity approve --justification, the "
            "inbox's justification field)"
        )
    return given


def _required(payload: dict[str, JsonValue], tool_name: str, required: set[str]) -> bool:
    # The journal's word, or this process's declaration: either one requiring it wins.
    return payload.get("justification_required") is True or tool_name in required


def check_justification_required(
    value: object, reversibility: Reversibility, name: str, where: str
) -> None:
    """Refuse a `justification_required` that is not a bool, or that could never apply.

    Raises:
        ConfigurationError: It is not True or False, or it is True on a tool that is not
            IRREVERSIBLE (such a tool is never approved).
    """
    if not isinstance(value, bool):
        raise ConfigurationError(
            f"{where}: tool {name!r}: justification_required must be True or False, not {value!r}"
        )
    if value and reversibility is not Reversibility.IRREVERSIBLE:
        raise ConfigurationError(
            f"{where}: tool {name!r} declares justification_required but is "
            f"{reversibility.name}; only IRREVERSIBLE calls are approved, so declare it "
            "IRREVERSIBLE or drop justification_required"
        )
