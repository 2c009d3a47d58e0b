"""Email delivery: over SMTP with aiosmtplib (STARTTLS, implicit TLS or plain; optional login;
timeouts), or, with no SMTP_HOST, as .eml files in an outbox folder."""

from __future__ import annotations

import asyncio
import os
import uuid
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


class SmtpMailer:
    def __init__(self, settings: Settings):
        self._settings = settings

    async def send(self, message: EmailMessage) -> None:
        s = self._settings
        try:
            await aiosmtplib.send(
                message, hostname=s.smtp_host, port=s.smtp_port,
                username=s.smtp_username or None, password=s.smtp_password or None,
                use_tls=s.smtp_security == "tls", start_tls=s.smtp_security == "starttls",
                timeout=s.smtp_timeout_seconds)
        except (aiosmtplib.SMTPException, OSError, asyncio.TimeoutError) as error:
            raise DeliveryFailed(f"SMTP {s.smtp_host}:{s.smtp_port}: "
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
    return SmtpMailer(settings) if settings.smtp_host else OutboxMailer(settings.outbox_path)
