"""Who receives the messaging events on the live stream: chat to the project's parties, a DM
to its two participants unless the recipient blocks the sender (decided when the event is
sent), a report's updates to its reporter. Events are committed to the outbox as the messaging
operations write them."""

from __future__ import annotations

import uuid

import asyncpg

from marketplace.events.types import (
    ChatMessagePayload,
    DmMessagePayload,
    NewEvent,
    ReportUpdatedPayload,
    thread_subject,
    user_subject,
)
from marketplace.types import checksum_address
from tests.api.records.conftest import linked_party, seed_project
from tests.api.stream.conftest import AppFactory, change_project, commit_events, streaming


def chat(project: str, sender: uuid.UUID, wallet: str) -> NewEvent:
    payload = ChatMessagePayload(
        messageId=str(uuid.uuid4()),
        projectAddress=project,
        senderUserId=str(sender),
        senderWalletAddress=wallet,
    )
    return NewEvent(project, payload)


def dm(sender: uuid.UUID, recipient: uuid.UUID) -> NewEvent:
    thread = uuid.uuid4()
    payload = DmMessagePayload(
        messageId=str(uuid.uuid4()),
        threadId=str(thread),
        senderUserId=str(sender),
        recipientUserId=str(recipient),
    )
    return NewEvent(thread_subject(thread), payload)


def report_updated(reporter: uuid.UUID, author: uuid.UUID) -> NewEvent:
    payload = ReportUpdatedPayload(
        reportId=str(uuid.uuid4()),
        messageId=str(uuid.uuid4()),
        reporterUserId=str(reporter),
        authorUserId=str(author),
        status="reviewing",
        previousStatus="open",
        bodyStatus="reported",
    )
    return NewEvent(user_subject(reporter), payload)


async def test_chat_reaches_the_projects_parties_only(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    owner, worker, stranger = [await linked_party(client) for _ in range(3)]
    project = await seed_project(
        db, owner_address=owner.lower, selected_builder_address=worker.lower
    )
    strangers = await seed_project(db, owner_address=stranger.lower)
    async with (
        streaming(client, owner.headers) as owner_stream,
        streaming(client, worker.headers) as worker_stream,
        streaming(client, stranger.headers) as stranger_stream,
    ):
        (sent,) = await commit_events(db, [chat(project, owner.user.user_id, owner.lower)])
        marker = await change_project(db, strangers)
        message = await owner_stream.event()
        assert (message.id, message.event) == (sent, "chat.message")
        # Addresses as the REST API answers them (EIP-55); the message itself as GET shows it
        # (this one was never stored: null).
        assert message.data["payload"]["projectAddress"] == checksum_address(project)
        assert message.data["payload"]["senderWalletAddress"] == checksum_address(owner.lower)
        assert message.data["payload"]["message"] is None
        assert (await worker_stream.event()).id == sent
        assert (await stranger_stream.event()).id == marker


async def test_a_dm_reaches_both_participants_until_the_recipient_blocks_the_sender(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    sender, recipient, other = [await linked_party(client) for _ in range(3)]
    project = await seed_project(db, owner_address=recipient.lower)
    async with (
        streaming(client, sender.headers) as sender_stream,
        streaming(client, recipient.headers) as recipient_stream,
        streaming(client, other.headers) as other_stream,
    ):
        (first,) = await commit_events(db, [dm(sender.user.user_id, recipient.user.user_id)])
        assert (await sender_stream.event()).id == first
        assert (await recipient_stream.event()).id == first

        resp = await client.post(
            "/v1/messages/block",
            json={"blockedUserId": str(sender.user.user_id)},
            headers=recipient.headers,
        )
        assert resp.status == 200, await resp.text()
        (second,) = await commit_events(db, [dm(sender.user.user_id, recipient.user.user_id)])
        marker = await change_project(db, project)
        assert (await sender_stream.event()).id == second
        # The recipient's next event is the project change: the DM from the blocked sender
        # never came; nor does anything of this thread reach a third user.
        assert (await recipient_stream.event()).id == marker
        (third,) = await commit_events(db, [dm(recipient.user.user_id, other.user.user_id)])
        assert (await other_stream.event()).id == third


async def test_a_report_update_reaches_its_reporter_not_the_author(
    make_client: AppFactory, db: asyncpg.Connection
) -> None:
    client = await make_client()
    reporter, author = await linked_party(client), await linked_party(client)
    authors_project = await seed_project(db, owner_address=author.lower)
    async with (
        streaming(client, reporter.headers) as reporter_stream,
        streaming(client, author.headers) as author_stream,
    ):
        (updated,) = await commit_events(
            db, [report_updated(reporter.user.user_id, author.user.user_id)]
        )
        marker = await change_project(db, authors_project)
        message = await reporter_stream.event()
        assert (message.id, message.event) == (updated, "report.updated")
        assert message.data["payload"]["status"] == "reviewing"
        assert (await author_stream.event()).id == marker
