"""The driver of the two-node test, in a process of its own (the test process is already
connected to the suite's single-node Ray runtime, and a process joins one Ray cluster only).

Run as ``python -m tests.integration.verifier.two_node_driver`` from the repository root, with
the settings pickled on stdin (``ray_address`` the head). It
connects through :class:`ActorRuntime` as a frontend does, waits for both nodes, starts the
verifier pool (named, detached actors: they outlive this process, until the nodes stop) and
waits until every worker listens, then starts each worker's policy executor (same index); it
prints one JSON line: the nodes' ids and the workers' states.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pickle
import sys
import time
from typing import Any

import ray

from marketplace.actors.job_worker import JobWorkers
from marketplace.actors.runtime import ActorRuntime
from marketplace.actors.verifier_executor import executor_spec
from marketplace.config import Settings
from marketplace.errors import ServiceUnavailable
from marketplace.jobs import JobRegistry
from marketplace.verifier.execution import VERIFIER_QUEUE
from marketplace.verifier.policy import PolicySettings
from tests.support.ray_cluster import spread_reaches

WAIT_SECONDS = 60.0


async def start_pool(settings: Settings) -> dict[str, Any]:
    runtime = ActorRuntime(settings, database_url=settings.database_url)
    runtime.connect()
    deadline = time.monotonic() + WAIT_SECONDS
    while len([n for n in ray.nodes() if n["Alive"]]) < 2:
        if time.monotonic() > deadline:
            raise SystemExit(f"only these nodes joined: {ray.nodes()}")
        await asyncio.sleep(0.2)
    await spread_reaches(2, WAIT_SECONDS)
    workers = JobWorkers(runtime, JobRegistry([VERIFIER_QUEUE]))
    size = workers.start()
    while True:
        try:
            states = await workers.status_all()
            if len(states) == size and all(s.listening for s in states):
                break
        except ServiceUnavailable:
            pass  # an actor process still starting
        if time.monotonic() > deadline:
            raise SystemExit("the verifier workers did not start")
        await asyncio.sleep(0.2)
    start_executors(settings, size)
    nodes = [
        {"nodeId": n["NodeID"], "address": n["NodeManagerAddress"], "resources": n["Resources"]}
        for n in ray.nodes()
        if n["Alive"]
    ]
    return {"nodes": nodes, "workers": [dataclasses.asdict(s) for s in states]}


def start_executors(settings: Settings, size: int) -> None:
    """The policy executor of each worker (same index), given only the policy settings, as the
    API's startup creates them, but outside the actor slots: the nodes' slots
    (MARKETPLACE_RAY_ACTOR_RESOURCE) are what spreads the workers, whose attempts the test
    checks; an executor (no CPU reserved) may run on either node."""
    policy_settings = PolicySettings.from_settings(settings)
    for index in range(size):
        spec = executor_spec(index, settings.verifier_executor_resource)
        remote: Any = ray.remote(spec.cls)
        remote.options(**spec.ray_options(settings.ray_namespace)).remote(policy_settings, index)


def main() -> None:
    settings = pickle.loads(sys.stdin.buffer.read())
    assert isinstance(settings, Settings)
    report = asyncio.run(start_pool(settings))
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
