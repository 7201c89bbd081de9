"""A real SMTP server on loopback (aiosmtpd) that keeps every message it accepts."""

from __future__ import annotations

import dataclasses
import email
import email.policy
import queue
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session


@dataclasses.dataclass(frozen=True)
class Received:
    """One message the server accepted: the envelope and the parsed message."""

    mail_from: str
    rcpt_tos: list[str]
    raw: bytes
    message: EmailMessage

    def text(self) -> str:
        """The text/plain part."""
        part = self.message.get_body(("plain",))
        assert part is not None
        content: str = part.get_content()
        return content

    def html(self) -> str:
        """The text/html part."""
        part = self.message.get_body(("html",))
        assert part is not None
        content: str = part.get_content()
        return content


class Inbox:
    """What the SMTP server received, in order; `next()` waits for the next message."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Received] = queue.Queue()

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or b""
        parsed = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        self._queue.put(
            Received(
                mail_from=str(envelope.mail_from),
                rcpt_tos=list(envelope.rcpt_tos),
                raw=raw,
                message=parsed,
            )
        )
        return "250 Message accepted for delivery"

    def next(self, timeout: float = 10.0) -> Received:
        """The next message; fails the test after `timeout` seconds without one."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no e-mail arrived in {timeout} s") from None

    def empty(self) -> bool:
        """Whether no message is waiting."""
        return self._queue.empty()


def free_port() -> int:
    """A port nothing listens on, now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def smtp_server(
    *, port: int | None = None, handler: Inbox | None = None, **options: Any
) -> Iterator[tuple[Inbox, int]]:
    """An aiosmtpd server on 127.0.0.1 and `port` (else a free one): yield its inbox and port.

    `handler` is the inbox to keep messages in (a subclass may add hooks such as
    `handle_QUIT`); `options` go to aiosmtpd's `SMTP` (e.g. `tls_context=`).
    """
    inbox = handler or Inbox()
    port = port or free_port()
    controller = Controller(
        inbox,
        hostname="127.0.0.1",
        port=port,
        ready_timeout=10,
        **options,
    )
    controller.start()
    try:
        yield inbox, port
    finally:
        controller.stop()


def self_signed(tmp: Any) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server TLS context with a fresh self-signed certificate for 127.0.0.1.

    And a client context that trusts exactly that certificate.
    """
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file = tmp / "smtp-cert.pem"
    key_file = tmp / "smtp-key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(str(cert_file), str(key_file))
    client = ssl.create_default_context(cafile=str(cert_file))
    return server, client
