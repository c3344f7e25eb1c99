"""Two frontends on a two-node Ray cluster (tests/integration/multinode/conftest.py): the
actors spread over both nodes, writes through one frontend read through the other, a live
stream on one frontend fed by a message sent through the other; then the second node dies
during the workload and the deployment carries on (docs/operations.md, "Node loss").

Both tests share one deployment (module fixtures); the second runs after the first.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import aiohttp
import asyncpg
import pytest

from tests.api.stream.conftest import SseReader
from tests.conftest import Servers, User
from tests.contracts.helpers import Chain
from tests.integration.multinode.conftest import (
    PROJECT_SHARDS,
    USER_SHARDS,
    VERIFIER_WORKERS,
    Deployed,
)
from tests.integration.multinode.workload import (
    CLAIM_META,
    JOBS,
    OFFENSIVE,
    Recorder,
    World,
    answered,
    claimant,
    disputed_for_jobs,
    json_of,
    make_world,
    post_chat,
    post_claim,
    post_dm,
    post_draft,
    post_job,
    prepare_claim,
    unique_body,
)
from tests.support.chain import web3_for
from tests.support.ray_cluster import HEAD_IP, SECOND_IP
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow
STREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_read=None, sock_connect=10)
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=30)


@contextlib.asynccontextmanager
async def sessions(deployed: Deployed) -> AsyncIterator[list[aiohttp.ClientSession]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(
                aiohttp.ClientSession(base_url=f.url, timeout=REQUEST_TIMEOUT)
            )
            for f in deployed.frontends
        ]


def hash_of(n: int) -> str:
    return "0x" + f"{n:064x}"


def families(snapshot: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Actor family -> {actor name: node address}, for the alive actors."""
    address = {n["nodeId"]: n["address"] for n in snapshot["nodes"]}
    found: dict[str, dict[str, str]] = defaultdict(dict)
    for actor in snapshot["actors"]:
        family = actor["name"].rstrip("0123456789").rstrip("-")
        found[family][actor["name"]] = (
            address.get(actor["nodeId"], "?") if actor["state"] == "ALIVE" else actor["state"]
        )
    return found


@pytest.fixture(scope="module")
async def world(servers: Servers, deployed: Deployed) -> World:
    conn = await asyncpg.connect(servers.database_url)
    try:
        async with aiohttp.ClientSession(base_url=deployed.frontends[0].url) as session:
            return await make_world(session, conn, PROJECT_SHARDS, USER_SHARDS, bidders=4)
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def chain(deployed: Deployed) -> Chain:
    driver = Chain(web3_for(deployed.devnet.process.rpc_url), deployed.devnet.deployment)
    # The claim checks compare block times with the server's clock.
    driver.rpc("evm_setNextBlockTimestamp", max(driver.now() + 1, int(time.time())))
    driver.rpc("evm_mine")
    return driver


@pytest.fixture(scope="module")
async def owner_user(deployed: Deployed, chain: Chain) -> User:
    async with aiohttp.ClientSession(base_url=deployed.frontends[0].url) as session:
        return await claimant(session, chain)


