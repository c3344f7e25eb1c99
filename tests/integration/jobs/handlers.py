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

from marketplace.jobs import JobContext, PermanentJobError

CREATE_TABLES = """
CREATE TABLE IF NOT EXISTS job_test_effects (
    job_id bigint PRIMARY KEY,
    attempt integer NOT NULL,
    owner text NOT NULL
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
DROP_TABLES = "DROP TABLE IF EXISTS job_test_effects, job_test_executions"


def _on_this_attempt(value: object, attempt: int) -> bool:
    """``true`` means every attempt; a list names the attempts."""
    return value is True or (isinstance(value, list) and attempt in value)


async def scripted(ctx: JobContext) -> None:
    payload, attempt = ctx.payload, ctx.job.attempt
    await ctx.pool.execute(
        "INSERT INTO job_test_executions (job_id, attempt, owner, pid) VALUES ($1, $2, $3, $4)",
        ctx.job.id,
        attempt,
        ctx.lease_owner,
        os.getpid(),
    )
    if _on_this_attempt(payload.get("hang"), attempt):
        await asyncio.sleep(3600)
    if _on_this_attempt(payload.get("sleep_on"), attempt):
        await asyncio.sleep(float(payload["sleep"]))
    if _on_this_attempt(payload.get("raise_on"), attempt):
        if payload.get("permanent"):
            raise PermanentJobError(f"permanent: {payload['message']}")
        raise RuntimeError(f"{payload['message']} (attempt {attempt})")
    async with ctx.completion() as conn:
        await conn.execute(
            "INSERT INTO job_test_effects (job_id, attempt, owner) VALUES ($1, $2, $3)",
            ctx.job.id,
            attempt,
            ctx.lease_owner,
        )
        if _on_this_attempt(payload.get("raise_in_transaction"), attempt):
            raise RuntimeError(f"failed after writing the effect (attempt {attempt})")


async def plain(ctx: JobContext) -> None:
    """Returns without a completion block: the worker completes the job itself."""
    await ctx.pool.execute(
        "INSERT INTO job_test_executions (job_id, attempt, owner, pid) VALUES ($1, $2, $3, $4)",
        ctx.job.id,
        ctx.job.attempt,
        ctx.lease_owner,
        os.getpid(),
    )
