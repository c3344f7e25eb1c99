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
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from marketplace.errors import MarketplaceError
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


async def authorize_send(
    conn: Conn, user_id: uuid.UUID, project_address: str, sender_wallet: str
) -> ProjectParties:
    """The send rules, in their answer order: 404 (project not indexed or not visible), 403
    ``wallet_not_linked``, 409 ``worker_not_selected``, 403 ``not_project_party``."""
    wallets, project = await caller_and_visible_project(conn, user_id, project_address)
    return check_send(wallets, project, sender_wallet)


def check_send(
    wallets: frozenset[str], project: ProjectParties | ProjectNotFound, sender_wallet: str
) -> ProjectParties:
    if isinstance(project, ProjectNotFound):
        raise project
    require_linked(wallets, sender_wallet, "senderWalletAddress")
    rules.require_chat_sender(project, sender_wallet)
    return project


# A send's outcome in the shard's batch: the stored message, or the rule that refused it.
SendOutcome = repo.MessageRow | MarketplaceError
# The shard's chat sends, checked and stored a batch at a time (its one group commit).
CHAT_SENDS: GroupKind[PostChatMessage, SendOutcome] = GroupKind("chat-sends")


async def store_chat_messages(
    pool: asyncpg.Pool, sends: Sequence[PostChatMessage]
) -> list[SendOutcome]:
    """Check ``sends`` against the send rules (their facts read in one statement) and store the
    accepted ones with their events in one self-committing statement; one outcome per send, in
    order. A message stored already (its command repeated after the shard died) is read back."""
    async with pool.acquire() as conn:
        facts = await callers_and_visible_projects(
            conn, [(send.user_id, send.project_address) for send in sends]
        )
        outcomes: list[SendOutcome | None] = []
        accepted: list[PostChatMessage] = []
        for send, (wallets, project) in zip(sends, facts, strict=True):
            try:
                check_send(wallets, project, send.sender_wallet)
            except MarketplaceError as refused:
                outcomes.append(refused)
            else:
                outcomes.append(None)
                accepted.append(send)
        stored = {row.id: row for row in await repo.insert_chats(conn, accepted)}
        for send in accepted:
            if send.message_id not in stored:
                row = await repo.get_message(conn, send.message_id)
                if row is None:  # pragma: no cover - the insert's conflict was with this id
                    raise RuntimeError("chat message vanished after a conflicting insert")
                stored[send.message_id] = row
    return [
        outcome if outcome is not None else stored[send.message_id]
        for send, outcome in zip(sends, outcomes, strict=True)
    ]


@dataclass(frozen=True)
class PostChatMessage(ProjectCommand):
    """Shard command: check the send rules and store the message with its ``chat.message``
    event. ``message_id`` is chosen by the frontend, so a command sent again after its shard died
    stores the message once and answers with it (the rules are checked again first). The
    command is also what the repository stores (``messages.NewChatMessage``).

    The shard's concurrent sends (of different projects: a project's own wait for its lock) are
    checked and stored together (:class:`~marketplace.shards.GroupCommit`): one statement reads
    the rules' facts of a batch, one statement stores it, holding the events' order lock once.
    """

    message_id: uuid.UUID
    user_id: uuid.UUID
    sender_wallet: str
    body: str

    async def apply(self, ctx: ShardContext) -> repo.MessageRow:
        sends = ctx.group_commit(CHAT_SENDS, functools.partial(store_chat_messages, ctx.pool))
        outcome = await sends.submit(self)
        if isinstance(outcome, MarketplaceError):
            raise outcome
        return outcome


@dataclass(frozen=True)
class MessagePage:
    rows: list[repo.MessageRow]
    next_cursor: str | None
    # Whether the viewer sees removed bodies (a moderation admin).
    moderator: bool


async def viewer_is_moderator(conn: Conn, user_id: uuid.UUID, rows: list[repo.MessageRow]) -> bool:
    """Whether removed bodies in ``rows`` are shown to the viewer; the flag is only read when a
    removed message is among them."""
    if not any(row.body_status == BodyStatus.REMOVED for row in rows):
        return False
    return await is_moderation_admin(conn, user_id)


def _seq(row: repo.MessageRow) -> tuple[int]:
    return (row.seq,)


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
