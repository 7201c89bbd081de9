"""DBOS steps keep their saga's lease between calls, and a killed process is still recovered.

`SagaSteps(linger=...)`: each call parks the lease for the workflow's next step, which
adopts it with no commit; the saga's end frees it. A process SIGKILLed with its lease
parked is recovered by a new process, which takes the saga over at once.
"""

from __future__ import annotations

import collections
import math
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbos import SetWorkflowID

from sagacity import ConfigurationError, Phase, Sagacity
from sagacity.audit import verify
from sagacity.integrations.dbos import SagaSteps
from sagacity.journal import SagaLease
from tests._postgres import admin_connection, require_server
from tests._shop import Shop
from tests.integrations.dbos._charges_process import CHARGES
from tests.integrations.dbos._workflows import STEPS, charges_workflow
from tests.processes._kill import running_until

PROCESS = "tests.integrations.dbos._charges_process"


@pytest.fixture
def steps_key(dbos_schema: str) -> Iterator[str]:
    key = uuid.uuid4().hex[:8]
    yield key
    STEPS.pop(key, None)


@pytest.mark.parametrize("linger", [-0.5, math.inf, "2"])
def test_a_bad_linger_is_refused(linger: Any) -> None:
    """Negative, infinite, or not a number: refused when the steps are made."""
    with (
        Sagacity.from_url("memory://") as sagacity,
        pytest.raises(ConfigurationError, match="SagaSteps: linger must be a finite number"),
    ):
        SagaSteps(sagacity, [Shop()], linger=linger)


def test_a_workflow_of_many_calls_takes_its_saga_s_lease_once(
    steps_key: str, sagacity: Sagacity, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twelve calls and the end: one take, no release (the end frees it), all journaled."""
    takes: list[str] = []
    releases: list[SagaLease] = []
    journal = sagacity.journal
    take, release = journal.acquire_lease, journal.release_lease

    def counted_take(saga_id: str, *args: Any, **kwargs: Any) -> SagaLease:
        takes.append(saga_id)
        return take(saga_id, *args, **kwargs)

    def counted_release(lease: SagaLease) -> None:
        releases.append(lease)
        release(lease)

    monkeypatch.setattr(journal, "acquire_lease", counted_take)
    monkeypatch.setattr(journal, "release_lease", counted_release)
    shop = Shop()
    STEPS[steps_key] = SagaSteps(sagacity, [shop])
    sid = f"charges-{uuid.uuid4().hex[:10]}"
    with SetWorkflowID(sid):
        done = charges_workflow(steps_key, CHARGES)
    assert done == [f"ch-{n}.00" for n in range(CHARGES)]
    assert takes == [sid]
    assert releases == []
    entries = sagacity.history(sid)
    assert [e.phase for e in entries] == [Phase.INTENT, Phase.EXECUTED] * CHARGES + [Phase.ENDED]
    assert entries[-1].payload["outcome"] == "COMPLETED"
    assert shop.calls["charge_card"] == CHARGES
    assert verify(journal, sid).ok


@pytest.fixture
def system_schema() -> Iterator[str]:
    """A DBOS system schema for this test's processes alone."""
    require_server()
    schema = f"sagacity_dbos_{uuid.uuid4().hex[:10]}"
    yield schema
    with admin_connection() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.slow
@pytest.mark.parametrize("kill_after", [1, 7, CHARGES])
def test_a_process_killed_with_its_lease_parked_is_recovered_by_a_new_one(
    system_schema: str, shared_store_url: str, tmp_path: Path, kill_after: int
) -> None:
    """SIGKILL after a call returned, its lease parked for ten minutes; a new process recovers.

    The new process takes the saga over at once (its holder is gone), TAKEN_OVER after the
    dead one's entries, which stay as they were; the call DBOS had not checkpointed replays
    from the journal; every charge happened once, and the saga completes.
    """
    saga_id = f"charges-{uuid.uuid4().hex[:8]}"
    effects = tmp_path / "effects.txt"
    effects.touch()
    command = [sys.executable, "-m", PROCESS, system_schema, shared_store_url, str(effects)]
    with running_until([*command, str(kill_after), saga_id, "start"], "ready") as first:
        assert first.wait(120) == -9, "the process was never killed"
    with Sagacity.from_url(shared_store_url) as sagacity:
        before = sagacity.history(saga_id)
    assert [e.phase for e in before] == [Phase.INTENT, Phase.EXECUTED] * kill_after
    with running_until([*command, "-", saga_id], "ready") as second:
        assert second.stdout is not None
        assert second.stdout.readline() == "ended\n"
        assert second.wait(60) == 0
    with Sagacity.from_url(shared_store_url) as sagacity:
        entries = sagacity.history(saga_id)
        assert verify(sagacity.journal, saga_id).ok
    assert entries[: len(before)] == before
    assert entries[len(before)].phase is Phase.TAKEN_OVER
    rest = [Phase.INTENT, Phase.EXECUTED] * (CHARGES - kill_after) + [Phase.ENDED]
    assert [e.phase for e in entries[len(before) + 1 :]] == rest
    assert entries[-1].payload["outcome"] == "COMPLETED"
    charges = effects.read_text(encoding="utf-8").splitlines()
    assert collections.Counter(charges) == {f"charge {n}.00": 1 for n in range(CHARGES)}
