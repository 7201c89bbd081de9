"""The ADK resumer: a decision answers ADK's confirmation request in the paused session.

`sagacity.Worker` calls it inside the saga's re-opened scope, under its lease. It sends
the paused session the `ToolConfirmation` that answers the decided call's
`adk_request_confirmation`, through the application's `Runner`:

- approved: `confirmed=True`. ADK runs the call again; sagacity runs it only through its
  approval check (the confirmation alone decides nothing), and replays it from the
  journal if it ran already (a resume killed after the call).
- rejected or expired: `confirmed=False`, with the reason as payload: ADK tells the model
  the call was rejected and never runs it; the worker then runs the compensation walk.
"""

from __future__ import annotations

from collections.abc import Callable

from google.adk.agents.run_config import RunConfig
from google.adk.events import Event
from google.adk.runners import Runner

from sagacity import Decision
from sagacity.errors import SagaNotFoundError
from sagacity.integrations.adk._confirm import confirmation_message

__all__ = ["RESUMER", "AdkResumer"]

RESUMER = "adk"
"""The resumer name an ADK pause journals with its approval request (`Decision.resumer`)."""

SessionFor = Callable[[Decision], tuple[str, str]]
"""Finds the paused session, as `(user_id, session_id)`, from the decision."""


class AdkResumer:
    """Continues an ADK session paused for confirmation: answers it through the `Runner`.

    Args:
        runner: The application's `Runner`, with the persistent session service the run
            paused in (ADK's `DatabaseSessionService`, say).
        user_id: The user whose session it is, when every saga's is the same user's.
        session: Finds `(user_id, session_id)` from a decision, instead of `user_id`;
            by default the session id is the saga id.
        run_config: The `RunConfig` of the resumed turn.
    """

    def __init__(
        self,
        runner: Runner,
        *,
        user_id: str | None = None,
        session: SessionFor | None = None,
        run_config: RunConfig | None = None,
    ) -> None:
        if (user_id is None) == (session is None):
            raise ValueError("give AdkResumer either user_id or session, not both or neither")
        self.runner = runner
        self.user_id = user_id
        self._session = session
        self.run_config = run_config

    def session_for(self, decision: Decision) -> tuple[str, str]:
        """`(user_id, session_id)` of the session `decision` answers."""
        if self._session is not None:
            return self._session(decision)
        assert self.user_id is not None
        return self.user_id, decision.saga_id

    async def __call__(self, decision: Decision) -> list[Event]:
        """Answer the decided call's confirmation; returns the resumed turn's events.

        Raises:
            SagaNotFoundError: The runner's session service has no such session.
            ApprovalNotFoundError: ADK asked no confirmation for the call in it.
        """
        user_id, session_id = self.session_for(decision)
        session = await self.runner.session_service.get_session(
            app_name=self.runner.app_name, user_id=user_id, session_id=session_id
        )
        if session is None:
            raise SagaNotFoundError(
                f"saga {decision.saga_id!r}: ADK app {self.runner.app_name!r} has no session "
                f"{session_id!r} of user {user_id!r} to resume; give AdkResumer the session "
                "the run paused in"
            )
        reason = None if decision.approved else (decision.reason or decision.outcome.value)
        message = confirmation_message(
            session, decision.call_id, confirmed=decision.approved, payload=reason
        )
        return [
            event
            async for event in self.runner.run_async(
                user_id=user_id,
                session_id=session_id,
                new_message=message,
                run_config=self.run_config,
            )
        ]
