"""Project chat (docs/messaging.md, "Project chat"): the send, a shard command of the project
(one writer per project, so a project's messages are stored in send order), and the reads, from
PostgreSQL.

Who may send: the caller's active wallet link that is the project owner or the selected worker,
once a worker is selected, on a project the caller can see. Who may read: a caller with an
active link to the owner or the selected worker wallet.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

import asyncpg

from marketplace.messaging import rules
from marketplace.messaging.models import BodyStatus
from marketplace.moderation.reads import is_moderation_admin
from marketplace.pagination import BIGINT_MAX, CursorKind, keyset_page
from marketplace.records.access import (
    ProjectParties,
    caller_and_visible_project,
    callers_and_visible_projects,
    require_linked,
)
from marketplace.records.errors import NotProjectParty, ProjectNotFound
from marketplace.shards import GroupKind, ProjectCommand, ShardContext
from marketplace.storage.pool import Conn
from marketplace.storage.repositories import messages as repo

MESSAGE_CURSOR = CursorKind("m1", (BIGINT_MAX,))


class StoredMessage(TypedDict):
    """A message row in plain values (it crosses the Ray boundary)."""

    id: uuid.UUID
    seq: int
    kind: str
    project_address: str | None
    thread_id: uuid.UUID | None
    sender_user_id: uuid.UUID
    sender_wallet_address: str | None
    recipient_user_id: uuid.UUID | None
    body: str
    body_status: str
    created_at: datetime


def stored(row: asyncpg.Record) -> StoredMessage:
    return StoredMessage(
        id=row["id"],
        seq=row["seq"],
        kind=row["kind"],
        project_address=row["project_address"],
        thread_id=row["thread_id"],
        sender_user_id=row["sender_user_id"],
        sender_wallet_address=row["sender_wallet_address"],
        recipient_user_id=row["recipient_user_id"],
        body=row["body"],
        body_status=row["body_status"],
        created_at=row["created_at"],
    )


async def authorize_send(
    conn: Conn, user_id: uuid.UUID, project_address: str, sender_wallet: str
) -> ProjectParties:
    """The send rules, in their answer order: 404 (project not indexed or not visible), 403
    ``wallet_not_linked``, 409 ``worker_not_selected``, 403 ``not_project_party``."""
    wallets, project = await caller_and_visible_project(conn, user_id, project_address)
    return check_send(wallets, project, sender_wallet)


def check_send(
    wallets: frozenset[str], project: ProjectParties, sender_wallet: str
) -> ProjectParties:
    require_linked(wallets, sender_wallet, "senderWalletAddress")
    rules.require_chat_sender(project, sender_wallet)
    return project


async def read_send_facts(
    pool: asyncpg.Pool, pairs: list[tuple[uuid.UUID, str]]
) -> list[tuple[frozenset[str], ProjectParties | ProjectNotFound]]:
    """The facts :func:`authorize_send` decides on, for several sends in one statement."""
    async with pool.acquire() as conn:
        return await callers_and_visible_projects(conn, pairs)


# The shard's coalesced reads of send facts and writes of chat messages.
SendFacts = tuple[frozenset[str], ProjectParties | ProjectNotFound]
SEND_FACTS: GroupKind[tuple[uuid.UUID, str], SendFacts] = GroupKind("chat-send-facts")
CHAT_MESSAGES: GroupKind[repo.NewChatMessage, StoredMessage] = GroupKind("chat-messages")


async def store_chat_messages(
    pool: asyncpg.Pool, messages: list[repo.NewChatMessage]
) -> list[StoredMessage]:
    """Write ``messages`` (with their events) in one statement; one stored row per message, in
    order. A message stored already (its command repeated after the shard died) is read back."""
    async with pool.acquire() as conn:
        inserted = {row["id"]: row for row in await repo.insert_chats(conn, messages)}
        for message in messages:
            if message.message_id not in inserted:
                row = await repo.get_message(conn, message.message_id)
                if row is None:  # pragma: no cover - the insert's conflict was with this id
                    raise RuntimeError("chat message vanished after a conflicting insert")
                inserted[message.message_id] = row
    return [stored(inserted[m.message_id]) for m in messages]


@dataclass(frozen=True)
class PostChatMessage(ProjectCommand):
    """Shard command: check the send rules and store the message with its ``chat.message``
    event. ``message_id`` is chosen by the frontend, so a command sent again after its shard died
    stores the message once and answers with it (the rules are checked again first).

    The shard's concurrent sends (of different projects: a project's own wait for its lock) are
    checked and stored together (:class:`~marketplace.shards.GroupCommit`): one statement reads
    the facts of a batch of sends, one statement and one commit stores a batch, each batch
    holding the events' order lock once.
    """

    message_id: uuid.UUID
    user_id: uuid.UUID
    sender_wallet: str
    body: str

    async def apply(self, ctx: ShardContext) -> StoredMessage:
        reader = ctx.group_commit(SEND_FACTS, functools.partial(read_send_facts, ctx.pool))
        wallets, project = await reader.submit((self.user_id, self.project_address))
        if isinstance(project, ProjectNotFound):
            raise project
        check_send(wallets, project, self.sender_wallet)
        writer = ctx.group_commit(CHAT_MESSAGES, functools.partial(store_chat_messages, ctx.pool))
        return await writer.submit(
            repo.NewChatMessage(
                message_id=self.message_id,
                project_address=self.project_address,
                sender_user_id=self.user_id,
                sender_wallet=self.sender_wallet,
                body=self.body,
            )
        )


@dataclass(frozen=True)
class MessagePage:
    rows: list[asyncpg.Record]
    next_cursor: str | None
    # Whether the viewer sees removed bodies (a moderation admin).
    moderator: bool


async def viewer_is_moderator(conn: Conn, user_id: uuid.UUID, rows: list[asyncpg.Record]) -> bool:
    """Whether removed bodies in ``rows`` are shown to the viewer; the flag is only read when a
    removed message is among them."""
    if not any(row["body_status"] == BodyStatus.REMOVED for row in rows):
        return False
    return await is_moderation_admin(conn, user_id)


def _seq(row: asyncpg.Record) -> tuple[int]:
    return (row["seq"],)


async def list_chat(
    pool: asyncpg.Pool,
    user_id: uuid.UUID,
    project_address: str,
    *,
    limit: int,
    cursor: str | None,
) -> MessagePage:
    """The project's chat, newest first: 404 when the project is not visible, 403
    ``not_project_party`` unless one of the caller's active wallets is the owner or the selected
    worker."""
    position = MESSAGE_CURSOR.position(cursor)
    wallets, project = await caller_and_visible_project(pool, user_id, project_address)
    if not rules.is_chat_party(project, wallets):
        raise NotProjectParty(
            "only the project owner and the selected worker may read the project chat"
        )
    rows = await repo.chat_page(
        pool, project_address, before_seq=position[0] if position else None, limit=limit + 1
    )
    page, next_cursor = keyset_page(rows, limit, MESSAGE_CURSOR, _seq)
    return MessagePage(page, next_cursor, await viewer_is_moderator(pool, user_id, page))
