"""The frontend's read cache (docs/read-models.md, "Response cache"): hits, invalidation by
change events across frontends, bypass while the event follower lags, the clock-derived
`effectiveStatus`, invite-only visibility and the memory bound. Real apps on the suite's
PostgreSQL and Redis; changes are written like the indexer writes them (row update and event
in one transaction) or, to prove an entry is served from memory, without an event."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import asyncpg
import pytest
from eth_utils import to_checksum_address
from prometheus_client import REGISTRY

from marketplace.events.types import EventType, NewEvent, ProjectChangedPayload
from marketplace.http.read_cache import READ_CACHE, ReadCache
from marketplace.jobs import new_job
from marketplace.storage.pool import create_pool
from marketplace.storage.repositories import events as events_repo
from marketplace.storage.repositories import verifier_jobs as verifier_repo
from marketplace.verifier.execution import VERIFIER_QUEUE
from marketplace.verifier.models import VerifierJobPayload
from tests.api.projects import seed
from tests.conftest import Servers, new_user
from tests.support import apps
from tests.support.apps import AppFactory
from tests.support.raw_events import RawEvent, append_raw
from tests.support.waiting import eventually

# Entries that outlive every test, and a lag bound no loaded test machine reaches: only events
# and the clock end entries here (the lag test sets its own bound).
LONG_AGE = {"read_cache_max_age_ms": 60_000, "read_cache_max_lag_ms": 5_000}


# The shared app factory (tests/support/apps.py): each call is another frontend.
make_client = apps.make_client


@pytest.fixture
async def conn(make_client: AppFactory, servers: Servers) -> AsyncIterator[asyncpg.Connection]:
    # Depends on make_client so the state reset precedes the connection.
    connection = await asyncpg.connect(servers.database_url)
    try:
        yield connection
    finally:
        await connection.close()


def cache_of(client: Any) -> ReadCache:
    return client.server.app[READ_CACHE]


def hits(route: str) -> float:
    value = REGISTRY.get_sample_value("marketplace_read_cache_hits_total", {"route": route})
    return value or 0.0


def bypasses(route: str, reason: str) -> float:
    value = REGISTRY.get_sample_value(
        "marketplace_read_cache_bypasses_total", {"route": route, "reason": reason}
    )
    return value or 0.0


async def change(
    conn: asyncpg.Connection, address: str, sql: str, *args: Any, event: bool = True
) -> None:
    """Run ``sql`` ($1 = the project) and, like the indexer's batch, its `project.changed`
    event in the same transaction."""
    async with conn.transaction():
        await conn.execute(sql, address, *args)
        if event:
            await events_repo.append(
                conn,
                [
                    NewEvent(
                        address,
                        ProjectChangedPayload(block=1, changes={"title": "x"}, milestones=[]),
                    )
                ],
            )


SET_TITLE = "UPDATE project_metadata SET title = $2 WHERE project_address = $1"


async def titled_project(conn: asyncpg.Connection, **values: Any) -> tuple[str, str]:
    row = await seed.project(conn, **values)
    await seed.metadata(
        conn,
        row["project_address"],
        row["owner_address"],
        title="Before",
        bidding_access=row["bidding_access"],
    )
    return row["project_address"], to_checksum_address(row["project_address"])


async def title(client: Any, path: str, headers: dict[str, str] | None = None) -> str:
    response = await client.get(path, headers=headers or {})
    assert response.status == 200, await response.text()
    return str((await response.json())["title"])


async def test_a_repeated_read_is_served_from_memory_with_every_middleware_guarantee(
    make_client: AppFactory, conn: asyncpg.Connection
) -> None:
    client = await make_client(**LONG_AGE)
    raw, address = await titled_project(conn)
    path = f"/v1/projects/{address}"
    first = await client.get(path)
    body = await first.read()
    before = hits("getProject")
    # A change without an event is invisible to the cache: the entry is what answers.
    await change(conn, raw, SET_TITLE, "Changed", event=False)
    second = await client.get(path.lower(), headers={"x-request-id": "cached-read-1"})
    assert second.status == 200
    assert await second.read() == body
    assert second.headers["x-request-id"] == "cached-read-1"
    assert second.headers["Content-Type"].startswith("application/json")
    assert hits("getProject") == before + 1
    # A bad credential is refused before the cache is looked at.
    refused = await client.get(path, headers={"Authorization": "Bearer not-a-token"})
    assert refused.status == 401
    assert set(await refused.json()) >= {"error", "message"}
    # Milestones and list pages are cached as well.
    for cached in (f"{path}/milestones", "/v1/projects?limit=5"):
        assert (await client.get(cached)).status == 200
    assert ("listProjectMilestones", raw, True) in cache_of(client).entries
    assert ("listProjects", "limit=5") in cache_of(client).entries
    metrics = await (await client.get("/metrics")).text()
    assert "marketplace_read_cache_entries 3.0" in metrics


async def test_an_event_written_through_one_frontend_invalidates_every_frontend(
    make_client: AppFactory, conn: asyncpg.Connection
) -> None:
    a = await make_client(**LONG_AGE)
    b = await make_client(**LONG_AGE)
    raw, address = await titled_project(conn)
    path = f"/v1/projects/{address}"
    listing = "/v1/projects?limit=20"
    for client in (a, b):
        assert await title(client, path) == "Before"
        page = await (await client.get(listing)).json()
        assert page["items"][0]["title"] == "Before"
    # Without an event both keep answering from memory...
    await change(conn, raw, SET_TITLE, "Silent", event=False)
    await asyncio.sleep(0.3)
    assert await title(a, path) == await title(b, path) == "Before"
    # ...and the indexer-style event (one transaction with the change) reaches both.
    await change(conn, raw, SET_TITLE, "After")

    async def both_see_it() -> bool:
        titles = [await title(c, path) for c in (a, b)]
        pages = [await (await c.get(listing)).json() for c in (a, b)]
        return titles == ["After", "After"] and all(
            p["items"][0]["title"] == "After" for p in pages
        )

    took = await eventually(
        both_see_it, within=1.0, interval=0.02, what="both frontends to see the change"
    )
    assert took < 1.0
    assert all(cache_of(c).serving() for c in (a, b))


async def test_a_verifier_result_reaches_cached_milestones_through_its_event(
    make_client: AppFactory, conn: asyncpg.Connection, servers: Servers
) -> None:
    """The milestone's latestVerifier* fields are written by the verifier's completion, which
    writes `verifier_job.completed` in the same transaction: entries that live a minute still
    show the result as soon as the event is applied."""
    client = await make_client(**LONG_AGE)
    raw, address = await titled_project(conn)
    await seed.milestone(conn, raw, 0)
    path = f"/v1/projects/{address}/milestones"
    before = await (await client.get(path)).json()
    assert before["items"][0].get("latestVerifierJobId") is None
    assert ("listProjectMilestones", raw, True) in cache_of(client).entries
    creator = uuid.uuid4()
    await seed.user(conn, creator)
    job_id = uuid.uuid4()
    await verifier_repo.insert(
        conn,
        job=new_job(
            VERIFIER_QUEUE,
            VerifierJobPayload(verifier_job_id=job_id),
            max_attempts=1,
            idempotency_key=str(job_id),
        ),
        job_id=job_id,
        created_by=creator,
        project_address=raw,
        milestone_index=0,
        check_policy_id="address-smoke",
        delivery_ref=raw,
        chain_id=31337,
        requested_nonce=None,
        requested_deadline=None,
        attestation_nonce=1,
        max_attempts=1,
        dispute_opened_at=1_700_000_000,
    )
    # Through the service's pool (its JSON codecs), as the verifier worker completes a job.
    pool = await create_pool(servers.database_url, min_size=1, max_size=1)
    async with pool.acquire() as worker, worker.transaction():
        await worker.execute(
            "UPDATE jobs SET status = 'completed', attempt_count = 1, finished_at = now()"
            " WHERE id = (SELECT job_id FROM verifier_jobs WHERE id = $1)",
            job_id,
        )
        assert await verifier_repo.complete(
            worker,
            job_id,
            retention_days=30,
            passes=True,
            evidence_hash="0x" + "11" * 32,
            evidence={},
            attestation={},
            raw={},
            logs="",
        )
    await pool.close()
    event = (await events_repo.read_after(conn, 0, 1000))[-1]
    assert event.type == EventType.VERIFIER_JOB_COMPLETED
    assert event.subject == raw
    assert event.payload["jobId"] == str(job_id)
    assert event.payload["passes"] is True

    async def shows_result() -> bool:
        item = (await (await client.get(path)).json())["items"][0]
        return item.get("latestVerifierJobId") == str(job_id) and bool(
            item.get("latestVerifierPasses")
        )

    await eventually(shows_result, within=1.0, interval=0.02, what="the list to show the result")


async def test_a_follower_that_lags_behind_the_outbox_stops_the_cache_serving(
    make_client: AppFactory, conn: asyncpg.Connection
) -> None:
    # No relay runs: events reach PostgreSQL but never the stream, so the follower falls behind.
    raw, address = await titled_project(conn)
    # An event committed before the app starts: the follower reads it from PostgreSQL when it
    # starts. Once it has, it waits on the stream alone, so the change below can only reach it
    # through the relay. (Without this wait a follower that started late, on a busy machine,
    # read the change from PostgreSQL too and was current.)
    await change(conn, raw, SET_TITLE, "Before")
    started_with = await events_repo.last_id(conn)
    client = await make_client(
        read_cache_max_age_ms=60_000, events_relay_enabled=False, read_cache_max_lag_ms=200
    )

    async def caught_up() -> bool:
        return cache_of(client).position >= started_with

    await eventually(caught_up, within=5.0, what="the follower to read the outbox's backlog")
    path = f"/v1/projects/{address}"
    assert await title(client, path) == "Before"
    assert await title(client, path) == "Before"
    assert (("getProject", raw, True)) in cache_of(client).entries
    before = bypasses("getProject", "not_serving")
    await change(conn, raw, SET_TITLE, "After")

    async def fresh() -> bool:
        return await title(client, path) == "After"

    # Within the lag bound plus one probe, reads bypass the cache and show the change.
    took = await eventually(fresh, within=1.0, interval=0.02, what="the fresh title")
    assert took < 0.2 + 0.2 + 0.3
    assert not cache_of(client).serving()
    assert bypasses("getProject", "not_serving") > before


async def test_a_cached_response_never_shows_an_effective_status_past_its_deadline(
    make_client: AppFactory, conn: asyncpg.Connection
) -> None:
    client = await make_client(**LONG_AGE)
    deadline = int(time.time()) + 2
    row = await seed.project(
        conn,
        project_mode="challenge",
        status="bidding",
        challenge_submission_count=0,
        challenge_submission_deadline=deadline,
        challenge_owner_response_deadline=deadline + 3600,
    )
    address = to_checksum_address(row["project_address"])
    paths = [f"/v1/projects/{address}", "/v1/projects?limit=1"]
    hits_before = hits("getProject") + hits("listProjects")
    seen = set()
    while time.time() < deadline + 1.6:
        for path in paths:
            started = time.time()
            body = await (await client.get(path)).json()
            ended = time.time()
            project = body["items"][0] if "items" in body else body
            status = project["effectiveStatus"]
            seen.add(status)
            # Row 1 up to the deadline (inclusive), row 2 (no submissions) one second later.
            if int(ended) <= deadline:
                assert status == "bidding", (path, started, deadline)
            if int(started) > deadline:
                assert status == "failed", (path, started, deadline)
        await asyncio.sleep(0.05)
    assert seen == {"bidding", "failed"}
    # The reads before the deadline were served from memory.
    assert hits("getProject") + hits("listProjects") - hits_before > 10


async def test_invite_only_projects_are_never_cached_and_stay_hidden_from_strangers(
    make_client: AppFactory, conn: asyncpg.Connection
) -> None:
    client = await make_client(**LONG_AGE)
    owner, agent, stranger = new_user(), new_user(), new_user()
    owner_wallet, agent_wallet, stranger_wallet = seed.address(), seed.address(), seed.address()
    for user, wallet in ((owner, owner_wallet), (agent, agent_wallet), (stranger, stranger_wallet)):
        await seed.link(conn, user.user_id, wallet)
    raw, hidden = await titled_project(
        conn,
        bidding_access="invite_only",
        owner_address=owner_wallet,
        allowlist=[agent_wallet],
        status="bidding",
    )
    path = f"/v1/projects/{hidden}"

    async def statuses() -> dict[str, int]:
        result = {}
        for name, headers in (
            ("anonymous", {}),
            ("stranger", stranger.headers),
            ("agent", agent.headers),
        ):
            detail = await client.get(path, headers=headers)
            milestones = await client.get(f"{path}/milestones", headers=headers)
            assert detail.status == milestones.status
            listing = await (await client.get("/v1/projects", headers=headers)).json()
            listed = hidden in [i["projectAddress"] for i in listing["items"]]
            assert listed == (detail.status == 200)
            result[name] = detail.status
        return result

    for _ in range(3):
        assert await statuses() == {"anonymous": 404, "stranger": 404, "agent": 200}
    assert raw not in cache_of(client).by_project
    # Taken off the allowlist (an indexed change with its event): hidden at once.
    await change(conn, raw, "UPDATE projects SET allowlist = '{}' WHERE project_address = $1")
    assert await statuses() == {"anonymous": 404, "stranger": 404, "agent": 404}
    # Allowlisted again, then the agent's wallet link revoked (no event): hidden at once too.
    await change(
        conn, raw, "UPDATE projects SET allowlist = $2 WHERE project_address = $1", [agent_wallet]
    )
    assert (await statuses())["agent"] == 200
    await conn.execute(
        "UPDATE wallet_links SET revoked_at = now(), revoked_reason = 'user' WHERE user_id = $1",
        agent.user_id,
    )
    assert await statuses() == {"anonymous": 404, "stranger": 404, "agent": 404}


async def test_an_open_project_turning_invite_only_is_hidden_from_cached_viewers(
    make_client: AppFactory, conn: asyncpg.Connection
) -> None:
    a = await make_client(**LONG_AGE)
    b = await make_client(**LONG_AGE)
    owner, stranger = new_user(), new_user()
    owner_wallet = seed.address()
    await seed.link(conn, owner.user_id, owner_wallet)
    await seed.link(conn, stranger.user_id, seed.address())
    raw, address = await titled_project(conn, owner_address=owner_wallet, status="bidding")
    path = f"/v1/projects/{address}"
    for client in (a, b):
        for headers in ({}, stranger.headers, owner.headers):
            assert (await client.get(path, headers=headers)).status == 200
            assert (await client.get(path, headers=headers)).status == 200
        # Anonymous and signed-in answers are cached apart (viewerCanEditMetadata).
        assert {("getProject", raw, True), ("getProject", raw, False)} <= set(
            cache_of(client).entries
        )
    await change(
        conn, raw, "UPDATE projects SET bidding_access = 'invite_only' WHERE project_address = $1"
    )

    async def hidden_everywhere() -> bool:
        statuses = [
            (await c.get(path, headers=h)).status for c in (a, b) for h in ({}, stranger.headers)
        ]
        return statuses == [404] * 4

    await eventually(
        hidden_everywhere, within=1.0, interval=0.02, what="the project hidden everywhere"
    )
    for client in (a, b):
        assert (await client.get(path, headers=owner.headers)).status == 200


async def test_signed_in_draft_reads_are_not_shared_between_viewers(
    make_client: AppFactory, conn: asyncpg.Connection
) -> None:
    client = await make_client(**LONG_AGE)
    owner, stranger = new_user(), new_user()
    owner_wallet = seed.address()
    await seed.link(conn, owner.user_id, owner_wallet)
    await seed.link(conn, stranger.user_id, seed.address())
    _, address = await titled_project(conn, owner_address=owner_wallet, status="draft")
    path = f"/v1/projects/{address}"
    for _ in range(2):
        mine = await (await client.get(path, headers=owner.headers)).json()
        theirs = await (await client.get(path, headers=stranger.headers)).json()
        anonymous = await (await client.get(path)).json()
        assert mine["viewerCanEditMetadata"] is True
        assert theirs["viewerCanEditMetadata"] is False
        assert "viewerCanEditMetadata" not in anonymous


async def test_the_cache_is_bounded_in_entries_and_evicts_least_recently_used(
    make_client: AppFactory, conn: asyncpg.Connection
) -> None:
    client = await make_client(**LONG_AGE, read_cache_max_entries=3)
    addresses = [(await titled_project(conn))[1] for _ in range(5)]
    for address in addresses:
        assert (await client.get(f"/v1/projects/{address}")).status == 200
    cache = cache_of(client)
    assert len(cache.entries) == 3
    kept = [cast(tuple[str, str, bool], key)[1] for key in cache.entries]
    assert kept == [a.lower() for a in addresses[2:]]
    assert cache.bytes == sum(e.size for e in cache.entries.values())
    # Reading the oldest kept entry makes it the newest: the next fill evicts another.
    assert (await client.get(f"/v1/projects/{addresses[2]}")).status == 200
    assert (await client.get(f"/v1/projects/{addresses[0]}")).status == 200
    assert [cast(tuple[str, str, bool], key)[1] for key in cache.entries] == [
        a.lower() for a in (addresses[4], addresses[2], addresses[0])
    ]


async def test_the_cache_is_bounded_in_bytes(
    make_client: AppFactory, conn: asyncpg.Connection
) -> None:
    client = await make_client(**LONG_AGE, read_cache_max_bytes=64 * 1024)
    addresses = [(await titled_project(conn))[1] for _ in range(100)]
    for address in addresses:
        body = await (await client.get(f"/v1/projects/{address}")).read()
    cache = cache_of(client)
    assert 0 < cache.bytes <= 64 * 1024
    assert len(cache.entries) < 100
    assert len(cache.entries) * (len(body) + 400) >= 64 * 1024 - 2 * (len(body) + 400)


async def test_the_follower_skips_other_types_and_clears_everything_on_an_unknown_type(
    make_client: AppFactory, conn: asyncpg.Connection
) -> None:
    """The follower acts on each event's type and subject (it never parses a payload): a chat
    message about a cached project changes nothing cached, a type newer than this code clears
    the whole cache, since it may change any read."""
    client = await make_client(**LONG_AGE)
    raw, address = await titled_project(conn)
    path = f"/v1/projects/{address}"
    assert await title(client, path) == "Before"
    key = ("getProject", raw, True)
    assert key in cache_of(client).entries

    async def followed(event_id: int) -> bool:
        return cache_of(client).position >= event_id

    async with conn.transaction():
        # A chat message's payload is not even well-formed here: nothing reads it.
        (chat,) = await append_raw(conn, [RawEvent(EventType.CHAT_MESSAGE, raw)])
    await eventually(
        lambda: followed(chat), within=2.0, interval=0.02, what="the cache past the chat event"
    )
    assert key in cache_of(client).entries
    await conn.execute(SET_TITLE, raw, "Silent")
    assert await title(client, path) == "Before"  # still served from memory

    async with conn.transaction():
        (future,) = await append_raw(conn, [RawEvent("future.thing", raw)])
    await eventually(
        lambda: followed(future), within=2.0, interval=0.02, what="the cache past the later event"
    )
    assert key not in cache_of(client).entries
    assert await title(client, path) == "Silent"
