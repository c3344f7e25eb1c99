"""Losing the Ray head (docs/operations.md, "Losing the Ray head").

A cluster with GCS fault tolerance on a Redis of its own (tests/support/ray_head.py: a CPU-less
head, a worker node hosting every actor) and two ``marketplace serve`` frontends joined to it
as drivers, as in tests/integration/multinode/conftest.py, one of each kind:

- frontend ``a`` joins through the head's raylet (``RAY_NODE_IP`` 127.0.0.2, whichever head
  runs there), so killing the head takes its Ray node away too: it must notice and rejoin by
  itself;
- frontend ``b`` joins through the worker's raylet (``RAY_NODE_IP`` 127.0.0.3), as a deployed
  frontend joins through its own node (deploy/docker/marketplace-frontend.sh): that raylet waits
  for the head, so the frontend keeps its connection and its calls to the running shards.

1. Chat messages through both frontends; the head's processes are SIGKILLed and started again
   with the same Redis. ``a`` answers 503 with Retry-After while it rejoins, ``b`` never; both
   write afterwards, the shard actors are the same processes (they live on the worker, the
   restarted GCS reloads them from Redis), and every message answered 201 is in PostgreSQL.
   The recovery times are printed.
2. The head is killed and stays away: ``a``'s liveness (``GET /v1/health``) answers 503 once
   its connection has been unusable for longer than ``MARKETPLACE_RAY_RECONNECT_GRACE_SECONDS``
   (shortened here), while ``b`` stays live and keeps writing; when the head comes back, ``a``
   rejoins by itself and passes liveness again.

One cluster and one pair of frontends for the module; the tests run in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import asyncpg
import pytest

from tests.api.records.conftest import Party, seed_project
from tests.conftest import JWT_SECRET, SCHEDULER_SECRET, UNSUBSCRIBE_SECRET, Servers, reset_state
from tests.integration.multinode.conftest import (
    CLUSTER_TUNING,
    Frontend,
    start_frontend,
    stop_frontends,
    wait_ready,
)
from tests.integration.multinode.placement_driver import PREFIX
from tests.integration.multinode.workload import (
    OFFENSIVE,
    Recorder,
    addresses_per_shard,
    answered,
    json_of,
    linked,
    post_chat,
    unique_body,
)
from tests.support.ray_cluster import HEAD_IP, REPO_ROOT, SECOND_IP, ray_environment
from tests.support.ray_head import RestartableHead, restartable_head_cluster
from tests.support.verifier_fixtures import free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow

PROJECT_SHARDS = 2
FRONTEND_START_SECONDS = 90.0
# Liveness fails after this much time without a working Ray connection (short for the test;
# the default is 120 s).
RECONNECT_GRACE_SECONDS = 6
# The worker's raylet waits this long for a lost GCS (deploy/: 600 s) instead of Ray's 60 s.
GCS_RECONNECT_TIMEOUT = {"RAY_gcs_rpc_server_reconnect_timeout_s": "600"}
# Head restart -> a write acknowledged through each frontend; liveness 503 after a lost head.
RECOVERED_WITHIN_SECONDS = 90.0
HEAD_DOWN_SECONDS = 16.0
LIVENESS_FAILS_WITHIN_SECONDS = 60.0
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=20)


@dataclass
class HeadLoss:
    head: RestartableHead
    frontends: list[Frontend]
    namespace: str


@dataclass
class Chat:
    owner: Party
    worker: Party
    projects: list[str]


def frontend_env(
    head: RestartableHead, servers: Servers, namespace: str, port: int, node_ip: str | None
) -> dict[str, str]:
    cluster = head.cluster
    env = ray_environment(cluster.home)
    env.update(
        GCS_RECONNECT_TIMEOUT,
        MARKETPLACE_HOST="127.0.0.1",
        MARKETPLACE_PORT=str(port),
        MARKETPLACE_DATA_DIR=str(cluster.root / f"frontend-{port}"),
        MARKETPLACE_DATABASE_URL=servers.database_url,
        MARKETPLACE_REDIS_URL=servers.redis_url,
        MARKETPLACE_RAY_ADDRESS=cluster.head_address,
        MARKETPLACE_RAY_NAMESPACE=namespace,
        # Only the worker node advertises it: no actor on the head.
        MARKETPLACE_RAY_ACTOR_RESOURCE="marketplace_actors",
        MARKETPLACE_RAY_RECONNECT_GRACE_SECONDS=str(RECONNECT_GRACE_SECONDS),
        MARKETPLACE_JWT_SECRET=JWT_SECRET,
        MARKETPLACE_SCHEDULER_SECRET=SCHEDULER_SECRET,
        MARKETPLACE_NOTIFICATION_UNSUBSCRIBE_SECRET=UNSUBSCRIBE_SECRET,
        MARKETPLACE_PROJECT_SHARDS=str(PROJECT_SHARDS),
        MARKETPLACE_USER_SHARDS="1",
        MARKETPLACE_RATE_LIMIT_ENABLED="false",
        MARKETPLACE_LOG_JSON="false",
        MARKETPLACE_LOG_LEVEL="WARNING",
        # Lean: chat needs the project shards only.
        MARKETPLACE_INDEXER_ENABLED="false",
        MARKETPLACE_NOTIFICATION_PIPELINE_ENABLED="false",
        MARKETPLACE_LEADERBOARD_CONSUMER_ENABLED="false",
        MARKETPLACE_VERIFIER_POOL_SIZE="0",
        MARKETPLACE_JOBS_WORKERS='{"notifications": 0}',
        MARKETPLACE_ACTOR_CALL_TIMEOUT_SECONDS="5",
        MARKETPLACE_MODERATION_SUSPEND_AFTER="100000",
    )
    if node_ip is not None:
        env["RAY_NODE_IP"] = node_ip
    return env


@pytest.fixture(scope="module")
def head_cluster() -> Iterator[RestartableHead]:
    with restartable_head_cluster(
        "hl-", extra_env={**CLUSTER_TUNING, **GCS_RECONNECT_TIMEOUT}
    ) as head:
        yield head


@pytest.fixture(scope="module")
async def head_loss(servers: Servers, head_cluster: RestartableHead) -> AsyncIterator[HeadLoss]:
    await reset_state(servers)
    namespace = f"head-loss-{uuid.uuid4().hex[:8]}"
    frontends: list[Frontend] = []
    try:
        for name, node_ip in (("a", HEAD_IP), ("b", SECOND_IP)):
            port = free_port()
            while any(f.port == port for f in frontends):
                port = free_port()
            log = head_cluster.cluster.root / f"frontend-{name}.log"
            env = frontend_env(head_cluster, servers, namespace, port, node_ip)
            frontends.append(Frontend(name, port, start_frontend(name, env, log), log))
        await asyncio.gather(*(wait_ready(f, FRONTEND_START_SECONDS) for f in frontends))
        yield HeadLoss(head_cluster, frontends, namespace)
    finally:
        stop_frontends(frontends)


@pytest.fixture(scope="module")
async def chat(servers: Servers, head_loss: HeadLoss) -> Chat:
    conn = await asyncpg.connect(servers.database_url)
    try:
        async with aiohttp.ClientSession(base_url=head_loss.frontends[0].url) as session:
            owner, worker = await linked(session), await linked(session)
        projects = [
            await seed_project(
                conn,
                project_address=address,
                owner_address=owner.lower,
                selected_builder_address=worker.lower,
                status="building",
            )
            for address in addresses_per_shard(PROJECT_SHARDS)
        ]
    finally:
        await conn.close()
    return Chat(owner, worker, projects)


@contextlib.asynccontextmanager
async def sessions(frontends: list[Frontend]) -> AsyncIterator[list[aiohttp.ClientSession]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(
                aiohttp.ClientSession(base_url=f.url, timeout=REQUEST_TIMEOUT)
            )
            for f in frontends
        ]


async def shards_answering(session: aiohttp.ClientSession) -> int:
    """How many project shards answered readiness (a Ray call to each)."""
    async with session.get("/v1/health/ready") as resp:
        assert resp.status == 200, await resp.text()
        shards: int = (await resp.json())["projectShards"]
        return shards


# One snapshot of the named actors by a driver of its own (the test process may belong to the
# suite's Ray runtime already): placement_driver.snapshot, without its wait for SPREAD.
SNAPSHOT = (
    "import json, sys, ray\n"
    "from tests.integration.multinode.placement_driver import PREFIX, snapshot\n"
    "ray.init(address=sys.argv[1], include_dashboard=False, log_to_driver=False)\n"
    "print(PREFIX + json.dumps(snapshot()), flush=True)\n"
)


def shard_actors(head: RestartableHead) -> dict[str, dict[str, Any]]:
    """The project shard actors (name -> state, pid, restarts) as the GCS lists them."""
    done = subprocess.run(
        [sys.executable, "-c", SNAPSHOT, head.cluster.head_address],
        cwd=REPO_ROOT,
        env=ray_environment(head.cluster.home),
        capture_output=True,
        timeout=120,
        check=True,
    )
    line = next(x for x in done.stdout.decode().splitlines() if x.startswith(PREFIX))
    actors = json.loads(line.removeprefix(PREFIX))["actors"]
    return {a["name"]: a for a in actors if a["name"].startswith("project-shard-")}


async def stored_ids(servers: Servers) -> set[str]:
    conn = await asyncpg.connect(servers.database_url)
    try:
        return {str(r["id"]) for r in await conn.fetch("SELECT id FROM messages")}
    finally:
        await conn.close()


async def test_head_restart_loses_no_acknowledged_write(
    servers: Servers, head_loss: HeadLoss, chat: Chat
) -> None:
    head, frontends = head_loss.head, head_loss.frontends
    rejoining, waiting = frontends  # on the head's raylet; on a raylet that outlives the head
    recorder = Recorder()
    restarted_at: float | None = None
    # Seconds from the head's restart (`ray start --head` launched) to the first 201 through
    # the rejoining frontend once it had dropped its Ray connection (answered 503).
    recovered: list[float] = []
    stop = asyncio.Event()

    async with sessions(frontends) as clients:
        for client in clients:  # both write before the loss
            await answered(
                functools.partial(
                    post_chat, client, chat.owner, chat.projects[0], unique_body("warm")
                ),
                201,
            )
        shards_before = await asyncio.gather(*(shards_answering(c) for c in clients))
        assert shards_before == [PROJECT_SHARDS, PROJECT_SHARDS]
        actors_before = await asyncio.to_thread(shard_actors, head)
        assert len(actors_before) == PROJECT_SHARDS, actors_before

        async def writer(frontend: Frontend, client: aiohttp.ClientSession, n: int) -> None:
            senders = itertools.cycle([chat.owner, chat.worker])
            projects = itertools.cycle(chat.projects[n % PROJECT_SHARDS :] + chat.projects)
            refused = False
            while not stop.is_set():
                outcome = await recorder.send(
                    "chat",
                    frontend.name,
                    post_chat(client, next(senders), next(projects), unique_body("chat")),
                    expected=201,
                )
                refused = refused or outcome.status == 503
                if (
                    outcome.status == 201
                    and refused
                    and restarted_at is not None
                    and outcome.at > restarted_at
                    and not recovered
                ):
                    recovered.append(outcome.at - restarted_at)
                await asyncio.sleep(0.05 if outcome.status == 201 else 0.3)

        # Two writers per frontend, starting on different shards.
        tasks = [
            asyncio.create_task(writer(f, c, n))
            for n in range(2)
            for f, c in zip(frontends, clients, strict=True)
        ]
        try:
            await asyncio.sleep(3)
            killed_at = time.monotonic()
            signalled = await asyncio.to_thread(head.kill_head)
            assert signalled > 0
            # Longer than the rejoining frontend takes to give its connection up (3 failed
            # probes, 2 s apart, each up to 2 s), so it is rejoining when the head comes back.
            # (Until then it still writes: a driver calls the shards on the worker directly.)
            await asyncio.sleep(HEAD_DOWN_SECONDS)
            restarted_at = time.monotonic()
            start_took = await asyncio.to_thread(head.restart_head)
            await eventually(
                lambda: asyncio.sleep(0, bool(recovered)),
                within=RECOVERED_WITHIN_SECONDS,
                interval=0.2,
                what=lambda: f"frontend a to write again:\n{rejoining.tail()}",
            )
            # What needs the GCS through each frontend: creating an actor (the user shard that
            # records a first offense, started on first use).
            gcs_back: dict[str, float] = {}

            async def offend(frontend: Frontend, client: aiohttp.ClientSession) -> None:
                await answered(
                    lambda: post_chat(client, chat.owner, chat.projects[0], OFFENSIVE),
                    422,
                    limit_s=RECOVERED_WITHIN_SECONDS,
                )
                assert restarted_at is not None
                gcs_back[frontend.name] = time.monotonic() - restarted_at

            await asyncio.gather(*map(offend, frontends, clients))
            await asyncio.sleep(1)  # a few more writes through the recovered cluster
        finally:
            stop.set()
            await asyncio.gather(*tasks)

        # The shards answer readiness through both frontends again, and they are the same
        # processes: the restarted GCS found them in Redis, and the frontends got them by name.
        shards_after = await asyncio.gather(*(shards_answering(c) for c in clients))
        assert shards_after == [PROJECT_SHARDS, PROJECT_SHARDS]
        actors_after = await asyncio.to_thread(shard_actors, head)
        for name, before in actors_before.items():
            after = actors_after[name]
            assert after["state"] == "ALIVE" and after["pid"] == before["pid"], (before, after)
            assert after["restarts"] == before["restarts"], (before, after)

    unavailable = [o for o in recorder.outcomes if o.status == 503]
    acknowledged = recorder.acknowledged("chat")
    while_down = Counter(o.frontend for o in acknowledged if killed_at < o.at < restarted_at)
    print(
        f"head loss: {len(recorder.outcomes)} chat sends, {len(acknowledged)} acknowledged "
        f"({dict(while_down)} while the head was down), {len(unavailable)} answered 503 with "
        f"Retry-After ({Counter((o.frontend, (o.body or {}).get('message')) for o in unavailable)})"
        f" from {min((o.at - killed_at for o in unavailable), default=0):.1f} s to "
        f"{max((o.at - killed_at for o in unavailable), default=0):.1f} s after the kill; head "
        f"down {restarted_at - killed_at:.1f} s, `ray start --head` took {start_took:.1f} s; "
        f"from the restart's start: first write through the rejoining frontend {recovered[0]:.1f}"
        " s, first actor created through each "
        + ", ".join(f"{name} {s:.1f} s" for name, s in sorted(gcs_back.items()))
    )
    assert not recorder.failures(), recorder.failures()[:10]
    # The frontend whose raylet outlived the head never refused a write.
    assert not [o for o in unavailable if o.frontend == waiting.name], unavailable[:5]
    after_restart = {o.frontend for o in acknowledged if o.at > restarted_at}
    assert after_restart == {f.name for f in frontends}, after_restart
    stored = await stored_ids(servers)
    lost = [o for o in acknowledged if o.body is None or o.body["id"] not in stored]
    assert not lost, lost[:10]


async def liveness(client: aiohttp.ClientSession) -> tuple[int, dict[str, object], str | None]:
    async with client.get("/v1/health") as resp:
        return resp.status, await resp.json(), resp.headers.get("Retry-After")


async def test_head_gone_fails_liveness_then_frontends_rejoin(
    servers: Servers, head_loss: HeadLoss, chat: Chat
) -> None:
    head, frontends = head_loss.head, head_loss.frontends
    async with sessions(frontends) as clients:
        rejoining, (client_a, client_b) = frontends[0], clients
        for client in clients:
            assert (await liveness(client))[0] == 200
        killed_at = time.monotonic()
        assert await asyncio.to_thread(head.kill_head) > 0

        # The head stays away. Frontend a, whose Ray node went with it, fails liveness once
        # the grace period is over.
        async def not_live() -> bool:
            return (await liveness(client_a))[0] == 503

        await eventually(
            not_live,
            within=LIVENESS_FAILS_WITHIN_SECONDS,
            interval=0.5,
            what=lambda: f"a's liveness to fail:\n{rejoining.tail()}",
        )
        failed_after = time.monotonic() - killed_at
        assert failed_after >= RECONNECT_GRACE_SECONDS
        status, body, retry_after = await liveness(client_a)
        assert status == 503 and retry_after, (status, body)
        assert body["error"] == "service_unavailable"
        assert "Ray" in str(body["message"])
        # Its Postgres-only reads still work. Its writes reach the shards on the worker until
        # it drops its connection to rejoin (3 failed probes), then answer 503 with Retry-After.
        async with client_a.get(
            f"/v1/projects/{chat.projects[0]}/chat/messages", headers=chat.owner.headers
        ) as resp:
            assert resp.status == 200, await resp.text()

        async def write_refused() -> bool:
            resp = await post_chat(client_a, chat.owner, chat.projects[0], unique_body("down"))
            async with resp:
                assert resp.status in (201, 503), await resp.text()
                return resp.status == 503 and bool(resp.headers.get("Retry-After"))

        await eventually(
            write_refused,
            within=LIVENESS_FAILS_WITHIN_SECONDS,
            interval=0.5,
            what=lambda: f"a to refuse writes:\n{rejoining.tail()}",
        )

        # Frontend b's raylet waits for the head: it stays live and keeps writing.
        assert (await liveness(client_b))[0] == 200
        sent = await json_of(
            await post_chat(client_b, chat.owner, chat.projects[1], unique_body("waiting")), 201
        )
        assert sent["id"] in await stored_ids(servers)

        # The head comes back: frontend a rejoins by itself and passes liveness again.
        restarted_at = time.monotonic()
        await asyncio.to_thread(head.restart_head)
        sent = await answered(
            lambda: post_chat(client_a, chat.worker, chat.projects[1], unique_body("back")),
            201,
            limit_s=RECOVERED_WITHIN_SECONDS,
        )
        rejoined = time.monotonic() - restarted_at
        assert sent["id"] in await stored_ids(servers)
        for client in clients:
            assert (await liveness(client))[0] == 200
    print(
        f"head gone: frontend a failed liveness {failed_after:.1f} s after the kill (grace "
        f"{RECONNECT_GRACE_SECONDS} s), b stayed live and wrote; after the restart, a wrote "
        f"again {rejoined:.1f} s after it began"
    )
