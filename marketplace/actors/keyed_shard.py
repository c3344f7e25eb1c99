"""Shard actors: one writer per key without one process per key.

"An actor per project" (or per user) would be one OS process per key, so keys are hashed onto a
fixed number of shard actors per *family* (:class:`~marketplace.shards.ShardFamily`): projects on
``project-shard-<i>`` (``MARKETPLACE_PROJECT_SHARDS``), users on ``user-shard-<i>``
(``MARKETPLACE_USER_SHARDS``). Within a shard every command for one key runs under that key's
lock, so each key has exactly one writer at a time while different keys proceed concurrently.

A command is a frozen dataclass defined in its domain module (see :mod:`marketplace.shards`);
the frontend's :class:`ShardRouter` sends it to the shard owning its key (Ray pickles it, with
its class by reference) and the shard runs ``command.apply(ctx)`` under the key's lock. A shard
imports its family's command modules (:attr:`ShardFamily.command_modules`) as it starts, so no
command pays that import under the call timeout. A new capability therefore adds commands, and
lists their module there, without touching this file. :class:`ShardActor` is plain Python:
tests use it without Ray.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg

from marketplace.actors.options import ActorSpec
from marketplace.actors.runtime import (
    RESTART_RETRY_DELAYS,
    ActorRestarting,
    ActorRuntime,
    stable_shard,
)
from marketplace.actors.settings import ActorSettings
from marketplace.actors.startup import start_actor
from marketplace.actors.status import ShardPing
from marketplace.chain.rpc import JsonRpcClient
from marketplace.errors import MarketplaceError, ServiceUnavailable
from marketplace.metrics import SHARD_COMMAND_LATENCY, SHARD_COMMANDS
from marketplace.shards import KeyedLocks, ShardCommand, ShardContext, ShardFamily, settle
from marketplace.storage.pool import create_pool

log = logging.getLogger(__name__)
R = TypeVar("R")


class ShardMisrouted(ServiceUnavailable):
    """A command reached a shard that does not own its key: the frontend that sent it counts
    shards differently from the one that created the shard, so the key could have two writers."""

    default_message = "the write reached the wrong shard (a configuration change is under way)"


class ShardActor:
    """The single writer of every key of one family that hashes to ``shard_index``.

    Fault contract: Postgres is the source of truth. A command is acknowledged only after its
    transaction committed, so a shard killed by the OS and restarted by Ray (``max_restarts=-1``)
    loses only caches, which commands rebuild from Postgres on first use, and the calls that were
    in flight. Those fail with a 503 and are not retried by Ray (``max_task_retries=0``): the
    caller may retry them, and every command is written to be safe to repeat (an upsert that
    changes nothing the second time, or a UNIQUE constraint that answers 409).
    """

    def __init__(self, settings: ActorSettings, family: ShardFamily, shard_index: int) -> None:
        start_actor(f"{ShardFamily(family).value}-shard", settings)
        self.settings = settings
        self.family = ShardFamily(family)
        self.shard_count = self.family.shard_count(self.settings)
        self.shard_index = shard_index
        self._pool: asyncpg.Pool | None = None
        self._pool_lock = asyncio.Lock()
        self._key_locks = KeyedLocks()
        self._context: ShardContext | None = None
        for module in self.family.command_modules:
            importlib.import_module(module)

    async def context(self) -> ShardContext:
        if self._context is None:
            pool = await self.pool()
            chain = (
                JsonRpcClient(self.settings.chain_rpc_url) if self.settings.chain_rpc_url else None
            )
            self._context = ShardContext(pool, self.settings, chain, self.shard_index)
        return self._context

    async def execute(self, command: ShardCommand[R]) -> R:
        """Run ``command`` as the single writer of its key."""
        key = command.key.lower()
        owner = stable_shard(key, self.shard_count)
        if command.family is not self.family or owner != self.shard_index:
            log.error(
                "misrouted shard command",
                extra={
                    "command": type(command).__name__,
                    "command_family": command.family.value,
                    "shard": self.family.actor_name(self.shard_index),
                    "owner": self.family.actor_name(owner),
                },
            )
            raise ShardMisrouted()
        ctx = await self.context()
        async with self._key_locks.hold(key):
            return await command.apply(ctx)

    async def execute_batch(self, commands: list[ShardCommand[Any]]) -> list[BatchOutcome]:
        """Run ``commands`` (each under its key's lock, concurrently) and answer one outcome per
        command, in order: its result, or its domain error as a value, so one command's refusal
        does not fail the others. An unexpected error is logged here and answered as a 503."""
        results = await asyncio.gather(
            *(self.execute(command) for command in commands), return_exceptions=True
        )
        outcomes: list[BatchOutcome] = []
        for command, result in zip(commands, results, strict=True):
            if isinstance(result, MarketplaceError):
                outcomes.append((False, result))
            elif isinstance(result, BaseException):
                log.error(
                    "shard command failed",
                    extra={"command": type(command).__name__},
                    exc_info=result,
                )
                outcomes.append((False, ServiceUnavailable("the shard could not run the write")))
            else:
                outcomes.append((True, result))
        return outcomes

    @property
    def held_keys(self) -> int:
        """Keys with a lock right now (held or awaited); idle keys are forgotten."""
        return len(self._key_locks)

    async def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            async with self._pool_lock:
                if self._pool is None:
                    self._pool = await create_pool(
                        self.settings.database_url, min_size=1, max_size=4
                    )
        return self._pool

    async def close(self) -> None:
        """Release the pool and the chain client (tests that use the class without Ray)."""
        if self._context is not None and self._context.chain is not None:
            await self._context.chain.close()
        if self._pool is not None:
            await self._pool.close()
        self._context = None
        self._pool = None

    async def ping(self) -> ShardPing:
        pool = await self.pool()
        async with pool.acquire() as conn:
            await conn.fetchval("SELECT 1")
        return ShardPing(shard=self.shard_index, pid=os.getpid())


# A frontend sends each shard one call at a time; commands that arrive meanwhile wait and go
# together in the next call (``execute_batch``), so Ray's per-call cost (serialisation,
# scheduling, the actor's thread hops) is paid once per batch. A lone command goes at once, alone.
# A call that is slow (a claim's chain lookups, a key waiting for its lock) would hold up every
# command behind it, so once every call in flight has been out for ``SLOW_CALL_SECONDS``
# another one goes, up to ``MAX_CALLS_IN_FLIGHT_PER_SHARD``. One call at a time carried more
# sends per second at a lower p99 than two (bench/README.md, "Messaging", has the figures).
MAX_CALLS_IN_FLIGHT_PER_SHARD = 4
SLOW_CALL_SECONDS = 0.05
MAX_COMMANDS_PER_CALL = 64
# One command's outcome from ``execute_batch``: (True, result) or (False, its error).
BatchOutcome = tuple[bool, Any]


@dataclass
class _ShardQueue:
    pending: list[tuple[ShardCommand[Any], asyncio.Future[Any]]] = field(default_factory=list)
    # When each call in flight was sent (loop time), oldest first.
    sent_at: list[float] = field(default_factory=list)
    # Sends the next call if the ones in flight are still out then.
    wake: asyncio.TimerHandle | None = None

    @property
    def in_flight(self) -> int:
        return len(self.sent_at)


def _consume_outcome(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def command_outcome(future: asyncio.Future[Any]) -> str:
    """The ``outcome`` label of a settled command: ok, domain_error (a domain rule refused it:
    a 4xx), unavailable (a 503: the shard restarting, unreachable, too slow) or error."""
    if future.cancelled():
        return "error"
    exc = future.exception()
    if exc is None:
        return "ok"
    if isinstance(exc, ServiceUnavailable):
        return "unavailable"
    if isinstance(exc, MarketplaceError) and exc.status < 500:
        return "domain_error"
    return "error"


def shard_spec(index: int, family: ShardFamily = ShardFamily.PROJECT) -> ActorSpec:
    return ActorSpec(name=family.actor_name(index), cls=ShardActor, max_concurrency=256)


class ShardRouter:
    """Frontend-side router of one family: key -> the shard actor owning it.

    Shard actors are created on first use (or all at once by :meth:`wait_started`); every
    frontend finds the same ones by name.
    """

    def __init__(self, runtime: ActorRuntime, family: ShardFamily) -> None:
        self.runtime = runtime
        self.family = family
        self.count = family.shard_count(runtime.settings)
        self._queues: dict[int, _ShardQueue] = {}
        self._sending: set[asyncio.Task[None]] = set()

    def index_for(self, key: str) -> int:
        return stable_shard(key, self.count)

    def spec_for(self, key: str) -> ActorSpec:
        return shard_spec(self.index_for(key), self.family)

    def _handle(self, index: int) -> tuple[str, Any]:
        spec = shard_spec(index, self.family)
        return spec.name, self.runtime.handle(
            spec, self.runtime.actor_settings(), self.family, index
        )

    async def run(self, command: ShardCommand[R]) -> R:
        """Run a domain command on the shard that owns its key; its result, or its domain
        error (which reaches the error middleware unchanged)."""
        self._check_family(command)
        result: R = await self._submit(self.index_for(command.key), command)
        return result

    async def run_idempotent(self, command: ShardCommand[R]) -> R:
        """:meth:`run`, sent again while the shard dies or restarts (after each of
        ``RESTART_RETRY_DELAYS``). Only for commands whose repeat answers what the first run
        decided (an idempotency key the command carries), since the run that failed may have
        committed before its shard died. Timeouts are not retried: a shard that is alive but
        slow would get the same work again."""
        self._check_family(command)
        index = self.index_for(command.key)
        for delay in (*RESTART_RETRY_DELAYS, None):
            try:
                result: R = await self._submit(index, command)
                return result
            except ActorRestarting:
                if delay is None:
                    raise
                name = self.family.actor_name(index)
                log.warning(
                    "shard died during an idempotent command; sending it again",
                    extra={"actor": name, "command": type(command).__name__, "retry_in_s": delay},
                )
                self.runtime.forget(name)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _check_family(self, command: ShardCommand[Any]) -> None:
        if command.family is not self.family:
            raise TypeError(
                f"{type(command).__name__} is a {command.family} command, not {self.family}"
            )

    async def _submit(self, index: int, command: ShardCommand[Any]) -> Any:
        queue = self._queues.get(index)
        if queue is None:
            queue = self._queues[index] = _ShardQueue()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        # A caller that stops waiting leaves the command to run; its outcome is then unread.
        future.add_done_callback(_consume_outcome)
        # Measured on the command's own future, so each command of a batched call counts once,
        # and a caller that stops waiting does not cut its command's latency short.
        family, name, started = self.family.value, type(command).__name__, time.perf_counter()

        def measure(settled: asyncio.Future[Any]) -> None:
            SHARD_COMMANDS.labels(family, name, command_outcome(settled)).inc()
            SHARD_COMMAND_LATENCY.labels(family, name).observe(time.perf_counter() - started)

        future.add_done_callback(measure)
        queue.pending.append((command, future))
        self._pump(index, queue)
        return await asyncio.shield(future)

    def _pump(self, index: int, queue: _ShardQueue) -> None:
        if queue.wake is not None:
            queue.wake.cancel()
            queue.wake = None
        loop = asyncio.get_running_loop()
        while queue.pending and queue.in_flight < MAX_CALLS_IN_FLIGHT_PER_SHARD:
            now = loop.time()
            if queue.sent_at and now - queue.sent_at[-1] < SLOW_CALL_SECONDS:
                # The newest call is young: the next batch waits for a call to come back, or
                # goes anyway if that takes too long.
                queue.wake = loop.call_at(
                    queue.sent_at[-1] + SLOW_CALL_SECONDS, self._pump, index, queue
                )
                return
            batch = queue.pending[:MAX_COMMANDS_PER_CALL]
            del queue.pending[:MAX_COMMANDS_PER_CALL]
            queue.sent_at.append(now)
            task = loop.create_task(self._send(index, queue, batch, now))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(
        self,
        index: int,
        queue: _ShardQueue,
        batch: list[tuple[ShardCommand[Any], Any]],
        sent_at: float,
    ) -> None:
        try:
            name, handle = self._handle(index)
            if len(batch) == 1:
                ((command, future),) = batch
                try:
                    settle(
                        future,
                        await self.runtime.call(name, handle, "execute", command),
                        failed=False,
                    )
                except Exception as exc:
                    settle(future, exc, failed=True)
                return
            outcomes = await self.runtime.call(
                name, handle, "execute_batch", [command for command, _ in batch]
            )
            for (_, future), (ok, value) in zip(batch, outcomes, strict=True):
                settle(future, value, failed=not ok)
        except Exception as exc:  # the call itself failed: every command of it did
            for _, future in batch:
                settle(future, exc, failed=True)
        finally:
            queue.sent_at.remove(sent_at)
            self._pump(index, queue)

    async def wait_started(self) -> None:
        """Create (or find) every shard now and wait (at most the start budget) until each one's
        process runs, so they start before the first write; a shard that did not start, or whose
        creation failed, is logged as a warning."""
        names = [self._handle(index)[0] for index in range(self.count)]
        results = await asyncio.gather(
            *(self.runtime.started(name) for name in names), return_exceptions=True
        )
        failed = {
            name: repr(result)
            for name, result in zip(names, results, strict=True)
            if isinstance(result, BaseException)
        }
        if failed:
            log.warning("shards did not start", extra={"shards": failed})

    async def ping(self, key: str) -> ShardPing:
        """Ping the shard owning ``key`` (its process id tells a restart)."""
        name, handle = self._handle(self.index_for(key))
        answer: ShardPing = await self.runtime.call(name, handle, "ping")
        return answer

    async def ping_all(self) -> list[ShardPing]:
        handles = [self._handle(index) for index in range(self.count)]
        calls = [self.runtime.call(name, handle, "ping") for name, handle in handles]
        return list(await asyncio.gather(*calls))
