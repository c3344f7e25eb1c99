"""A new actor's first calls wait for its process to start under their own budget
(``MARKETPLACE_ACTOR_START_TIMEOUT_SECONDS``), and only then does the call timeout apply: on a
loaded machine a Python worker that imports the service can take longer to start than a running
actor may take to answer."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from marketplace.actors.keyed_shard import ShardRouter, shard_spec
from marketplace.actors.options import ActorSpec
from marketplace.actors.runtime import ActorRuntime, ActorStarting
from marketplace.config import Settings
from marketplace.shards import ShardFamily
from tests.conftest import kill_namespace_actors

# Longer than the call timeout the tests give the runtime.
START_SECONDS = 2.5
CALL_TIMEOUT_SECONDS = 1.0


class SlowStart:
    """An actor whose process takes ``seconds`` to be ready, as a worker on a busy machine."""

    def __init__(self, seconds: float) -> None:
        time.sleep(seconds)

    def ping(self) -> int:
        return os.getpid()


SPEC = ActorSpec(name="slow-start", cls=SlowStart, scheduling_strategy=None)


@pytest.fixture
def namespace(ray_cluster: None) -> Iterator[str]:
    namespace = f"test-actor-start-{uuid.uuid4().hex[:8]}"
    yield namespace
    kill_namespace_actors(namespace)


def runtime_for(settings: Settings, namespace: str, start_timeout: float) -> ActorRuntime:
    tuned = settings.model_copy(
        update={
            "ray_namespace": namespace,
            "actor_call_timeout_seconds": CALL_TIMEOUT_SECONDS,
            "actor_start_timeout_seconds": start_timeout,
        }
    )
    runtime = ActorRuntime(tuned, database_url=tuned.database_url)
    runtime.connect()  # the suite's Ray connection: nothing to start
    return runtime


async def test_first_calls_wait_for_a_slow_start_then_the_call_timeout_applies(
    settings: Settings, namespace: str
) -> None:
    runtime = runtime_for(settings, namespace, start_timeout=30.0)
    handle = runtime.handle(SPEC, START_SECONDS)
    started = time.monotonic()
    # Two first calls at once share the one start.
    pids = await asyncio.gather(
        runtime.call(SPEC.name, handle, "ping"), runtime.call(SPEC.name, handle, "ping")
    )
    waited = time.monotonic() - started
    assert pids[0] == pids[1] > 0
    # Before the start budget existed, these calls were 503 "did not answer in time" after 1 s.
    assert waited >= START_SECONDS - 0.1, waited
    # Once started, a call is answered without waiting for anything.
    started = time.monotonic()
    assert await runtime.call(SPEC.name, handle, "ping") == pids[0]
    assert time.monotonic() - started < CALL_TIMEOUT_SECONDS


async def test_a_start_past_its_budget_is_a_503_and_later_calls_reach_the_actor(
    settings: Settings, namespace: str
) -> None:
    runtime = runtime_for(settings, namespace, start_timeout=0.5)
    handle = runtime.handle(SPEC, START_SECONDS)
    with pytest.raises(ActorStarting) as refused:
        await runtime.call(SPEC.name, handle, "ping")
    assert refused.value.status == 503
    assert "still starting" in str(refused.value)
    assert int(refused.value.headers()["Retry-After"]) >= 1
    # The actor goes on starting; the call after its start is answered.
    deadline = time.monotonic() + 30
    answer: Any = None
    while answer is None and time.monotonic() < deadline:
        try:
            answer = await runtime.call(SPEC.name, handle, "ping")
        except ActorStarting:
            continue
    assert isinstance(answer, int) and answer > 0


@pytest.mark.parametrize("family", list(ShardFamily), ids=lambda f: f.value)
async def test_a_started_shard_has_imported_the_modules_of_its_commands(
    settings: Settings, namespace: str, family: ShardFamily
) -> None:
    """A command reaches its shard pickled with its class by reference: a module not imported
    at start would be imported by its first command, under the call timeout (9 to 10 s of a
    10 s budget on a saturated machine, marketplace/shards.py)."""
    runtime = runtime_for(settings, namespace, start_timeout=60.0)
    router = ShardRouter(runtime, family)
    await router.wait_started()
    handle = runtime.handle(shard_spec(0, family), runtime.actor_settings(), family, 0)
    modules = family.command_modules

    def imported(shard: Any) -> list[str]:
        return [module for module in modules if module in sys.modules]

    # Before any command reached the shard.
    assert await handle.__ray_call__.remote(imported) == list(modules)
    # And, in its own process, it froze its start-up heap (marketplace/actors/startup.py).
    assert await handle.__ray_call__.remote(lambda shard: gc.get_freeze_count()) > 0
