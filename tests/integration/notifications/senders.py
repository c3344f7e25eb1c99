"""Senders the notification tests inject (MARKETPLACE_NOTIFICATION_SENDER): real functions that
record what they were asked to send, or refuse it as an SMTP server would."""

from __future__ import annotations

from marketplace.config import Settings
from marketplace.jobs import PermanentJobError
from marketplace.notifications.sending import DeliveryToSend, Send

SENT: list[DeliveryToSend] = []


def recording(settings: Settings) -> Send:
    async def send(delivery: DeliveryToSend) -> None:
        SENT.append(delivery)

    return send


def refusing(settings: Settings) -> Send:
    async def send(delivery: DeliveryToSend) -> None:
        raise PermanentJobError("550 5.1.1 mailbox unavailable")

    return send
