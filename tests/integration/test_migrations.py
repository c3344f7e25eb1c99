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
        "storage/schema.sql is stale: run `make schema`"
    )


async def test_0019_moves_verifier_state_to_jobs_and_fails_orphaned_deliveries(
    scratch_dsn: str,
) -> None:
    """Migration 0019 on data written before it: every verifier row gets a queue job that
    says what the row said (its status and attempt count are dropped), and no queued delivery
    is left behind a job that ended or vanished."""
    before = [m for m in discover_migrations() if m.version < 19]
    conn = await asyncpg.connect(scratch_dsn)
    try:
        await migrate(conn, before)
        user = uuid.uuid4()
        await conn.execute("INSERT INTO users (user_id) VALUES ($1)", user)
        failed_job, queued_job, running_job = [
            await conn.fetchval(
                "INSERT INTO jobs (queue, payload, status, attempt_count, finished_at,"
                " last_error, lease_owner, lease_expires_at) VALUES ($1, '{}', $2, 1,"
                " CASE WHEN $2 = 'failed' THEN now() END, $3,"
                " CASE WHEN $2 = 'running' THEN 'w' END,"
                " CASE WHEN $2 = 'running' THEN now() END) RETURNING id",
                queue,
                status,
                error,
            )
            for queue, status, error in [
                ("verifier", "failed", 'RuntimeError: boom\n  File "x.py", line 1'),
                ("verifier", "queued", None),
                ("notifications", "running", None),
            ]
        ]
        rows = {}
        for name, status, job_id in [
            ("completed_pruned", "completed", None),
            ("failed", None, failed_job),
            ("queued", None, queued_job),
            ("vanished", None, 10**9),
        ]:
            rows[name] = await conn.fetchval(
                "INSERT INTO verifier_jobs (created_by, project_address, milestone_index,"
                " check_policy_id, delivery_ref, chain_id, attestation_nonce, max_attempts,"
                " status, attempt_count, job_id, completed_at, passes, evidence_hash,"
                " attestation) VALUES ($1, '0x' || repeat('ab', 20), 0, 'github-ref', 'r', 1,"
                " 1, 3, $2, CASE WHEN $2 = 'completed' THEN 2 END, $3,"
                " CASE WHEN $2 = 'completed' THEN now() END,"
                " CASE WHEN $2 = 'completed' THEN true END,"
                " CASE WHEN $2 = 'completed' THEN '0x' || repeat('11', 32) END,"
                " CASE WHEN $2 = 'completed' THEN '{}'::jsonb END) RETURNING id",
                user,
                status,
                job_id,
            )
        deliveries = {}
        for event_id, (name, job_id) in enumerate(
            [("behind_failed", failed_job), ("behind_running", running_job), ("no_job", None)],
            start=1,
        ):
            deliveries[name] = await conn.fetchval(
                "INSERT INTO notification_deliveries (event_id, event_type, recipient_user_id,"
                " status, subject, email, job_id) VALUES ($1, 'direct_message', $2, 'queued',"
                " 's', 'a@b.c', $3) RETURNING id",
                event_id,
                user,
                job_id,
            )

        await migrate(conn)

        state = {
            name: await conn.fetchrow(
                "SELECT j.status, j.attempt_count, j.error_message FROM verifier_jobs v"
                " JOIN jobs j ON j.id = v.job_id WHERE v.id = $1",
                verifier_id,
            )
            for name, verifier_id in rows.items()
        }
        assert {name: tuple(row) for name, row in state.items() if row is not None} == {
            "completed_pruned": ("completed", 2, None),
            "failed": ("failed", 1, "RuntimeError: boom"),
            "queued": ("queued", 1, None),
            "vanished": ("failed", 0, "the job record is gone"),
        }
        statuses = {
            row["id"]: (row["status"], row["last_error"])
            for row in await conn.fetch(
                "SELECT id, status, last_error FROM notification_deliveries"
            )
        }
        statuses = {name: statuses[d] for name, d in deliveries.items()}
        assert statuses == {
            "behind_failed": ("failed", "RuntimeError: boom"),
            "behind_running": ("queued", None),
            "no_job": ("failed", "the sending job is gone"),
        }
        columns = await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name ="
            " 'verifier_jobs' AND column_name IN ('status', 'attempt_count')"
        )
        assert columns == []
    finally:
        await conn.close()
