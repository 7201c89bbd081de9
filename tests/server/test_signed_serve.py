"""`sagacity serve` in a deployment that requires signed approvals: a real process, a real port.

A second process appends an APPROVED row with plain SQL and a correct hash chain
(tests/cli/_forger.py). The server, started with the approval key, the public key and the
requirement in its environment, does not show that row as an approval, lets the real
approver approve (signed), and its inbox marks the row `unsigned: not counted`; the
worker, which requires signatures too, then runs the call once. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sagacity import Sagacity, SagaOutcome
from sagacity.audit import load_public_key
from sagacity.server import hash_token
from tests.cli._run import run_cli
from tests.server._bank import Bank, start_wire
from tests.server._live import _free_port

ROOT = Path(__file__).resolve().parents[2]
FORGER = ROOT / "tests" / "cli" / "_forger.py"
TOKENS = {"tok-bob": ("bob", "approver"), "tok-vic": ("vic", "viewer")}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class Keys:
    """The approval service's key pair, made with `sagacity keygen`."""

    def __init__(self, folder: Path) -> None:
        made = run_cli("keygen", "--out", str(folder))
        assert made.returncode == 0, made.stderr
        self.private = folder / "sagacity-checkpoint.key"
        self.public = folder / "sagacity-checkpoint.pub"


def serve(url: str, folder: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    """`sagacity serve` on a free port, as an operator starts it; the process and port."""
    tokens = folder / "tokens.toml"
    tokens.write_text(
        "".join(
            f'[[token]]\nsha256 = "{hash_token(token)}"\nprincipal = "{name}"\nroles = ["{role}"]\n'
            for token, (name, role) in TOKENS.items()
        ),
        encoding="utf-8",
    )
    port = _free_port()
    environment = {**os.environ, **env}
    environment.pop("SAGACITY_DATABASE_URL", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "sagacity.cli", "serve", "--database", url,
         "--port", str(port), "--tokens", str(tokens)],
        cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    return process, port


def wait_until_up(process: subprocess.Popen[str], port: int) -> str:
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"{base}/sagacity/health", timeout=1)
            return base
        except httpx.TransportError:
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path)


@pytest.fixture
def worker(shared_store_url: str, keys: Keys) -> Iterator[tuple[Sagacity, Bank]]:
    """The worker: it requires signed approvals, verifying with the public key only."""
    instance = Sagacity.from_url(
        shared_store_url,
        approval_public_keys=[load_public_key(keys.public)],
        require_signed_approvals=True,
    )
    bank = Bank()
    instance.wrap(bank)
    yield instance, bank
    instance.close()


def test_a_forged_row_is_refused_by_the_served_app(
    shared_store_url: str, tmp_path: Path, keys: Keys, worker: tuple[Sagacity, Bank]
) -> None:
    """Not listed as an approval, no 409 for the real approver, marked in the inbox."""
    sagacity, bank = worker
    assert start_wire(sagacity, bank, "w-1").outcome is SagaOutcome.AWAITING_APPROVAL
    forged = subprocess.run(
        [sys.executable, str(FORGER), shared_store_url, "w-1", "bob"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    seq = int(forged.stdout)
    process, port = serve(
        shared_store_url,
        tmp_path,
        {
            "SAGACITY_APPROVAL_KEY": str(keys.private),
            "SAGACITY_APPROVAL_PUBLIC_KEYS": str(keys.public),
            "SAGACITY_REQUIRE_SIGNED_APPROVALS": "1",
        },
    )
    try:
        base = wait_until_up(process, port)
        (listed,) = httpx.get(f"{base}/sagacity/approvals", headers=bearer("tok-vic")).json()
        assert (listed["state"], listed["approvals"]) == ("waiting", [])

        with httpx.Client(base_url=base) as browser:
            form = browser.get("/sagacity/ui/sign-in")
            csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert csrf is not None
            signed_in = browser.post(
                "/sagacity/ui/sign-in",
                data={"csrf": csrf.group(1), "token": "tok-vic", "next": ""},
            )
            assert signed_in.status_code == 303, signed_in.text
            page = browser.get("/sagacity/ui/saga", params={"id": "w-1"})
            assert page.status_code == 200, page.text
            assert "unsigned: not counted (it carries no signature)" in page.text
            assert "approved by bob" not in page.text

        approved = httpx.post(
            f"{base}/sagacity/approvals/{listed['request_id']}/approve",
            json={"sha256": listed["input_sha256"]},
            headers=bearer("tok-bob"),
        )
        assert approved.status_code == 200, approved.text
        entry = approved.json()["entry"]
        assert entry["seq"] == seq + 1
        assert entry["payload"]["key_id"] == load_public_key(keys.public).key_id
    finally:
        process.terminate()
        process.communicate(timeout=10)
    assert sagacity.resume_saga("w-1").outcome is SagaOutcome.COMPLETED
    assert bank.log == ["reserve sku-w-1", "wire 100 to acct-1"]


def test_requiring_signatures_without_a_key_to_sign_is_refused_at_start(
    sqlite_url: str, tmp_path: Path, keys: Keys
) -> None:
    """The approvals made there would never count: it says so and does not start."""
    Sagacity.from_url(sqlite_url).close()
    process, _ = serve(
        sqlite_url,
        tmp_path,
        {
            "SAGACITY_APPROVAL_PUBLIC_KEYS": str(keys.public),
            "SAGACITY_REQUIRE_SIGNED_APPROVALS": "1",
        },
    )
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2
    assert err == (
        "sagacity serve: the server requires signed approvals, but no key signs the approvals "
        "made in it, so none would count: set SAGACITY_APPROVAL_KEY (or --key) to the "
        "approval service's private key\n"
    )
