"""Outcomes tell the truth: no saga ends clean while an effect may be live, on every backend.

Each test attacks the hot path as an outsider would: a call left in doubt, arguments with
no JSON form that the framework swallows, a tool that keeps failing, an exception whose
message cannot be stored, a generator tool, an id that cannot be shown.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from sagacity import (
    ConfigurationError,
    InvalidIdError,
    Phase,
    Reversibility,
    Sagacity,
    SagaOutcome,
    SagaStateError,
    SerializationError,
    compensable,
)
from sagacity.cli import main as cli
from sagacity.testing import FailOn
from tests._shop import Shop, journal_failure, journal_intent, phases, tools_of


class TestNeedsAttention:
    def test_a_call_in_doubt_never_ends_compensated(self, sagacity: Sagacity) -> None:
        """A failed saga with a call in doubt ends NEEDS_ATTENTION, not clean.

        Resolved by a human, the next walk undoes it and ends COMPENSATED.
        """
        shop = Shop(ship_fails=True)
        tools = tools_of(sagacity, shop)
        journal_intent(sagacity, "s", "reserve_inventory#1")  # a crash inside the call

        def work() -> None:
            with contextlib.suppress(RuntimeError):
                tools["ship"]("order-1")

        result = sagacity.saga("s", work)

        assert result.outcome is SagaOutcome.NEEDS_ATTENTION
        assert result.compensation is not None
        assert result.compensation.clean is False
        assert [ref.call_id for ref in result.compensation.in_doubt] == ["reserve_inventory#1"]
        ended = sagacity.history("s")[-1]
        assert ended.payload["outcome"] == "NEEDS_ATTENTION"
        assert ended.payload["in_doubt"] == ["reserve_inventory#1"]

        sagacity.resolve("s", "reserve_inventory#1", executed=True, result="res-9", by="ops")
        again = sagacity.compensate("s")
        assert again.outcome is SagaOutcome.COMPENSATED
        assert shop.log == ["release res-9"]
        assert sagacity.history("s")[-1].payload["outcome"] == "COMPENSATED"

    def test_the_cli_lists_it_until_it_is_resolved(
        self, tmp_path: Any, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`sagacity sagas --status NEEDS_ATTENTION` names the saga until a human settles it."""
        database = str(tmp_path / "s.db")
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        tools = tools_of(sagacity, Shop(ship_fails=True))
        journal_intent(sagacity, "s", "reserve_inventory#1")
        sagacity.saga("s", lambda: tools["ship"]("o"))

        assert cli(["sagas", "--status", "NEEDS_ATTENTION", "--database", database]) == 0
        listed = capsys.readouterr().out.splitlines()
        assert [line.split()[:2] for line in listed[1:]] == [["s", "NEEDS_ATTENTION"]]
        sagacity.resolve("s", "reserve_inventory#1", executed=False, by="ops")
        sagacity.compensate("s")
        cli(["sagas", "--status", "NEEDS_ATTENTION", "--database", database])
        assert capsys.readouterr().out.splitlines() == ["no sagas match"]
        sagacity.close()


class Billing:
    def __init__(self, fails: FailOn | None = None, error: type[Exception] = ConnectionError):
        self.fails = fails or FailOn()
        self.error = error
        self.attempts = 0
        self.log: list[str] = []

    @compensable(by="release", retries=2, backoff=0.0, retry_on=ConnectionError)
    def charge(self, amount: float) -> str:
        """Charge, retried twice on a dropped connection."""
        self.attempts += 1
        try:
            self.fails()
        except RuntimeError as failure:
            raise self.error(str(failure)) from None
        return f"ch-{amount}"

    @compensable(by="release")
    def reserve(self, sku: str) -> str:
        """Reserve stock."""
        self.log.append(f"reserve {sku}")
        return f"res-{sku}"

    def release(self) -> None:
        self.log.append("release")


