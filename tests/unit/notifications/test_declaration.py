"""The pipeline's capability declares what the code reads and runs."""

from __future__ import annotations

from marketplace.events.types import EventType
from marketplace.http.capabilities import CAPABILITIES
from marketplace.notifications.consumer import QUEUE
from marketplace.notifications.recipients import CONSUMED_TYPES
from marketplace.notifications.sending import NOTIFICATIONS_QUEUE


def test_the_capability_declares_the_queue_the_consumer_enqueues_on() -> None:
    (capability,) = [c for c in CAPABILITIES if c.name == "notification_pipeline"]
    assert capability.queues == (NOTIFICATIONS_QUEUE,)
    assert NOTIFICATIONS_QUEUE.name == QUEUE
    assert set(CONSUMED_TYPES) <= set(EventType)
