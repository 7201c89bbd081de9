"""Attacks on the e-mail channel: its links, its outbox and what its messages show.

Messages go through a real SMTP server on loopback (aiosmtpd) or a socket that never
answers; links are opened on the real app (TestClient) as a signed-in approver, a
mail scanner or a stranger would open them. Each attack reads the journal back.
"""

from __future__ import annotations

import base64
import datetime
import gc
import hashlib
import hmac
import html.parser
import json
import logging
import socket
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import rfc8785
from fastapi.testclient import TestClient

from sagacity import ApproverGroup, Escalator, Reversibility, Sagacity, compensable
from sagacity.approval import ApprovalRequest
from sagacity.errors import ConfigurationError
from sagacity.server import create_app
from sagacity.server._email import EmailNotifier, SmtpSettings
from sagacity.server._links import ApprovalLinks
from sagacity.testing import FakeClock
from tests.server._bank import ALICE, BOB, CAROL, Bank, start_wire, token_auth
from tests.server._smtp import Inbox, free_port, smtp_server
from tests.server.test_email import (
    INBOX_URL,
    SECRET,
    decide,
    decisions,
    link_of,
    open_link,
    path_of,
)


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


def mailer(
    port: int,
    links: ApprovalLinks,
    *,
    timeout: float = 10.0,
    to: str = "ops@bank.example",
    **options: Any,
) -> EmailNotifier:
    """Mails every request to `to` through the plain-text SMTP server on `port`."""
    return EmailNotifier(
        SmtpSettings(host="127.0.0.1", port=port, security="none", timeout=timeout),
        sender="sagacity@bank.example",
        links=links,
        default_recipients=[to],
        **options,
    )


@pytest.fixture
def notifier(mail: tuple[Inbox, int], links: ApprovalLinks) -> Iterator[EmailNotifier]:
    """Mails every request to ops."""
    sender = mailer(mail[1], links, backoff=0.01)
    yield sender
    sender.close()


@pytest.fixture
def sagacity(
    db_url: str, bank: Bank, notifier: EmailNotifier, clock: FakeClock
) -> Iterator[Sagacity]:
    """A SQLite Sagacity that mails every new request; requests expire after an hour."""
    instance = Sagacity.from_url(
        db_url, on_approval_request=notifier, clock=clock, approval_ttl=3600
    )
    instance.wrap(bank)
    yield instance
    instance.close()


@pytest.fixture
def app_client(sagacity: Sagacity, links: ApprovalLinks) -> Iterator[TestClient]:
    """The app, its inbox opening the links."""
    with TestClient(create_app(sagacity, token_auth(), ui={"links": links})) as client:
        yield client


def token_of(link: str) -> str:
    return link.rpartition("/")[2]


def signed_token(fields: dict[str, Any], secret: str = SECRET) -> str:
    """A token over any fields, signed as `ApprovalLinks` signs (for the forgery tests)."""
    body = base64.urlsafe_b64encode(json.dumps(fields).encode()).rstrip(b"=").decode()
    digest = hmac.new(
        secret.encode(), b"sagacity-approval-link-v1." + body.encode(), hashlib.sha256
    ).digest()
    return f"{body}.{base64.urlsafe_b64encode(digest).rstrip(b'=').decode()}"


def fields_of(link: str) -> dict[str, Any]:
    body = token_of(link).partition(".")[0]
    fields: dict[str, Any] = orjson.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    return fields


def api_approve(client: TestClient, request: ApprovalRequest, who: dict[str, str]) -> Any:
    return client.post(
        f"/sagacity/approvals/{request.request_id}/approve",
        json={"sha256": request.input_sha256},
        headers=who,
    )


