"""What only PostgreSQL shows: the schema, the trigger, stored text, URLs, pooled stores."""

from __future__ import annotations

import dataclasses
import datetime
import threading
import time
import uuid
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import psycopg
import pytest

from sagacity import ConfigurationError, JournalError, Phase, Sagacity, SchemaVersionError
from sagacity.approval import ApprovalRequest, ApprovalStore
from sagacity.audit import verify
from sagacity.journal import SideEffectJournal, canonical_bytes
from sagacity.journal.postgres import (
    SCHEMA_VERSION,
    PostgresApprovalStore,
    PostgresJournal,
    open_postgres_stores,
)
from sagacity.journal.postgres._database import parse_url, quote_identifier
from tests._postgres import server_url, with_query

pytestmark = pytest.mark.postgres

Admin = psycopg.Connection[tuple[Any, ...]]
T = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC)


def schema_of(url: str) -> str:
    return dict(parse_qsl(urlsplit(url).query))["schema"]


class TestSchema:
    def test_created_on_first_use_with_its_version(self, pg_url: str, admin: Admin) -> None:
        """Opening a URL creates its schema, its tables, the triggers and version 4."""
        schema = schema_of(pg_url)
        assert admin.execute("SELECT to_regnamespace(%s)", (schema,)).fetchone() == (None,)
        open_postgres_stores(pg_url)[0].close()
        tables = admin.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
            "ORDER BY table_name",
            (schema,),
        ).fetchall()
        assert tables == [
            ("sagacity_approval_request",),
            ("sagacity_journal",),
            ("sagacity_lease",),
            ("sagacity_meta",),
        ]
        version = admin.execute(
            f"SELECT value FROM \"{schema}\".sagacity_meta WHERE key = 'schema_version'"
        ).fetchone()
        assert version == (str(SCHEMA_VERSION),) == ("4",)

    def test_the_payload_column_is_text_not_jsonb(self, pg_url: str, admin: Admin) -> None:
        """Payloads and approval inputs are stored as text: jsonb would reorder and reformat."""
        Sagacity.from_url(pg_url).close()
        types = admin.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND column_name IN ('payload', 'input') ORDER BY 1",
            (schema_of(pg_url),),
        ).fetchall()
        assert types == [
            ("sagacity_approval_request", "input", "text"),
            ("sagacity_journal", "payload", "text"),
        ]

    def test_a_newer_schema_refuses_to_open(self, pg_url: str, admin: Admin) -> None:
        """A schema written by a newer sagacity raises SchemaVersionError and stays as it was."""
        Sagacity.from_url(pg_url).close()
        meta = f'"{schema_of(pg_url)}".sagacity_meta'
        admin.execute(f"UPDATE {meta} SET value = '99' WHERE key = 'schema_version'")
        with pytest.raises(SchemaVersionError, match=r"schema version 99.*upgrade sagacity"):
            Sagacity.from_url(pg_url)
        assert admin.execute(f"SELECT value FROM {meta}").fetchone() == ("99",)

    def test_a_version_2_schema_is_upgraded_to_journal_takeovers(
        self, pg_url: str, admin: Admin
    ) -> None:
        """A schema from before TAKEN_OVER gains the function that journals it.

        Its rows are kept, and a takeover then journals TAKEN_OVER.
        """
        schema = schema_of(pg_url)
        first = PostgresJournal(pg_url)
        lease = first.acquire_lease("s", "w1", now=T, expires_at=T)
        first.append("s", Phase.INTENT, fence=lease)
        first.close()
        admin.execute(f'DROP FUNCTION "{schema}".sagacity_take_lease')
        admin.execute(
            f"UPDATE \"{schema}\".sagacity_meta SET value = '2' WHERE key = 'schema_version'"
        )
        second = PostgresJournal(pg_url)
        try:
            second.acquire_lease("s", "w2", now=T, expires_at=T + datetime.timedelta(hours=1))
            assert [e.phase for e in second.entries("s")] == [Phase.INTENT, Phase.TAKEN_OVER]
        finally:
            second.close()
        version = admin.execute(
            f"SELECT value FROM \"{schema}\".sagacity_meta WHERE key = 'schema_version'"
        ).fetchone()
        assert version == ("4",)

    def test_a_version_2_schema_opened_read_only_refuses_a_lease_clearly(
        self, pg_url: str, admin: Admin
    ) -> None:
        """Opened as the CLI opens it (nothing created or changed), an older schema reads.

        A command that takes a lease says why it cannot.
        """
        schema = schema_of(pg_url)
        first = PostgresJournal(pg_url)
        first.append("s", Phase.INTENT)
        first.close()
        admin.execute(f'DROP FUNCTION "{schema}".sagacity_take_lease')
        admin.execute(
            f"UPDATE \"{schema}\".sagacity_meta SET value = '2' WHERE key = 'schema_version'"
        )
        journal, approvals = open_postgres_stores(pg_url, create=False)
        try:
            assert [e.phase for e in journal.entries("s")] == [Phase.INTENT]
            with pytest.raises(JournalError, match="schema predates this sagacity"):
                journal.acquire_lease("s", "cli", now=T, expires_at=T)
        finally:
            journal.close()
            approvals.close()

    def test_the_current_schema_reopens(self, pg_url: str) -> None:
        """Reopening keeps the journal, and the reopened journal appends after it."""
        first = PostgresJournal(pg_url)
        first.append("order-1", Phase.INTENT)
        first.close()
        second = PostgresJournal(pg_url)
        try:
            assert second.append("order-1", Phase.EXECUTED, ref_seq=1).seq == 2
        finally:
            second.close()

    @pytest.mark.parametrize("name", ["Tenant", "with space", "dot.ted", 'quo"te', "naïve;--"])
    def test_a_schema_named_as_sql_would_not_fold_opens_again_and_read_only(
        self, name: str, admin: Admin
    ) -> None:
        """Capitals, spaces, dots, quotes: the schema is found again on every open.

        Looked up unquoted, such a name was folded to lower case or refused, and a schema
        with a capital letter opened once, then never again ("already exists").
        """
        schema = f"{name} {uuid.uuid4().hex[:8]}"
        url = with_query(server_url(), schema=schema)
        try:
            for seq in (1, 2):
                journal, approvals = open_postgres_stores(url)
                assert journal.append("order-1", Phase.INTENT).seq == seq
                journal.close()
                approvals.close()
            journal, approvals = open_postgres_stores(url, create=False)
            assert verify(journal).ok
            assert [entry.seq for entry in journal.entries("order-1")] == [1, 2]
            journal.close()
            approvals.close()
            found = admin.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,))
            assert found.fetchone() == (1,)
        finally:
            admin.execute(f"DROP SCHEMA IF EXISTS {quote_identifier(schema)} CASCADE")

    def test_workers_starting_together_create_it_once(self, pg_url: str) -> None:
        """Eight journals opened at once on a new schema all open; one schema is made."""
        opened: list[PostgresJournal] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(8)

        def open_one() -> None:
            barrier.wait()
            try:
                opened.append(PostgresJournal(with_query(pg_url, pool_max_size="1")))
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=open_one) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for journal in opened:
            journal.close()
        assert (len(opened), errors) == (8, [])


