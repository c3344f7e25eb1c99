"""The notifications consumer: outbox events -> one delivery row per (event, recipient), and a
`notifications` job for each delivery that may go out (docs/notifications.md, "Pipeline").

Every frontend runs one; exactly one is active: the holder of a session-level advisory lock on
a connection of its own (the event relay's pattern, marketplace/outbox/relay.py). The active
consumer reads the outbox from PostgreSQL after ``notification_consumer_cursor`` (ids are commit
order, so "after id N" is a complete position), wakes on the NOTIFY every producing transaction
sends, and polls in case one is missed.

One transaction per batch of events: resolve each event's recipient, decide its status
(suppressed, then the rate limiter, else queued), insert the rows (``ON CONFLICT (event_id,
recipient_user_id) DO NOTHING``) with the job of each new queued row in the same statement, and
advance the cursor, all on the lock holder's connection. A consumer that dies mid-batch commits
nothing of it and the next active one reads the batch again; one that dies after the commit has
moved the cursor with its rows. So reading is at-least-once and the UNIQUE constraint makes it
one row (and at most one job) per (event, recipient). Only the rate limiter sits outside the
transaction; it answers the same for an event it admitted before, so re-reading a batch does
not count its deliveries twice.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import asyncpg

from marketplace.config import Settings
from marketplace.config.notifications import NotificationRates
from marketplace.jobs import payload_json
from marketplace.notifications.models import (
    DeliveryJobPayload,
    DeliveryStatus,
    SuppressionReason,
)
from marketplace.notifications.rate_limit import LimitRequest
from marketplace.notifications.recipients import CONSUMED_TYPES, Notification, resolve_many
from marketplace.notifications.sending import NOTIFICATIONS_QUEUE
from marketplace.outbox.consumer import event_from_row
from marketplace.outbox.leader import OutboxLeader
from marketplace.storage.pool import Connection
from marketplace.storage.repositories import events as events_repo
from marketplace.storage.repositories import notification_deliveries as repo
from marketplace.storage.repositories.notification_deliveries import RecipientFacts

log = logging.getLogger(__name__)

QUEUE = NOTIFICATIONS_QUEUE.name
DEFAULT_BATCH_SIZE = 200
# After a batch that did not fill up, events gather this long before the next read
# (``OutboxLeader.after_batch``): under a steady stream of chat sends the consumer would otherwise
# pay a transaction of about ten statements and a rate-limiter call for every one or two events
# (bench/README.md, "Messaging", measured the saving). An e-mail 50 ms later is well inside the
# pipeline's latency target.
BATCH_INTERVAL_SECONDS = 0.05


class Limiter(Protocol):
    """The notification rate limiter (the actor, or a :class:`WindowLimiter` in-process)."""

    async def admit(self, requests: Sequence[LimitRequest], now: float) -> list[bool]: ...


def suppression_reason(facts: RecipientFacts) -> SuppressionReason | None:
    """Why a delivery must not be sent, first match wins: the recipient blocked the sender, muted
    them (a mute is also the DM thread's mute), unsubscribed from the event type, has no verified
    address. The recipient's own decisions about this sender come first, so the log tells them
    which of their choices held the e-mail back; ``no_email`` is a fact of the account and only
    shows when no choice of theirs did."""
    if facts.blocked:
        return SuppressionReason.BLOCKED
    if facts.muted:
        return SuppressionReason.MUTED
    if facts.unsubscribed:
        return SuppressionReason.UNSUBSCRIBED
    if not facts.email:
        return SuppressionReason.NO_EMAIL
    return None


def job_payload(delivery_id: uuid.UUID, notification: Notification) -> DeliveryJobPayload:
    return DeliveryJobPayload(
        delivery_id=delivery_id,
        link_path=notification.link_path,
        preview_message_id=notification.preview_message_id,
    )


@dataclass(frozen=True)
class ConsumerConfig:
    rates: NotificationRates
    poll_interval: float
    standby_interval: float
    batch_size: int = DEFAULT_BATCH_SIZE
    batch_interval: float = BATCH_INTERVAL_SECONDS
    # Sending attempts of each job (MARKETPLACE_NOTIFICATION_MAX_ATTEMPTS).
    max_attempts: int = 5

    @classmethod
    def from_settings(cls, settings: Settings) -> ConsumerConfig:
        poll = settings.events_relay_poll_interval_ms / 1000
        return cls(
            rates=settings.notification_rates,
            poll_interval=poll,
            standby_interval=max(1.0, 10 * poll),
            max_attempts=settings.notification_max_attempts,
        )


@dataclass(frozen=True)
class _Planned:
    notification: Notification
    facts: RecipientFacts
    reason: SuppressionReason | None


class NotificationConsumer(OutboxLeader):
    role = "notifications consumer"

    def __init__(self, dsn: str, limiter: Limiter, config: ConsumerConfig) -> None:
        super().__init__(
            dsn,
            poll_interval=config.poll_interval,
            standby_interval=config.standby_interval,
            log=log,
        )
        self.limiter = limiter
        self.config = config
        self.deliveries = 0  # rows this consumer wrote
        self.events = 0  # events it consumed

    async def try_lock(self, conn: asyncpg.Connection) -> bool:
        return await repo.try_consumer_lock(conn)

    async def work(self, conn: asyncpg.Connection) -> bool:
        """A batch failed commits nothing and is read again after the backoff."""
        consumed = await self.consume_batch(conn)
        return await self.after_batch(consumed, self.config.batch_size, self.config.batch_interval)

    async def consume_batch(self, conn: Connection) -> int:
        """Consume the next batch after the cursor in one transaction; the number of events read
        (0: none waiting). ``conn`` must hold the consumer lock (or be the only consumer)."""
        # Position committed events first, outside the transaction, so that ``read_consumed``
        # does not hold the positioning lock across this batch (docs/events.md).
        await events_repo.position_unless_relayed(conn)
        async with conn.transaction():
            cursor = await repo.consumer_cursor(conn)
            rows, position = await events_repo.read_consumed(
                conn, cursor, self.config.batch_size, CONSUMED_TYPES, position_first=False
            )
            if not rows:
                if position > cursor:  # past other types' events, for good
                    await repo.advance_consumer_cursor(conn, position)
                return 0
            now = await repo.transaction_time(conn)
            notifications = await resolve_many(conn, [event_from_row(row) for row in rows])
            facts = await repo.recipient_facts_many(
                conn,
                [(n.recipient_user_id, n.sender_user_id, str(n.event_type)) for n in notifications],
            )
            planned = [
                _Planned(notification, fact, suppression_reason(fact))
                for notification, fact in zip(notifications, facts, strict=True)
                if fact is not None  # no account row: nobody to write a delivery for
            ]
            requests = [self._request(p.notification) for p in planned if p.reason is None]
            verdicts = iter(await self.limiter.admit(requests, now) if requests else [])
            await self._write(conn, planned, verdicts)
            await repo.advance_consumer_cursor(conn, position)
        self.events += len(rows)
        return len(rows)

    def _request(self, notification: Notification) -> LimitRequest:
        rate = self.config.rates.for_type(notification.event_type)
        return LimitRequest(
            event_id=notification.event_id,
            recipient_user_id=str(notification.recipient_user_id),
            event_type=str(notification.event_type),
            count=rate.count,
            period_seconds=rate.period_seconds,
        )

    async def _write(
        self, conn: Connection, planned: Sequence[_Planned], verdicts: Iterator[bool]
    ) -> None:
        """Insert every planned row, and the sending job of each new queued one, in one
        statement."""
        rows: list[repo.NewDelivery] = []
        for plan in planned:
            notification = plan.notification
            delivery_id = uuid.uuid4()
            job: str | None = None
            if plan.reason is not None:
                status, reason = DeliveryStatus.SUPPRESSED, str(plan.reason)
            elif next(verdicts):
                status, reason = DeliveryStatus.QUEUED, None
                job = payload_json(NOTIFICATIONS_QUEUE, job_payload(delivery_id, notification))
            else:
                status, reason = DeliveryStatus.RATE_LIMITED, None
            rows.append(
                repo.NewDelivery(
                    id=delivery_id,
                    event_id=notification.event_id,
                    event_type=str(notification.event_type),
                    recipient_user_id=notification.recipient_user_id,
                    status=str(status),
                    reason=reason,
                    subject=notification.subject,
                    email=plan.facts.email,
                    job_payload=job,
                )
            )
        # A row written by an earlier read of this event is left alone, and gets no job.
        created = await repo.insert_deliveries(
            conn, rows, queue=NOTIFICATIONS_QUEUE.name, max_attempts=self.config.max_attempts
        )
        self.deliveries += len(created)


async def consume_all(consumer: NotificationConsumer, conn: asyncpg.Connection) -> int:
    """Consume batches until none is waiting (tests, tools); the number of events read. Every
    event committed before the call counts as waiting: it is positioned first, relay or not."""
    await events_repo.position_committed(conn, wait=True)
    total = 0
    while count := await consumer.consume_batch(conn):
        total += count
    return total
