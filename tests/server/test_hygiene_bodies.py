"""Request bodies are bounded, and an unauthenticated request is refused before its body.

Over real HTTP (uvicorn on loopback): the requests are written on a raw socket, headers
first, so a test can see the server answer while the body has not been sent at all.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from sagacity import Sagacity
from sagacity.errors import ConfigurationError
from sagacity.server import create_app
from sagacity.workflows import WorkflowRuntime, WorkflowStatus
from tests.server._bank import ALICE, Bank, start_wire, token_auth
from tests.server._live import live_server
from tests.workflows._refund import REQUEST, Ledger, RefundWorkflow

LIMIT = 4096


@pytest.fixture
def base(sagacity: Sagacity) -> Iterator[str]:
    """A live server whose body limit is 4 KiB."""
    with live_server(create_app(sagacity, token_auth(), max_body_bytes=LIMIT)) as url:
        yield url


def _headers_only(base: str, path: str, headers: dict[str, str], length: int) -> tuple[int, dict]:
    """Send a POST's headers announcing `length` bytes and no body; return the answer.

    A server that reads the body before answering waits for bytes that never come: the
    socket's timeout then fails the test.
    """
    where = urlsplit(base)
    lines = [f"POST {path} HTTP/1.1", f"Host: {where.netloc}", f"Content-Length: {length}"]
    lines += ["Content-Type: application/json", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    with socket.create_connection((where.hostname, where.port), timeout=10) as conn:
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        while b"\r\n\r\n" not in answer or not _complete(answer):
            chunk = conn.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body else {}


def _complete(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


class TestAuthenticationFirst:
    def test_a_request_without_credentials_is_refused_before_its_body(
        self, sagacity: Sagacity, bank: Bank, base: str
    ) -> None:
        """401 while the announced body was never sent: the server did not wait to read it."""
        (request,) = start_wire(sagacity, bank, "b-1").pending
        status, body = _headers_only(
            base, f"/sagacity/approvals/{request.request_id}/approve", {}, LIMIT - 1
        )
        assert (status, body["error"]) == (401, "Unauthorized")
        assert sagacity.pending("b-1")[0].approvals == ()

    def test_an_unknown_token_is_refused_before_its_body(
        self, sagacity: Sagacity, bank: Bank, base: str
    ) -> None:
        """A bearer token nobody holds: 401 the same way, nothing read."""
        (request,) = start_wire(sagacity, bank, "b-2").pending
        status, body = _headers_only(
            base,
            f"/sagacity/approvals/{request.request_id}/approve",
            {"Authorization": "Bearer nobody"},
            LIMIT - 1,
        )
        assert (status, body["message"]) == (401, "the bearer token is not known")


class TestLimit:
    def test_a_declared_oversized_body_gets_413_before_it_is_sent(
        self, sagacity: Sagacity, bank: Bank, base: str
    ) -> None:
        """Content-Length of 48 MB from an approver: 413 at once, nothing journaled."""
        (request,) = start_wire(sagacity, bank, "b-3").pending
        status, body = _headers_only(
            base, f"/sagacity/approvals/{request.request_id}/approve", ALICE, 48 * 1024 * 1024
        )
        assert status == 413
        assert body["error"] == "ContentTooLarge"
        assert f"limit of {LIMIT} bytes" in body["message"]
        assert sagacity.pending("b-3")[0].approvals == ()

    def test_a_chunked_oversized_body_is_cut_off(
        self, sagacity: Sagacity, bank: Bank, base: str
    ) -> None:
        """Without Content-Length, the body is counted as it arrives: 413 past the limit."""
        (request,) = start_wire(sagacity, bank, "b-4").pending

        def chunks() -> Iterator[bytes]:
            yield b'{"sha256": "' + request.input_sha256.encode() + b'", "pad": "'
            for _ in range(64):
                yield b"x" * 1024
            yield b'"}'

        answer = httpx.post(
            f"{base}/sagacity/approvals/{request.request_id}/approve",
            content=chunks(),
            headers={**ALICE, "Content-Type": "application/json"},
        )
        assert answer.status_code == 413, answer.text
        assert sagacity.pending("b-4")[0].approvals == ()

    def test_a_body_within_the_limit_is_read(
        self, sagacity: Sagacity, bank: Bank, base: str
    ) -> None:
        """An approval of ordinary size goes through as before."""
        (request,) = start_wire(sagacity, bank, "b-5").pending
        answer = httpx.post(
            f"{base}/sagacity/approvals/{request.request_id}/approve",
            json={"sha256": request.input_sha256},
            headers=ALICE,
        )
        assert answer.status_code == 200, answer.text
        assert [a.approver for a in sagacity.pending("b-5")[0].approvals] == ["alice"]

    def test_the_inbox_sign_in_form_is_bounded_too(self, base: str) -> None:
        """The app holds every route to the limit: a 48 MB sign-in form gets 413 unread."""
        status, _ = _headers_only(base, "/sagacity/ui/sign-in", {}, 48 * 1024 * 1024)
        assert status == 413


class TestSetting:
    def test_the_default_is_one_mebibyte(self, sagacity: Sagacity) -> None:
        """Without a setting, 1 MiB passes the size check and one byte more does not."""
        from fastapi.testclient import TestClient

        with TestClient(create_app(sagacity, token_auth(), ui=False)) as client:
            over = client.post(
                "/sagacity/approvals/x/approve",
                content=b" " * (1024 * 1024 + 1),
                headers={**ALICE, "Content-Type": "application/json"},
            )
            assert over.status_code == 413
            within = client.post(
                "/sagacity/approvals/x/approve",
                content=b" " * (1024 * 1024),
                headers={**ALICE, "Content-Type": "application/json"},
            )
            assert within.status_code == 422  # read, then refused as not JSON

    def test_the_environment_sets_it(
        self, sagacity: Sagacity, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """SAGACITY_MAX_BODY_BYTES sets the limit; a value that is not a number is refused."""
        from fastapi.testclient import TestClient

        monkeypatch.setenv("SAGACITY_MAX_BODY_BYTES", "100")
        with TestClient(create_app(sagacity, token_auth(), ui=False)) as client:
            over = client.post("/sagacity/approvals/x/approve", content=b" " * 101, headers=ALICE)
            assert over.status_code == 413
        monkeypatch.setenv("SAGACITY_MAX_BODY_BYTES", "1MB")
        with pytest.raises(ConfigurationError, match="SAGACITY_MAX_BODY_BYTES='1MB'"):
            create_app(sagacity, token_auth(), ui=False)


class TestWorkflowRoutes:
    def test_a_gate_decision_without_credentials_is_refused_before_its_body(
        self, tmp_path: Path
    ) -> None:
        """The workflow routes authenticate first too: 401 with the body never sent."""
        sagacity = Sagacity.from_url(f"sqlite:///{tmp_path / 'sagacity.db'}")
        try:
            runtime = WorkflowRuntime(sagacity, [RefundWorkflow(Ledger(tmp_path / "l.txt"))])
            runtime.start("refund-request", REQUEST, run_id="r-1")
            app = create_app(sagacity, token_auth(), max_body_bytes=LIMIT)
            with live_server(app) as url:
                for path in ("gates/wire/approve", "gates/wire/reject"):
                    status, body = _headers_only(
                        url, f"/sagacity/workflows/r-1/{path}", {}, LIMIT - 1
                    )
                    assert (status, body["error"]) == (401, "Unauthorized"), path
                assert runtime.get("r-1").status is WorkflowStatus.PAUSED_AT_GATE
        finally:
            sagacity.close()
