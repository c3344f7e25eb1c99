"""The job queue against a real PostgreSQL, with workers as plain objects in this process.

Claims, leases, completion guarded by the lease, effects committed with the completion,
backoff, the last attempt, poison jobs, wake-ups. The Ray actors are tested in test_workers.py.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from marketplace.jobs import AttemptPhase, JobContext, JobPayload, LeaseLost, QueueSpec, enqueue
from marketplace.jobs.metrics import CachedSnapshot
from marketplace.jobs.model import Backoff
from marketplace.jobs.worker import JobWorker, WorkerConfig, job_of
from marketplace.storage.pool import Connection
from marketplace.storage.repositories import jobs as repo
from tests.conftest import Servers, make_settings
from tests.integration.jobs.conftest import job_row, running
from tests.integration.jobs.handlers import (
    HOOKED,
    OTHER,
    SCRIPTED,
    Script,
    plain,
    refuse_failures,
    scripted,
)
from tests.support.waiting import eventually

QUEUE = SCRIPTED.name


def config(**overrides: Any) -> WorkerConfig:
    values: dict[str, Any] = {
        "concurrency": 4,
        "lease_seconds": 30.0,
        "poll_interval_seconds": 0.1,
        "timeout_seconds": 30.0,
        "backoff": Backoff(0.01, 0.05),
        "completed_retention_seconds": 3600.0,
    }
    values.update(overrides)
    return WorkerConfig(**values)


def make_worker(
    servers: Servers,
    pool: asyncpg.Pool,
    owner: str = "worker-a",
    handler: Any = scripted,
    spec: QueueSpec[Script] | None = None,
    **overrides: Any,
) -> JobWorker:
    return JobWorker(
        spec or QueueSpec(QUEUE, Script, handler),
        pool,
        make_settings(servers),
        owner=owner,
        config=config(**overrides),
        rng=random.Random(11),
    )


async def effects(pool: asyncpg.Pool) -> dict[int, int]:
    rows = await pool.fetch("SELECT job_id, attempt FROM job_test_effects")
    return {row["job_id"]: row["attempt"] for row in rows}


async def executions(pool: asyncpg.Pool, job_id: int) -> list[int]:
    rows = await pool.fetch(
        "SELECT attempt FROM job_test_executions WHERE job_id = $1 ORDER BY id", job_id
    )
    return [row["attempt"] for row in rows]


async def status_of(pool: asyncpg.Pool, job_id: int) -> str:
    return str(await pool.fetchval("SELECT status FROM jobs WHERE id = $1", job_id))


# --- enqueue ------------------------------------------------------------------------------------


async def test_enqueue_commits_with_the_callers_transaction_and_notifies_only_then(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    heard: list[str] = []
    listener = await asyncpg.connect(servers.database_url)
    await listener.add_listener(repo.NOTIFY_CHANNEL, lambda *args: heard.append(args[3]))
    try:
        async with pool.acquire() as conn:
            with pytest.raises(RuntimeError, match="change failed"):
                await enqueue_then_fail(conn)
            await asyncio.sleep(0.3)
            assert heard == []
            assert await pool.fetchval("SELECT count(*) FROM jobs") == 0

            async with conn.transaction():
                first = await enqueue(conn, SCRIPTED, Script(tag=2))
                await asyncio.sleep(0.3)
                assert heard == [], "notified before the commit"
        await eventually(lambda: _true(heard), within=5, what="notification after commit")
        assert heard == [QUEUE]
        row = await job_row(pool, first.job_id)
        assert (row["status"], row["attempt_count"], row["max_attempts"]) == ("queued", 0, 5)

        heard.clear()
        await enqueue(pool, SCRIPTED, Script(tag=3), delay_seconds=60)
        await asyncio.sleep(0.3)
        assert heard == [], "a job that is not due yet wakes nobody"
    finally:
        await listener.close()


async def enqueue_then_fail(conn: Connection) -> None:
    async with conn.transaction():
        await enqueue(conn, SCRIPTED, Script(tag=1))
        raise RuntimeError("change failed")


async def _true(value: Any) -> bool:
    return bool(value)


async def test_idempotency_key_dedupes_per_queue(pool: asyncpg.Pool) -> None:
    first = await enqueue(pool, SCRIPTED, Script(tag=1), idempotency_key="mail:42")
    again = await enqueue(pool, SCRIPTED, Script(tag=2), idempotency_key="mail:42")
    other_queue = await enqueue(pool, OTHER, Script(tag=3), idempotency_key="mail:42")
    no_key = [await enqueue(pool, SCRIPTED, Script(tag=4)) for _ in range(2)]
    assert first.created and not again.created
    assert again.job_id == first.job_id
    assert other_queue.created and other_queue.job_id != first.job_id
    assert all(e.created for e in no_key) and no_key[0].job_id != no_key[1].job_id
    stored = await pool.fetchval("SELECT payload FROM jobs WHERE id = $1", first.job_id)
    assert stored == Script(tag=1).to_json() and stored["tag"] == 1
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 4


async def test_concurrent_enqueues_with_one_key_create_one_job(pool: asyncpg.Pool) -> None:
    results = await asyncio.gather(
        *[enqueue(pool, SCRIPTED, Script(tag=i), idempotency_key="same") for i in range(8)]
    )
    assert len({r.job_id for r in results}) == 1
    assert sum(r.created for r in results) == 1


class Stranger(JobPayload):
    tag: int = 0


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_attempts": 0}, ValueError),
        ({"delay_seconds": -1}, ValueError),
        # Another queue's model, and one built without validation: refused before any insert.
        ({"payload": Stranger()}, TypeError),
        ({"payload": Script.model_construct(tag="not a number")}, ValueError),  # type: ignore[arg-type]
    ],
)
async def test_enqueue_refuses_bad_arguments(
    pool: asyncpg.Pool, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    args: dict[str, Any] = {"payload": Script(), **kwargs}
    with pytest.raises(error):
        await enqueue(pool, SCRIPTED, args.pop("payload"), **args)
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0


# --- claim and lease ----------------------------------------------------------------------------


async def test_concurrent_claims_never_share_a_job(pool: asyncpg.Pool) -> None:
    ids = {(await enqueue(pool, SCRIPTED, Script(tag=i))).job_id for i in range(60)}
    await enqueue(pool, SCRIPTED, Script(tag=-1), delay_seconds=3600)
    await enqueue(pool, OTHER, Script())
    batches = await asyncio.gather(
        *[repo.claim(pool, QUEUE, f"owner-{i}", 7, 30) for i in range(12)]
    )
    claimed = [row.id for batch in batches for row in batch]
    assert len(claimed) == len(set(claimed)) == 60
    assert set(claimed) == ids
    rows = await pool.fetch(
        "SELECT lease_owner, attempt_count FROM jobs WHERE id = any($1)", claimed
    )
    assert all(r["attempt_count"] == 1 for r in rows)
    owners = {row.id: f"owner-{i}" for i, batch in enumerate(batches) for row in batch}
    for job_id, owner in owners.items():
        assert await pool.fetchval("SELECT lease_owner FROM jobs WHERE id = $1", job_id) == owner
    assert await repo.claim(pool, QUEUE, "late", 10, 30) == []


async def test_claims_in_due_order(pool: asyncpg.Pool) -> None:
    late = await enqueue(pool, SCRIPTED, Script(), delay_seconds=0.2)
    early = await enqueue(pool, SCRIPTED, Script())
    await asyncio.sleep(0.3)
    first = await repo.claim(pool, QUEUE, "a", 1, 30)
    second = await repo.claim(pool, QUEUE, "a", 1, 30)
    assert [r.id for r in first + second] == [early.job_id, late.job_id]


async def test_an_expired_lease_is_taken_over_and_the_old_owner_cannot_complete(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    job_id = (await enqueue(pool, SCRIPTED, Script())).job_id
    [row_a] = await repo.claim(pool, QUEUE, "worker-a", 1, 30)
    assert await repo.claim(pool, QUEUE, "worker-b", 1, 30) == [], "lease still held"
    await pool.execute(
        "UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", job_id
    )
    [row_b] = await repo.claim(pool, QUEUE, "worker-b", 1, 30)
    assert row_b.id == job_id and row_b.attempt == 2

    settings = make_settings(servers)
    stale = JobContext(job_of(SCRIPTED, row_a), pool, settings, "worker-a")
    with pytest.raises(LeaseLost):
        async with stale.completion() as conn:
            await conn.execute(
                "INSERT INTO job_test_effects (job_id, attempt, owner) VALUES ($1, 1, 'a')",
                job_id,
            )
    assert await repo.heartbeat(pool, [(job_id, 1)], "worker-a", 30) == set()
    assert await repo.retry(pool, job_id, "worker-a", 1, "late", "late failure", 0) is None
    assert await repo.fail(pool, job_id, "worker-a", 1, "late", "late failure") is None
    assert not await repo.release(pool, job_id, "worker-a", 1)

    current = JobContext(job_of(SCRIPTED, row_b), pool, settings, "worker-b")
    async with current.completion() as conn:
        await conn.execute(
            "INSERT INTO job_test_effects (job_id, attempt, owner) VALUES ($1, 2, 'b')", job_id
        )
    assert await effects(pool) == {job_id: 2}
    row = await job_row(pool, job_id)
    assert (row["status"], row["lease_owner"], row["last_error"]) == ("completed", None, None)


# No guard of its own: the statement fails as a whole when the completion finds no lease.
EFFECT = """
INSERT INTO job_test_effects (job_id, attempt, owner) VALUES ($1, $3, $4)
RETURNING job_id
"""


async def test_complete_with_applies_its_effect_only_with_the_completion(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    """The one-statement completion: a stale owner changes nothing (LeaseLost), even with an
    effect that has no guard of its own; the lease holder completes the job and applies the
    effect together."""
    job_id = (await enqueue(pool, SCRIPTED, Script())).job_id
    [row_a] = await repo.claim(pool, QUEUE, "worker-a", 1, 30)
    await pool.execute(
        "UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", job_id
    )
    [row_b] = await repo.claim(pool, QUEUE, "worker-b", 1, 30)
    settings = make_settings(servers)
    stale = JobContext(job_of(SCRIPTED, row_a), pool, settings, "worker-a")
    with pytest.raises(LeaseLost):
        await stale.complete_with(EFFECT, "a")
    assert stale.phase is AttemptPhase.RUNNING
    assert await effects(pool) == {}
    await pool.execute("INSERT INTO job_test_effects VALUES (0, 0, 'bystander')")
    with pytest.raises(LeaseLost):
        await stale.complete_with("DELETE FROM job_test_effects RETURNING job_id")
    assert await effects(pool) == {0: 0}, "the unguarded effect was undone with the statement"
    await pool.execute("DELETE FROM job_test_effects")
    assert (await job_row(pool, job_id))["status"] == "running"

    current = JobContext(job_of(SCRIPTED, row_b), pool, settings, "worker-b")
    assert await current.complete_with(EFFECT, "b") == 1
    assert current.phase is AttemptPhase.COMPLETED
    assert await effects(pool) == {job_id: 2}
    row = await job_row(pool, job_id)
    assert (row["status"], row["lease_owner"]) == ("completed", None)
    with pytest.raises(RuntimeError, match="only once"):
        await current.complete_with(EFFECT, "b")


async def test_an_attempt_that_outlived_its_lease_cannot_act_for_the_next_one(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    """The same worker may claim its own job again after the lease ran out (its event loop
    stalled): the lease is (owner, attempt), so the stale attempt still cannot complete."""
    job_id = (await enqueue(pool, SCRIPTED, Script())).job_id
    [first] = await repo.claim(pool, QUEUE, "worker-a", 1, 30)
    await pool.execute(
        "UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", job_id
    )
    [second] = await repo.claim(pool, QUEUE, "worker-a", 1, 30)
    assert second.attempt == 2
    settings = make_settings(servers)
    stale = JobContext(job_of(SCRIPTED, first), pool, settings, "worker-a")
    with pytest.raises(LeaseLost):
        await stale.complete_alone()
    assert await repo.heartbeat(pool, [(job_id, 1)], "worker-a", 30) == set()
    current = JobContext(job_of(SCRIPTED, second), pool, settings, "worker-a")
    await current.complete_alone()
    assert (await job_row(pool, job_id))["status"] == "completed"


async def test_heartbeat_extends_only_the_owners_lease(pool: asyncpg.Pool) -> None:
    ids = [(await enqueue(pool, SCRIPTED, Script())).job_id for _ in range(2)]
    claimed = {r.id for r in await repo.claim(pool, QUEUE, "a", 2, 5)}
    assert claimed == set(ids)
    before = (await job_row(pool, ids[0]))["lease_expires_at"]
    assert await repo.heartbeat(pool, [(i, 1) for i in ids], "a", 600) == set(ids)
    after = (await job_row(pool, ids[0]))["lease_expires_at"]
    assert after - before > timedelta(seconds=500)
    assert await repo.heartbeat(pool, [(i, 1) for i in ids], "intruder", 6000) == set()
    assert await repo.heartbeat(pool, [(i, 2) for i in ids], "a", 6000) == set(), "wrong attempt"
    assert (await job_row(pool, ids[0]))["lease_expires_at"] == after


async def test_effects_and_completion_commit_together(pool: asyncpg.Pool, servers: Servers) -> None:
    job_id = (await enqueue(pool, SCRIPTED, Script(raise_in_transaction=[1]))).job_id
    worker = make_worker(servers, pool)
    async with running(worker):
        await eventually(
            lambda: _equals(status_of(pool, job_id), "completed"), within=10, what="job completed"
        )
    # Attempt 1 wrote its effect, then failed inside the block: nothing of it remains.
    assert await executions(pool, job_id) == [1, 2]
    assert await effects(pool) == {job_id: 2}
    row = await job_row(pool, job_id)
    assert row["attempt_count"] == 2
    assert "failed after writing the effect (attempt 1)" in row["last_error"]
    assert row["error_message"] is None, "a completed job has no error to show"


async def _equals(value: Any, expected: Any) -> bool:
    return bool((await value) == expected)


async def test_a_handler_without_a_completion_block_is_completed_by_the_worker(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    ids = [(await enqueue(pool, SCRIPTED, Script())).job_id for _ in range(5)]
    worker = make_worker(servers, pool, handler=plain)
    async with running(worker):
        await eventually(
            lambda: _equals(
                pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'completed'"), 5
            ),
            within=10,
            what="five jobs completed",
        )
    for job_id in ids:
        row = await job_row(pool, job_id)
        assert row["finished_at"] is not None and row["lease_owner"] is None
        assert await executions(pool, job_id) == [1]
    assert worker.counts["completed"] == 5


# --- failures -----------------------------------------------------------------------------------


async def test_retry_is_scheduled_within_the_full_jitter_window(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    """After attempt n fails, next_attempt_at lies in [failure, failure + min(cap, base*2^(n-1))]
    and the delays of jobs that failed together are spread over that window."""
    base, cap = 10.0, 25.0
    ids = [
        (await enqueue(pool, SCRIPTED, Script(raise_on=True, message="down"))).job_id
        for _ in range(30)
    ]
    worker = make_worker(servers, pool, concurrency=30, backoff=Backoff(base, cap))
    for attempt, ceiling in ((1, 10.0), (2, 20.0), (3, 25.0)):
        before = await pool.fetchval("SELECT clock_timestamp()")
        claimed = await worker.poll_once()
        assert {job.id for job in claimed} == set(ids)
        assert all(job.attempt == attempt for job in claimed)
        await eventually(lambda: _true(not worker.active_jobs), within=10, what="attempts finished")
        after = await pool.fetchval("SELECT clock_timestamp()")
        delays = []
        for job_id in ids:
            row = await job_row(pool, job_id)
            assert row["status"] == "queued" and row["attempt_count"] == attempt
            assert f"down (attempt {attempt})" in row["last_error"]
            assert before <= row["next_attempt_at"] <= after + timedelta(seconds=ceiling)
            delays.append((row["next_attempt_at"] - after).total_seconds())
        # Spread over the window, not bunched at one end.
        assert max(delays) - min(delays) > ceiling / 3
        await pool.execute("UPDATE jobs SET next_attempt_at = now() WHERE id = any($1)", ids)
    assert worker.counts["retried"] == 90


async def test_the_last_attempt_fails_the_job_with_its_error(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    job_id = (
        await enqueue(pool, SCRIPTED, Script(raise_on=True, message="smtp 554"), max_attempts=3)
    ).job_id
    worker = make_worker(servers, pool)
    async with running(worker):
        await eventually(
            lambda: _equals(status_of(pool, job_id), "failed"), within=10, what="job failed"
        )
    row = await job_row(pool, job_id)
    assert row["attempt_count"] == 3
    assert row["last_error"].startswith("RuntimeError: smtp 554 (attempt 3)")
    assert 'File "' in row["last_error"], "operators get the frames"
    assert row["error_message"] == "RuntimeError: smtp 554 (attempt 3)", "an API gets the error"
    assert row["finished_at"] is not None and row["lease_owner"] is None
    assert await executions(pool, job_id) == [1, 2, 3]
    assert await effects(pool) == {}
    assert worker.counts["retried"] == 2 and worker.counts["failed"] == 1


async def test_a_permanent_error_fails_at_once(pool: asyncpg.Pool, servers: Servers) -> None:
    job_id = (
        await enqueue(
            pool,
            SCRIPTED,
            Script(raise_on=True, permanent=True, message="no such user"),
            max_attempts=10,
        )
    ).job_id
    worker = make_worker(servers, pool)
    async with running(worker):
        await eventually(
            lambda: _equals(status_of(pool, job_id), "failed"), within=10, what="job failed"
        )
    row = await job_row(pool, job_id)
    assert row["attempt_count"] == 1
    assert row["last_error"].startswith("PermanentJobError: permanent: no such user")


async def test_a_hanging_attempt_times_out_and_is_retried(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    job_id = (await enqueue(pool, SCRIPTED, Script(hang=[1]))).job_id
    worker = make_worker(servers, pool, timeout_seconds=0.5)
    async with running(worker):
        await eventually(
            lambda: _equals(status_of(pool, job_id), "completed"), within=10, what="completed"
        )
    row = await job_row(pool, job_id)
    assert row["attempt_count"] == 2
    assert "AttemptTimedOut: attempt 1 exceeded 0.5 s" in row["last_error"]
    assert await effects(pool) == {job_id: 2}


async def test_poison_jobs_do_not_block_the_queue(pool: asyncpg.Pool, servers: Servers) -> None:
    """A job that always hangs and one that always raises sit among 40 good ones on a worker
    with two slots: the good ones all complete, the poison ones end failed."""
    hanging = (await enqueue(pool, SCRIPTED, Script(hang=True), max_attempts=2)).job_id
    raising = (
        await enqueue(pool, SCRIPTED, Script(raise_on=True, message="poison"), max_attempts=3)
    ).job_id
    good = [(await enqueue(pool, SCRIPTED, Script(tag=i))).job_id for i in range(40)]
    worker = make_worker(servers, pool, concurrency=2, timeout_seconds=0.4)
    async with running(worker):
        await eventually(
            lambda: _equals(
                pool.fetchval(
                    "SELECT count(*) FROM jobs WHERE id = any($1) AND status = 'completed'", good
                ),
                40,
            ),
            within=15,
            what="good jobs completed",
        )
        await eventually(
            lambda: _equals(status_of(pool, hanging), "failed"), within=10, what="hang failed"
        )
        await eventually(
            lambda: _equals(status_of(pool, raising), "failed"), within=10, what="raise failed"
        )
    assert set(await effects(pool)) == set(good)
    assert "exceeded 0.4 s" in (await job_row(pool, hanging))["last_error"]
    assert (await job_row(pool, raising))["attempt_count"] == 3


async def test_a_job_whose_worker_died_on_the_last_attempt_is_failed_by_the_reaper(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    job_id = (await enqueue(pool, SCRIPTED, Script(), max_attempts=1)).job_id
    await repo.claim(pool, QUEUE, "dead-worker", 1, 30)
    await pool.execute(
        "UPDATE jobs SET lease_expires_at = now() - interval '1 second', last_error = 'earlier',"
        " error_message = 'RuntimeError: earlier' WHERE id = $1",
        job_id,
    )
    worker = make_worker(servers, pool, spec=HOOKED)
    assert await worker.poll_once() == [], "an exhausted job is not claimed again"
    row = await job_row(pool, job_id)
    assert row["status"] == "failed" and row["attempt_count"] == 1
    assert row["last_error"].startswith("lease expired during the last attempt")
    assert row["last_error"].endswith("previous attempt: earlier")
    assert row["error_message"] == (
        f"{repo.REAPED_MESSAGE}\nprevious attempt: RuntimeError: earlier"
    )
    assert worker.counts["reaped"] == 1
    # The domain row (here: the hook's table) failed in the reaper's transaction.
    assert await failures(pool) == [(job_id, 1, "failed", row["error_message"])]


async def test_losing_the_lease_cancels_the_attempt_and_discards_its_effects(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    job_id = (await enqueue(pool, SCRIPTED, Script(sleep_on=[1], sleep=30))).job_id
    worker = make_worker(servers, pool)
    [job] = await worker.poll_once()
    await eventually(
        lambda: _equals(executions(pool, job_id), [1]), within=5, what="attempt started"
    )
    await pool.execute(
        "UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", job_id
    )
    [taken] = await repo.claim(pool, QUEUE, "worker-b", 1, 30)
    await worker.heartbeat()
    await eventually(lambda: _true(not worker.active_jobs), within=5, what="attempt cancelled")
    assert worker.counts["lease_lost"] == 1
    row = await job_row(pool, job_id)
    assert (row["status"], row["lease_owner"], row["attempt_count"]) == ("running", "worker-b", 2)
    assert await effects(pool) == {}
    assert taken.id == job.id


async def test_stopping_hands_running_attempts_back_uncounted(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    job_id = (await enqueue(pool, SCRIPTED, Script(sleep_on=True, sleep=30))).job_id
    worker = make_worker(servers, pool)
    task = asyncio.create_task(worker.run())
    await eventually(
        lambda: _equals(executions(pool, job_id), [1]), within=5, what="attempt started"
    )
    await worker.stop(grace_seconds=0.1)
    await asyncio.wait_for(task, 5)
    row = await job_row(pool, job_id)
    assert (row["status"], row["attempt_count"], row["lease_owner"]) == ("queued", 0, None)


async def test_completed_jobs_are_pruned_after_the_retention(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    ids = [(await enqueue(pool, SCRIPTED, Script())).job_id for _ in range(3)]
    failed = (
        await enqueue(pool, SCRIPTED, Script(raise_on=True, message="x"), max_attempts=1)
    ).job_id
    worker = make_worker(servers, pool)
    async with running(worker):
        await eventually(
            lambda: _equals(
                pool.fetchval("SELECT count(*) FROM jobs WHERE finished_at IS NOT NULL"), 4
            ),
            within=10,
            what="four jobs finished",
        )
    await pool.execute(
        "UPDATE jobs SET finished_at = now() - interval '2 hours' WHERE id = any($1)", ids[:2]
    )
    await pool.execute(
        "UPDATE jobs SET finished_at = now() - interval '2 hours' WHERE id = $1", failed
    )
    await enqueue(pool, OTHER, Script())
    await pool.execute(
        "UPDATE jobs SET status = 'completed', finished_at = now() - interval '2 hours'"
        " WHERE queue = $1",
        OTHER.name,
    )
    assert await repo.prune_completed(pool, QUEUE, 3600) == 2, "this queue's only"
    remaining = {r["id"] for r in await pool.fetch("SELECT id FROM jobs WHERE queue = $1", QUEUE)}
    assert remaining == {ids[2], failed}
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE queue = $1", OTHER.name) == 1


# --- wake-ups -----------------------------------------------------------------------------------


async def test_a_notification_wakes_the_worker_long_before_its_poll(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    worker = make_worker(servers, pool, poll_interval_seconds=60)
    listener = repo.JobNotifications(
        servers.database_url, on_queue=worker.notify, on_connect=worker.wake
    )
    listener.start()
    try:
        await eventually(lambda: _true(listener.connected), within=5, what="listening")
        async with running(worker):
            await asyncio.sleep(0.3)  # the worker is now asleep for its 60 s poll
            job_id = (await enqueue(pool, SCRIPTED, Script())).job_id
            await enqueue(pool, OTHER, Script())
            elapsed = await eventually(
                lambda: _equals(status_of(pool, job_id), "completed"), within=10, what="completed"
            )
        assert elapsed < 2, elapsed
        assert await pool.fetchval("SELECT status FROM jobs WHERE queue = 'other-queue'") == (
            "queued"
        )
    finally:
        await listener.close()


async def test_the_listener_reconnects_after_its_connection_is_killed(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    woken: list[str] = []
    connects: list[int] = []
    listener = repo.JobNotifications(
        servers.database_url,
        on_queue=woken.append,
        on_connect=lambda: connects.append(1),
        max_backoff_seconds=0.5,
    )
    listener.start()
    try:
        await eventually(lambda: _true(listener.connected), within=5, what="listening")
        killed = await pool.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE query LIKE 'LISTEN%' AND pid <> pg_backend_pid()"
        )
        assert killed >= 1
        await eventually(lambda: _true(len(connects) >= 2), within=20, what="reconnected")
        await eventually(lambda: _true(listener.connected), within=5, what="listening again")
        await enqueue(pool, SCRIPTED, Script())
        await eventually(
            lambda: _true(QUEUE in woken), within=5, what="notified after reconnecting"
        )
    finally:
        await listener.close()


async def test_metrics_read_gives_up_when_postgres_does_not_answer_in_time(
    pool: asyncpg.Pool,
) -> None:
    """A scrape must not hang on the queue's figures: with the jobs table locked (a stuck
    migration, a server that stopped answering), the read fails after its timeout, and
    answers again once the table is free."""
    await enqueue(pool, SCRIPTED, Script())
    cache = CachedSnapshot(0, read_timeout=0.3)
    figures = await cache.refresh(pool, None, [QUEUE])
    assert figures.depth[(QUEUE, "queued")] == 1.0
    async with pool.acquire() as holder, holder.transaction():
        await holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await cache.refresh(pool, None, [QUEUE])
        assert time.monotonic() - started < 2.0
    figures = await cache.refresh(pool, None, [QUEUE])
    assert figures.depth[(QUEUE, "queued")] == 1.0


# --- the failure hook and the payload at claim time --------------------------------------------


async def failures(pool: asyncpg.Pool) -> list[tuple[int, int, str, str]]:
    rows = await pool.fetch(
        "SELECT job_id, attempt, status, error_message FROM job_test_failures ORDER BY id"
    )
    return [(r["job_id"], r["attempt"], r["status"], r["error_message"]) for r in rows]


async def test_a_payload_invalid_at_claim_time_fails_the_job_with_a_clear_error(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    """A stored payload the queue's model refuses (written by an older producer, or by hand)
    fails its job at the claim, once, with an error that names the field, and the worker goes
    on with the next job: no crash loop, no handler run."""
    bad = await pool.fetchval(
        "INSERT INTO jobs (queue, payload, max_attempts) VALUES ($1, $2, 5) RETURNING id",
        QUEUE,
        {"tag": "not a number", "unknown": 1},
    )
    good = (await enqueue(pool, HOOKED, Script(tag=1))).job_id
    worker = make_worker(servers, pool, spec=HOOKED)
    claimed = await worker.poll_once()
    assert [job.id for job in claimed] == [good]
    row = await job_row(pool, bad)
    assert (row["status"], row["attempt_count"], row["lease_owner"]) == ("failed", 1, None)
    message = row["error_message"]
    assert message.startswith("InvalidPayload: the job's payload is not a valid Script: ")
    assert "tag: " in message and "unknown: " in message
    assert "not a number" not in message, "the payload's values are not repeated"
    assert await executions(pool, bad) == []
    assert await failures(pool) == [(bad, 1, "failed", message)]
    assert worker.counts["failed"] == 1
    await eventually(
        lambda: _equals(status_of(pool, good), "completed"), within=10, what="next job ran"
    )
    assert await worker.poll_once() == [], "the failed job is not claimed again"


async def test_the_failure_hook_changes_the_domain_row_in_the_failing_transaction(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    """A retry and the final failure each reach the hook with the job's new state; a hook
    that fails rolls the job's failure back with it (the job stays running under its lease,
    to be taken over), so the two never disagree."""
    job_id = (
        await enqueue(pool, HOOKED, Script(raise_on=True, message="down"), max_attempts=2)
    ).job_id
    worker = make_worker(servers, pool, spec=HOOKED)
    async with running(worker):
        await eventually(
            lambda: _equals(status_of(pool, job_id), "failed"), within=10, what="job failed"
        )
    assert await failures(pool) == [
        (job_id, 1, "queued", "RuntimeError: down (attempt 1)"),
        (job_id, 2, "failed", "RuntimeError: down (attempt 2)"),
    ]

    refusing = QueueSpec(QUEUE, Script, scripted, on_failure=refuse_failures)
    other = (await enqueue(pool, refusing, Script(raise_on=True, message="x"))).job_id
    worker = make_worker(servers, pool, spec=refusing)
    await worker.poll_once()
    await eventually(lambda: _true(not worker.active_jobs), within=5, what="attempt over")
    assert worker.counts["unrecorded"] == 1
    row = await job_row(pool, other)
    assert (row["status"], row["error_message"]) == ("running", None), "failure rolled back"
    assert [f for f in await failures(pool) if f[0] == other] == []


async def test_an_attempt_past_its_timeout_reaches_the_hook(
    pool: asyncpg.Pool, servers: Servers
) -> None:
    job_id = (await enqueue(pool, HOOKED, Script(hang=True), max_attempts=1)).job_id
    worker = make_worker(servers, pool, spec=HOOKED, timeout_seconds=0.3)
    async with running(worker):
        await eventually(
            lambda: _equals(status_of(pool, job_id), "failed"), within=10, what="job failed"
        )
    assert await failures(pool) == [
        (job_id, 1, "failed", "AttemptTimedOut: attempt 1 exceeded 0.3 s")
    ]