class TestLinks:
    def test_a_used_link_opens_nothing_for_anyone(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int], app_client: TestClient
    ) -> None:
        """Opened by alice, the same link is refused to her and to bob; no GET decided."""
        inbox, _ = mail
        start_wire(sagacity, bank, "used-1")
        link = link_of(inbox.next())
        assert open_link(app_client, link, ALICE).status_code == 303
        for who in (ALICE, BOB):
            app_client.cookies.clear()
            again = open_link(app_client, link, who)
            assert again.status_code == 410
            assert "Link used" in again.text
        assert not decisions(sagacity, "used-1")

    def test_a_link_opened_before_an_edit_approves_neither_input(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int], app_client: TestClient
    ) -> None:
        """The page of the old input, posted after the edit, approves nothing at all."""
        inbox, _ = mail
        start_wire(sagacity, bank, "edit-1", amount="100")
        (old,) = sagacity.pending("edit-1")
        link = link_of(inbox.next())
        assert open_link(app_client, link, ALICE).status_code == 303
        page = app_client.get(f"/sagacity/ui/requests/{old.request_id}")
        assert old.input_sha256 in page.text
        edited = sagacity.edit(
            "edit-1",
            approver="carol",
            request_id=old.request_id,
            new_input={"amount": "100000", "to": "acct-9"},
        )
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        for request_id in (old.request_id, edited.request_id):
            refused = app_client.post(
                "/sagacity/ui/requests/approve",
                data={"csrf": csrf, "request_id": request_id, "sha256": old.input_sha256},
                follow_redirects=False,
            )
            assert refused.status_code in (403, 404, 409), refused.text
        assert [p for p, _ in decisions(sagacity, "edit-1")] == ["REJECTED"]  # the edit's
        (waiting,) = sagacity.pending("edit-1")
        assert waiting.approvals == ()

    def test_a_link_expires_with_its_request(
        self,
        sagacity: Sagacity,
        bank: Bank,
        mail: tuple[Inbox, int],
        app_client: TestClient,
        clock: FakeClock,
    ) -> None:
        """The request expires after an hour: its 24-hour link does too."""
        inbox, _ = mail
        start_wire(sagacity, bank, "expiry-1")
        link = link_of(inbox.next())
        assert datetime.datetime.fromtimestamp(fields_of(link)["e"], datetime.UTC) == (
            clock() + datetime.timedelta(hours=1)
        )
        clock.advance(seconds=3600)
        refused = open_link(app_client, link, ALICE)
        assert refused.status_code == 410
        assert "Link expired" in refused.text

    def test_a_link_for_one_request_opens_no_other(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int], app_client: TestClient
    ) -> None:
        """A's payload with B's signature is forged; A's page gives no say over B."""
        inbox, _ = mail
        start_wire(sagacity, bank, "pair-a", amount="1")
        start_wire(sagacity, bank, "pair-b", amount="2")
        link_a, link_b = link_of(inbox.next()), link_of(inbox.next())
        (b,) = sagacity.pending("pair-b")
        mixed = token_of(link_a).partition(".")[0] + "." + token_of(link_b).partition(".")[2]
        forged = app_client.get(f"/sagacity/ui/links/{mixed}", headers=ALICE)
        assert forged.status_code == 403
        assert open_link(app_client, link_a, ALICE).status_code == 303
        (a,) = sagacity.pending("pair-a")
        assert decide(app_client, b.request_id, "approve", sha256=a.input_sha256).status_code == 403
        assert not decisions(sagacity, "pair-b")
        decide(app_client, b.request_id, "approve", sha256=b.input_sha256)
        ((_, payload),) = decisions(sagacity, "pair-b")
        assert payload["via"] == "inbox"  # B was not opened from a link

    def test_a_link_to_a_saga_with_the_longest_id_opens(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int], app_client: TestClient
    ) -> None:
        """512 four-byte characters, the longest saga id there is: its link still opens."""
        inbox, _ = mail
        saga_id = "\U0001d49c" * 512
        start_wire(sagacity, bank, saga_id)
        (request,) = sagacity.pending(saga_id)
        opened = open_link(app_client, link_of(inbox.next()), ALICE)
        assert opened.status_code == 303, opened.text
        assert opened.headers["location"] == f"/sagacity/ui/requests/{request.request_id}"

    @pytest.mark.parametrize(
        "token",
        [
            "A" * 16 + "." + "A" * 43,
            "x" * 5000,
            "é" * 40,
            "%00%0d%0a",
            "..",
            "",
        ],
    )
    def test_a_token_of_no_shape_is_refused(
        self, sagacity: Sagacity, app_client: TestClient, token: str
    ) -> None:
        """Garbage, huge, non-ASCII or control characters: refused, never a server error."""
        refused = app_client.get(
            f"/sagacity/ui/links/{token}", headers=ALICE, follow_redirects=False
        )
        assert refused.status_code in (403, 404, 307), refused.text  # 307: a path redirect
        if refused.status_code == 307:
            assert "/links/" not in refused.headers["location"]

    def test_a_cut_or_padded_link_is_refused(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int], app_client: TestClient
    ) -> None:
        """Padding, a cut payload, a trailing character: 403; the genuine one still opens."""
        inbox, _ = mail
        start_wire(sagacity, bank, "cut-1")
        link = link_of(inbox.next())
        body, _, signature = token_of(link).partition(".")
        for token in (f"{body}=.{signature}", f"{body[:-4]}.{signature}", f"{body}.{signature}A"):
            refused = app_client.get(
                f"/sagacity/ui/links/{token}", headers=ALICE, follow_redirects=False
            )
            assert refused.status_code == 403, token
        assert open_link(app_client, link, ALICE).status_code == 303

    @pytest.mark.parametrize("change", ["version", "hash", "saga", "expiry", "nonce"])
    def test_a_link_signed_with_the_secret_but_wrong_inside_opens_nothing(
        self,
        sagacity: Sagacity,
        bank: Bank,
        mail: tuple[Inbox, int],
        app_client: TestClient,
        change: str,
    ) -> None:
        """Were the secret leaked, odd fields still open nothing: refused, not a 500."""
        inbox, _ = mail
        start_wire(sagacity, bank, "inside-1")
        fields = fields_of(link_of(inbox.next()))
        if change == "version":
            fields["v"] = 2
        elif change == "hash":
            fields["h"] = "Z" * 64
        elif change == "saga":
            fields["s"] = "another-saga"
        elif change == "expiry":
            fields["e"] = 10**30
        else:
            fields["n"] = ["not", "a", "string"]
        token = signed_token(fields)
        refused = app_client.get(
            f"/sagacity/ui/links/{token}", headers=ALICE, follow_redirects=False
        )
        assert refused.status_code in (403, 410), refused.text
        assert not decisions(sagacity, "inside-1")


