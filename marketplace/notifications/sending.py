"""The `notifications` job: send one queued delivery and record the outcome on its row.

The handler loads the delivery, reads the previewed message's current text (a message removed
since it was sent previews nothing), and hands a :class:`DeliveryToSend` to the sender named by
``MARKETPLACE_NOTIFICATION_SENDER``: ``"module:attribute"`` of ``fn(settings) -> send``, where
``send(delivery)`` is a coroutine that raises on failure. The factory runs once per worker
process (Ray pickles handlers by reference, so the sender is looked up where the job runs).

Outcomes on the row: sent -> ``sent`` with ``sent_at`` in the transaction that completes the job
(so a lost lease sends nothing twice into the log); a failed attempt records ``attempts`` and
``last_error`` and stays ``queued`` while the job has attempts left; the last attempt, or a
:class:`~marketplace.jobs.PermanentJobError` from the sender, makes it ``failed``.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from marketplace.config import Settings
from marketplace.jobs import JobContext, PermanentJobError, QueueSpec
from marketplace.notifications.models import DeliveryStatus, NotificationEventType
from marketplace.storage.repositories import notification_deliveries as repo


@dataclass(frozen=True)
class DeliveryToSend:
    id: uuid.UUID
    event_id: int
    event_type: NotificationEventType
    recipient_user_id: uuid.UUID
    email: str
    subject: str
    # Below MARKETPLACE_PUBLIC_BASE_URL.
    link_path: str
    # The previewed message's current text (chat and DMs, visible messages only), uncut: the
    # composer applies MARKETPLACE_NOTIFICATION_PREVIEW_CHARS.
    preview: str | None
    # The number of this attempt (1 on the first).
    attempt: int


Send = Callable[[DeliveryToSend], Awaitable[None]]
SenderFactory = Callable[[Settings], Send]

# Per settings object and reference: a process's settings do not change, but a test process
# builds workers with different ones. The settings are held, so their id is not reused.
_senders: dict[tuple[int, str], tuple[Settings, Send]] = {}


def sender_for(settings: Settings) -> Send:
    """The configured sender, made once per settings object and reference."""
    reference = settings.notification_sender
    cached = _senders.get((id(settings), reference))
    if cached is not None:
        return cached[1]
    module_name, _, attribute = reference.partition(":")
    factory: SenderFactory = getattr(importlib.import_module(module_name), attribute)
    send = factory(settings)
    _senders[(id(settings), reference)] = (settings, send)
    return send


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


async def load(ctx: JobContext) -> DeliveryToSend | None:
    """The delivery the job names, if it is still to be sent (one query)."""
    payload = ctx.payload
    preview_id = payload.get("previewMessageId")
    row = await repo.delivery_to_send(
        ctx.pool,
        uuid.UUID(payload["deliveryId"]),
        uuid.UUID(preview_id) if preview_id else None,
    )
    if row is None or row["status"] != DeliveryStatus.QUEUED or not row["email"]:
        return None
    return DeliveryToSend(
        id=row["id"],
        event_id=row["event_id"],
        event_type=NotificationEventType(row["event_type"]),
        recipient_user_id=row["recipient_user_id"],
        email=row["email"],
        subject=row["subject"],
        link_path=str(payload.get("linkPath") or "/"),
        preview=row["preview"],
        attempt=ctx.job.attempt,
    )


async def deliver(ctx: JobContext) -> None:
    delivery = await load(ctx)
    if delivery is None:
        return  # gone (its user was deleted) or already final: nothing to send
    try:
        await sender_for(ctx.settings)(delivery)
    except BaseException as exc:
        final = isinstance(exc, PermanentJobError) or ctx.job.is_last_attempt
        if isinstance(exc, Exception):
            await repo.record_failure(
                ctx.pool, delivery.id, ctx.job.attempt, _error_text(exc), final=final
            )
        raise
    # Marked sent in the statement that completes the job (one round trip).
    await ctx.complete_with(repo.MARK_SENT_ON_COMPLETION, delivery.id)


# Sending is slow I/O (an SMTP conversation): many at once per worker, each bounded. 32 rather
# than 16: on the 2-core bench a burst went from ~176 to ~220 deliveries/s (same load), the
# jobs' latency being waits on Postgres and the SMTP server, not this process's CPU.
NOTIFICATIONS_QUEUE = QueueSpec("notifications", deliver, timeout_seconds=60, concurrency=32)
