"""Provenance of every decision: who, when, why (the justification), and what asked.

Runs on memory, SQLite and PostgreSQL. The justification rides in the APPROVED payload
(hash-chained, and covered by the signature where approvals are signed); what initiated
the call rides in the AWAITING_APPROVAL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from fastapi.testclient import TestClient

from sagacity import (
    ApprovalError,
    ApprovalSignatureError,
    ConfigurationError,
    Phase,
    Reversibility,
    Sagacity,
    SagaOutcome,
    compensable,
    verify,
)
from sagacity.adapter import agent_run, pausing_as
from sagacity.approval._provenance import initiator
from sagacity.audit._keys import PrivateKey, generate_key
from sagacity.server import create_app
from tests.approval._edit_row import edit_payload
from tests.approval._policy import SAGA, OpenSagacity, inject_approval, waiting_saga
from tests.cli._run import run_cli
from tests.server._bank import BOB, VIEWER, token_auth

UI = "/sagacity/ui"

HOSTILE = "<script>alert(1)</script>\u202e'; DROP TABLE sagacity_journal;--\x1b[2J\u0000 \U0001f600"


class Vault:
    """An IRREVERSIBLE tool whose approvals must say why."""

    def __init__(self) -> None:
        self.opened: list[str] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE, justification_required=True)
    def open_vault(self, vault: str) -> str:
        """Open a vault."""
        self.opened.append(vault)
        return f"opened {vault}"


def waiting_vault(sagacity: Sagacity, saga_id: str = "vault-1") -> Vault:
    vault = Vault()
    sagacity.wrap(vault)
    tool = sagacity.tool("open_vault")
    result = sagacity.saga(saga_id, lambda: tool(vault="V-1"), started_by="alice")
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL
    return vault


@pytest.fixture(scope="module")
def key() -> PrivateKey:
    return generate_key()


class TestJustification:
    def test_is_journaled_and_shown_with_the_decision(self, sagacity: Sagacity) -> None:
        """The APPROVED carries approver and justification; pending shows them with its time."""
        waiting_saga(sagacity, started_by="alice")
        entry = sagacity.approve(SAGA, approver="bob", justification="invoice INV-7 checked")
        assert entry.payload == {
            "request_id": entry.payload["request_id"],
            "approver": "bob",
            "input_sha256": entry.payload["input_sha256"],
            "justification": "invoice INV-7 checked",
            "via": "python",
            "initiated_by": {"by": "human", "principal": "alice"},
        }
        (shown,) = sagacity.pending(SAGA)
        (approval,) = shown.approvals
        assert (approval.approver, approval.justification) == ("bob", "invoice INV-7 checked")
        assert approval.approved_at == entry.recorded_at
        assert shown.to_json()["approvals"][0]["justification"] == "invoice INV-7 checked"
        assert verify(sagacity.journal, SAGA).ok

    def test_a_hostile_string_is_kept_exactly(self, sagacity: Sagacity) -> None:
        """Markup, bidi overrides, escapes and NUL are evidence: stored and read back as given."""
        waiting_saga(sagacity, started_by="alice")
        sagacity.approve(SAGA, approver="bob", justification=HOSTILE)
        approved = sagacity.history(SAGA)[-1]
        assert approved.phase is Phase.APPROVED
        assert approved.payload["justification"] == HOSTILE
        assert sagacity.pending(SAGA)[0].approvals[0].justification == HOSTILE
        assert verify(sagacity.journal, SAGA).ok
        assert sagacity.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED

    @pytest.mark.parametrize(
        ("justification", "why"),
        [(42, "must be text, not int"), ("x" * 2001, "2001 characters; at most 2000")],
    )
    def test_bad_input_is_refused_and_nothing_journaled(
        self, sagacity: Sagacity, justification: Any, why: str
    ) -> None:
        """A justification that is not text, or too long, journals nothing."""
        waiting_saga(sagacity, started_by="alice")
        before = len(sagacity.history(SAGA))
        with pytest.raises(ApprovalError, match=why):
            sagacity.approve(SAGA, approver="bob", justification=justification)
        assert len(sagacity.history(SAGA)) == before

    def test_a_required_justification_is_enforced(self, sagacity: Sagacity) -> None:
        """Missing or blank: refused, naming the tool; given: approved and run."""
        vault = waiting_vault(sagacity)
        (awaiting,) = sagacity.history("vault-1")
        assert awaiting.payload["justification_required"] is True
        for missing in (None, "", "   \n"):
            with pytest.raises(
                ApprovalError, match="tool 'open_vault': the tool requires a justification"
            ):
                sagacity.approve("vault-1", approver="bob", justification=missing)
        assert len(sagacity.history("vault-1")) == 1
        assert sagacity.pending("vault-1")[0].justification_required is True
        sagacity.approve("vault-1", approver="bob", justification="audit ticket 12")
        assert sagacity.resume_saga("vault-1").outcome is SagaOutcome.COMPLETED
        assert vault.opened == ["V-1"]

    def test_the_requirement_holds_where_the_tool_is_not_wrapped(
        self, open_sagacity: OpenSagacity
    ) -> None:
        """Recorded in the request: an approving process that wraps nothing enforces it."""
        waiting_vault(open_sagacity())
        inbox = open_sagacity()
        with pytest.raises(ApprovalError, match="requires a justification"):
            inbox.approve("vault-1", approver="bob")

    @pytest.mark.parametrize(
        ("options", "why"),
        [
            ({"by": print, "justification_required": True}, "but is COMPENSATABLE"),
            (
                {"reversibility": Reversibility.IRREVERSIBLE, "justification_required": "yes"},
                "must be True or False, not 'yes'",
            ),
        ],
    )
    def test_a_wrong_declaration_is_refused_at_wrap(
        self, sagacity: Sagacity, options: dict[str, Any], why: str
    ) -> None:
        """justification_required is a bool, on an IRREVERSIBLE tool."""

        @compensable(**options)
        def act(x: int) -> None: ...

        with pytest.raises(ConfigurationError, match=why):
            sagacity.wrap(act)


AGENT = {
    "by": "agent",
    "adapter": "pydantic_ai",
    "model": "gpt-4o<script>",
    "run_id": "run-77",
    "agent": "payouts",
}


def waiting_for_an_agent(sagacity: Sagacity, saga_id: str = "vault-1") -> None:
    """A request asked as an adapter asks it: inside `pausing_as` and `agent_run`."""
    sagacity.wrap(Vault())
    tool = sagacity.tool("open_vault")
    with (
        pausing_as("pydantic_ai"),
        agent_run(model="gpt-4o<script>", run_id="run-77", agent="payouts", thread_id=None),
    ):
        result = sagacity.saga(saga_id, lambda: tool(vault="V-1"))
    assert result.outcome is SagaOutcome.AWAITING_APPROVAL


class TestAgentRun:
    def test_what_the_adapter_gives_is_recorded_and_none_is_left_out(
        self, sagacity: Sagacity
    ) -> None:
        """The fields given are journaled with the adapter; a None field is not."""
        waiting_for_an_agent(sagacity)
        (asked,) = [e for e in sagacity.history("vault-1") if e.phase is Phase.AWAITING_APPROVAL]
        assert asked.payload["initiated_by"] == AGENT
        assert sagacity.pending("vault-1")[0].initiated_by == AGENT

    def test_outside_an_agent_adapter_nothing_of_it_is_recorded(self, sagacity: Sagacity) -> None:
        """Plain work inside `agent_run` is still the code's: no model is claimed."""
        sagacity.wrap(Vault())
        tool = sagacity.tool("open_vault")
        with agent_run(model="gpt-4o"):
            sagacity.saga("vault-2", lambda: tool(vault="V-1"))
        (asked,) = [e for e in sagacity.history("vault-2") if e.phase is Phase.AWAITING_APPROVAL]
        assert asked.payload["initiated_by"] == {"by": "code", "via": "work"}

    def test_a_field_it_does_not_know_is_refused_and_long_values_are_cut(self) -> None:
        """Only the documented fields; each at most 200 characters."""
        with pytest.raises(ValueError, match="not \\['temperature'\\]"), agent_run(temperature="1"):
            pass
        with pausing_as("crewai"), agent_run(model="m" * 500, run_id=""):
            assert initiator("crewai", None) == {
                "by": "agent",
                "adapter": "crewai",
                "model": "m" * 200,
            }


