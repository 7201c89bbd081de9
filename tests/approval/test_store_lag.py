"""A stored request the journal already answered does not keep its saga waiting.

A worker killed after an approved call's EXECUTED but before the request's stored copy is
deleted leaves that copy behind. The journal is what says the request was used: the next
run ends the saga instead of reporting it waiting for a decision already made.
"""

from __future__ import annotations

import pytest

from sagacity import Phase, Sagacity, SagaOutcome
from tests.approval.test_approval import SAGA, Waiting, waiting_saga


class Killed(BaseException):
    """The worker dies here."""


def test_a_used_request_left_in_the_store_is_not_pending(
    sagacity: Sagacity, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting: Waiting = waiting_saga(sagacity)
    sagacity.approve(SAGA, approver="alice@treasury")

    def die(_request: object) -> None:
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(sagacity.approval, "consume", die)
        with pytest.raises(Killed):
            sagacity.resume_saga(SAGA)
    assert waiting.wire_ran() == 1
    assert sagacity.approvals.pending(SAGA) != []  # the stored copy outlived the worker

    assert sagacity.pending(SAGA) == []
    result = sagacity.resume_saga(
        SAGA, lambda: waiting.tools["send_wire_transfer"](amount="900.00", to="ACME")
    )
    assert result.outcome is SagaOutcome.COMPLETED
    assert waiting.wire_ran() == 1
    assert [e.phase for e in sagacity.history(SAGA)][-1] is Phase.ENDED
