"""The worker: resumes each decided saga with the application's resumer, exactly once."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any

from sagacity._decisions import WORK, Decision, Resumer
from sagacity._history import SagaHistory
from sagacity._resume_decision import DecisionResume, is_async_resumer
from sagacity._sweeping import Escalator
from sagacity.errors import ConfigurationError, JournalError, SagaBusyError, SagacityError
from sagacity.worker._events import default_poll_interval
from sagacity.worker._health import WorkerHealth, write_health
from sagacity.worker._watch import JournalWatch, open_watch
from sagacity.workflows._resumer import WorkflowResumer
from sagacity.workflows._work import WORKFLOW

if TYPE_CHECKING:
    from sagacity.saga import Sagacity

__all__ = ["Worker", "WorkerHealth"]

_SHUFFLE = random.Random().shuffle
"""A generator of its own: the application's `random` state is the application's."""


Resumers = Resumer | Mapping[str, Resumer]
"""One resumer for every saga, or one per resumer name (see `Worker`)."""


class Worker:
    """Resumes each decided saga with the application's resumer, under the saga's lease.

    Any number of workers, in any number of processes sharing the database, resume each
    decision exactly once: the saga's lease decides who, and the journal is read again
    under it, so a worker that lost the race does nothing. A worker killed mid-resume
    leaves the lease to expire (`Sagacity(lease_ttl=...)`); another worker then resumes
    the saga again, where the journal replays what ran and refuses what is in doubt, so
    the approved call never runs twice.

    Which resumer continues a saga is read from its journal: the name its approval
    request recorded (`Decision.resumer`: an adapter's name, `"workflow"`, or `"work"` for
    plain code; see `pausing_as`).

    Args:
        sagacity: The Sagacity whose journal is watched; its tools (`wrap`) and
            compensations must be the application's, so that resumed calls and the
            compensation walk run here.
        resumer: How paused runs continue (see `resumer_for`). One `Resumer` continues
            every saga but workflow runs. A mapping from resumer names to resumers picks
            by `Decision.resumer`; a saga whose name has no entry is left alone (logged
            once, and listed in `WorkerHealth.unroutable`), never guessed. Workflow runs
            (`"workflow"`) are continued by the `WorkflowRuntime`s of this process unless
            the mapping names another. With None, or with no `"work"` entry in the
            mapping, a saga paused by plain code (`"work"`) is resumed by running its
            approved call with the stored input (`Sagacity.resume_saga(saga_id)`, no
            work), and a rejected one is compensated.
        poll_interval: Seconds between looks at the journal when nothing woke the
            worker: the latency on SQLite and in memory (default 0.2 s), the safety net
            under LISTEN/NOTIFY on PostgreSQL (default 5 s).
        listen: On PostgreSQL, use LISTEN/NOTIFY (True), poll only (False: behind
            PgBouncer in transaction mode), or decide by trying LISTEN (None).
        health_file: Where the worker writes its `WorkerHealth` as JSON at every
            heartbeat, every second (`sagacity worker --check-health FILE` checks it).
        rescan_interval: Seconds between full looks for every saga still waiting to be
            resumed (those a missed wake-up left, or a dead worker's).

    Raises:
        ConfigurationError: A resumer is not callable, a name is empty, or an interval is
            not positive.
    """

    def __init__(
        self,
        sagacity: Sagacity,
        resumer: Resumers | None = None,
        *,
        poll_interval: float | None = None,
        listen: bool | None = None,
        health_file: str | os.PathLike[str] | None = None,
        rescan_interval: float = 30.0,
    ) -> None:
        self.sagacity = sagacity
        self._single: Resumer | None = None
        self._named: dict[str, Resumer] = {}
        if isinstance(resumer, Mapping):
            for name, each in resumer.items():
                if not isinstance(name, str) or not name.strip():
                    raise ConfigurationError(
                        f"a resumer name must be a non-empty string, not {name!r}"
                    )
                self._named[name] = _checked(each, name)
        elif resumer is not None:
            self._single = _checked(resumer, "resumer")
        if poll_interval is not None and poll_interval <= 0:
            raise ConfigurationError(f"poll_interval must be positive, not {poll_interval}")
        if rescan_interval <= 0:
            raise ConfigurationError(f"rescan_interval must be positive, not {rescan_interval}")
        self.poll_interval = poll_interval
        self.listen = listen
        self.health_file = None if health_file is None else os.fspath(health_file)
        self.rescan_interval = rescan_interval
        self._resume = DecisionResume(sagacity)
        self._workflows = WorkflowResumer(sagacity)
        self._stopping = threading.Event()
        self._watch: JournalWatch | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._retry: dict[str, float] = {}
        """Sagas to look at again, by when (`time.monotonic()`): busy, or just failed."""
        self._failed_at: dict[str, int] = {}
        """Sagas whose resume raised, with their last seq then: retried once it moves."""
        self._reconciled_at: dict[str, int] = {}
        """The last seq of each saga whose doubts were put to reconcilers here."""
        self._unroutable: dict[str, str] = {}
        self._started = datetime.datetime.now(datetime.UTC)
        self._state = "starting"
        self._resumed = 0
        self._failed = 0
        self._resuming: str | None = None
        self._beats: threading.Thread | None = None

    def resumer_for(self, decision: Decision) -> Resumer | None:
        """The resumer that continues `decision`'s saga; None for the stored call.

        In order: the mapping's entry of the decision's resumer name; for a workflow gate
        (`"workflow"`), a `WorkflowResumer` over the runtimes of this process; the one
        resumer given; for plain code (`"work"`), None: the approved call runs with its
        stored input.

        Raises:
            LookupError: No resumer continues sagas paused under the decision's name.
        """
        found = self._named.get(decision.resumer)
        if found is not None:
            return found
        if decision.resumer == WORKFLOW:
            return self._workflows
        if self._single is not None or decision.resumer == WORK:
            return self._single
        raise LookupError(
            f"saga {decision.saga_id!r}: request {decision.request_id} was paused by "
            f"{decision.resumer!r}, and this worker has no resumer of that name (it has "
            f"{sorted(self._named) or 'none'}); give Worker a resumer for {decision.resumer!r}"
        )

    # -- running -----------------------------------------------------------------------

    def run(self, *, handle_signals: bool = True) -> None:
        """Resume decided sagas until `stop()` (or SIGTERM / SIGINT) is called.

        SIGTERM and SIGINT (from the main thread, with `handle_signals`) stop the worker
        cleanly: the resume under way finishes, nothing new starts, the health file says
        `stopped`, and `run` returns.
        """
        restore = self._install_signals() if handle_signals else {}
        self._stopping.clear()
        try:
            self._open()
            self._state = "running"
            self._beat()
            candidates: set[str] = set()
            next_rescan = time.monotonic()  # a full look first
            assert self._watch is not None
            while not self._stopping.is_set():
                try:
                    # What woke the worker first: a full look due now does not delay it.
                    self._work_through(candidates)
                    candidates = set()
                    if time.monotonic() >= next_rescan and not self._stopping.is_set():
                        everything = self._everything()
                        next_rescan = time.monotonic() + self.rescan_interval
                        self._work_through(everything)
                    if self._stopping.is_set():
                        break
                    now = time.monotonic()
                    due = min([next_rescan, *self._retry.values()], default=next_rescan)
                    assert self.poll_interval is not None
                    self._watch.wait(max(0.0, min(self.poll_interval, due - now)))
                    candidates = self._watch.changed() | self._due()
                except JournalError as error:
                    # The database is away (a restart, a failover): keep trying; what was
                    # decided meanwhile is found by the full look once it is back.
                    logger.warning("cannot read the journal (%s); trying again", error)
                    next_rescan = time.monotonic()
                    self._stopping.wait(self.poll_interval or 1.0)
        finally:
            self._state = "stopped"
            self._close()
            for signum, handler in restore.items():
                signal.signal(signum, handler)

    def run_once(self) -> int:
        """Act on every decision waiting now, then return how many were acted on."""
        self._stopping.clear()
        self._open()
        try:
            before = self._resumed
            self._work_through(self._everything())
            while self._retry and not self._stopping.is_set():
                time.sleep(max(0.0, min(self._retry.values()) - time.monotonic()))
                self._work_through(self._due())
            return self._resumed - before
        finally:
            self._close()

    def stop(self) -> None:
        """Ask the worker to stop once the resume under way (if any) has finished."""
        self._state = "stopping" if self._state != "stopped" else self._state
        self._stopping.set()
        if self._watch is not None:
            self._watch.interrupt()

    @property
    def health(self) -> WorkerHealth:
        """How the worker stands now."""
        return WorkerHealth(
            pid=os.getpid(),
            state=self._state,
            started_at=self._started,
            beat_at=datetime.datetime.now(datetime.UTC),
            wakeup="none" if self._watch is None else self._watch.wakeup,
            resumed=self._resumed,
            failed=self._failed,
            resuming=self._resuming,
            unroutable=tuple(sorted(self._unroutable)),
        )

    def resume(self, saga_id: str) -> bool:
        """Act on the decision saga `saga_id` waits for, if any; True if this worker did.

        False when there is none, or another worker acted on it first.

        Raises:
            SagaBusyError: Another worker holds the saga now.
            LookupError: The saga waits for a resumer name this worker has none for.
        """
        history = SagaHistory.of(saga_id, self.sagacity.journal.entries(saga_id))
        decision = self._resume.waiting(history)
        if decision is None and self._reconcilable(history):
            # An approved call killed mid-run is in doubt, so no decision waits; its tool's
            # reconciler here may settle it (did not land: the approval stands again).
            self.sagacity.reconcile(saga_id)
            history = SagaHistory.of(saga_id, self.sagacity.journal.entries(saga_id))
            self._reconciled_at[saga_id] = history.last_seq
            decision = self._resume.waiting(history)
        if decision is None:
            return False
        resumer = self.resumer_for(decision)
        self._resuming = saga_id
        try:
            if getattr(resumer, "takes_lease", False):
                assert resumer is not None
                self._call_outside(resumer, decision)
                self._resumed += 1
                logger.info(
                    "saga %r: request %s %s; resumed by %r",
                    saga_id,
                    decision.request_id,
                    decision.outcome.value,
                    decision.resumer,
                )
                return True
            if self._resume.needs_async(decision, resumer):
                if self._loop is None:
                    self._loop = asyncio.new_event_loop()
                result = self._loop.run_until_complete(
                    self._resume.aresume(decision, resumer, read=history)
                )
            else:
                result = self._resume.resume(decision, resumer, read=history)
        finally:
            self._resuming = None
        if result is None:
            return False
        self._resumed += 1
        logger.info(
            "saga %r: request %s %s; resumed: %s",
            saga_id,
            decision.request_id,
            decision.outcome.value,
            result.outcome.value,
        )
        return True

    # -- internals -----------------------------------------------------------------------

    def _reconcilable(self, history: SagaHistory) -> bool:
        """Whether the open saga has a doubt a reconciler here can ask about.

        Not again until the journal changes: an *unknown* is not asked over and over.
        """
        if history.ended is not None:
            return False
        if self._reconciled_at.get(history.saga_id) == history.last_seq:
            return False
        return any(
            call.in_doubt and self.sagacity.has_reconciler(call.intent.tool_name or "")
            for call in history.calls.values()
        )

    def _call_outside(self, resumer: Resumer, decision: Decision) -> None:
        """Call a resumer that takes the saga's lease itself, outside any saga."""
        if is_async_resumer(resumer):
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(resumer(decision))  # type: ignore[arg-type]
        else:
            resumer(decision)

    def _work_through(self, sagas: set[str]) -> None:
        order = list(sagas)
        _SHUFFLE(order)  # workers racing for one batch spread over it
        for saga_id in order:
            if self._stopping.is_set():
                return
            self._retry.pop(saga_id, None)
            self._try(saga_id)

    def _try(self, saga_id: str) -> None:
        try:
            if saga_id in self._failed_at:
                entries = self.sagacity.journal.entries(saga_id)
                if entries and entries[-1].seq == self._failed_at[saga_id]:
                    return  # nothing changed since it failed: a human or a rescan must
                del self._failed_at[saga_id]
            self.resume(saga_id)
            self._unroutable.pop(saga_id, None)
        except SagaBusyError:
            self._retry[saga_id] = time.monotonic() + _BUSY_RETRY
        except LookupError as unroutable:
            if saga_id not in self._unroutable:
                logger.error("%s", unroutable)
            self._unroutable[saga_id] = str(unroutable)
        except (SagacityError, Exception) as error:  # a resumer's failure ends up here
            self._failed += 1
            entries = self.sagacity.journal.entries(saga_id)
            self._failed_at[saga_id] = entries[-1].seq if entries else 0
            logger.error("saga %r: the resume failed: %s", saga_id, error, exc_info=error)

    def _due(self) -> set[str]:
        now = time.monotonic()
        return {saga_id for saga_id, at in self._retry.items() if at <= now}

    def _everything(self) -> set[str]:
        assert self._watch is not None
        # Reminders and escalations come due by time; an expiry's denial is the resume's.
        Escalator(self.sagacity).sweep(deny=False)
        now = self.sagacity.now()
        expired = {r.saga_id for r in self.sagacity.approvals.pending() if r.expired(now)}
        return self._watch.all_sagas() | expired

    def _open(self) -> None:
        if self._watch is None:
            self._watch = open_watch(self.sagacity.journal, listen=self.listen)
            if self.poll_interval is None:
                self.poll_interval = default_poll_interval(self._watch)
        if self.health_file is not None and self._beats is None:
            self._beats = threading.Thread(target=self._beating, name="sagacity-worker-health")
            self._beats.daemon = True
            self._beats.start()

    def _close(self) -> None:
        self._stopping.set()
        if self._beats is not None:
            self._beats.join()
            self._beats = None
        self._beat()
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def _beating(self) -> None:
        while not self._stopping.wait(_BEAT):
            self._beat()

    def _beat(self) -> None:
        if self.health_file is not None:
            try:
                write_health(self.health_file, self.health)
            except OSError as error:
                logger.warning("cannot write the worker health to %r: %s", self.health_file, error)

    def _install_signals(self) -> dict[int, _Handler]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def stop(signum: int, frame: FrameType | None) -> None:
            logger.info("signal %s: stopping once the resume under way has finished", signum)
            self.stop()

        restore: dict[int, _Handler] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            restore[signum] = signal.signal(signum, stop)
        return restore


logger = logging.getLogger("sagacity.worker")

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None
"""What `signal.signal` returns and takes."""

_BUSY_RETRY = 0.5
"""Seconds before a saga another worker held is looked at again."""
_BEAT = 1.0
"""Seconds between heartbeats in the health file."""


def _checked(resumer: object, name: str) -> Resumer:
    if not callable(resumer):
        raise ConfigurationError(f"resumer {name!r} is not callable: {resumer!r}")
    return resumer
