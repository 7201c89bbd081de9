"""Approval requests by e-mail: the exact input, its hash, and a one-time link to decide.

`EmailNotifier` is an `on_approval_request` hook (and its `remind` an
`on_approval_reminder` one). Calling it only queues the request (`Outbox`); one thread
sends one message per recipient through an SMTP server (`smtplib`: plain, STARTTLS or
SSL, with or without a login), each with a link of its own made by `ApprovalLinks`:
single use, expiring, bound to the input's hash. The link opens the request's page in
the inbox after sign-in; the approver decides there (see `_links`).

A message is `multipart/alternative`: a text part and an HTML part showing the same
facts (`RequestFacts`): every value that a model or tool wrote is put on one line with
its control and invisible characters escaped, and the HTML part is rendered with
autoescaping, so an input cannot add a header, a line, a link or markup of its own.
Headers hold only the tool and the saga id (which sagacity already keeps printable),
escaped and cut short all the same.
"""

from __future__ import annotations

import dataclasses
import email.utils
import logging
import smtplib
import ssl
from collections.abc import Mapping, Sequence
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from pathlib import Path
from typing import Literal

import jinja2

from sagacity.approval import ApprovalRequest
from sagacity.errors import ConfigurationError
from sagacity.server._links import ApprovalLinks
from sagacity.server._outbox import Outbox, Undeliverable
from sagacity.server._shown import RequestFacts, one_line

__all__ = ["EmailNotifier", "SmtpSettings"]

_log = logging.getLogger("sagacity.server.email")
_TEMPLATES = Path(__file__).parent / "templates"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SmtpSettings:
    """How to reach the SMTP server that sends approval e-mails."""

    host: str
    """The server's host name or address."""
    port: int = 587
    """Its port: 587 for STARTTLS, 465 for SSL, 25 for plain."""
    security: Literal["starttls", "ssl", "none"] = "starttls"
    """`"starttls"` (upgrade the connection; refused if the server cannot), `"ssl"` (TLS
    from the first byte), or `"none"` (plain: only for a relay on the same host)."""
    username: str | None = None
    """The login, when the server wants one (sent only over TLS unless `security` is none)."""
    password: str | None = dataclasses.field(default=None, repr=False)
    """The login's password."""
    timeout: float = 10.0
    """Seconds a connection or command may take before the attempt counts as failed."""
    ssl_context: ssl.SSLContext | None = None
    """The TLS settings (certificate checks); None: `ssl.create_default_context()`."""

    def __post_init__(self) -> None:
        if not self.host or not 0 < self.port < 65536:
            raise ConfigurationError(f"SMTP host {self.host!r} port {self.port} is not usable")
        if self.security not in ("starttls", "ssl", "none"):
            raise ConfigurationError(
                f"SMTP security {self.security!r}: use 'starttls', 'ssl' or 'none'"
            )
        if (self.username is None) != (self.password is None):
            raise ConfigurationError("an SMTP login needs both username and password")


def _address(text: str, what: str) -> str:
    """`text` if it is one mailbox (`a@b.example` or `Name <a@b.example>`), else refused.

    A list (`a@b, c@d`) or a mailbox hiding another (`a@b <c@d>`) would put in the
    header an address the envelope does not go to.
    """
    parsed = email.utils.getaddresses([text]) if text.isprintable() else []
    if len(parsed) != 1 or any(c in text for c in "\r\n\0"):
        raise ConfigurationError(f"{what} {text!r} is not one e-mail address")
    _, address = parsed[0]
    local, at, domain = address.rpartition("@")
    if not (local and at and domain) or any(c in address for c in ' ,;:<>()[]\\"'):
        raise ConfigurationError(f"{what} {text!r} is not one e-mail address")
    return text


