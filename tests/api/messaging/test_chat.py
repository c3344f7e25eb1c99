"""Project chat through HTTP: the send rules in their answer order, the reads, paging, the
stored event, and the term filter's place in the order."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

import asyncpg

from marketplace.http import keys
from marketplace.messaging.chat import PostChatMessage
from tests.api.identity.conftest import agent, create_key
from tests.api.messaging.conftest import (
    BODY,
    chat_message,
    chat_path,
    error_code,
    linked_party,
    post_chat,
    project_with_worker,
    seed_project,
)
from tests.api.records.conftest import link_another, random_address

CANARY = "check badword-canary please"


async def test_owner_and_worker_chat_and_read_newest_first(
    client: Any, db: asyncpg.Connection
) -> None:
    project = await project_with_worker(client, db)
    first = await chat_message(client, project.owner, project.address, "hi worker")
    assert set(first) == {
        "id",
        "kind",
        "projectAddress",
        "senderUserId",
        "senderWalletAddress",
        "body",
        "bodyStatus",
        "createdAt",
    }
    assert first["kind"] == "project_chat"
    assert first["projectAddress"].lower() == project.address
    assert first["projectAddress"] != project.address  # EIP-55 checksummed
    assert first["senderUserId"] == str(project.owner.user.user_id)
    assert first["senderWalletAddress"] == project.owner.address
    assert first["body"] == "hi worker"
    assert first["bodyStatus"] == "visible"
    second = await chat_message(client, project.worker, project.address, "hi owner")
    assert second["senderWalletAddress"] == project.worker.address
    assert datetime.fromisoformat(second["createdAt"]) >= datetime.fromisoformat(first["createdAt"])

    for party in (project.owner, project.worker):
        resp = await client.get(chat_path(project.address), headers=party.headers)
        assert resp.status == 200, await resp.text()
        page = await resp.json()
        assert page == {"items": [second, first], "count": 2, "nextCursor": None}


async def test_send_stores_message_and_event_in_one_go(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    sent = await chat_message(client, project.worker, project.address)
    rows = await db.fetch("SELECT type, subject, payload::text AS payload FROM events")
    assert [(r["type"], r["subject"]) for r in rows] == [("chat.message", project.address)]
    assert json.loads(rows[0]["payload"]) == {
        "messageId": sent["id"],
        "projectAddress": project.address,
        "senderUserId": str(project.worker.user.user_id),
        "senderWalletAddress": project.worker.lower,
    }
    stored = await db.fetchrow("SELECT kind, body, sender_wallet_address FROM messages")
    assert stored is not None
    assert tuple(stored) == ("project_chat", BODY, project.worker.lower)


async def test_header_is_required_and_must_equal_the_sender(
    client: Any, db: asyncpg.Connection
) -> None:
    project = await project_with_worker(client, db)
    resp = await post_chat(client, project.owner, project.address, header=None)
    body = await resp.json()
    assert await error_code(resp, 400) == "invalid_request"
    assert body["details"][0]["location"] == "header"
    assert body["details"][0]["field"] == "x-user-wallet-address"
    resp = await post_chat(client, project.owner, project.address, header=project.worker.address)
    assert await error_code(resp, 400) == "invalid_request"
    resp = await post_chat(client, project.owner, project.address, header="not-an-address")
    assert await error_code(resp, 400) == "invalid_request"
    # Any case in the header: it is the same wallet.
    resp = await post_chat(client, project.owner, project.address, header=project.owner.lower)
    assert resp.status == 201, await resp.text()
    # The header is checked before the project: a 400 even for an unknown project.
    resp = await post_chat(client, project.owner, random_address(), header=None)
    assert await error_code(resp, 400) == "invalid_request"
    assert await db.fetchval("SELECT count(*) FROM messages") == 1


async def test_send_rules_answer_in_order(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    stranger = await linked_party(client)

    # Not indexed, or invite-only and hidden from the caller: 404 before the wallet is looked at.
    resp = await post_chat(client, stranger, random_address(), wallet=project.owner.address)
    assert await error_code(resp, 404) == "project_not_found"
    hidden = await seed_project(
        db,
        owner_address=project.owner.lower,
        selected_builder_address=project.worker.lower,
        bidding_access="invite_only",
        status="building",
    )
    resp = await post_chat(client, stranger, hidden, wallet=project.owner.address)
    assert await error_code(resp, 404) == "project_not_found"
    # The selected worker of an invite-only project sees it and chats there.
    resp = await post_chat(client, project.worker, hidden)
    assert resp.status == 201, await resp.text()

    # Visible project, wallet not linked to the caller (even the owner's wallet).
    resp = await post_chat(client, stranger, project.address, wallet=project.owner.address)
    assert await error_code(resp, 403) == "wallet_not_linked"
    # The caller's own wallet, but neither owner nor worker.
    resp = await post_chat(client, stranger, project.address)
    assert await error_code(resp, 403) == "not_project_party"
    # A second wallet of the owner that is not the owner wallet.
    spare = await link_another(client, project.owner)
    resp = await post_chat(client, project.owner, project.address, wallet=spare.address)
    assert await error_code(resp, 403) == "not_project_party"


async def test_no_chat_before_a_worker_is_selected(client: Any, db: asyncpg.Connection) -> None:
    owner = await linked_party(client)
    bidder = await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    resp = await post_chat(client, owner, project)
    assert await error_code(resp, 409) == "worker_not_selected"
    resp = await post_chat(client, bidder, project)
    assert await error_code(resp, 403) == "not_project_party"
    # The owner still reads the (empty) chat; the bidder may not.
    resp = await client.get(chat_path(project), headers=owner.headers)
    assert resp.status == 200
    assert (await resp.json())["items"] == []
    resp = await client.get(chat_path(project), headers=bidder.headers)
    assert await error_code(resp, 403) == "not_project_party"
    assert await db.fetchval("SELECT count(*) FROM messages") == 0


async def test_a_revoked_link_ends_chat_rights(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    await chat_message(client, project.worker, project.address)
    resp = await client.delete(
        f"/v1/wallet-links/{project.worker.address}", headers=project.worker.headers
    )
    assert resp.status in (200, 204), await resp.text()
    resp = await post_chat(client, project.worker, project.address)
    assert await error_code(resp, 403) == "wallet_not_linked"
    resp = await client.get(chat_path(project.address), headers=project.worker.headers)
    assert await error_code(resp, 403) == "not_project_party"


async def test_reads_are_for_parties_only(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    await chat_message(client, project.owner, project.address)
    stranger = await linked_party(client)
    resp = await client.get(chat_path(project.address), headers=stranger.headers)
    assert await error_code(resp, 403) == "not_project_party"
    resp = await client.get(chat_path(random_address()), headers=stranger.headers)
    assert await error_code(resp, 404) == "project_not_found"
    resp = await client.get(chat_path(project.address))
    assert await error_code(resp, 401) == "unauthorized"
    resp = await client.get(chat_path("0x1234"), headers=stranger.headers)
    assert await error_code(resp, 400) == "invalid_request"


async def test_agent_key_sends_for_its_user(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    key = await create_key(client, project.owner.user)
    resp = await post_chat(client, project.owner, project.address, headers=agent(key["secret"]))
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["senderUserId"] == str(project.owner.user.user_id)


async def test_body_limits(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    for bad in ("", "x" * 4001):
        resp = await post_chat(client, project.owner, project.address, bad)
        assert await error_code(resp, 400) == "invalid_request"
    resp = await post_chat(client, project.owner, project.address, "é" * 4000)
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["body"] == "é" * 4000


async def test_paging_walks_every_message_once(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    sent = [
        (await chat_message(client, project.owner, project.address, f"m{i}"))["id"]
        for i in range(5)
    ]
    seen: list[str] = []
    cursor = None
    while True:
        query = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        resp = await client.get(
            chat_path(project.address), params=query, headers=project.worker.headers
        )
        assert resp.status == 200, await resp.text()
        page = await resp.json()
        assert page["count"] == len(page["items"]) <= 2
        seen.extend(item["id"] for item in page["items"])
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == sent[::-1]
    for bad in ({"limit": "0"}, {"limit": "101"}, {"cursor": "bm9wZQ"}):
        resp = await client.get(
            chat_path(project.address), params=bad, headers=project.owner.headers
        )
        assert await error_code(resp, 400) == "invalid_request"


async def test_offending_party_gets_422_and_an_offense(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    resp = await post_chat(client, project.owner, project.address, CANARY)
    assert await error_code(resp, 422) == "offensive_content"
    assert await db.fetchval("SELECT count(*) FROM messages") == 0
    offenses = await db.fetch("SELECT user_id, context FROM moderation_offenses")
    assert [tuple(r) for r in offenses] == [(project.owner.user.user_id, "project_chat")]


async def test_refused_sends_record_no_offense(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    stranger = await linked_party(client)
    resp = await post_chat(client, stranger, project.address, CANARY)
    assert await error_code(resp, 403) == "not_project_party"
    resp = await post_chat(client, stranger, project.address, CANARY, wallet=project.owner.address)
    assert await error_code(resp, 403) == "wallet_not_linked"
    resp = await post_chat(client, stranger, random_address(), CANARY)
    assert await error_code(resp, 404) == "project_not_found"
    owner_only = await seed_project(db, owner_address=project.owner.lower)
    resp = await post_chat(client, project.owner, owner_only, CANARY)
    assert await error_code(resp, 409) == "worker_not_selected"
    assert await db.fetchval("SELECT count(*) FROM moderation_offenses") == 0
    assert await db.fetchval("SELECT count(*) FROM messages") == 0


async def test_a_resent_command_stores_its_message_once(
    client: Any, db: asyncpg.Connection
) -> None:
    """What `run_idempotent` relies on when a shard dies mid-send: the same command again
    answers with the message the first run stored, and writes nothing more."""
    project = await project_with_worker(client, db)
    command = PostChatMessage(
        project.address, uuid.uuid4(), project.owner.user.user_id, project.owner.lower, "once"
    )
    shards = client.app[keys.PROJECT_SHARDS]
    first = await shards.run(command)
    again = await shards.run(command)
    assert again == first
    assert first.id == command.message_id and first.body == "once"
    assert await db.fetchval("SELECT count(*) FROM messages") == 1
    assert await db.fetchval("SELECT count(*) FROM events WHERE type = 'chat.message'") == 1
