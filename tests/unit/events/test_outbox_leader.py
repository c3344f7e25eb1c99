"""``OutboxLeader.after_batch``: how the relay and the notifications consumer pace their rounds."""

from __future__ import annotations

import time

from marketplace.outbox.leader import OutboxLeader


async def test_a_full_batch_goes_again_at_once() -> None:
    started = time.perf_counter()
    assert await OutboxLeader.after_batch(200, 200, 5.0) is True
    assert time.perf_counter() - started < 1.0


async def test_a_partial_batch_lets_events_gather_first() -> None:
    started = time.perf_counter()
    assert await OutboxLeader.after_batch(3, 200, 0.2) is False
    assert time.perf_counter() - started >= 0.2


async def test_an_empty_round_waits_for_nothing() -> None:
    started = time.perf_counter()
    assert await OutboxLeader.after_batch(0, 200, 5.0) is False
    assert time.perf_counter() - started < 1.0
