"""What a single-writer shard operation sees, independent of Ray.

Domain modules write their per-key mutations against :class:`ShardContext` and import it from
here, never from ``marketplace.actors`` (which hosts the operations in Ray actors): the rules stay
testable without Ray, and the dependency points one way (actors -> domain, never back).
:class:`KeyedLocks` is the per-key serialisation a shard applies around each operation.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from marketplace.chain.rpc import JsonRpcClient
from marketplace.config import Settings


@dataclass
class ShardContext:
    """What a shard operation may use: the shard's own pool, settings and chain client, and a
    per-project cache that lives as long as the shard process (rebuildable from Postgres)."""

    pool: asyncpg.Pool
    settings: Settings
    chain: JsonRpcClient | None
    shard_index: int
    cache: dict[str, dict[str, Any]] = field(default_factory=dict)

    def project_cache(self, project_address: str) -> dict[str, Any]:
        return self.cache.setdefault(project_address.lower(), {})


ShardOperation = Callable[[ShardContext, str, dict[str, Any]], Awaitable[dict[str, Any]]]


class KeyedLocks:
    """One asyncio lock per key, held only while someone uses or waits for it.

    A shard sees every project (or user) that hashes to it over its lifetime; keeping a lock per
    key forever would grow without bound. A key's lock is dropped when its last holder or waiter
    leaves, and recreated on next use, which is safe because nobody can be waiting on it then.
    """

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    def __len__(self) -> int:
        return len(self._locks)

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
