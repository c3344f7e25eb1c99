"""The `notifications` job handler with an injected sender (MARKETPLACE_NOTIFICATION_SENDER):
a queued delivery is handed to the sender once with its address, subject, link and the
message's current text, and becomes `sent`; a permanent refusal makes it `failed` with the
error after one attempt. Workers run in the test's loop on the real queue."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from marketplace.jobs.worker import JobWorker
from marketplace.notifications.sending import NOTIFICATIONS_QUEUE
from marketplace.storage.pool import create_pool
from tests.api.messaging.conftest import dm, project_with_worker
from tests.conftest import Servers, make_settings
from tests.integration.notifications import senders
from tests.integration.notifications.conftest import Pipeline, deliveries, set_email, wait_until


@contextlib.asynccontextmanager
async def worker(servers: Servers, sender: str) -> AsyncIterator[JobWorker]:
    settings = make_settings(
        servers,
        notification_sender=f"tests.integration.notifications.senders:{sender}",
        jobs_poll_interval_ms=100,
        jobs_backoff_base_seconds=0.05,
        jobs_backoff_cap_seconds=0.1,
    )
    pool = await create_pool(servers.database_url, min_size=1, max_size=6)
    job_worker = JobWorker(NOTIFICATIONS_QUEUE, pool, settings, owner=f"test-{sender}")
    task = asyncio.create_task(job_worker.run())
    try:
        yield job_worker
    finally:
        await job_worker.stop(grace_seconds=0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await pool.close()


@pytest.fixture(autouse=True)
def no_sends_yet() -> None:
    senders.SENT.clear()


async def test_a_queued_delivery_is_sent_once_and_marked_sent(
    client: Any, db: asyncpg.Connection, pipeline: Pipeline, servers: Servers
) -> None:
    project = await project_with_worker(client, db)
    address = await set_email(db, project.worker)
    message = await dm(client, project.owner, project.worker, "a private word")
    await pipeline.consume()
    (row,) = await deliveries(db)
    assert row["status"] == "queued"

    async def sent() -> bool:
        status = await db.fetchval(
            "SELECT status FROM notification_deliveries WHERE id = $1", row["id"]
        )
        return bool(status == "sent")

    async with worker(servers, "recording"):
        await wait_until(sent, 30, "delivery sent")
        await asyncio.sleep(0.3)  # a second send would show by now
    assert len(senders.SENT) == 1
    delivery = senders.SENT[0]
    assert delivery.id == row["id"] and delivery.email == address
    assert delivery.recipient_user_id == project.worker.user.user_id
    assert delivery.subject == "New direct message from a marketplace user"
    assert delivery.link_path == f"/messages/threads/{message['threadId']}"
    assert delivery.preview == "a private word"
    assert delivery.attempt == 1
    final = (await deliveries(db))[0]
    assert final["sent_at"] is not None and final["attempts"] == 1
    assert await db.fetchval("SELECT status FROM jobs WHERE id = $1", row["job_id"]) == "completed"


async def test_a_permanent_refusal_fails_the_delivery_after_one_attempt(
    client: Any, db: asyncpg.Connection, pipeline: Pipeline, servers: Servers
) -> None:
    project = await project_with_worker(client, db)
    await set_email(db, project.worker)
    await dm(client, project.owner, project.worker)
    await pipeline.consume()

    async def failed() -> bool:
        status = await db.fetchval("SELECT status FROM notification_deliveries")
        return bool(status == "failed")

    async with worker(servers, "refusing"):
        await wait_until(failed, 30, "delivery failed")
    (row,) = await deliveries(db)
    assert row["attempts"] == 1
    assert row["last_error"] == "PermanentJobError: 550 5.1.1 mailbox unavailable"
    assert row["sent_at"] is None
    job = await db.fetchrow("SELECT status, attempt_count FROM jobs WHERE id = $1", row["job_id"])
    assert job is not None and (job["status"], job["attempt_count"]) == ("failed", 1)


async def test_a_delivery_whose_job_failed_unrecorded_is_failed_by_the_consumer(
    client: Any, db: asyncpg.Connection, pipeline: Pipeline
) -> None:
    project = await project_with_worker(client, db)
    await set_email(db, project.worker)
    await dm(client, project.owner, project.worker)
    await dm(client, project.owner, project.worker)
    await pipeline.consume()
    first, _ = await deliveries(db)
    # As the reaper leaves it: the last attempt's lease expired, the handler recorded nothing.
    await db.execute(
        "UPDATE jobs SET status = 'failed', attempt_count = max_attempts, finished_at = now(),"
        " last_error = 'lease expired during the last attempt' WHERE id = $1",
        first["job_id"],
    )
    assert await pipeline.consumer.sweep_orphans(pipeline.conn, 120) == 1
    rows = await deliveries(db)
    assert (rows[0]["status"], rows[0]["last_error"], rows[0]["attempts"]) == (
        "failed",
        "lease expired during the last attempt",
        5,
    )
    assert rows[1]["status"] == "queued"  # its job is still queued
    assert await pipeline.consumer.sweep_orphans(pipeline.conn, 120) == 0