class TestAppendOnly:
    @pytest.mark.parametrize(
        ("statement", "operation"),
        [
            ("UPDATE {t} SET payload = '\"forged\"'", "UPDATE"),
            ("DELETE FROM {t}", "DELETE"),
            ("TRUNCATE {t}", "TRUNCATE"),
        ],
    )
    def test_the_trigger_refuses_changes(
        self, pg_url: str, admin: Admin, statement: str, operation: str
    ) -> None:
        """UPDATE, DELETE and TRUNCATE of sagacity_journal are refused; the entry stays."""
        journal = PostgresJournal(pg_url)
        try:
            entry = journal.append("order-1", Phase.INTENT, payload={"amount": "10.00"})
            table = f'"{schema_of(pg_url)}".sagacity_journal'
            with pytest.raises(psycopg.errors.RaiseException) as refused:
                admin.execute(statement.format(t=table))
            assert str(refused.value).startswith(
                f"sagacity_journal is append-only: {operation} refused"
            )
            assert journal.entries("order-1") == [entry]
        finally:
            journal.close()


class TestStoredPayload:
    def test_the_stored_text_is_the_hashed_canonical_json(self, pg_url: str, admin: Admin) -> None:
        """The payload column holds exactly JCS of the payload: sorted keys, ES6 numbers."""
        journal = PostgresJournal(pg_url)
        payload = {"b": [1e21, 0.1, -0.0], "a": "東京 😀", "é": {"z": None, "y": True}}
        try:
            entry = journal.append("order-1", Phase.INTENT, payload=payload)
            (stored,) = admin.execute(
                f'SELECT payload FROM "{schema_of(pg_url)}".sagacity_journal'
            ).fetchone() or ("",)
            assert stored.encode() == canonical_bytes(payload)
            assert stored == '{"a":"東京 😀","b":[1e+21,0.1,0],"é":{"y":true,"z":null}}'
            (read,) = journal.entries("order-1")
            assert read == entry
            assert read.computed_hash() == entry.hash
        finally:
            journal.close()

    def test_saga_ids_sort_by_code_point(self, pg_url: str) -> None:
        """Listing orders ids as Python does, whatever the database's locale."""
        journal = PostgresJournal(pg_url)
        ids = ["b", "B", "a", "é", "Z", "😀", "a-2", "a_1"]
        try:
            for saga_id in ids:
                journal.append(saga_id, Phase.INTENT)
            assert journal.list_sagas() == sorted(ids)
            assert journal.list_sagas(after="Z", limit=3) == sorted(ids)[2:5]
            assert [e.saga_id for e in journal.list_entries()] == sorted(ids)
        finally:
            journal.close()


