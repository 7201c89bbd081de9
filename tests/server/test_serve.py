"""`serve()` runs the app with uvicorn on a tokens file: a real process on a real port."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from sagacity import Sagacity
from sagacity.server import hash_token
from tests.server._bank import Bank, start_wire
from tests.server._live import _free_port

ROOT = Path(__file__).resolve().parents[2]


def test_serve_on_a_tokens_file(tmp_path: Path) -> None:
    """The served app needs the token from the file (401 without); health answers without."""
    db = tmp_path / "served.db"
    seeded = Sagacity.from_url(f"sqlite:///{db}")
    bank = Bank()
    seeded.wrap(bank)
    start_wire(seeded, bank, "served-1")
    seeded.close()
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(
        f'[[token]]\nsha256 = "{hash_token("served-secret")}"\nprincipal = "ann"\n'
        'roles = ["viewer"]\n',
        encoding="utf-8",
    )
    port = _free_port()
    code = (
        "from sagacity.server import serve; "
        f"serve(database={str(db)!r}, host='127.0.0.1', port={port}, tokens={str(tokens)!r})"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                health = httpx.get(f"{base}/sagacity/health", timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.communicate()[1].decode()
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        assert health.json() == {"status": "ok"}
        assert httpx.get(f"{base}/sagacity/approvals").status_code == 401
        listed = httpx.get(
            f"{base}/sagacity/approvals", headers={"Authorization": "Bearer served-secret"}
        )
        assert listed.status_code == 200
        assert [r["saga_id"] for r in listed.json()] == ["served-1"]
        assert httpx.get(f"{base}/openapi.json").json()["info"]["title"] == "sagacity"
    finally:
        process.terminate()
        process.communicate(timeout=10)