class TestPrefetchers:
    def test_no_get_or_head_decides_and_no_unsigned_one_spends_the_link(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int], app_client: TestClient
    ) -> None:
        """Scanners GET and HEAD the link and follow redirects: nothing decided, link kept.

        A signed-in GET (a browser's prefetch) leads to the page and decides nothing;
        the decision is a POST with the page's CSRF token, never a GET.
        """
        inbox, _ = mail
        start_wire(sagacity, bank, "scan-1")
        (request,) = sagacity.pending("scan-1")
        link = link_of(inbox.next())
        for method in ("GET", "HEAD"):
            scanned = app_client.request(method, path_of(link), follow_redirects=True)
            assert scanned.status_code in (200, 405), scanned.status_code
            app_client.cookies.clear()
        opened = open_link(app_client, link, ALICE)
        assert opened.status_code == 303
        page = app_client.get(opened.headers["location"])
        assert page.status_code == 200
        assert request.input_sha256 in page.text
        assert not decisions(sagacity, "scan-1")
        as_get = app_client.get(
            "/sagacity/ui/requests/approve",
            params={"request_id": request.request_id, "sha256": request.input_sha256},
        )
        assert as_get.status_code in (404, 405)
        no_csrf = app_client.post(
            "/sagacity/ui/requests/approve",
            data={"request_id": request.request_id, "sha256": request.input_sha256},
            follow_redirects=False,
        )
        assert no_csrf.status_code == 403
        assert not decisions(sagacity, "scan-1")