@pytest.fixture
async def db(servers: Servers) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(servers.database_url)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.mark.timeout(240)
async def test_two_frontends_share_actors_spread_over_both_nodes(
    servers: Servers,
    deployed: Deployed,
    world: World,
    db: asyncpg.Connection,
    chain: Chain,
    owner_user: User,
) -> None:
    chain_id = deployed.devnet.deployment.chain_id
    registry = deployed.devnet.deployment.registry
    async with sessions(deployed) as (a, b):
        # B holds a live stream as the selected worker; A carries the owner's chat message.
        stream_resp = await b.get(
            "/v1/stream", headers=world.worker.headers, timeout=STREAM_TIMEOUT
        )
        assert stream_resp.status == 200, await stream_resp.text()
        reader = SseReader(stream_resp)
        try:
            first = await reader.message()
            assert not first.is_event and first.id is not None
            body = unique_body("to the stream on B")
            key = uuid.uuid4().hex
            sent = await answered(
                lambda: post_chat(a, world.owner, world.building[0], body, idempotency_key=key),
                201,
            )
            while True:
                event = await reader.event(within=15)
                if event.event == "chat.message":
                    break
            assert event.data["payload"]["messageId"] == sent["id"], event.data
        finally:
            reader.close()

        # Writes on every project shard and user shard, alternating frontends; each read back
        # through the other frontend.
        for i, project in enumerate(world.building):
            writer, reader_fe = (a, b) if i % 2 == 0 else (b, a)
            body = unique_body("chat")
            # A 503 (with Retry-After) is an answer a client retries: on a machine busy with
            # other tests a project shard on the second node has been seen to take longer than
            # this cluster's 5 s call timeout to answer its first call.
            message = await answered(
                functools.partial(
                    post_chat, writer, world.worker, project, body, idempotency_key=body
                ),
                201,
            )
            page = await json_of(
                await reader_fe.get(
                    f"/v1/projects/{project}/chat/messages", headers=world.owner.headers
                ),
                200,
            )
            assert message["id"] in [m["id"] for m in page["items"]], page
        for i, bidder in enumerate(world.bidders):
            writer, reader_fe = (a, b) if i % 2 == 0 else (b, a)
            project = world.bidding[i % PROJECT_SHARDS]
            draft = await json_of(await post_draft(writer, bidder, project, hash_of(i + 1)), 200)
            drafts = await json_of(
                await reader_fe.get(
                    f"/v1/projects/{project}/bid-drafts", headers=world.owner.headers
                ),
                200,
            )
            assert draft["id"] in [d["id"] for d in drafts["items"]], drafts
        for i, sender in enumerate([world.owner, world.worker, *world.bidders[:2]]):
            writer, reader_fe = (a, b) if i % 2 == 0 else (b, a)
            recipient = world.worker if sender is world.owner else world.owner
            dm = await json_of(await post_dm(writer, sender, recipient, unique_body("dm")), 201)
            threads = await json_of(
                await reader_fe.get("/v1/messages/dm/threads", headers=recipient.headers), 200
            )
            assert dm["threadId"] in [t["threadId"] for t in threads["items"]], threads
        # An offense on every user shard (each offender's own), through either frontend.
        for i, offender in enumerate(world.offenders):
            session, project = (a, b)[i % 2], world.offender_projects[i]
            # The user shards start on first use (the frontends warm the project shards only).
            refused = await answered(
                functools.partial(post_chat, session, offender, project, OFFENSIVE), 422
            )
            assert refused["error"] == "offensive_content"
        offenses = await db.fetch("SELECT user_id FROM moderation_offenses")
        assert {r["user_id"] for r in offenses} == {o.user.user_id for o in world.offenders}
        # A claim through A; B serves the claimed project once the indexer (an actor of the
        # cluster) has seen it on chain.
        prepared = await prepare_claim(a, chain, owner_user)
        claimed = await json_of(await post_claim(a, owner_user, prepared), 200)
        assert claimed["status"] == "claimed", claimed

        async def b_serves_the_claim() -> bool:
            resp = await b.get(f"/v1/projects/{prepared.project}")
            async with resp:
                return (
                    resp.status == 200 and (await resp.json()).get("title") == CLAIM_META["title"]
                )

        await eventually(
            b_serves_the_claim,
            within=60,
            what="B serves the project claimed through A",
            interval=0.2,
        )
        detail = await json_of(await b.get(f"/v1/projects/{world.building[1]}"), 200)
        assert detail["projectAddress"].lower() == world.building[1]

        # Verifier jobs through both frontends, each polled through the other: each judges a
        # dispute of its own on the devnet (one verdict per dispute), requested by the user of
        # the owner account.
        disputed = await disputed_for_jobs(chain, db, 2 * VERIFIER_WORKERS, registry)
        jobs = []
        for i, project in enumerate(disputed):
            writer = (a, b)[i % 2]
            accepted = await json_of(
                await post_job(writer, owner_user, project, registry, chain_id), 202
            )
            jobs.append(accepted["jobId"])

        async def all_completed() -> bool:
            for i, job_id in enumerate(jobs):
                record = await json_of(
                    await (b, a)[i % 2].get(f"{JOBS}/{job_id}", headers=owner_user.headers), 200
                )
                assert record["status"] != "failed", record
                if record["status"] != "completed":
                    return False
            return True

        await eventually(all_completed, within=90, what="verifier jobs completed", interval=0.2)
        ran_on = set()
        for job_id in jobs:
            raw = await json_of(
                await a.get(f"{JOBS}/{job_id}/evidence/raw", headers=owner_user.headers), 200
            )
            ran_on |= {attempt["nodeAddress"] for attempt in raw["attempts"]}
        assert ran_on <= {HEAD_IP, SECOND_IP}

    snapshot = await deployed.placement.snapshot()
    assert sorted(n["address"] for n in snapshot["nodes"]) == [HEAD_IP, SECOND_IP]
    placed = families(snapshot)
    print("placement:", dict(placed))
    assert len(placed["project-shard"]) == PROJECT_SHARDS
    assert len(placed["user-shard"]) == USER_SHARDS
    assert len(placed["job-worker-verifier"]) == VERIFIER_WORKERS
    assert len(placed["chain-indexer"]) == 1
    # Ray's SPREAD is best effort: each family is usually split over the nodes, but one family
    # of four may land on one node; the shards of both families and the actors as a whole are
    # on both nodes.
    shards = {**placed["project-shard"], **placed["user-shard"]}
    assert set(shards.values()) == {HEAD_IP, SECOND_IP}, shards
    everything = {node for members in placed.values() for node in members.values()}
    assert everything == {HEAD_IP, SECOND_IP}, placed


