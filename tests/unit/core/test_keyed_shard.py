"""The shard actor class as a plain object (no Ray) against the suite's PostgreSQL, and the
frontend router's key -> shard mapping."""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import ClassVar

import pytest

from marketplace.actors.keyed_shard import ShardActor, ShardMisrouted, ShardRouter, shard_spec
from marketplace.actors.runtime import ActorRuntime, stable_shard
from marketplace.actors.settings import ActorSettings
from marketplace.config import Settings
from marketplace.errors import ServiceUnavailable
from marketplace.records.bid_drafts import UpsertBidDraft
from marketplace.records.errors import WalletNotLinked
from marketplace.shards import ProjectCommand, ShardContext, ShardFamily
from tests.conftest import Servers, make_settings

# Commands of this module log here, signal their entry and park on their gate; the tests own
# all three.
trace: list[str] = []
entered: dict[str, asyncio.Event] = {}
gates: dict[str, asyncio.Event] = {}


@dataclass(frozen=True)
class Step(ProjectCommand):
    """Logs its entry, reads from the shard's pool, waits for its gate if it has one, logs its
    exit and answers the shard index and the database's answer."""

    name: str

    async def apply(self, ctx: ShardContext) -> tuple[int, int]:
        trace.append(f"{self.name} in")
        async with ctx.pool.acquire() as conn:
            answer = await conn.fetchval("SELECT 40 + 2")
        if self.name in gates:
            entered[self.name].set()
            await gates[self.name].wait()
        trace.append(f"{self.name} out")
        return ctx.shard_index, answer


@dataclass(frozen=True)
class UserStep:
    family: ClassVar[ShardFamily] = ShardFamily.USER
    user_id: uuid.UUID

    @property
    def key(self) -> str:
        return str(self.user_id)

    async def apply(self, ctx: ShardContext) -> str:
        trace.append(f"user {self.user_id}")
        return self.key


def actor_settings(servers: Servers, **overrides: object) -> ActorSettings:
    settings = make_settings(servers, **overrides)
    return ActorSettings.of(settings, database_url=servers.database_url)


@pytest.fixture(autouse=True)
def reset_trace() -> None:
    trace.clear()
    entered.clear()
    gates.clear()


def gate(name: str) -> asyncio.Event:
    """Makes the step ``name`` wait inside the shard until the returned event is set."""
    entered[name] = asyncio.Event()
    gates[name] = asyncio.Event()
    return gates[name]


@pytest.fixture
async def single_shard(servers: Servers) -> AsyncIterator[ShardActor]:
    # One shard owns every key, so any two keys can meet on it.
    shard = ShardActor(actor_settings(servers, project_shards=1), ShardFamily.PROJECT, 0)
    yield shard
    await shard.close()


async def test_one_key_has_one_writer_and_other_keys_are_not_blocked(
    single_shard: ShardActor,
) -> None:
    release = gate("first")
    first = asyncio.create_task(single_shard.execute(Step("0xaa", "first")))
    await asyncio.wait_for(entered["first"].wait(), 5)
    # The same project in another spelling is the same key.
    second = asyncio.create_task(single_shard.execute(Step("0xAA", "second")))
    other = await asyncio.wait_for(single_shard.execute(Step("0xbb", "other")), 5)
    assert other == (0, 42)
    await asyncio.sleep(0.05)
    assert trace == ["first in", "other in", "other out"]
    assert single_shard.held_keys == 1  # 0xaa: held by first, awaited by second
    release.set()
    assert await asyncio.wait_for(asyncio.gather(first, second), 5) == [(0, 42), (0, 42)]
    assert trace[3:] == ["first out", "second in", "second out"]
    assert single_shard.held_keys == 0


async def test_idle_key_locks_are_evicted(single_shard: ShardActor) -> None:
    await asyncio.gather(*(single_shard.execute(Step(f"0x{i:040x}", f"s{i}")) for i in range(300)))
    assert len(trace) == 600
    assert single_shard.held_keys == 0
    release = gate("parked")
    parked = asyncio.create_task(single_shard.execute(Step("0xcc", "parked")))
    await asyncio.wait_for(entered["parked"].wait(), 5)
    assert single_shard.held_keys == 1
    release.set()
    await asyncio.wait_for(parked, 5)
    assert single_shard.held_keys == 0


async def test_a_shard_refuses_commands_for_keys_it_does_not_own(servers: Servers) -> None:
    shard = ShardActor(actor_settings(servers, project_shards=2), ShardFamily.PROJECT, 0)
    try:
        owned = next(f"0x{i:040x}" for i in range(100) if stable_shard(f"0x{i:040x}", 2) == 0)
        foreign = next(f"0x{i:040x}" for i in range(100) if stable_shard(f"0x{i:040x}", 2) == 1)
        assert await shard.execute(Step(owned, "owned")) == (0, 42)
        with pytest.raises(ShardMisrouted) as misrouted:
            await shard.execute(Step(foreign, "foreign"))
        # A 503 the caller may retry once every frontend counts shards alike.
        assert isinstance(misrouted.value, ServiceUnavailable)
        assert misrouted.value.status == 503
        user = next(u for u in (uuid.uuid4() for _ in range(100)) if stable_shard(str(u), 2) == 0)
        with pytest.raises(ShardMisrouted):
            await shard.execute(UserStep(user))
        assert trace == ["owned in", "owned out"]
    finally:
        await shard.close()