class TestInitiator:
    @pytest.mark.parametrize(
        ("started_by", "initiated"),
        [
            ("alice", {"by": "human", "principal": "alice"}),
            (None, {"by": "code", "via": "work"}),
        ],
    )
    def test_is_recorded_with_the_request(
        self, sagacity: Sagacity, started_by: str | None, initiated: dict[str, Any]
    ) -> None:
        """Code run for a named human is theirs; unnamed, it is the application's code."""
        waiting = waiting_saga(sagacity, started_by=started_by)
        awaiting = sagacity.history(SAGA)[-1]
        assert awaiting.payload["initiated_by"] == initiated
        (shown,) = sagacity.pending(SAGA)
        assert shown.initiated_by == initiated
        assert shown.provenance_json()["initiated_by"] == initiated
        assert waiting.request.request_id == shown.request_id


class TestSignedJustification:
    def test_the_signature_covers_the_justification(
        self, open_sagacity: OpenSagacity, key: PrivateKey
    ) -> None:
        """Version 3 signs the documented bytes, justification and channel included."""
        worker = open_sagacity(approval_public_keys=[key.public], require_signed_approvals=True)
        inbox = open_sagacity(approval_signing_key=key, require_signed_approvals=True)
        waiting = waiting_saga(worker)
        entry = inbox.approve(SAGA, approver="bob", justification=HOSTILE, via="inbox")
        request = waiting.request
        signed = rfc8785.dumps(
            {
                "saga_id": SAGA,
                "request_id": request.request_id,
                "input_sha256": request.input_sha256,
                "approver": "bob",
                "call_id": request.call_id,
                "tool_name": request.tool_name,
                "request_seq": request.seq,
                "justification": HOSTILE,
                "version": 3,
                "via": "inbox",
            }
        )
        assert entry.payload["signature_version"] == 3
        assert key.public.verify(signed, str(entry.payload["signature"]))
        assert verify(worker.journal, SAGA, approval_public_keys=[key.public]).ok
        assert worker.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED

    def test_a_justification_edited_in_the_database_fails_verify(
        self, open_sagacity: OpenSagacity, key: PrivateKey, store_url: str
    ) -> None:
        """The edited row breaks the chain at the APPROVED entry."""
        worker = open_sagacity(approval_public_keys=[key.public], require_signed_approvals=True)
        inbox = open_sagacity(approval_signing_key=key, require_signed_approvals=True)
        waiting_saga(worker)
        entry = inbox.approve(SAGA, approver="bob", justification="checked")
        edited = dict(entry.payload)
        edited["justification"] = "the CFO said so"
        edit_payload(worker, store_url, SAGA, entry.seq, edited)
        report = verify(worker.journal, SAGA, approval_public_keys=[key.public])
        assert not report.ok
        assert {(p.saga_id, p.seq) for p in report.problems} >= {(SAGA, entry.seq)}

    @pytest.mark.parametrize("version", [2, None])
    def test_a_rehashed_row_with_another_justification_does_not_count(
        self, open_sagacity: OpenSagacity, key: PrivateKey, version: int | None
    ) -> None:
        """A signed APPROVED re-hashed with another justification counts for nothing.

        So does a version-1 signature with a justification added beside it.
        """
        worker = open_sagacity(approval_public_keys=[key.public], require_signed_approvals=True)
        inbox = open_sagacity(approval_signing_key=key, require_signed_approvals=True)
        waiting = waiting_saga(worker)
        signed = inbox.approval.policy.signature(SAGA, waiting.request, "bob", "checked")
        if version is None:  # a version-1 signature, with a justification added beside it
            signed = inbox.approval.policy.signature(SAGA, waiting.request, "bob")
        injected = inject_approval(worker, waiting.request, "bob", justification="forged", **signed)
        why = "does not verify" if version else "justification is not covered by its signature"
        with pytest.raises(ApprovalSignatureError, match=why):
            worker.resume_saga(SAGA)
        report = verify(worker.journal, SAGA, approval_public_keys=[key.public])
        assert [(p.seq) for p in report.problems] == [injected.seq]