WORKLOAD_TASKS = 6
CLAIMS = 4


async def offense_counts(db: asyncpg.Connection) -> dict[str, int]:
    rows = await db.fetch("SELECT user_id, count(*) AS n FROM moderation_offenses GROUP BY user_id")
    return {str(r["user_id"]): r["n"] for r in rows}


ACTORS_BACK_WITHIN_SECONDS = 30.0
ROUTES_BACK_WITHIN_SECONDS = 30.0


@pytest.mark.timeout(240)
async def test_losing_the_second_node_during_the_workload(
    deployed: Deployed, world: World, db: asyncpg.Connection, chain: Chain, owner_user: User
) -> None:
    chain_id = deployed.devnet.deployment.chain_id
    registry = deployed.devnet.deployment.registry
    before = await deployed.placement.snapshot()
    node_of = {n["address"]: n["nodeId"] for n in before["nodes"]}
    head, second = node_of[HEAD_IP], node_of[SECOND_IP]
    hosted = {a["name"] for a in before["actors"] if a["nodeId"] == second}
    assert any("-shard-" in name for name in hosted), dict(families(before))
    offenses_before = await offense_counts(db)
    # The disputes the verifier jobs queued before the node goes judge (one job each).
    disputed = await disputed_for_jobs(chain, db, 2 * VERIFIER_WORKERS, registry)
    recorder = Recorder()
    stop = asyncio.Event()

    async with sessions(deployed) as (a, b):
        fronts = (a, b)

        async def chat_and_dm_loop(n: int) -> None:
            for i in itertools.count():
                if stop.is_set():
                    return
                fe = (i + n) % 2
                session = fronts[fe]
                project = world.building[(i + n) % PROJECT_SHARDS]
                sender, recipient = (world.owner, world.worker)[:: 1 if i % 2 else -1]
                await recorder.send(
                    "chat",
                    "ab"[fe],
                    post_chat(session, sender, project, unique_body("chat")),
                    201,
                )
                await recorder.send(
                    "dm",
                    "ab"[fe],
                    post_dm(session, sender, recipient, unique_body("dm")),
                    201,
                )
                offender = world.offenders[(i + n) % USER_SHARDS]
                offender_project = world.offender_projects[(i + n) % USER_SHARDS]
                await recorder.send(
                    f"offense:{offender.user.user_id}",
                    "ab"[fe],
                    post_chat(session, offender, offender_project, OFFENSIVE),
                    422,
                )
                await recorder.send(
                    "read",
                    "ab"[fe],
                    session.get(
                        f"/v1/projects/{project}/chat/messages", headers=world.owner.headers
                    ),
                )

        # Each bidder upserts its draft in sequence: the stored hash is then its last
        # acknowledged one or a later one whose answer was a 503 (it may have committed).
        drafts_sent: dict[int, list[tuple[str, int]]] = defaultdict(list)

        async def draft_loop(n: int) -> None:
            bidder = world.bidders[n]
            project = world.bidding[n % PROJECT_SHARDS]
            for i in itertools.count(1):
                if stop.is_set():
                    return
                fe = i % 2
                draft_hash = hash_of(1000 * (n + 1) + i)
                outcome = await recorder.send(
                    "draft",
                    "ab"[fe],
                    post_draft(fronts[fe], bidder, project, draft_hash),
                )
                drafts_sent[n].append((draft_hash, outcome.status))

        # Claims prepared up front (intent, project on chain), sent during the outage; a client
        # sends a claim again after a 503 (a repeat answers `already_claimed`).
        claims = [await prepare_claim(a, chain, owner_user) for _ in range(CLAIMS)]
        claim_answers: dict[str, str] = {}

        async def claims_loop() -> None:
            await asyncio.sleep(0.8)  # the first ones go just before the node does
            for i, prepared in enumerate(claims):
                for attempt in itertools.count():
                    fe = (i + attempt) % 2
                    outcome = await recorder.send(
                        "claim", "ab"[fe], post_claim(fronts[fe], owner_user, prepared)
                    )
                    if outcome.status == 200:
                        assert outcome.body is not None
                        claim_answers[prepared.project] = outcome.body["status"]
                        break
                    assert outcome.status == 503 and attempt < 100, outcome
                    await asyncio.sleep(float(outcome.retry_after or 1) / 4)
                await asyncio.sleep(0.5)

        tasks = [asyncio.create_task(chat_and_dm_loop(n)) for n in range(WORKLOAD_TASKS)]
        tasks.append(asyncio.create_task(claims_loop()))
        tasks += [asyncio.create_task(draft_loop(n)) for n in range(len(world.bidders))]
        try:
            # Verifier jobs queued just before the node goes: some are claimed by workers on it.
            jobs = [
                (
                    await json_of(
                        await post_job(fronts[i % 2], owner_user, project, registry, chain_id),
                        202,
                    )
                )["jobId"]
                for i, project in enumerate(disputed)
            ]
            await asyncio.sleep(1.0)
            killed_wall = time.time()
            killed_at = time.monotonic()
            signalled = deployed.cluster.kill_node("second")
            assert signalled > 0

            async def routes_answer() -> bool:
                """One round over every route the workload uses, on every shard, through
                both frontends: all answer as expected."""
                probe = Recorder()
                calls = []
                for fe, session in enumerate(fronts):
                    for project in world.building:
                        calls.append(
                            probe.send(
                                "chat",
                                "ab"[fe],
                                post_chat(session, world.worker, project, unique_body("probe")),
                                201,
                            )
                        )
                    for i, offender in enumerate(world.offenders):
                        calls.append(
                            probe.send(
                                f"offense:{offender.user.user_id}",
                                "ab"[fe],
                                post_chat(session, offender, world.offender_projects[i], OFFENSIVE),
                                422,
                            )
                        )
                    calls.append(
                        probe.send(
                            "ready",
                            "ab"[fe],
                            session.get("/v1/health/ready"),
                        )
                    )
                await asyncio.gather(*calls)
                recorder.outcomes.extend(probe.outcomes)
                return all(o.status == o.expected for o in probe.outcomes)

            declared_dead: list[float] = []

            async def actors_back() -> bool:
                snapshot = await deployed.placement.snapshot()
                actors = snapshot["actors"]
                if second not in {n["nodeId"] for n in snapshot["nodes"]} and not declared_dead:
                    declared_dead.append(time.monotonic() - killed_at)
                return {n["nodeId"] for n in snapshot["nodes"]} == {head} and all(
                    a["state"] == "ALIVE" and a["nodeId"] == head for a in actors
                )

            routes_took, actors_took = await asyncio.gather(
                eventually(
                    routes_answer,
                    within=ROUTES_BACK_WITHIN_SECONDS,
                    what="every route answers again",
                    interval=0.2,
                ),
                eventually(
                    actors_back,
                    within=ACTORS_BACK_WITHIN_SECONDS,
                    what="actors alive on the head",
                    interval=0.2,
                ),
            )
            routes_s = routes_took
            assert time.monotonic() - killed_at >= routes_s
            print(
                f"node loss: the node was declared dead after {declared_dead[0]:.1f} s; "
                f"routes answer again after {routes_took:.1f} s, "
                f"actors alive on the head after {actors_took:.1f} s"
            )
            await asyncio.sleep(1.0)  # the workload goes on against the recovered deployment
        finally:
            stop.set()
            await asyncio.gather(*tasks)

        # Queued jobs complete on the head.
        async def jobs_done() -> bool:
            for job_id in jobs:
                record = await json_of(
                    await a.get(f"{JOBS}/{job_id}", headers=owner_user.headers), 200
                )
                assert record["status"] != "failed", record
                if record["status"] != "completed":
                    return False
            return True

        jobs_took = await eventually(
            jobs_done, within=60, what="queued verifier jobs completed", interval=0.2
        )
        print(f"node loss: the queued verifier jobs completed {jobs_took:.1f} s after recovery")
        for job_id in jobs:
            raw = await json_of(
                await b.get(f"{JOBS}/{job_id}/evidence/raw", headers=owner_user.headers), 200
            )
            for attempt in raw["attempts"]:
                started = datetime.fromisoformat(attempt["startedAt"]).timestamp()
                if started > killed_wall + 0.5:
                    assert attempt["nodeAddress"] == HEAD_IP, raw["attempts"]

    assert set(claim_answers) == {c.project for c in claims}
    assert set(claim_answers.values()) <= {"claimed", "already_claimed"}, claim_answers
    claimed_rows = await db.fetch(
        "SELECT project_address, title FROM project_metadata WHERE project_address = ANY($1)",
        [c.project.lower() for c in claims],
    )
    assert {r["project_address"]: r["title"] for r in claimed_rows} == {
        c.project.lower(): CLAIM_META["title"] for c in claims
    }

    failures = recorder.failures()
    unavailable = [o for o in recorder.outcomes if o.status == 503]
    print(
        f"node loss: {len(recorder.outcomes)} requests, {len(unavailable)} answered 503, "
        f"{len(failures)} otherwise unexpected; the 503s:",
        Counter((o.what.split(":")[0], (o.body or {}).get("message")) for o in unavailable),
        f"from {min((o.at - killed_at for o in unavailable), default=0):.1f} s "
        f"to {max((o.at - killed_at for o in unavailable), default=0):.1f} s after the kill",
    )
    assert not failures, failures[:10]
    assert recorder.acknowledged("chat") and recorder.acknowledged("dm")

    # Every acknowledged write is in PostgreSQL.
    stored = {str(r["id"]) for r in await db.fetch("SELECT id FROM messages")}
    for what in ("chat", "dm"):
        for outcome in recorder.acknowledged(what):
            assert outcome.body is not None and outcome.body["id"] in stored, outcome
    offenses = await offense_counts(db)
    for offender in world.offenders:
        key = str(offender.user.user_id)
        refused = len(recorder.acknowledged(f"offense:{key}"))
        assert offenses.get(key, 0) >= offenses_before.get(key, 0) + refused
    for n, sent in drafts_sent.items():
        acked = [i for i, (_, status) in enumerate(sent) if status == 200]
        assert acked, sent
        allowed = {h for h, _ in sent[acked[-1] :]}
        stored_hash = await db.fetchval(
            "SELECT draft_hash FROM bid_drafts WHERE project_address = $1 AND bidder_address = $2",
            world.bidding[n % PROJECT_SHARDS],
            world.bidders[n].lower,
        )
        assert stored_hash in allowed, (stored_hash, sent[acked[-1] :])

    after = await deployed.placement.snapshot()
    restarted = {a["name"]: a for a in after["actors"]}
    for name in hosted:
        assert restarted[name]["nodeId"] == head and restarted[name]["restarts"] >= 1, restarted[
            name
        ]
    assert actors_took < ACTORS_BACK_WITHIN_SECONDS and routes_s < ROUTES_BACK_WITHIN_SECONDS
