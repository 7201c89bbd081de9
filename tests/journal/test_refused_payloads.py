"""A payload the journal cannot encode is refused alone, whatever its shape.

Too deep, holding itself, or raising from its own methods: each is a
`SerializationError` naming the saga and the entry, nothing of it is written, and the
appends committed in the same batch (SQLite's and PostgreSQL's group commit, sync or on
the event loop) are written all the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from sagacity import Sagacity, SerializationError, verify
from sagacity.journal import JournalEntry, Phase, SideEffectJournal, canonical_bytes
from sagacity.journal._canonical import MAX_DEPTH, decode_canonical
from sagacity.journal._group import AppendRequest
from tests.journal._awaited import EDGES, driven


def nested(levels: int, leaf: Any = None) -> Any:
    """`leaf` inside `levels` arrays and objects, alternately."""
    value = leaf
    for level in range(levels):
        value = {"k": value} if level % 2 else [value]
    return value


def holding_itself() -> list[Any]:
    value: list[Any] = [1]
    value.append({"again": value})
    return value


class Unlisted(dict[str, Any]):
    """A mapping whose keys cannot be listed."""

    def __iter__(self) -> Any:
        raise KeyError("no keys today")

    def keys(self) -> Any:
        raise KeyError("no keys today")


HOSTILE = {
    "2,000 deep": nested(2000),
    "2,000 deep, with floats": nested(2000, 1.5),
    "holding itself": holding_itself(),
    "raising from its methods": {"x": Unlisted(a=1)},
}


@pytest.fixture(params=EDGES)
def journal(sagacity: Sagacity, request: pytest.FixtureRequest) -> Iterator[SideEffectJournal]:
    """The journal of each backend, appended to directly, awaited, or in a batch."""
    yield from driven(sagacity.journal, request.param)


class TestCanonicalBytes:
    @pytest.mark.parametrize("shape", list(HOSTILE))
    def test_a_hostile_value_raises_serialization_error(self, shape: str) -> None:
        """Never a RecursionError or the value's own error: a SerializationError."""
        with pytest.raises(SerializationError, match="not canonical JSON"):
            canonical_bytes(HOSTILE[shape])

    @pytest.mark.parametrize("leaf", [None, 1.5], ids=["orjson", "rfc8785"])
    def test_the_depth_bound_is_the_same_on_both_paths(self, leaf: Any) -> None:
        """254 levels are encoded and read back as they were; 255 are refused."""
        deepest = nested(MAX_DEPTH, leaf)
        assert MAX_DEPTH == 254
        assert decode_canonical(canonical_bytes(deepest)) == deepest
        with pytest.raises(SerializationError, match="nested more than 254 arrays and objects"):
            canonical_bytes(nested(MAX_DEPTH + 1, leaf))

    def test_the_bound_does_not_depend_on_the_callers_stack(self) -> None:
        """A value within the bound is encoded from deep inside a recursion too."""

        def at_depth(frames: int) -> bytes:
            return canonical_bytes(nested(MAX_DEPTH, 1.5)) if frames == 0 else at_depth(frames - 1)

        assert at_depth(500) == canonical_bytes(nested(MAX_DEPTH, 1.5))


class TestAppend:
    @pytest.mark.parametrize("shape", list(HOSTILE))
    def test_is_refused_naming_the_saga_and_nothing_is_written(
        self, journal: SideEffectJournal, shape: str
    ) -> None:
        """SerializationError names saga, phase, tool and call; the saga goes on."""
        first = journal.append("order-1", Phase.INTENT, tool_name="reserve", call_id="r#1")
        with pytest.raises(SerializationError) as refused:
            journal.append(
                "order-1",
                Phase.EXECUTED,
                tool_name="reserve",
                call_id="r#1",
                ref_seq=1,
                payload={"result": HOSTILE[shape]},
            )
        message = str(refused.value)
        assert message.startswith(
            "saga 'order-1': cannot append EXECUTED of tool 'reserve' (call 'r#1'): "
            "not canonical JSON: "
        )
        assert message.endswith("; the entry was not written")
        assert journal.entries("order-1") == [first]
        after = journal.append("order-1", Phase.EXECUTED, ref_seq=1, payload={"result": "ok"})
        assert (after.seq, after.prev_hash) == (2, first.hash)
        assert verify(journal).ok

    def test_a_new_saga_refused_leaves_no_saga_behind(self, journal: SideEffectJournal) -> None:
        """The refused first append of a saga lists no saga and reads no entries."""
        with pytest.raises(SerializationError, match="saga 'fresh': cannot append INTENT"):
            journal.append("fresh", Phase.INTENT, payload=nested(2000))
        assert journal.list_sagas() == []
        assert journal.entries("fresh") == []


Results = list[JournalEntry | BaseException]


def commit_batch(sagacity: Sagacity, requests: Sequence[AppendRequest], driver: str) -> Results:
    """Commit `requests` as one batch: the sync group's, or the event loop's (PostgreSQL)."""
    journal: Any = sagacity.journal
    if driver == "sync":
        results: Results = journal._group._many(requests)
        return results

    async def on_the_loop() -> Results:
        return await journal._new_loop_writer()._many(list(requests))

    return asyncio.run(on_the_loop())


@pytest.mark.parametrize(
    ("store_url", "driver"),
    [("sqlite", "sync"), ("postgres", "sync"), ("postgres", "loop")],
    indirect=["store_url"],
)
class TestInABatch:
    @pytest.mark.parametrize("shape", list(HOSTILE))
    def test_only_the_bad_append_is_refused(
        self, sagacity: Sagacity, driver: str, shape: str
    ) -> None:
        """Committed together, every other append lands, of its saga and of others."""
        journal = sagacity.journal
        intents = [journal.append(s, Phase.INTENT, tool_name="reserve") for s in "abc"]

        def executed(saga_id: str, payload: Any = "ok") -> AppendRequest:
            return AppendRequest(saga_id, Phase.EXECUTED, "reserve", None, 1, payload)

        results = commit_batch(
            sagacity,
            [
                executed("a"),
                executed("b", {"result": HOSTILE[shape]}),
                executed("b"),
                executed("c"),
            ],
            driver,
        )
        landed_a, refused, landed_b, landed_c = results
        assert isinstance(refused, SerializationError)
        assert str(refused).startswith("saga 'b': cannot append EXECUTED of tool 'reserve'")
        for saga_id, intent, landed in zip(
            "abc", intents, (landed_a, landed_b, landed_c), strict=True
        ):
            assert isinstance(landed, JournalEntry)
            assert (landed.seq, landed.prev_hash, landed.payload) == (2, intent.hash, "ok")
            assert journal.entries(saga_id) == [intent, landed]
        assert verify(journal).ok
