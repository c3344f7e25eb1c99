"""What streamed payloads carry: addresses as the REST API answers them (EIP-55), the message of
`chat.message` / `dm.message` as GET shows it to that recipient, and `message.removed` to the
message's audience when a moderation admin actions a report; messages sent through the API."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
from pydantic import JsonValue

from marketplace.stream.views import checksum_addresses
from marketplace.types import checksum_address
from tests.api.messaging.conftest import (
    chat_message,
    chat_path,
    dm,
    make_admin,
    moderation_admin,
    project_with_worker,
    report,
    set_status,
)
from tests.api.records.conftest import linked_party, random_address, seed_project
from tests.api.stream.conftest import AppFactory, Message, change_project, streaming


async def shown_in_chat(client: Any, headers: dict[str, str], project: str) -> dict[str, Any]:
    """The newest chat message as GET of the chat shows it to the caller."""
    resp = await client.get(chat_path(project), headers=headers)
    assert resp.status == 200, await resp.text()
    item: dict[str, Any] = (await resp.json())["items"][0]
    return item


async def shown_in_thread(client: Any, headers: dict[str, str], thread: str) -> dict[str, Any]:
    resp = await client.get(f"/v1/messages/dm/threads/{thread}/messages", headers=headers)
    assert resp.status == 200, await resp.text()
    item: dict[str, Any] = (await resp.json())["items"][0]
    return item


async def next_of(stream: Any, event_type: str) -> Message:
    message: Message = await stream.event()
    assert message.event == event_type, message
    return message


async def test_project_changes_carry_checksummed_addresses(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    owner, worker = await linked_party(client), await linked_party(client)
    project = await seed_project(db, owner_address=owner.lower)
    allowed = [random_address(), random_address()]
    await db.execute(
        "UPDATE projects SET selected_builder_address = $2 WHERE project_address = $1",
        project,
        worker.lower,
    )
    async with streaming(client, owner.headers) as stream:
        await change_project(
            db,
            project,
            selectedBuilderAddress=worker.lower,
            allowlist=allowed,
            title="0x" + "ab" * 20,  # text that looks like an address is left alone
        )
        data = (await next_of(stream, "project.changed")).data
    changes = data["payload"]["changes"]
    assert changes["selectedBuilderAddress"] == checksum_address(worker.lower)
    assert changes["selectedBuilderAddress"] != worker.lower
    assert changes["allowlist"] == [checksum_address(a) for a in allowed]
    assert changes["title"] == "0x" + "ab" * 20
    # As the REST API answers the same project.
    resp = await client.get(f"/v1/projects/{project}", headers=owner.headers)
    assert (await resp.json())["selectedBuilderAddress"] == changes["selectedBuilderAddress"]


def test_addresses_are_checksummed_at_any_depth_and_only_in_address_fields() -> None:
    a, b = "0x" + "ab" * 20, "0x" + "cd" * 20
    payload: JsonValue = {
        "projectAddress": a,
        "changes": {"ownerAddress": b, "description": a, "allowlist": [a], "block": 3},
        "bids": [{"bidderAddress": a, "changes": {"status": None}}],
        "milestones": [{"milestoneIndex": 0, "changes": {"deliveryRefHash": "0x" + "ab" * 32}}],
        "walletAddresses": [b],
        "missingAddress": None,
    }
    assert checksum_addresses(payload) == {
        "projectAddress": checksum_address(a),
        "changes": {
            "ownerAddress": checksum_address(b),
            "description": a,
            "allowlist": [checksum_address(a)],
            "block": 3,
        },
        "bids": [{"bidderAddress": checksum_address(a), "changes": {"status": None}}],
        "milestones": [{"milestoneIndex": 0, "changes": {"deliveryRefHash": "0x" + "ab" * 32}}],
        "walletAddresses": [checksum_address(b)],
        "missingAddress": None,
    }


async def test_a_chat_message_event_carries_the_message_as_each_party_reads_it(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    project = await project_with_worker(client, db)
    owner, worker = project.owner, project.worker
    stranger = await linked_party(client)
    strangers = await seed_project(db, owner_address=stranger.lower)
    async with (
        streaming(client, owner.headers) as owner_stream,
        streaming(client, worker.headers) as worker_stream,
        streaming(client, stranger.headers) as stranger_stream,
    ):
        sent = await chat_message(client, owner, project.address, "the first draft is up")
        marker = await change_project(db, strangers)
        for party, stream in ((owner, owner_stream), (worker, worker_stream)):
            payload = (await next_of(stream, "chat.message")).data["payload"]
            assert payload["message"] == await shown_in_chat(client, party.headers, project.address)
            assert payload["message"]["body"] == "the first draft is up"
            assert payload["message"]["id"] == sent["id"]
            # The outbox fields are still there, addresses as REST answers them.
            assert payload["messageId"] == sent["id"]
            assert payload["senderUserId"] == str(owner.user.user_id)
            assert payload["projectAddress"] == checksum_address(project.address)
            assert payload["senderWalletAddress"] == sent["senderWalletAddress"]
            assert sent["senderWalletAddress"] == checksum_address(owner.lower)
        assert (await stranger_stream.event()).id == marker


async def test_a_dm_event_carries_the_message_as_the_thread_shows_it(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    project = await project_with_worker(client, db)
    owner, worker = project.owner, project.worker
    async with (
        streaming(client, owner.headers) as owner_stream,
        streaming(client, worker.headers) as worker_stream,
    ):
        sent = await dm(client, owner, worker, "can we talk about milestone 2?")
        for party, stream in ((owner, owner_stream), (worker, worker_stream)):
            payload = (await next_of(stream, "dm.message")).data["payload"]
            assert payload["message"] == await shown_in_thread(
                client, party.headers, sent["threadId"]
            )
            assert payload["message"]["body"] == "can we talk about milestone 2?"
            assert payload["threadId"] == sent["threadId"]
            assert payload["recipientUserId"] == str(worker.user.user_id)


async def test_an_actioned_report_sends_message_removed_to_the_chats_audience(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    project = await project_with_worker(client, db)
    owner, worker = project.owner, project.worker
    stranger = await linked_party(client)
    strangers = await seed_project(db, owner_address=stranger.lower)
    admin = await moderation_admin(client, db)
    # The worker is a moderation admin too: GET shows it removed bodies, so the stream does.
    await make_admin(db, worker.user)
    sent = await chat_message(client, owner, project.address, "buy my course")
    resp = await report(client, worker, sent["id"])
    assert resp.status == 201, await resp.text()
    report_id = (await resp.json())["id"]
    async with (
        streaming(client, owner.headers) as owner_stream,
        streaming(client, worker.headers) as worker_stream,
        streaming(client, stranger.headers) as stranger_stream,
        streaming(client, admin.headers) as admin_stream,
    ):
        resp = await set_status(client, admin, report_id, "reviewing")
        assert resp.status == 200, await resp.text()
        resp = await set_status(client, admin, report_id, "actioned")
        assert resp.status == 200, await resp.text()
        marker = await change_project(db, strangers)

        # The reporter hears of both transitions, then of the removal.
        assert (await next_of(worker_stream, "report.updated")).data["payload"]["status"] == (
            "reviewing"
        )
        assert (await next_of(worker_stream, "report.updated")).data["payload"]["status"] == (
            "actioned"
        )
        removed_for_worker = (await next_of(worker_stream, "message.removed")).data
        removed_for_owner = (await next_of(owner_stream, "message.removed")).data
        assert removed_for_owner["id"] == removed_for_worker["id"]
        assert removed_for_owner["subject"] == project.address
        payload = removed_for_owner["payload"]
        assert {k: v for k, v in payload.items() if k != "message"} == {
            "messageId": sent["id"],
            "kind": "project_chat",
            "senderUserId": str(owner.user.user_id),
            "reportId": report_id,
            "projectAddress": checksum_address(project.address),
        }
        # Each as their GET shows it now: the author no longer sees the body, the moderation
        # admin among the parties still does.
        assert payload["message"] == await shown_in_chat(client, owner.headers, project.address)
        assert payload["message"]["body"] is None
        assert payload["message"]["bodyStatus"] == "removed"
        worker_view = removed_for_worker["payload"]["message"]
        assert worker_view == await shown_in_chat(client, worker.headers, project.address)
        assert worker_view["body"] == "buy my course"
        # Not the project's: neither the stranger nor the admin (not a party) gets it.
        assert (await stranger_stream.event()).id == marker
        assert await admin_stream_is_quiet(admin_stream)

    # A client resuming from before the send now reads the message as removed.
    async with streaming(client, owner.headers, last_event_id=0) as resumed:
        chat = await next_of(resumed, "chat.message")
        assert chat.data["payload"]["message"]["body"] is None


async def admin_stream_is_quiet(stream: Any) -> bool:
    try:
        message = await stream.event(within=0.5)
    except TimeoutError:
        return True
    raise AssertionError(f"the admin received {message}")


async def test_a_removed_dm_is_announced_to_both_participants(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    project = await project_with_worker(client, db)
    owner, worker = project.owner, project.worker
    admin = await moderation_admin(client, db)
    sent = await dm(client, owner, worker, "rude words here")
    resp = await report(client, worker, sent["id"])
    assert resp.status == 201, await resp.text()
    report_id = (await resp.json())["id"]
    async with (
        streaming(client, owner.headers) as owner_stream,
        streaming(client, worker.headers) as worker_stream,
    ):
        resp = await set_status(client, admin, report_id, "actioned")
        assert resp.status == 200, await resp.text()
        await next_of(worker_stream, "report.updated")  # the reporter's own news comes first
        for party, stream in ((owner, owner_stream), (worker, worker_stream)):
            data = (await next_of(stream, "message.removed")).data
            assert data["subject"] == f"thread:{sent['threadId']}"
            payload = data["payload"]
            assert payload["kind"] == "direct"
            assert payload["threadId"] == sent["threadId"]
            assert payload["recipientUserId"] == str(worker.user.user_id)
            assert "projectAddress" not in payload
            assert payload["message"] == await shown_in_thread(
                client, party.headers, sent["threadId"]
            )
            assert payload["message"]["body"] is None
    # A dismissal removes nothing and announces nothing.
    second = await dm(client, owner, worker, "another one")
    resp = await report(client, worker, second["id"])
    report_id = (await resp.json())["id"]
    async with streaming(client, owner.headers) as owner_stream:
        resp = await set_status(client, admin, report_id, "dismissed")
        assert resp.status == 200
        assert await admin_stream_is_quiet(owner_stream)


async def test_a_message_event_with_a_malformed_id_shows_no_message_instead_of_failing() -> None:
    """No producer writes one, but the hub would retry an event whose view raises forever."""
    from marketplace.stream.views import _with_message

    user = uuid.uuid4()
    shown = await _with_message(None, "not-a-uuid", {"messageId": "not-a-uuid"}, [user])  # type: ignore[arg-type]
    assert shown == {user: {"messageId": "not-a-uuid", "message": None}}