def _permanent(error: Exception) -> bool:
    """Whether the SMTP server refused for good: a 5xx reply (RFC 5321, 4.2.1).

    A 4xx, a dropped connection or a timeout is worth another attempt; a 5xx for the
    sender, the recipient or the message is not, and retrying it would hold back every
    message queued behind it.
    """
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        codes = [code for code, _ in error.recipients.values()]
        return bool(codes) and all(500 <= code < 600 for code in codes)
    if isinstance(error, smtplib.SMTPResponseException):
        return 500 <= error.smtp_code < 600
    return False


@dataclasses.dataclass(frozen=True, slots=True)
class _Mail:
    request: ApprovalRequest
    recipient: str
    event: str

    @property
    def saga_id(self) -> str:
        return self.request.saga_id

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def tool_name(self) -> str:
        return self.request.tool_name


class EmailNotifier(Outbox[_Mail]):
    """E-mail each new approval request (and each reminder) to its tool's approvers.

    Args:
        smtp: The SMTP server.
        sender: The From address.
        links: Makes the one-time links (its secret must be the server's).
        recipients: Addresses by tool name; a tool not listed goes to `default_recipients`.
        default_recipients: Addresses for every tool not in `recipients`.
        retries: How many times a failed message is sent again (a 5xx refusal is not);
            the default covers an SMTP server down for about five minutes.
        backoff: Seconds before the first retry; doubled for each next one (max 60 s).
        queue_size: How many messages may wait; beyond that new ones are dropped.

    Each recipient gets a message of its own, with a link of its own.
    """

    def __init__(
        self,
        smtp: SmtpSettings,
        *,
        sender: str,
        links: ApprovalLinks,
        recipients: Mapping[str, Sequence[str]] | None = None,
        default_recipients: Sequence[str] = (),
        retries: int = 10,
        backoff: float = 1.0,
        queue_size: int = 1000,
    ) -> None:
        self.smtp = smtp
        self.sender = _address(sender, "sender")
        self.links = links
        self.recipients = {
            tool: tuple(_address(a, f"recipient of tool {tool!r}") for a in addresses)
            for tool, addresses in (recipients or {}).items()
        }
        self.default_recipients = tuple(
            _address(a, "default recipient") for a in default_recipients
        )
        if not self.default_recipients and not any(self.recipients.values()):
            raise ConfigurationError(
                "an EmailNotifier needs recipients: default_recipients, or recipients by tool"
            )
        self._templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_TEMPLATES),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        super().__init__(
            kind="email",
            target=f"smtp {smtp.host}:{smtp.port}",
            log=_log,
            retries=retries,
            backoff=backoff,
            queue_size=queue_size,
        )

    def recipients_of(self, tool_name: str) -> tuple[str, ...]:
        """Who is mailed about `tool_name`'s requests."""
        return self.recipients.get(tool_name, self.default_recipients)

    def __call__(self, request: ApprovalRequest) -> None:
        """Queue the messages of a new request and return at once; never raises."""
        self._each(request, "approval.requested")

    def remind(self, request: ApprovalRequest) -> None:
        """Queue reminders of a request still waiting (with fresh links); never raises."""
        self._each(request, "approval.reminder")

    def _each(self, request: ApprovalRequest, event: str) -> None:
        try:
            addresses = self.recipients_of(request.tool_name)
            if not addresses:
                _log.warning(
                    "email: no recipients for tool %r: %s of saga %r request %s not sent",
                    request.tool_name,
                    event,
                    request.saga_id,
                    request.request_id,
                )
            for address in addresses:
                self._queued(_Mail(request, address, event))
        except Exception:  # a hook must never fail the call that asked for approval
            self._failed()
            _log.exception("email: cannot queue request %s", request.request_id)

    def message(self, mail: _Mail) -> EmailMessage:
        """The message of `mail`, with a new link (each call makes one)."""
        request = mail.request
        reminder = mail.event == "approval.reminder"
        now = self.links.now()
        link = self.links.make(request, now=now)
        link_expires = self.links.expiry(request, now).isoformat().replace("+00:00", "Z")
        facts = RequestFacts.of(request)
        subject = (
            f"{'Reminder: approval still needed' if reminder else 'Approval needed'}: "
            f"{one_line(request.tool_name, 60)} in saga {one_line(request.saga_id, 80)}"
        )
        message = EmailMessage(policy=SMTP_POLICY)
        message["Subject"] = subject
        message["From"] = self.sender
        message["To"] = mail.recipient
        message["Date"] = email.utils.formatdate(now.timestamp(), usegmt=True)
        domain = self.sender.rpartition("@")[2].rstrip(">").strip() or None
        message["Message-ID"] = email.utils.make_msgid("sagacity", domain=domain)
        message["Auto-Submitted"] = "auto-generated"
        message["X-Sagacity-Event"] = mail.event
        message["X-Sagacity-Request"] = one_line(request.request_id, 100)
        message.set_content(self._text(facts, link, link_expires, reminder))
        html = self._templates.get_template("email_request.html").render(
            subject=subject, facts=facts, link=link, link_expires=link_expires, reminder=reminder
        )
        message.add_alternative(html, subtype="html")
        return message

    @staticmethod
    def _text(facts: RequestFacts, link: str, link_expires: str, reminder: bool) -> str:
        lines = [
            ("Reminder: still waiting. " if reminder else "")
            + f"The tool {facts.tool} in saga {facts.saga_id} waits for approval.",
            "",
            f"Reason:     {facts.reason}",
            f"Request:    {facts.request_id}",
            f"Asked at:   {facts.requested_at}",
            f"Expires:    {facts.expires_at or 'never'}",
            f"Approvals:  {facts.approvals}",
        ]
        if facts.edited_by is not None:
            lines.append(
                f"Edited by:  {facts.edited_by} (a person changed the input the call asked "
                "for; they cannot approve it)"
            )
        if facts.started_by is not None:
            lines.append(f"Started by: {facts.started_by} (cannot approve it)")
        if facts.escalation is not None:
            lines.append(f"Escalated:  {facts.escalation}")
        lines += [
            "",
            "The exact input, canonical JSON (RFC 8785; invisible characters shown as \\u "
            "escapes):",
            "",
            facts.input_json,
            "",
            f"Its SHA-256: {facts.input_sha256}",
            "",
            "Open the request to decide (sign-in required; the link works once, until "
            f"{link_expires}, and decides nothing by itself):",
            "",
            link,
            "",
        ]
        return "\n".join(lines)

    def _attempt(self, item: _Mail) -> str:
        """Send one message; the problem, or "" when the server accepted it."""
        message = self.message(item)
        settings = self.smtp
        context = settings.ssl_context or ssl.create_default_context()
        client: smtplib.SMTP
        try:
            if settings.security == "ssl":
                client = smtplib.SMTP_SSL(
                    settings.host, settings.port, timeout=settings.timeout, context=context
                )
            else:
                client = smtplib.SMTP(settings.host, settings.port, timeout=settings.timeout)
        except (smtplib.SMTPException, OSError) as error:
            return f"{type(error).__name__}: {error}"
        try:
            try:
                if settings.security == "starttls":
                    client.starttls(context=context)  # raises if the server cannot
                if settings.username is not None and settings.password is not None:
                    client.login(settings.username, settings.password)
                refused = client.send_message(
                    message, from_addr=self.sender, to_addrs=[item.recipient]
                )
            except (smtplib.SMTPException, OSError) as error:
                if _permanent(error):
                    raise Undeliverable(f"{type(error).__name__}: {error}") from None
                return f"{type(error).__name__}: {error}"
            if refused:
                return f"the server refused {sorted(refused)}"
            # The server took the message: a failed goodbye must not send it twice.
            try:
                client.quit()
            except (smtplib.SMTPException, OSError) as error:
                _log.info(
                    "email: request %s was accepted for %s; QUIT then failed: %s",
                    item.request_id,
                    item.recipient,
                    error,
                )
            return ""
        finally:
            client.close()

    def _detail(self, item: _Mail) -> str:
        return f", to {item.recipient}"
