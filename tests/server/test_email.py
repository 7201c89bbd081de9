"""Approval e-mails through a real SMTP server on loopback, and their one-time links.

The messages are sent by `EmailNotifier` with smtplib to aiosmtpd; the links are opened
on the real app (TestClient), signed in as the inbox signs in a browser, and the
decision is made with the inbox's own form, then read back from the journal.
"""

from __future__ import annotations

import hashlib
import html
import html.parser
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from fastapi.testclient import TestClient

from sagacity import ApproverGroup, Escalator, Phase, Reversibility, Sagacity, compensable
from sagacity.approval import InMemoryApprovalStore
from sagacity.server import create_app
from sagacity.server._email import EmailNotifier, SmtpSettings
from sagacity.server._links import ApprovalLinks
from sagacity.testing import FakeClock
from tests.server._bank import ALICE, BOB, VIEWER, Bank, start_wire, token_auth
from tests.server._smtp import Inbox, Received, free_port, self_signed, smtp_server

SECRET = "link-secret-for-the-tests-0123456789abcdef"
INBOX_URL = "http://testserver/sagacity/ui"
LINK = re.compile(r"http://testserver/sagacity/ui/links/[A-Za-z0-9_.-]+")


@pytest.fixture
def mail() -> Iterator[tuple[Inbox, int]]:
    """The SMTP server: its inbox and port."""
    with smtp_server() as server:
        yield server


@pytest.fixture
def clock() -> FakeClock:
    """The time of the Sagacity and of the links."""
    return FakeClock()


@pytest.fixture
def links(clock: FakeClock) -> Iterator[ApprovalLinks]:
    """The links of the mails, checked by the app with the same secret."""
    made = ApprovalLinks(SECRET, inbox_url=INBOX_URL, clock=clock)
    yield made
    made.close()


@pytest.fixture
def notifier(mail: tuple[Inbox, int], links: ApprovalLinks) -> Iterator[EmailNotifier]:
    """Mails wire requests to treasury, everything else to ops."""
    _, port = mail
    sender = EmailNotifier(
        SmtpSettings(host="127.0.0.1", port=port, security="none"),
        sender="sagacity@bank.example",
        links=links,
        recipients={"wire": ["treasury@bank.example"]},
        default_recipients=["ops@bank.example"],
        backoff=0.01,
    )
    yield sender
    sender.close()


@pytest.fixture
def sagacity(
    db_url: str, bank: Bank, notifier: EmailNotifier, clock: FakeClock
) -> Iterator[Sagacity]:
    """A SQLite Sagacity that mails every new request."""
    instance = Sagacity.from_url(db_url, on_approval_request=notifier, clock=clock)
    instance.wrap(bank)
    yield instance
    instance.close()


@pytest.fixture
def app_client(sagacity: Sagacity, links: ApprovalLinks) -> Iterator[TestClient]:
    """The app, its inbox opening the links."""
    app = create_app(sagacity, token_auth(), ui={"links": links})
    with TestClient(app) as client:
        yield client


def link_of(received: Received) -> str:
    """The one link of a mail (the same in both parts)."""
    (text_link,) = LINK.findall(received.text())
    hrefs = Anchors.of(received.html())
    assert hrefs == [text_link]
    return str(text_link)


class Anchors(html.parser.HTMLParser):
    """Every `<a href>` of an HTML document."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs.append(dict(attrs).get("href") or "")

    @classmethod
    def of(cls, document: str) -> list[str]:
        parser = cls()
        parser.feed(document)
        return parser.hrefs


def path_of(link: str) -> str:
    path: str = link.removeprefix("http://testserver")
    return path


def open_link(client: TestClient, link: str, headers: dict[str, str] | None = None) -> Any:
    """GET the link without following redirects (a browser would follow them)."""
    return client.get(path_of(link), headers=headers or {}, follow_redirects=False)


def decide(client: TestClient, request_id: str, action: str, **fields: str) -> Any:
    """Post the inbox's form for `request_id`, with the CSRF token of its page."""
    page = client.get(f"/sagacity/ui/requests/{request_id}")
    assert page.status_code == 200, page.text
    (csrf,) = set(re.findall(r'name="csrf" value="([^"]+)"', page.text))
    return client.post(
        f"/sagacity/ui/requests/{action}",
        data={"csrf": csrf, "request_id": request_id, **fields},
        follow_redirects=False,
    )


