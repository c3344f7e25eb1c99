"""Queues and their handlers, declared in one explicit registry.

A handler is a module-level ``async def handle(ctx: JobContext) -> None``. Worker actors receive
the :class:`QueueSpec` as a constructor argument and Ray pickles the handler by reference, so the
worker process imports the handler's module itself; a handler is therefore never a lambda or a
closure. Which queues exist is decided by the capabilities that declare them
(``Capability.queues`` in ``marketplace/capabilities.py``; in tests, by the registry a test
builds), never by which modules happen to be imported.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from marketplace.config import Settings
from marketplace.jobs.model import Job, LeaseLost, check_queue_name
from marketplace.storage.pool import Connection
from marketplace.storage.repositories import jobs as repo


@dataclass
class JobContext:
    """What a handler gets: its job, the worker's pool and settings, and :meth:`completion`.

    Effects in Postgres belong inside ``async with ctx.completion() as conn:``. That block runs
    in the transaction that also marks the job completed (and checks, first, that this worker
    still holds the lease), so the effects commit if and only if the job completes. Slow work
    that is not in Postgres (an SMTP call, a model run) happens before the block, outside any
    transaction. A handler that returns without using the block is completed by the worker.
    """

    job: Job
    pool: asyncpg.Pool[asyncpg.Record]
    settings: Settings
    lease_owner: str
    # "running" -> "completing" -> "completed"; the heartbeat leaves a completing job alone.
    phase: str = "running"
    # Where the attempt runs (Ray node and actor ids, when in an actor), for handlers that
    # record it.
    location: dict[str, str] = field(default_factory=dict)
    # The worker's index among its queue's workers (handlers that pair each worker with a
    # helper of the same index, such as the verifier's policy executors, use it).
    index: int = 0

    @property
    def payload(self) -> dict[str, Any]:
        return self.job.payload

    @contextlib.asynccontextmanager
    async def completion(self) -> AsyncIterator[Connection]:
        if self.phase != "running":
            raise RuntimeError("the job's completion block may run only once")
        self.phase = "completing"
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                total = await repo.complete(conn, self.job.id, self.lease_owner, self.job.attempt)
                if total is None:
                    raise LeaseLost(f"job {self.job.id}: lease of {self.lease_owner} lost")
                yield conn
            self.phase = "completed"
        except BaseException:
            self.phase = "running"
            raise

    async def complete_with(self, effect: str, *args: Any) -> int:
        """The completion and one effect statement in a single statement: what
        :meth:`completion` does with one statement in its block, in one round trip instead of
        four. ``effect`` is a data-modifying statement with ``RETURNING``, its parameters from
        ``$4`` (``args``), guarded by ``EXISTS (SELECT 1 FROM completed)`` so that it changes
        nothing unless the job completes. Returns the rows the effect returned; raises
        :class:`LeaseLost` (nothing changed) when this worker no longer holds the lease."""
        if self.phase != "running":
            raise RuntimeError("the job's completion may run only once")
        if "EXISTS (SELECT 1 FROM completed)" not in effect:
            raise ValueError("the effect must be guarded by EXISTS (SELECT 1 FROM completed)")
        self.phase = "completing"
        try:
            total, rows = await repo.complete_with(
                self.pool, self.job.id, self.lease_owner, self.job.attempt, effect, *args
            )
        except BaseException:
            self.phase = "running"
            raise
        if total is None:
            self.phase = "running"
            raise LeaseLost(f"job {self.job.id}: lease of {self.lease_owner} lost")
        self.phase = "completed"
        return rows

    async def complete_alone(self) -> None:
        """Completion without effects: one autocommitted statement, no transaction."""
        if self.phase != "running":
            return
        self.phase = "completing"
        try:
            total = await repo.complete(self.pool, self.job.id, self.lease_owner, self.job.attempt)
        except BaseException:
            self.phase = "running"
            raise
        if total is None:
            self.phase = "running"
            raise LeaseLost(f"job {self.job.id}: lease of {self.lease_owner} lost")
        self.phase = "completed"


JobHandler = Callable[[JobContext], Awaitable[None]]


@dataclass(frozen=True)
class QueueSpec:
    """One queue: its name, its handler and what it overrides of the ``jobs_*`` settings."""

    name: str
    handler: JobHandler
    # Attempt timeout; None: ``jobs_timeout_seconds``.
    timeout_seconds: float | None = None
    # Jobs one worker runs at once; None: ``jobs_concurrency``.
    concurrency: int | None = None
    # Worker actors for this queue; None: ``jobs_workers_per_queue``. ``jobs_workers``
    # (per queue, from the environment) overrides both.
    workers: int | None = None
    # Where this queue's worker count and attempt timeout come from when they are settings of
    # their own (MARKETPLACE_VERIFIER_POOL_SIZE, for instance): typed accessors of Settings,
    # module-level functions (the spec crosses to the worker actors by pickle). They win over
    # ``workers`` and ``timeout_seconds``, and ``jobs_workers`` wins over them.
    workers_from: Callable[[Settings], int] | None = None
    timeout_from: Callable[[Settings], float] | None = None

    def __post_init__(self) -> None:
        check_queue_name(self.name)
        qualname = getattr(self.handler, "__qualname__", "<lambda>")
        if "<lambda>" in qualname or "<locals>" in qualname:
            raise ValueError(f"queue {self.name}: the handler must be a module-level function")

    def worker_count(self, settings: Settings) -> int:
        if self.name in settings.jobs_workers:
            return settings.jobs_workers[self.name]
        if self.workers_from is not None:
            return self.workers_from(settings)
        return self.workers if self.workers is not None else settings.jobs_workers_per_queue

    def effective_concurrency(self, settings: Settings) -> int:
        return self.concurrency or settings.jobs_concurrency

    def effective_timeout(self, settings: Settings) -> float:
        if self.timeout_from is not None:
            return self.timeout_from(settings)
        return self.timeout_seconds or settings.jobs_timeout_seconds


class JobRegistry:
    """Queue name -> :class:`QueueSpec`; a name is registered once."""

    def __init__(self, specs: Iterable[QueueSpec] = ()) -> None:
        self._specs: dict[str, QueueSpec] = {}
        for spec in specs:
            self.add(spec)

    def add(self, spec: QueueSpec) -> None:
        if spec.name in self._specs:
            raise ValueError(f"queue {spec.name!r} is registered twice")
        self._specs[spec.name] = spec

    def get(self, name: str) -> QueueSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise KeyError(f"no handler registered for queue {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[QueueSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def names(self) -> list[str]:
        return list(self._specs)
