"""Email delivery: over SMTP with aiosmtplib (STARTTLS, implicit TLS or plain; optional login;
timeouts), or, with no SMTP_HOST, as .eml files in an outbox folder."""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path

import aiosmtplib

from server.notify.sql import NotificationRow
from server.settings import Settings
from server.text import is_plain_text


class DeliveryFailed(Exception):
    """The message was not accepted; the message says why."""


def build_message(sender: str, record: NotificationRow) -> EmailMessage:
    """ValueError when a header would carry anything but plain text once the email package
    has decoded it (a record written before the API refused encoded words, or by another
    service): such a record is undeliverable, never sent with the caller's headers."""
    message = EmailMessage()
    message["From"] = sender
    message["To"] = record.recipient
    message["Subject"] = record.title
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = make_msgid(idstring=record.id)
    message["X-Notification-Type"] = record.type
    for name, value in message.items():
        if not is_plain_text(str(value)):
            raise ValueError(f"the {name} header would hold control characters once decoded")
    message.set_content(record.message + "\n")
    return message


@dataclass(frozen=True)
class SmtpServer:
    """The SMTP_* settings: where mail goes and how."""
    host: str
    port: int
    username: str | None
    password: str | None
    security: str        # tls, starttls or none
    timeout_seconds: float

    @classmethod
    def from_settings(cls, settings: Settings) -> SmtpServer:
        """ValueError without SMTP_HOST (make_mailer writes to the outbox then)."""
        if not settings.smtp_host:
            raise ValueError("SMTP_HOST is not set")
        return cls(settings.smtp_host, settings.smtp_port, settings.smtp_username or None,
                   settings.smtp_password or None, settings.smtp_security,
                   settings.smtp_timeout_seconds)


class SmtpMailer:
    def __init__(self, server: SmtpServer):
        self._server = server

    async def send(self, message: EmailMessage) -> None:
        s = self._server
        try:
            await aiosmtplib.send(
                message, hostname=s.host, port=s.port, username=s.username,
                password=s.password, use_tls=s.security == "tls",
                start_tls=s.security == "starttls", timeout=s.timeout_seconds)
        except (aiosmtplib.SMTPException, OSError, asyncio.TimeoutError) as error:
            raise DeliveryFailed(f"SMTP {s.host}:{s.port}: "
                                 f"{str(error) or type(error).__name__}") from None


class OutboxMailer:
    """Writes each message as an .eml file (complete or not at all: written, then renamed),
    readable by the service's user only (the messages name users and their projects)."""

    def __init__(self, outbox: Path):
        self.outbox = outbox

    async def send(self, message: EmailMessage) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._write, message)

    def _write(self, message: EmailMessage) -> None:
        try:
            self.outbox.mkdir(mode=0o700, parents=True, exist_ok=True)
            name = f"{uuid.uuid4().hex}.eml"
            temporary = self.outbox / f".{name}.tmp"
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as file:
                file.write(message.as_bytes())
            os.replace(temporary, self.outbox / name)
        except OSError as error:
            raise DeliveryFailed(f"outbox {self.outbox}: {error}") from None


def make_mailer(settings: Settings) -> SmtpMailer | OutboxMailer:
    return (SmtpMailer(SmtpServer.from_settings(settings)) if settings.smtp_host
            else OutboxMailer(settings.outbox_path))
