"""Every messaging route for the anonymous caller and the stranger; the guards of the two sends
(verified e-mail, legal assent, suspension) and their absence elsewhere; the OpenAPI
description of the routes."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
from openapi_spec_validator import validate

from tests.api.messaging.conftest import (
    BODY,
    anonymous_paths,
    chat_message,
    chat_path,
    dm,
    error_code,
    linked_party,
    post_chat,
    post_dm,
    project_with_worker,
    report,
)
from tests.conftest import bearer

CANARY = "badword-canary"


async def test_anonymous_and_bad_credentials_are_refused_everywhere(client: Any) -> None:
    for method, path, body in anonymous_paths():
        resp = await client.request(method, path, json=body)
        assert await error_code(resp, 401) == "unauthorized", (method, path)
        resp = await client.request(method, path, json=body, headers=bearer("not-a-jwt"))
        assert await error_code(resp, 401) == "unauthorized", (method, path)


async def test_a_stranger_gets_nothing_from_anyone_elses_conversations(
    client: Any, db: asyncpg.Connection
) -> None:
    project = await project_with_worker(client, db)
    in_chat = await chat_message(client, project.owner, project.address)
    in_dm = await dm(client, project.owner, project.worker)
    created = await (await report(client, project.worker, in_dm["id"])).json()
    stranger = await linked_party(client)
    headers = stranger.headers

    resp = await post_chat(client, stranger, project.address)
    assert await error_code(resp, 403) == "not_project_party"
    resp = await client.get(chat_path(project.address), headers=headers)
    assert await error_code(resp, 403) == "not_project_party"
    resp = await post_dm(client, stranger, project.owner.user.user_id)
    assert await error_code(resp, 403) == "no_shared_project"
    resp = await client.get("/v1/messages/dm/threads", headers=headers)
    assert await resp.json() == {"items": [], "count": 0, "nextCursor": None}
    resp = await client.get(
        f"/v1/messages/dm/threads/{in_dm['threadId']}/messages", headers=headers
    )
    assert await error_code(resp, 404) == "thread_not_found"
    for message in (in_chat, in_dm):
        resp = await report(client, stranger, message["id"])
        assert await error_code(resp, 404) == "message_not_found"
    resp = await client.get("/v1/messages/reports", headers=headers)
    assert await error_code(resp, 403) == "not_moderation_admin"
    resp = await client.post(
        f"/v1/messages/reports/{created['id']}/status", json={"status": "actioned"}, headers=headers
    )
    assert await error_code(resp, 403) == "not_moderation_admin"
    # Blocks and mutes only ever concern the caller's own relations.
    for kind, field in (("block", "blockedUserId"), ("mute", "mutedUserId")):
        resp = await client.post(
            f"/v1/messages/{kind}", json={field: str(project.owner.user.user_id)}, headers=headers
        )
        assert resp.status == 200
        assert (await resp.json())["userId"] == str(stranger.user.user_id)
    # Nothing of theirs changed.
    assert await db.fetchval("SELECT count(*) FROM messages") == 2
    assert await db.fetchval("SELECT status FROM message_reports") == "open"
    resp = await post_dm(client, project.worker, project.owner.user.user_id)
    assert resp.status == 201


async def test_sends_need_a_verified_email_before_validation(
    client: Any, db: asyncpg.Connection
) -> None:
    project = await project_with_worker(client, db)
    unverified = await linked_party(client, email_verified=False)
    await db.execute(
        "UPDATE projects SET selected_builder_address = $1 WHERE project_address = $2",
        unverified.lower,
        project.address,
    )
    for bad_body in (True, False):
        resp = await post_chat(client, unverified, project.address, "" if bad_body else BODY)
        assert await error_code(resp, 403) == "email_not_verified"
        resp = await post_dm(
            client, unverified, project.owner.user.user_id, "" if bad_body else BODY
        )
        assert await error_code(resp, 403) == "email_not_verified"
    # Reading, reporting and blocking are not guarded.
    resp = await client.get(chat_path(project.address), headers=unverified.headers)
    assert resp.status == 200
    sent = await dm(client, project.owner, unverified)
    resp = await report(client, unverified, sent["id"])
    assert resp.status == 201
    assert await db.fetchval("SELECT count(*) FROM messages") == 1


async def test_strict_legal_mode_blocks_sends_only(
    make_client: Any, db: asyncpg.Connection
) -> None:
    strict = await make_client(legal_acceptance_mode="strict")
    owner = await linked_party(strict)
    resp = await post_chat(strict, owner, "0x" + "ab" * 20)
    assert await error_code(resp, 403) == "legal_acceptance_required"
    resp = await post_dm(strict, owner, uuid.uuid4())
    assert await error_code(resp, 403) == "legal_acceptance_required"
    resp = await strict.get("/v1/messages/dm/threads", headers=owner.headers)
    assert resp.status == 200


async def test_suspended_senders_are_refused_on_both_sends(
    client: Any, db: asyncpg.Connection
) -> None:
    project = await project_with_worker(client, db)
    owner, worker = project.owner, project.worker
    for _ in range(3):  # the default threshold
        resp = await post_dm(client, owner, worker.user.user_id, CANARY)
        assert await error_code(resp, 422) == "offensive_content"
    resp = await post_dm(client, owner, worker.user.user_id)
    body = await resp.json()
    assert await error_code(resp, 403) == "sending_suspended"
    assert body["until"]
    resp = await post_chat(client, owner, project.address)
    assert await error_code(resp, 403) == "sending_suspended"
    # Receiving, reading and reporting go on; the other party still sends.
    sent = await dm(client, worker, owner)
    resp = await report(client, owner, sent["id"])
    assert resp.status == 201
    assert await db.fetchval("SELECT count(*) FROM moderation_offenses") == 3


async def test_the_document_describes_every_messaging_route(client: Any) -> None:
    resp = await client.get("/v1/openapi.json")
    doc = await resp.json()
    validate(doc)
    paths = doc["paths"]
    expected = {
        ("post", "/v1/projects/{projectAddress}/chat/messages"): ("201", "ChatMessageRecord"),
        ("get", "/v1/projects/{projectAddress}/chat/messages"): ("200", "ChatMessageList"),
        ("post", "/v1/messages/dm"): ("201", "DirectMessageRecord"),
        ("get", "/v1/messages/dm/threads"): ("200", "ThreadList"),
        ("get", "/v1/messages/dm/threads/{threadId}/messages"): ("200", "DirectMessageList"),
        ("post", "/v1/messages/block"): ("200", "BlockRecord"),
        ("delete", "/v1/messages/block/{blockedUserId}"): ("204", None),
        ("post", "/v1/messages/mute"): ("200", "MuteRecord"),
        ("delete", "/v1/messages/mute/{mutedUserId}"): ("204", None),
        ("post", "/v1/messages/reports"): ("201", "ReportRecord"),
        ("get", "/v1/messages/reports"): ("200", "ReportList"),
        ("post", "/v1/messages/reports/{reportId}/status"): ("200", "ReportRecord"),
    }
    for (method, path), (status, model) in expected.items():
        operation = paths[path][method]
        assert operation["tags"] == ["messaging"]
        assert "401" in operation["responses"]
        response = operation["responses"][status]
        if model is None:
            assert "content" not in response
        else:
            schema = response["content"]["application/json"]["schema"]
            assert schema == {"$ref": f"#/components/schemas/{model}"}
        sends = method == "post" and path in (
            "/v1/projects/{projectAddress}/chat/messages",
            "/v1/messages/dm",
        )
        assert operation.get("x-guarded", False) is sends, path
        assert operation.get("x-sends-messages", False) is sends, path
        if sends:
            assert "offensive_content" in operation["responses"]["422"]["description"]
            assert "sending_suspended" in operation["responses"]["403"]["description"]

    chat_post = paths["/v1/projects/{projectAddress}/chat/messages"]["post"]
    header = [p for p in chat_post["parameters"] if p["in"] == "header"]
    assert [(p["name"], p["required"]) for p in header] == [
        ("x-user-wallet-address", True),
        ("Idempotency-Key", False),
    ]
    assert "worker_not_selected" in chat_post["responses"]["409"]["description"]
    assert "not_project_party" in chat_post["responses"]["403"]["description"]
    dm_post = paths["/v1/messages/dm"]["post"]
    for code in ("no_shared_project", "blocked"):
        assert code in dm_post["responses"]["403"]["description"]
    status_post = paths["/v1/messages/reports/{reportId}/status"]["post"]
    assert "invalid_transition" in status_post["responses"]["409"]["description"]
    assert "report_not_found" in status_post["responses"]["404"]["description"]

    # Each kind of message has exactly its own fields; body is required and nullable.
    schemas = doc["components"]["schemas"]
    chat = schemas["ChatMessageRecord"]
    direct = schemas["DirectMessageRecord"]
    assert set(chat["properties"]) == {
        "id",
        "kind",
        "projectAddress",
        "senderUserId",
        "senderWalletAddress",
        "body",
        "bodyStatus",
        "createdAt",
    }
    assert set(direct["properties"]) == {
        "id",
        "kind",
        "threadId",
        "senderUserId",
        "recipientUserId",
        "body",
        "bodyStatus",
        "createdAt",
    }
    for schema in (chat, direct):
        assert set(schema["required"]) == set(schema["properties"])
        assert {"type": "null"} in schema["properties"]["body"]["anyOf"]
    for name in ("ChatMessageList", "DirectMessageList", "ThreadList", "ReportList"):
        assert set(schemas[name]["required"]) == {"items", "count", "nextCursor"}
    thread = schemas["ThreadRecord"]
    assert set(thread["required"]) == {
        "threadId",
        "otherUserId",
        "otherUsername",
        "lastMessageAt",
        "muted",
    }
    assert set(schemas["ReportRecord"]["required"]) == {
        "id",
        "messageId",
        "reporterUserId",
        "reason",
        "status",
        "note",
        "createdAt",
        "updatedAt",
        "resolvedByUserId",
    }