class TestVia:
    """The channel a decision came through is journaled with it, and signed."""

    def test_python_is_the_default(self, sagacity: Sagacity) -> None:
        """Approve or reject without `via`: "python"."""
        waiting_saga(sagacity)
        assert sagacity.approve(SAGA, approver="bob").payload["via"] == "python"
        sagacity.reject(SAGA, approver="bob", reason="no")
        rejected = next(e for e in sagacity.history(SAGA) if e.phase is Phase.REJECTED)
        assert rejected.payload["via"] == "python"

    def test_an_application_names_its_own(self, sagacity: Sagacity) -> None:
        """A name of its own, as the contract's pattern allows, is journaled as given."""
        waiting_saga(sagacity)
        sagacity.reject(SAGA, approver="bob", reason="no", via="ops-desk_2" + "x" * 21)
        rejected = next(e for e in sagacity.history(SAGA) if e.phase is Phase.REJECTED)
        assert rejected.payload["via"] == "ops-desk_2" + "x" * 21

    @pytest.mark.parametrize(
        "via", ["", "Slack", "slack\n", "a" * 33, "1cli", "cli;drop", "\u202ecli", 7, b"cli"]
    )
    def test_a_hostile_channel_is_refused_and_nothing_is_journaled(
        self, sagacity: Sagacity, via: Any
    ) -> None:
        """Refused naming the field, before anything is appended, for approve and reject."""
        waiting_saga(sagacity)
        before = len(sagacity.history(SAGA))
        with pytest.raises(ValueError, match=r"^via must name the channel"):
            sagacity.approve(SAGA, approver="bob", via=via)
        with pytest.raises(ValueError, match=r"^via must name the channel"):
            sagacity.reject(SAGA, approver="bob", reason="no", via=via)
        with pytest.raises(ValueError, match=r"^via must name the channel"):
            sagacity.approval.approve(
                SAGA, approver="bob", request_id=None, expected_sha256=None, via=via
            )
        assert len(sagacity.history(SAGA)) == before
        assert [r.state for r in sagacity.pending(SAGA)] == ["waiting"]

    @pytest.mark.parametrize("justification", [None, "checked"])
    def test_old_signatures_without_a_channel_still_count(
        self, open_sagacity: OpenSagacity, key: PrivateKey, justification: str | None
    ) -> None:
        """An APPROVED signed before channels (version 1 or 2) verifies and runs the call."""
        worker = open_sagacity(approval_public_keys=[key.public], require_signed_approvals=True)
        inbox = open_sagacity(approval_signing_key=key)
        waiting = waiting_saga(worker)
        signed = inbox.approval.policy.signature(SAGA, waiting.request, "bob", justification)
        assert signed.get("signature_version") == (None if justification is None else 2)
        extra = {} if justification is None else {"justification": justification}
        inject_approval(worker, waiting.request, "bob", **extra, **signed)
        assert verify(worker.journal, SAGA, approval_public_keys=[key.public]).ok
        assert worker.resume_saga(SAGA).outcome is SagaOutcome.COMPLETED

    @pytest.mark.parametrize("version", [3, 2, None])
    def test_a_channel_moved_or_added_does_not_count(
        self, open_sagacity: OpenSagacity, key: PrivateKey, version: int | None
    ) -> None:
        """A version-3 row re-hashed with another `via`, or an old one given one, is refused."""
        worker = open_sagacity(approval_public_keys=[key.public], require_signed_approvals=True)
        inbox = open_sagacity(approval_signing_key=key)
        waiting = waiting_saga(worker)
        policy = inbox.approval.policy
        justification = "checked" if version == 2 else None
        signed = policy.signature(
            SAGA, waiting.request, "bob", justification, "cli" if version == 3 else None
        )
        extra = {} if justification is None else {"justification": justification}
        injected = inject_approval(worker, waiting.request, "bob", via="slack", **extra, **signed)
        why = "does not verify" if version == 3 else "via is not covered by its signature"
        with pytest.raises(ApprovalSignatureError, match=why):
            worker.resume_saga(SAGA)
        report = verify(worker.journal, SAGA, approval_public_keys=[key.public])
        assert [p.seq for p in report.problems] == [injected.seq]


