"""SQL of the job queue (docs/jobs.md): enqueue, claim, heartbeat, completion, failure, reaping,
pruning, and the depth figures behind the metrics.

Every statement that acts for a worker names the worker (``lease_owner``) and requires
``status = 'running'`` in its ``WHERE`` clause, so a worker that lost its lease updates no row
and learns it from the row count. Statements that might meet a row locked by another
transaction take it with ``FOR UPDATE SKIP LOCKED`` and never wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg

from marketplace.aio import cancel_and_wait
from marketplace.storage.pool import Conn, Connection, connect

log = logging.getLogger(__name__)


# Enqueues notify this channel with the queue name as payload. NOTIFY is transactional: the
# notification is delivered when (and only if) the enqueuing transaction commits.
NOTIFY_CHANNEL = "marketplace_jobs"

_JOB_COLUMNS = """
    j.id, j.queue, j.payload, j.status, j.attempt_count, j.max_attempts, j.next_attempt_at,
    j.lease_owner, j.lease_expires_at, j.last_error, j.idempotency_key, j.created_at,
    j.started_at, j.finished_at
"""

# ON CONFLICT DO NOTHING returns no row for a duplicate key; the caller then reads the first job.
ENQUEUE = """
INSERT INTO jobs (queue, payload, max_attempts, next_attempt_at, idempotency_key)
VALUES ($1, $2, $3, now() + make_interval(secs => $4), $5)
ON CONFLICT (queue, idempotency_key) DO NOTHING
RETURNING id, next_attempt_at <= now() AS due
"""
NOTIFY = "SELECT pg_notify($1, $2)"
# Many jobs of one queue, due at once, each with its idempotency key, in one statement (the
# payloads as JSON text). A key already taken returns no row; the caller reads those back.
ENQUEUE_MANY = """
INSERT INTO jobs (queue, payload, max_attempts, next_attempt_at, idempotency_key)
SELECT $1, t.payload::jsonb, $3, now(), t.key
FROM unnest($2::text[], $4::text[]) AS t(payload, key)
ON CONFLICT (queue, idempotency_key) DO NOTHING
RETURNING id, idempotency_key
"""
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
COMPLETE = """
UPDATE jobs
SET status = 'completed', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL
WHERE id = $1 AND lease_owner = $2 AND attempt_count = $3 AND status = 'running'
RETURNING extract(epoch FROM now() - created_at)::float8 AS total_seconds
"""

# COMPLETE and an effect in one statement (one round trip, atomic without BEGIN/COMMIT). The
# effect is a data-modifying statement whose parameters start at $4; it must be guarded by
# `EXISTS (SELECT 1 FROM completed)`, so it changes nothing when the lease is lost.
COMPLETE_WITH = """
WITH completed AS (
    UPDATE jobs
    SET status = 'completed', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL
    WHERE id = $1 AND lease_owner = $2 AND attempt_count = $3 AND status = 'running'
    RETURNING extract(epoch FROM now() - created_at)::float8 AS total_seconds
), effect AS (
{effect}
)
SELECT (SELECT total_seconds FROM completed) AS total_seconds,
       (SELECT count(*) FROM effect) AS effect_rows
"""

RETRY = """
UPDATE jobs
SET status = 'queued', next_attempt_at = now() + make_interval(secs => $5), last_error = $4,
    lease_owner = NULL, lease_expires_at = NULL
WHERE id = $1 AND lease_owner = $2 AND attempt_count = $3 AND status = 'running'
RETURNING next_attempt_at
"""

FAIL = """
UPDATE jobs
SET status = 'failed', finished_at = now(), last_error = $4,
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
REAP_EXPIRED = """
UPDATE jobs
SET status = 'failed', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL,
    last_error = 'lease expired during the last attempt (its worker died or hung)'
        || coalesce(E'\\nprevious attempt: ' || last_error, '')
WHERE id IN (
    SELECT id FROM jobs
    WHERE queue = $1 AND status = 'running' AND lease_expires_at < now()
      AND attempt_count >= max_attempts
    LIMIT 100
    FOR UPDATE SKIP LOCKED
)
RETURNING id, extract(epoch FROM now() - created_at)::float8 AS total_seconds
"""

