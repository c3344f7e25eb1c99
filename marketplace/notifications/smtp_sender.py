"""The production sender of notification e-mails (``MARKETPLACE_NOTIFICATION_SENDER``'s default):
composes the message (docs/notifications.md, "E-mail") and hands it to the SMTP server of
``MARKETPLACE_SMTP_URL``.

A 5xx answer fails the delivery at once (``PermanentJobError``); an unreachable server, a 4xx
answer or a timeout raise and the job is retried with backoff, up to
``MARKETPLACE_NOTIFICATION_MAX_ATTEMPTS``. Every attempt sends the same ``Message-ID`` (made from
the delivery id), so a receiver can tell a retried send from a new e-mail.
"""

from __future__ import annotations

from email.message import EmailMessage

from marketplace.config import Settings
from marketplace.jobs import PermanentJobError
from marketplace.notifications.email import EmailContent, compose, sender_domain
from marketplace.notifications.mailer import PermanentMailError, send_message
from marketplace.notifications.models import NotificationEventType
from marketplace.notifications.sending import DeliveryToSend, Send
from marketplace.notifications.unsubscribe import public_base_url, unsubscribe_url

# Seconds per SMTP command (connect, each reply).
SMTP_COMMAND_TIMEOUT_SECONDS = 20.0

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
        link_url=f"{public_base_url(settings)}{delivery.link_path}",
        link_label=LINK_LABELS[delivery.event_type],
        preview=delivery.preview,
        unsubscribe_url=unsubscribe_url(settings, delivery.recipient_user_id, delivery.event_type),
    )


def message_for(settings: Settings, delivery: DeliveryToSend) -> EmailMessage:
    """The e-mail of ``delivery``, with the ``Message-ID`` made from its id."""
    message = compose(
        content_for(settings, delivery),
        mail_from=settings.mail_from,
        preview_chars=settings.notification_preview_chars,
    )
    del message["Message-ID"]
    message["Message-ID"] = f"<notification.{delivery.id}@{sender_domain(settings.mail_from)}>"
    return message


def smtp_sender(settings: Settings) -> Send:
    target = settings.smtp_target

    async def send(delivery: DeliveryToSend) -> None:
        if target is None:
            raise PermanentJobError("no SMTP server is configured (MARKETPLACE_SMTP_URL)")
        message = message_for(settings, delivery)
        try:
            await send_message(target, message, SMTP_COMMAND_TIMEOUT_SECONDS)
        except PermanentMailError as exc:
            raise PermanentJobError(exc.description) from exc

    return send
