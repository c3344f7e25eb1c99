"""What a single-writer shard command is and sees, independent of Ray.

State that needs one writer per key (a project's claim, records and chat; a user's moderation
state) is mutated by *shard commands*: small frozen dataclasses of plain data, defined in
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
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

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

    @property
    def command_modules(self) -> tuple[str, ...]:
        """The modules defining this family's commands, which its shards import as they start.

        A command reaches its shard pickled with its class by reference, so the first command of
        a module not yet imported there would import it (and what it imports) under the call
        timeout. On a busy machine that took 9 to 10 s of a 10 s budget (docs/architecture.md,
        "Shards"); at start it falls under the start budget instead."""
        return COMMAND_MODULES[self]


# By name, not by import: the domain modules import this one. A test checks that every command
# class of the package is listed under its family.
COMMAND_MODULES: dict[ShardFamily, tuple[str, ...]] = {
    ShardFamily.PROJECT: (
        "marketplace.messaging.chat",
        "marketplace.projects.claims",
        "marketplace.records.bid_drafts",
        "marketplace.records.challenge_submissions",
        "marketplace.records.dispute_evidence",
    ),
    ShardFamily.USER: ("marketplace.moderation.counter",),
}


@dataclass
class ShardContext:
    """What a shard command may use: the shard's own pool, settings and chain client, and its
    group commits."""

    pool: asyncpg.Pool
    settings: Settings
    chain: JsonRpcClient | None
    shard_index: int
    groups: dict[GroupKind[Any, Any], GroupCommit[Any, Any]] = field(default_factory=dict)

    def group_commit(
        self, kind: GroupKind[T, R], write: Callable[[list[T]], Awaitable[Sequence[R]]]
    ) -> GroupCommit[T, R]:
        """The shard's :class:`GroupCommit` of ``kind`` (made with ``write`` on first use)."""
        group = self.groups.get(kind)
        if group is None:
            group = self.groups[kind] = GroupCommit(write)
        return group


R_co = TypeVar("R_co", covariant=True)
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, eq=False)
class GroupKind(Generic[T, R]):
    """One kind of coalesced write in a shard (its items ``T``, its results ``R``): a module-level
    constant of the domain that writes it, so a shard's groups are keyed by an object mypy
    checks, not by a string. Compared by identity."""

    name: str


class GroupCommit(Generic[T, R]):
    """Concurrent writes of one kind, coalesced into batches (group commit).

    A shard runs commands of different keys concurrently; when each would write and commit on its
    own, every one pays a statement, a commit and (for writes with change events) a turn at the
    events' order lock, which serialises producers up to their commit. Here the first write
    starts a batch at once; writes that arrive while it is being written wait and go together in
    the next one. Nothing waits for a timer, so a lone write costs what it did, and under load
    a batch costs one statement and one commit. ``write`` takes the items and returns one result
    per item, in order.

    If a batch fails, its items are written one by one, so a bad item fails only its own caller.
    A caller that stops waiting does not withdraw its item (the command is safe to repeat).
    """

    def __init__(
        self, write: Callable[[list[T]], Awaitable[Sequence[R]]], *, max_batch: int = 64
    ) -> None:
        self._write = write
        self.max_batch = max_batch
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._writer: asyncio.Task[None] | None = None
        self.batches = 0  # batches written (for tests and metrics)

    async def submit(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._drain())
        return await asyncio.shield(future)

    async def _drain(self) -> None:
        batch: list[tuple[T, asyncio.Future[R]]] = []
        try:
            while self._pending:
                batch = self._pending[: self.max_batch]
                del self._pending[: self.max_batch]
                self.batches += 1
                await self._write_batch(batch)
        except BaseException:  # cancelled with the shard: nobody may wait forever
            for _, future in [*batch, *self._pending]:
                future.cancel()
            self._pending.clear()
            raise

    async def _write_batch(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._write([item for item, _ in batch])
        except Exception as exc:
            if len(batch) == 1:
                settle(batch[0][1], exc)
                return
            for item, future in batch:
                try:
                    (result,) = await self._write([item])
                except Exception as single:
                    settle(future, single)
                else:
                    settle(future, result)
            return
        for (_, future), result in zip(batch, results, strict=True):
            settle(future, result)


def settle(future: asyncio.Future[Any], outcome: object, *, failed: bool | None = None) -> None:
    """Give a waiting caller its command's outcome, once (a settled future is left alone).
    ``failed`` says whether ``outcome`` is the error; None: it is when it is an exception."""
    if future.done():
        return
    if failed if failed is not None else isinstance(outcome, BaseException):
        assert isinstance(outcome, BaseException)
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


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
