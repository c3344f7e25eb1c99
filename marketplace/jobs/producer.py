"""Enqueueing jobs, inside the producer's own transaction.

``enqueue`` takes the caller's connection, so a producer writes the job in the same
transaction as the change that calls for it: the job exists if and only if the change
committed. Workers are woken by a Postgres notification that is delivered at that commit (and
never for a rolled-back transaction); polling covers a missed one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from marketplace.jobs.model import DEFAULT_MAX_ATTEMPTS, check_queue_name
from marketplace.storage.pool import Conn
from marketplace.storage.repositories import jobs as repo


@dataclass(frozen=True)
class Enqueued:
    job_id: int
    # False when the queue already held a job with the same idempotency key (whose id this is).
    created: bool


async def enqueue(
    conn: Conn,
    queue: str,
    payload: dict[str, Any],
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    delay_seconds: float = 0.0,
    idempotency_key: str | None = None,
) -> Enqueued:
    """Add a job to ``queue``; due at once, or after ``delay_seconds``.

    With an ``idempotency_key``, a second enqueue on the same queue with the same key returns
    the first job instead of adding one (for as long as the first job's row exists: completed
    jobs are pruned after ``jobs_completed_retention_hours``).
    """
    check_queue_name(queue)
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    if delay_seconds < 0:
        raise ValueError("delay_seconds must not be negative")
    if not isinstance(payload, dict):
        raise TypeError("a job payload is a JSON object")
    job_id, created = await repo.enqueue(
        conn,
        queue,
        payload,
        max_attempts=max_attempts,
        delay_seconds=delay_seconds,
        idempotency_key=idempotency_key,
    )
    return Enqueued(job_id, created)


async def enqueue_many(
    conn: Conn,
    queue: str,
    jobs: Sequence[tuple[str, dict[str, Any]]],
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> dict[str, int]:
    """Add several jobs to ``queue``, each due at once, given as ``(idempotency key, payload)``,
    in one statement (and one notification), inside the caller's transaction like
    :func:`enqueue`. Returns idempotency key -> job id; a key the queue already held keeps its
    first job, whose id is returned."""
    check_queue_name(queue)
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    if not jobs:
        return {}
    keys = [key for key, _ in jobs]
    if len(set(keys)) != len(keys):
        raise ValueError("idempotency keys must be distinct")
    for _, payload in jobs:
        if not isinstance(payload, dict):
            raise TypeError("a job payload is a JSON object")
    payloads = [json.dumps(payload, separators=(",", ":")) for _, payload in jobs]
    return await repo.enqueue_many(conn, queue, payloads, keys, max_attempts=max_attempts)