class TestWhoMayOpen:
    def test_the_same_approver_decides_once_through_the_link_and_the_api(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int], app_client: TestClient
    ) -> None:
        """Alice approves from her link, then over the API: one of her approvals counts."""
        inbox, _ = mail
        start_wire(sagacity, bank, "twice-1", big=True)
        (request,) = sagacity.pending("twice-1")
        assert open_link(app_client, link_of(inbox.next()), ALICE).status_code == 303
        assert decide(app_client, request.request_id, "approve", sha256=request.input_sha256)
        assert api_approve(app_client, request, ALICE).status_code == 409
        (still,) = sagacity.pending("twice-1")
        assert [(a.approver, a.via) for a in still.approvals] == [("alice", "email")]
        assert api_approve(app_client, request, BOB).status_code == 200

    def test_a_forwarded_link_is_not_used_up_by_an_approver_outside_the_group(
        self, db_url: str, mail: tuple[Inbox, int], notifier: EmailNotifier, links: ApprovalLinks
    ) -> None:
        """Escalated to carol's group: alice, forwarded the link, approves nothing with it.

        Her opening does not spend the link: carol opens it afterwards and approves.
        """
        inbox, _ = mail

        @compensable(reversibility=Reversibility.IRREVERSIBLE, escalate_to="leads")
        def refund(amount: str) -> str:
            """Refund a customer."""
            return "refunded"

        clock = FakeClock()
        forwarded = ApprovalLinks(SECRET, inbox_url=INBOX_URL, clock=clock)
        sender = mailer(mail[1], forwarded)
        instance = Sagacity.from_url(
            db_url,
            on_approval_request=sender,
            on_approval_reminder=sender.remind,
            approval_ttl=600,
            clock=clock,
            approver_groups=[ApproverGroup(name="leads", members=["carol"], ttl=600)],
        )
        try:
            (tool,) = instance.wrap(refund)
            instance.saga("refund-1", lambda: tool(amount="40.00"))
            inbox.next()
            clock.advance(minutes=11)
            assert [a.action for a in Escalator(instance).sweep()] == ["escalated"]
            (request,) = instance.pending("refund-1")
            link = forwarded.make(request)  # the link of the leads' mail
            app = create_app(instance, token_auth(), ui={"links": forwarded})
            with TestClient(app) as client:
                opened = open_link(client, link, ALICE)
                if opened.status_code == 303:
                    refused = decide(
                        client, request.request_id, "approve", sha256=request.input_sha256
                    )
                    assert refused.status_code == 403
                    assert "not a member" in refused.text
                else:
                    assert opened.status_code == 403
                assert not decisions(instance, "refund-1")
                client.cookies.clear()
                assert open_link(client, link, CAROL).status_code == 303
                approved = decide(
                    client, request.request_id, "approve", sha256=request.input_sha256
                )
                assert approved.status_code == 303, approved.text
            ((_, payload),) = decisions(instance, "refund-1")
            assert (payload["approver"], payload["via"]) == ("carol", "email")
        finally:
            sender.close()
            forwarded.close()
            instance.close()

    def test_the_starter_does_not_use_up_the_link(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int], app_client: TestClient
    ) -> None:
        """The starter opens the link and cannot approve; bob then opens it and approves."""
        inbox, _ = mail
        start_wire(sagacity, bank, "starter-1", started_by="alice")
        (request,) = sagacity.pending("starter-1")
        link = link_of(inbox.next())
        assert open_link(app_client, link, ALICE).status_code == 303
        app_client.cookies.clear()
        assert open_link(app_client, link, BOB).status_code == 303
        assert decide(app_client, request.request_id, "approve", sha256=request.input_sha256)
        ((_, payload),) = decisions(sagacity, "starter-1")
        assert (payload["approver"], payload["via"]) == ("bob", "email")


