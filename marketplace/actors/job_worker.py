"""Job worker actors: ``jobs_workers_per_queue`` named async actors per queue.

Each actor hosts one :class:`~marketplace.jobs.worker.JobWorker` for one queue. Its loop is an
asyncio task started from ``__init__`` on the actor's own event loop (Ray runs an async actor's
``__init__`` there), so a Ray restart starts it again with nobody calling the actor, and the
actor's methods stay answerable while jobs run.

Fault contract: Postgres is the source of truth. The actor holds only leases, which expire.
Killed at any point (SIGKILL included) and restarted by Ray (``max_restarts=-1``), it comes back
with a new lease owner id; the jobs it was running stay ``running`` under the dead owner until
their lease expires, then any worker of the queue claims them again as a new attempt. An
attempt's Postgres effects commit in the same transaction as its completion, guarded by the
lease owner, so a job is completed at most once and its effects are never applied twice. Its
methods only read state or set a wake-up flag, so Ray may retry them after a restart.

Actors are spread over the cluster's nodes (``scheduling_strategy="SPREAD"``) and take no CPU
reservation: they wait on I/O, and a CPU-heavy handler should reserve through its own tasks.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from typing import Any

import ray

from marketplace.actors.options import ActorSpec
from marketplace.actors.runtime import ActorRuntime
from marketplace.actors.settings import ActorSettings
from marketplace.actors.startup import start_actor
from marketplace.actors.status import JobWorkerStatus
from marketplace.aio import wait_finished
from marketplace.jobs.metrics import JobMetricsRecorder
from marketplace.jobs.registry import JobRegistry, QueueSpec
from marketplace.jobs.worker import JobWorker
from marketplace.redis_client import Redis
from marketplace.storage.pool import create_pool
from marketplace.storage.repositories.jobs import JobNotifications

log = logging.getLogger(__name__)
MAX_START_BACKOFF_SECONDS = 30.0


class JobWorkerActor:
    def __init__(self, settings: ActorSettings, spec: QueueSpec, index: int) -> None:
        start_actor("job-worker", settings)
        self.settings = settings
        self.spec = spec
        self.index = index
        # A fresh owner per process: a restarted actor must not mistake the dead process's
        # leases for its own.
        self.owner = f"{worker_name(spec.name, index)}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.started_at = time.time()
        self.worker: JobWorker | None = None
        self.listener: JobNotifications | None = None
        self._stopped = False
        self._task = asyncio.get_running_loop().create_task(self._main())

    async def _main(self) -> None:
        backoff = 0.5
        while not self._stopped:
            try:
                await self._serve()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                # Postgres unreachable at start, for instance: keep trying, never die.
                log.warning("job worker %s could not start", self.owner, exc_info=True)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_START_BACKOFF_SECONDS)

    async def _serve(self) -> None:
        # One connection per running attempt plus the loop's and the heartbeat's, so a slow
        # handler never starves the heartbeat (which would cost the leases of the others).
        concurrency = self.spec.effective_concurrency(self.settings)
        pool = await create_pool(self.settings.database_url, min_size=1, max_size=concurrency + 2)
        redis = Redis.from_url(self.settings.redis_url) if self.settings.redis_url else None
        metrics = JobMetricsRecorder(redis)
        worker = JobWorker(
            self.spec,
            pool,
            self.settings,
            owner=self.owner,
            metrics=metrics,
            location=location(),
            index=self.index,
        )
        listener = JobNotifications(
            self.settings.database_url, on_queue=worker.notify, on_connect=worker.wake
        )
        self.worker, self.listener = worker, listener
        metrics.start()
        listener.start()
        try:
            await worker.run()
        finally:
            await listener.close()
            await metrics.close()
            await pool.close()
            if redis is not None:
                await redis.aclose()

    # --- actor methods ----------------------------------------------------------------------

    async def status(self) -> JobWorkerStatus:
        worker = self.worker
        return JobWorkerStatus(
            queue=self.spec.name,
            index=self.index,
            owner=self.owner,
            pid=os.getpid(),
            started_at=self.started_at,
            running=worker is not None and not self._task.done(),
            listening=self.listener is not None and self.listener.connected,
            stopping=worker is not None and worker.stopping,
            active=tuple(worker.active_jobs) if worker is not None else (),
            counts=dict(worker.counts) if worker is not None else {},
            last_error=worker.last_error if worker is not None else None,
        )

    async def wake(self) -> None:
        if self.worker is not None:
            self.worker.wake()

    async def stop(self, grace_seconds: float = 5.0) -> None:
        """Stop claiming and hand unfinished attempts back (before a planned kill)."""
        self._stopped = True
        if self.worker is not None:
            await self.worker.stop(grace_seconds)
        await wait_finished(self._task)


def location() -> dict[str, str]:
    """This actor's Ray node and actor (recorded by handlers that say where they ran)."""
    context = ray.get_runtime_context()
    return {
        "nodeId": context.get_node_id(),
        "nodeAddress": ray.util.get_node_ip_address(),
        "actorId": context.get_actor_id() or "",
        "actorName": context.get_actor_name() or "",
    }


def worker_name(queue: str, index: int) -> str:
    return f"job-worker-{queue}-{index}"


def worker_spec(queue: str, index: int) -> ActorSpec:
    return ActorSpec(
        name=worker_name(queue, index),
        cls=JobWorkerActor,
        idempotent_calls=True,
        max_concurrency=16,
        scheduling_strategy="SPREAD",
    )


class JobWorkers:
    """Frontend side: finds or creates the worker actors of every registered queue."""

    def __init__(self, runtime: ActorRuntime, registry: JobRegistry) -> None:
        self.runtime = runtime
        self.registry = registry

    def handles(self) -> list[tuple[str, Any]]:
        settings = self.runtime.settings
        found = []
        for spec in self.registry:
            for index in range(spec.worker_count(settings)):
                actor = worker_spec(spec.name, index)
                found.append(
                    (
                        actor.name,
                        self.runtime.handle(actor, self.runtime.actor_settings(), spec, index),
                    )
                )
        return found

    def start(self) -> int:
        """Create (or find) every worker now; returns how many there are."""
        return len(self.handles())

    async def status_all(self) -> list[JobWorkerStatus]:
        calls = [self.runtime.call(name, handle, "status") for name, handle in self.handles()]
        return list(await asyncio.gather(*calls))
