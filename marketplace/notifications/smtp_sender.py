"""The sender of notification e-mails, what the `notifications` job sends with: composes the
message (docs/notifications.md, "E-mail") and hands it to the SMTP server of
``MARKETPLACE_SMTP_URL``.

A 5xx answer fails the delivery at once (``PermanentJobError``); an unreachable server, a 4xx
answer or a timeout raise and the job is retried with backoff, up to
``MARKETPLACE_NOTIFICATION_MAX_ATTEMPTS``. Every attempt sends the same ``Message-ID`` (made from
the delivery id), so a receiver can tell a retried send from a new e-mail.

Messages are written by :func:`~marketplace.notifications.email.render` and go out over a
:class:`~marketplace.notifications.mailer.SmtpPool` per sender (one per worker process), as many
connections as the queue runs jobs at once, each reused for message after message.
"""

from __future__ import annotations

import asyncio
from email.message import EmailMessage

from marketplace.config import Settings
from marketplace.jobs import PermanentJobError
from marketplace.notifications.email import (
    EmailContent,
    WireMessage,
    compose,
    render,
    sender_domain,
)
from marketplace.notifications.links import link_url
from marketplace.notifications.mailer import PermanentMailError, SmtpPool
from marketplace.notifications.models import DeliveryToSend, NotificationEventType, Send
from marketplace.notifications.unsubscribe import unsubscribe_url

# Seconds per SMTP command (connect, each reply).
SMTP_COMMAND_TIMEOUT_SECONDS = 20.0
# A pooled connection unused this long is closed (servers drop idle clients after 1-5 min).
SMTP_IDLE_SECONDS = 15.0

SUMMARIES = {
    NotificationEventType.BID_DRAFT: "A bid draft was submitted for your project.",
    NotificationEventType.DISPUTE_EVIDENCE: "New evidence was submitted in a dispute you are in.",
    NotificationEventType.PROJECT_CHAT_MESSAGE: "There is a new message in your project's chat.",
    NotificationEventType.DIRECT_MESSAGE: "You have a new direct message.",
}
LINK_LABELS = {
    NotificationEventType.BID_DRAFT: "Open the project",
    NotificationEventType.DISPUTE_EVIDENCE: "Open the project",
    NotificationEventType.PROJECT_CHAT_MESSAGE: "Open the project chat",
    NotificationEventType.DIRECT_MESSAGE: "Open the conversation",
}


def content_for(settings: Settings, delivery: DeliveryToSend) -> EmailContent:
    return EmailContent(
        to=delivery.email,
        subject=delivery.subject,
        summary=SUMMARIES[delivery.event_type],
        link_url=link_url(settings, delivery.link_path),
        link_label=LINK_LABELS[delivery.event_type],
        preview=delivery.preview,
        unsubscribe_url=unsubscribe_url(settings, delivery.recipient_user_id, delivery.event_type),
    )


def message_id(settings: Settings, delivery: DeliveryToSend) -> str:
    return f"<notification.{delivery.id}@{sender_domain(settings.mail_from)}>"


def message_for(settings: Settings, delivery: DeliveryToSend) -> EmailMessage:
    """The e-mail of ``delivery``, with the ``Message-ID`` made from its id, as an
    ``EmailMessage`` (the reference layout; :func:`wire_for` is what is sent)."""
    message = compose(
        content_for(settings, delivery),
        mail_from=settings.mail_from,
        preview_chars=settings.notification_preview_chars,
    )
    message.replace_header("Message-ID", message_id(settings, delivery))
    return message


def wire_for(settings: Settings, delivery: DeliveryToSend) -> WireMessage:
    """:func:`message_for`'s message as the bytes that go to the SMTP server."""
    return render(
        content_for(settings, delivery),
        mail_from=settings.mail_from,
        preview_chars=settings.notification_preview_chars,
        message_id=message_id(settings, delivery),
    )


def smtp_sender(settings: Settings, connections: int) -> Send:
    """``send(delivery)`` over a pool of up to ``connections`` SMTP connections, opened on
    first use."""
    target = settings.smtp_target
    pool: SmtpPool | None = None

    async def send(delivery: DeliveryToSend) -> None:
        nonlocal pool
        if target is None:
            raise PermanentJobError("no SMTP server is configured (MARKETPLACE_SMTP_URL)")
        wire = wire_for(settings, delivery)
        if pool is None or pool.loop is not asyncio.get_running_loop():
            # Connections belong to one event loop: the worker's (a test may run several).
            pool = SmtpPool(
                target,
                SMTP_COMMAND_TIMEOUT_SECONDS,
                size=connections,
                idle_seconds=SMTP_IDLE_SECONDS,
            )
        try:
            await pool.send(wire.sender, wire.recipients, wire.data)
        except PermanentMailError as exc:
            raise PermanentJobError(exc.description) from exc

    return send