PRUNE_COMPLETED = """
DELETE FROM jobs
WHERE id IN (
    SELECT id FROM jobs
    WHERE status = 'completed' AND finished_at < now() - make_interval(secs => $1)
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


async def enqueue(
    conn: Conn,
    queue: str,
    payload: dict[str, Any],
    *,
    max_attempts: int,
    delay_seconds: float = 0.0,
    idempotency_key: str | None = None,
) -> tuple[int, bool]:
    """Insert a job; returns ``(job id, created)``. ``created`` is false when the queue already
    holds a job with this idempotency key (its id is returned)."""
    row = await conn.fetchrow(
        ENQUEUE, queue, payload, max_attempts, float(delay_seconds), idempotency_key
    )
    if row is None:
        existing = await conn.fetchval(SELECT_BY_KEY, queue, idempotency_key)
        if existing is None:
            # The conflicting job was deleted (pruned) between the two statements.
            raise LookupError(f"job with idempotency key {idempotency_key!r} vanished")
        return int(existing), False
    if row["due"]:
        await conn.execute(NOTIFY, NOTIFY_CHANNEL, queue)
    return int(row["id"]), True


async def enqueue_many(
    conn: Conn, queue: str, payloads_json: Sequence[str], keys: Sequence[str], *, max_attempts: int
) -> dict[str, int]:
    """Insert due jobs (payload JSON text, idempotency key) in one statement and notify once;
    returns idempotency key -> job id, for keys already taken too."""
    rows = await conn.fetch(ENQUEUE_MANY, queue, list(payloads_json), max_attempts, list(keys))
    ids = {str(row["idempotency_key"]): int(row["id"]) for row in rows}
    if rows:
        await conn.execute(NOTIFY, NOTIFY_CHANNEL, queue)
    missing = [key for key in keys if key not in ids]
    if missing:
        for row in await conn.fetch(SELECT_BY_KEYS, queue, missing):
            ids[str(row["idempotency_key"])] = int(row["id"])
    return ids


async def claim(
    conn: Conn, queue: str, owner: str, limit: int, lease_seconds: float
) -> list[asyncpg.Record]:
    return await conn.fetch(CLAIM, queue, limit, owner, float(lease_seconds))


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
) -> tuple[float | None, int]:
    """:func:`complete` and ``effect`` (see ``COMPLETE_WITH``) in one statement: (the job's age
    in seconds, None if ``owner`` lost the lease; rows the effect returned)."""
    row = await conn.fetchrow(COMPLETE_WITH.format(effect=effect), job_id, owner, attempt, *args)
    assert row is not None
    total = row["total_seconds"]
    return (None if total is None else float(total)), int(row["effect_rows"])


async def retry(
    conn: Conn, job_id: int, owner: str, attempt: int, error: str, delay_seconds: float
) -> asyncpg.Record | None:
    return await conn.fetchrow(RETRY, job_id, owner, attempt, error, float(delay_seconds))


async def fail(conn: Conn, job_id: int, owner: str, attempt: int, error: str) -> float | None:
    total = await conn.fetchval(FAIL, job_id, owner, attempt, error)
    return None if total is None else float(total)


async def release(conn: Conn, job_id: int, owner: str, attempt: int) -> bool:
    queue = await conn.fetchval(RELEASE, job_id, owner, attempt)
    if queue is None:
        return False
    await conn.execute(NOTIFY, NOTIFY_CHANNEL, queue)
    return True


async def reap_expired(conn: Conn, queue: str) -> list[asyncpg.Record]:
    return await conn.fetch(REAP_EXPIRED, queue)


async def prune_completed(conn: Conn, older_than_seconds: float, limit: int = 1000) -> int:
    status = await conn.execute(PRUNE_COMPLETED, float(older_than_seconds), limit)
    return int(status.split()[-1])


async def get_job(conn: Conn, job_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow(SELECT_JOB, job_id)


async def depth(conn: Conn) -> list[asyncpg.Record]:
    return await conn.fetch(DEPTH)


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