def decisions(sagacity: Sagacity, saga_id: str) -> list[tuple[str, Any]]:
    return [
        (e.phase.name, e.payload)
        for e in sagacity.journal.entries(saga_id)
        if e.phase in (Phase.APPROVED, Phase.REJECTED)
    ]


class TestTheMessage:
    def test_tool_input_and_hash_reach_the_tools_recipients(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int]
    ) -> None:
        """A wire request is mailed to treasury: tool, saga, canonical input, its sha256."""
        inbox, _ = mail
        start_wire(sagacity, bank, "order-1", amount="12500.00 EUR", to="DE89 3704")
        (request,) = sagacity.pending("order-1")
        received = inbox.next()
        assert received.rcpt_tos == ["treasury@bank.example"]
        assert received.mail_from == "sagacity@bank.example"
        message = received.message
        assert message["To"] == "treasury@bank.example"
        assert message["Subject"] == "Approval needed: wire in saga order-1"
        assert message["X-Sagacity-Event"] == "approval.requested"
        assert message["X-Sagacity-Request"] == request.request_id
        text = received.text()
        canonical = rfc8785.dumps({"amount": "12500.00 EUR", "to": "DE89 3704"}).decode()
        assert canonical in text.splitlines()
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        assert digest == request.input_sha256
        assert f"Its SHA-256: {digest}" in text
        assert canonical in html.unescape(received.html())
        assert digest in received.html()
        assert link_of(received).startswith(INBOX_URL + "/links/")
        assert inbox.empty()

    def test_other_tools_go_to_the_default_list(
        self, sagacity: Sagacity, mail: tuple[Inbox, int]
    ) -> None:
        """A tool without recipients of its own is mailed to the default list."""
        inbox, _ = mail

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def delete_vm(name: str) -> str:
            """Delete a VM."""
            return "deleted"

        (tool,) = sagacity.wrap(delete_vm)
        sagacity.saga("ops-1", lambda: tool(name="db-7"))
        received = inbox.next()
        assert received.rcpt_tos == ["ops@bank.example"]
        assert received.message["Subject"] == "Approval needed: delete_vm in saga ops-1"

    def test_a_hostile_input_forges_no_header_line_or_link(
        self, sagacity: Sagacity, mail: tuple[Inbox, int]
    ) -> None:
        """CR/LF, a fake header, a fake link and a bidi override stay inside the JSON."""
        inbox, _ = mail
        hostile = (
            "x\r\nBcc: thief@evil.example\r\n\r\nApprove here: http://evil.example/ok\n"
            '</pre><a href="http://evil.example/">Approve</a>\u202eexe.txt'
        )

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def send_note(body: str) -> str:
            """Send a note."""
            return "sent"

        (tool,) = sagacity.wrap(send_note)
        sagacity.saga("note-1", lambda: tool(body=hostile))
        (request,) = sagacity.pending("note-1")
        received = inbox.next()
        assert received.rcpt_tos == ["ops@bank.example"]
        assert received.message["Bcc"] is None
        assert sorted(set(received.message.keys())) == sorted(
            {
                "Subject",
                "From",
                "To",
                "Date",
                "Message-ID",
                "Auto-Submitted",
                "X-Sagacity-Event",
                "X-Sagacity-Request",
                "Content-Type",
                "MIME-Version",
            }
        )
        text = received.text()
        assert not any(
            line.startswith(("Bcc:", "Approve here", "</pre>")) for line in text.splitlines()
        )
        assert "\u202e" not in text
        assert "\u202e" not in received.html()
        (shown,) = [line for line in text.splitlines() if line.startswith('{"body":')]
        assert json.loads(shown) == {"body": hostile}  # the same JSON value, escaped
        assert hashlib.sha256(rfc8785.dumps(json.loads(shown))).hexdigest() == (
            request.input_sha256
        )
        assert link_of(received).startswith(INBOX_URL + "/links/")  # evil.example is no link

    def test_a_reminder_is_sent_with_a_fresh_link(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int], notifier: EmailNotifier
    ) -> None:
        """`remind` mails the request again, as a reminder, with a link of its own."""
        inbox, _ = mail
        start_wire(sagacity, bank, "order-2")
        first = inbox.next()
        (request,) = sagacity.pending("order-2")
        notifier.remind(request)
        again = inbox.next()
        assert again.message["Subject"] == "Reminder: approval still needed: wire in saga order-2"
        assert again.message["X-Sagacity-Event"] == "approval.reminder"
        assert link_of(again) != link_of(first)

    def test_the_escalators_reminder_is_mailed_at_the_warning_time(
        self, mail: tuple[Inbox, int], links: ApprovalLinks, clock: FakeClock
    ) -> None:
        """`remind` as `on_approval_reminder`: the sweep at the warning time mails it."""
        inbox, port = mail

        @compensable(reversibility=Reversibility.IRREVERSIBLE, remind_before=600)
        def refund(amount: str) -> str:
            """Refund a customer."""
            return "refunded"

        with EmailNotifier(
            SmtpSettings(host="127.0.0.1", port=port, security="none"),
            sender="sagacity@bank.example",
            links=links,
            default_recipients=["ops@bank.example"],
        ) as sender:
            instance = Sagacity.from_url(
                "memory://",
                on_approval_request=sender,
                on_approval_reminder=sender.remind,
                approval_ttl=3600,
                clock=clock,
            )
            (tool,) = instance.wrap(refund)
            instance.saga("refund-1", lambda: tool(amount="40.00"))
            assert inbox.next().message["X-Sagacity-Event"] == "approval.requested"
            clock.advance(minutes=49)
            assert Escalator(instance).sweep() == []
            clock.advance(minutes=2)
            assert [a.action for a in Escalator(instance).sweep()] == ["reminded"]
            reminder = inbox.next()
        assert reminder.message["X-Sagacity-Event"] == "approval.reminder"
        assert reminder.message["Subject"] == (
            "Reminder: approval still needed: refund in saga refund-1"
        )
        assert "Expires:    2026-01-01T01:00:00Z" in reminder.text()
        assert "until 2026-01-01T01:00:00Z" in reminder.text()  # the link ends with it

    def test_an_escalated_reminder_names_the_group_and_its_deadline(
        self, mail: tuple[Inbox, int], links: ApprovalLinks, clock: FakeClock
    ) -> None:
        """After escalation, the reminder says to whom, and its link ends with their time."""
        inbox, port = mail

        @compensable(
            reversibility=Reversibility.IRREVERSIBLE, remind_before=600, escalate_to="leads"
        )
        def refund(amount: str) -> str:
            """Refund a customer."""
            return "refunded"

        with EmailNotifier(
            SmtpSettings(host="127.0.0.1", port=port, security="none"),
            sender="sagacity@bank.example",
            links=links,
            default_recipients=["ops@bank.example"],
        ) as sender:
            instance = Sagacity.from_url(
                "memory://",
                on_approval_request=sender,
                on_approval_reminder=sender.remind,
                approval_ttl=3600,
                clock=clock,
                approver_groups=[ApproverGroup(name="leads", members=["carol", "dave"], ttl=1800)],
            )
            (tool,) = instance.wrap(refund)
            instance.saga("refund-2", lambda: tool(amount="40.00"))
            inbox.next()
            actions = []
            for minutes in (51, 10, 21):  # reminded, escalated at 01:01, the leads reminded
                clock.advance(minutes=minutes)
                actions += [a.action for a in Escalator(instance).sweep()]
            assert actions == ["reminded", "escalated", "reminded"]
            assert "Escalated" not in inbox.next().text()
            text = inbox.next().text()
        assert "Escalated:  to leads (carol, dave): only their approvals count" in text
        assert "Expires:    2026-01-01T01:31:00Z" in text
        assert "until 2026-01-01T01:31:00Z" in text