class _Hanging:
    """A TCP server that accepts connections and never says a word (a stuck SMTP server)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.connected = threading.Event()
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        try:
            connection, _ = self.listener.accept()
        except OSError:
            return
        self._held.append(connection)
        self.connected.set()

    def close(self) -> None:
        for connection in self._held:
            connection.close()
        self.listener.close()
        self._thread.join(10)


class _SaysNoToQuit(Inbox):
    """Accepts each message, then answers QUIT with an error, as a flaky relay might."""

    async def handle_QUIT(self, server: Any, session: Any, envelope: Any) -> str:
        return "421 4.3.0 closing after a hiccup"


class _Refuses(Inbox):
    """Answers each RCPT with the next reply of `replies` (then accepts), counting them."""

    def __init__(self, *replies: str) -> None:
        super().__init__()
        self.replies = list(replies)
        self.rcpts = 0

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: Any
    ) -> str:
        self.rcpts += 1
        if self.replies:
            return self.replies.pop(0)
        envelope.rcpt_tos.append(address)
        return "250 OK"


class _Attempts(logging.Handler):
    """Sets `failed` on an e-mail attempt's WARNING."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.failed = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "attempt" in record.getMessage():
            self.failed.set()


class TestOutbox:
    def test_a_server_down_then_back_gets_the_message_once(self, bank: Bank) -> None:
        """The first attempt finds nothing listening; the retry after it came up delivers."""
        port = free_port()
        links = ApprovalLinks(SECRET, inbox_url=INBOX_URL)
        sender = mailer(port, links, timeout=5, retries=10, backoff=0.05)
        watch = _Attempts()
        logger = logging.getLogger("sagacity.server.email")
        logger.addHandler(watch)
        try:
            instance = Sagacity.from_url("memory://", on_approval_request=sender)
            instance.wrap(bank)
            start_wire(instance, bank, "down-1")
            assert watch.failed.wait(10)
            with smtp_server(port=port) as (inbox, _):
                received = inbox.next()
                sender.close()
                assert inbox.empty()
        finally:
            logger.removeHandler(watch)
            links.close()
        assert received.message["Subject"] == "Approval needed: wire in saga down-1"
        assert (sender.delivered, sender.failed) == (1, 0)

    def test_an_accepted_message_is_not_sent_again_when_quit_fails(self, bank: Bank) -> None:
        """The server took the message, then erred on QUIT: it is not delivered twice."""
        links = ApprovalLinks(SECRET, inbox_url=INBOX_URL)
        with smtp_server(handler=_SaysNoToQuit()) as (inbox, port):
            sender = mailer(port, links, retries=2, backoff=0.01)
            instance = Sagacity.from_url("memory://", on_approval_request=sender)
            instance.wrap(bank)
            start_wire(instance, bank, "quit-1")
            inbox.next()
            sender.close()
            assert inbox.empty()
        links.close()
        assert (sender.delivered, sender.failed) == (1, 0)

    def test_a_permanent_refusal_is_not_retried(
        self, bank: Bank, caplog: pytest.LogCaptureFixture
    ) -> None:
        """550 for the recipient: given up after one attempt, not held for the retries."""
        refusing = _Refuses("550 5.1.1 no such mailbox")
        links = ApprovalLinks(SECRET, inbox_url=INBOX_URL)
        with smtp_server(handler=refusing) as (inbox, port):
            sender = mailer(port, links, to="gone@bank.example", backoff=0.01)
            instance = Sagacity.from_url("memory://", on_approval_request=sender)
            instance.wrap(bank)
            with caplog.at_level("WARNING", logger="sagacity.server.email"):
                start_wire(instance, bank, "gone-1")
                sender.close()
            assert inbox.empty()
        links.close()
        assert (sender.delivered, sender.failed, refusing.rcpts) == (0, 1, 1)
        (error,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert "after 1 attempt(s)" in error
        assert "550" in error

    def test_a_greeting_that_never_comes_leaves_no_socket_open(self, bank: Bank) -> None:
        """The attempt times out waiting for the server's 220: its socket is closed."""
        stuck = _Hanging()
        links = ApprovalLinks(SECRET, inbox_url=INBOX_URL)
        sender = mailer(stuck.port, links, timeout=0.2, retries=0)
        instance = Sagacity.from_url("memory://", on_approval_request=sender)
        instance.wrap(bank)
        try:
            start_wire(instance, bank, "mute-1")
            sender.close()  # after the one attempt, which timed out
            assert (sender.delivered, sender.failed) == (0, 1)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ResourceWarning)
                gc.collect()
            assert [str(w.message) for w in caught if "unclosed" in str(w.message)] == []
        finally:
            stuck.close()
            links.close()
            instance.close()

    def test_a_temporary_refusal_is_retried_and_delivered_once(self, bank: Bank) -> None:
        """451 (greylisting) for the first RCPT: the retry is accepted, one message arrives."""
        refusing = _Refuses("451 4.7.1 try again later")
        links = ApprovalLinks(SECRET, inbox_url=INBOX_URL)
        with smtp_server(handler=refusing) as (inbox, port):
            sender = mailer(port, links, backoff=0.01)
            instance = Sagacity.from_url("memory://", on_approval_request=sender)
            instance.wrap(bank)
            start_wire(instance, bank, "grey-1")
            assert inbox.next().rcpt_tos == ["ops@bank.example"]
            sender.close()
            assert inbox.empty()
        links.close()
        assert (sender.delivered, sender.failed, refusing.rcpts) == (1, 0, 2)

    def test_a_stuck_server_blocks_no_call_and_no_decision(self, db_url: str, bank: Bank) -> None:
        """The SMTP server hangs mid-greeting: the saga asks, alice approves, it runs."""
        stuck = _Hanging()
        links = ApprovalLinks(SECRET, inbox_url=INBOX_URL)
        sender = mailer(stuck.port, links, timeout=60, retries=0)
        instance = Sagacity.from_url(db_url, on_approval_request=sender)
        instance.wrap(bank)
        try:
            start_wire(instance, bank, "stuck-1")
            assert stuck.connected.wait(10)  # the sending thread waits on the server now
            (request,) = instance.pending("stuck-1")
            with TestClient(create_app(instance, token_auth(), ui={"links": links})) as client:
                assert api_approve(client, request, ALICE).status_code == 200
            assert instance.resume_saga("stuck-1").outcome.value == "COMPLETED"
            assert bank.log[-1] == "wire 100 to acct-1"
            assert sender.delivered == 0
        finally:
            stuck.close()
            sender.close()
            links.close()
            instance.close()


