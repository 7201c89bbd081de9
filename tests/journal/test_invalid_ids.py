"""Every way in refuses an id that cannot be stored or shown with InvalidIdError.

A saga, request or call id with a lone surrogate (no UTF-8 form), a NUL (no PostgreSQL
text), a control character, or that is blank, too long or not a string, is refused
before anything is read or written, on every backend: by the saga's entry points, the
approval decisions, and the journal and approval stores themselves.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable
from typing import Any

import pytest

from sagacity import InvalidIdError, Phase, Sagacity
from sagacity._ids import MAX_ID_LENGTH, require_id, require_lookup
from sagacity.journal._protocol import entries_async

BAD_IDS: list[Any] = ["", "   ", "a\x00b", "bell\x07", "a\ud800", "x" * 513, "sep\u2028x", 7]
IDS = ["empty", "blank", "NUL", "control", "surrogate", "too long", "separator", "int"]

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)


async def _nothing() -> None:
    return None


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


SAGA_ID_ENTRY_POINTS: dict[str, Callable[[Sagacity, Any], object]] = {
    "history": lambda s, bad: s.history(bad),
    "saga": lambda s, bad: s.saga(bad, lambda: None),
    "asaga": lambda s, bad: _run(s.asaga(bad, _nothing)),
    "resume_saga": lambda s, bad: s.resume_saga(bad),
    "resume_saga with work": lambda s, bad: s.resume_saga(bad, lambda: None),
    "aresume_saga": lambda s, bad: _run(s.aresume_saga(bad)),
    "approve": lambda s, bad: s.approve(bad, approver="bob"),
    "reject": lambda s, bad: s.reject(bad, approver="bob", reason="no"),
    "edit": lambda s, bad: s.edit(bad, approver="bob", new_input={}),
    "pending": lambda s, bad: s.pending(bad),
    "compensate": lambda s, bad: s.compensate(bad),
    "acompensate": lambda s, bad: _run(s.acompensate(bad)),
    "resolve": lambda s, bad: s.resolve(bad, "c1", executed=False, by="bob"),
    "resolve_compensation": lambda s, bad: s.resolve_compensation(
        bad, "c1", compensated=True, by="bob"
    ),
    "join": lambda s, bad: s.join(bad).__enter__(),
    "journal.append": lambda s, bad: s.journal.append(bad, Phase.INTENT),
    "journal.aappend": lambda s, bad: _run(s.journal.aappend(bad, Phase.INTENT)),  # type: ignore[attr-defined]
    "journal.acquire_lease": lambda s, bad: s.journal.acquire_lease(
        bad, "w1", now=NOW, expires_at=NOW + datetime.timedelta(seconds=30)
    ),
    "approvals.pending": lambda s, bad: s.approvals.pending(bad),
}

REQUEST_ID_ENTRY_POINTS: dict[str, Callable[[Sagacity, Any], object]] = {
    "approve": lambda s, bad: s.approve("order-1", approver="bob", request_id=bad),
    "reject": lambda s, bad: s.reject("order-1", approver="bob", reason="no", request_id=bad),
    "resume_saga": lambda s, bad: s.resume_saga("order-1", request_id=bad),
    "aresume_saga": lambda s, bad: _run(s.aresume_saga("order-1", request_id=bad)),
    "edit": lambda s, bad: s.edit("order-1", approver="bob", request_id=bad, new_input={}),
    "approvals.get": lambda s, bad: s.approvals.get(bad),
    "approvals.delete": lambda s, bad: s.approvals.delete(bad),
}

CALL_ID_ENTRY_POINTS: dict[str, Callable[[Sagacity, Any], object]] = {
    "resolve": lambda s, bad: s.resolve("order-1", bad, executed=False, by="bob"),
    "resolve_compensation": lambda s, bad: s.resolve_compensation(
        "order-1", bad, compensated=True, by="bob"
    ),
}


def refused(sagacity: Sagacity, attempt: Callable[[], object], what: str) -> None:
    """`attempt` raises InvalidIdError naming `what`, and nothing was journaled."""
    with pytest.raises(InvalidIdError, match=what):
        attempt()
    assert sagacity.journal.list_sagas() == []
    assert sagacity.approvals.pending() == []


@pytest.mark.parametrize("bad", BAD_IDS, ids=IDS)
class TestEntryPoints:
    @pytest.mark.parametrize("entry_point", list(SAGA_ID_ENTRY_POINTS))
    def test_a_bad_saga_id_is_refused(self, sagacity: Sagacity, entry_point: str, bad: Any) -> None:
        """InvalidIdError naming the saga id: never a UnicodeEncodeError or a driver's error."""
        call = SAGA_ID_ENTRY_POINTS[entry_point]
        refused(sagacity, lambda: call(sagacity, bad), "saga id")

    @pytest.mark.parametrize("entry_point", list(REQUEST_ID_ENTRY_POINTS))
    def test_a_bad_request_id_is_refused(
        self, sagacity: Sagacity, entry_point: str, bad: Any
    ) -> None:
        """InvalidIdError naming the request id, not 'no such request' nor a driver's error."""
        call = REQUEST_ID_ENTRY_POINTS[entry_point]
        refused(sagacity, lambda: call(sagacity, bad), "request id")

    @pytest.mark.parametrize("entry_point", list(CALL_ID_ENTRY_POINTS))
    def test_a_bad_call_id_is_refused(self, sagacity: Sagacity, entry_point: str, bad: Any) -> None:
        """InvalidIdError naming the saga and the call id, before the saga is looked up."""
        call = CALL_ID_ENTRY_POINTS[entry_point]
        refused(sagacity, lambda: call(sagacity, bad), "saga 'order-1': call id")


