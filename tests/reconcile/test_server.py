"""The JSON API and the inbox show verdicts and their evidence, and resolve with evidence."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the server extra: pip install 'sagacity[server]'")

from fastapi.testclient import TestClient

from sagacity import Phase, Sagacity, SagaOutcome
from sagacity.server import create_app
from tests.reconcile._payments import Mode, Payments, Stop
from tests.server._bank import OLGA, VIEWER, token_auth

UI = "/sagacity/ui"


@pytest.fixture
def sagacity(tmp_path: Path) -> Iterator[Sagacity]:
    """Saga `pay-1` whose reconciler raised (in doubt) and `pay-2` whose reconciler found it."""
    with Sagacity.from_url(f"sqlite:///{tmp_path / 's.db'}") as instance:
        for saga_id, mode in (("pay-1", Mode.RAISE), ("pay-2", Mode.HONEST)):
            payments = Payments(
                tmp_path / f"{saga_id}.ledger", mode=mode, stops={"after-charge": Stop.TIMEOUT}
            )
            tools = {t.name: t for t in instance.wrap(payments)}
            instance.saga(saga_id, lambda tools=tools: tools["charge"]("5.00"))  # type: ignore[misc]
        yield instance


@pytest.fixture
def client(sagacity: Sagacity) -> Iterator[TestClient]:
    app = create_app(sagacity, token_auth())
    with TestClient(app) as test_client:
        yield test_client


class TestJsonApi:
    def test_doubts_carry_the_reconciler_failure(self, client: TestClient) -> None:
        """GET /doubts: the doubt's last verdict, with the reconciler's failure."""
        (doubt,) = client.get("/sagacity/doubts", headers=VIEWER).json()
        assert doubt["call_id"] == "charge#1"
        assert doubt["reconciled"]["verdict"] == "unknown"
        assert doubt["reconciled"]["failure"] == "raised"
        assert doubt["reconciled"]["decided_by"] == "reconciler:charge"
        assert doubt["reconciler_here"] is True

    def test_a_doubt_nothing_here_can_settle_says_so(self, tmp_path: Path) -> None:
        """A server that wraps no tools: no verdict, and `reconciler_here` false."""
        with Sagacity.from_url(f"sqlite:///{tmp_path / 'bare.db'}") as bare:
            bare.journal.append(
                "s", Phase.INTENT, tool_name="charge", call_id="c", payload={"input": {}}
            )
            with TestClient(create_app(bare, token_auth())) as client:
                (doubt,) = client.get("/sagacity/doubts", headers=VIEWER).json()
                assert (doubt["reconciled"], doubt["reconciler_here"]) == (None, False)

    def test_a_saga_lists_its_verdicts_with_evidence(self, client: TestClient) -> None:
        """GET /sagas/{id}: `verdicts`, each with who decided and the evidence."""
        detail = client.get("/sagacity/sagas/pay-2", headers=VIEWER).json()
        (verdict,) = detail["verdicts"]
        digest = hashlib.sha256(b"charge charge#1 5.00").hexdigest()
        assert verdict["evidence"] == {"reference": "charge#1", "sha256": digest}
        assert verdict["verdict"] == "landed"
        assert detail["summary"]["status"] == "COMPENSATED"

    def test_resolve_with_evidence_is_journaled(
        self, client: TestClient, sagacity: Sagacity
    ) -> None:
        """POST resolve with evidence: journaled; a lone or malformed digest is a 422."""
        url = "/sagacity/sagas/pay-1/calls/charge%231/resolve"
        lone = client.post(
            url, json={"executed": False, "evidence": {"reference": "x"}}, headers=OLGA
        )
        assert lone.status_code == 422
        assert "sha256" in lone.text
        for reference, sha256 in [("x", "zz"), ("   ", "0f" * 32), ("a\x1bb", "0f" * 32)]:
            bad = client.post(
                url,
                json={"executed": False, "evidence": {"reference": reference, "sha256": sha256}},
                headers=OLGA,
            )
            assert bad.status_code == 422, (reference, sha256)
        digest = "0f" * 32
        done = client.post(
            url,
            json={"executed": False, "evidence": {"reference": "ticket-7", "sha256": digest}},
            headers=OLGA,
        )
        assert done.status_code == 200, done.text
        assert done.json()["payload"]["evidence"] == {"reference": "ticket-7", "sha256": digest}
        assert done.json()["payload"]["resolved_by"] == "olga"
        assert sagacity.compensate("pay-1").outcome is SagaOutcome.COMPENSATED


class TestInbox:
    def test_the_saga_page_shows_the_verdict_and_resolves_with_evidence(
        self, client: TestClient, sagacity: Sagacity
    ) -> None:
        """The page says what the reconciler answered; its form journals the evidence."""
        form = client.get(f"{UI}/sign-in")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        page = client.post(
            f"{UI}/sign-in", data={"csrf": csrf.group(1), "token": "tok-olga", "next": ""}
        )
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        saga_page = client.get(f"{UI}/saga?id=pay-1")
        assert saga_page.status_code == 200
        assert "Reconciler: unknown by reconciler:charge (seq 3): the reconciler raised" in (
            saga_page.text
        )
        assert 'name="evidence_sha256"' in saga_page.text
        digest = "ab" * 32
        posted = client.post(
            f"{UI}/sagas/resolve",
            data={
                "csrf": csrf.group(1),
                "saga_id": "pay-1",
                "call_id": "charge#1",
                "kind": "call",
                "executed": "true",
                "result": '"ch-charge#1"',
                "reason": "the dashboard",
                "evidence": "ch-charge#1",
                "evidence_sha256": digest,
            },
        )
        assert posted.status_code == 200, posted.text
        entry = sagacity.history("pay-1")[-1]
        assert entry.phase is Phase.EXECUTED
        assert entry.payload["evidence"] == {"reference": "ch-charge#1", "sha256": digest}
        assert entry.payload["reason"] == "the dashboard"
        after = client.get(f"{UI}/saga?id=pay-1").text
        assert "Verdicts and findings" in after
        assert f"landed by olga (seq {entry.seq}), evidence ch-charge#1 sha256 {digest}" in after
