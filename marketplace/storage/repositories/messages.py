"""SQL of project chat and direct messages: messages, DM threads, and the "shared project"
test direct messages need (docs/messaging.md).

Chat sends write their messages and outbox events in one self-committing statement
(``events.with_events``), several sends of one shard at a time. A direct message writes them in
one transaction (producers take no lock: the relay orders committed events, docs/events.md), and
creates or bumps its thread in that transaction with one ``INSERT ... ON CONFLICT`` on the
ordered user pair: the UNIQUE constraint, not a prior read, decides which of two concurrent first
messages creates the thread, and both land in it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple, Protocol

from marketplace.events.types import ChatMessagePayload, DmMessagePayload, NewEvent, thread_subject
from marketplace.storage import rows
from marketplace.storage.pool import Conn, Connection, fetch_one
from marketplace.storage.repositories import events


class MessageRow(NamedTuple):
    """A stored message, chat or direct (COLUMNS): the one shape of a stored message, from this
    module up to the response models (a chat send's result crosses the Ray boundary as it)."""

    id: uuid.UUID
    seq: int
    kind: str
    project_address: str | None  # chat only
    thread_id: uuid.UUID | None  # direct only
    sender_user_id: uuid.UUID
    sender_wallet_address: str | None  # chat only
    recipient_user_id: uuid.UUID | None  # direct only
    body: str
    body_status: str
    created_at: datetime


class ThreadRow(NamedTuple):
    thread_id: uuid.UUID
    user_low: uuid.UUID
    user_high: uuid.UUID


class ThreadListRow(NamedTuple):
    """One of a user's threads, seen from that user (SELECT_THREADS_PAGE)."""

    thread_id: uuid.UUID
    other_user_id: uuid.UUID
    other_username: str | None
    last_message_at: datetime
    activity_seq: int
    muted: bool


COLUMNS = (
    "id, seq, kind, project_address, thread_id, sender_user_id, sender_wallet_address, "
    "recipient_user_id, body, body_status, created_at"
)

# Chat messages and their events in one self-committing statement (events.with_events); a
# message whose id exists (a retried send) is skipped with its event. Rows get their seq in the
# order given.
INSERT_CHATS = events.with_events(
    f"""
    INSERT INTO messages (id, kind, project_address, sender_user_id, sender_wallet_address, body)
    SELECT m.id, 'project_chat', m.project_address, m.sender_user_id, m.sender_wallet, m.body
    FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::text[], $5::text[])
        WITH ORDINALITY AS m(id, project_address, sender_user_id, sender_wallet, body, n)
    ORDER BY m.n
    ON CONFLICT (id) DO NOTHING
    RETURNING {COLUMNS}, id::text AS event_key
    """,
    5,
)
# INSERT_CHATS returns a message's columns and the key of its event.
_INSERTED_CHAT_COLUMNS = (*MessageRow._fields, "event_key")
SELECT_MESSAGE = f"SELECT {COLUMNS} FROM messages WHERE id = $1"
# Newest first; keyset on seq. Served by messages_project_chat / messages_thread.
SELECT_CHAT_PAGE = f"""
SELECT {COLUMNS} FROM messages
WHERE kind = 'project_chat' AND project_address = $1 AND ($2::bigint IS NULL OR seq < $2)
ORDER BY seq DESC
LIMIT $3
"""
SELECT_THREAD_PAGE = f"""
SELECT {COLUMNS} FROM messages
WHERE kind = 'direct' AND thread_id = $1 AND ($2::bigint IS NULL OR seq < $2)
ORDER BY seq DESC
LIMIT $3
"""

# Creates the pair's thread or moves it to the top of both users' lists. $1 < $2.
UPSERT_THREAD = """
INSERT INTO dm_threads AS t (user_low, user_high) VALUES ($1, $2)
ON CONFLICT (user_low, user_high) DO UPDATE
    SET last_message_at = now(), activity_seq = nextval('dm_threads_activity_seq')
RETURNING thread_id
"""
INSERT_DIRECT = f"""
INSERT INTO messages (kind, thread_id, sender_user_id, recipient_user_id, body)
VALUES ('direct', $1, $2, $3, $4)
RETURNING {COLUMNS}
"""
SELECT_THREAD = "SELECT thread_id, user_low, user_high FROM dm_threads WHERE thread_id = $1"
# The caller's threads, most recent activity first: one index range per side of the pair
# (dm_threads_by_low / _by_high), each cut to the page, then merged.
SELECT_THREADS_PAGE = """
WITH mine AS (
    (SELECT thread_id, user_high AS other_user_id, last_message_at, activity_seq
     FROM dm_threads
     WHERE user_low = $1 AND ($2::bigint IS NULL OR activity_seq < $2)
     ORDER BY activity_seq DESC LIMIT $3)
    UNION ALL
    (SELECT thread_id, user_low AS other_user_id, last_message_at, activity_seq
     FROM dm_threads
     WHERE user_high = $1 AND ($2::bigint IS NULL OR activity_seq < $2)
     ORDER BY activity_seq DESC LIMIT $3)
)
SELECT m.thread_id, m.other_user_id, u.username AS other_username, m.last_message_at,
       m.activity_seq, (mu.user_id IS NOT NULL) AS muted
FROM mine m
LEFT JOIN usernames u ON u.user_id = m.other_user_id
LEFT JOIN user_mutes mu ON mu.user_id = $1 AND mu.muted_user_id = m.other_user_id
ORDER BY m.activity_seq DESC
LIMIT $3
"""

# Whether two users share a project interaction (issue #12 "Direct messages"), through the
# wallets each has actively linked now: on one indexed project, one is the owner and the other
# the selected worker, a bidder (a bid draft for that wallet, or an on-chain bid the indexer
# recorded, whatever its status) or a challenge submitter (a registered submission). Every
# branch starts from the owner side (projects_owner_order) and probes the other table by its
# (project, wallet) key.
SELECT_SHARE_PROJECT = """
WITH a AS (
    SELECT coalesce(array_agg(wallet_address), '{}'::text[]) AS w
    FROM wallet_links WHERE user_id = $1 AND revoked_at IS NULL
), b AS (
    SELECT coalesce(array_agg(wallet_address), '{}'::text[]) AS w
    FROM wallet_links WHERE user_id = $2 AND revoked_at IS NULL
), sides AS (
    SELECT a.w AS owner_side, b.w AS other_side FROM a, b
    UNION ALL
    SELECT b.w, a.w FROM a, b
)
SELECT EXISTS (
    SELECT 1 FROM sides s JOIN projects p ON p.owner_address = any(s.owner_side)
    WHERE p.selected_builder_address = any(s.other_side)
       OR EXISTS (SELECT 1 FROM bid_drafts d
                  WHERE d.project_address = p.project_address
                    AND d.bidder_address = any(s.other_side))
       OR EXISTS (SELECT 1 FROM bids b
                  WHERE b.project_address = p.project_address
                    AND b.bidder_address = any(s.other_side))
       OR EXISTS (SELECT 1 FROM challenge_submissions c
                  WHERE c.project_address = p.project_address
                    AND c.submitter_address = any(s.other_side))
)
"""
SELECT_USER_EXISTS = "SELECT EXISTS (SELECT 1 FROM users WHERE user_id = $1)"


class NewChatMessage(Protocol):
    """A chat send as :func:`insert_chats` stores it: ``messaging.chat.PostChatMessage`` (the
    shard command) is one, so the send is not copied into another shape on its way down."""

    @property
    def message_id(self) -> uuid.UUID: ...
    @property
    def project_address(self) -> str: ...
    @property
    def user_id(self) -> uuid.UUID: ...
    @property
    def sender_wallet(self) -> str: ...
    @property
    def body(self) -> str: ...


def chat_event(message: NewChatMessage) -> NewEvent:
    """The ``chat.message`` event of a chat send."""
    return NewEvent(
        message.project_address,
        ChatMessagePayload(
            messageId=str(message.message_id),
            projectAddress=message.project_address,
            senderUserId=str(message.user_id),
            senderWalletAddress=message.sender_wallet,
        ),
    )


async def insert_chats(conn: Conn, messages: Sequence[NewChatMessage]) -> list[MessageRow]:
    """Store chat messages with their ``chat.message`` events, in one statement that commits by
    itself when ``conn`` is not in a transaction. Returns the rows inserted, in the given order;
    a message whose id exists already (a retried send) is not written again and not returned.
    """
    if not messages:
        return []
    records = await conn.fetch(
        INSERT_CHATS,
        [m.message_id for m in messages],
        [m.project_address for m in messages],
        [m.user_id for m in messages],
        [m.sender_wallet for m in messages],
        [m.body for m in messages],
        *events.event_arguments([(str(m.message_id), chat_event(m)) for m in messages]),
    )
    if not records:
        return []
    rows.check_names(_INSERTED_CHAT_COLUMNS, records[0], "inserted chat messages")
    make = MessageRow._make
    return [make(record[:-1]) for record in records]


async def get_message(conn: Conn, message_id: uuid.UUID) -> MessageRow | None:
    return rows.maybe(MessageRow, await conn.fetchrow(SELECT_MESSAGE, message_id))


async def chat_page(
    conn: Conn, project_address: str, *, before_seq: int | None, limit: int
) -> list[MessageRow]:
    records = await conn.fetch(SELECT_CHAT_PAGE, project_address, before_seq, limit)
    return rows.many(MessageRow, records)


async def insert_direct(
    conn: Connection,
    *,
    user_low: uuid.UUID,
    user_high: uuid.UUID,
    sender_user_id: uuid.UUID,
    recipient_user_id: uuid.UUID,
    body: str,
) -> MessageRow:
    """Create or bump the pair's thread, insert the message and its ``dm.message`` event (in
    the caller's transaction)."""
    thread_id = await conn.fetchval(UPSERT_THREAD, user_low, user_high)
    record = await fetch_one(
        conn, INSERT_DIRECT, thread_id, sender_user_id, recipient_user_id, body
    )
    row = rows.one(MessageRow, record)
    event = NewEvent(
        thread_subject(thread_id),
        DmMessagePayload(
            messageId=str(row.id),
            threadId=str(thread_id),
            senderUserId=str(sender_user_id),
            recipientUserId=str(recipient_user_id),
        ),
    )
    await events.append(conn, [event])
    return row


async def get_thread(conn: Conn, thread_id: uuid.UUID) -> ThreadRow | None:
    return rows.maybe(ThreadRow, await conn.fetchrow(SELECT_THREAD, thread_id))


async def thread_page(
    conn: Conn, thread_id: uuid.UUID, *, before_seq: int | None, limit: int
) -> list[MessageRow]:
    records = await conn.fetch(SELECT_THREAD_PAGE, thread_id, before_seq, limit)
    return rows.many(MessageRow, records)


async def threads_page(
    conn: Conn, user_id: uuid.UUID, *, before_activity: int | None, limit: int
) -> list[ThreadListRow]:
    records = await conn.fetch(SELECT_THREADS_PAGE, user_id, before_activity, limit)
    return rows.many(ThreadListRow, records)


async def share_project(conn: Conn, a: uuid.UUID, b: uuid.UUID) -> bool:
    return bool(await conn.fetchval(SELECT_SHARE_PROJECT, a, b))


async def user_exists(conn: Conn, user_id: uuid.UUID) -> bool:
    return bool(await conn.fetchval(SELECT_USER_EXISTS, user_id))
