"""`sagacity resolve` settles what `sagacity doubts` lists: a call, or its compensation."""

from __future__ import annotations

import orjson

from sagacity import Phase, Sagacity
from tests.cli._run import run_cli

CALL = {"tool_name": "reserve", "call_id": "reserve#1"}


def _compensation_in_doubt(url: str, saga_id: str) -> None:
    """A release that started (COMPENSATING) and never reported."""
    sagacity = Sagacity.from_url(url)
    try:
        journal = sagacity.journal
        journal.append(saga_id, Phase.INTENT, **CALL, payload={"input": {"sku": "s"}})
        journal.append(saga_id, Phase.EXECUTED, **CALL, ref_seq=1, payload={"result": "res-s"})
        journal.append(saga_id, Phase.COMPENSATING, **CALL, ref_seq=2, payload={"attempt": 1})
    finally:
        sagacity.close()


def _call_in_doubt(url: str, saga_id: str) -> None:
    """A reserve whose INTENT has no outcome."""
    sagacity = Sagacity.from_url(url)
    try:
        sagacity.journal.append(saga_id, Phase.INTENT, **CALL, payload={"input": {"sku": "s"}})
    finally:
        sagacity.close()


def _tail(url: str, saga_id: str) -> list[tuple[str, int | None, object]]:
    sagacity = Sagacity.from_url(url)
    try:
        return [(e.phase.value, e.ref_seq, e.payload) for e in sagacity.history(saga_id)[3:]]
    finally:
        sagacity.close()


