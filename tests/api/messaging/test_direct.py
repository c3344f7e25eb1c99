"""Direct messages through HTTP: the shared-project rule (each kind of interaction, through
wallets linked now), blocks, the one thread per pair (also under concurrent first messages),
the thread list from each side, and participant-only reads."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import asyncpg

from tests.api.messaging.conftest import (
    BODY,
    Project,
    dm,
    error_code,
    insert_bid_draft,
    insert_submission,
    linked_party,
    post_dm,
    project_with_worker,
    seed_project,
    signed_in,
)
from tests.api.records.conftest import Party

THREADS = "/v1/messages/dm/threads"
CANARY = "check badword-canary please"


def thread_path(thread_id: str) -> str:
    return f"{THREADS}/{thread_id}/messages"


async def test_owner_and_worker_exchange_messages_in_one_thread(
    client: Any, db: asyncpg.Connection
) -> None:
    project = await project_with_worker(client, db)
    owner, worker = project.owner, project.worker
    first = await dm(client, owner, worker, "hello worker")
    assert set(first) == {
        "id",
        "kind",
        "threadId",
        "senderUserId",
        "recipientUserId",
        "body",
        "bodyStatus",
        "createdAt",
    }
    assert first["kind"] == "direct"
    assert first["senderUserId"] == str(owner.user.user_id)
    assert first["recipientUserId"] == str(worker.user.user_id)
    assert first["body"] == "hello worker"
    assert first["bodyStatus"] == "visible"
    reply = await dm(client, worker, owner, "hello owner")
    assert reply["threadId"] == first["threadId"]
    assert await db.fetchval("SELECT count(*) FROM dm_threads") == 1

    for party in (owner, worker):
        resp = await client.get(thread_path(first["threadId"]), headers=party.headers)
        assert resp.status == 200, await resp.text()
        assert await resp.json() == {"items": [reply, first], "count": 2, "nextCursor": None}

    rows = await db.fetch("SELECT type, subject, payload::text AS payload FROM events ORDER BY id")
    assert [(r["type"], r["subject"]) for r in rows] == [
        ("dm.message", f"thread:{first['threadId']}"),
        ("dm.message", f"thread:{first['threadId']}"),
    ]
    assert json.loads(rows[1]["payload"]) == {
        "messageId": reply["id"],
        "threadId": first["threadId"],
        "senderUserId": str(worker.user.user_id),
        "recipientUserId": str(owner.user.user_id),
    }


async def test_thread_list_from_each_side(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    owner, worker = project.owner, project.worker
    other = await project_with_worker(client, db, owner_address=owner.lower)
    resp = await client.put(
        "/v1/username",
        json={"userId": str(worker.user.user_id), "username": "the_worker"},
        headers=worker.headers,
    )
    assert resp.status in (200, 201), await resp.text()

    with_worker = await dm(client, owner, worker)
    with_other = await dm(client, other.worker, owner)
    resp = await client.get(THREADS, headers=owner.headers)
    assert resp.status == 200, await resp.text()
    page = await resp.json()
    assert page["count"] == 2 and page["nextCursor"] is None
    assert [item["threadId"] for item in page["items"]] == [
        with_other["threadId"],
        with_worker["threadId"],
    ]
    newest, older = page["items"]
    assert set(newest) == {"threadId", "otherUserId", "otherUsername", "lastMessageAt", "muted"}
    assert newest["otherUserId"] == str(other.worker.user.user_id)
    assert newest["otherUsername"] is None
    assert newest["lastMessageAt"] == with_other["createdAt"]
    assert newest["muted"] is False
    assert older["otherUserId"] == str(worker.user.user_id)
    assert older["otherUsername"] == "the_worker"

    # A new message moves its thread to the top and updates lastMessageAt.
    latest = await dm(client, worker, owner)
    resp = await client.get(THREADS, params={"limit": "1"}, headers=owner.headers)
    page = await resp.json()
    assert [item["threadId"] for item in page["items"]] == [with_worker["threadId"]]
    assert page["items"][0]["lastMessageAt"] == latest["createdAt"]
    assert page["nextCursor"] is not None
    resp = await client.get(
        THREADS, params={"limit": "1", "cursor": page["nextCursor"]}, headers=owner.headers
    )
    page = await resp.json()
    assert [item["threadId"] for item in page["items"]] == [with_other["threadId"]]
    assert page["nextCursor"] is None

    # The worker sees only its own thread, from its side.
    resp = await client.get(THREADS, headers=worker.headers)
    items = (await resp.json())["items"]
    assert [(i["threadId"], i["otherUserId"]) for i in items] == [
        (with_worker["threadId"], str(owner.user.user_id))
    ]
    # Mutes show on the muting side only.
    resp = await client.post(
        "/v1/messages/mute", json={"mutedUserId": str(owner.user.user_id)}, headers=worker.headers
    )
    assert resp.status == 200
    resp = await client.get(THREADS, headers=worker.headers)
    assert [i["muted"] for i in (await resp.json())["items"]] == [True]
    resp = await client.get(THREADS, headers=owner.headers)
    assert [i["muted"] for i in (await resp.json())["items"]] == [False, False]
    # A user without threads gets an empty page.
    lonely = await signed_in(client)
    resp = await client.get(THREADS, headers=lonely.headers)
    assert await resp.json() == {"items": [], "count": 0, "nextCursor": None}
    for bad in ({"limit": "0"}, {"limit": "101"}, {"cursor": "bm9wZQ"}):
        resp = await client.get(THREADS, params=bad, headers=owner.headers)
        assert await error_code(resp, 400) == "invalid_request"


async def test_thread_messages_are_for_participants_only(
    client: Any, db: asyncpg.Connection
) -> None:
    project = await project_with_worker(client, db)
    sent = await dm(client, project.owner, project.worker)
    stranger = await linked_party(client)
    resp = await client.get(thread_path(sent["threadId"]), headers=stranger.headers)
    assert await error_code(resp, 404) == "thread_not_found"
    resp = await client.get(thread_path(str(uuid.uuid4())), headers=project.owner.headers)
    assert await error_code(resp, 404) == "thread_not_found"
    resp = await client.get(thread_path("not-a-uuid"), headers=project.owner.headers)
    assert await error_code(resp, 400) == "invalid_request"
    resp = await client.get(thread_path(sent["threadId"]))
    assert await error_code(resp, 401) == "unauthorized"


async def test_thread_paging(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    ids = [(await dm(client, project.owner, project.worker, f"m{i}"))["id"] for i in range(3)]
    thread = (await db.fetchval("SELECT thread_id FROM dm_threads")).hex
    path = thread_path(str(uuid.UUID(thread)))
    resp = await client.get(path, params={"limit": "2"}, headers=project.worker.headers)
    page = await resp.json()
    assert [i["id"] for i in page["items"]] == ids[:0:-1]
    resp = await client.get(
        path, params={"limit": "2", "cursor": page["nextCursor"]}, headers=project.worker.headers
    )
    page = await resp.json()
    assert [i["id"] for i in page["items"]] == ids[:1]
    assert page["nextCursor"] is None
    resp = await client.get(path, params={"cursor": "x"}, headers=project.worker.headers)
    assert await error_code(resp, 400) == "invalid_request"


async def _shared_by(client: Any, db: asyncpg.Connection, kind: str) -> tuple[Party, Party]:
    """(owner, other) who share one project as owner and ``kind``."""
    owner = await linked_party(client)
    other = await linked_party(client)
    if kind == "worker":
        await seed_project(
            db, owner_address=owner.lower, selected_builder_address=other.lower, status="building"
        )
    elif kind == "bid_draft":
        project = await seed_project(db, owner_address=owner.lower)
        await insert_bid_draft(db, project, other.lower)
    else:
        project = await seed_project(
            db, owner_address=owner.lower, project_mode="challenge", challenge_submission_count=1
        )
        await insert_submission(db, project, other.lower)
    return owner, other


async def test_every_kind_of_shared_project_allows_both_directions(
    client: Any, db: asyncpg.Connection
) -> None:
    for kind in ("worker", "bid_draft", "submission"):
        owner, other = await _shared_by(client, db, kind)
        await dm(client, owner, other)
        await dm(client, other, owner)


async def test_without_a_shared_project_dms_are_refused(
    client: Any, db: asyncpg.Connection
) -> None:
    owner = await linked_party(client)
    bidder = await linked_party(client)
    fellow = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    # Two bidders of one project share nothing: only the owner is on the other side.
    await insert_bid_draft(db, project, bidder.lower)
    await insert_bid_draft(db, project, fellow.lower)
    resp = await post_dm(client, bidder, fellow.user.user_id)
    assert await error_code(resp, 403) == "no_shared_project"
    # A user without wallets, and a user the service has never seen.
    walletless = await signed_in(client)
    resp = await post_dm(client, owner, walletless.user_id)
    assert await error_code(resp, 403) == "no_shared_project"
    resp = await post_dm(client, owner, uuid.uuid4())
    assert await error_code(resp, 403) == "no_shared_project"
    # A bid draft for a project that is not indexed (any more) counts for nothing.
    lost = "0x" + "ab" * 20
    await insert_bid_draft(db, lost, fellow.lower)
    resp = await post_dm(client, owner, fellow.user.user_id)
    assert resp.status == 201  # the draft on the indexed project still counts
    assert await db.fetchval("SELECT count(*) FROM messages") == 1


async def test_shared_project_counts_only_wallets_linked_now(
    client: Any, db: asyncpg.Connection
) -> None:
    project: Project = await project_with_worker(client, db)
    await dm(client, project.owner, project.worker)
    resp = await client.delete(
        f"/v1/wallet-links/{project.worker.address}", headers=project.worker.headers
    )
    assert resp.status in (200, 204)
    resp = await post_dm(client, project.owner, project.worker.user.user_id)
    assert await error_code(resp, 403) == "no_shared_project"
    resp = await post_dm(client, project.worker, project.owner.user.user_id)
    assert await error_code(resp, 403) == "no_shared_project"


async def test_to_yourself_is_invalid(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    resp = await post_dm(client, project.owner, project.owner.user.user_id)
    body = await resp.json()
    assert await error_code(resp, 400) == "invalid_request"
    assert body["details"][0]["field"] == "recipientUserId"


async def test_blocks_refuse_both_directions_until_removed(
    client: Any, db: asyncpg.Connection
) -> None:
    project = await project_with_worker(client, db)
    owner, worker = project.owner, project.worker
    await dm(client, owner, worker)
    resp = await client.post(
        "/v1/messages/block",
        json={"blockedUserId": str(worker.user.user_id)},
        headers=owner.headers,
    )
    assert resp.status == 200
    resp = await post_dm(client, worker, owner.user.user_id)
    assert await error_code(resp, 403) == "blocked"
    resp = await post_dm(client, owner, worker.user.user_id)
    assert await error_code(resp, 403) == "blocked"
    # The thread stays readable.
    resp = await client.get(THREADS, headers=worker.headers)
    assert (await resp.json())["count"] == 1
    resp = await client.delete(f"/v1/messages/block/{worker.user.user_id}", headers=owner.headers)
    assert resp.status == 204
    await dm(client, worker, owner)


async def test_no_shared_project_answers_before_blocked(
    client: Any, db: asyncpg.Connection
) -> None:
    stranger = await linked_party(client)
    target = await linked_party(client)
    resp = await client.post(
        "/v1/messages/block",
        json={"blockedUserId": str(stranger.user.user_id)},
        headers=target.headers,
    )
    assert resp.status == 200
    resp = await post_dm(client, stranger, target.user.user_id)
    assert await error_code(resp, 403) == "no_shared_project"


async def test_body_limits(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    for bad in ("", "x" * 4001):
        resp = await post_dm(client, project.owner, project.worker.user.user_id, bad)
        assert await error_code(resp, 400) == "invalid_request"
    resp = await client.post(
        "/v1/messages/dm",
        json={"recipientUserId": "nope", "body": BODY},
        headers=project.owner.headers,
    )
    assert await error_code(resp, 400) == "invalid_request"
    await dm(client, project.owner, project.worker, "x" * 4000)


async def test_concurrent_first_messages_share_one_thread(
    client: Any, db: asyncpg.Connection
) -> None:
    project = await project_with_worker(client, db)
    owner, worker = project.owner, project.worker
    for _ in range(3):  # each round races the first message of a new pair
        await db.execute("TRUNCATE dm_threads CASCADE")
        results = await asyncio.gather(
            *(
                post_dm(client, sender, recipient.user.user_id, f"race {n}")
                for n in range(4)
                for sender, recipient in ((owner, worker), (worker, owner))
            )
        )
        sent = [await resp.json() for resp in results]
        assert all(resp.status == 201 for resp in results), sent
        assert len({message["threadId"] for message in sent}) == 1
        assert await db.fetchval("SELECT count(*) FROM dm_threads") == 1
        assert await db.fetchval("SELECT count(*) FROM messages") == 8


async def test_offending_dm_gets_422_and_an_offense(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    resp = await post_dm(client, project.owner, project.worker.user.user_id, CANARY)
    assert await error_code(resp, 422) == "offensive_content"
    assert await db.fetchval("SELECT count(*) FROM messages") == 0
    assert await db.fetchval("SELECT count(*) FROM dm_threads") == 0
    offenses = await db.fetch("SELECT user_id, context FROM moderation_offenses")
    assert [tuple(r) for r in offenses] == [(project.owner.user.user_id, "direct")]


async def test_refused_dms_record_no_offense(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    stranger = await linked_party(client)
    resp = await post_dm(client, stranger, project.owner.user.user_id, CANARY)
    assert await error_code(resp, 403) == "no_shared_project"
    resp = await post_dm(client, stranger, stranger.user.user_id, CANARY)
    assert await error_code(resp, 400) == "invalid_request"
    resp = await client.post(
        "/v1/messages/block",
        json={"blockedUserId": str(project.owner.user.user_id)},
        headers=project.worker.headers,
    )
    assert resp.status == 200
    resp = await post_dm(client, project.owner, project.worker.user.user_id, CANARY)
    assert await error_code(resp, 403) == "blocked"
    assert await db.fetchval("SELECT count(*) FROM moderation_offenses") == 0
