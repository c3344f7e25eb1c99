"""The `notifications` job handler with an injected sender (`sending.deliver_with`): a queued
delivery is handed to the sender once with its address, subject, link and the message's current
text, and becomes `sent`; a permanent refusal makes it `failed` with the error after one
attempt. Workers run in the test's loop on the real queue."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from marketplace.jobs.worker import JobWorker
from marketplace.storage.pool import create_pool
from tests.api.messaging.conftest import dm, project_with_worker, signed_in
from tests.conftest import Servers, make_settings
from tests.integration.notifications import senders
from tests.integration.notifications.conftest import Pipeline, deliveries, set_email
from tests.support.waiting import eventually


@contextlib.asynccontextmanager
async def worker(servers: Servers, sender: str) -> AsyncIterator[JobWorker]:
    settings = make_settings(
        servers,
        jobs_poll_interval_ms=100,
        jobs_backoff_base_seconds=0.05,
        jobs_backoff_cap_seconds=0.1,
    )
    pool = await create_pool(servers.database_url, min_size=1, max_size=6)
    job_worker = JobWorker(senders.QUEUES[sender], pool, settings, owner=f"test-{sender}")
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
        await eventually(sent, within=30, what="delivery sent")
        await asyncio.sleep(0.3)  # a second send would show by now
    assert len(senders.SENT) == 1
    delivery = senders.SENT[0]
    assert delivery.id == row["id"] and delivery.email == address
    assert delivery.recipient_user_id == project.worker.user.user_id
    assert delivery.subject == "New direct message from a marketplace user"
    assert delivery.link_path == f"/v1/messages/dm/threads/{message['threadId']}/messages"
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
        await eventually(failed, within=30, what="delivery failed")
    (row,) = await deliveries(db)
    assert row["attempts"] == 1
    assert row["last_error"] == "PermanentJobError: 550 5.1.1 mailbox unavailable"
    assert row["sent_at"] is None
    job = await db.fetchrow("SELECT status, attempt_count FROM jobs WHERE id = $1", row["job_id"])
    assert job is not None and (job["status"], job["attempt_count"]) == ("failed", 1)


# A queued delivery whose job can no longer send it: none may exist, whatever happened.
ORPHANS = """
SELECT count(*) FROM notification_deliveries d LEFT JOIN jobs j ON j.id = d.job_id
WHERE d.status = 'queued' AND (j.id IS NULL OR j.status NOT IN ('queued', 'running'))
"""


async def test_a_delivery_whose_worker_died_on_the_last_attempt_fails_with_its_job(
    client: Any, db: asyncpg.Connection, pipeline: Pipeline, servers: Servers
) -> None:
    """The kill path: the last attempt's worker died (its lease ran out, nothing was recorded
    by the handler); the reaper fails the job and, in the same transaction, the delivery."""
    project = await project_with_worker(client, db)
    await set_email(db, project.worker)
    await dm(client, project.owner, project.worker)
    await dm(client, project.owner, project.worker)
    await pipeline.consume()
    first, _ = await deliveries(db)
    # As a worker that died mid-attempt leaves it: running, its lease expired, no attempt left.
    await db.execute(
        "UPDATE jobs SET status = 'running', attempt_count = max_attempts, lease_owner = 'dead',"
        " lease_expires_at = now() - interval '1 second', started_at = now() WHERE id = $1",
        first["job_id"],
    )
    await db.execute("UPDATE jobs SET next_attempt_at = now() + interval '1 hour'")
    async with worker(servers, "recording") as job_worker:
        await eventually(
            lambda: _true(job_worker.counts["reaped"] == 1), within=30, what="job reaped"
        )
    rows = await deliveries(db)
    assert (rows[0]["status"], rows[0]["attempts"]) == ("failed", 5)
    assert rows[0]["last_error"] == (
        "lease expired during the last attempt (its worker died or hung)"
    )
    assert rows[1]["status"] == "queued"  # its job is still queued
    assert await db.fetchval(ORPHANS) == 0
    assert senders.SENT == []


async def test_a_delivery_whose_attempt_times_out_fails_with_its_job(
    client: Any, db: asyncpg.Connection, pipeline: Pipeline, servers: Servers
) -> None:
    """The timeout path: the attempt is cancelled (the handler records nothing); the queue's
    failure hook fails the delivery in the transaction that fails the job."""
    project = await project_with_worker(client, db)
    await set_email(db, project.worker)
    await dm(client, project.owner, project.worker)
    await pipeline.consume()
    await db.execute("UPDATE jobs SET max_attempts = 1")

    async def failed() -> bool:
        status = await db.fetchval("SELECT status FROM notification_deliveries")
        return bool(status == "failed")

    async with worker(servers, "hanging"):
        await eventually(failed, within=30, what="delivery failed")
    (row,) = await deliveries(db)
    assert (row["attempts"], row["last_error"]) == (1, "AttemptTimedOut: attempt 1 exceeded 0.5 s")
    assert await db.fetchval("SELECT status FROM jobs WHERE id = $1", row["job_id"]) == "failed"
    assert await db.fetchval(ORPHANS) == 0


async def test_a_queued_delivery_cannot_exist_without_its_job(
    client: Any, db: asyncpg.Connection
) -> None:
    user = await signed_in(client)
    with pytest.raises(asyncpg.CheckViolationError, match="notification_deliveries_queued_job"):
        await db.execute(
            "INSERT INTO notification_deliveries (event_id, event_type, recipient_user_id,"
            " status, subject, email) VALUES (1, 'direct_message', $1, 'queued', 's', 'a@b.c')",
            user.user_id,
        )


async def _true(value: bool) -> bool:
    return value