class TestFronts:
    """The REST API, the inbox and the CLI take a justification and show the provenance.

    They run on SQLite: each front reads the core, whose provenance runs on every backend
    above.
    """

    @pytest.fixture
    def sqlite_url(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'sagacity.db'}"

    @pytest.fixture
    def waiting_front(self, sqlite_url: str) -> Iterator[Sagacity]:
        instance = Sagacity.from_url(sqlite_url)
        waiting_vault(instance)
        yield instance
        instance.close()

    def test_the_rest_api_takes_and_shows_the_justification(self, waiting_front: Sagacity) -> None:
        """Without one: 403, nothing journaled; with one: journaled, listed with the request."""
        app = create_app(waiting_front, token_auth(), ui=False)
        with TestClient(app) as client:
            (listed,) = client.get("/sagacity/approvals", headers=VIEWER).json()
            assert listed["initiated_by"] == {"by": "human", "principal": "alice"}
            assert listed["justification_required"] is True
            url = f"/sagacity/approvals/{listed['request_id']}/approve"
            refused = client.post(url, json={"sha256": listed["input_sha256"]}, headers=BOB)
            assert refused.status_code == 403, refused.text
            assert "requires a justification" in refused.text
            assert len(waiting_front.history("vault-1")) == 1
            body = {"sha256": listed["input_sha256"], "justification": HOSTILE}
            approved = client.post(url, json=body, headers=BOB)
            assert approved.status_code == 200, approved.text
            assert approved.json()["entry"]["payload"]["justification"] == HOSTILE
            assert approved.json()["entry"]["payload"]["via"] == "api"
            (shown,) = approved.json()["request"]["approvals"]
            assert (shown["approver"], shown["justification"]) == ("bob", HOSTILE)

    def test_the_inbox_form_takes_it_and_the_page_shows_it_escaped(
        self, waiting_front: Sagacity
    ) -> None:
        """The approve form's justification field is journaled; the page escapes it."""
        (request,) = waiting_front.pending("vault-1")
        app = create_app(waiting_front, token_auth())
        with TestClient(app) as client:
            form = client.get(f"{UI}/sign-in")
            signed_in = client.post(
                f"{UI}/sign-in",
                data={"csrf": _csrf(form.text), "token": "tok-bob", "next": ""},
            )
            page = client.get(f"{UI}/requests/{request.request_id}")
            assert 'name="justification"' in page.text
            assert "(required for this tool)" in page.text
            response = client.post(
                f"{UI}/requests/approve",
                data={
                    "csrf": _csrf(signed_in.text),
                    "request_id": request.request_id,
                    "sha256": request.input_sha256,
                    "justification": "<script>window.__xss=1</script> ticket 9",
                },
            )
            assert response.status_code == 200, response.text
            shown = client.get(f"{UI}/requests/{request.request_id}").text
        assert waiting_front.history("vault-1")[-1].payload["justification"] == (
            "<script>window.__xss=1</script> ticket 9"
        )
        assert waiting_front.history("vault-1")[-1].payload["via"] == "inbox"
        assert "<script>window.__xss=1</script>" not in shown
        assert "&lt;script&gt;window.__xss=1&lt;/script&gt; ticket 9" in shown
        assert "Initiated by" in shown

    def test_the_cli_takes_it_and_pending_shows_it_escaped(
        self, waiting_front: Sagacity, sqlite_url: str
    ) -> None:
        """`approve --justification` journals it; `pending` shows who, why and what asked."""
        database = sqlite_url
        (request,) = waiting_front.pending("vault-1")
        approve = ["approve", "vault-1", "--approver", "bob", "--database", database]
        approve += ["--sha256", request.input_sha256]
        refused = run_cli(*approve)
        assert refused.returncode != 0
        assert "requires a justification" in refused.stderr
        done = run_cli(*approve, "--justification", "ticket\u202e 9")
        assert done.returncode == 0, done.stderr
        assert "  why     ticket\\u202e 9" in done.stdout
        assert waiting_front.history("vault-1")[-1].payload["justification"] == "ticket\u202e 9"
        assert waiting_front.history("vault-1")[-1].payload["via"] == "cli"
        table = run_cli("pending", "--saga", "vault-1", "--database", database)
        assert table.returncode == 0, table.stderr
        assert "(why bob: ticket\\u202e 9)" in table.stdout
        as_json = run_cli("pending", "--saga", "vault-1", "--json", "--database", database)
        (document,) = [json.loads(line) for line in as_json.stdout.splitlines()]
        assert document["initiated_by"] == {"by": "human", "principal": "alice"}
        assert document["justification_required"] is True
        assert document["approvals"][0]["justification"] == "ticket\u202e 9"
        show = run_cli("show", "vault-1", "--database", database)
        assert show.returncode == 0, show.stderr
        assert "  seq 1 asked for open_vault, by alice\n" in show.stdout
        assert " approved by bob at " in show.stdout
        assert show.stdout.rstrip().endswith(": ticket\\u202e 9")
        exported = run_cli("export", "--saga", "vault-1", "--database", database)
        assert exported.returncode == 0, exported.stderr
        entries = [json.loads(line) for line in exported.stdout.splitlines()]
        assert entries[0]["payload"]["initiated_by"] == {"by": "human", "principal": "alice"}
        assert entries[-1]["payload"]["justification"] == "ticket\u202e 9"


