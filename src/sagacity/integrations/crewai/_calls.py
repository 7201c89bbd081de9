"""Which call a CrewAI tool call is: its call id, chosen from the saga's journal.

CrewAI hands a tool neither the model's tool-call id (native function calling keeps it
in the executor) nor anything that tells its automatic re-runs from a new call: the
ReAct path calls the same tool with the same input again after an exception, up to six
times. So the adapter names each call from the journal of the open saga:

- an open request of the tool for this exact input (AWAITING_APPROVAL, not yet run):
  its call id, so that a resumed crew's call finds its own request and approval;
- the latest call of the tool with this exact input that ran (EXECUTED): its call id
  when repeats are replayed (`replay_repeats=True`, CrewAI's cache made durable and
  bounded to the saga): the journaled result is returned and nothing runs again;
- the latest call of the tool with this exact input that failed: its call id, so a
  re-run is the same call (and hands the tool the same idempotency key). A call whose
  outcome is unknown is then refused by the core (`InDoubtError`), never run twice; a
  known failure that failed the saga is refused here and journaled REFUSED (reason
  `crewai_rerun`): the saga will be compensated, so running it again is an effect to undo;
- otherwise a new id, `name#n`, the first `n` the journal has not used.
"""

from __future__ import annotations

from typing import Any

from sagacity.adapter import CallState, SagaScope, payload_of
from sagacity.errors import SagaStateError, SerializationError
from sagacity.journal import sha256_hex
from sagacity.tools import FailureKind, SagaTool

__all__ = ["RERUN_REASON", "choose_call_id"]

RERUN_REASON = "crewai_rerun"
"""The REFUSED reason of a CrewAI re-run of a call that failed the saga."""

_RETRYABLE = FailureKind.RETRYABLE.value


def choose_call_id(
    scope: SagaScope, tool: SagaTool, kwargs: dict[str, Any], *, replay_repeats: bool
) -> str | None:
    """Return the call id for this call of `tool` in the open saga (see the module).

    None leaves the id to the core: the arguments have no journal form, and the core's
    own call refuses them with the error that names the argument.

    Raises:
        SagaStateError: A re-run of a call that failed the saga; journaled REFUSED.
    """
    try:
        digest = sha256_hex(tool.input_of((), kwargs))
    except (SerializationError, TypeError):
        return None
    with scope.lock:
        history = scope.history
        latest: CallState | None = None
        for state in history.latest_call.values():
            if (
                state.intent.tool_name == tool.name
                and _hash(state.intent) == digest
                and (latest is None or state.intent.seq > latest.intent.seq)
            ):
                latest = state
        asked_seq, asked_id = 0, None
        for asked_call, asked in history.asked.items():
            if asked.tool_name == tool.name and _hash(asked) == digest and asked.seq > asked_seq:
                asked_seq, asked_id = asked.seq, asked_call
        if asked_id is not None and (latest is None or asked_seq > latest.intent.seq):
            return asked_id
        if latest is not None:
            prior = latest.intent.call_id
            assert prior is not None  # every INTENT carries its call id
            if latest.executed:
                if replay_repeats:
                    return prior
            elif latest.in_doubt or latest.kind == _RETRYABLE or not scope.failed:
                return prior  # the core refuses a call in doubt, retries the others
            else:
                _refuse_rerun(scope, tool, prior, latest)
        used = set(history.latest_call) | set(history.asked)
        while True:
            call_id = scope.next_call_id(tool.name)
            if call_id not in used:
                return call_id


def _refuse_rerun(scope: SagaScope, tool: SagaTool, call_id: str, failed: CallState) -> None:
    journaled = payload_of(failed.outcome).get("error") if failed.outcome else None
    message = journaled.get("message") if isinstance(journaled, dict) else None
    error = SagaStateError(
        f"saga {scope.saga_id!r}: call {call_id!r} of tool {tool.name!r} failed at seq "
        f"{failed.intent.seq} ({message}) and the saga will be compensated; CrewAI's re-run "
        "of it is not run. Declare retries on the tool (compensable(retries=...)) for "
        "sagacity to run them"
    )
    scope.refuse(error, tool_name=tool.name, call_id=call_id, reason=RERUN_REASON)
    raise error


def _hash(entry: Any) -> str:
    return sha256_hex(payload_of(entry).get("input"))
