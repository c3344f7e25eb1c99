"""The pipeline's capability declares what the code reads and runs."""

from __future__ import annotations

from marketplace.capabilities import CAPABILITIES, resolve
from marketplace.jobs import QueueSpec
from marketplace.notifications.consumer import QUEUE
from marketplace.notifications.recipients import CONSUMED_TYPES


def test_the_capability_consumes_what_the_recipients_resolve_and_declares_the_queue() -> None:
    (capability,) = [c for c in CAPABILITIES if c.name == "notification_pipeline"]
    assert set(capability.consumes) == set(CONSUMED_TYPES)
    (queue,) = [resolve(ref) for ref in capability.queues]
    assert isinstance(queue, QueueSpec) and queue.name == QUEUE
