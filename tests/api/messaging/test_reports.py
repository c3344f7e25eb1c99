"""Reports and the admin workflow through HTTP: who may report what, the repeated report,
bodyStatus through the transitions, removed bodies, audit entries and events written with the
change, admin-only listing, and two admins racing on one report."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import asyncpg
import pytest

from tests.api.messaging.conftest import (
    Project,
    chat_message,
    chat_path,
    dm,
    error_code,
    linked_party,
    make_admin,
    moderation_admin,
    project_with_worker,
    report,
    set_status,
    signed_in,
)

REPORTS = "/v1/messages/reports"


async def _dm_thread_messages(client: Any, party: Any, thread_id: str) -> list[dict[str, Any]]:
    resp = await client.get(f"/v1/messages/dm/threads/{thread_id}/messages", headers=party.headers)
    assert resp.status == 200, await resp.text()
    items: list[dict[str, Any]] = (await resp.json())["items"]
    return items


async def _chat(client: Any, project: Project, party: Any) -> list[dict[str, Any]]:
    resp = await client.get(chat_path(project.address), headers=party.headers)
    assert resp.status == 200, await resp.text()
    items: list[dict[str, Any]] = (await resp.json())["items"]
    return items


async def test_report_a_dm_then_repeat(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    sent = await dm(client, project.owner, project.worker, "rude words")
    resp = await report(client, project.worker, sent["id"], "abusive")
    assert resp.status == 201, await resp.text()
    created = await resp.json()
    assert set(created) == {
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
    assert created["messageId"] == sent["id"]
    assert created["reporterUserId"] == str(project.worker.user.user_id)
    assert created["reason"] == "abusive"
    assert created["status"] == "open"
    assert created["note"] is None and created["resolvedByUserId"] is None
    # Still readable, now marked reported.
    (item,) = await _dm_thread_messages(client, project.owner, sent["threadId"])
    assert (item["body"], item["bodyStatus"]) == ("rude words", "reported")

    audit = await db.fetch(
        "SELECT subject_user_id, actor_user_id, action, reason, details FROM moderation_audit"
    )
    assert [tuple(r)[:4] for r in audit] == [
        (project.owner.user.user_id, project.worker.user.user_id, "report_created", "abusive")
    ]
    details = audit[0]["details"]
    details = json.loads(details) if isinstance(details, str) else details
    assert details["reportId"] == created["id"] and details["messageId"] == sent["id"]
    events = await db.fetch(
        "SELECT type, subject, payload::text AS payload FROM events WHERE type = 'message.reported'"
    )
    assert [(e["type"], e["subject"]) for e in events] == [
        ("message.reported", f"user:{project.owner.user.user_id}")
    ]
    assert json.loads(events[0]["payload"]) == {
        "reportId": created["id"],
        "messageId": sent["id"],
        "reporterUserId": str(project.worker.user.user_id),
        "authorUserId": str(project.owner.user.user_id),
    }

    # The same reporter again: the existing report, 200, nothing new written.
    resp = await report(client, project.worker, sent["id"], "another reason")
    assert resp.status == 200
    assert await resp.json() == created
    assert await db.fetchval("SELECT count(*) FROM moderation_audit") == 1
    assert await db.fetchval("SELECT count(*) FROM events WHERE type = 'message.reported'") == 1


async def test_report_a_chat_message(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    sent = await chat_message(client, project.owner, project.address)
    resp = await report(client, project.worker, sent["id"])
    assert resp.status == 201, await resp.text()
    [item] = await _chat(client, project, project.owner)
    assert item["bodyStatus"] == "reported"


async def test_who_may_report(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    in_chat = await chat_message(client, project.owner, project.address)
    in_dm = await dm(client, project.owner, project.worker)
    stranger = await linked_party(client)
    admin = await moderation_admin(client, db)
    for message in (in_chat, in_dm):
        # Neither a stranger nor a moderation admin outside the conversation sees it.
        for outsider in (stranger, admin):
            resp = await report(client, outsider, message["id"])
            assert await error_code(resp, 404) == "message_not_found"
        resp = await report(client, project.owner, message["id"])
        body = await resp.json()
        assert await error_code(resp, 400) == "invalid_request"
        assert body["details"][0]["field"] == "messageId"
    resp = await report(client, project.worker, str(uuid.uuid4()))
    assert await error_code(resp, 404) == "message_not_found"
    # A worker who lost its link to the worker wallet no longer sees the chat.
    resp = await client.delete(
        f"/v1/wallet-links/{project.worker.address}", headers=project.worker.headers
    )
    assert resp.status in (200, 204)
    resp = await report(client, project.worker, in_chat["id"])
    assert await error_code(resp, 404) == "message_not_found"
    # ...but still sees its direct messages.
    resp = await report(client, project.worker, in_dm["id"])
    assert resp.status == 201
    for bad in ({"messageId": in_dm["id"], "reason": ""}, {"messageId": in_dm["id"]}):
        resp = await client.post(REPORTS, json=bad, headers=project.worker.headers)
        assert await error_code(resp, 400) == "invalid_request"
    resp = await report(client, project.worker, in_dm["id"], "r" * 1001)
    assert await error_code(resp, 400) == "invalid_request"
    assert await db.fetchval("SELECT count(*) FROM message_reports") == 1


async def test_actioned_removes_the_message(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    sent = await chat_message(client, project.owner, project.address, "bad text")
    created = await (await report(client, project.worker, sent["id"], "spam")).json()
    admin = await moderation_admin(client, db)

    resp = await set_status(client, admin, created["id"], "reviewing", "looking")
    assert resp.status == 200, await resp.text()
    reviewing = await resp.json()
    assert (reviewing["status"], reviewing["note"], reviewing["resolvedByUserId"]) == (
        "reviewing",
        "looking",
        None,
    )
    assert reviewing["updatedAt"] > created["updatedAt"]
    [item] = await _chat(client, project, project.owner)
    assert item["bodyStatus"] == "reported"

    resp = await set_status(client, admin, created["id"], "actioned")
    actioned = await resp.json()
    assert resp.status == 200
    assert actioned["status"] == "actioned"
    assert actioned["note"] == "looking"  # omitted: kept
    assert actioned["resolvedByUserId"] == str(admin.user_id)
    for party in (project.owner, project.worker):
        [item] = await _chat(client, project, party)
        assert (item["body"], item["bodyStatus"]) == (None, "removed")
    # A moderation admin who is a party reads the removed text.
    await make_admin(db, project.worker.user)
    [item] = await _chat(client, project, project.worker)
    assert (item["body"], item["bodyStatus"]) == ("bad text", "removed")

    audit = await db.fetch(
        "SELECT subject_user_id, actor_user_id, action, reason FROM moderation_audit ORDER BY seq"
    )
    assert [tuple(r) for r in audit] == [
        (project.owner.user.user_id, project.worker.user.user_id, "report_created", "spam"),
        (project.owner.user.user_id, admin.user_id, "report_status_changed", "looking"),
        (project.owner.user.user_id, admin.user_id, "report_status_changed", None),
    ]
    events = await db.fetch(
        "SELECT subject, payload::text AS payload FROM events WHERE type = 'report.updated'"
        " ORDER BY id"
    )
    assert [e["subject"] for e in events] == [f"user:{project.worker.user.user_id}"] * 2
    assert json.loads(events[1]["payload"]) == {
        "reportId": created["id"],
        "messageId": sent["id"],
        "reporterUserId": str(project.worker.user.user_id),
        "authorUserId": str(project.owner.user.user_id),
        "status": "actioned",
        "previousStatus": "reviewing",
        "bodyStatus": "removed",
    }
    # A removed message stays removed when reported again.
    third = await linked_party(client)
    await db.execute(
        "UPDATE projects SET owner_address = $1 WHERE project_address = $2",
        third.lower,
        project.address,
    )
    resp = await report(client, third, sent["id"])
    assert resp.status == 201
    assert await db.fetchval("SELECT body_status FROM messages") == "removed"


async def test_dismissed_restores_visibility_when_no_other_report_is_pending(
    client: Any, db: asyncpg.Connection
) -> None:
    project = await project_with_worker(client, db)
    sent = await chat_message(client, project.worker, project.address)
    # A second party account holding the owner wallet's project: another linked user reporting.
    second_owner_wallet = await linked_party(client)
    await db.execute(
        "UPDATE projects SET owner_address = $1 WHERE project_address = $2",
        second_owner_wallet.lower,
        project.address,
    )
    first = await (await report(client, second_owner_wallet, sent["id"])).json()
    await db.execute(
        "UPDATE projects SET owner_address = $1 WHERE project_address = $2",
        project.owner.lower,
        project.address,
    )
    second = await (await report(client, project.owner, sent["id"])).json()
    admin = await moderation_admin(client, db)

    resp = await set_status(client, admin, first["id"], "dismissed", "fine")
    dismissed = await resp.json()
    assert (dismissed["status"], dismissed["resolvedByUserId"]) == ("dismissed", str(admin.user_id))
    assert await db.fetchval("SELECT body_status FROM messages") == "reported"
    resp = await set_status(client, admin, second["id"], "reviewing")
    assert await db.fetchval("SELECT body_status FROM messages") == "reported"
    resp = await set_status(client, admin, second["id"], "dismissed")
    assert resp.status == 200
    assert await db.fetchval("SELECT body_status FROM messages") == "visible"
    payload = await db.fetchval(
        "SELECT payload::text FROM events WHERE type = 'report.updated' ORDER BY id DESC LIMIT 1"
    )
    assert json.loads(payload)["bodyStatus"] == "visible"


@pytest.mark.parametrize(
    ("path", "wanted"),
    [
        ((), "open"),
        (("reviewing",), "reviewing"),
        (("reviewing",), "open"),
        (("actioned",), "dismissed"),
        (("actioned",), "reviewing"),
        (("dismissed",), "actioned"),
        (("dismissed",), "open"),
        (("reviewing", "actioned"), "dismissed"),
    ],
)
async def test_invalid_transitions(
    client: Any, db: asyncpg.Connection, path: tuple[str, ...], wanted: str
) -> None:
    project = await project_with_worker(client, db)
    sent = await dm(client, project.owner, project.worker)
    created = await (await report(client, project.worker, sent["id"])).json()
    admin = await moderation_admin(client, db)
    for step in path:
        resp = await set_status(client, admin, created["id"], step)
        assert resp.status == 200, await resp.text()
    before = await db.fetchval("SELECT count(*) FROM moderation_audit")
    resp = await set_status(client, admin, created["id"], wanted)
    assert await error_code(resp, 409) == "invalid_transition"
    assert await db.fetchval("SELECT count(*) FROM moderation_audit") == before


async def test_admin_only_routes(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    sent = await dm(client, project.owner, project.worker)
    created = await (await report(client, project.worker, sent["id"])).json()
    for caller in (project.worker.user, project.owner.user, await signed_in(client)):
        resp = await client.get(REPORTS, headers=caller.headers)
        assert await error_code(resp, 403) == "not_moderation_admin"
        resp = await set_status(client, caller, created["id"], "actioned")
        assert await error_code(resp, 403) == "not_moderation_admin"
    resp = await client.get(REPORTS)
    assert await error_code(resp, 401) == "unauthorized"
    admin = await moderation_admin(client, db)
    resp = await set_status(client, admin, str(uuid.uuid4()), "actioned")
    assert await error_code(resp, 404) == "report_not_found"
    for bad in ({"status": "closed"}, {}, {"status": "reviewing", "note": "n" * 2001}):
        resp = await client.post(
            f"{REPORTS}/{created['id']}/status", json=bad, headers=admin.headers
        )
        assert await error_code(resp, 400) == "invalid_request"
    resp = await set_status(client, admin, "not-a-uuid", "actioned")
    assert await error_code(resp, 400) == "invalid_request"
    assert await db.fetchval("SELECT status FROM message_reports") == "open"


async def test_an_admin_reads_the_reported_message_even_once_removed(
    client: Any, db: asyncpg.Connection
) -> None:
    project = await project_with_worker(client, db)
    sent = await dm(client, project.owner, project.worker, "the offending words")
    created = await (await report(client, project.worker, sent["id"], "abuse")).json()
    path = f"{REPORTS}/{created['id']}"
    for caller in (project.worker.user, project.owner.user, await signed_in(client)):
        resp = await client.get(path, headers=caller.headers)
        assert await error_code(resp, 403) == "not_moderation_admin"
    assert await error_code(await client.get(path), 401) == "unauthorized"

    admin = await moderation_admin(client, db)
    assert (await set_status(client, admin, created["id"], "actioned")).status == 200
    resp = await client.get(path, headers=admin.headers)
    assert resp.status == 200, await resp.text()
    detail = await resp.json()
    assert detail["report"]["id"] == created["id"]
    assert detail["report"]["status"] == "actioned"
    assert detail["message"]["id"] == sent["id"]
    assert detail["message"]["kind"] == "direct"
    assert (detail["message"]["body"], detail["message"]["bodyStatus"]) == (
        "the offending words",
        "removed",
    )
    # The parties no longer see the text.
    [item] = await _dm_thread_messages(client, project.owner, sent["threadId"])
    assert item["body"] is None

    resp = await client.get(f"{REPORTS}/{uuid.uuid4()}", headers=admin.headers)
    assert await error_code(resp, 404) == "report_not_found"
    resp = await client.get(f"{REPORTS}/not-a-uuid", headers=admin.headers)
    assert await error_code(resp, 400) == "invalid_request"


async def test_list_reports_filters_and_pages(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    admin = await moderation_admin(client, db)
    ids = []
    for n in range(3):
        sent = await dm(client, project.owner, project.worker, f"m{n}")
        ids.append((await (await report(client, project.worker, sent["id"])).json())["id"])
    resp = await set_status(client, admin, ids[1], "reviewing")
    assert resp.status == 200

    resp = await client.get(REPORTS, headers=admin.headers)
    page = await resp.json()
    assert [item["id"] for item in page["items"]] == ids[::-1]
    assert page["count"] == 3 and page["nextCursor"] is None
    resp = await client.get(REPORTS, params={"status": "open"}, headers=admin.headers)
    assert [item["id"] for item in (await resp.json())["items"]] == [ids[2], ids[0]]
    resp = await client.get(REPORTS, params={"status": "reviewing"}, headers=admin.headers)
    assert [item["id"] for item in (await resp.json())["items"]] == [ids[1]]

    resp = await client.get(REPORTS, params={"limit": "2"}, headers=admin.headers)
    page = await resp.json()
    assert [item["id"] for item in page["items"]] == [ids[2], ids[1]]
    resp = await client.get(
        REPORTS, params={"limit": "2", "cursor": page["nextCursor"]}, headers=admin.headers
    )
    page = await resp.json()
    assert [item["id"] for item in page["items"]] == [ids[0]]
    assert page["nextCursor"] is None
    for bad in ({"status": "closed"}, {"limit": "0"}, {"limit": "101"}, {"cursor": "zz"}):
        resp = await client.get(REPORTS, params=bad, headers=admin.headers)
        assert await error_code(resp, 400) == "invalid_request"


async def test_two_admins_cannot_both_move_an_open_report(
    client: Any, db: asyncpg.Connection
) -> None:
    project = await project_with_worker(client, db)
    admins = [await moderation_admin(client, db) for _ in range(2)]
    for _ in range(3):
        sent = await dm(client, project.owner, project.worker)
        created = await (await report(client, project.worker, sent["id"])).json()
        results = await asyncio.gather(
            set_status(client, admins[0], created["id"], "actioned"),
            set_status(client, admins[1], created["id"], "dismissed"),
        )
        statuses = sorted(resp.status for resp in results)
        assert statuses == [200, 409], [await resp.text() for resp in results]
        [winner] = [await resp.json() for resp in results if resp.status == 200]
        changes = await db.fetchval(
            "SELECT count(*) FROM moderation_audit WHERE action = 'report_status_changed'"
            " AND details->>'reportId' = $1",
            created["id"],
        )
        assert changes == 1
        expected = "removed" if winner["status"] == "actioned" else "visible"
        assert (
            await db.fetchval(
                "SELECT body_status FROM messages WHERE id = $1", uuid.UUID(sent["id"])
            )
            == expected
        )
