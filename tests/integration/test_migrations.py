"""Migrations: ordered, idempotent, safe to run concurrently, refusing drift."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from marketplace.storage.migrations import (
    Migration,
    MigrationError,
    discover_migrations,
    migrate,
    migrate_dsn,
)
from tests.conftest import Servers


@pytest.fixture
async def scratch_dsn(servers: Servers) -> AsyncIterator[str]:
    """A throwaway database, so these tests can migrate from zero."""
    name = f"scratch_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(servers.database_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield servers.database_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


def test_migration_files_are_numbered_without_gaps() -> None:
    versions = [m.version for m in discover_migrations()]
    assert versions == list(range(1, len(versions) + 1))


async def test_migrate_applies_everything_once(scratch_dsn: str) -> None:
    applied = await migrate_dsn(scratch_dsn)
    assert applied == [m.version for m in discover_migrations()]
    assert await migrate_dsn(scratch_dsn) == []
    conn = await asyncpg.connect(scratch_dsn)
    try:
        rows = await conn.fetch("SELECT version, checksum FROM schema_migrations ORDER BY 1")
        assert [(r["version"], r["checksum"]) for r in rows] == [
            (m.version, m.checksum) for m in discover_migrations()
        ]
    finally:
        await conn.close()


async def test_concurrent_migrate_applies_each_migration_exactly_once(scratch_dsn: str) -> None:
    results = await asyncio.gather(*[migrate_dsn(scratch_dsn) for _ in range(6)])
    flattened = sorted(v for result in results for v in result)
    assert flattened == [m.version for m in discover_migrations()]


async def test_failed_migration_leaves_previous_version(scratch_dsn: str) -> None:
    good = discover_migrations()
    broken = [*good, Migration(len(good) + 1, "broken", "CREATE TABLE t_ok (a int); SELECT 1/0;")]
    conn = await asyncpg.connect(scratch_dsn)
    try:
        with pytest.raises(asyncpg.DivisionByZeroError):
            await migrate(conn, broken)
        assert await conn.fetchval("SELECT max(version) FROM schema_migrations") == len(good)
        assert await conn.fetchval("SELECT to_regclass('t_ok')") is None
    finally:
        await conn.close()


async def test_changed_checksum_is_refused(scratch_dsn: str) -> None:
    await migrate_dsn(scratch_dsn)
    edited = discover_migrations()
    edited[0] = Migration(edited[0].version, edited[0].name, edited[0].sql + "\n-- edited")
    conn = await asyncpg.connect(scratch_dsn)
    try:
        with pytest.raises(MigrationError, match="changed after it was applied"):
            await migrate(conn, edited)
    finally:
        await conn.close()


async def test_database_ahead_of_code_is_refused(scratch_dsn: str) -> None:
    await migrate_dsn(scratch_dsn)
    conn = await asyncpg.connect(scratch_dsn)
    try:
        await conn.execute(
            "INSERT INTO schema_migrations (version, name, checksum) VALUES (9999, 'future', 'x')"
        )
        with pytest.raises(MigrationError, match="does not know"):
            await migrate(conn)
    finally:
        await conn.close()


async def test_migrations_reproduce_the_schema_snapshot(scratch_dsn: str) -> None:
    from marketplace.storage.schema import SNAPSHOT, dump_schema

    await migrate_dsn(scratch_dsn)
    dumped = await asyncio.to_thread(dump_schema, scratch_dsn)
    assert "CREATE TABLE public.projects" in dumped
    assert dumped == SNAPSHOT.read_text(encoding="utf-8"), (
        "storage/schema.sql is stale: run `python -m marketplace.storage.schema --write` "
        "against a freshly migrated database"
    )