class TestSwallowedRefusals:
    def test_a_nan_argument_caught_by_the_framework_fails_the_saga(
        self, sagacity: Sagacity
    ) -> None:
        """A swallowed SerializationError fails the saga and undoes what ran, with evidence."""
        billing = Billing()
        tools = tools_of(sagacity, billing)

        def work() -> str:
            tools["reserve"]("SKU-1")
            with contextlib.suppress(SerializationError):
                tools["charge"](float("nan"))
            return "charged"

        result = sagacity.saga("nan", work)

        assert result.outcome is SagaOutcome.COMPENSATED
        assert isinstance(result.error, SerializationError)
        assert billing.attempts == 0
        assert billing.log == ["reserve SKU-1", "release"]
        refused = [e for e in sagacity.history("nan") if e.phase is Phase.REFUSED]
        assert [(e.tool_name, e.call_id, e.payload["reason"]) for e in refused] == [
            ("charge", "charge#1", "unserializable_input")
        ]
        assert "tool 'charge' argument 'amount'" in refused[0].payload["error"]

    async def test_refusals_in_async_work_are_journaled_alike(self, sagacity: Sagacity) -> None:
        """From async code a refused input or call id is journaled (off the loop) the same."""
        billing = Billing()
        tools = tools_of(sagacity, billing)

        async def work() -> str:
            await tools["reserve"].ainvoke(("SKU-1",))
            with contextlib.suppress(SerializationError):
                await tools["charge"].ainvoke((float("nan"),))
            with contextlib.suppress(InvalidIdError):
                await tools["reserve"].ainvoke(("SKU-2",), call_id="a\x00b")
            return "charged"

        result = await sagacity.asaga("nan", work)

        assert result.outcome is SagaOutcome.COMPENSATED
        assert isinstance(result.error, SerializationError)
        assert (billing.attempts, billing.log) == (0, ["reserve SKU-1", "release"])
        refused = [e for e in sagacity.history("nan") if e.phase is Phase.REFUSED]
        assert [(e.tool_name, e.call_id, e.payload["reason"]) for e in refused] == [
            ("charge", "charge#1", "unserializable_input"),
            ("reserve", None, "invalid_call_id"),
        ]


