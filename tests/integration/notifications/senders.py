"""Senders the notification tests inject: real functions that record what they were asked to
send, or refuse it as an SMTP server would, each behind a module-level handler of the
`notifications` queue (a queue's handler is never a closure; docs/jobs.md)."""

from __future__ import annotations

import asyncio
import dataclasses

from marketplace.jobs import JobContext, PermanentJobError, QueueSpec
from marketplace.notifications.models import DeliveryJobPayload, DeliveryToSend
from marketplace.notifications.sending import NOTIFICATIONS_QUEUE, deliver_with

SENT: list[DeliveryToSend] = []


async def record(delivery: DeliveryToSend) -> None:
    SENT.append(delivery)


async def refuse(delivery: DeliveryToSend) -> None:
    raise PermanentJobError("550 5.1.1 mailbox unavailable")


async def hang(delivery: DeliveryToSend) -> None:
    await asyncio.sleep(3600)


async def deliver_recording(ctx: JobContext[DeliveryJobPayload]) -> None:
    await deliver_with(ctx, record)


async def deliver_refusing(ctx: JobContext[DeliveryJobPayload]) -> None:
    await deliver_with(ctx, refuse)


async def deliver_hanging(ctx: JobContext[DeliveryJobPayload]) -> None:
    await deliver_with(ctx, hang)


# The `notifications` queue as declared, with the handler sending through the named sender.
QUEUES: dict[str, QueueSpec[DeliveryJobPayload]] = {
    "recording": dataclasses.replace(NOTIFICATIONS_QUEUE, handler=deliver_recording),
    "refusing": dataclasses.replace(NOTIFICATIONS_QUEUE, handler=deliver_refusing),
    "hanging": dataclasses.replace(
        NOTIFICATIONS_QUEUE, handler=deliver_hanging, timeout_seconds=0.5
    ),
}
