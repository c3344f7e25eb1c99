"""The notification pipeline end to end, from the real producers to delivery rows and jobs:
who gets what, suppression, the rate limit, exactly one row per (event, recipient) across
consumer restarts, and the rate-limiter actor killed mid-burst (docs/notifications.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from typing import Any

import asyncpg
import ray

from marketplace.actors.notification_limiter import ACTOR_NAME, RemoteLimiter
from marketplace.http import keys
from marketplace.http.notification_pipeline import CONSUMER
from marketplace.notifications.consumer import NotificationConsumer, consume_all
from marketplace.storage.pool import connect
from tests.api.messaging.conftest import chat_message, dm, post_dm, project_with_worker
from tests.api.records.conftest import HASH_A, HASH_B, linked_party, seed_dispute, seed_project
from tests.integration.notifications.conftest import (
    Pipeline,
    config,
    deliveries,
    set_email,
)
from tests.support.waiting import eventually

ADMITTED = ("queued", "sent", "failed")


async def test_each_event_type_gives_one_delivery_to_the_other_party(
    client: Any, db: asyncpg.Connection, pipeline: Pipeline
) -> None:
    project = await project_with_worker(client, db)
    owner, worker = project.owner, project.worker
    owner_email, worker_email = await set_email(db, owner), await set_email(db, worker)
    # A claimed project's title names it in the subject.
    await db.execute(
        "INSERT INTO project_metadata (project_address, owner_address, title, project_mode,"
        " bidding_access, claimed_by, claim_mode, hash_version, tx_hash, config_hash)"
        " SELECT project_address, owner_address, 'Bridge audit', project_mode, bidding_access,"
        " $2, 'direct', 'v1_direct', config_hash, config_hash FROM projects"
        " WHERE project_address = $1",
        project.address,
        owner.user.user_id,
    )
    owner_chat = await chat_message(client, owner, project.address, "owner says hi")
    worker_chat = await chat_message(client, worker, project.address, "worker answers")
    direct = await dm(client, owner, worker, "a private word")

    disputed = await seed_dispute(db, owner.address, worker.address, milestone=1)
    resp = await client.post(
        f"/v1/projects/{disputed}/dispute-evidence",
        json={"evidenceHash": HASH_A},
        headers=worker.headers,
    )
    assert resp.status == 201, await resp.text()

    bidder = await linked_party(client)
    bidding = await seed_project(db, owner_address=owner.lower)
    for draft_hash in (HASH_A, HASH_B):  # created, then updated: only the creation mails
        resp = await client.post(
            f"/v1/projects/{bidding}/bid-drafts",
            json={"bidderWalletAddress": bidder.address, "draftHash": draft_hash},
            headers=bidder.headers,
        )
        assert resp.status == 200, await resp.text()
    assert await db.fetchval("SELECT count(*) FROM events WHERE type = 'bid_draft.updated'") == 1

    assert await pipeline.consume() == 5
    rows = await deliveries(db)
    got = [(r["outbox_type"], r["event_type"], r["recipient_user_id"], r["email"]) for r in rows]
    assert got == [
        ("chat.message", "project_chat_message", worker.user.user_id, worker_email),
        ("chat.message", "project_chat_message", owner.user.user_id, owner_email),
        ("dm.message", "direct_message", worker.user.user_id, worker_email),
        ("dispute_evidence.submitted", "dispute_evidence", owner.user.user_id, owner_email),
        ("bid_draft.created", "bid_draft", owner.user.user_id, owner_email),
    ]
    assert {r["status"] for r in rows} == {"queued"}
    assert all(r["reason"] is None and r["channel"] == "email" for r in rows)
    assert rows[0]["subject"] == "New message in the chat of “Bridge audit”"
    assert rows[2]["subject"] == "New direct message from a marketplace user"
    assert rows[3]["subject"] == (f"Dispute evidence submitted on project {disputed}, milestone 1")
    assert rows[4]["subject"] == f"New bid draft on project {bidding}"

    # Each queued row has its job, in the same transaction, naming it.
    jobs = {
        j["id"]: j
        for j in await db.fetch("SELECT id, queue, payload, idempotency_key, status FROM jobs")
    }
    assert len(jobs) == 5
    previews = {str(owner_chat["id"]), str(worker_chat["id"]), str(direct["id"])}
    for row in rows:
        job = jobs[row["job_id"]]
        payload = json.loads(job["payload"]) if isinstance(job["payload"], str) else job["payload"]
        assert job["queue"] == "notifications" and job["status"] == "queued"
        assert payload["deliveryId"] == str(row["id"])
        assert job["idempotency_key"] == f"delivery:{row['id']}"
        if row["event_type"] in ("project_chat_message", "direct_message"):
            assert payload["previewMessageId"] in previews
        if row["event_type"] == "direct_message":
            assert payload["linkPath"] == f"/v1/messages/dm/threads/{direct['threadId']}/messages"
        elif row["event_type"] == "project_chat_message":
            assert re.fullmatch(r"/v1/projects/0x[0-9a-f]{40}/chat/messages", payload["linkPath"])
        else:
            assert re.fullmatch(r"/v1/projects/0x[0-9a-f]{40}", payload["linkPath"])
    # Nothing left: the cursor is past every event.
    assert await pipeline.consume() == 0
    assert len(await deliveries(db)) == 5


async def test_a_burst_of_15_dms_queues_5_and_rate_limits_10(
    client: Any, db: asyncpg.Connection, pipeline: Pipeline
) -> None:
    project = await project_with_worker(client, db)
    sender, recipient = project.owner, project.worker
    await set_email(db, recipient)
    for i in range(15):
        await dm(client, sender, recipient, f"message {i}")
    # The limit is per event type: a chat message to the same recipient still goes.
    await chat_message(client, sender, project.address)
    assert await pipeline.consume() == 16

    rows = await deliveries(db)
    assert len(rows) == 16
    dms = [r for r in rows if r["event_type"] == "direct_message"]
    assert [r["status"] for r in dms] == ["queued"] * 5 + ["rate_limited"] * 10
    assert all(r["recipient_user_id"] == recipient.user.user_id for r in rows)
    assert [r["status"] for r in rows if r["event_type"] == "project_chat_message"] == ["queued"]
    assert all(r["job_id"] is None for r in dms[5:])
    assert await db.fetchval("SELECT count(*) FROM jobs WHERE queue = 'notifications'") == 6


async def test_a_per_type_override_raises_one_types_limit(
    client: Any, db: asyncpg.Connection, make_pipeline: Any
) -> None:
    pipeline = await make_pipeline(
        '{"direct_message": "7/3600", "default": "2/3600"}', max_attempts=3
    )
    project = await project_with_worker(client, db)
    await set_email(db, project.worker)
    for i in range(9):
        await dm(client, project.owner, project.worker, f"m{i}")
    for _ in range(3):
        await chat_message(client, project.owner, project.address)
    await pipeline.consume()
    counts = await db.fetch(
        "SELECT event_type, status, count(*) AS n FROM notification_deliveries"
        " GROUP BY 1, 2 ORDER BY 1, 2"
    )
    assert [(r["event_type"], r["status"], r["n"]) for r in counts] == [
        ("direct_message", "queued", 7),
        ("direct_message", "rate_limited", 2),
        ("project_chat_message", "queued", 2),
        ("project_chat_message", "rate_limited", 1),
    ]
    # MARKETPLACE_NOTIFICATION_MAX_ATTEMPTS reaches every job.
    assert await db.fetchval("SELECT array_agg(DISTINCT max_attempts) FROM jobs") == [3]


async def test_suppression_reasons_and_their_precedence(
    client: Any, db: asyncpg.Connection, pipeline: Pipeline
) -> None:
    # No verified address: no_email.
    plain = await project_with_worker(client, db)
    await dm(client, plain.owner, plain.worker)
    # Muted the sender: muted (also with an address and everything else allowed).
    muting = await project_with_worker(client, db)
    await set_email(db, muting.worker)
    resp = await client.post(
        "/v1/messages/mute",
        json={"mutedUserId": str(muting.owner.user.user_id)},
        headers=muting.worker.headers,
    )
    assert resp.status == 200
    await dm(client, muting.owner, muting.worker)
    # Blocked the sender: a block refuses DMs, but project chat still reaches the other party.
    blocking = await project_with_worker(client, db)
    await set_email(db, blocking.worker)
    resp = await client.post(
        "/v1/messages/block",
        json={"blockedUserId": str(blocking.owner.user.user_id)},
        headers=blocking.worker.headers,
    )
    assert resp.status == 200
    await chat_message(client, blocking.owner, blocking.address)
    assert (await post_dm(client, blocking.owner, blocking.worker.user.user_id)).status == 403
    # Unsubscribed from direct messages (preference email=false): unsubscribed; chat still goes.
    unsubscribed = await project_with_worker(client, db)
    await set_email(db, unsubscribed.worker)
    await db.execute(
        "INSERT INTO notification_preferences (user_id, event_type, email)"
        " VALUES ($1, 'direct_message', false), ($1, 'project_chat_message', true)",
        unsubscribed.worker.user.user_id,
    )
    await dm(client, unsubscribed.owner, unsubscribed.worker)
    await chat_message(client, unsubscribed.owner, unsubscribed.address)
    # Everything at once (no address, muted, blocked, unsubscribed): blocked wins.
    everything = await project_with_worker(client, db)
    for kind, field in (("mute", "mutedUserId"), ("block", "blockedUserId")):
        resp = await client.post(
            f"/v1/messages/{kind}",
            json={field: str(everything.owner.user.user_id)},
            headers=everything.worker.headers,
        )
        assert resp.status == 200
    await db.execute(
        "INSERT INTO notification_preferences (user_id, event_type, email)"
        " VALUES ($1, 'project_chat_message', false)",
        everything.worker.user.user_id,
    )
    await chat_message(client, everything.owner, everything.address)

    await pipeline.consume()
    rows = {
        (r["recipient_user_id"], r["event_type"]): (r["status"], r["reason"], r["job_id"])
        for r in await deliveries(db)
    }
    assert rows == {
        (plain.worker.user.user_id, "direct_message"): ("suppressed", "no_email", None),
        (muting.worker.user.user_id, "direct_message"): ("suppressed", "muted", None),
        (blocking.worker.user.user_id, "project_chat_message"): ("suppressed", "blocked", None),
        (unsubscribed.worker.user.user_id, "direct_message"): (
            "suppressed",
            "unsubscribed",
            None,
        ),
        (unsubscribed.worker.user.user_id, "project_chat_message"): (
            "queued",
            None,
            rows[(unsubscribed.worker.user.user_id, "project_chat_message")][2],
        ),
        (everything.worker.user.user_id, "project_chat_message"): ("suppressed", "blocked", None),
    }
    assert rows[(unsubscribed.worker.user.user_id, "project_chat_message")][2] is not None
    assert await db.fetchval("SELECT count(*) FROM jobs") == 1


async def test_suppressed_deliveries_do_not_use_up_the_limit(
    client: Any, db: asyncpg.Connection, pipeline: Pipeline
) -> None:
    project = await project_with_worker(client, db)
    await set_email(db, project.worker)
    await db.execute(
        "INSERT INTO notification_preferences (user_id, event_type, email)"
        " VALUES ($1, 'direct_message', false)",
        project.worker.user.user_id,
    )
    for _ in range(6):
        await dm(client, project.owner, project.worker)
    await pipeline.consume()
    await db.execute("DELETE FROM notification_preferences")
    for _ in range(6):
        await dm(client, project.owner, project.worker)
    await pipeline.consume()
    statuses = [r["status"] for r in await deliveries(db)]
    assert statuses == ["suppressed"] * 6 + ["queued"] * 5 + ["rate_limited"]


async def test_events_without_a_reachable_recipient_write_nothing(
    client: Any, db: asyncpg.Connection, pipeline: Pipeline
) -> None:
    project = await project_with_worker(client, db)
    await set_email(db, project.worker)
    await set_email(db, project.owner)
    await chat_message(client, project.owner, project.address)
    # The worker's link revoked: nobody is linked to the selected worker wallet any more.
    await db.execute(
        "UPDATE wallet_links SET revoked_at = now(), revoked_reason = 'user' WHERE user_id = $1",
        project.worker.user.user_id,
    )
    assert await pipeline.consume() == 1
    assert await deliveries(db) == []
    assert await db.fetchval("SELECT last_event_id FROM notification_consumer_cursor") > 0


async def test_a_restarted_consumer_resumes_without_duplicates_or_gaps(
    client: Any, db: asyncpg.Connection, servers: Any
) -> None:
    project = await project_with_worker(client, db)
    await set_email(db, project.worker)
    limiter = RemoteLimiter(client.app[keys.ACTORS])

    def consumer() -> NotificationConsumer:
        return NotificationConsumer(servers.database_url, limiter, config("100/3600"))

    async def count() -> int:
        return int(await db.fetchval("SELECT count(*) FROM notification_deliveries"))

    first, standby = consumer(), consumer()
    tasks = [asyncio.create_task(first.run()), asyncio.create_task(standby.run())]
    try:
        for i in range(4):
            await dm(client, project.owner, project.worker, f"before {i}")
        await eventually(lambda: _equals(count, 4), within=30, what="4 deliveries")
        assert [first.active, standby.active].count(True) == 1  # one lock holder
        active = 0 if first.active else 1
        tasks[active].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tasks[active]
        # Sent while the active consumer is gone: the standby takes over and catches up.
        for i in range(4):
            await dm(client, project.owner, project.worker, f"after {i}")
        await eventually(lambda: _equals(count, 8), within=30, what="8 deliveries")
        assert (standby if active == 0 else first).active
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # Read everything again from the start (as after a lost cursor): the rows are unique per
    # (event, recipient), so nothing is written or enqueued twice.
    await db.execute("UPDATE notification_consumer_cursor SET last_event_id = 0")
    again = consumer()
    conn = await connect(servers.database_url)
    try:
        assert await consume_all(again, conn) == 8
    finally:
        await conn.close()
    assert again.deliveries == 0
    rows = await deliveries(db)
    dm_events = await db.fetch("SELECT id FROM events WHERE type = 'dm.message' ORDER BY id")
    assert [r["event_id"] for r in rows] == [e["id"] for e in dm_events]
    assert {r["status"] for r in rows} == {"queued"}
    assert await db.fetchval("SELECT count(*) FROM jobs") == 8


async def _equals(count: Any, expected: int) -> bool:
    value = await count()
    assert value <= expected, f"{value} deliveries, more than {expected}"
    return bool(value == expected)


async def test_the_limiter_killed_mid_burst_keeps_the_limit_and_loses_nothing(
    client: Any, db: asyncpg.Connection, servers: Any
) -> None:
    project = await project_with_worker(client, db)
    await set_email(db, project.worker)
    limiter = RemoteLimiter(client.app[keys.ACTORS])
    before = await limiter.status()
    consumer = NotificationConsumer(servers.database_url, limiter, config("5/3600"))
    task = asyncio.create_task(consumer.run())

    async def admitted() -> int:
        return int(
            await db.fetchval(
                "SELECT count(*) FROM notification_deliveries WHERE status = any($1)",
                list(ADMITTED),
            )
        )

    try:
        for i in range(3):
            await dm(client, project.owner, project.worker, f"early {i}")
        await eventually(lambda: _at_least(admitted, 3), within=30, what="3 queued deliveries")
        # The actor's window for this recipient now holds 3; kill it (Ray restarts it).
        ray.kill(ray.get_actor(ACTOR_NAME, namespace="marketplace-test"), no_restart=False)
        for i in range(12):
            await dm(client, project.owner, project.worker, f"late {i}")

        async def all_rows() -> bool:
            n = await db.fetchval("SELECT count(*) FROM notification_deliveries")
            return bool(n == 15)

        await eventually(all_rows, within=60, what="15 deliveries")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    after = await limiter.status()
    assert after.pid != before.pid  # it was restarted, and rebuilt the window from rows
    assert after.rebuilt_keys >= 1
    rows = await deliveries(db)
    assert len(rows) == 15
    assert len({r["event_id"] for r in rows}) == 15
    assert [r["status"] for r in rows] == ["queued"] * 5 + ["rate_limited"] * 10


async def _at_least(count: Any, expected: int) -> bool:
    return bool(await count() >= expected)


async def test_the_app_runs_the_consumer_it_declares(make_client: Any) -> None:
    client = await make_client(notification_pipeline_enabled=True)
    conn = await asyncpg.connect(client.app[keys.SETTINGS].database_url)
    try:
        project = await project_with_worker(client, conn)
        await set_email(conn, project.worker)
        await dm(client, project.owner, project.worker)

        async def delivered() -> bool:
            rows = await deliveries(conn)
            return len(rows) == 1 and rows[0]["status"] == "queued"

        await eventually(delivered, within=30, what="the app's consumer wrote the delivery")
        assert client.app[CONSUMER].active
    finally:
        await conn.close()
