"""What a person on call meets in the CLI: a tampered saga, several requests, plurals."""

from __future__ import annotations

import json
from pathlib import Path

from sagacity import Phase, Reversibility, Sagacity, compensable
from tests.cli._run import restore_triggers_after, run_cli


def _one_saga(path: Path) -> str:
    """A SQLite journal with saga `o-1`: an INTENT, its EXECUTED and ENDED."""
    url = f"sqlite:///{path}"
    sagacity = Sagacity.from_url(url)
    try:
        call = {"tool_name": "charge", "call_id": "charge#1"}
        sagacity.journal.append("o-1", Phase.INTENT, **call, payload={"input": {"amount": 5}})
        sagacity.journal.append("o-1", Phase.EXECUTED, **call, ref_seq=1, payload={"result": "c"})
        sagacity.journal.append("o-1", Phase.ENDED, payload={"outcome": "COMPLETED"})
    finally:
        sagacity.close()
    return str(path)


class TestShowOfATamperedSaga:
    def test_it_is_shown_with_a_warning_and_exit_1(self, tmp_path: Path) -> None:
        """An edited row: the journal is still printed, marked TAMPERED, warned of, exit 1."""
        database = _one_saga(tmp_path / "j.db")
        clean = run_cli("show", "o-1", "--database", database)
        assert (clean.returncode, clean.stderr) == (0, "")
        restore_triggers_after(
            database,
            'UPDATE sagacity_journal SET payload = \'{"result":"FORGED"}\' '
            "WHERE saga_id = 'o-1' AND seq = 2",
        )
        shown = run_cli("show", "o-1", "--database", database)
        assert shown.returncode == 1
        lines = shown.stdout.splitlines()
        assert lines[0].startswith("saga o-1: COMPLETED, 3 entries, ")
        assert lines[1].startswith("TAMPERED at seq 2: hash mismatch")
        assert len(lines) == 2 + 4  # the journal is still shown: a header and three rows
        assert shown.stderr.startswith(
            "sagacity show: warning: saga 'o-1' was changed after it was journaled (seq 2: "
            "hash mismatch"
        )
        assert shown.stderr.endswith(
            "what is shown from there on cannot be trusted: 'sagacity verify --saga o-1' "
            "checks it\n"
        )
        as_json = run_cli("show", "o-1", "--json", "--database", database)
        assert as_json.returncode == 1
        document = json.loads(as_json.stdout)
        assert [p["seq"] for p in document["problems"]] == [2]
        assert document["problems"][0]["reason"].startswith("hash mismatch")


class TestSeveralRequests:
    def test_reject_without_request_id_names_the_option(self, tmp_path: Path) -> None:
        """Two requests open: the refusal names --request-id (not request_id), exit 2."""
        database = tmp_path / "j.db"
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        try:

            @compensable(reversibility=Reversibility.IRREVERSIBLE)
            def wire(amount: str) -> str:
                return "wt-" + amount

            (tool,) = sagacity.wrap(wire)
            sagacity.saga("two", lambda: (tool("1"), tool("2")))
            ids = sorted(r.request_id for r in sagacity.pending("two"))
        finally:
            sagacity.close()
        done = run_cli(
            "reject", "two", "--approver", "bob", "--reason", "no", "--database", str(database)
        )
        assert done.returncode == 2
        assert done.stderr.endswith("; name one with --request-id\n")
        assert "request_id" not in done.stderr.replace("--request-id", "")
        for request_id in ids:
            assert request_id in done.stderr


class TestPlurals:
    def test_one_saga_one_entry(self, tmp_path: Path) -> None:
        """verify, show and export count one thing in the singular."""
        database = str(tmp_path / "j.db")
        sagacity = Sagacity.from_url(f"sqlite:///{database}")
        try:
            sagacity.journal.append("s-1", Phase.INTENT, tool_name="t", call_id="t#1", payload={})
        finally:
            sagacity.close()
        verified = run_cli("verify", "--database", database)
        assert verified.stdout == "1 saga, 1 entry: OK\n"
        shown = run_cli("show", "s-1", "--database", database)
        assert shown.stdout.startswith("saga s-1: OPEN (STALLED: no live worker), 1 entry, ")
        exported = run_cli("export", "-o", str(tmp_path / "out.jsonl"), "--database", database)
        assert exported.stderr == f"exported 1 entry to {tmp_path / 'out.jsonl'}\n"
