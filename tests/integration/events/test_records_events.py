"""Off-chain records through the whole app: one event per change, none for a refused or
repeated write, and the app's own relay delivers them to a subscriber."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis

from marketplace.events.types import BidDraftCreated, BidDraftUpdated, DisputeEvidenceSubmitted
from marketplace.outbox.consumer import EventStream
from marketplace.storage.repositories import events as repo
from tests.api.records.conftest import (
    HASH_A,
    HASH_B,
    error_code,
    linked_party,
    seed_dispute,
    seed_project,
)
from tests.conftest import Servers, make_settings
from tests.integration.events.conftest import collect, stream_ids, warm_shards
from tests.support.apps import app_client


@pytest.fixture
async def client(
    aiohttp_client: Any, servers: Servers, ray_cluster: None, pool: asyncpg.Pool
) -> Any:
    # The app's own relay runs (with a short poll): it is part of what is tested here.
    settings = make_settings(servers, events_relay_poll_interval_ms=50)
    client = await app_client(aiohttp_client, settings)
    await warm_shards(client)
    return client


@pytest.fixture
async def db(servers: Servers, pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(servers.database_url)
    yield conn
    await conn.close()


async def events_of(pool: asyncpg.Pool) -> list[repo.StoredEvent]:
    return await repo.read_after(pool, 0, 100)


async def test_bid_drafts_record_created_then_updated_and_nothing_for_a_repeat(
    client: Any,
    pool: asyncpg.Pool,
    db: asyncpg.Connection,
    redis: aioredis.Redis,
    stream: EventStream,
) -> None:
    owner = await linked_party(client)
    bidder = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    url = f"/v1/projects/{project}/bid-drafts"
    body = {"bidderWalletAddress": bidder.address, "draftHash": HASH_A, "notes": "v1"}

    resp = await client.post(url, json=body, headers=bidder.headers)
    assert resp.status == 200, await resp.text()
    draft = await resp.json()
    resp = await client.post(url, json=body, headers=bidder.headers)  # identical: no write
    assert resp.status == 200
    # Refused writes record nothing either: the owner cannot bid on its own project.
    resp = await client.post(
        url, json={**body, "bidderWalletAddress": owner.address}, headers=owner.headers
    )
    assert await error_code(resp, 403) == "owner_cannot_bid"
    resp = await client.post(url, json={**body, "draftHash": HASH_B}, headers=bidder.headers)
    assert resp.status == 200

    rows = await events_of(pool)
    assert [(r.type, r.subject) for r in rows] == [
        ("bid_draft.created", project),
        ("bid_draft.updated", project),
    ]
    assert rows[0].payload == {
        "draftId": draft["id"],
        "projectAddress": project,
        "bidderAddress": bidder.lower,
        "draftHash": HASH_A,
        "userId": str(bidder.user.user_id),
    }
    assert rows[1].payload["draftHash"] == HASH_B

    # The app's relay moved them to the stream; a subscriber gets them typed.
    events = await collect(stream, 2, types={"bid_draft.created", "bid_draft.updated"})
    assert [type(e) for e in events] == [BidDraftCreated, BidDraftUpdated]
    assert [e.id for e in events] == [r.id for r in rows]
    assert await stream_ids(redis) == [r.id for r in rows]


async def test_dispute_evidence_records_one_event_per_accepted_submission(
    client: Any, pool: asyncpg.Pool, db: asyncpg.Connection
) -> None:
    owner = await linked_party(client)
    worker = await linked_party(client)
    project = await seed_dispute(db, owner.lower, worker.lower, milestone=1)
    url = f"/v1/projects/{project}/dispute-evidence"
    body = {"evidenceHash": HASH_A}

    resp = await client.post(url, json=body, headers=owner.headers)
    assert resp.status == 201, await resp.text()
    evidence = await resp.json()
    resp = await client.post(url, json={"evidenceHash": HASH_B}, headers=owner.headers)
    assert await error_code(resp, 409) == "dispute_evidence_already_submitted"
    resp = await client.post(url, json={"evidenceHash": HASH_B}, headers=worker.headers)
    assert resp.status == 201, await resp.text()

    rows = await events_of(pool)
    assert [r.type for r in rows] == ["dispute_evidence.submitted"] * 2
    assert rows[1].id == rows[0].id + 1  # the refused duplicate took no id at all
    first = DisputeEvidenceSubmitted.model_validate(
        {
            "id": rows[0].id,
            "type": rows[0].type,
            "subject": rows[0].subject,
            "createdAt": rows[0].created_at,
            "payload": rows[0].payload,
        }
    ).payload
    assert first.evidenceId == evidence["id"]
    assert first.projectAddress == project
    assert first.milestoneIndex == 1
    assert first.submitterAddress == owner.lower
    assert first.submitterRole == "owner"
    assert first.evidenceHash == HASH_A
    assert first.userId == str(owner.user.user_id)
    assert rows[1].payload["submitterRole"] == "worker"
