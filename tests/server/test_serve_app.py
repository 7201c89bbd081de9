"""`sagacity serve --app MODULE:OBJECT`: what the application configured in code, served.

Real processes on real ports. The application's module builds its Sagacity (here with its
own signing key, which no command-line option names) or its whole app with
`create_app`; the command serves it, and refuses the options that would configure it a
second way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from sagacity import Sagacity, SagaOutcome
from sagacity.audit import generate_key, load_public_key
from sagacity.server import hash_token
from tests.server._bank import Bank, start_wire
from tests.server._live import _free_port
from tests.server.test_signed_serve import wait_until_up

ROOT = Path(__file__).resolve().parents[2]

APPLICATION = """
from sagacity import Sagacity
from sagacity.audit import load_private_key, load_public_key
from sagacity.server import Principal, TokenAuth, create_app

sagacity = Sagacity.from_url(
    {url!r},
    approval_signing_key=load_private_key({key!r}),
    require_signed_approvals=True,
)

def build():
    return sagacity

app = create_app(
    sagacity,
    TokenAuth.from_tokens({{"tok-bob": Principal("bob", frozenset({{"approver"}}))}}),
    ui=False,
)

unsigned = Sagacity.from_url(
    {url!r}, require_signed_approvals=True, approval_public_keys=[load_public_key({pub!r})]
)
"""


@pytest.fixture
def application(tmp_path: Path) -> tuple[Path, str, Path]:
    """A module `approvals_app` in its own folder; the folder, the database URL, the key."""
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    key = generate_key()
    private, public = tmp_path / "approval.key", tmp_path / "approval.pub"
    private.write_bytes(key.pem())
    private.chmod(0o600)
    public.write_bytes(key.public.pem())
    folder = tmp_path / "application"
    folder.mkdir()
    (folder / "approvals_app.py").write_text(
        textwrap.dedent(APPLICATION).format(url=url, key=str(private), pub=str(public)),
        encoding="utf-8",
    )
    return folder, url, public


def serve(folder: Path, *options: str) -> tuple[subprocess.Popen[str], int]:
    """`sagacity serve` run from the application's folder, as an operator runs it."""
    port = _free_port()
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    for variable in ("SAGACITY_DATABASE_URL", "SAGACITY_APPROVAL_KEY", "SAGACITY_TOKENS"):
        environment.pop(variable, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "sagacity.cli", "serve", "--port", str(port), *options],
        cwd=folder, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    return process, port


def refused(folder: Path, *options: str) -> str:
    """What `sagacity serve` says when it refuses to start (exit 2)."""
    process, _ = serve(folder, *options)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2, err
    return err


def waiting_wire(url: str, public: Path) -> tuple[Sagacity, Bank]:
    """The agent's side: a wire waiting for approval, checked with the server's public key."""
    agent = Sagacity.from_url(
        url, approval_public_keys=[load_public_key(public)], require_signed_approvals=True
    )
    bank = Bank()
    agent.wrap(bank)
    assert start_wire(agent, bank, "w-1").outcome is SagaOutcome.AWAITING_APPROVAL
    return agent, bank


def approve(base: str, token: str) -> httpx.Response:
    """Approve the only waiting request, bound to the hash the approver was shown."""
    headers = {"Authorization": f"Bearer {token}"}
    (listed,) = httpx.get(f"{base}/sagacity/approvals", headers=headers).json()
    return httpx.post(
        f"{base}/sagacity/approvals/{listed['request_id']}/approve",
        json={"sha256": listed["input_sha256"]},
        headers=headers,
    )


@pytest.mark.parametrize("target", ["approvals_app:sagacity", "approvals_app:build"])
def test_a_sagacity_from_code_is_served_with_its_own_signing_key(
    application: tuple[Path, str, Path], tmp_path: Path, target: str
) -> None:
    """No key option: the approval is signed by the key the application's code loaded."""
    folder, url, public = application
    agent, bank = waiting_wire(url, public)
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(
        f'[[token]]\nsha256 = "{hash_token("tok-bob")}"\nprincipal = "bob"\nroles = ["approver"]\n',
        encoding="utf-8",
    )
    process, port = serve(folder, "--app", target, "--tokens", str(tokens))
    try:
        base = wait_until_up(process, port)
        approved = approve(base, "tok-bob")
        assert approved.status_code == 200, approved.text
        assert approved.json()["entry"]["payload"]["key_id"] == load_public_key(public).key_id
    finally:
        process.terminate()
        process.communicate(timeout=10)
    assert agent.resume_saga("w-1").outcome is SagaOutcome.COMPLETED
    assert bank.log == ["reserve sku-w-1", "wire 100 to acct-1"]
    agent.close()


def test_an_app_from_code_is_served_as_built(application: tuple[Path, str, Path]) -> None:
    """Its own tokens decide, and its inbox is off as its code asked (ui=False)."""
    folder, url, public = application
    agent, _ = waiting_wire(url, public)
    process, port = serve(folder, "--app", "approvals_app:app")
    try:
        base = wait_until_up(process, port)
        assert httpx.get(f"{base}/sagacity/ui/sign-in").status_code == 404
        assert httpx.get(f"{base}/sagacity/approvals").status_code == 401
        approved = approve(base, "tok-bob")
        assert approved.status_code == 200, approved.text
        assert approved.json()["entry"]["payload"]["key_id"] == load_public_key(public).key_id
    finally:
        process.terminate()
        process.communicate(timeout=10)
    agent.close()


def test_options_that_would_configure_it_twice_are_refused(
    application: tuple[Path, str, Path], tmp_path: Path
) -> None:
    folder, url, _ = application
    err = refused(folder, "--app", "approvals_app:sagacity", "--database", url, "--create")
    assert err == (
        "sagacity serve: --app 'approvals_app:sagacity' brings its own configuration: leave "
        "out --database, --create (set them where the application builds its Sagacity)\n"
    )
    tokens = tmp_path / "tokens.toml"
    tokens.write_text("", encoding="utf-8")
    err = refused(folder, "--app", "approvals_app:app", "--tokens", str(tokens))
    assert err == (
        "sagacity serve: --app 'approvals_app:app' is an app: it has its tokens already "
        "(leave out --tokens)\n"
    )


def test_what_cannot_be_served_is_named(application: tuple[Path, str, Path]) -> None:
    folder, _, _ = application
    assert refused(folder, "--app", "approvals_app:unsigned") == (
        "sagacity serve: --app 'approvals_app:unsigned': its Sagacity requires signed "
        "approvals but has no approval_signing_key, so no approval made in the server would "
        "count\n"
    )
    assert refused(folder, "--app", "approvals_app:APPLICATION_NAME") == (
        "sagacity serve: --app 'approvals_app:APPLICATION_NAME': 'approvals_app' has no "
        "'APPLICATION_NAME'\n"
    )
    assert refused(folder, "--app", "approvals_app") == (
        "sagacity serve: --app 'approvals_app': give module:object, such as myapp.approvals:app\n"
    )
    assert refused(folder, "--sweep-interval", "-1") == (
        "sagacity serve: --sweep-interval must be 0 or more seconds, not -1.0\n"
    )
