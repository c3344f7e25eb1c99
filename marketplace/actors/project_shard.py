"""Shard actors hosting the per-project state actors.

"An actor per project" would be one OS process per project, so projects are hashed onto a fixed
number of shard actors (``MARKETPLACE_PROJECT_SHARDS``). Within a shard every mutation of one
project runs under that project's lock, so each project has exactly one writer at a time while
different projects proceed concurrently.

A mutation is a plain module-level ``async def operation(ctx, project_address, payload) -> dict``
in its domain module; the frontend sends the function itself (Ray pickles it by reference, so the
actor imports the domain module on first use) and the shard runs it under the project's lock.
A new capability therefore adds operations without touching this file.

Fault contract: Postgres is the source of truth. A mutation is acknowledged only after its
transaction committed, so a shard killed by the OS and restarted by Ray loses only caches (which it
reloads on first use) and the calls that were in flight, which fail with a 503 and are not
retried by Ray (``max_task_retries=0``): a caller may retry them, and each mutation is written to
be safe to repeat.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from marketplace.actors.options import ActorSpec
from marketplace.actors.runtime import ActorRuntime, stable_shard
from marketplace.chain.rpc import JsonRpcClient
from marketplace.config import Settings
from marketplace.interpreter import pin_recursion_limit
from marketplace.shards import KeyedLocks, ShardContext, ShardOperation
from marketplace.storage.pool import create_pool


class ProjectShard:
    def __init__(self, settings: dict[str, Any], shard_index: int) -> None:
        pin_recursion_limit()
        self.settings = Settings(**settings)
        self.database_url: str = settings["database_url"]
        self.shard_index = shard_index
        self._pool: asyncpg.Pool | None = None
        self._pool_lock = asyncio.Lock()
        self._project_locks = KeyedLocks()
        self._context: ShardContext | None = None

    async def context(self) -> ShardContext:
        if self._context is None:
            pool = await self.pool()
            chain = (
                JsonRpcClient(self.settings.chain_rpc_url) if self.settings.chain_rpc_url else None
            )
            self._context = ShardContext(pool, self.settings, chain, self.shard_index)
        return self._context

    async def mutate(
        self, project_address: str, operation: ShardOperation, payload: dict[str, Any]
    ) -> dict[str, Any]:
        """Run ``operation`` as the single writer of ``project_address``."""
        ctx = await self.context()
        async with self.project_writer(project_address):
            return await operation(ctx, project_address.lower(), payload)

    async def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            async with self._pool_lock:
                if self._pool is None:
                    self._pool = await create_pool(self.database_url, min_size=1, max_size=4)
        return self._pool

    @asynccontextmanager
    async def project_writer(self, project_address: str) -> AsyncIterator[None]:
        """Serialise mutations of one project; other projects are not blocked."""
        async with self._project_locks.hold(project_address.lower()):
            yield

    async def ping(self) -> dict[str, Any]:
        pool = await self.pool()
        async with pool.acquire() as conn:
            await conn.fetchval("SELECT 1")
        return {"shard": self.shard_index, "pid": os.getpid()}


def shard_spec(index: int) -> ActorSpec:
    return ActorSpec(name=f"project-shard-{index}", cls=ProjectShard, max_concurrency=256)


class ProjectShards:
    """Frontend-side router: project address -> the shard actor owning it."""

    def __init__(self, runtime: ActorRuntime) -> None:
        self.runtime = runtime
        self.count = runtime.settings.project_shards

    def handle_for(self, project_address: str) -> tuple[str, Any]:
        index = stable_shard(project_address, self.count)
        spec = shard_spec(index)
        return spec.name, self.runtime.handle(spec, self.runtime.actor_settings(), index)

    async def call(self, project_address: str, method: str, *args: Any) -> Any:
        name, handle = self.handle_for(project_address)
        return await self.runtime.call(name, handle, method, *args)

    async def mutate(
        self, project_address: str, operation: ShardOperation, payload: dict[str, Any]
    ) -> dict[str, Any]:
        """Run a domain operation on the shard that owns ``project_address``."""
        return await self.call(project_address, "mutate", project_address, operation, payload)

    def _handles(self) -> list[tuple[str, Any]]:
        return [
            (
                shard_spec(i).name,
                self.runtime.handle(shard_spec(i), self.runtime.actor_settings(), i),
            )
            for i in range(self.count)
        ]

    def warm(self) -> None:
        """Create (or find) every shard now, so their processes start before the first write."""
        self._handles()

    async def ping_all(self) -> list[dict[str, Any]]:
        calls = [self.runtime.call(name, handle, "ping") for name, handle in self._handles()]
        return list(await asyncio.gather(*calls))
