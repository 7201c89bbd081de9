"""Reconcilers: how a tool says whether its call (or its compensation) in doubt took effect.

A reconciler is declared on the tool (`compensable(reconcile=..., reconcile_compensation=...)`)
and checked at `wrap()`. It is given a `ReconcileContext` and returns a `Reconciled`:
*landed* (with the result a compensation needs), *did not land*, or *unknown*, each with
optional `Evidence` (a reference and the SHA-256 of what was read). It asks; it never
acts: a reconciler that charges, refunds or retries defeats the journal.

This module holds the records and the asking (bounded by the reconciler's timeout, sync
or async); `_reconciling` journals the answers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import enum
import hashlib
import inspect
import re
import threading
from collections.abc import Callable
from typing import Any

from sagacity.annotations import Reversibility, ToolDeclaration
from sagacity.errors import ConfigurationError
from sagacity.journal import JsonValue, canonical_bytes

__all__ = [
    "Evidence",
    "ReconcileContext",
    "ReconcileSubject",
    "Reconciled",
    "Reconciler",
    "ReconcilerFailure",
    "ReconcilerRegistry",
    "Verdict",
    "aask",
    "ask",
    "check_evidence",
    "check_reconcile_timeout",
    "resolve_reconcilers",
]

_SHA256 = re.compile(r"[0-9a-f]{64}")
_MAX_REFERENCE = 1000


class Verdict(enum.Enum):
    """A reconciler's answer about one call or compensation in doubt."""

    LANDED = "landed"
    """The effect exists: the call counts as EXECUTED (a compensation as COMPENSATED)."""
    DID_NOT_LAND = "did_not_land"
    """The effect does not exist: the call counts as not started (an approved call may
    run again under its approval; a compensation runs again)."""
    UNKNOWN = "unknown"
    """The reconciler cannot tell: the doubt stays for a human."""


class ReconcileSubject(enum.Enum):
    """What a reconciler is asked about."""

    CALL = "call"
    """The tool call itself: did its effect land?"""
    COMPENSATION = "compensation"
    """The call's compensation: did the undo land?"""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Evidence:
    """What a verdict rests on: a reference and the SHA-256 of what was read."""

    reference: str
    """Where to look: the provider's object id, a URL, a ticket (1 to 1000 characters)."""
    sha256: str
    """The SHA-256 of the response or document read, 64 lowercase hex digits."""

    @classmethod
    def of(cls, reference: str, content: bytes | str | JsonValue) -> Evidence:
        """Evidence for `reference`, hashing `content`.

        Bytes are hashed as they are, a string as UTF-8, any other JSON value as its
        canonical JSON (RFC 8785), so an auditor can recompute the digest.
        """
        if isinstance(content, bytes):
            data = content
        elif isinstance(content, str):
            data = content.encode()
        else:
            data = canonical_bytes(content)
        return cls(reference=reference, sha256=hashlib.sha256(data).hexdigest())

    def to_json(self) -> dict[str, JsonValue]:
        """The journaled form: `{"reference": …, "sha256": …}`."""
        return {"reference": self.reference, "sha256": self.sha256}


