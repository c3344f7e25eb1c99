"""SQL of the job queue (docs/jobs.md): enqueue, claim, heartbeat, completion, failure, reaping,
pruning, and the depth figures behind the metrics.

Every statement that acts for a worker names the worker (``lease_owner``) and requires
``status = 'running'`` in its ``WHERE`` clause, so a worker that lost its lease updates no row
and learns it from the row count. Statements that might meet a row locked by another
transaction take it with ``FOR UPDATE SKIP LOCKED`` and never wait.

Two columns hold a failure: ``error_message`` (the exception's type and message, what an API
may show; null once the job completed) and ``last_error`` (the same with the innermost traceback
frames, for operators). Statuses are the text values of ``marketplace.jobs.JobStatus``.

A domain row that belongs to a job is inserted in the statement that inserts the job
(:func:`with_new_job`, :func:`with_new_jobs`: ``WITH job AS (INSERT INTO jobs ...) <the domain's
INSERT ... FROM job>``), so neither exists without the other and no second statement links them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import asyncpg

from marketplace.aio import cancel_and_wait
from marketplace.storage import rows as typed_rows
from marketplace.storage.pool import Conn, Connection, connect

log = logging.getLogger(__name__)


# Enqueues notify this channel with the queue name as payload. NOTIFY is transactional: the
# notification is delivered when (and only if) the enqueuing transaction commits.
NOTIFY_CHANNEL = "marketplace_jobs"

_JOB_COLUMNS = """
    j.id, j.queue, j.payload, j.status, j.attempt_count, j.max_attempts, j.next_attempt_at,
    j.lease_owner, j.lease_expires_at, j.error_message, j.last_error, j.idempotency_key,
    j.created_at, j.started_at, j.finished_at
