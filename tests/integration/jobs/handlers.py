"""Handlers of the test queues, registered by the tests only (never by production code).

``scripted`` does what its payload says, so one handler covers the well-behaved job, the slow
one, the failing one and the poison one. Every attempt is logged in ``job_test_executions``
(autocommitted, outside the job's transaction: it records that the handler ran even when the
attempt's effects are rolled back); the effect goes into ``job_test_effects`` inside the
completing transaction, whose primary key would refuse a second effect for one job.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

from marketplace.jobs import JobContext, JobFailure, JobPayload, PermanentJobError, QueueSpec
from marketplace.storage.pool import Connection

CREATE_TABLES = """
CREATE TABLE IF NOT EXISTS job_test_effects (
    job_id bigint PRIMARY KEY,
    attempt integer NOT NULL,
    owner text NOT NULL
);
CREATE TABLE IF NOT EXISTS job_test_failures (
    id bigserial PRIMARY KEY,
    job_id bigint NOT NULL,
    attempt integer NOT NULL,
    status text NOT NULL,
    error_message text NOT NULL
);
CREATE TABLE IF NOT EXISTS job_test_executions (
    id bigserial PRIMARY KEY,
    job_id bigint NOT NULL,
    attempt integer NOT NULL,
    owner text NOT NULL,
    pid integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""
DROP_TABLES = "DROP TABLE IF EXISTS job_test_effects, job_test_executions, job_test_failures"


class Script(JobPayload):
    """What ``scripted`` does on which attempts (``True``: every attempt; a list names them)."""

    hang: bool | list[int] = False
    sleep_on: bool | list[int] = False
    sleep: float = 0.0
    raise_on: bool | list[int] = False
    permanent: bool = False
    message: str = ""
    raise_in_transaction: bool | list[int] = False
    # Tells jobs apart; nothing reads it.
    tag: int | None = None


def _on_this_attempt(value: bool | list[int], attempt: int) -> bool:
    return value is True or (isinstance(value, list) and attempt in value)


async def scripted(ctx: JobContext[Script]) -> None:
    payload, attempt = ctx.payload, ctx.job.attempt
    await ctx.pool.execute(
        "INSERT INTO job_test_executions (job_id, attempt, owner, pid) VALUES ($1, $2, $3, $4)",
        ctx.job.id,
        attempt,
        ctx.lease_owner,
        os.getpid(),
    )
    if _on_this_attempt(payload.hang, attempt):
        await asyncio.sleep(3600)
    if _on_this_attempt(payload.sleep_on, attempt):
        await asyncio.sleep(payload.sleep)
    if _on_this_attempt(payload.raise_on, attempt):
        if payload.permanent:
            raise PermanentJobError(f"permanent: {payload.message}")
        raise RuntimeError(f"{payload.message} (attempt {attempt})")
    async with ctx.completion() as conn:
        await conn.execute(
            "INSERT INTO job_test_effects (job_id, attempt, owner) VALUES ($1, $2, $3)",
            ctx.job.id,
            attempt,
            ctx.lease_owner,
        )
        if _on_this_attempt(payload.raise_in_transaction, attempt):
            raise RuntimeError(f"failed after writing the effect (attempt {attempt})")


async def plain(ctx: JobContext[Script]) -> None:
    """Returns without a completion block: the worker completes the job itself."""
    await ctx.pool.execute(
        "INSERT INTO job_test_executions (job_id, attempt, owner, pid) VALUES ($1, $2, $3, $4)",
        ctx.job.id,
        ctx.job.attempt,
        ctx.lease_owner,
        os.getpid(),
    )


async def record_failures(conn: Connection, failures: Sequence[JobFailure]) -> None:
    """A failure hook: each failure as a row, in the queue's transaction."""
    await conn.executemany(
        "INSERT INTO job_test_failures (job_id, attempt, status, error_message)"
        " VALUES ($1, $2, $3, $4)",
        [(f.job_id, f.attempt, str(f.status), f.error_message) for f in failures],
    )


async def refuse_failures(conn: Connection, failures: Sequence[JobFailure]) -> None:
    """A failure hook that fails after writing: the failure it was given must roll back too."""
    await record_failures(conn, failures)
    raise RuntimeError("the domain row could not be updated")


SCRIPTED = QueueSpec("test-jobs", Script, scripted)
# The same queue with a failure hook (a domain row that mirrors the job's outcome).
HOOKED = QueueSpec("test-jobs", Script, scripted, on_failure=record_failures)
OTHER = QueueSpec("other-queue", Script, scripted)