class TestSmtp:
    def test_starttls_with_a_login(self, tmp_path: Path, bank: Bank) -> None:
        """STARTTLS to a server with its own certificate, then a login, then the mail."""
        server_tls, client_tls = self_signed(tmp_path)
        logins: list[tuple[bytes, bytes]] = []

        def authenticate(
            server: Any, session: Any, envelope: Any, mechanism: str, auth: Any
        ) -> Any:
            from aiosmtpd.smtp import AuthResult

            logins.append((auth.login, auth.password))
            return AuthResult(success=auth.password == b"s3cret")

        with smtp_server(
            tls_context=server_tls,
            require_starttls=True,
            authenticator=authenticate,
            auth_require_tls=True,
        ) as (inbox, port):
            links = ApprovalLinks(SECRET, inbox_url=INBOX_URL)
            settings = SmtpSettings(
                host="127.0.0.1",
                port=port,
                security="starttls",
                username="sagacity",
                password="s3cret",
                ssl_context=client_tls,
            )
            with EmailNotifier(
                settings, sender="sagacity@bank.example", links=links, default_recipients=["a@b.c"]
            ) as sender:
                instance = Sagacity.from_url("memory://", on_approval_request=sender)
                instance.wrap(bank)
                start_wire(instance, bank, "tls-1")
                received = inbox.next()
            assert received.rcpt_tos == ["a@b.c"]
            assert logins == [(b"sagacity", b"s3cret")]
            assert sender.delivered == 1

    def test_ssl_from_the_first_byte(self, tmp_path: Path, bank: Bank) -> None:
        """security="ssl": TLS before the greeting (port 465's way), the certificate checked."""
        server_tls, client_tls = self_signed(tmp_path)
        with smtp_server(ssl_context=server_tls) as (inbox, port):
            links = ApprovalLinks(SECRET, inbox_url=INBOX_URL)
            settings = SmtpSettings(
                host="127.0.0.1", port=port, security="ssl", ssl_context=client_tls
            )
            with EmailNotifier(
                settings, sender="sagacity@bank.example", links=links, default_recipients=["a@b.c"]
            ) as sender:
                instance = Sagacity.from_url("memory://", on_approval_request=sender)
                instance.wrap(bank)
                start_wire(instance, bank, "ssl-1")
                received = inbox.next()
            assert received.rcpt_tos == ["a@b.c"]
            assert sender.delivered == 1

    def test_starttls_is_never_dropped_for_plain_text(self, bank: Bank) -> None:
        """A server that offers no STARTTLS gets nothing: no silent fall back to plain text."""
        with smtp_server() as (inbox, port):
            links = ApprovalLinks(SECRET, inbox_url=INBOX_URL)
            with EmailNotifier(
                SmtpSettings(host="127.0.0.1", port=port, security="starttls"),
                sender="sagacity@bank.example",
                links=links,
                default_recipients=["a@b.c"],
                retries=0,
            ) as sender:
                instance = Sagacity.from_url("memory://", on_approval_request=sender)
                instance.wrap(bank)
                start_wire(instance, bank, "plain-1")
            assert (sender.delivered, sender.failed) == (0, 1)
            assert inbox.empty()

    def test_a_dead_server_is_retried_then_given_up(
        self, bank: Bank, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Nothing listens: each attempt fails, the request still waits in the store."""
        links = ApprovalLinks(SECRET, inbox_url=INBOX_URL)
        sender = EmailNotifier(
            SmtpSettings(host="127.0.0.1", port=free_port(), security="none", timeout=2),
            sender="sagacity@bank.example",
            links=links,
            default_recipients=["a@b.c"],
            retries=1,
            backoff=0.01,
        )
        instance = Sagacity.from_url("memory://", on_approval_request=sender)
        instance.wrap(bank)
        with caplog.at_level("WARNING", logger="sagacity.server.email"):
            start_wire(instance, bank, "dead-1")
            sender.close()
        assert (sender.delivered, sender.failed) == (0, 1)
        errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert len(errors) == 1
        assert "gave up on approval.requested of saga 'dead-1'" in errors[0]
        assert "to a@b.c" in errors[0]
        assert len(instance.pending("dead-1")) == 1


class TestTheLink:
    def test_the_link_opens_the_page_after_sign_in_and_the_decision_is_journaled_as_email(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int], app_client: TestClient
    ) -> None:
        """A link opens its request's page once, after sign-in; the approval says email.

        Without a session (a mail scanner) it sends to sign-in and stays usable.
        """
        inbox, _ = mail
        start_wire(sagacity, bank, "order-3")
        (request,) = sagacity.pending("order-3")
        link = link_of(inbox.next())

        scanner = open_link(app_client, link)  # a mail scanner: no session
        assert scanner.status_code == 303
        assert "/sagacity/ui/sign-in?next=" in scanner.headers["location"]
        assert not decisions(sagacity, "order-3")

        opened = open_link(app_client, link, ALICE)
        assert opened.status_code == 303, opened.text
        assert opened.headers["location"] == f"/sagacity/ui/requests/{request.request_id}"
        approved = decide(app_client, request.request_id, "approve", sha256=request.input_sha256)
        assert approved.status_code == 303, approved.text
        ((phase, payload),) = decisions(sagacity, "order-3")
        assert phase == "APPROVED"
        assert payload["approver"] == "alice"
        assert payload["input_sha256"] == request.input_sha256
        assert payload["via"] == "email"

        again = open_link(app_client, link, ALICE)
        assert again.status_code == 410
        assert "Link used" in again.text
        assert "used already" in again.text

    def test_a_page_opened_without_a_link_decides_as_the_inbox(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int], app_client: TestClient
    ) -> None:
        """The channel belongs to the request opened by the link, not to the session."""
        inbox, _ = mail
        start_wire(sagacity, bank, "order-4")
        start_wire(sagacity, bank, "order-5")
        (first,) = sagacity.pending("order-4")
        (second,) = sagacity.pending("order-5")
        link = link_of(inbox.next())
        inbox.next()
        assert open_link(app_client, link, BOB).status_code == 303
        decide(app_client, second.request_id, "reject", reason="not today")
        decide(app_client, first.request_id, "reject", reason="no")
        assert decisions(sagacity, "order-5")[0][1]["via"] == "inbox"
        assert decisions(sagacity, "order-4")[0][1]["via"] == "email"

    def test_a_viewer_does_not_use_the_link_up(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int], app_client: TestClient
    ) -> None:
        """A principal who cannot approve is refused, and the link still opens for one who can."""
        inbox, _ = mail
        start_wire(sagacity, bank, "order-6")
        link = link_of(inbox.next())
        refused = open_link(app_client, link, VIEWER)
        assert refused.status_code == 403
        assert "cannot approve" in refused.text
        app_client.cookies.clear()
        assert open_link(app_client, link, ALICE).status_code == 303

    def test_an_expired_link_is_refused(
        self,
        sagacity: Sagacity,
        bank: Bank,
        mail: tuple[Inbox, int],
        app_client: TestClient,
        clock: FakeClock,
    ) -> None:
        """A day after it was sent, the link opens nothing, whoever asks."""
        inbox, _ = mail
        start_wire(sagacity, bank, "order-7")
        link = link_of(inbox.next())
        clock.advance(hours=24)
        refused = open_link(app_client, link, ALICE)
        assert refused.status_code == 410
        assert "Link expired" in refused.text
        assert not decisions(sagacity, "order-7")

    def test_a_link_whose_request_was_edited_is_refused(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int], app_client: TestClient
    ) -> None:
        """An edit after the mail: the old link names the new request and opens nothing."""
        inbox, _ = mail
        start_wire(sagacity, bank, "order-8", amount="100")
        (request,) = sagacity.pending("order-8")
        link = link_of(inbox.next())
        edited = sagacity.edit(
            "order-8",
            approver="carol",
            request_id=request.request_id,
            new_input={"amount": "100000", "to": "acct-9"},
        )
        refused = open_link(app_client, link, ALICE)
        assert refused.status_code == 409
        assert "edited after this link was sent" in refused.text
        assert edited.request_id in refused.text

    def test_a_link_whose_stored_input_no_longer_hashes_to_it_is_refused(
        self, bank: Bank, mail: tuple[Inbox, int], links: ApprovalLinks, clock: FakeClock
    ) -> None:
        """An edited store row (same request id, other input): hash mismatch, refused."""
        import dataclasses

        inbox, port = mail
        store = InMemoryApprovalStore()
        sender = EmailNotifier(
            SmtpSettings(host="127.0.0.1", port=port, security="none"),
            sender="s@bank.example",
            links=links,
            default_recipients=["a@b.c"],
        )
        from sagacity.journal import InMemoryJournal, JsonValue

        instance = Sagacity(InMemoryJournal(), store, on_approval_request=sender, clock=clock)
        instance.wrap(bank)
        start_wire(instance, bank, "order-9")
        (request,) = instance.pending("order-9")
        link = link_of(inbox.next())
        forged_input: dict[str, JsonValue] = {"amount": "999999", "to": "acct-evil"}
        store.replace(
            dataclasses.replace(
                request,
                input=forged_input,
                input_sha256=hashlib.sha256(rfc8785.dumps(forged_input)).hexdigest(),
            )
        )
        with TestClient(create_app(instance, token_auth(), ui={"links": links})) as client:
            refused = open_link(client, link, ALICE)
        sender.close()
        assert refused.status_code == 409
        assert "no longer asks for the input this link was sent for" in refused.text

    def test_a_decided_request_link_is_refused(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int], app_client: TestClient
    ) -> None:
        """Rejected elsewhere: the link says the request no longer waits."""
        inbox, _ = mail
        start_wire(sagacity, bank, "order-10")
        link = link_of(inbox.next())
        sagacity.reject("order-10", approver="bob", reason="no")
        refused = open_link(app_client, link, ALICE)
        assert refused.status_code == 410
        assert "no longer waits" in refused.text

    @pytest.mark.parametrize("where", ["payload", "signature", "secret", "truncated"])
    def test_a_forged_or_altered_link_is_refused(
        self,
        sagacity: Sagacity,
        bank: Bank,
        mail: tuple[Inbox, int],
        app_client: TestClient,
        clock: FakeClock,
        where: str,
    ) -> None:
        """A changed character anywhere, or a link signed with another secret: 403."""
        inbox, _ = mail
        start_wire(sagacity, bank, "order-11")
        link = link_of(inbox.next())
        body, _, signature = link.rpartition("/")[2].partition(".")
        if where == "payload":
            flipped = body[:10] + ("A" if body[10] != "A" else "B") + body[11:]
            token = f"{flipped}.{signature}"
        elif where == "signature":
            token = f"{body}.{signature[:-1]}{'A' if signature[-1] != 'A' else 'B'}"
        elif where == "secret":
            other = ApprovalLinks(
                "another-secret-of-at-least-32-bytes!!", inbox_url=INBOX_URL, clock=clock
            )
            (request,) = sagacity.pending("order-11")
            token = other.make(request).rpartition("/")[2]
        else:
            token = f"{body}.{signature[:20]}"
        refused = app_client.get(
            f"/sagacity/ui/links/{token}", headers=ALICE, follow_redirects=False
        )
        assert refused.status_code == 403
        assert "Invalid link" in refused.text
        assert open_link(app_client, link, ALICE).status_code == 303  # the real one still works

    def test_the_starter_cannot_approve_from_the_link(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int], app_client: TestClient
    ) -> None:
        """Four eyes hold on the page a link opens: the saga's starter is refused."""
        inbox, _ = mail
        start_wire(sagacity, bank, "order-12", started_by="alice")
        (request,) = sagacity.pending("order-12")
        link = link_of(inbox.next())
        assert open_link(app_client, link, ALICE).status_code == 303
        refused = decide(app_client, request.request_id, "approve", sha256=request.input_sha256)
        assert refused.status_code == 403
        assert "started" in refused.text
        assert not decisions(sagacity, "order-12")
