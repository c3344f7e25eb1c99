"""Queues and their handlers, declared in one explicit registry.

A queue is a ``QueueSpec[P]``: its name, its payload model ``P`` (a :class:`JobPayload`) and a
module-level handler ``async def handle(ctx: JobContext[P]) -> None`` that reads the validated
payload as ``ctx.payload``. Worker actors receive the :class:`QueueSpec` as a constructor argument
and Ray pickles the handler (and the payload model, and the failure hook) by reference, so the
worker process imports their module itself; a handler is therefore never a lambda or a closure.
Which queues exist is decided by the capabilities that declare them
(``Capability.queues`` in ``marketplace/http/capabilities.py``; in tests, by the registry a test
builds), never by which modules happen to be imported.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

import asyncpg
from pydantic import ValidationError

from marketplace.config import Settings
from marketplace.jobs.model import (
    AttemptPhase,
    InvalidPayload,
    Job,
    JobFailure,
    LeaseLost,
    P,
    check_queue_name,
)
from marketplace.storage.pool import Connection
from marketplace.storage.repositories import jobs as repo


@dataclass
class JobContext(Generic[P]):
    """What a handler gets: its job (with the validated payload), the worker's pool and
    settings, and :meth:`completion`.

    Effects in Postgres belong inside ``async with ctx.completion() as conn:``. That block runs
    in the transaction that also marks the job completed (and checks, first, that this worker
    still holds the lease), so the effects commit if and only if the job completes. Slow work
    that is not in Postgres (an SMTP call, a model run) happens before the block, outside any
    transaction. A handler that returns without using the block is completed by the worker.
    """

    job: Job[P]
    pool: asyncpg.Pool[asyncpg.Record]
    settings: Settings
    lease_owner: str
    # The heartbeat renews the lease only while RUNNING.
    phase: AttemptPhase = AttemptPhase.RUNNING
    # Where the attempt runs (Ray node and actor ids, when in an actor), for handlers that
    # record it.
    location: dict[str, str] = field(default_factory=dict)
    # The worker's index among its queue's workers (handlers that pair each worker with a
    # helper of the same index, such as the verifier's policy executors, use it).
    index: int = 0

    @property
    def payload(self) -> P:
        return self.job.payload

    def _lease_lost(self) -> LeaseLost:
        return LeaseLost(f"job {self.job.id}: lease of {self.lease_owner} lost")

    @contextlib.asynccontextmanager
    async def completion(self) -> AsyncIterator[Connection]:
        if self.phase is not AttemptPhase.RUNNING:
            raise RuntimeError("the job's completion block may run only once")
        self.phase = AttemptPhase.COMPLETING
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                total = await repo.complete(conn, self.job.id, self.lease_owner, self.job.attempt)
                if total is None:
                    raise self._lease_lost()
                yield conn
            self.phase = AttemptPhase.COMPLETED
        except BaseException:
            self.phase = AttemptPhase.RUNNING
            raise

    async def complete_with(self, effect: str, *args: Any) -> int:
        """The completion and one effect statement in a single statement: what
        :meth:`completion` does with one statement in its block, in one round trip instead of
        four. ``effect`` is a data-modifying statement with ``RETURNING``, its parameters from
        ``$4`` (``args``; ``$1``-``$3`` are the job's id, lease owner and attempt). The statement
        fails as a whole when the completion finds no lease (``repositories.jobs.COMPLETE_WITH``
        raises inside it), so the effect needs no guard of its own: it commits if and only if
        the job completes. Returns the rows the effect returned; raises :class:`LeaseLost`
        (nothing changed) when this worker no longer holds the lease."""
        if self.phase is not AttemptPhase.RUNNING:
            raise RuntimeError("the job's completion may run only once")
        self.phase = AttemptPhase.COMPLETING
        try:
            rows = await repo.complete_with(
                self.pool, self.job.id, self.lease_owner, self.job.attempt, effect, *args
            )
        except BaseException:
            self.phase = AttemptPhase.RUNNING
            raise
        if rows is None:
            self.phase = AttemptPhase.RUNNING
            raise self._lease_lost()
        self.phase = AttemptPhase.COMPLETED
        return rows

    async def complete_alone(self) -> None:
        """Completion without effects: one autocommitted statement, no transaction."""
        if self.phase is not AttemptPhase.RUNNING:
            return
        self.phase = AttemptPhase.COMPLETING
        try:
            total = await repo.complete(self.pool, self.job.id, self.lease_owner, self.job.attempt)
        except BaseException:
            self.phase = AttemptPhase.RUNNING
            raise
        if total is None:
            self.phase = AttemptPhase.RUNNING
            raise self._lease_lost()
        self.phase = AttemptPhase.COMPLETED


JobHandler = Callable[[JobContext[P]], Awaitable[None]]
# Called by the queue inside the transaction that records failed attempts (a retry, a final
# failure, a job reaped after its last lease expired, a payload refused at claim time), with
# those failures: a domain row that shows the job's outcome changes in that same transaction.
FailureHook = Callable[[Connection, Sequence[JobFailure]], Awaitable[None]]


@dataclass(frozen=True)
class QueueSpec(Generic[P]):
    """One queue: its name, its payload model, its handler, its failure hook, and what it
    overrides of the ``jobs_*`` settings."""

    name: str
    payload: type[P]
    handler: JobHandler[P]
    # See FailureHook; a module-level function (it crosses to the workers by pickle).
    on_failure: FailureHook | None = None
    # True: completed jobs are never pruned, because a domain row reads its state from them
    # (the verifier's records, whose status is their job's).
    keep_completed: bool = False
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
        for role, function in (("handler", self.handler), ("failure hook", self.on_failure)):
            if function is None:
                continue
            qualname = getattr(function, "__qualname__", "<lambda>")
            if "<lambda>" in qualname or "<locals>" in qualname:
                raise ValueError(f"queue {self.name}: the {role} must be a module-level function")

    def encode(self, payload: P) -> dict[str, object]:
        """``payload`` as the JSON object stored in ``jobs.payload``, checked first: it must be
        an instance of this queue's model whose JSON validates again (a model built with
        ``model_construct`` skips validation on the way in, not here)."""
        if not isinstance(payload, self.payload):
            raise TypeError(
                f"queue {self.name}: the payload must be a {self.payload.__qualname__}, "
                f"not {type(payload).__qualname__}"
            )
        data = payload.to_json()
        self.payload.model_validate(data)
        return data

    def decode(self, data: object) -> P:
        """The stored payload as this queue's model; :class:`InvalidPayload` (a permanent
        failure, with a message an API may show) when it does not validate."""
        try:
            return self.payload.model_validate(data)
        except ValidationError as exc:
            raise InvalidPayload(
                f"the job's payload is not a valid {self.payload.__qualname__}: "
                + "; ".join(_problems(exc))
            ) from None

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


def _problems(exc: ValidationError) -> list[str]:
    """A validation error's problems, one short line each (location and message, no input
    values: the payload is not the API's to show)."""
    return [
        f"{'.'.join(str(part) for part in error['loc']) or '(payload)'}: {error['msg']}"
        for error in exc.errors(include_input=False, include_url=False)
    ][:5]


class JobRegistry:
    """Queue name -> :class:`QueueSpec`; a name is registered once."""

    def __init__(self, specs: Iterable[QueueSpec[Any]] = ()) -> None:
        self._specs: dict[str, QueueSpec[Any]] = {}
        for spec in specs:
            self.add(spec)

    def add(self, spec: QueueSpec[Any]) -> None:
        if spec.name in self._specs:
            raise ValueError(f"queue {spec.name!r} is registered twice")
        self._specs[spec.name] = spec

    def get(self, name: str) -> QueueSpec[Any]:
        try:
            return self._specs[name]
        except KeyError:
            raise KeyError(f"no handler registered for queue {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[QueueSpec[Any]]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def names(self) -> list[str]:
        return list(self._specs)
