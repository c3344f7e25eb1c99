"""`marketplace_actor_restarts_total{kind}`: a real shard actor killed and restarted by Ray counts
itself in Redis from its constructor, and every frontend's `/metrics` shows it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import ray

from marketplace.actors.keyed_shard import ShardActor, shard_spec
from marketplace.actors.notification_limiter import ACTOR_NAME, RemoteLimiter
from marketplace.actors.restarts import note_restart
from marketplace.actors.settings import ActorSettings
from marketplace.config import Settings
from marketplace.http import keys
from marketplace.shards import ShardFamily
from tests.conftest import Servers, make_settings
from tests.support.waiting import eventually, eventually_value


@pytest.fixture
def settings(servers: Servers, module_namespace: str) -> Settings:
    return make_settings(servers, ray_namespace=module_namespace, jobs_metrics_cache_seconds=0)


async def restarts(client: Any, kind: str) -> float:
    text = await (await client.get("/metrics")).text()
    prefix = f'marketplace_actor_restarts_total{{kind="{kind}"}} '
    (line,) = [line for line in text.splitlines() if line.startswith(prefix)]
    return float(line[len(prefix) :])


async def wait_for_restarts(client: Any, kind: str, expected: float) -> None:
    """Until ``kind`` counts ``expected`` restarts; counting more fails at once."""

    def reached(seen: float) -> bool:
        assert seen <= expected, f"{kind}: {seen} restarts counted, expected {expected}"
        return seen == expected

    await eventually(
        lambda: restarts(client, kind),
        until=reached,
        within=20,
        interval=0.2,
        what=f"{kind} to count {expected:g} restarts",
    )


async def test_a_killed_shard_counts_its_restart(client: Any) -> None:
    shards = client.app[keys.PROJECT_SHARDS]
    key = "0x" + "11" * 20
    first = (await shards.ping(key)).pid
    # A first start is no restart.
    await asyncio.sleep(1)
    assert await restarts(client, "project-shard") == 0
    victim = ray.get_actor(
        shard_spec(shards.index_for(key)).name, namespace=client.app[keys.SETTINGS].ray_namespace
    )

    async def came_back(old_pid: int) -> int:
        back = await eventually_value(
            lambda: shards.ping(key),
            until=lambda pong: pong.pid != old_pid,
            within=20,
            interval=0.2,
            retry_on=(Exception,),
            what="the shard to come back",
        )
        return back.pid

    for expected in (1, 2):
        ray.kill(victim, no_restart=False)
        first = await came_back(first)
        await wait_for_restarts(client, "project-shard", expected)
    # Other kinds are untouched.
    assert await restarts(client, "user-shard") == 0


async def test_a_killed_notification_limiter_counts_its_restart(client: Any) -> None:
    limiter = RemoteLimiter(client.app[keys.ACTORS])
    first = (await limiter.status()).pid
    victim = ray.get_actor(ACTOR_NAME, namespace=client.app[keys.SETTINGS].ray_namespace)
    ray.kill(victim, no_restart=False)
    await eventually(
        limiter.status,
        until=lambda status: status.pid != first,
        within=20,
        interval=0.2,
        retry_on=(Exception,),
        what="the limiter to come back",
    )
    await wait_for_restarts(client, "notification-limiter", 1)


def test_outside_an_actor_nothing_is_counted(settings: Settings, ray_cluster: None) -> None:
    # The driver (this test process) is no actor: the classes work as plain Python.
    assert note_restart("project-shard", settings.redis_url) is None
    shard = ShardActor(ActorSettings.of(settings), ShardFamily.PROJECT, 0)
    assert shard.shard_index == 0
