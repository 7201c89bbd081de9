"""A local stand-in for Slack's Web API: records each call, answers `{"ok": true}`.

As Slack does, it refuses a message past Block Kit's documented limits with
`{"ok": false, "error": "invalid_blocks"}` (the call is recorded all the same).
"""

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


def block_kit_problems(message: dict[str, Any]) -> list[str]:
    """What in `message` breaks Slack's documented limits for the blocks sagacity sends."""
    problems: list[str] = []

    def check(what: str, text: str, limit: int) -> None:
        # Counted the stricter way: UTF-16 units, so a character past U+FFFF counts twice.
        length = len(text.encode("utf-16-le")) // 2
        if not 0 < length <= limit:
            problems.append(f"{what}: {length} characters, 1 to {limit} allowed")

    if "text" in message:
        check("text", message["text"], 40000)
    blocks = message.get("blocks", [])
    if len(blocks) > 50:
        problems.append(f"{len(blocks)} blocks, at most 50 allowed")
    for block in blocks:
        kind = block["type"]
        if kind == "header":
            check("header", block["text"]["text"], 150)
        elif kind == "section":
            check("section", block["text"]["text"], 3000)
        elif kind == "context":
            for element in block["elements"]:
                check("context element", element["text"], 3000)
        elif kind == "actions":
            for element in block["elements"]:
                check("button value", element["value"], 2000)
                check("button text", element["text"]["text"], 75)
                if "confirm" in element:
                    check("confirm title", element["confirm"]["title"]["text"], 100)
                    check("confirm text", element["confirm"]["text"]["text"], 300)
    return problems


@contextmanager
def slack_api() -> Iterator[SlackApi]:
    """Serve the stand-in on 127.0.0.1 and a free port; yield it."""
    recorder: list[SlackApi] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            api = recorder[0]
            body = json.loads(raw)
            api.calls.put(
                ApiCall(
                    method=self.path.rsplit("/", 1)[-1],
                    authorization=self.headers.get("Authorization", ""),
                    content_type=self.headers.get("Content-Type", ""),
                    body=body,
                )
            )
            refused = {"ok": False, "error": "invalid_blocks"}
            answer = json.dumps(refused if block_kit_problems(body) else api.answer).encode()
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
