"""Builders of the boards tests: indexed projects with a selected worker and completed
milestones, written into the read model as the indexer writes them, with the events it writes;
the boards consumer run to the end of the outbox; the board read through HTTP."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from marketplace.events.types import EventType
from marketplace.leaderboards.boards import BoardsConsumer, ConsumerConfig, consume_all
from marketplace.storage.pool import Connection
from tests.api.records.conftest import random_address, seed_project
from tests.support.raw_events import RawEvent, append_raw


@dataclass(frozen=True)
class Done:
    """A milestone of a seeded project: its payout and how long ago it was approved (None: not
    approved, status ``submitted``)."""

    payout: int
    days_ago: float | None = 1.0


def ago(days: float) -> datetime:
    return datetime.now(UTC) - timedelta(days=days)


async def emit(
    db: asyncpg.Connection, type: EventType, subject: str, payload: dict[str, Any] | None = None
) -> None:
    """Commit one event; its payload as given (the boards consumer reads types and subjects, and
    a reorg's lists of projects), so it may leave out what the boards never read."""
    async with db.transaction():
        await append_raw(db, [RawEvent(type, subject, payload or {})])


async def worker_project(
    db: asyncpg.Connection,
    worker: str,
    milestones: Sequence[Done],
    *,
    invite_only: bool = False,
) -> str:
    """An indexed project in Building with ``worker`` selected and the given milestones, and its
    ``project.created`` event."""
    project = await seed_project(
        db,
        status="building",
        selected_builder_address=worker,
        milestone_count=len(milestones),
        bidding_access="invite_only" if invite_only else "open",
        allowlist=[worker] if invite_only else [],
    )
    await db.executemany(
        "INSERT INTO milestones (project_address, milestone_index, status, payout_usdc, "
        "approved_at) VALUES ($1, $2, $3, $4, $5)",
        [
            (
                project,
                index,
                "approved" if m.days_ago is not None else "submitted",
                m.payout,
                ago(m.days_ago) if m.days_ago is not None else None,
            )
            for index, m in enumerate(milestones)
        ],
    )
    await emit(db, EventType.PROJECT_CREATED, project, {"block": 1})
    return project


async def tag_milestone(
    db: asyncpg.Connection, project: str, milestone: int, categories: list[str]
) -> None:
    """The owner's tag set as the tag upsert stores it, with its event."""
    owner = await db.fetchval(
        "SELECT owner_address FROM projects WHERE project_address = $1", project
    )
    await db.execute(
        "INSERT INTO milestone_category_tags (project_address, milestone_index, "
        "owner_wallet_address, categories, revision) VALUES ($1, $2, $3, $4, 1) "
        "ON CONFLICT (project_address, milestone_index) DO UPDATE "
        "SET categories = EXCLUDED.categories, revision = milestone_category_tags.revision + 1",
        project,
        milestone,
        owner,
        categories,
    )
    await emit(
        db,
        EventType.CATEGORY_TAGS_CHANGED,
        project,
        {"projectAddress": project, "milestoneIndex": milestone, "categories": categories},
    )


def consumer(database_url: str) -> BoardsConsumer:
    return BoardsConsumer(database_url, ConsumerConfig(poll_interval=0.05, standby_interval=0.2))


async def consume(db: Connection, database_url: str) -> int:
    return await consume_all(consumer(database_url), db)


async def board(client: Any, **params: Any) -> dict[str, Any]:
    resp = await client.get("/v1/leaderboards", params={k: str(v) for k, v in params.items()})
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    assert body["count"] == len(body["items"])
    return body


async def wallets(client: Any, **params: Any) -> list[str]:
    return [row["walletAddress"].lower() for row in (await board(client, **params))["items"]]


async def every_page(client: Any, limit: int, **params: Any) -> list[dict[str, Any]]:
    """Follow nextCursor from the first page to the last."""
    rows: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        query = dict(params, limit=limit)
        if cursor is not None:
            query["cursor"] = cursor
        body = await board(client, **query)
        rows.extend(body["items"])
        cursor = body["nextCursor"]
        if cursor is None:
            return rows


async def standings(db: asyncpg.Connection) -> list[tuple[Any, ...]]:
    rows = await db.fetch(
        "SELECT category, time_window, wallet_address, completed_milestones, total_payout_usdc, "
        "projects, categories, last_completed_at FROM leaderboard_standings ORDER BY 1, 2, 3"
    )
    return [tuple(row) for row in rows]


async def entries(db: asyncpg.Connection) -> list[tuple[Any, ...]]:
    rows = await db.fetch(
        "SELECT project_address, milestone_index, worker_wallet, payout_usdc, completed_at, "
        "invite_only, categories FROM leaderboard_entries ORDER BY 1, 2"
    )
    return [tuple(row) for row in rows]


__all__ = ["random_address"]
