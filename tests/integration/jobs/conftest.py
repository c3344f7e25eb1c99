"""Fixtures of the job queue tests: a clean database with the test queues' tables."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg
import pytest

from marketplace.jobs.worker import JobWorker
from tests.conftest import Servers
from tests.integration.jobs.handlers import CREATE_TABLES, DROP_TABLES
from tests.support.db import open_pool


@pytest.fixture
async def pool(servers: Servers) -> AsyncIterator[asyncpg.Pool]:
    async with open_pool(servers, max_size=8) as pool:
        await pool.execute(CREATE_TABLES)
        try:
            yield pool
        finally:
            await pool.execute(DROP_TABLES)


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
        " lease_expires_at, error_message, last_error, started_at, finished_at FROM jobs"
        " WHERE id = $1",
        job_id,
    )
    assert row is not None
    return row
