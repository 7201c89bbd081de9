"""One direct connection before the pool opens, so that a hopeless URL fails at once."""

from __future__ import annotations

import psycopg

from sagacity.errors import ConfigurationError, JournalError
from sagacity.journal.postgres._database import parse_url

__all__ = ["probe"]


def probe(url: str, *, connect_timeout: int = 5) -> None:
    """Connect once, outside any pool, and fail with the server's reason if that fails.

    A pool retries a refused connection until its timeout; an unknown database, a host
    that does not resolve or a bad URL option will not get better by waiting, and the
    command line should say so at once.

    Raises:
        JournalError: The connection failed; the message holds libpq's or the server's reason.
        ConfigurationError: The URL is not one libpq can parse.
    """
    settings = parse_url(url)
    try:
        with psycopg.connect(settings.conninfo, connect_timeout=connect_timeout):
            pass
    except psycopg.ProgrammingError as error:  # "invalid connection option", bad URI
        raise ConfigurationError(
            f"database URL for {settings.where} is not valid: {_one_line(error)}"
        ) from None
    except psycopg.Error as error:
        raise JournalError(f"cannot connect to {settings.where}: {_one_line(error)}") from None


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
