"""Standing grants where approvals must be signed: `sagacity serve`, the CLI and verify.

Real processes on SQLite and PostgreSQL. A grant journaled without a signature (by a
process that does not sign) is listed by the served app and its Grants page as
`unverifiable`, covers no call of a worker that requires signatures, and is named by
`sagacity verify` given the approval key. A grant made through the served app or by
`sagacity grant --key` is signed and covers; `sagacity grant` with no key to sign is
refused with nothing journaled.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sagacity import Sagacity, SagaOutcome
from sagacity.audit import load_public_key
from tests.cli._run import run_cli
from tests.server._bank import Bank, start_wire
from tests.server.test_signed_serve import Keys, bearer, serve, wait_until_up

REQUIRED = {"SAGACITY_REQUIRE_SIGNED_APPROVALS": "1"}


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    """The approval service's key pair."""
    return Keys(tmp_path)


@pytest.fixture
def worker(shared_store_url: str, keys: Keys) -> Iterator[tuple[Sagacity, Bank]]:
    """A worker that requires signed approvals and holds only the public key."""
    instance = Sagacity.from_url(
        shared_store_url,
        approval_public_keys=[load_public_key(keys.public)],
        require_signed_approvals=True,
    )
    bank = Bank()
    instance.wrap(bank)
    yield instance, bank
    instance.close()


def _wired(sagacity: Sagacity, bank: Bank, saga_id: str) -> SagaOutcome:
    return start_wire(sagacity, bank, saga_id, started_by="alice").outcome


def test_an_unsigned_grant_does_not_count_anywhere(
    shared_store_url: str, tmp_path: Path, keys: Keys, worker: tuple[Sagacity, Bank]
) -> None:
    """Served app, Grants page, worker and verify all hold the unsigned grant to nothing."""
    sagacity, bank = worker
    with Sagacity.from_url(shared_store_url) as unsigned:  # signs nothing, requires nothing
        bare = unsigned.grant("wire", grantor="carol", max_calls=5, ttl=3600)
    assert _wired(sagacity, bank, "w-1") is SagaOutcome.AWAITING_APPROVAL

    process, port = serve(
        shared_store_url,
        tmp_path,
        {
            "SAGACITY_APPROVAL_KEY": str(keys.private),
            "SAGACITY_APPROVAL_PUBLIC_KEYS": str(keys.public),
            **REQUIRED,
        },
    )
    try:
        base = wait_until_up(process, port)
        (listed,) = httpx.get(f"{base}/sagacity/grants", headers=bearer("tok-vic")).json()
        assert (listed["grant_id"], listed["state"], listed["remaining_calls"]) == (
            bare.grant_id,
            "unverifiable",
            0,
        )
        assert listed["problem"] == "it carries no signature, and approvals must be signed"
        with httpx.Client(base_url=base) as browser:
            form = browser.get("/sagacity/ui/sign-in")
            csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert csrf is not None
            browser.post(
                "/sagacity/ui/sign-in",
                data={"csrf": csrf.group(1), "token": "tok-vic", "next": ""},
            )
            page = browser.get("/sagacity/ui/grants")
            assert page.status_code == 200, page.text
            assert "grant-unverifiable" in page.text
            assert "it carries no signature" in page.text

        made = httpx.post(
            f"{base}/sagacity/grants",
            json={"tool_name": "wire", "max_calls": 1, "ttl_seconds": 3600},
            headers=bearer("tok-bob"),
        )
        assert made.status_code == 201, made.text
        assert made.json()["state"] == "active"
    finally:
        process.terminate()
        process.communicate(timeout=10)

    signed = made.json()["grant_id"]
    granted = sagacity.history(f"grant-{signed}")[0]
    assert granted.payload["key_id"] == load_public_key(keys.public).key_id  # type: ignore[index,call-overload]
    assert _wired(sagacity, bank, "w-2") is SagaOutcome.COMPLETED
    intent = next(e for e in sagacity.history("w-2") if e.tool_name == "wire")
    assert intent.payload["approval_grant"]["grant_id"] == signed  # type: ignore[index,call-overload]
    assert sagacity.get_grant(bare.grant_id).used_calls == 0

    checked = run_cli(
        "verify", "--database", shared_store_url, "--approval-public-key", str(keys.public)
    )
    assert checked.returncode == 1, checked.stdout
    assert f"grant-{bare.grant_id}" in checked.stdout
    assert "unsigned grant: the GRANTED entry does not count" in checked.stdout
    assert f"grant-{signed}" not in checked.stdout


def test_the_cli_grants_signed_or_not_at_all(
    shared_store_url: str, keys: Keys, worker: tuple[Sagacity, Bank]
) -> None:
    """No key where signatures are required: exit 2, nothing journaled; --key signs it."""
    sagacity, bank = worker
    options = ["--database", shared_store_url, "--grantor", "carol", "--max-calls", "1"]
    refused = run_cli("grant", "wire", *options, "--ttl", "1h", env=REQUIRED)
    assert refused.returncode == 2
    assert "no key signs this one" in refused.stderr
    assert sagacity.grants() == []

    made = run_cli(
        "grant", "wire", *options, "--ttl", "1h", "--key", str(keys.private), env=REQUIRED
    )
    assert made.returncode == 0, made.stderr
    (grant,) = sagacity.grants()
    assert grant.state == "active"
    assert _wired(sagacity, bank, "w-1") is SagaOutcome.COMPLETED