UNSTORABLE: list[Any] = ["a\x00b", "a\ud800", 7]
UNSTORABLE_IDS = ["NUL", "surrogate", "int"]


class TestJournalReads:
    """A journal reads back every saga id it lists, and refuses only what no database holds.

    Ids `require_id` refuses may be listed (written before it did, or planted), and
    `verify` must read them.
    """

    @pytest.mark.parametrize("bad", UNSTORABLE, ids=UNSTORABLE_IDS)
    def test_entries_refuses_an_id_no_database_can_hold(self, sagacity: Sagacity, bad: Any) -> None:
        """entries: InvalidIdError naming the saga id, never a UnicodeEncodeError."""
        refused(sagacity, lambda: sagacity.journal.entries(bad), "saga id")
        refused(sagacity, lambda: _run(entries_async(sagacity.journal, bad)), "saga id")

    @pytest.mark.parametrize(
        "odd", ["", "   ", "bell\x07", "x" * 513], ids=IDS[:2] + IDS[3:4] + IDS[5:6]
    )
    def test_entries_of_an_id_no_saga_can_have_are_none(self, sagacity: Sagacity, odd: str) -> None:
        """An id that can be stored, but that no saga may take, has no entries to read."""
        assert sagacity.journal.entries(odd) == []

    @pytest.mark.parametrize("bad", UNSTORABLE, ids=UNSTORABLE_IDS)
    def test_a_position_no_saga_id_can_hold_is_refused(self, sagacity: Sagacity, bad: Any) -> None:
        """list_sagas and list_entries refuse it with InvalidIdError; nothing is read."""
        refused(sagacity, lambda: sagacity.journal.list_sagas(after=bad), "listing position")
        refused(sagacity, lambda: sagacity.journal.list_entries(after=(bad, 1)), "listing position")

    def test_any_storable_position_pages_as_before(self, sagacity: Sagacity) -> None:
        """The empty string, blanks and controls are positions: ids sort after them."""
        sagacity.journal.append("b", Phase.INTENT)
        for after in ("", "   ", "a\x07"):
            assert sagacity.journal.list_sagas(after=after) == ["b"]
            assert [e.saga_id for e in sagacity.journal.list_entries(after=(after, 9))] == ["b"]


class Shouting(str):
    """A str subclass whose methods say otherwise than its characters."""

    __slots__ = ()

    def __str__(self) -> str:
        return "fine"

    def strip(self, chars: str | None = None) -> str:
        return "fine"

    def isprintable(self) -> bool:
        return True

    def __len__(self) -> int:
        return 4


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class TestRequireId:
    def test_a_str_subclass_is_judged_by_its_characters(self) -> None:
        """Its own methods are not asked: its characters are checked and returned as a str."""
        assert type(require_id(Shouting("order-1"), "saga id")) is str
        assert require_id(Shouting("order-1"), "saga id") == "order-1"
        for bad in ("", "  ", "a\ud800", "x" * (MAX_ID_LENGTH + 1)):
            with pytest.raises(InvalidIdError, match="saga id"):
                require_id(Shouting(bad), "saga id")

    def test_a_value_whose_repr_raises_is_refused_all_the_same(self) -> None:
        """The refusal names the type; the failing repr does not replace it."""
        with pytest.raises(InvalidIdError, match="saga id must be a string, not BadRepr"):
            require_id(BadRepr(), "saga id")
        with pytest.raises(InvalidIdError, match="must be a string, not BadRepr"):
            require_lookup(BadRepr(), "listing position")

    def test_printable_ids_of_every_script_are_kept(self) -> None:
        """Ids beyond ASCII, with spaces inside, up to the length limit, come back as given."""
        for good in ("order-1", "a b", "东京-7", "😀", "x" * MAX_ID_LENGTH, "Ωmega\u00a0x"):
            assert require_id(good, "saga id") == good
