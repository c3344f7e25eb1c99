"""Retention never passes a durable consumer's cursor (issue 28), up to the hard bound
(MARKETPLACE_EVENTS_RETENTION_MAX_HOURS), past which the deletion of unread events is logged as
an error, recorded per consumer and exported on /metrics: never a silent loss."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

import asyncpg
import pytest
from prometheus_client import REGISTRY

from marketplace.http.events_lag import CONSUMER_LAG
from marketplace.storage.repositories import events as repo
from marketplace.storage.repositories import leaderboard_boards, notification_deliveries
from tests.integration.events.conftest import RelayStarter, committed_ids, produce, wait_relayed
from tests.support.waiting import eventually

WEEK = timedelta(days=7)
T = TypeVar("T")


async def age(pool: asyncpg.Pool, days: int, through: int) -> None:
    """Events through position ``through`` written ``days`` ago (positioned first)."""
    await committed_ids(pool)
    await pool.execute(
        "UPDATE events SET created_at = now() - make_interval(days => $1) WHERE position <= $2",
        days,
        through,
    )


def _returning(value: Callable[[], T]) -> Callable[[], Awaitable[T]]:
    async def check() -> T:
        return value()

    return check


async def read_all_as_notifications(pool: asyncpg.Pool) -> list[int]:
    """The notifications consumer's way, on its real cursor row: read from the cursor, apply,
    move the cursor, until nothing is left; the positions read."""
    seen: list[int] = []
    while True:
        async with pool.acquire() as conn, conn.transaction():
            cursor = await notification_deliveries.consumer_cursor(conn)
            rows, position = await repo.read_consumed(conn, cursor, 4, ["project.removed"])
            seen += [row.id for row in rows]
            if position > cursor:
                await notification_deliveries.advance_consumer_cursor(conn, position)
        if not rows:
            return seen


async def test_a_stopped_consumer_misses_nothing_however_long_retention_runs(
    pool: asyncpg.Pool, start_relay: RelayStarter
) -> None:
    async with pool.acquire() as conn:
        # The notifications consumer stopped before any event; the leaderboards one is current.
        await notification_deliveries.advance_consumer_cursor(conn, 0)
    ids = await produce(pool, 8)
    async with pool.acquire() as conn:
        await leaderboard_boards.advance_consumer_cursor(conn, ids[-1])
    await age(pool, 10, ids[-1])  # all past the retention age
    running = await start_relay(retention=WEEK, unread_retention=timedelta(days=30))
    await wait_relayed(pool, ids[-1])
    # The relay sweeps once it became active (its first round may come after the events were
    # relayed), then only a minute later: wait for that first sweep, so that it cannot take
    # part of what this test sweeps below.
    await eventually(
        _returning(lambda: running.relay.sweeps), within=10, what="the relay's first sweep"
    )
    # The relay swept when it became active: nothing unread went.
    assert (await repo.sweep(pool, WEEK, 100, unread_older_than=timedelta(days=30))).deleted == 0
    assert await committed_ids(pool) == ids
    (lag,) = [x for x in await repo.consumer_lag(pool) if x.consumer == "notifications"]
    assert (lag.position, lag.lag_events, lag.skipped_events) == (0, 8, 0)
    assert lag.lag_seconds > 9 * 24 * 3600
    (current,) = [x for x in await repo.consumer_lag(pool) if x.consumer == "leaderboards"]
    assert (current.lag_events, current.lag_seconds) == (0, 0.0)

    # The consumer comes back: it reads every event, then retention may take them.
    assert await read_all_as_notifications(pool) == ids
    assert (await repo.sweep(pool, WEEK, 100)).deleted == 8
    assert await committed_ids(pool) == []
    assert running.relay.skipped_unread == 0
    assert await repo.consumer_skips(pool, "notifications") == []


async def test_the_hard_bound_deletes_unread_events_and_says_so(
    pool: asyncpg.Pool, start_relay: RelayStarter, caplog: pytest.LogCaptureFixture
) -> None:
    async with pool.acquire() as conn:
        await notification_deliveries.advance_consumer_cursor(conn, 0)
    ids = await produce(pool, 6)
    async with pool.acquire() as conn:
        await leaderboard_boards.advance_consumer_cursor(conn, ids[2])
    await age(pool, 40, ids[3])  # past the hard bound: ids[0..3]
    caplog.set_level(logging.ERROR, logger="marketplace.outbox.relay")
    running = await start_relay(retention=WEEK, unread_retention=timedelta(days=30))
    await wait_relayed(pool, ids[-1])

    async def swept() -> bool:
        return await committed_ids(pool) == ids[4:]

    await eventually(swept, within=10, what="the hard-bound sweep", interval=0.05)
    # Both consumers are told what they lost: notifications all four, leaderboards the one
    # past its cursor (ids[3]).
    skips = {s.consumer: s for s in await repo.consumer_skips(pool, "notifications")}
    skips |= {s.consumer: s for s in await repo.consumer_skips(pool, "leaderboards")}
    assert skips["notifications"] == repo.ConsumerSkip("notifications", 0, ids[3], 4)
    assert skips["leaderboards"] == repo.ConsumerSkip("leaderboards", ids[2], ids[3], 1)
    assert running.relay.skipped_unread == 5
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("notifications consumer had not read" in m and "4 events" in m for m in errors)
    assert any("leaderboards consumer had not read" in m for m in errors)
    # The figures /metrics exports (every frontend reads them from the same tables).
    lags = {x.consumer: x for x in await repo.consumer_lag(pool)}
    assert lags["notifications"].skipped_events == 4
    assert lags["notifications"].lag_events == 2  # ids[4], ids[5] remain unread
    assert lags["leaderboards"].skipped_events == 1
    CONSUMER_LAG.lags = list(lags.values())
    assert (
        REGISTRY.get_sample_value(
            "marketplace_events_consumer_skipped_events_total", {"consumer": "notifications"}
        )
        == 4
    )
    assert (
        REGISTRY.get_sample_value(
            "marketplace_events_consumer_lag_events", {"consumer": "notifications"}
        )
        == 2
    )
    # A consumer that resumes now reads what is left, after its cursor; nothing is read twice.
    assert await read_all_as_notifications(pool) == ids[4:]