class TestRetries:
    def test_every_attempt_is_journaled_under_one_call_id(self, sagacity: Sagacity) -> None:
        """Two dropped connections, then success: three INTENTs under one id, numbered."""
        billing = Billing(FailOn(1, 2))
        (charge, _) = sagacity.wrap(billing)

        result = sagacity.saga("r", lambda: charge(10.5))

        assert (result.outcome, result.value, billing.attempts) == (
            SagaOutcome.COMPLETED,
            "ch-10.5",
            3,
        )
        shown = [
            (e.phase.value, e.call_id, e.payload.get("attempt"), e.payload.get("kind"))
            for e in sagacity.history("r")
        ]
        assert shown == [
            ("INTENT", "charge#1", None, None),
            ("FAILED", "charge#1", 1, "retried"),
            ("INTENT", "charge#1", 2, None),
            ("FAILED", "charge#1", 2, "retried"),
            ("INTENT", "charge#1", 3, None),
            ("EXECUTED", "charge#1", None, None),
            ("ENDED", None, None, None),
        ]

    def test_used_up_retries_fail_the_saga(self, sagacity: Sagacity) -> None:
        """When the last attempt fails, the saga fails and compensates, even if swallowed."""
        billing = Billing(FailOn(1, 2, 3))
        tools = tools_of(sagacity, billing)

        def work() -> str:
            tools["reserve"]("SKU-1")
            with contextlib.suppress(ConnectionError):
                tools["charge"](5.0)
            return "done"

        result = sagacity.saga("r", work)

        assert result.outcome is SagaOutcome.COMPENSATED
        assert billing.attempts == 3
        assert isinstance(result.error, ConnectionError)
        last = [e for e in sagacity.history("r") if e.phase is Phase.FAILED][-1]
        assert (last.payload["kind"], last.payload["attempt"]) == ("failure", 3)
        assert billing.log == ["reserve SKU-1", "release"]

    def test_an_error_not_listed_is_not_retried(self, sagacity: Sagacity) -> None:
        """`retry_on` names what is retried: any other error fails at the first attempt."""
        billing = Billing(FailOn(1), error=ValueError)
        (charge, _) = sagacity.wrap(billing)

        result = sagacity.saga("r", lambda: charge(1.0))

        assert (result.outcome, billing.attempts) == (SagaOutcome.COMPENSATED, 1)

    async def test_async_tools_retry_too(self, sagacity: Sagacity) -> None:
        """An async tool is retried with the same journal shape, awaiting between attempts."""
        calls = 0

        @compensable(by=lambda: None, retries=1, backoff=0.0)
        async def fetch() -> str:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise OSError("reset")
            return "ok"

        (tool,) = sagacity.wrap(fetch)
        result = await sagacity.asaga("a", tool)

        assert (result.outcome, result.value) == (SagaOutcome.COMPLETED, "ok")
        kinds = [e.payload.get("kind") for e in sagacity.history("a") if e.phase is Phase.FAILED]
        assert kinds == ["retried"]

    def test_cancellation_is_never_retried(self, sagacity: Sagacity) -> None:
        """A timeout's outcome is unknown: retrying could do the effect twice."""
        calls = 0

        @compensable(by=lambda: None, retries=3, backoff=0.0, retry_on=BaseException)
        def slow() -> str:
            nonlocal calls
            calls += 1
            raise TimeoutError("gateway")

        (tool,) = sagacity.wrap(slow)
        result = sagacity.saga("t", tool)

        assert (calls, result.outcome) == (1, SagaOutcome.NEEDS_ATTENTION)

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"reversibility": Reversibility.IRREVERSIBLE, "retries": 1}, "not retried"),
            ({"by": "undo", "retries": -1}, "whole number"),
            ({"by": "undo", "retries": 1, "retry_on": "ConnectionError"}, "exception types"),
            ({"by": "undo", "retries": 1, "backoff": 5.0, "max_backoff": 1.0}, "at most"),
        ],
    )
    def test_a_wrong_retry_declaration_fails_at_wrap_time(
        self, options: dict[str, Any], message: str
    ) -> None:
        """Retries on an IRREVERSIBLE tool, or malformed ones, are refused by `wrap`."""

        class Tools:
            @compensable(**options)
            def act(self) -> None:
                """Act."""

            def undo(self) -> None:
                """Undo."""

        with pytest.raises(ConfigurationError, match=message):
            Sagacity.from_url("memory://").wrap(Tools())


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


class TestFailuresThatCannotBeShown:
    @pytest.mark.parametrize(
        ("error", "message"),
        [
            (RuntimeError("bad byte \ud800 here"), "bad byte \\ud800 here"),
            (Unprintable(), "<str() of the error raised RuntimeError>"),
            (
                RuntimeError("<html>" + "x" * 10_000_000),
                "<html>" + "x" * 7_994 + "… [9,992,006 more characters cut]",
            ),
        ],
        ids=["lone-surrogate", "str-raises", "a-response-body"],
    )
    def test_the_failure_is_journaled_and_the_tool_error_reaches_the_caller(
        self, sagacity: Sagacity, error: Exception, message: str
    ) -> None:
        """A message with a lone surrogate, a `str()` that raises, or 10 MB, is journaled.

        The caller gets the tool's own exception object, and the saga compensates.
        """

        @compensable(by=lambda: None)
        def tool() -> None:
            raise error

        (wrapped,) = sagacity.wrap(tool)
        seen: list[BaseException] = []

        def work() -> None:
            try:
                wrapped()
            except BaseException as caught:
                seen.append(caught)

        result = sagacity.saga("bad", work)

        assert seen == [error]
        assert result.outcome is SagaOutcome.COMPENSATED
        failed = sagacity.history("bad")[1]
        assert failed.phase is Phase.FAILED
        assert failed.payload["error"] == {"type": type(error).__qualname__, "message": message}
        ended = sagacity.history("bad")[-1]
        assert ended.payload["error"] == {"type": type(error).__qualname__, "message": message}


