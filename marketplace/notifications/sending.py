"""The `notifications` job: send one queued delivery and record the outcome on its row.

The handler loads the delivery, reads the previewed message's current text (a message removed
since it was sent previews nothing), and hands a :class:`DeliveryToSend` to ``send(delivery)``, a
coroutine that raises on failure. The queue's handler, :func:`deliver`, sends with the SMTP
sender (:mod:`marketplace.notifications.smtp_sender`), made once per worker process and settings;
:func:`deliver_with` takes any ``send`` (tests hand it one that records or refuses).

Outcomes on the row, each written in the statement or transaction that changes the job's state:
sent -> ``sent`` with ``sent_at`` in the statement that completes the job (so a lost lease sends
nothing twice into the log); a failed attempt records ``attempts`` and ``last_error`` (the job's
API-safe error) and stays ``queued`` while the job has attempts left; the last attempt, a
:class:`~marketplace.jobs.PermanentJobError` from the sender, an attempt past its timeout, or a
last attempt whose worker died (the queue's reaper) makes it ``failed``. These are written by
:func:`record_failures`, the queue's failure hook, which the queue calls inside the transaction
that retries or fails the job: no delivery stays ``queued`` behind a job that ended.
"""

from __future__ import annotations

from collections.abc import Sequence

from marketplace.config import Settings
from marketplace.jobs import JobContext, JobFailure, PermanentJobError, QueueSpec
from marketplace.notifications.models import (
    DeliveryJobPayload,
    DeliveryStatus,
    DeliveryToSend,
    NotificationEventType,
    Send,
)
from marketplace.notifications.smtp_sender import smtp_sender
from marketplace.storage.pool import Connection
from marketplace.storage.repositories import notification_deliveries as repo

# Per settings object: a process's settings do not change, but a test process builds workers
# with different ones. The settings are held, so their id is not reused.
_senders: dict[int, tuple[Settings, Send]] = {}


def sender_for(settings: Settings) -> Send:
    """The SMTP sender of ``settings``, made once per settings object (its connection pool has
    as many connections as the queue runs jobs at once)."""
    cached = _senders.get(id(settings))
    if cached is not None:
        return cached[1]
    send = smtp_sender(settings, connections=NOTIFICATIONS_QUEUE.effective_concurrency(settings))
    _senders[id(settings)] = (settings, send)
    return send


async def load(ctx: JobContext[DeliveryJobPayload]) -> DeliveryToSend | None:
    """The delivery the job names, if it is still to be sent (one query)."""
    payload = ctx.payload
    row = await repo.delivery_to_send(ctx.pool, payload.delivery_id, payload.preview_message_id)
    if row is None or row.status != DeliveryStatus.QUEUED:
        return None
    if not row.email:
        # Queued rows always have an address (no_email is a suppression); if one had none, it
        # fails rather than stays queued.
        raise PermanentJobError("the delivery has no e-mail address")
    return DeliveryToSend(
        id=row.id,
        event_id=row.event_id,
        event_type=NotificationEventType(row.event_type),
        recipient_user_id=row.recipient_user_id,
        email=row.email,
        subject=row.subject,
        link_path=payload.link_path,
        preview=row.preview,
        attempt=ctx.job.attempt,
    )


async def deliver(ctx: JobContext[DeliveryJobPayload]) -> None:
    """The `notifications` queue's handler: sends with the SMTP sender."""
    await deliver_with(ctx, sender_for(ctx.settings))


async def deliver_with(ctx: JobContext[DeliveryJobPayload], send: Send) -> None:
    """Sends the job's delivery with ``send`` and marks it sent; a failure (raised on) is
    recorded on the row by :func:`record_failures` when the queue records it."""
    delivery = await load(ctx)
    if delivery is None:
        return  # gone (its user was deleted) or already final: nothing to send
    await send(delivery)
    # Marked sent in the statement that completes the job (one round trip).
    await ctx.complete_with(repo.MARK_SENT_ON_COMPLETION, delivery.id)


async def record_failures(conn: Connection, failures: Sequence[JobFailure]) -> None:
    """The queue's failure hook: each failed attempt's error and count on its delivery, which
    becomes ``failed`` when the job did; run inside the transaction that records the job's
    failure (a retry, a final failure, the reaper's, a payload refused at claim time)."""
    await repo.record_failures(
        conn,
        [
            repo.DeliveryFailure(f.job_id, f.attempt, f.error_message, final=f.final)
            for f in failures
        ],
    )


# Sending is slow I/O (an SMTP conversation): many at once per worker, each bounded. 32 rather
# than 16: on the 2-core bench a burst went from ~176 to ~220 deliveries/s (same load), the
# jobs' latency being waits on Postgres and the SMTP server, not this process's CPU.
NOTIFICATIONS_QUEUE = QueueSpec(
    "notifications",
    DeliveryJobPayload,
    deliver,
    on_failure=record_failures,
    timeout_seconds=60,
    concurrency=32,
)