def check_evidence(reference: object, sha256: object, where: str) -> Evidence:
    """Evidence from a reference and a digest, refused unless both are well formed.

    Raises:
        ValueError: The reference is not a printable string of 1 to 1000 characters, or
            the digest is not 64 hex digits.
    """
    if (
        not isinstance(reference, str)
        or not reference.strip()
        or len(reference) > _MAX_REFERENCE
        or not reference.isprintable()
    ):
        raise ValueError(
            f"{where}: the evidence reference must be printable text of 1 to "
            f"{_MAX_REFERENCE} characters, not {reference!r}"
        )
    digest = sha256.lower() if isinstance(sha256, str) else sha256
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise ValueError(
            f"{where}: the evidence sha256 must be 64 hex digits, not {sha256!r}; compute "
            "it with Evidence.of(reference, content) or sha256sum"
        )
    return Evidence(reference=reference, sha256=digest)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Reconciled:
    """A reconciler's answer; build it with `landed`, `did_not_land` or `unknown`."""

    verdict: Verdict
    """What the reconciler found."""
    result: Any = None
    """For a call that landed: what the tool would have returned (the handle its
    compensation needs), converted to JSON like any result."""
    evidence: Evidence | None = None
    """What the verdict rests on, journaled with it."""
    reason: str | None = None
    """Why, in words (for `unknown`, what stopped the reconciler from telling)."""

    @classmethod
    def landed(
        cls, result: Any = None, *, evidence: Evidence | None = None, reason: str | None = None
    ) -> Reconciled:
        """The effect exists; `result` is what a compensation of it is given."""
        return cls(verdict=Verdict.LANDED, result=result, evidence=evidence, reason=reason)

    @classmethod
    def did_not_land(
        cls, *, evidence: Evidence | None = None, reason: str | None = None
    ) -> Reconciled:
        """The effect does not exist."""
        return cls(verdict=Verdict.DID_NOT_LAND, evidence=evidence, reason=reason)

    @classmethod
    def unknown(cls, reason: str | None = None, *, evidence: Evidence | None = None) -> Reconciled:
        """The reconciler cannot tell: a human settles the doubt."""
        return cls(verdict=Verdict.UNKNOWN, evidence=evidence, reason=reason)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ReconcileContext:
    """What a reconciler is given about the call or compensation in doubt."""

    saga_id: str
    """The saga."""
    tool_name: str
    """The tool."""
    call_id: str
    """The call: the idempotency key the tool was given (`sagacity.current_call()`)."""
    input: dict[str, JsonValue]
    """The exact JSON arguments the call ran with (a copy)."""
    attempt: int
    """Which attempt is in doubt: of the call (1 unless it was retried), or of its
    compensation."""
    subject: ReconcileSubject
    """Whether the call or its compensation is asked about."""
    result: JsonValue = None
    """For a compensation: the result the call returned, as journaled; None for a call."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Reconciler:
    """A reconciler bound to its tool and subject."""

    tool_name: str
    """The tool whose doubts it settles."""
    subject: ReconcileSubject
    """What it is asked about."""
    func: Callable[..., Any]
    """Takes one `ReconcileContext`; returns a `Reconciled` (or an awaitable of one)."""
    timeout: float
    """Seconds it may take."""

    @property
    def decided_by(self) -> str:
        """Who decided, as journaled: `reconciler:<tool>`."""
        return f"reconciler:{self.tool_name}"


class ReconcilerRegistry:
    """Reconcilers by tool name and subject, filled by `Sagacity.wrap`."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, ReconcileSubject], Reconciler] = {}

    def __bool__(self) -> bool:
        return bool(self._by_key)

    def register(self, reconciler: Reconciler) -> None:
        self._by_key[(reconciler.tool_name, reconciler.subject)] = reconciler

    def drop(self, tool_name: str) -> None:
        """Forget a tool's reconcilers (it was wrapped again without them)."""
        for subject in ReconcileSubject:
            self._by_key.pop((tool_name, subject), None)

    def get(self, tool_name: str, subject: ReconcileSubject) -> Reconciler | None:
        return self._by_key.get((tool_name, subject))


class ReconcilerFailure(Exception):
    """A reconciler raised, hung past its timeout, or answered something else."""

    def __init__(self, failure: str, message: str) -> None:
        super().__init__(message)
        self.failure = failure
        """`raised`, `timed_out` or `invalid_answer`, as journaled."""


def ask(reconciler: Reconciler, context: ReconcileContext) -> Reconciled:
    """Ask a reconciler from sync code, on a thread of its own, bounded by its timeout.

    A reconciler that hangs is left running (it only reads) in a daemon thread; an async
    one runs on a private loop there and is cancelled at the timeout.

    Raises:
        ReconcilerFailure: It raised, timed out, or did not return a `Reconciled`.
    """
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    variables = contextvars.copy_context()

    def target() -> None:
        try:
            answer = variables.run(reconciler.func, context)
            if inspect.isawaitable(answer):
                answer = asyncio.run(_bounded(answer, reconciler.timeout))
        except BaseException as error:  # handed to the asker
            future.set_exception(error)
        else:
            future.set_result(answer)

    threading.Thread(
        target=target, name=f"sagacity-reconciler-{reconciler.tool_name}", daemon=True
    ).start()
    done, _ = concurrent.futures.wait([future], timeout=reconciler.timeout)
    if not done:
        raise _timed_out(reconciler)
    try:
        answer = future.result()
    except TimeoutError as error:
        if str(error) == _BOUND:
            raise _timed_out(reconciler) from None
        raise _raised(reconciler, error) from error
    except Exception as error:
        raise _raised(reconciler, error) from error
    return _checked(reconciler, answer)


async def aask(reconciler: Reconciler, context: ReconcileContext) -> Reconciled:
    """Ask a reconciler from async code: an async one on this loop, a sync one on a thread.

    Raises:
        ReconcilerFailure: It raised, timed out, or did not return a `Reconciled`.
    """
    func = reconciler.func
    is_async = inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        getattr(func, "__call__", None)  # noqa: B004 - the object's own __call__
    )
    if not is_async:
        return await asyncio.to_thread(ask, reconciler, context)
    try:
        answer = await _bounded(func(context), reconciler.timeout)
    except TimeoutError as error:
        if str(error) == _BOUND:
            raise _timed_out(reconciler) from None
        raise _raised(reconciler, error) from error
    except Exception as error:
        raise _raised(reconciler, error) from error
    return _checked(reconciler, answer)


_BOUND = "sagacity: the reconciler's timeout"


async def _bounded(awaitable: Any, timeout: float) -> Any:
    scope = asyncio.timeout(timeout)
    try:
        async with scope:
            return await awaitable
    except TimeoutError:
        if scope.expired():
            raise TimeoutError(_BOUND) from None
        raise