class _Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)


class TestHostileStrings:
    def test_crlf_in_tool_saga_reason_and_editor_adds_no_header(
        self, mail: tuple[Inbox, int], notifier: EmailNotifier
    ) -> None:
        """A request whose every field tries a header injection: one subject, no Bcc."""
        inbox, _ = mail
        evil = "x\r\nBcc: thief@evil.example\r\nX-Approved: yes"
        amount = '<b>1,000,000</b><script>alert("approve")</script><a href="http://e.x">ok</a>'
        given: dict[str, Any] = {"amount": amount, "to": evil}
        request = ApprovalRequest(
            request_id="0123456789abcdef0123456789abcdef",
            saga_id="saga" + evil,
            seq=1,
            call_id="call-1",
            tool_name="wire" + evil,
            input=given,
            input_sha256=hashlib.sha256(rfc8785.dumps(given)).hexdigest(),
            reason="because" + evil,
            requested_at=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
            expires_at=None,
            started_by="sam" + evil,
            edited_by="carol" + evil,
        )
        notifier(request)
        received = inbox.next()
        message = received.message
        assert received.rcpt_tos == ["ops@bank.example"]
        assert message["Bcc"] is None
        assert message["X-Approved"] is None
        assert "\n" not in message["Subject"]
        assert "\r" not in message["Subject"]
        assert message["Subject"].startswith("Approval needed: wire")
        assert sorted(set(message.keys())) == sorted(
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
        assert not any(line.startswith(("Bcc:", "X-Approved")) for line in text.splitlines())
        assert "Edited by:  carolx\\u000d\\u000aBcc" in text  # shown, escaped, on its line
        tags = _Tags()
        tags.feed(received.html())
        assert tags.tags <= {"html", "head", "meta", "title", "body", "p", "strong", "table"} | {
            "tr",
            "th",
            "td",
            "code",
            "pre",
            "a",
        }
        assert "script" not in tags.tags
        assert "b" not in tags.tags
        assert "&lt;script&gt;" in received.html()
        assert link_of(received).startswith(INBOX_URL + "/links/")

    @pytest.mark.parametrize(
        "address",
        [
            "ops@bank.example, thief@evil.example",
            "ops@bank.example <thief@evil.example>",
            "ops@bank.example\r\nBcc: thief@evil.example",
            "ops@bank.example\tBcc: thief@evil.example",
            "",
            "no-at-sign",
        ],
    )
    def test_an_address_that_is_not_one_mailbox_is_refused(self, address: str) -> None:
        """A list, a mailbox hiding another, a header in disguise: ConfigurationError."""
        links = ApprovalLinks(SECRET, inbox_url=INBOX_URL)
        settings = SmtpSettings(host="127.0.0.1", port=25, security="none")
        with pytest.raises(ConfigurationError):
            EmailNotifier(
                settings, sender="s@bank.example", links=links, default_recipients=[address]
            )
        with pytest.raises(ConfigurationError):
            EmailNotifier(settings, sender=address, links=links, default_recipients=["a@b.example"])
        links.close()

    def test_a_named_mailbox_is_mailed_at_its_address(
        self, mail: tuple[Inbox, int], bank: Bank
    ) -> None:
        """`Treasury <t@bank.example>`: the envelope goes to the address, the name is kept."""
        inbox, port = mail
        links = ApprovalLinks(SECRET, inbox_url=INBOX_URL)
        with EmailNotifier(
            SmtpSettings(host="127.0.0.1", port=port, security="none"),
            sender="Sagacity <sagacity@bank.example>",
            links=links,
            default_recipients=["Treasury <t@bank.example>"],
        ) as sender:
            instance = Sagacity.from_url("memory://", on_approval_request=sender)
            instance.wrap(bank)
            start_wire(instance, bank, "named-1")
            received = inbox.next()
        links.close()
        assert (received.mail_from, received.rcpt_tos) == (
            "sagacity@bank.example",
            ["t@bank.example"],
        )
        assert received.message["To"] == "Treasury <t@bank.example>"

    def test_an_edited_request_is_mailed_as_edited(
        self, sagacity: Sagacity, bank: Bank, mail: tuple[Inbox, int]
    ) -> None:
        """The mail of an edit names its editor in both parts: not the call's own ask."""
        inbox, _ = mail
        start_wire(sagacity, bank, "edited-1", amount="100")
        inbox.next()
        (request,) = sagacity.pending("edited-1")
        sagacity.edit(
            "edited-1",
            approver="carol",
            request_id=request.request_id,
            new_input={"amount": "100000", "to": "acct-9"},
        )
        received = inbox.next()
        assert '{"amount":"100000","to":"acct-9"}' in received.text().splitlines()
        assert "Edited by:  carol (a person changed the input" in received.text()
        assert "Edited by" in received.html()
