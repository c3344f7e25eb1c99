"""The batched session recorder against a real PostgreSQL: coalescing, ordering by `iat`, the
e-mail address, batches, ensure() and the final flush."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from prometheus_client import REGISTRY

from marketplace.identity.permissions import flags_of, set_flags
from marketplace.identity.session_recorder import SessionRecorder
from marketplace.storage.pool import create_pool
from tests.conftest import Servers
from tests.support.db import open_pool

NOW = int(time.time())
SELECT_USER = """
SELECT email_verified, email, session_iat, moderation_admin, verifier_admin, xmin::text AS version
FROM users WHERE user_id = $1
"""


@pytest.fixture
async def pool(servers: Servers) -> AsyncIterator[asyncpg.Pool]:
    async with open_pool(servers, max_size=4) as pool:
        yield pool


def recorder_for(pool: asyncpg.Pool, **options: Any) -> SessionRecorder:
    settings = {"interval_ms": 60_000, "max_rows": 1000, **options}
    return SessionRecorder(lambda: pool, **settings)


async def user_row(pool: asyncpg.Pool, user_id: uuid.UUID) -> asyncpg.Record | None:
    return await pool.fetchrow(SELECT_USER, user_id)


def sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


async def test_many_records_of_a_user_become_one_row_with_the_newest_token(
    pool: asyncpg.Pool,
) -> None:
    recorder = recorder_for(pool)
    user = uuid.uuid4()
    for iat, verified, email in [
        (NOW - 30, False, None),
        (NOW, True, "new@example.org"),
        (NOW - 10, True, "old@example.org"),  # older than the pending one: dropped
        (NOW, True, "new@example.org"),  # the same token again
    ]:
        recorder.record(user, email_verified=verified, email=email, issued_at=iat)
    assert recorder.pending == 1
    assert await user_row(pool, user) is None, "record() must not write"
    batches_before = sample("marketplace_session_record_batch_size_count")
    recorded_before = sample("marketplace_sessions_recorded_total")
    assert await recorder.flush() == 1
    row = await user_row(pool, user)
    assert row is not None
    assert (row["email_verified"], row["email"], row["session_iat"]) == (
        True,
        "new@example.org",
        NOW,
    )
    assert sample("marketplace_session_record_batch_size_count") == batches_before + 1
    assert sample("marketplace_sessions_recorded_total") == recorded_before + 1
    # The token a session sends with every request is written once, not once per interval.
    recorder.record(user, email_verified=True, email="new@example.org", issued_at=NOW)
    assert recorder.pending == 0
    assert await recorder.flush() == 0


async def test_a_newer_token_downgrades_and_an_older_one_never_overwrites(
    pool: asyncpg.Pool,
) -> None:
    # Two frontends: each has its own recorder and sees the user's tokens in another order.
    first, second = recorder_for(pool), recorder_for(pool)
    user = uuid.uuid4()
    first.record(user, email_verified=True, email="a@example.org", issued_at=NOW - 20)
    await first.flush()
    second.record(user, email_verified=False, email="a@example.org", issued_at=NOW - 10)
    await second.flush()
    row = await user_row(pool, user)
    assert row is not None
    # The newer unverified token wins, and the address it no longer vouches for is gone.
    assert (row["email_verified"], row["email"], row["session_iat"]) == (False, None, NOW - 10)
    # The first frontend sees an old verified token late: nothing changes, not even the version.
    first.record(user, email_verified=True, email="a@example.org", issued_at=NOW - 15)
    assert first.pending == 1
    await first.flush()
    late = await user_row(pool, user)
    assert late == row
    # A newer verified token applies again, with its address.
    first.record(user, email_verified=True, email="b@example.org", issued_at=NOW)
    await first.flush()
    row = await user_row(pool, user)
    assert row is not None
    assert (row["email_verified"], row["email"], row["session_iat"]) == (True, "b@example.org", NOW)


async def test_the_address_follows_the_newest_verified_token(pool: asyncpg.Pool) -> None:
    recorder = recorder_for(pool)
    user = uuid.uuid4()

    async def seen(iat: int, verified: bool, email: str | None) -> tuple[bool, str | None]:
        recorder.record(user, email_verified=verified, email=email, issued_at=iat)
        await recorder.flush()
        row = await user_row(pool, user)
        assert row is not None
        return row["email_verified"], row["email"]

    # An unverified address is never stored, even for a user seen for the first time.
    assert await seen(NOW - 40, False, "unverified@example.org") == (False, None)
    assert await seen(NOW - 30, True, "first@example.org") == (True, "first@example.org")
    # A verified token without the claim says nothing about the address: it is kept.
    assert await seen(NOW - 20, True, None) == (True, "first@example.org")
    assert await seen(NOW - 10, True, "changed@example.org") == (True, "changed@example.org")


async def test_a_second_frontend_repeating_the_stored_token_writes_no_row_version(
    pool: asyncpg.Pool,
) -> None:
    first, second = recorder_for(pool), recorder_for(pool)
    user = uuid.uuid4()
    for recorder in (first, second):
        recorder.record(user, email_verified=True, email="x@example.org", issued_at=NOW)
    await first.flush()
    before = await user_row(pool, user)
    await second.flush()
    assert await user_row(pool, user) == before  # xmin included: no update happened


async def test_session_records_never_touch_the_admin_flags(pool: asyncpg.Pool) -> None:
    recorder = recorder_for(pool)
    user = uuid.uuid4()
    # Granted before the user ever signed in: the operator's command creates the row.
    await set_flags(pool, user, moderation_admin=True, verifier_admin=None)
    recorder.record(user, email_verified=True, email="m@example.org", issued_at=NOW)
    await recorder.flush()
    flags = await flags_of(pool, user)
    assert (flags.moderation_admin, flags.verifier_admin) == (True, False)
    row = await user_row(pool, user)
    assert row is not None and row["email"] == "m@example.org"


async def test_pending_records_are_written_in_batches_of_max_rows(pool: asyncpg.Pool) -> None:
    recorder = recorder_for(pool, max_rows=100)
    users = [uuid.uuid4() for _ in range(250)]
    for user in users:
        recorder.record(user, email_verified=True, email=None, issued_at=NOW)
    batches_before = sample("marketplace_session_record_batch_size_count")
    rows_before = sample("marketplace_session_record_batch_size_sum")
    assert await recorder.flush() == 250
    assert sample("marketplace_session_record_batch_size_count") == batches_before + 3
    assert sample("marketplace_session_record_batch_size_sum") == rows_before + 250
    stored = await pool.fetchval("SELECT count(*) FROM users WHERE user_id = any($1)", users)
    assert stored == 250


async def test_stop_writes_everything_still_pending(pool: asyncpg.Pool) -> None:
    recorder = recorder_for(pool, max_rows=300)  # an hour-long interval: only stop() writes
    recorder.start()
    users = [uuid.uuid4() for _ in range(299)]
    for index, user in enumerate(users):
        recorder.record(user, email_verified=index % 2 == 0, email=None, issued_at=NOW + index)
    await asyncio.sleep(0.05)
    assert await pool.fetchval("SELECT count(*) FROM users") == 0
    await recorder.stop()
    rows = await pool.fetch("SELECT user_id, email_verified, session_iat FROM users")
    assert {(r["user_id"], r["email_verified"], r["session_iat"]) for r in rows} == {
        (user, index % 2 == 0, NOW + index) for index, user in enumerate(users)
    }


async def test_the_background_task_writes_without_being_asked(pool: asyncpg.Pool) -> None:
    recorder = recorder_for(pool, interval_ms=50)
    recorder.start()
    try:
        user = uuid.uuid4()
        recorder.record(user, email_verified=True, email=None, issued_at=NOW)
        for _ in range(100):
            if await user_row(pool, user) is not None:
                break
            await asyncio.sleep(0.05)
        assert await user_row(pool, user) is not None
        assert recorder.pending == 0
    finally:
        await recorder.stop()


async def test_a_full_batch_wakes_the_writer_before_the_interval(pool: asyncpg.Pool) -> None:
    recorder = recorder_for(pool, max_rows=5)  # interval one minute
    recorder.start()
    try:
        users = [uuid.uuid4() for _ in range(5)]
        for user in users:
            recorder.record(user, email_verified=False, email=None, issued_at=NOW)
        for _ in range(100):
            if await pool.fetchval("SELECT count(*) FROM users") == 5:
                break
            await asyncio.sleep(0.05)
        assert await pool.fetchval("SELECT count(*) FROM users") == 5
    finally:
        await recorder.stop()


async def test_ensure_writes_the_users_pending_record_first(pool: asyncpg.Pool) -> None:
    recorder = recorder_for(pool)
    user, other = uuid.uuid4(), uuid.uuid4()
    assert await recorder.ensure(user) is False  # nothing pending: no I/O
    recorder.record(user, email_verified=True, email=None, issued_at=NOW)
    recorder.record(other, email_verified=True, email=None, issued_at=NOW)
    assert await recorder.ensure(user) is True
    assert await user_row(pool, user) is not None
    # The pending batch went with it: one statement for everyone waiting.
    assert await user_row(pool, other) is not None
    assert await recorder.ensure(user) is False


async def test_ensure_writes_one_statement_led_by_the_user_however_long_the_queue(
    pool: asyncpg.Pool,
) -> None:
    recorder = recorder_for(pool, max_rows=100)
    waiting = [uuid.uuid4() for _ in range(250)]
    for user in waiting:
        recorder.record(user, email_verified=True, email=None, issued_at=NOW)
    batches_before = sample("marketplace_session_record_batch_size_count")
    assert await recorder.ensure(waiting[-1]) is True  # the newest of 250
    assert sample("marketplace_session_record_batch_size_count") == batches_before + 1
    assert await user_row(pool, waiting[-1]) is not None
    assert await pool.fetchval("SELECT count(*) FROM users") == 100
    assert recorder.pending == 150


async def test_ensure_waits_for_the_batch_in_flight(pool: asyncpg.Pool) -> None:
    recorder = recorder_for(pool)
    user = uuid.uuid4()
    recorder.record(user, email_verified=True, email=None, issued_at=NOW)
    flushing = asyncio.create_task(recorder.flush())
    await asyncio.sleep(0)  # the flush has taken the batch and waits for Postgres
    assert recorder.pending == 0
    assert await recorder.ensure(user) is True
    assert await user_row(pool, user) is not None
    assert await flushing == 1


async def test_a_failed_write_keeps_the_records_and_ensure_reports_it(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    closed = await create_pool(servers.database_url, min_size=0, max_size=1)
    await closed.close()
    current: asyncpg.Pool = closed
    recorder = SessionRecorder(lambda: current, interval_ms=60_000, max_rows=10)
    user = uuid.uuid4()
    recorder.record(user, email_verified=False, email=None, issued_at=NOW - 5)
    assert await recorder.flush() == 0  # the background path logs and retries later
    assert recorder.pending == 1
    # A newer token replaces the one waiting for the retry.
    recorder.record(user, email_verified=True, email="n@example.org", issued_at=NOW)
    with pytest.raises(asyncpg.InterfaceError):
        await recorder.ensure(user)  # a request that needs the row fails rather than lose it
    assert recorder.pending == 1
    current = pool
    assert await recorder.ensure(user) is True
    row = await user_row(pool, user)
    assert row is not None
    assert (row["email_verified"], row["email"], row["session_iat"]) == (
        True,
        "n@example.org",
        NOW,
    )


async def test_the_queue_is_bounded_while_postgres_is_away(pool: asyncpg.Pool) -> None:
    recorder = recorder_for(pool, max_pending=3)
    dropped_before = sample("marketplace_session_records_dropped_total")
    users = [uuid.uuid4() for _ in range(5)]
    for user in users:
        recorder.record(user, email_verified=True, email=None, issued_at=NOW)
    assert recorder.pending == 3 and recorder.dropped == 2
    assert sample("marketplace_session_records_dropped_total") == dropped_before + 2
    await recorder.flush()
    stored = {r["user_id"] for r in await pool.fetch("SELECT user_id FROM users")}
    assert stored == set(users[2:])  # the oldest went first