def _checked(reconciler: Reconciler, answer: object) -> Reconciled:
    if not isinstance(answer, Reconciled) or not isinstance(answer.verdict, Verdict):
        raise ReconcilerFailure(
            "invalid_answer",
            f"the reconciler of tool {reconciler.tool_name!r} returned {answer!r:.200}, not a "
            "Reconciled (Reconciled.landed, did_not_land or unknown)",
        )
    if answer.evidence is not None and not isinstance(answer.evidence, Evidence):
        raise ReconcilerFailure(
            "invalid_answer",
            f"the reconciler of tool {reconciler.tool_name!r} gave evidence "
            f"{answer.evidence!r:.200}, not an Evidence",
        )
    if answer.evidence is not None:
        try:
            check_evidence(
                answer.evidence.reference,
                answer.evidence.sha256,
                f"the reconciler of tool {reconciler.tool_name!r}",
            )
        except ValueError as error:
            raise ReconcilerFailure("invalid_answer", str(error)) from None
    return answer


def _timed_out(reconciler: Reconciler) -> ReconcilerFailure:
    return ReconcilerFailure(
        "timed_out",
        f"the reconciler of tool {reconciler.tool_name!r} did not answer within "
        f"{reconciler.timeout:g}s",
    )


def _raised(reconciler: Reconciler, error: BaseException) -> ReconcilerFailure:
    return ReconcilerFailure(
        "raised",
        f"the reconciler of tool {reconciler.tool_name!r} raised {type(error).__name__}: {error}",
    )


def check_reconcile_timeout(timeout: object, name: str, where: str) -> float:
    """The declared `reconcile_timeout` in seconds, refused unless finite and above 0.

    Raises:
        ConfigurationError: It is not a positive finite number.
    """
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 < timeout < float("inf")
    ):
        raise ConfigurationError(
            f"{where}: tool {name!r}: reconcile_timeout must be a number of seconds above 0, "
            f"not {timeout!r}"
        )
    return float(timeout)


def resolve_reconcilers(
    declaration: ToolDeclaration,
    tool: Callable[..., Any],
    *,
    lookup: Callable[[str], Any],
    where: str,
) -> tuple[Reconciler, ...]:
    """The tool's reconcilers, found and checked at `wrap()` as `by` is.

    Raises:
        ConfigurationError: A name that names nothing, a callable that cannot take one
            `ReconcileContext`, a compensation reconciler on an IRREVERSIBLE tool, or a
            timeout that is not a positive number of seconds.
    """
    tool_name = declaration.name or tool.__name__
    asked = (
        (ReconcileSubject.CALL, declaration.reconcile, "reconcile"),
        (
            ReconcileSubject.COMPENSATION,
            declaration.reconcile_compensation,
            "reconcile_compensation",
        ),
    )
    if all(given is None for _, given, _ in asked):
        return ()
    timeout = check_reconcile_timeout(declaration.reconcile_timeout, tool_name, where)
    found: list[Reconciler] = []
    for subject, given, option in asked:
        if given is None:
            continue
        if (
            subject is ReconcileSubject.COMPENSATION
            and declaration.reversibility is Reversibility.IRREVERSIBLE
        ):
            raise ConfigurationError(
                f"{where}: tool {tool_name!r} is IRREVERSIBLE and declares {option}; it has no "
                "compensation for it to reconcile"
            )
        func = _reconciler_callable(given, option, tool_name, lookup=lookup, where=where)
        found.append(Reconciler(tool_name=tool_name, subject=subject, func=func, timeout=timeout))
    return tuple(found)


def _reconciler_callable(
    given: str | Callable[..., Any],
    option: str,
    tool_name: str,
    *,
    lookup: Callable[[str], Any],
    where: str,
) -> Callable[..., Any]:
    if isinstance(given, str):
        func = lookup(given)
        if func is None or not callable(func):
            raise ConfigurationError(
                f"{where}: tool {tool_name!r} names {option}={given!r}, which does not exist; "
                f"define {given}() or fix the name"
            )
    else:
        func = given
        bound = lookup(getattr(given, "__name__", ""))
        if getattr(bound, "__func__", None) is given:
            func = bound  # a function of the class body: use the instance's bound method
        if not callable(func):
            raise ConfigurationError(
                f"{where}: tool {tool_name!r}: {option}={given!r} is not callable"
            )
    what = f"{where}: {option} {getattr(func, '__qualname__', func)!r} of tool {tool_name!r}"
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        raise ConfigurationError(f"{what} is a generator; it must return a Reconciled")
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError) as error:
        raise ConfigurationError(f"{what} has no readable signature") from error
    kind = inspect.Parameter
    takes_one = any(
        p.kind in (kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD, kind.VAR_POSITIONAL)
        for p in parameters
    )
    required = [
        p
        for p in parameters
        if p.default is kind.empty and p.kind not in (kind.VAR_POSITIONAL, kind.VAR_KEYWORD)
    ]
    if not takes_one or len(required) > 1 or any(p.kind is kind.KEYWORD_ONLY for p in required):
        raise ConfigurationError(f"{what} must take one ReconcileContext and return a Reconciled")
    checked: Callable[..., Any] = func
    return checked
