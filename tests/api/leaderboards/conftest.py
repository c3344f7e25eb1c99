"""Helpers of the leaderboards API tests: the shipped categories, completed milestones.

The suite empties every table before each test (TRUNCATE), the shipped categories included, so
the ``client`` here re-applies exactly the seed block of migration 0016 (between its
``-- seed:begin`` and ``-- seed:end`` lines): the tests see what the migration ships, not a copy.
Projects and milestones are inserted straight into the read-model tables the indexer fills, which
is what the tag rules read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.api.records.conftest import (
    Party,
    error_code,
    link_another,
    linked_party,
    random_address,
    seed_project,
)
from tests.conftest import Servers
from tests.support import apps

db = apps.db

__all__ = [
    "Party",
    "error_code",
    "link_another",
    "linked_party",
    "random_address",
    "seed_project",
]

MIGRATION = (
    Path(__file__).resolve().parents[3]
    / "marketplace"
    / "storage"
    / "migrations"
    / "0016_leaderboards.sql"
)
SHIPPED = [
    "smart-contracts",
    "frontend",
    "backend",
    "design",
    "data",
    "devops",
    "security",
    "ai-agents",
    "docs",
]


def seed_sql() -> str:
    text = MIGRATION.read_text()
    start = text.index("-- seed:begin")
    end = text.index("-- seed:end")
    return text[text.index("\n", start) + 1 : end]


@pytest.fixture
async def client(client: Any, servers: Servers) -> Any:
    """The shared ``client`` (tests/support/apps.py), with the seed applied after its reset."""
    conn = await asyncpg.connect(servers.database_url)
    try:
        await conn.execute(seed_sql())
    finally:
        await conn.close()
    return client


def tags_path(project: str, milestone: int) -> str:
    return f"/v1/projects/{project}/milestones/{milestone}/category-tags"


async def seed_milestones(db: asyncpg.Connection, project: str, statuses: list[str]) -> None:
    await db.executemany(
        "INSERT INTO milestones (project_address, milestone_index, status) VALUES ($1, $2, $3)",
        [(project, index, status) for index, status in enumerate(statuses)],
    )


async def owned_project(
    client: Any,
    db: asyncpg.Connection,
    statuses: tuple[str, ...] = ("approved", "approved", "submitted"),
    **values: Any,
) -> tuple[Party, str]:
    """A linked owner and its indexed project with milestones of the given statuses."""
    owner = await linked_party(client)
    project = await seed_project(
        db,
        owner_address=owner.lower,
        status="building",
        milestone_count=len(statuses),
        **values,
    )
    await seed_milestones(db, project, list(statuses))
    return owner, project


async def tag(
    client: Any, party: Party, project: str, milestone: int, categories: list[str], **kw: Any
) -> Any:
    body = {"ownerWalletAddress": kw.pop("owner", party.address), "categories": categories}
    return await client.post(
        tags_path(project, milestone), json=body, headers=kw.pop("headers", party.headers)
    )
