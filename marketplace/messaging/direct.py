"""Direct messages (docs/messaging.md, "Direct messages"): the send and the reads, straight on
PostgreSQL.

A send needs no shard: the only state it shares with other sends is the pair's thread, and the
thread's UNIQUE ordered pair with ``INSERT ... ON CONFLICT`` already makes concurrent first
messages land in one thread. Message order within a thread is the order of their ``seq``, taken
at insert; two messages of one pair sent at the same instant have no other order to keep.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg

from marketplace.errors import InvalidRequest
from marketplace.messaging import rules
from marketplace.messaging.chat import MESSAGE_CURSOR, MessagePage, viewer_is_moderator
from marketplace.messaging.errors import Blocked, NoSharedProject, ThreadNotFound
from marketplace.pagination import BIGINT_MAX, CursorKind, keyset_page
from marketplace.storage.pool import Conn
from marketplace.storage.repositories import messages as repo
from marketplace.storage.repositories import user_relations

THREAD_CURSOR = CursorKind("t1", (BIGINT_MAX,))


def require_other_user(
    user_id: uuid.UUID, other: uuid.UUID, field: str, action: str, location: str = "body"
) -> None:
    """400 ``invalid_request`` naming ``field`` when ``other`` is the caller."""
    if other == user_id:
        raise InvalidRequest(
            f"you cannot {action} yourself",
            [
                {
                    "location": location,
                    "field": field,
                    "message": f"must not be your own user id (you cannot {action} yourself)",
                    "type": "value_error",
                }
            ],
        )


async def authorize_send(conn: Conn, sender: uuid.UUID, recipient: uuid.UUID) -> None:
    """The send rules, in their answer order: 400 (to yourself), 403 ``no_shared_project`` (also
    for an unknown recipient), 403 ``blocked`` (either direction)."""
    require_other_user(sender, recipient, "recipientUserId", "send a direct message to")
    if not await repo.share_project(conn, sender, recipient):
        raise NoSharedProject()
    if await user_relations.blocked_either_way(conn, sender, recipient):
        raise Blocked()


async def send(
    pool: asyncpg.Pool, sender: uuid.UUID, recipient: uuid.UUID, body: str
) -> repo.MessageRow:
    """Check the rules and store the message, in one transaction: the thread created or bumped,
    the message, its ``dm.message`` event."""
    low, high = rules.ordered_pair(sender, recipient)
    async with pool.acquire() as conn, conn.transaction():
        await authorize_send(conn, sender, recipient)
        return await repo.insert_direct(
            conn,
            user_low=low,
            user_high=high,
            sender_user_id=sender,
            recipient_user_id=recipient,
            body=body,
        )


@dataclass(frozen=True)
class ThreadPage:
    rows: list[repo.ThreadListRow]
    next_cursor: str | None


async def list_threads(
    pool: asyncpg.Pool, user_id: uuid.UUID, *, limit: int, cursor: str | None
) -> ThreadPage:
    """The caller's threads, most recent activity first. A thread that gets a message moves to
    the top, so paging while messages arrive may show it again or skip past it."""
    position = THREAD_CURSOR.position(cursor)
    rows = await repo.threads_page(
        pool, user_id, before_activity=position[0] if position else None, limit=limit + 1
    )
    page, next_cursor = keyset_page(rows, limit, THREAD_CURSOR, lambda row: (row.activity_seq,))
    return ThreadPage(page, next_cursor)


async def list_thread_messages(
    pool: asyncpg.Pool,
    user_id: uuid.UUID,
    thread_id: uuid.UUID,
    *,
    limit: int,
    cursor: str | None,
) -> MessagePage:
    """The thread's messages, newest first; 404 ``thread_not_found`` for anyone but its two
    participants (and for an unknown thread: the two are indistinguishable)."""
    position = MESSAGE_CURSOR.position(cursor)
    thread = await repo.get_thread(pool, thread_id)
    if thread is None or user_id not in (thread.user_low, thread.user_high):
        raise ThreadNotFound()
    rows = await repo.thread_page(
        pool, thread_id, before_seq=position[0] if position else None, limit=limit + 1
    )
    page, next_cursor = keyset_page(rows, limit, MESSAGE_CURSOR, lambda row: (row.seq,))
    return MessagePage(page, next_cursor, await viewer_is_moderator(pool, user_id, page))