class TestCompensationInDoubt:
    def test_doubts_lists_it_and_resolve_undone_settles_it(self, shared_store_url: str) -> None:
        """What doubts lists as a compensation is settled by resolve --undone, as COMPENSATED."""
        _compensation_in_doubt(shared_store_url, "c-1")
        listed = run_cli("doubts", "--json", "--database", shared_store_url)
        (doubt,) = [orjson.loads(line) for line in listed.stdout.splitlines()]
        assert (doubt["call_id"], doubt["kind"]) == ("reserve#1", "compensation")
        done = run_cli(
            "resolve", "c-1", "reserve#1", "--undone", "--by", "ada",
            "--database", shared_store_url,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout == (
            "saga 'c-1': the compensation of call 'reserve#1' resolved as undone by ada "
            "(COMPENSATED at seq 4); run 'sagacity compensate c-1' to finish the saga\n"
        )
        assert _tail(shared_store_url, "c-1") == [("COMPENSATED", 2, {"resolved_by": "ada"})]
        again = run_cli("doubts", "--database", shared_store_url)
        assert again.stdout == "no call or compensation is in doubt\n"

    def test_not_undone_leaves_it_for_the_next_walk(self, shared_store_url: str) -> None:
        """--not-undone journals COMPENSATION_FAILED not_run: the next compensate runs it."""
        _compensation_in_doubt(shared_store_url, "c-2")
        done = run_cli(
            "resolve", "c-2", "reserve#1", "--not-undone", "--by", "ada",
            "--database", shared_store_url,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert _tail(shared_store_url, "c-2") == [
            ("COMPENSATION_FAILED", 2, {"kind": "not_run", "error": None, "resolved_by": "ada"})
        ]

    def test_a_call_finding_on_a_compensation_names_the_right_flags(
        self, shared_store_url: str
    ) -> None:
        """--executed on a compensation in doubt is refused (exit 2) naming --undone."""
        _compensation_in_doubt(shared_store_url, "c-3")
        done = run_cli(
            "resolve", "c-3", "reserve#1", "--executed", "--by", "ada",
            "--database", shared_store_url,
        )  # fmt: skip
        assert done.returncode == 2
        assert "is not in doubt" not in done.stderr
        assert done.stderr == (
            "sagacity resolve: saga 'c-3': the compensation of call 'reserve#1' is in doubt, "
            "not the call: give --undone (the compensation took effect) or --not-undone (it "
            "did not; the next compensate runs it again)\n"
        )
        assert _tail(shared_store_url, "c-3") == []

    def test_a_compensation_finding_on_a_call_in_doubt_is_refused(
        self, shared_store_url: str
    ) -> None:
        """--undone on a call that is itself in doubt names --executed / --not-executed."""
        _call_in_doubt(shared_store_url, "c-4")
        done = run_cli(
            "resolve", "c-4", "reserve#1", "--undone", "--by", "ada",
            "--database", shared_store_url,
        )  # fmt: skip
        assert done.returncode == 2
        assert "give --executed (with --result) or --not-executed" in done.stderr


class TestReason:
    def test_the_reason_is_journaled_with_the_finding(self, shared_store_url: str) -> None:
        """--reason goes into the finding's payload, for a compensation and for a call."""
        _compensation_in_doubt(shared_store_url, "r-1")
        done = run_cli(
            "resolve", "r-1", "reserve#1", "--undone", "--by", "ada",
            "--reason", "the warehouse shows the stock back", "--database", shared_store_url,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert _tail(shared_store_url, "r-1") == [
            (
                "COMPENSATED",
                2,
                {"resolved_by": "ada", "reason": "the warehouse shows the stock back"},
            )
        ]
        _call_in_doubt(shared_store_url, "r-2")
        done = run_cli(
            "resolve", "r-2", "reserve#1", "--not-executed", "--by", "ada",
            "--reason", "no reservation in the warehouse", "--database", shared_store_url,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        sagacity = Sagacity.from_url(shared_store_url)
        try:
            last = sagacity.history("r-2")[-1]
        finally:
            sagacity.close()
        assert (last.phase, last.payload) == (
            Phase.FAILED,
            {
                "kind": "not_run",
                "error": None,
                "resolved_by": "ada",
                "reason": "no reservation in the warehouse",
            },
        )
        blank = run_cli(
            "resolve", "r-2", "reserve#1", "--executed", "--by", "ada", "--reason", " ",
            "--database", shared_store_url,
        )  # fmt: skip
        assert blank.returncode == 2
        assert "--reason" in blank.stderr


class TestMistakes:
    def test_a_call_the_saga_does_not_have_is_not_found(self, shared_store_url: str) -> None:
        """A mistyped call id is 'has no call' (exit 1), not 'is not in doubt'."""
        _call_in_doubt(shared_store_url, "m-1")
        done = run_cli(
            "resolve", "m-1", "reserve#2", "--not-executed", "--by", "ada",
            "--database", shared_store_url,
        )  # fmt: skip
        assert done.returncode == 1
        assert done.stderr == (
            "sagacity resolve: saga 'm-1' has no call 'reserve#2'; 'sagacity doubts' lists "
            "the calls and compensations in doubt with their call ids\n"
        )

    def test_a_result_that_is_not_json_shows_how_to_quote_it(self, shared_store_url: str) -> None:
        """--result res-1 is refused (exit 2) with the quoting that works; it then resolves."""
        _call_in_doubt(shared_store_url, "m-2")
        base = ("resolve", "m-2", "reserve#1", "--executed", "--by", "ada")
        bare = run_cli(*base, "--result", "res-1", "--database", shared_store_url)
        assert bare.returncode == 2
        assert bare.stderr.startswith("sagacity resolve: --result is not JSON: ")
        assert bare.stderr.endswith(
            """a text result is a JSON string inside the shell's quotes, such as """
            """--result '"res-1"'\n"""
        )
        quoted = run_cli(*base, "--result", '"res-1"', "--database", shared_store_url)
        assert quoted.returncode == 0, quoted.stderr
        sagacity = Sagacity.from_url(shared_store_url)
        try:
            last = sagacity.history("m-2")[-1]
        finally:
            sagacity.close()
        assert (last.phase, last.payload) == (
            Phase.EXECUTED,
            {"result": "res-1", "resolved_by": "ada"},
        )
