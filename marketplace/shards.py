"""What a single-writer shard command is and sees, independent of Ray.

State that needs one writer per key (a project's records and claim today, a user's moderation
state next) is mutated by *shard commands*: small frozen dataclasses of plain data, defined in
their domain module, each naming the key it mutates and applying itself against a
:class:`ShardContext`. A shard actor (``marketplace.actors.keyed_shard``) runs ``command.apply``
under the key's lock. Commands cross the Ray boundary by pickle, so they hold only picklable
values (no connections, no asyncpg records), and so do their results.

Domain modules import everything they need for this from here, never from ``marketplace.actors``
(which hosts the commands in Ray actors): the rules stay testable without Ray, and the dependency
points one way (actors -> domain, never back). :class:`KeyedLocks` is the per-key serialisation a
shard applies around each command.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

import asyncpg

from marketplace.chain.rpc import JsonRpcClient
from marketplace.config import Settings


class ShardFamily(enum.StrEnum):
    """A kind of key with its own set of shard actors, named ``<family>-shard-<index>``."""

    PROJECT = "project"
    USER = "user"

    def shard_count(self, settings: Settings) -> int:
        match self:
            case ShardFamily.PROJECT:
                return settings.project_shards
            case ShardFamily.USER:
                return settings.user_shards

    def actor_name(self, index: int) -> str:
        return f"{self.value}-shard-{index}"


@dataclass
class ShardContext:
    """What a shard command may use: the shard's own pool, settings and chain client, and a
    per-key cache that lives as long as the shard process (rebuildable from Postgres)."""

    pool: asyncpg.Pool
    settings: Settings
    chain: JsonRpcClient | None
    shard_index: int
    cache: dict[str, dict[str, Any]] = field(default_factory=dict)

    def cache_for(self, key: str) -> dict[str, Any]:
        return self.cache.setdefault(key.lower(), {})


R_co = TypeVar("R_co", covariant=True)


class ShardCommand(Protocol[R_co]):
    """One mutation of one key's state, run by the key's shard as that key's only writer.

    Implementations are frozen dataclasses of picklable values; ``apply`` returns picklable
    values too. A command must be safe to repeat: Postgres is the source of truth and a caller
    may retry one whose shard died mid-call (docs/architecture.md, "Shards").
    """

    family: ClassVar[ShardFamily]

    @property
    def key(self) -> str:
        """The key whose single writer runs this command (case-insensitive)."""
        ...

    async def apply(self, ctx: ShardContext) -> R_co: ...


@dataclass(frozen=True)
class ProjectCommand:
    """Base of the commands keyed by a project address (lower-case, normalised at the edge)."""

    family: ClassVar[ShardFamily] = ShardFamily.PROJECT
    project_address: str

    @property
    def key(self) -> str:
        return self.project_address


@dataclass(frozen=True)
class UserCommand:
    """Base of the commands keyed by a user id (a user's moderation state)."""

    family: ClassVar[ShardFamily] = ShardFamily.USER
    user_id: uuid.UUID

    @property
    def key(self) -> str:
        return str(self.user_id)


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
