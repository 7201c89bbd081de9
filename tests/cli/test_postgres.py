"""The command line against PostgreSQL: hopeless URLs fail at once, reads create nothing."""

from __future__ import annotations

import time
from urllib.parse import parse_qsl, urlsplit

import pytest

from sagacity import Phase, Sagacity
from tests._postgres import (
    admin_connection,
    postgres_url_for,
    require_server,
    server_url,
    with_database,
    with_query,
)
from tests.cli._run import run_cli

pytestmark = pytest.mark.postgres


def timed(*args: str) -> tuple[float, int, str]:
    began = time.monotonic()
    done = run_cli(*args)
    return time.monotonic() - began, done.returncode, done.stderr


class TestHopelessUrls:
    def test_an_unknown_database_fails_at_once_with_the_server_reason(self) -> None:
        """Not after the pool's timeout: the server said no, and that is one line."""
        require_server()
        url = with_database(server_url(), "sagacity_no_such_database")
        seconds, code, stderr = timed("sagas", "--database", url)
        assert code == 3
        assert 'database "sagacity_no_such_database" does not exist' in stderr
        assert stderr.count("\n") == 1
        assert seconds < 8  # the pool would wait 10 s

    def test_a_host_that_does_not_resolve(self) -> None:
        """A bad host name is one line with the resolver's reason."""
        seconds, code, stderr = timed(
            "verify", "--database", "postgresql://postgres@no-such-host.invalid:5432/test"
        )
        assert code == 3
        assert stderr.startswith(
            "sagacity verify: cannot connect to PostgreSQL no-such-host.invalid:5432/test: "
        )
        assert stderr.count("\n") == 1
        assert seconds < 8

    def test_a_bad_url_option(self) -> None:
        """An option libpq does not know is a usage mistake, exit 2."""
        require_server()
        seconds, code, stderr = timed("sagas", "--database", with_query(server_url(), bogus="1"))
        assert code == 2
        assert 'invalid URI query parameter: "bogus"' in stderr
        assert stderr.count("\n") == 1
        assert seconds < 8


class TestReadsCreateNothing:
    def test_a_new_schema_is_not_created(self, request: pytest.FixtureRequest) -> None:
        """Reading a schema that does not exist is exit 1, and it still does not exist."""
        for url in postgres_url_for(request):
            schema = dict(parse_qsl(urlsplit(url).query))["schema"]
            done = run_cli("sagas", "--database", url)
            assert done.returncode == 1
            assert done.stderr.endswith(f"no schema {schema!r} (nothing was created)\n")
            with admin_connection() as admin:
                found = admin.execute("SELECT to_regnamespace(%s)", (schema,)).fetchone()
            assert found == (None,)

    def test_list_and_verify_a_postgres_journal(self, request: pytest.FixtureRequest) -> None:
        """The same commands as on SQLite: the saga listed, its chain verified."""
        for url in postgres_url_for(request):
            sagacity = Sagacity.from_url(url)
            sagacity.journal.append("order-1", Phase.INTENT, payload={"n": 1})
            sagacity.close()
            listed = run_cli("sagas", "--json", "--database", url)
            assert listed.returncode == 0, listed.stderr
            assert '"saga_id":"order-1","status":"OPEN","entries":1' in listed.stdout
            verified = run_cli("verify", "--database", url)
            assert (verified.returncode, verified.stdout) == (0, "1 saga, 1 entry: OK\n")