async def test_user_shards_run_user_commands(servers: Servers) -> None:
    settings = actor_settings(servers, user_shards=3)
    user = uuid.uuid4()
    shard = ShardActor(settings, ShardFamily.USER, stable_shard(str(user), 3))
    try:
        assert shard.shard_count == 3
        assert await shard.execute(UserStep(user)) == str(user)
        assert trace == [f"user {user}"]
    finally:
        await shard.close()


async def test_domain_errors_leave_the_shard_unchanged(single_shard: ShardActor) -> None:
    # A real domain command: a caller without wallet links cannot write a draft. The error is
    # the domain's own (the error middleware maps it), not wrapped by the shard.
    command = UpsertBidDraft(
        project_address="0x" + "ab" * 20,
        user_id=uuid.uuid4(),
        bidder_address="0x" + "cd" * 20,
        draft_hash="0x" + "11" * 32,
        artifact_uri=None,
        notes=None,
    )
    with pytest.raises(WalletNotLinked) as refused:
        await single_shard.execute(command)
    assert refused.value.body()["error"] == "wallet_not_linked"
    assert single_shard.held_keys == 0
    assert await single_shard.execute(Step(command.project_address, "after")) == (0, 42)


def router(settings: Settings, family: ShardFamily) -> ShardRouter:
    # The runtime is never connected: mapping keys to shards needs no Ray.
    return ShardRouter(ActorRuntime(settings, database_url=settings.database_url), family)


def test_router_maps_keys_to_named_shards_stably(servers: Servers) -> None:
    projects = router(make_settings(servers, project_shards=4, user_shards=3), ShardFamily.PROJECT)
    keys = [f"0x{i:040x}" for i in range(8)]
    # Fixed vector (the same as stable_shard's): the mapping never changes between releases.
    assert [projects.spec_for(key).name for key in keys] == [
        f"project-shard-{i}" for i in (0, 1, 3, 0, 3, 2, 0, 0)
    ]
    checksummed = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
    assert projects.spec_for(checksummed) == projects.spec_for(checksummed.lower())
    spec = projects.spec_for(keys[2])
    assert spec == shard_spec(3) and spec.cls is ShardActor
    assert spec.ray_options("ns")["max_task_retries"] == 0  # writes are not retried by Ray

    users = router(make_settings(servers, project_shards=4, user_shards=3), ShardFamily.USER)
    assert users.count == 3
    names = {users.spec_for(str(uuid.UUID(int=i))).name for i in range(200)}
    assert names == {"user-shard-0", "user-shard-1", "user-shard-2"}


async def test_router_refuses_a_command_of_another_family(servers: Servers) -> None:
    users = router(make_settings(servers), ShardFamily.USER)
    with pytest.raises(TypeError, match="is a project command, not user"):
        await users.run(Step("0xaa", "wrong"))
    assert trace == []


@dataclass(frozen=True)
class Broken(ProjectCommand):
    async def apply(self, ctx: ShardContext) -> None:
        raise RuntimeError("a bug, not a refusal")


async def test_a_batch_answers_each_command_on_its_own(single_shard: ShardActor) -> None:
    refused = UpsertBidDraft(
        project_address="0x" + "ab" * 20,
        user_id=uuid.uuid4(),
        bidder_address="0x" + "cd" * 20,
        draft_hash="0x" + "11" * 32,
        artifact_uri=None,
        notes=None,
    )
    outcomes = await single_shard.execute_batch(
        [Step("0xaa", "one"), refused, Broken("0xbb"), Step("0xAA", "two")]
    )
    assert outcomes[0] == (True, (0, 42)) and outcomes[3] == (True, (0, 42))
    ok, error = outcomes[1]
    assert not ok and isinstance(error, WalletNotLinked)
    # A bug inside one command is logged by the shard and answered as a 503, for that one only.
    ok, error = outcomes[2]
    assert not ok and isinstance(error, ServiceUnavailable) and error.status == 503
    # Same key, one writer: the second step of 0xaa ran after the first.
    assert trace == ["one in", "one out", "two in", "two out"]
    assert single_shard.held_keys == 0


async def test_a_shard_used_as_plain_python_leaves_the_heap_unfrozen(servers: Servers) -> None:
    # Only an actor's own process freezes its start-up heap (marketplace/actors/startup.py):
    # a test process builds many shards and apps, and what is frozen is never collected.
    frozen = gc.get_freeze_count()
    shard = ShardActor(actor_settings(servers, project_shards=1), ShardFamily.PROJECT, 0)
    await shard.close()
    # Frozen objects still die by reference counting: the count may fall, a freeze raises it.
    assert gc.get_freeze_count() <= frozen
