"""How a frontend sends commands to a shard actor (real Ray, one project shard): one call at a
time while the call in flight is young, the commands arriving meanwhile together in the next
call; another call as soon as every call in flight has been out for ``SLOW_CALL_SECONDS``, so a
slow command does not hold up the ones behind it; never more than
``MAX_CALLS_IN_FLIGHT_PER_SHARD`` calls."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import Any

import pytest

from marketplace.actors.keyed_shard import MAX_CALLS_IN_FLIGHT_PER_SHARD, SLOW_CALL_SECONDS
from marketplace.config import Settings
from marketplace.http import keys
from marketplace.shards import ProjectCommand, ShardContext
from tests.conftest import Servers, make_settings


@dataclass(frozen=True)
class Nap(ProjectCommand):
    """Sleeps inside the shard (under its key's lock) and answers when it started and ended
    there (wall clock: the shard and the test share the machine's clock)."""

    seconds: float

    async def apply(self, ctx: ShardContext) -> tuple[float, float]:
        started = time.time()
        await asyncio.sleep(self.seconds)
        return started, time.time()


@pytest.fixture
def settings(servers: Servers, module_namespace: str) -> Settings:
    return make_settings(servers, ray_namespace=module_namespace, project_shards=1)


def key(n: int) -> str:
    return f"0x{n:040x}"


def calls(metrics: str, method: str) -> float:
    pattern = (
        r"marketplace_actor_call_duration_seconds_count\{"
        rf'actor="project-shard-0",method="{method}",outcome="ok"\}} ([0-9.e+]+)'
    )
    return sum(float(count) for count in re.findall(pattern, metrics))


async def call_counts(client: Any) -> tuple[float, float]:
    text = await (await client.get("/metrics")).text()
    return calls(text, "execute"), calls(text, "execute_batch")


async def test_commands_arriving_behind_a_young_call_go_together_in_the_next(
    client: Any,
) -> None:
    shards = client.app[keys.PROJECT_SHARDS]
    await shards.run(Nap(key(0), 0))  # the shard is up
    before = await call_counts(client)
    first = asyncio.create_task(shards.run(Nap(key(1), SLOW_CALL_SECONDS / 2)))
    await asyncio.sleep(0)  # the first call is sent
    rest = [asyncio.create_task(shards.run(Nap(key(2 + n), 0))) for n in range(5)]
    answers = await asyncio.gather(first, *rest)
    after = await call_counts(client)
    # One lone call, then one call carrying the five.
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
    first_end = answers[0][1]
    assert all(started >= first_end for started, _ in answers[1:])


async def test_a_slow_call_does_not_hold_up_the_commands_behind_it(client: Any) -> None:
    shards = client.app[keys.PROJECT_SHARDS]
    await shards.run(Nap(key(0), 0))
    slow = [asyncio.create_task(shards.run(Nap(key(1 + n), 3))) for n in range(1)]
    await asyncio.sleep(0.2)
    sent = time.monotonic()
    await asyncio.wait_for(shards.run(Nap(key(100), 0)), 2)
    # It went in a call of its own after at most SLOW_CALL_SECONDS, not after the slow one.
    assert time.monotonic() - sent < 1.5
    assert not slow[0].done()
    await asyncio.gather(*slow)


async def test_no_more_calls_in_flight_than_the_limit(client: Any) -> None:
    shards = client.app[keys.PROJECT_SHARDS]
    await shards.run(Nap(key(0), 0))
    slow = []
    for n in range(MAX_CALLS_IN_FLIGHT_PER_SHARD):
        slow.append(asyncio.create_task(shards.run(Nap(key(1 + n), 2))))
        await asyncio.sleep(SLOW_CALL_SECONDS * 2)  # each goes in a call of its own
    started = [asyncio.create_task(shards.run(Nap(key(50 + n), 0))) for n in range(3)]
    await asyncio.sleep(0.5)
    # Every lane is taken by a slow call: the three wait at the frontend...
    assert not any(task.done() for task in started)
    slow_answers = await asyncio.gather(*slow)
    answers = await asyncio.gather(*started)
    # ...and ran in the shard only once a slow call had come back.
    first_back = min(end for _, end in slow_answers)
    assert all(start >= first_back for start, _ in answers)
