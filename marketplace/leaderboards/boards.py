"""Leaderboard boards: kept current from the outbox, read from stored standings
(docs/leaderboards.md, "Boards").

Maintenance. Every frontend runs a :class:`BoardsConsumer`; exactly one is active (the
notifications consumer's pattern: a session-level advisory lock on a connection of its own,
marketplace/outbox/leader.py). It reads the outbox after ``leaderboard_consumer_cursor`` and, for
each batch, in ONE transaction with the cursor: rebuilds the ``leaderboard_entries`` of every
project an event touched (from ``milestones`` + ``projects`` + ``milestone_category_tags``, so
the result is the read model's state, whatever the events said), then re-aggregates every
standing of the wallets whose entries changed (the workers before and after). A batch that
fails commits nothing and is read again; re-applying one is harmless, because each project is
rebuilt from the current state. Between batches it moves the 90d/30d windows forward (about
every :data:`WINDOW_REFRESH_SECONDS`): only the wallets with a milestone that left a window
since the last refresh are re-aggregated; and it pauses :data:`COALESCE_SECONDS`, so the many
small commits of a backfilling indexer arrive as one batch.

Reads. A board of no category or one category is one index range of ``leaderboard_standings``
(one index per sort); a board of several categories aggregates the entries tagged with any of
them (a milestone counts once). Both page by keyset (sort value descending, then wallet
ascending), and the rank of a page's first row is the number of rows ahead of it plus one.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import asyncpg
from pydantic import ValidationError

from marketplace.events.types import ChainReorgPayload, EventType
from marketplace.leaderboards.errors import UnknownCategory
from marketplace.outbox.leader import OutboxLeader
from marketplace.pagination import TextCursorKind, invalid_cursor
from marketplace.storage.pool import Conn, Connection
from marketplace.storage.repositories import events as events_repo
from marketplace.storage.repositories import leaderboard_boards as repo
from marketplace.storage.repositories.events import StoredEvent

log = logging.getLogger(__name__)

# The event types that can change a board (docs/events.md).
CONSUMED_TYPES: tuple[str, ...] = (
    EventType.PROJECT_CREATED,
    EventType.PROJECT_CHANGED,
    EventType.PROJECT_REMOVED,
    EventType.CHAIN_REORG,
    EventType.CATEGORY_TAGS_CHANGED,
)
WINDOW_REFRESH_SECONDS = 60.0
COALESCE_SECONDS = 0.25
DEFAULT_BATCH_SIZE = 500
ALL_CATEGORIES = "*"


class BoardSort(enum.StrEnum):
    PAYOUT = "payout"
    MILESTONES = "milestones"
    RECENT = "recent"


class BoardWindow(enum.StrEnum):
    ALL = "all"
    DAYS_90 = "90d"
    DAYS_30 = "30d"


_ADDRESS = r"0x[0-9a-f]{40}"
# One cursor kind per sort, so a cursor of one sort is refused by another. The payout part is a
# numeric sum of numeric(78, 0) payouts: up to 100 digits leaves room for any realistic total.
CURSORS: dict[BoardSort, TextCursorKind] = {
    BoardSort.PAYOUT: TextCursorKind("lbp1", (r"0|[1-9][0-9]{0,99}", _ADDRESS)),
    BoardSort.MILESTONES: TextCursorKind("lbm1", (r"0|[1-9][0-9]{0,9}", _ADDRESS)),
    BoardSort.RECENT: TextCursorKind("lbr1", (r"0|[1-9][0-9]{0,18}", _ADDRESS)),
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INTEGER_MAX = 2**31 - 1


def affected_projects(events: Sequence[StoredEvent]) -> set[str]:
    """The projects whose entries the events may have changed: the subject of project and tag
    events; a reorg's removed and re-snapshotted projects (each also gets its own
    ``project.removed``/``project.changed``, but the reorg event alone is enough, and a reorg
    whose payload its model refuses adds nothing for that reason)."""
    projects: set[str] = set()
    for event in events:
        if event.type == EventType.CHAIN_REORG:
            try:
                reorg = ChainReorgPayload.model_validate_json(event.payload_json)
            except ValidationError:
                log.warning("event %d (chain.reorg) does not match its payload model", event.id)
                continue
            projects.update(p.lower() for p in (*reorg.removedProjects, *reorg.resnapshotProjects))
        else:
            projects.add(event.subject.lower())
    return projects


async def apply_projects(conn: Connection, projects: Sequence[str]) -> set[str]:
    """Rebuild the projects' entries and re-aggregate the wallets that changed (the caller's
    transaction, holding the write lock); the wallets re-aggregated."""
    if not projects:
        return set()
    wallets = await repo.rebuild_project_entries(conn, sorted(projects))
    if wallets:
        await repo.reaggregate_wallets(conn, sorted(wallets))
    return wallets


async def refresh_windows(conn: Connection) -> int:
    """Move the 90d/30d windows to now: re-aggregate the wallets with a milestone that left a
    window since the last refresh (every wallet on the first). The number of wallets."""
    async with conn.transaction():
        await repo.take_write_lock(conn)
        _, refreshed = await repo.consumer_cursor(conn)
        now = await repo.transaction_time(conn)
        if refreshed is None:
            await repo.rebuild_all(conn)
            count = -1
        else:
            wallets = await repo.decayed_wallets(conn, refreshed, now)
            if wallets:
                await repo.reaggregate_wallets(conn, wallets)
            count = len(wallets)
        await repo.set_windows_refreshed(conn, now)
    return count


async def rebuild(conn: Connection) -> tuple[int, int]:
    """Every entry and standing from scratch, in one transaction (``marketplace admin
    leaderboards rebuild``); the numbers of entries and standings. The consumer's cursor stays:
    events it has still to read rebuild their projects again, which changes nothing."""
    async with conn.transaction():
        await repo.take_write_lock(conn)
        await repo.rebuild_all(conn)
        await repo.set_windows_refreshed(conn, await repo.transaction_time(conn))
        return await repo.counts(conn)


@dataclass(frozen=True)
class ConsumerConfig:
    poll_interval: float
    standby_interval: float
    batch_size: int = DEFAULT_BATCH_SIZE
    window_refresh_seconds: float = WINDOW_REFRESH_SECONDS
    # Pause after a round before looking for more events, so that a busy indexer's many small
    # commits are applied as one batch (each project and wallet once) instead of one each.
    coalesce_seconds: float = COALESCE_SECONDS


class BoardsConsumer(OutboxLeader):
    role = "leaderboards consumer"

    def __init__(self, dsn: str, config: ConsumerConfig) -> None:
        super().__init__(
            dsn,
            poll_interval=config.poll_interval,
            standby_interval=config.standby_interval,
            log=log,
        )
        self.config = config
        self.events = 0  # events this consumer applied
        self._next_refresh = 0.0

    async def try_lock(self, conn: asyncpg.Connection) -> bool:
        return await repo.try_consumer_lock(conn)

    async def work(self, conn: asyncpg.Connection) -> bool:
        return await self.consume_batch(conn) == self.config.batch_size

    async def between(self, conn: asyncpg.Connection) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() >= self._next_refresh:
            await refresh_windows(conn)
            self._next_refresh = loop.time() + self.config.window_refresh_seconds
        # A commit notified meanwhile still wakes the wait that follows at once.
        await asyncio.sleep(self.config.coalesce_seconds)

    async def consume_batch(self, conn: Connection) -> int:
        """Apply the next batch after the cursor in one transaction; the number of events read
        (0: none waiting). ``conn`` must hold the consumer lock (or be the only consumer)."""
        # Position what has committed before the transaction: inside it the positioning lock
        # would be held until this batch commits, holding back the relay and the stream.
        await events_repo.position_unless_relayed(conn)
        async with conn.transaction():
            await repo.take_write_lock(conn)
            cursor, _ = await repo.consumer_cursor(conn)
            rows, position = await events_repo.read_consumed(
                conn, cursor, self.config.batch_size, CONSUMED_TYPES, position_first=False
            )
            if not rows:
                if position > cursor:  # past other types' events, for good
                    await repo.advance_consumer_cursor(conn, position)
                return 0
            await apply_projects(conn, sorted(affected_projects(rows)))
            await repo.advance_consumer_cursor(conn, position)
        self.events += len(rows)
        return len(rows)


async def consume_all(consumer: BoardsConsumer, conn: Connection) -> int:
    """Consume batches until none is waiting (tests, tools); the number of events read. Every
    event committed before the call counts as waiting: it is positioned first, relay or not."""
    await events_repo.position_committed(conn, wait=True)
    total = 0
    while count := await consumer.consume_batch(conn):
        total += count
    return total


# --- reads --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BoardRow:
    rank: int
    wallet_address: str
    user_id: uuid.UUID | None
    username: str | None
    completed_milestones: int
    total_payout_usdc: str
    projects: int
    categories: list[str]
    last_completed_at: datetime


@dataclass(frozen=True)
class BoardPage:
    rows: list[BoardRow]
    next_cursor: str | None


def parse_categories(text: str | None) -> list[str]:
    """``a,b`` -> distinct slugs in request order (blank parts ignored)."""
    if not text:
        return []
    seen: dict[str, None] = {}
    for part in text.split(","):
        slug = part.strip()
        if slug:
            seen.setdefault(slug, None)
    return list(seen)


def _sort_value(sort: BoardSort, row: repo.StandingRow) -> str:
    if sort is BoardSort.PAYOUT:
        return str(int(row.total_payout_usdc))
    if sort is BoardSort.MILESTONES:
        return str(row.completed_milestones)
    delta = row.last_completed_at - _EPOCH
    return str((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)


def _cursor_value(sort: BoardSort, text: str) -> object:
    """The SQL parameter of a decoded cursor's sort value."""
    if sort is BoardSort.PAYOUT:
        return Decimal(text)
    if sort is BoardSort.MILESTONES:
        value = int(text)
        if value > _INTEGER_MAX:
            raise invalid_cursor()  # a position no row can have: forged
        return value
    micros = int(text)
    return datetime.fromtimestamp(micros // 1_000_000, UTC).replace(microsecond=micros % 1_000_000)


async def board_page(
    conn: Conn,
    *,
    categories: Sequence[str],
    sort: BoardSort,
    window: BoardWindow,
    limit: int,
    cursor: str | None,
) -> BoardPage:
    """One page of the board of ``categories`` (none: every completed milestone). Unknown
    slugs: 422 ``unknown_category`` naming them; a cursor not issued for this sort: 400."""
    kind = CURSORS[sort]
    position = kind.position(cursor)
    after = (_cursor_value(sort, position[0]), position[1]) if position is not None else None
    if categories:
        known = await repo.known_categories(conn, categories)
        unknown = [slug for slug in categories if slug not in known]
        if unknown:
            raise UnknownCategory(unknown, f"unknown leaderboard categories: {', '.join(unknown)}")
    fetch = limit + 1
    if len(categories) <= 1:
        rows = await repo.standings_page(
            conn,
            category=categories[0] if categories else ALL_CATEGORIES,
            window=window.value,
            sort=sort.value,
            limit=fetch,
            after=after,
        )
    else:
        rows = await repo.entries_page(
            conn,
            categories=categories,
            window=window.value,
            sort=sort.value,
            limit=fetch,
            after=after,
        )
    page = rows[:limit]
    first_rank = int(page[0].before) + 1 if page else 0
    items = [
        BoardRow(
            rank=first_rank + offset,
            wallet_address=row.wallet_address,
            user_id=row.user_id,
            username=row.username,
            completed_milestones=row.completed_milestones,
            total_payout_usdc=str(int(row.total_payout_usdc)),
            projects=row.projects,
            categories=list(row.categories),
            last_completed_at=row.last_completed_at,
        )
        for offset, row in enumerate(page)
    ]
    next_cursor = None
    if len(rows) > limit and page:
        last = page[-1]
        next_cursor = kind.encode(_sort_value(sort, last), last.wallet_address)
    return BoardPage(items, next_cursor)


# --- freshness ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BoardLag:
    """How far the boards consumer is behind the outbox: the age of the oldest event of the
    consumed types it has not applied (0 when none is waiting)."""

    lag_ms: int

    def stale(self, target_ms: int) -> bool:
        return self.lag_ms > target_ms


async def board_version(conn: Conn) -> tuple[int, datetime | None]:
    """What the boards' content depends on: the consumer's last applied event and the last
    window refresh (a rebuild sets it too). Equal versions: equal boards."""
    return await repo.consumer_cursor(conn)


async def board_lag(conn: Conn) -> BoardLag:
    oldest = await repo.oldest_pending_event(conn, CONSUMED_TYPES)
    if oldest is None:
        return BoardLag(0)
    age = (datetime.now(UTC) - oldest).total_seconds()
    return BoardLag(max(0, int(age * 1000)))