class TestAgentAndChannelShown:
    """The agent's model and run, and each decision's channel, on every front (SQLite)."""

    def test_cli_api_inbox_and_export(self, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'sagacity.db'}"
        with Sagacity.from_url(url) as sagacity:
            waiting_for_an_agent(sagacity)
        approve = ["approve", "vault-1", "--approver", "bob", "--database", url]
        with Sagacity.from_url(url) as reader:
            (request,) = reader.pending("vault-1")
        done = run_cli(*approve, "--sha256", request.input_sha256, "--justification", "ok")
        assert done.returncode == 0, done.stderr
        agent_text = "the agent (pydantic_ai, model gpt-4o<script>, run id run-77, agent payouts)"
        show = run_cli("show", "vault-1", "--database", url)
        assert f"  seq 1 asked for open_vault, by {agent_text}\n" in show.stdout
        assert " approved by bob at " in show.stdout
        assert " via cli: ok" in show.stdout
        table = run_cli("pending", "--saga", "vault-1", "--database", url)
        assert "(bob via cli)" in table.stdout
        detail = run_cli("pending", "--saga", "vault-1", "--json", "--database", url)
        (document,) = [json.loads(line) for line in detail.stdout.splitlines()]
        assert document["initiated_by"] == AGENT
        assert document["approvals"][0]["via"] == "cli"
        exported = run_cli("export", "--saga", "vault-1", "--database", url)
        entries = [json.loads(line) for line in exported.stdout.splitlines()]
        assert entries[-1]["payload"]["via"] == "cli"
        assert entries[-1]["payload"]["initiated_by"] == AGENT
        with Sagacity.from_url(url) as sagacity:
            app = create_app(sagacity, token_auth())
            with TestClient(app) as client:
                (listed,) = client.get("/sagacity/approvals", headers=VIEWER).json()
                assert listed["initiated_by"] == AGENT
                assert listed["approvals"][0]["via"] == "cli"
                form = client.get(f"{UI}/sign-in")
                client.post(
                    f"{UI}/sign-in",
                    data={"csrf": _csrf(form.text), "token": "tok-bob", "next": ""},
                )
                page = client.get(f"{UI}/requests/{request.request_id}").text
        assert '<code class="agent-model">gpt-4o&lt;script&gt;</code>' in page
        assert '<code class="agent-run-id">run-77</code>' in page
        assert 'via <span class="via">cli</span>' in page


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page
    return found.group(1)