TRICKY_PAYLOADS: list[Any] = [
    None,
    {"floats": [0.1, 1e-7, 1e21, 2.0**60, 5e-324, -2.5], "big": 2**53 - 1},
    {"😀": "東京", "\ufb33": ["a", {"": None}], "controls": '\x00\x1f\n"\\'},
    # Look like the two fields the server fills in, in the payload and in the ids.
    {"prev_hash": "~" * 64, "seq": 2**53 - 1, "x": '"prev_hash":"' + "~" * 64 + '"'},
    '"seq":9007199254740991,"tool_name":',
]


class TestLockedPath:
    @pytest.mark.parametrize("payload", TRICKY_PAYLOADS, ids=range(len(TRICKY_PAYLOADS)))
    def test_the_database_hashes_as_seal_does(self, pg_url: str, payload: Any) -> None:
        """Appends on the locked path (hashed by the server) read back and verify."""
        journal = PostgresJournal(pg_url)
        try:
            appended = [
                journal.append(
                    "~" * 64,
                    Phase.INTENT,
                    tool_name='"seq":9007199254740991',
                    call_id="c#1",
                    payload=payload,
                )
            ]
            other = PostgresJournal(pg_url)  # a second worker: its first append is locked too
            appended.append(other.append("~" * 64, Phase.EXECUTED, ref_seq=1, payload=payload))
            other.close()
            assert (journal.stats.locked, journal.stats.fast) == (1, 0)
            read = journal.entries("~" * 64)
            assert read == appended
            assert [e.computed_hash() for e in read] == [e.hash for e in appended]
            assert verify(journal).ok
        finally:
            journal.close()


class TestPreparedAppends:
    """A sync append's INSERT goes as a statement prepared on its pooled connection."""

    @staticmethod
    def prepared_on(journal: PostgresJournal) -> list[str]:
        with journal.database.connection(time.monotonic() + 5) as conn:
            rows = conn.execute("SELECT name FROM pg_prepared_statements").fetchall()
        return sorted(name for (name,) in rows if name.startswith("sagacity_"))

    def test_a_statement_the_server_forgot_is_prepared_again(self, pg_url: str) -> None:
        """`DEALLOCATE ALL` on the one connection: the next append is not lost, nor doubled."""
        journal = PostgresJournal(with_query(pg_url, pool_max_size="1"))
        try:
            journal.append("order-1", Phase.INTENT, tool_name="reserve")
            journal.append("order-1", Phase.EXECUTED, tool_name="reserve", ref_seq=1)
            assert len(self.prepared_on(journal)) == 1
            with journal.database.connection(time.monotonic() + 5) as conn:
                conn.execute("DEALLOCATE ALL")
            assert self.prepared_on(journal) == []
            entry = journal.append("order-1", Phase.INTENT, tool_name="charge")
            assert entry.seq == 3
            assert [e.seq for e in journal.entries("order-1")] == [1, 2, 3]
            assert len(self.prepared_on(journal)) == 1
            assert verify(journal).ok
        finally:
            journal.close()


class TestErrors:
    def test_a_database_error_names_the_saga(self, pg_url: str) -> None:
        """A value PostgreSQL refuses becomes a JournalError naming the saga; nothing is kept."""
        journal = PostgresJournal(pg_url)
        try:
            with pytest.raises(JournalError) as refused:
                journal.append("order-1", Phase.INTENT, tool_name="bad\x00name")
            message = str(refused.value)
            assert message.startswith("saga 'order-1': cannot append INTENT of tool 'bad\\x00name'")
            assert message.endswith("the entry was not written")
            assert journal.entries("order-1") == []
        finally:
            journal.close()

    def test_a_dropped_table_names_the_saga_it_failed_for(self, pg_url: str, admin: Admin) -> None:
        """Reading a saga whose table is gone raises JournalError naming saga and server."""
        journal = PostgresJournal(pg_url)
        try:
            admin.execute(f'DROP TABLE "{schema_of(pg_url)}".sagacity_journal')
            with pytest.raises(JournalError, match=r"^saga 'order-1': cannot read the journal"):
                journal.entries("order-1")
        finally:
            journal.close()

    def test_an_unreachable_server_says_so(self) -> None:
        """No server on the port: from_url raises JournalError with libpq's reason."""
        with pytest.raises(JournalError, match=r"cannot connect to PostgreSQL 127.0.0.1:1/x.*"):
            Sagacity.from_url("postgresql://u@127.0.0.1:1/x?pool_timeout=0.5&connect_timeout=2")

    def test_a_closed_journal_refuses_appends(self, pg_url: str) -> None:
        """After close, append raises JournalError instead of reopening anything."""
        journal = PostgresJournal(pg_url)
        journal.close()
        journal.close()
        with pytest.raises(JournalError, match=r"^saga 'order-1': cannot append INTENT"):
            journal.append("order-1", Phase.INTENT)


