"""The Ray runtime: named shard actors found by every frontend, restarted after a crash."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import ray

from marketplace.actors.keyed_shard import shard_spec
from marketplace.actors.runtime import ActorRestarting, stable_shard
from marketplace.actors.status import ShardPing
from marketplace.http import keys
from marketplace.metric_sources import ACTOR_RESTARTS_KEY
from tests.support.waiting import eventually


def test_stable_shard_is_deterministic_and_case_insensitive() -> None:
    address = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
    assert stable_shard(address, 8) == stable_shard(address.lower(), 8)
    # Fixed vector: the mapping must never change between releases or processes.
    assert [stable_shard(f"0x{i:040x}", 4) for i in range(8)] == [0, 1, 3, 0, 3, 2, 0, 0]
    counts = [0] * 4
    for i in range(2000):
        counts[stable_shard(f"0x{i:040x}", 4)] += 1
    assert min(counts) > 400


async def test_two_frontends_share_the_same_named_shards(
    client: Any, aiohttp_client: Any, settings: Any
) -> None:
    from marketplace.http.app import create_app

    other = await aiohttp_client(create_app(settings))
    first = await client.app[keys.PROJECT_SHARDS].ping_all()
    second = await other.app[keys.PROJECT_SHARDS].ping_all()
    assert [s.pid for s in first] == [s.pid for s in second]


async def test_killed_shard_is_restarted_and_service_answers_again(client: Any) -> None:
    shards = client.app[keys.PROJECT_SHARDS]
    before = await shards.ping_all()
    victim = ray.get_actor(shard_spec(0).name, namespace=client.app[keys.SETTINGS].ray_namespace)
    ray.kill(victim, no_restart=False)

    # ray.kill returns before the actor is dead: the first checks may still reach the old
    # process (200), so this waits for the restarted one (a new pid), answering only 200 or
    # 503 with Retry-After meanwhile.
    statuses = []
    after: list[ShardPing] | None = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        resp = await client.get("/v1/health/ready")
        statuses.append(resp.status)
        if resp.status == 200:
            with contextlib.suppress(ActorRestarting):
                after = await shards.ping_all()
            if after is not None and after[0].pid != before[0].pid:
                break
        else:
            assert resp.status == 503
            assert (await resp.json())["error"] == "service_unavailable"
            assert int(resp.headers["Retry-After"]) >= 1
        await asyncio.sleep(0.2)
    assert after is not None and after[0].pid != before[0].pid, statuses
    assert after[1].pid == before[1].pid
    # The restarted shard counts itself in Redis a moment after it starts
    # (marketplace/actors/restarts.py): waiting for that write keeps it out of the next test,
    # whose reset would otherwise come first.
    redis = client.app[keys.REDIS]
    await eventually(
        lambda: redis.hget(ACTOR_RESTARTS_KEY, "project-shard"),
        within=20,
        interval=0.2,
        what="the restart to be counted",
    )


def _recursion_limit(_actor: object) -> int:
    import sys

    return sys.getrecursionlimit()


async def test_shard_actors_run_with_the_pinned_recursion_limit(client: Any) -> None:
    from marketplace.interpreter import RECURSION_LIMIT

    await client.app[keys.PROJECT_SHARDS].ping_all()
    shard = ray.get_actor(shard_spec(0).name, namespace=client.app[keys.SETTINGS].ray_namespace)
    assert await shard.__ray_call__.remote(_recursion_limit) == RECURSION_LIMIT
