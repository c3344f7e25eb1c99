"""The worker loop of one queue, as a plain class (the Ray actor in
``marketplace/actors/job_worker.py`` only hosts it).

One loop claims due jobs up to the worker's free slots, runs each attempt as its own asyncio
task under a timeout, and a heartbeat task renews the leases of the attempts still running. It
sleeps until a notification for its queue, a freed slot (when it was full), a retry falling due,
or the poll interval, whichever comes first. Any database error in the loop is logged and
retried with backoff: the loop itself never ends until :meth:`stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import asyncpg

from marketplace.aio import cancel_and_wait, wait_event
from marketplace.config import Settings
from marketplace.jobs.metrics import JobMetricsRecorder
from marketplace.jobs.model import (
    AttemptPhase,
    Backoff,
    Fail,
    InvalidPayload,
    Job,
    JobFailure,
    JobStatus,
    LeaseLost,
    P,
    PermanentJobError,
    after_failure,
    describe_error,
    error_message,
)
from marketplace.jobs.registry import JobContext, QueueSpec
from marketplace.storage.pool import Conn, Connection
from marketplace.storage.repositories import jobs as repo

log = logging.getLogger(__name__)

MAX_LOOP_BACKOFF_SECONDS = 30.0
PRUNE_EVERY_SECONDS = 60.0


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int
    lease_seconds: float
    poll_interval_seconds: float
    timeout_seconds: float
    backoff: Backoff
    completed_retention_seconds: float

    @property
    def heartbeat_seconds(self) -> float:
        # Three renewals per lease: one lost or slow heartbeat does not cost the lease.
        return self.lease_seconds / 3

    @classmethod
    def from_settings(cls, settings: Settings, spec: QueueSpec[Any]) -> WorkerConfig:
        return cls(
            concurrency=spec.effective_concurrency(settings),
            lease_seconds=settings.jobs_lease_seconds,
            poll_interval_seconds=settings.jobs_poll_interval_ms / 1000,
            timeout_seconds=spec.effective_timeout(settings),
            backoff=Backoff(settings.jobs_backoff_base_seconds, settings.jobs_backoff_cap_seconds),
            completed_retention_seconds=settings.jobs_completed_retention_hours * 3600,
        )


def job_of(spec: QueueSpec[P], claimed: repo.ClaimedJob) -> Job[P]:
    """The claimed job with its payload validated against the queue's model
    (:class:`InvalidPayload` when it does not validate)."""
    return Job(
        id=claimed.id,
        queue=claimed.queue,
        payload=spec.decode(claimed.payload),
        attempt=claimed.attempt,
        max_attempts=claimed.max_attempts,
        created_at=claimed.created_at,
        due_at=claimed.due_at,
        idempotency_key=claimed.idempotency_key,
    )


@dataclass
class _Attempt:
    job: Job[Any]
    ctx: JobContext[Any]
    started: float
    deadline: float
    task: asyncio.Task[None] | None = None
    lease_lost: bool = False


class JobWorker:
    def __init__(
        self,
        spec: QueueSpec[Any],
        pool: asyncpg.Pool,
        settings: Settings,
        *,
        owner: str,
        config: WorkerConfig | None = None,
        metrics: JobMetricsRecorder | None = None,
        rng: random.Random | None = None,
        location: dict[str, str] | None = None,
        index: int = 0,
    ) -> None:
        self.spec = spec
        self.index = index
        self.location = dict(location or {})
        self.pool = pool
        self.settings = settings
        self.owner = owner
        self.config = config or WorkerConfig.from_settings(settings, spec)
        self.metrics = metrics or JobMetricsRecorder(None)
        self.rng = rng or random.Random()
        self.counts: Counter[str] = Counter()
        self.last_error: str | None = None
        self._active: dict[int, _Attempt] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self._last_prune = -PRUNE_EVERY_SECONDS
        self._last_reap = -PRUNE_EVERY_SECONDS
        self._heartbeat_task: asyncio.Task[None] | None = None

    # --- signals ------------------------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    def notify(self, queue: str) -> None:
        if queue == self.spec.name:
            self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def active_jobs(self) -> list[int]:
        return sorted(self._active)

    # --- the loop -----------------------------------------------------------------------------

    async def run(self) -> None:
        self._heartbeat_task = asyncio.create_task(self._heartbeat_forever())
        backoff = 0.5
        try:
            while not self._stopping:
                try:
                    claimed = await self.poll_once()
                    backoff = 0.5
                except Exception as exc:
                    self.counts["loop_errors"] += 1
                    self.last_error = repr(exc)
                    log.warning(
                        "job loop of %s failed; retrying in %.1fs",
                        self.spec.name,
                        backoff,
                        exc_info=True,
                    )
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, MAX_LOOP_BACKOFF_SECONDS)
                    continue
                if claimed:
                    # More may be due. With every slot taken, wait until one frees (the
                    # attempt that frees it wakes us); otherwise claim again at once.
                    if len(self._active) >= self.config.concurrency:
                        await self._sleep(self.config.poll_interval_seconds)
                    continue
                await self._sleep(self.config.poll_interval_seconds)
        finally:
            await cancel_and_wait(self._heartbeat_task)

    async def _sleep(self, seconds: float | None) -> None:
        with contextlib.suppress(TimeoutError):
            await wait_event(self._wake, seconds)

    async def poll_once(self) -> list[Job[Any]]:
        """Reap, prune now and then, and claim up to the free slots; attempts start as tasks."""
        # Cleared before the claim, so a notification arriving during it wakes the next wait.
        self._wake.clear()
        await self._maintain()
        free = self.config.concurrency - len(self._active)
        if free <= 0 or self._stopping:
            return []
        claimed = await repo.claim(
            self.pool, self.spec.name, self.owner, free, self.config.lease_seconds
        )
        jobs = []
        for row in claimed:
            self.counts["claimed"] += 1
            self.metrics.claimed(row.queue, row.waited_seconds)
            try:
                job = job_of(self.spec, row)
            except InvalidPayload as exc:
                # No attempt could run it: failed at once, with the reason as its error.
                started = time.monotonic()
                outcome = await self._record_failure(row.id, row.attempt, row.max_attempts, exc)
                self.counts[outcome] += 1
                self.metrics.finished(row.queue, outcome, time.monotonic() - started)
                continue
            self._start(job)
            jobs.append(job)
        return jobs

    async def _maintain(self) -> None:
        now = time.monotonic()
        # Once per poll interval is soon enough to fail an exhausted job whose worker died,
        # and keeps a busy loop at one query per claim.
        if now - self._last_reap < self.config.poll_interval_seconds:
            return
        self._last_reap = now
        reaped = await self.reap()
        if reaped:
            self.counts["reaped"] += len(reaped)
            self.metrics.reaped(self.spec.name, len(reaped))
            log.warning(
                "jobs failed after their last attempt's lease expired",
                extra={"queue": self.spec.name, "jobs": [r.id for r in reaped]},
            )
        if now - self._last_prune >= PRUNE_EVERY_SECONDS and not self.spec.keep_completed:
            self._last_prune = now
            await repo.prune_completed(
                self.pool, self.spec.name, self.config.completed_retention_seconds
            )

    async def reap(self) -> list[repo.Reaped]:
        """Fail this queue's jobs whose last attempt's lease expired, and hand them to the
        queue's failure hook in the same transaction."""
        hook = self.spec.on_failure
        if hook is None:
            return await repo.reap_expired(self.pool, self.spec.name)
        async with self.pool.acquire() as conn, conn.transaction():
            reaped = await repo.reap_expired(conn, self.spec.name)
            if reaped:
                failed = JobStatus.FAILED
                await hook(
                    conn, [JobFailure(r.id, r.attempt, failed, r.error_message) for r in reaped]
                )
        return reaped

    def _start(self, job: Job[Any]) -> None:
        ctx = JobContext(
            job, self.pool, self.settings, self.owner, location=self.location, index=self.index
        )
        started = time.monotonic()
        attempt = _Attempt(job, ctx, started, started + self.config.timeout_seconds)
        self._active[job.id] = attempt
        attempt.task = asyncio.create_task(self._run_attempt(attempt), name=f"job-{job.id}")

    async def _run_attempt(self, attempt: _Attempt) -> None:
        job, ctx = attempt.job, attempt.ctx
        outcome = "lease_lost"
        try:
            try:
                async with asyncio.timeout(self.config.timeout_seconds) as deadline:
                    await self.spec.handler(ctx)
                    await ctx.complete_alone()
                outcome = "completed"
            except TimeoutError as exc:
                if not deadline.expired():
                    raise
                raise AttemptTimedOut(
                    f"attempt {job.attempt} exceeded {self.config.timeout_seconds:g} s"
                ) from exc
        except LeaseLost:
            log.warning("job %s: lease lost, result discarded", job.id)
        except asyncio.CancelledError:
            if not attempt.lease_lost:
                # Stopped by stop(): hand the job back without counting the attempt.
                ctx.phase = AttemptPhase.FINISHING
                with contextlib.suppress(Exception):
                    await asyncio.shield(repo.release(self.pool, job.id, self.owner, job.attempt))
                outcome = "released"
                raise
            log.warning("job %s: lease lost, attempt cancelled", job.id)
        except Exception as exc:
            ctx.phase = AttemptPhase.FINISHING
            outcome = await self._record_failure(job.id, job.attempt, job.max_attempts, exc)
        finally:
            # A later attempt of the same job may have replaced this one here (claimed again by
            # this worker after this attempt's lease expired): leave that one in place.
            if self._active.get(job.id) is attempt:
                del self._active[job.id]
            self.counts[outcome] += 1
            if outcome != "released":
                self.metrics.finished(job.queue, outcome, time.monotonic() - attempt.started)
            if len(self._active) == self.config.concurrency - 1:
                self._wake.set()

    async def _record_failure(
        self, job_id: int, attempt: int, max_attempts: int, exc: BaseException
    ) -> str:
        """Record a failed attempt: retried or failed, with its API-safe ``error_message``
        and its traceback as ``last_error``, and the queue's failure hook in the same
        transaction."""
        message, error = error_message(exc), describe_error(exc)
        decision = after_failure(
            attempt,
            max_attempts,
            permanent=isinstance(exc, PermanentJobError),
            backoff=self.config.backoff,
            rng=self.rng,
        )
        final = isinstance(decision, Fail)
        try:
            async with contextlib.AsyncExitStack() as stack:
                conn: Conn = self.pool
                hook = self.spec.on_failure
                transaction: Connection | None = None
                if hook is not None:
                    transaction = await stack.enter_async_context(self.pool.acquire())
                    await stack.enter_async_context(transaction.transaction())
                    conn = transaction
                if isinstance(decision, Fail):
                    held = await repo.fail(conn, job_id, self.owner, attempt, message, error)
                    recorded = held is not None
                else:
                    due = await repo.retry(
                        conn, job_id, self.owner, attempt, message, error, decision.delay_seconds
                    )
                    recorded = due is not None
                if not recorded:
                    return "lease_lost"
                if hook is not None and transaction is not None:
                    status = JobStatus.FAILED if final else JobStatus.QUEUED
                    await hook(transaction, [JobFailure(job_id, attempt, status, message)])
        except Exception:
            # The lease will expire and the job be claimed again (counting this attempt).
            log.warning("job %s: could not record its failure", job_id, exc_info=True)
            return "unrecorded"
        if isinstance(decision, Fail):
            log.warning(
                "job %s failed (%s) after attempt %s: %s",
                job_id,
                decision.reason,
                attempt,
                message,
            )
            return "failed"
        if decision.delay_seconds < self.config.poll_interval_seconds:
            asyncio.get_running_loop().call_later(decision.delay_seconds, self._wake.set)
        return "retried"

    async def _heartbeat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_seconds)
            try:
                await self.heartbeat()
            except Exception:
                log.warning("job heartbeat failed", exc_info=True)

    async def heartbeat(self) -> None:
        """Renew the leases of running attempts; cancel the attempts whose lease is gone.

        An attempt past its timeout is no longer renewed (its handler ignored the cancellation),
        so its lease runs out and another worker may take the job over.
        """
        now = time.monotonic()
        renew = {
            job_id: attempt
            for job_id, attempt in self._active.items()
            if attempt.ctx.phase is AttemptPhase.RUNNING
            and now < attempt.deadline + self.config.lease_seconds
        }
        held = await repo.heartbeat(
            self.pool,
            [(job_id, attempt.job.attempt) for job_id, attempt in renew.items()],
            self.owner,
            self.config.lease_seconds,
        )
        for job_id in set(renew) - held:
            attempt = renew[job_id]
            if attempt.ctx.phase is AttemptPhase.RUNNING and attempt.task:
                attempt.lease_lost = True
                attempt.task.cancel()

    async def stop(self, grace_seconds: float = 5.0) -> None:
        """Claim nothing more; let running attempts finish for ``grace_seconds``, then hand the
        rest back to the queue (without counting their attempt)."""
        self._stopping = True
        self._wake.set()
        tasks = [a.task for a in self._active.values() if a.task is not None]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=grace_seconds)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


class AttemptTimedOut(Exception):
    """The handler did not finish within the queue's timeout."""