class TestUrl:
    def test_sagacity_options_are_split_from_libpq_parameters(self) -> None:
        """Schema and pool_* go to sagacity; everything else stays in the URL for libpq."""
        settings = parse_url(
            "postgresql://app:secret@db.internal:6432/prod?schema=agents&sslmode=require"
            "&pool_min_size=2&pool_max_size=20&pool_timeout=2.5&application_name=worker"
        )
        assert settings.conninfo == (
            "postgresql://app:secret@db.internal:6432/prod?sslmode=require&application_name=worker"
        )
        assert (settings.schema, settings.pool_min_size, settings.pool_max_size) == (
            "agents",
            2,
            20,
        )
        assert settings.timeout == 2.5
        assert settings.where == "PostgreSQL db.internal:6432/prod (schema agents)"

    def test_defaults(self) -> None:
        """Without options: the search_path's schema, 1 to 10 connections, 10 s."""
        settings = parse_url("postgresql://localhost/db")
        assert (settings.schema, settings.pool_min_size, settings.pool_max_size) == (None, 1, 10)
        assert settings.timeout == 10.0

    @pytest.mark.parametrize(
        "query",
        [
            "pool_max_size=ten",
            "pool_min_size=5&pool_max_size=2",
            "pool_timeout=0",
            "schema=" + "s" * 64,
            "schema=100%25",
            "schema=a%00b",
        ],
    )
    def test_malformed_options_are_refused(self, query: str) -> None:
        """A malformed option raises ConfigurationError naming it, before connecting."""
        with pytest.raises(ConfigurationError, match=r"database URL"):
            parse_url(f"postgresql://localhost/db?{query}")


class TestStores:
    def test_from_url_shares_one_pool_closed_with_the_last_store(self, pg_url: str) -> None:
        """Sagacity.from_url builds both PostgreSQL stores on one pool; close() closes it."""
        sagacity = Sagacity.from_url(pg_url)
        journal, approvals = sagacity.journal, sagacity.approvals
        assert isinstance(journal, PostgresJournal)
        assert isinstance(journal, SideEffectJournal)
        assert isinstance(approvals, PostgresApprovalStore)
        assert isinstance(approvals, ApprovalStore)
        assert journal.database is approvals.database
        journal.close()
        assert not approvals.database.pool.closed
        approvals.close()
        assert approvals.database.pool.closed

    def test_statements_are_prepared_on_their_connection(self, pg_url: str) -> None:
        """The append's INSERT and the saga read run as server-side prepared statements."""
        journal = PostgresJournal(with_query(pg_url, pool_max_size="1"))
        try:
            journal.entries("order-1")
            journal.append("order-1", Phase.INTENT)
            with journal.database.connection(time.monotonic() + 5) as conn:
                prepared = [
                    row[0] for row in conn.execute("SELECT statement FROM pg_prepared_statements")
                ]
            table = f'"{schema_of(pg_url)}".sagacity_journal'
            assert any(sql.startswith(f"INSERT INTO {table} (saga_id, seq,") for sql in prepared)
            assert any(
                sql.endswith(f"FROM {table} WHERE saga_id = $1 ORDER BY seq") for sql in prepared
            )
        finally:
            journal.close()

    def test_requests_come_back_in_utc(self, pg_url: str) -> None:
        """Request times are stored as instants and read back in UTC, to the microsecond."""
        store = PostgresApprovalStore(pg_url)
        paris = datetime.timezone(datetime.timedelta(hours=1))
        request = ApprovalRequest(
            request_id="r1",
            saga_id="order-1",
            seq=3,
            call_id="wire#1",
            tool_name="send_wire",
            input={"amount": "1200.00"},
            input_sha256="ab" * 32,
            reason="IRREVERSIBLE",
            requested_at=datetime.datetime(2026, 1, 1, 10, 0, 0, 1, tzinfo=paris),
            expires_at=datetime.datetime(2026, 1, 1, 9, 30, tzinfo=datetime.UTC),
        )
        try:
            store.save(request)
            stored = store.get("r1")
            assert stored is not None
            assert stored.requested_at == datetime.datetime(
                2026, 1, 1, 9, 0, 0, 1, tzinfo=datetime.UTC
            )
            assert stored.requested_at.tzinfo is datetime.UTC
            assert stored == request
            store.save(request)  # the same request again (a retried save) is no error
            with pytest.raises(JournalError, match=r"another request with that id is stored"):
                store.save(dataclasses.replace(request, saga_id="order-2"))
        finally:
            store.close()
