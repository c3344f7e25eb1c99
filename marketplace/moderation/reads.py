"""Moderation reads, straight from PostgreSQL (never through the counter actor): the send check,
a user's offenses and the audit log, with who may read what (docs/messaging.md)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from marketplace.config import Settings
from marketplace.identity.permissions import flags_of
from marketplace.moderation.errors import NotModerationAdmin, NotOffenseViewer
from marketplace.moderation.offenses import SuspensionPolicy, window_total
from marketplace.pagination import (
    BIGINT_MAX,
    CursorKind,
    TextCursorKind,
    invalid_cursor,
    keyset_page,
)
from marketplace.storage.pool import Conn
from marketplace.storage.repositories import moderation as repo
from marketplace.storage.repositories import moderation_audit as audit_repo

OFFENSE_CURSOR = CursorKind("o1", (BIGINT_MAX,))
AUDIT_CURSOR = CursorKind("a1", (BIGINT_MAX,))
# The suspensions list: (microseconds of the suspension start, user id) of the page's last item;
# a tag per state, so a cursor of one listing is refused by the other.
_MICROS = r"0|[1-9][0-9]{0,18}"
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
SUSPENSION_CURSORS = {
    "active": TextCursorKind("s1", (_MICROS, _UUID)),
    "all": TextCursorKind("sa1", (_MICROS, _UUID)),
}


def _seq_position(row: repo.OffenseListRow | audit_repo.AuditRow) -> tuple[int]:
    return (row.seq,)


async def suspended_until(conn: Conn, user_id: uuid.UUID) -> datetime | None:
    """When the user's sending is allowed again, or None when it is allowed now (one query on
    the partial index of unlifted suspensions)."""
    return await repo.active_until(conn, user_id)


async def is_moderation_admin(conn: Conn, user_id: uuid.UUID) -> bool:
    return (await flags_of(conn, user_id)).moderation_admin


async def require_moderation_admin(conn: Conn, user_id: uuid.UUID) -> None:
    """403 ``not_moderation_admin`` unless ``user_id`` holds the ``moderationAdmin`` flag (read
    from PostgreSQL on every call, so a revoked flag takes effect at once)."""
    if not await is_moderation_admin(conn, user_id):
        raise NotModerationAdmin()


@dataclass(frozen=True)
class OffenseOverview:
    user_id: uuid.UUID
    total: int
    window_total: int
    suspended_until: datetime | None
    items: list[repo.OffenseListRow]
    next_cursor: str | None


async def offense_overview(
    pool: asyncpg.Pool,
    settings: Settings,
    *,
    viewer_id: uuid.UUID,
    user_id: uuid.UUID,
    limit: int,
    cursor: str | None,
) -> OffenseOverview:
    """The offenses of ``user_id``, newest first, with the counts the suspension rule sees now.

    Only the user itself or a moderation admin (403 ``not_offense_viewer``). ``window_total``
    counts as the counter actor does: offenses within the window and after the user's latest
    suspension start or lift.
    """
    position = OFFENSE_CURSOR.position(cursor)
    if viewer_id != user_id and not await is_moderation_admin(pool, viewer_id):
        raise NotOffenseViewer()
    policy = SuspensionPolicy.from_settings(settings)
    summary = await repo.offense_summary(pool, user_id)
    now = summary.now
    times = await repo.offense_times(pool, user_id, now - policy.window)
    rows = await repo.offense_page(
        pool, user_id, before_seq=position[0] if position else None, limit=limit + 1
    )
    items, next_cursor = keyset_page(rows, limit, OFFENSE_CURSOR, _seq_position)
    return OffenseOverview(
        user_id=user_id,
        total=summary.total,
        window_total=window_total(times, now, policy.window, summary.counting_since),
        suspended_until=summary.active_until,
        items=items,
        next_cursor=next_cursor,
    )


async def audit_page(
    pool: asyncpg.Pool,
    *,
    viewer_id: uuid.UUID,
    subject_user_id: uuid.UUID | None,
    limit: int,
    cursor: str | None,
) -> tuple[list[audit_repo.AuditRow], str | None]:
    """Audit entries (of one subject when given), newest first; moderation admins only."""
    position = AUDIT_CURSOR.position(cursor)
    await require_moderation_admin(pool, viewer_id)
    rows = await audit_repo.page(
        pool,
        subject_user_id=subject_user_id,
        before_seq=position[0] if position else None,
        limit=limit + 1,
    )
    return keyset_page(rows, limit, AUDIT_CURSOR, _seq_position)


async def suspensions_page(
    pool: asyncpg.Pool,
    settings: Settings,
    *,
    viewer_id: uuid.UUID,
    state: str,
    limit: int,
    cursor: str | None,
) -> tuple[list[repo.SuspendedUserRow], str | None]:
    """Suspended accounts, newest suspension first (``state`` ``active``: suspended now;
    ``all``: ever), with their offenses in the window; moderation admins only."""
    kind = SUSPENSION_CURSORS[state]
    position = kind.position(cursor)
    await require_moderation_admin(pool, viewer_id)
    after = None
    if position is not None:
        micros, user_id = position
        if int(micros) > BIGINT_MAX:
            raise invalid_cursor()
        after = (int(micros), uuid.UUID(user_id))
    rows = await repo.suspended_page(
        pool,
        active_only=state == "active",
        window_seconds=settings.moderation_window_seconds,
        after=after,
        limit=limit + 1,
    )
    page = list(rows[:limit])
    if len(rows) <= limit or not page:
        return page, None
    last = page[-1]
    return page, kind.encode(str(last.position), str(last.user_id))