class TestTheErrorThatEndedTheSaga:
    def test_a_raised_error_is_in_the_ended_payload_and_the_result(
        self, sagacity: Sagacity
    ) -> None:
        """Work that raises ends the saga with that error's type and message recorded."""
        tools = tools_of(sagacity, Shop())

        def work() -> None:
            tools["reserve_inventory"]("SKU-1")
            raise KeyError("no such customer")

        result = sagacity.saga("e", work)

        assert isinstance(result.error, KeyError)
        assert sagacity.history("e")[-1].payload["error"] == {
            "type": "KeyError",
            "message": "'no such customer'",
        }


def stream_tool() -> Iterator[str]:
    yield "a"


class TestStreams:
    def test_a_generator_tool_is_refused_at_wrap_time(self) -> None:
        """A generator's effect happens as it is read: `wrap` refuses it, naming the tool."""
        generator = compensable(by=lambda: None)(stream_tool)

        async def agen() -> Any:
            yield "a"

        with pytest.raises(ConfigurationError, match="tool 'stream_tool' is a generator"):
            Sagacity.from_url("memory://").wrap(generator)
        with pytest.raises(ConfigurationError, match="is a generator"):
            Sagacity.from_url("memory://").wrap(compensable(by=lambda: None)(agen))

    def test_a_tool_returning_an_unread_generator_fails(self, sagacity: Sagacity) -> None:
        """A tool that returns a generator is journaled FAILED, never EXECUTED before it ran."""

        @compensable(by=lambda: None)
        def lazy() -> Any:
            return stream_tool()

        (tool,) = sagacity.wrap(lazy)
        result = sagacity.saga("g", tool)

        assert isinstance(result.error, TypeError)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert [e.phase for e in sagacity.history("g")] == [
            Phase.INTENT,
            Phase.FAILED,
            Phase.ENDED,
        ]


BAD_IDS = ["", "   ", "a\x00b", "line\nbreak", "bell\x07", "\ud800", "x" * 513, "sep\u2028x"]


class TestIds:
    @pytest.mark.parametrize("saga_id", BAD_IDS)
    def test_a_saga_id_that_cannot_be_stored_is_refused(
        self, sagacity: Sagacity, saga_id: str
    ) -> None:
        """Such a saga id raises InvalidIdError naming it, before anything runs or is written."""
        shop = Shop()
        tools = tools_of(sagacity, shop)
        with pytest.raises(InvalidIdError, match="saga id"):
            sagacity.saga(saga_id, lambda: tools["reserve_inventory"]("SKU-1"))
        assert shop.calls["reserve_inventory"] == 0
        assert sagacity.journal.list_sagas(after=None, limit=10) == []

    @pytest.mark.parametrize("call_id", BAD_IDS)
    def test_a_call_id_that_cannot_be_stored_is_refused(
        self, sagacity: Sagacity, call_id: str
    ) -> None:
        """A framework's call id that cannot be stored is refused before the tool runs.

        Like any refused call, it fails the saga (a framework may swallow the error) and
        is journaled, without the id.
        """
        shop = Shop()
        tools = tools_of(sagacity, shop)
        result = sagacity.saga(
            "s", lambda: tools["reserve_inventory"].invoke(("SKU-1",), call_id=call_id)
        )
        assert isinstance(result.error, InvalidIdError)
        assert "call id" in str(result.error)
        assert shop.calls["reserve_inventory"] == 0
        refused, ended = sagacity.history("s")
        assert (refused.phase, refused.call_id, refused.payload["reason"]) == (
            Phase.REFUSED,
            None,
            "invalid_call_id",
        )
        assert ended.payload["outcome"] == "COMPENSATED"

    def test_invalid_ids_are_value_errors_too(self) -> None:
        """Code that caught the ValueError of earlier versions still catches it."""
        assert issubclass(InvalidIdError, ValueError)


