"""Fixtures of the job queue tests: a clean database with the test queues' tables."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from marketplace.jobs.worker import JobWorker
from marketplace.storage.pool import create_pool
from tests.conftest import Servers, reset_state
from tests.integration.jobs.handlers import CREATE_TABLES, DROP_TABLES


@pytest.fixture
async def pool(servers: Servers) -> AsyncIterator[asyncpg.Pool]:
    await reset_state(servers)
    pool = await create_pool(servers.database_url, min_size=1, max_size=8)
    await pool.execute(CREATE_TABLES)
    try:
        yield pool
    finally:
        await pool.execute(DROP_TABLES)
        await pool.close()


async def wait_until(
    predicate: Callable[[], Awaitable[Any]], limit_s: float, what: str = "condition"
) -> float:
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if await predicate():
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} not met within {limit_s} s")


@contextlib.asynccontextmanager
async def running(*workers: JobWorker) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(worker.run()) for worker in workers]
    try:
        yield
    finally:
        for worker in workers:
            await worker.stop(grace_seconds=0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def job_row(pool: asyncpg.Pool, job_id: int) -> asyncpg.Record:
    row = await pool.fetchrow(
        "SELECT id, status, attempt_count, max_attempts, next_attempt_at, lease_owner,"
        " lease_expires_at, last_error, started_at, finished_at FROM jobs WHERE id = $1",
        job_id,
    )
    assert row is not None
    return row
