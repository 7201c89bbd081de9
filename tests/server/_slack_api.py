"""A local stand-in for Slack's Web API: records each call, answers `{"ok": true}`."""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclasses.dataclass(frozen=True)
class ApiCall:
    """One call the API received."""

    method: str
    """The Web API method (`chat.postMessage`, ...)."""
    authorization: str
    """The Authorization header."""
    content_type: str
    """The Content-Type header."""
    body: dict[str, Any]
    """The JSON body."""


class SlackApi:
    """What the stand-in received, in order; `next()` waits for the next call."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.calls: queue.Queue[ApiCall] = queue.Queue()
        self.answer: dict[str, Any] = {
            "ok": True,
            "channel": "C0APPROVE",
            "ts": "1700000000.000100",
        }

    def next(self, timeout: float = 10.0) -> ApiCall:
        """The next call; fails the test after `timeout` seconds without one."""
        try:
            return self.calls.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no Slack API call arrived in {timeout} s") from None


@contextmanager
def slack_api() -> Iterator[SlackApi]:
    """Serve the stand-in on 127.0.0.1 and a free port; yield it."""
    recorder: list[SlackApi] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            api = recorder[0]
            api.calls.put(
                ApiCall(
                    method=self.path.rsplit("/", 1)[-1],
                    authorization=self.headers.get("Authorization", ""),
                    content_type=self.headers.get("Content-Type", ""),
                    body=json.loads(raw),
                )
            )
            answer = json.dumps(api.answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    recorder.append(SlackApi(f"http://127.0.0.1:{server.server_address[1]}/api"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
