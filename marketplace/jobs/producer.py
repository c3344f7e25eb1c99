"""Enqueueing jobs, inside the producer's own transaction.

``enqueue`` takes the caller's connection, so a producer writes the job in the same
transaction as the change that calls for it: the job exists if and only if the change
committed. A job that belongs to a domain row (a verifier request, a notification delivery) is
inserted by the domain's repository in the statement that inserts the row, from :func:`new_job`
or :func:`new_jobs` (``repositories.jobs.with_new_job``). Workers are woken by a Postgres
notification that is delivered at that commit (and never for a rolled-back transaction);
polling covers a missed one.

Payloads are the queue's model (``QueueSpec[P]``), checked here and validated again when a
worker claims the job.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from marketplace.jobs.model import DEFAULT_MAX_ATTEMPTS, P
from marketplace.jobs.registry import QueueSpec
from marketplace.storage.pool import Conn
from marketplace.storage.repositories import jobs as repo


@dataclass(frozen=True)
class Enqueued:
    job_id: int
    # False when the queue already held a job with the same idempotency key (whose id this is).
    created: bool


def new_job(
    spec: QueueSpec[P],
    payload: P,
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    delay_seconds: float = 0.0,
    idempotency_key: str | None = None,
) -> repo.NewJob:
    """A job of ``spec``'s queue to insert, its payload checked and encoded."""
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    if delay_seconds < 0:
        raise ValueError("delay_seconds must not be negative")
    return repo.NewJob(
        spec.name,
        payload_json(spec, payload),
        max_attempts=max_attempts,
        delay_seconds=delay_seconds,
        idempotency_key=idempotency_key,
    )


def new_jobs(
    spec: QueueSpec[P],
    jobs: Sequence[tuple[str, P]],
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> repo.NewJobs:
    """Jobs of ``spec``'s queue to insert, due at once, given as ``(idempotency key,
    payload)``, their payloads checked and encoded."""
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    keys = [key for key, _ in jobs]
    if len(set(keys)) != len(keys):
        raise ValueError("idempotency keys must be distinct")
    payloads = [payload_json(spec, payload) for _, payload in jobs]
    return repo.NewJobs(spec.name, payloads, keys, max_attempts)


def payload_json(spec: QueueSpec[P], payload: P) -> str:
    """``payload`` checked and encoded as JSON text, for a domain statement that inserts jobs
    with its rows (``repositories.jobs.insert_jobs_from``)."""
    return json.dumps(spec.encode(payload), separators=(",", ":"))


async def enqueue(
    conn: Conn,
    spec: QueueSpec[P],
    payload: P,
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    delay_seconds: float = 0.0,
    idempotency_key: str | None = None,
) -> Enqueued:
    """Add a job to ``spec``'s queue; due at once, or after ``delay_seconds``.

    With an ``idempotency_key``, a second enqueue on the same queue with the same key returns
    the first job instead of adding one (for as long as the first job's row exists: completed
    jobs are pruned after ``jobs_completed_retention_hours``).
    """
    job = new_job(
        spec,
        payload,
        max_attempts=max_attempts,
        delay_seconds=delay_seconds,
        idempotency_key=idempotency_key,
    )
    job_id, created = await repo.enqueue(conn, job)
    return Enqueued(job_id, created)


async def enqueue_many(
    conn: Conn,
    spec: QueueSpec[P],
    jobs: Sequence[tuple[str, P]],
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> dict[str, int]:
    """Add several jobs to ``spec``'s queue, each due at once, given as ``(idempotency key,
    payload)``, in one statement (and one notification), inside the caller's transaction like
    :func:`enqueue`. Returns idempotency key -> job id; a key the queue already held keeps its
    first job, whose id is returned."""
    if not jobs:
        return {}
    return await repo.enqueue_many(conn, new_jobs(spec, jobs, max_attempts=max_attempts))
