"""Shard actors: one writer per key without one process per key.

"An actor per project" (or per user) would be one OS process per key, so keys are hashed onto a
fixed number of shard actors per *family* (:class:`~marketplace.shards.ShardFamily`): projects on
``project-shard-<i>`` (``MARKETPLACE_PROJECT_SHARDS``), users on ``user-shard-<i>``
(``MARKETPLACE_USER_SHARDS``). Within a shard every command for one key runs under that key's
lock, so each key has exactly one writer at a time while different keys proceed concurrently.

A command is a frozen dataclass defined in its domain module (see :mod:`marketplace.shards`);
the frontend's :class:`KeyedShards` sends it to the shard owning its key (Ray pickles it, with
its class by reference, so the actor imports the domain module on first use) and the shard runs
``command.apply(ctx)`` under the key's lock. A new capability therefore adds commands without
touching this file. :class:`KeyedShard` is plain Python: tests use it without Ray.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, TypeVar

import asyncpg

from marketplace.actors.options import ActorSpec
from marketplace.actors.runtime import ActorRuntime, stable_shard
from marketplace.chain.rpc import JsonRpcClient
from marketplace.config import Settings
from marketplace.errors import ServiceUnavailable
from marketplace.interpreter import pin_recursion_limit
from marketplace.shards import KeyedLocks, ShardCommand, ShardContext, ShardFamily
from marketplace.storage.pool import create_pool

log = logging.getLogger(__name__)
R = TypeVar("R")


class ShardMisrouted(ServiceUnavailable):
    """A command reached a shard that does not own its key: the frontend that sent it counts
    shards differently from the one that created the shard, so the key could have two writers."""

    default_message = "the write reached the wrong shard (a configuration change is under way)"


class KeyedShard:
    """The single writer of every key of one family that hashes to ``shard_index``.

    Fault contract: Postgres is the source of truth. A command is acknowledged only after its
    transaction committed, so a shard killed by the OS and restarted by Ray (``max_restarts=-1``)
    loses only caches, which commands rebuild from Postgres on first use, and the calls that were
    in flight. Those fail with a 503 and are not retried by Ray (``max_task_retries=0``): the
    caller may retry them, and every command is written to be safe to repeat (an upsert that
    changes nothing the second time, or a UNIQUE constraint that answers 409).
    """

    def __init__(self, settings: dict[str, Any], family: ShardFamily, shard_index: int) -> None:
        pin_recursion_limit()
        self.settings = Settings(**settings)
        self.database_url: str = settings["database_url"]
        self.family = ShardFamily(family)
        self.shard_count = self.family.shard_count(self.settings)
        self.shard_index = shard_index
        self._pool: asyncpg.Pool | None = None
        self._pool_lock = asyncio.Lock()
        self._key_locks = KeyedLocks()
        self._context: ShardContext | None = None

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

    @property
    def held_keys(self) -> int:
        """Keys with a lock right now (held or awaited); idle keys are forgotten."""
        return len(self._key_locks)

    async def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            async with self._pool_lock:
                if self._pool is None:
                    self._pool = await create_pool(self.database_url, min_size=1, max_size=4)
        return self._pool

    async def close(self) -> None:
        """Release the pool and the chain client (tests that use the class without Ray)."""
        if self._context is not None and self._context.chain is not None:
            await self._context.chain.close()
        if self._pool is not None:
            await self._pool.close()
        self._context = None
        self._pool = None

    async def ping(self) -> dict[str, Any]:
        pool = await self.pool()
        async with pool.acquire() as conn:
            await conn.fetchval("SELECT 1")
        return {"shard": self.shard_index, "pid": os.getpid()}


def shard_spec(index: int, family: ShardFamily = ShardFamily.PROJECT) -> ActorSpec:
    return ActorSpec(name=family.actor_name(index), cls=KeyedShard, max_concurrency=256)


class KeyedShards:
    """Frontend-side router of one family: key -> the shard actor owning it.

    Shard actors are created on first use (or all at once by :meth:`warm`); every frontend finds
    the same ones by name.
    """

    def __init__(self, runtime: ActorRuntime, family: ShardFamily) -> None:
        self.runtime = runtime
        self.family = family
        self.count = family.shard_count(runtime.settings)

    def index_for(self, key: str) -> int:
        return stable_shard(key, self.count)

    def spec_for(self, key: str) -> ActorSpec:
        return shard_spec(self.index_for(key), self.family)

    def _handle(self, index: int) -> tuple[str, Any]:
        spec = shard_spec(index, self.family)
        return spec.name, self.runtime.handle(
            spec, self.runtime.actor_settings(), self.family, index
        )

    async def call(self, key: str, method: str, *args: Any) -> Any:
        name, handle = self._handle(self.index_for(key))
        return await self.runtime.call(name, handle, method, *args)

    async def run(self, command: ShardCommand[R]) -> R:
        """Run a domain command on the shard that owns its key; its result, or its domain
        error (which reaches the error middleware unchanged)."""
        if command.family is not self.family:
            raise TypeError(
                f"{type(command).__name__} is a {command.family} command, not {self.family}"
            )
        result: R = await self.call(command.key, "execute", command)
        return result

    async def run_idempotent(self, command: ShardCommand[R]) -> R:
        """:meth:`run`, sent again while the shard dies or restarts
        (:meth:`ActorRuntime.call_idempotent`). Only for commands whose repeat answers what the
        first run decided (an idempotency key the command carries), since the run that failed
        may have committed before its shard died."""
        if command.family is not self.family:
            raise TypeError(
                f"{type(command).__name__} is a {command.family} command, not {self.family}"
            )
        index = self.index_for(command.key)
        name = self.family.actor_name(index)
        result: R = await self.runtime.call_idempotent(
            name, lambda: self._handle(index)[1], "execute", command
        )
        return result

    def warm(self) -> None:
        """Create (or find) every shard now, so their processes start before the first write."""
        for index in range(self.count):
            self._handle(index)

    async def ping_all(self) -> list[dict[str, Any]]:
        handles = [self._handle(index) for index in range(self.count)]
        calls = [self.runtime.call(name, handle, "ping") for name, handle in handles]
        return list(await asyncio.gather(*calls))
