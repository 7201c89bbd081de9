"""README's "Approve in the browser", as written: make demo, a token, serve, sign in, resume."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sagacity import Phase, Sagacity
from tests.cli._run import ROOT, run_cli
from tests.server._live import _free_port

pytest.importorskip("uvicorn")


def _readme_steps() -> tuple[str, str, str]:
    """The token script, the serve command and the resume command of the README."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Approve in the browser", 1)[1].split("\n## ", 1)[0]
    first, second = re.findall(r"```sh\n(.*?)```", section, re.S)
    token_script, serve = first.split("\nPY\n")
    (resume,) = [line for line in second.splitlines() if line.strip()]
    return token_script + "\nPY\n", serve.splitlines()[0], resume


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A working directory that looks like a clone after `make demo`: .venv and the demo file."""
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    done = run_cli("demo", "--database", "sagacity-demo.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return tmp_path


@pytest.fixture
def served(clone: Path) -> Iterator[tuple[str, str]]:
    """Run the README's token script and serve command; yield the base URL and the token."""
    token_script, serve, _ = _readme_steps()
    made = subprocess.run(
        ["bash", "-c", token_script], cwd=clone, capture_output=True, text=True, check=False
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.removeprefix("sign in with: ").strip()
    assert token
    assert token not in (clone / "tokens.toml").read_text(encoding="utf-8")
    port = _free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SAGACITY_")}
    process = subprocess.Popen(
        ["bash", "-c", f"exec {serve} --port {port}"],
        cwd=clone,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/sagacity/health", timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.communicate()[1].decode()
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        yield base, token
    finally:
        process.terminate()
        process.communicate(timeout=10)


class TestDemoInbox:
    def test_the_readme_path_end_to_end(self, clone: Path, served: tuple[str, str]) -> None:
        """Sign in to the inbox, see wire-1003, approve it, run it with the demo's tools."""
        base, token = served
        with httpx.Client(base_url=base, follow_redirects=True, timeout=10) as browser:
            form = browser.get("/sagacity/ui/sign-in")
            (nonce,) = re.findall(r'name="csrf" value="([^"]+)"', form.text)
            inbox = browser.post("/sagacity/ui/sign-in", data={"csrf": nonce, "token": token})
            assert inbox.status_code == 200, inbox.text
            assert "Signed in as you." in inbox.text
            assert "wire-1003" in inbox.text
            assert "send_wire_transfer" in inbox.text
            assert "wire-1002" not in inbox.text  # the demo ran that one itself

            bearer = {"Authorization": f"Bearer {token}"}
            (request,) = browser.get("/sagacity/approvals", headers=bearer).json()
            assert request["saga_id"] == "wire-1003"
            assert request["input"] == {"amount": "980.00 EUR", "to": "FR76 3000 6000"}
            assert request["started_by"] == "shop-agent"
            approved = browser.post(
                f"/sagacity/approvals/{request['request_id']}/approve",
                json={"sha256": request["input_sha256"]},
                headers=bearer,
            )
            assert approved.status_code == 200, approved.text
            assert approved.json()["ready"] is True
            page = browser.get(f"/sagacity/ui/requests/{request['request_id']}")
            assert "is not wrapped in this server" in page.text
            assert "Run the approved call" not in page.text

        _, _, resume = _readme_steps()
        ran = subprocess.run(
            ["bash", "-c", resume], cwd=clone, capture_output=True, text=True, check=False
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout == (
            "    bank: wired 980.00 EUR to FR76 3000 6000 as wt-f775\n"
            "saga 'wire-1003': COMPLETED\n"
            'result: "wt-f775"\n'
        )
        again = subprocess.run(
            ["bash", "-c", resume], cwd=clone, capture_output=True, text=True, check=False
        )
        assert again.returncode == 2
        assert "wire-1003" in again.stderr
        assert "wired" not in again.stdout  # an irreversible call runs once

        sagacity = Sagacity.from_url(f"sqlite:///{clone / 'sagacity-demo.db'}")
        try:
            phases = [e.phase for e in sagacity.journal.entries("wire-1003")]
        finally:
            sagacity.close()
        assert phases == [
            Phase.AWAITING_APPROVAL,
            Phase.APPROVED,
            Phase.INTENT,
            Phase.EXECUTED,
            Phase.ENDED,
        ]

    def test_resume_before_the_approval_is_refused(self, clone: Path) -> None:
        """The README's resume command, run before anyone approved, runs nothing."""
        _, _, resume = _readme_steps()
        ran = subprocess.run(
            ["bash", "-c", resume], cwd=clone, capture_output=True, text=True, check=False
        )
        assert ran.returncode == 2
        assert "saga 'wire-1003': no approval is journaled" in ran.stderr
        assert ran.stdout == ""

    def test_a_rerun_of_the_demo_replaces_an_approved_wire(self, clone: Path) -> None:
        """After wire-1003 ran, make demo again leaves it waiting again, on a fresh file."""
        _, _, resume = _readme_steps()
        listed = run_cli("pending", "--database", "sagacity-demo.db", "--json", cwd=clone)
        digest = json.loads(listed.stdout)["input_sha256"]
        approved = run_cli(
            "approve",
            "wire-1003",
            "--database",
            "sagacity-demo.db",
            "--approver",
            "you",
            "--sha256",
            digest,
            cwd=clone,
        )
        assert approved.returncode == 0, approved.stderr
        assert subprocess.run(["bash", "-c", resume], cwd=clone, check=False).returncode == 0
        again = run_cli("demo", "--database", "sagacity-demo.db", cwd=clone)
        assert again.returncode == 0, again.stderr
        pending = run_cli("pending", "--database", "sagacity-demo.db", "--json", cwd=clone)
        assert pending.returncode == 0, pending.stderr
        assert '"saga_id":"wire-1003"' in pending.stdout.replace(" ", "")


class TestDemoInboxInChromium:
    def test_sign_in_see_and_approve_the_demo_wire(
        self, clone: Path, served: tuple[str, str]
    ) -> None:
        """In Debian's chromium: sign in with the README's token, approve wire-1003, run it."""
        from tests.server.browser.conftest import chromium_path

        executable = chromium_path()
        from playwright.sync_api import sync_playwright

        base, token = served
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=executable, headless=True, args=["--no-sandbox"]
            )
            try:
                page = browser.new_page()
                page.goto(f"{base}/sagacity/ui")
                assert "/sagacity/ui/sign-in" in page.url
                page.fill("#token", token)
                page.click("button[type=submit]")
                page.wait_for_selector("text=Signed in as you")
                rows = page.locator("table.queue tbody tr")
                assert rows.count() == 1
                assert "wire-1003" in rows.nth(0).inner_text()
                rows.nth(0).locator("a.tool").click()
                page.wait_for_selector("#payload")
                assert '"amount": "980.00 EUR"' in page.locator("#payload").inner_text()
                sha256 = page.locator("#sha256").inner_text()
                page.click("#approve")
                page.wait_for_selector("text=Approved by you")
                assert "is not wrapped in this server" in page.content()
                assert page.locator("#resume").count() == 0
            finally:
                browser.close()

        sagacity = Sagacity.from_url(f"sqlite:///{clone / 'sagacity-demo.db'}")
        try:
            approved = sagacity.journal.entries("wire-1003")[-1]
        finally:
            sagacity.close()
        assert approved.phase is Phase.APPROVED
        payload = approved.payload
        assert isinstance(payload, dict)
        assert (payload["approver"], payload["input_sha256"]) == ("you", sha256)
        _, _, resume = _readme_steps()
        ran = subprocess.run(
            ["bash", "-c", resume], cwd=clone, capture_output=True, text=True, check=False
        )
        assert ran.returncode == 0, ran.stderr
        assert "saga 'wire-1003': COMPLETED" in ran.stdout