"""

# Each inserted job due at once notifies its queue from the RETURNING list (NOTIFY is
# transactional: delivered at commit, never for a rolled-back transaction; repeated
# notifications of one queue in a transaction are delivered once).
_NOTIFY_DUE = f"""CASE WHEN next_attempt_at <= now()
         THEN (SELECT true FROM (SELECT pg_notify('{NOTIFY_CHANNEL}', queue)) AS n) END"""

# One job: $1 queue, $2 payload (JSON text: the same with or without the pool's jsonb codec),
# $3 max attempts, $4 delay (seconds), $5 idempotency key. ON CONFLICT DO NOTHING returns no
# row for a duplicate key.
_INSERT_JOB = f"""
INSERT INTO jobs (queue, payload, max_attempts, next_attempt_at, idempotency_key)
VALUES ($1, $2::text::jsonb, $3, now() + make_interval(secs => $4), $5)
ON CONFLICT (queue, idempotency_key) DO NOTHING
RETURNING id, idempotency_key, {_NOTIFY_DUE} AS notified
"""
ENQUEUE = f"WITH job AS ({_INSERT_JOB}) SELECT id FROM job"
NOTIFY = "SELECT pg_notify($1, $2)"
# Many jobs of one queue, due at once: $1 queue, $2 payloads (JSON text), $3 max attempts, $4
# idempotency keys (one per payload). A key already taken returns no row.
_INSERT_JOBS = f"""
INSERT INTO jobs (queue, payload, max_attempts, next_attempt_at, idempotency_key)
SELECT $1, t.payload::jsonb, $3, now(), t.key
FROM unnest($2::text[], $4::text[]) AS t(payload, key)
ON CONFLICT (queue, idempotency_key) DO NOTHING
RETURNING id, idempotency_key, {_NOTIFY_DUE} AS notified
"""
ENQUEUE_MANY = f"WITH job AS ({_INSERT_JOBS}) SELECT id, idempotency_key FROM job"


def with_new_job(statement: str) -> str:
    """``statement`` (a domain's INSERT that reads ``job``: ``... SELECT ..., job.id FROM job``)
    preceded by the insertion of one job as ``job (id, idempotency_key)``; run it with
    :meth:`NewJob.params` as ``$1``-``$5`` and the statement's own parameters from ``$6``. When
    the idempotency key is taken, ``job`` is empty and so is what ``statement`` inserts."""
    return f"WITH job AS ({_INSERT_JOB})\n{statement}"


# A job id drawn before its job is inserted, so a domain row inserted first (and only if it was
# inserted: ON CONFLICT) can name it; see insert_jobs_from.
NEXT_JOB_ID = "nextval('jobs_id_seq')"


def insert_jobs_from(source: str) -> str:
    """The body of a CTE that inserts, due at once, one job of queue ``$1`` with ``$2`` max
    attempts per row of ``source`` (a CTE with columns ``id`` drawn with :data:`NEXT_JOB_ID`,
    ``payload`` jsonb, ``key`` text). For a domain statement that inserts its rows first and
    their jobs after them, in the same statement: ``d AS (INSERT ... job_id = NEXT_JOB_ID ...
    ON CONFLICT DO NOTHING RETURNING ...), src AS (SELECT ... FROM d), job AS
    (insert_jobs_from('src'))``. No ON CONFLICT here: a taken key fails the statement rather
    than leave a domain row naming a job that does not exist."""
    return f"""
INSERT INTO jobs (id, queue, payload, max_attempts, next_attempt_at, idempotency_key)
SELECT s.id, $1, s.payload, $2, now(), s.key FROM {source} AS s
RETURNING id, {_NOTIFY_DUE} AS notified
"""


@dataclass(frozen=True)
class NewJob:
    """A job to insert, its payload already encoded as JSON text (``jobs.payload_json``)."""

    queue: str
    payload_json: str
    max_attempts: int
    delay_seconds: float = 0.0
    idempotency_key: str | None = None

    def params(self) -> tuple[object, ...]:
        return (
            self.queue,
            self.payload_json,
            self.max_attempts,
            float(self.delay_seconds),
            self.idempotency_key,
        )


@dataclass(frozen=True)
class NewJobs:
    """Jobs of one queue to insert, due at once: each payload (JSON text) with its key."""

    queue: str
    payloads_json: Sequence[str]
    keys: Sequence[str]
    max_attempts: int

    def params(self) -> tuple[object, ...]:
        return (self.queue, list(self.payloads_json), self.max_attempts, list(self.keys))


SELECT_BY_KEYS = """
SELECT id, idempotency_key FROM jobs WHERE queue = $1 AND idempotency_key = any($2::text[])
"""
SELECT_BY_KEY = "SELECT id FROM jobs WHERE queue = $1 AND idempotency_key = $2"

# The claim: one statement. Due queued jobs and running jobs whose lease expired (their worker
# died or hung) are taken in due order; rows another transaction holds are skipped, never
# waited for. A takeover counts as a new attempt, so a job that kills every worker that runs it
# still reaches max_attempts (and is then failed by REAP_EXPIRED instead of claimed again).
CLAIM = f"""
WITH due AS (
    SELECT id FROM jobs
    WHERE queue = $1
      AND status IN ('queued', 'running')
      AND ((status = 'queued' AND next_attempt_at <= now())
           OR (status = 'running' AND lease_expires_at < now()
               AND attempt_count < max_attempts))
    ORDER BY next_attempt_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j
SET status = 'running', lease_owner = $3,
    lease_expires_at = now() + make_interval(secs => $4),
    attempt_count = j.attempt_count + 1, started_at = now()
FROM due
WHERE j.id = due.id
RETURNING {_JOB_COLUMNS}, extract(epoch FROM now() - j.next_attempt_at)::float8 AS waited_seconds
"""

# A lease is (owner, attempt): the attempt number keeps an attempt that outlived its lease (a
# stalled event loop) from acting for a later attempt of the same worker.
#
# Renews the leases this worker still holds. A row locked by someone else is skipped (and so
# reported as lost): only a takeover of an expired lease or our own completion locks it.
HEARTBEAT = """
UPDATE jobs SET lease_expires_at = now() + make_interval(secs => $3)
WHERE id IN (
    SELECT j.id FROM jobs j
    JOIN unnest($1::bigint[], $4::integer[]) AS held (id, attempt)
      ON j.id = held.id AND j.attempt_count = held.attempt
    WHERE j.lease_owner = $2 AND j.status = 'running'
    FOR UPDATE OF j SKIP LOCKED
)
RETURNING id
"""

# Guarded by the lease: run inside the transaction that carries the handler's effects, it also
# locks the row until that transaction ends, so nobody can take the job over meanwhile.
_COMPLETE = """
    UPDATE jobs
    SET status = 'completed', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL,
        error_message = NULL
    WHERE id = $1 AND lease_owner = $2 AND attempt_count = $3 AND status = 'running'
    RETURNING extract(epoch FROM now() - created_at)::float8 AS total_seconds"""
COMPLETE = _COMPLETE

# COMPLETE and an effect in one statement (one round trip, atomic without BEGIN/COMMIT). The
# effect is a data-modifying statement whose parameters start at $4. When the completion finds
# no lease, jobs_lease_held (migration 0019) raises LEASE_LOST_SQLSTATE, which aborts the whole
# statement: the effect is undone with it, whatever it is, so it needs no guard of its own.
COMPLETE_WITH = f"""
WITH completed AS ({_COMPLETE}
), effect AS (
{{effect}}
)
SELECT jobs_lease_held((SELECT total_seconds FROM completed)) AS total_seconds,
       (SELECT count(*) FROM effect) AS effect_rows
"""
LEASE_LOST_SQLSTATE = "MJ001"

# $4 error_message (API-safe), $5 last_error (with frames).
RETRY = """
UPDATE jobs
SET status = 'queued', next_attempt_at = now() + make_interval(secs => $6),
    error_message = $4, last_error = $5, lease_owner = NULL, lease_expires_at = NULL
WHERE id = $1 AND lease_owner = $2 AND attempt_count = $3 AND status = 'running'
RETURNING next_attempt_at
"""

FAIL = """
UPDATE jobs
SET status = 'failed', finished_at = now(), error_message = $4, last_error = $5,
    lease_owner = NULL, lease_expires_at = NULL
WHERE id = $1 AND lease_owner = $2 AND attempt_count = $3 AND status = 'running'
RETURNING extract(epoch FROM now() - created_at)::float8 AS total_seconds
"""

# A stopping worker hands an attempt back: due again at once, and the attempt does not count.
RELEASE = """
UPDATE jobs
SET status = 'queued', next_attempt_at = now(), attempt_count = attempt_count - 1,
    lease_owner = NULL, lease_expires_at = NULL
WHERE id = $1 AND lease_owner = $2 AND attempt_count = $3 AND status = 'running'
RETURNING queue
"""

# A job whose last attempt's worker vanished: no attempt is left to claim, so it fails here.
REAPED_MESSAGE = "lease expired during the last attempt (its worker died or hung)"
REAP_EXPIRED = f"""
UPDATE jobs
SET status = 'failed', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL,
    error_message = '{REAPED_MESSAGE}'
        || coalesce(E'\\nprevious attempt: ' || error_message, ''),
    last_error = '{REAPED_MESSAGE}' || coalesce(E'\\nprevious attempt: ' || last_error, '')
WHERE id IN (
    SELECT id FROM jobs
    WHERE queue = $1 AND status = 'running' AND lease_expires_at < now()
      AND attempt_count >= max_attempts
    LIMIT 100
    FOR UPDATE SKIP LOCKED
)
RETURNING id, attempt_count, error_message
"""

# One queue's completed jobs past the retention (jobs_completed index).
PRUNE_COMPLETED = """
DELETE FROM jobs
WHERE id IN (
    SELECT id FROM jobs
    WHERE queue = $3 AND status = 'completed' AND finished_at < now() - make_interval(secs => $1)
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
"""

SELECT_JOB = f"SELECT {_JOB_COLUMNS} FROM jobs j WHERE j.id = $1"

# Unfinished jobs through the claim index, failed ones through their own; completed jobs are
# counted by the workers' outcome counters instead of scanning the bulk of the table.
DEPTH = """
SELECT queue, status, count(*)::bigint AS jobs,
       count(*) FILTER (WHERE status = 'queued' AND next_attempt_at <= now())::bigint AS due,
       coalesce(extract(epoch FROM now() - min(next_attempt_at)
                FILTER (WHERE status = 'queued' AND next_attempt_at <= now())), 0)::float8
           AS oldest_due_seconds
FROM jobs WHERE status IN ('queued', 'running')
GROUP BY queue, status
UNION ALL
SELECT queue, 'failed', count(*)::bigint, 0, 0
FROM jobs WHERE status = 'failed'
GROUP BY queue
"""


async def enqueue(conn: Conn, job: NewJob) -> tuple[int, bool]:
    """Insert a job (notifying its queue when due); returns ``(job id, created)``. ``created``
    is false when the queue already holds a job with this idempotency key (its id is
    returned)."""
    job_id = await conn.fetchval(ENQUEUE, *job.params())
    if job_id is None:
        existing = await conn.fetchval(SELECT_BY_KEY, job.queue, job.idempotency_key)
        if existing is None:
            # The conflicting job was deleted (pruned) between the two statements.
            raise LookupError(f"job with idempotency key {job.idempotency_key!r} vanished")
        return int(existing), False
    return int(job_id), True


async def enqueue_many(conn: Conn, jobs: NewJobs) -> dict[str, int]:
    """Insert due jobs in one statement (which notifies their queue); returns idempotency key
    -> job id, for keys already taken too."""
    rows = await conn.fetch(ENQUEUE_MANY, *jobs.params())
    ids = {str(row["idempotency_key"]): int(row["id"]) for row in rows}
    missing = [key for key in jobs.keys if key not in ids]
    if missing:
        for row in await conn.fetch(SELECT_BY_KEYS, jobs.queue, missing):
            ids[str(row["idempotency_key"])] = int(row["id"])
    return ids


@dataclass(frozen=True)
class ClaimedJob:
    """A job as a claim returns it: its payload is the stored JSON, not yet validated."""

    id: int
    queue: str
    payload: object
    attempt: int
    max_attempts: int
    created_at: datetime
    due_at: datetime
    idempotency_key: str | None
    # Due -> claimed.
    waited_seconds: float


async def claim(
    conn: Conn, queue: str, owner: str, limit: int, lease_seconds: float
) -> list[ClaimedJob]:
    rows = await conn.fetch(CLAIM, queue, limit, owner, float(lease_seconds))
    return [
        ClaimedJob(
            id=row["id"],
            queue=row["queue"],
            payload=row["payload"],
            attempt=row["attempt_count"],
            max_attempts=row["max_attempts"],
            created_at=row["created_at"],
            due_at=row["next_attempt_at"],
            idempotency_key=row["idempotency_key"],
            waited_seconds=float(row["waited_seconds"]),
        )
        for row in rows
    ]


async def heartbeat(
    conn: Conn, leases: Sequence[tuple[int, int]], owner: str, lease_seconds: float
) -> set[int]:
    """Renew leases given as (job id, attempt); returns the ids whose lease this owner still
    holds."""
    if not leases:
        return set()
    ids = [job_id for job_id, _ in leases]
    attempts = [attempt for _, attempt in leases]
    rows = await conn.fetch(HEARTBEAT, ids, owner, float(lease_seconds), attempts)
    return {row["id"] for row in rows}


async def complete(conn: Conn, job_id: int, owner: str, attempt: int) -> float | None:
    """Mark completed if ``owner`` holds the lease; the job's age in seconds, None if not."""
    total = await conn.fetchval(COMPLETE, job_id, owner, attempt)
    return None if total is None else float(total)


async def complete_with(
    conn: Conn, job_id: int, owner: str, attempt: int, effect: str, *args: Any
) -> int | None:
    """:func:`complete` and ``effect`` (see ``COMPLETE_WITH``) in one statement: the number of
    rows the effect returned, or None (and nothing changed) if ``owner`` lost the lease."""
    try:
        rows = await conn.fetchval(
            COMPLETE_WITH.format(effect=effect), job_id, owner, attempt, *args, column=1
        )
    except asyncpg.PostgresError as exc:
        if exc.sqlstate == LEASE_LOST_SQLSTATE:
            return None
        raise
    return int(rows)


async def retry(
    conn: Conn,
    job_id: int,
    owner: str,
    attempt: int,
    error_message: str,
    last_error: str,
    delay_seconds: float,
) -> datetime | None:
    """Back to queued after ``delay_seconds``; the time it is due, None if the lease is lost."""
    due: datetime | None = await conn.fetchval(
        RETRY, job_id, owner, attempt, error_message, last_error, float(delay_seconds)
    )
    return due


async def fail(
    conn: Conn, job_id: int, owner: str, attempt: int, error_message: str, last_error: str
) -> float | None:
    total = await conn.fetchval(FAIL, job_id, owner, attempt, error_message, last_error)
    return None if total is None else float(total)


async def release(conn: Conn, job_id: int, owner: str, attempt: int) -> bool:
    queue = await conn.fetchval(RELEASE, job_id, owner, attempt)
    if queue is None:
        return False
    await conn.execute(NOTIFY, NOTIFY_CHANNEL, queue)
    return True


@dataclass(frozen=True)
class Reaped:
    """A job the reaper failed: its id, its last attempt and its (API-safe) error."""

    id: int
    attempt: int
    error_message: str


async def reap_expired(conn: Conn, queue: str) -> list[Reaped]:
    rows = await conn.fetch(REAP_EXPIRED, queue)
    return [Reaped(row["id"], row["attempt_count"], row["error_message"]) for row in rows]


async def prune_completed(
    conn: Conn, queue: str, older_than_seconds: float, limit: int = 1000
) -> int:
    status = await conn.execute(PRUNE_COMPLETED, float(older_than_seconds), limit, queue)
    return int(status.split()[-1])


async def get_job(conn: Conn, job_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow(SELECT_JOB, job_id)


class DepthRow(NamedTuple):
    """A row of :data:`DEPTH`: a queue's jobs in a status, and (queued only) how many are due
    and the oldest due one's age."""

    queue: str
    status: str
    jobs: int
    due: int
    oldest_due_seconds: float


async def depth(conn: Conn) -> list[DepthRow]:
    return typed_rows.many(DepthRow, await conn.fetch(DEPTH))


class JobNotifications:
    """LISTEN on a dedicated connection (never a pooled one: the pool's reset assumes no session
    state, and a pooled connection's listener would die with whoever borrowed it).

    ``on_queue(name)`` is called for every notification; ``on_connect()`` after every
    (re)connection, because notifications sent while disconnected are lost and the worker must
    look for work it missed. Reconnects with backoff forever until closed.
    """

    def __init__(
        self,
        dsn: str,
        on_queue: Callable[[str], None],
        on_connect: Callable[[], None],
        *,
        max_backoff_seconds: float = 10.0,
    ) -> None:
        self._dsn = dsn
        self._on_queue = on_queue
        self._on_connect = on_connect
        self._max_backoff = max_backoff_seconds
        self._task: asyncio.Task[None] | None = None
        self.connected = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        self._on_queue(str(payload))

    async def _run(self) -> None:
        backoff = 0.5
        while True:
            conn: Connection | None = None
            try:
                conn = await connect(self._dsn)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _conn, event=lost: event.set())
                await conn.add_listener(NOTIFY_CHANNEL, self._notified)
                self.connected = True
                backoff = 0.5
                self._on_connect()
                # The termination listener fires only on a clean close; a silently dropped
                # socket shows up as a failed ping.
                while not lost.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), 15)
                    if not lost.is_set():
                        await conn.execute("SELECT 1")
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("job notification listener lost; reconnecting", exc_info=True)
            finally:
                self.connected = False
                if conn is not None and not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await conn.close(timeout=2)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff)