class TestAsyncSwallowed:
    async def test_an_async_swallowed_failure_is_the_result_error(self, sagacity: Sagacity) -> None:
        """The failure a framework swallowed is `SagaResult.error` in async sagas too."""
        tools = tools_of(sagacity, Shop(ship_fails=True))

        async def work() -> str:
            await asyncio.sleep(0)
            with contextlib.suppress(RuntimeError):
                tools["ship"]("o-1")
            return "shipped!"

        result = await sagacity.asaga("as", work)

        assert (result.outcome, repr(result.error)) == (
            SagaOutcome.COMPENSATED,
            "RuntimeError('courier down')",
        )
        assert phases(sagacity.history("as"))[-1] == ("ENDED", None, None)


class TestOneEnd:
    def test_a_run_finishing_after_another_writer_ended_the_saga_is_refused(
        self, shared_store_url: str
    ) -> None:
        """Two writers cannot end one saga two ways: the second end is refused.

        While this run's work is going, a writer that bypasses the saga's lease ends it;
        the run then finds the saga ended and raises instead of appending a COMPLETED
        beside it.
        """
        sagacity, other = Sagacity.from_url(shared_store_url), Sagacity.from_url(shared_store_url)
        tools = tools_of(sagacity, Shop())

        def work() -> None:
            tools["reserve_inventory"]("SKU-1")
            other.journal.append("s", Phase.ENDED, payload={"outcome": "COMPENSATED"})

        try:
            with pytest.raises(SagaStateError, match="ended COMPENSATED at seq 3"):
                sagacity.saga("s", work)
            ends = [e.payload["outcome"] for e in sagacity.history("s") if e.phase is Phase.ENDED]
            assert ends == ["COMPENSATED"]
        finally:
            sagacity.close()
            other.close()

    async def test_a_failed_async_run_after_another_writer_ended_the_saga_undoes_nothing(
        self, shared_store_url: str
    ) -> None:
        """A failed async run reads the journal again before compensating: ended, it stops.

        Its walk would undo a saga that ended as the other writer recorded, and end it
        twice.
        """
        sagacity, other = Sagacity.from_url(shared_store_url), Sagacity.from_url(shared_store_url)
        shop = Shop()
        tools = tools_of(sagacity, shop)

        async def work() -> None:
            tools["reserve_inventory"]("SKU-1")
            other.journal.append("s", Phase.ENDED, payload={"outcome": "COMPLETED"})
            await asyncio.sleep(0)
            raise RuntimeError("the model gave up")

        try:
            with pytest.raises(SagaStateError, match="ended COMPLETED at seq 3 by another worker"):
                await sagacity.asaga("s", work)
            assert [e.phase for e in sagacity.history("s")] == [
                Phase.INTENT,
                Phase.EXECUTED,
                Phase.ENDED,
            ]
            assert shop.log == ["reserve SKU-1"]  # nothing undone
        finally:
            sagacity.close()
            other.close()


class TestRerunAfterAFailure:
    def test_new_calls_are_refused_and_replays_still_return(self, sagacity: Sagacity) -> None:
        """Re-run work of a failed saga starts no new effect that would be undone at once.

        A call that ran before replays its result; a new call is refused with
        `SagaStateError` and never runs; the saga is compensated.
        """
        shop = Shop()
        tools = tools_of(sagacity, shop)
        reserved = journal_intent(sagacity, "s", "reserve_inventory#1")
        sagacity.journal.append(
            "s", Phase.EXECUTED, tool_name="reserve_inventory", call_id="reserve_inventory#1",
            ref_seq=reserved.seq, payload={"result": "res-SKU-1-1"},
        )  # fmt: skip
        shipped = journal_intent(sagacity, "s", "ship#1", tool_name="ship", tool_input={})
        journal_failure(sagacity, shipped)  # an earlier run failed, then stopped

        def work() -> str:
            replayed = tools["reserve_inventory"]("SKU-1")
            tools["charge_card"]("5.00", "4242")
            return replayed

        result = sagacity.saga("s", work)

        assert shop.calls == {}
        assert isinstance(result.error, SagaStateError)
        assert "tool 'charge_card' is not run" in str(result.error)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert shop.log == ["release res-SKU-1-1"]
