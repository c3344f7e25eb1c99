"""Forward-only SQL migrations, applied in order under a Postgres advisory lock.

Each file ``migrations/NNNN_slug.sql`` runs in its own transaction together with the row that
records it, so a failure leaves the database at the previous version. Several frontends may start
at once: the advisory lock makes them apply migrations one after the other, and the ones that come
second find nothing left to do. A database that is ahead of the code, or whose recorded checksum
differs from a file, is refused rather than guessed at.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

from marketplace.errors import MarketplaceError
from marketplace.storage.pool import Connection

log = logging.getLogger(__name__)

# Arbitrary but fixed: the key under which all frontends serialise migration runs.
MIGRATION_LOCK_KEY = 0x6D6B745F6D696772  # "mkt_migr"
_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
SELECT_APPLIED = "SELECT version, name, checksum FROM schema_migrations ORDER BY version"
INSERT_APPLIED = "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)"


class MigrationError(MarketplaceError):
    code = "migration_error"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def discover_migrations() -> list[Migration]:
    found: list[Migration] = []
    for entry in resources.files("marketplace.storage").joinpath("migrations").iterdir():
        match = _FILE_RE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration numbers: {versions}")
    return found


async def migrate(conn: Connection, migrations: list[Migration] | None = None) -> list[int]:
    """Apply pending migrations; return the versions applied by this call."""
    migrations = discover_migrations() if migrations is None else migrations
    applied_now: list[int] = []
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        await conn.execute(CREATE_TABLE)
        applied = {row["version"]: row for row in await conn.fetch(SELECT_APPLIED)}
        known = {m.version: m for m in migrations}
        unknown = sorted(set(applied) - set(known))
        if unknown:
            raise MigrationError(
                f"database has migrations {unknown} that this code does not know; "
                "refusing to run an older release against a newer schema"
            )
        for migration in migrations:
            row = applied.get(migration.version)
            if row is not None:
                if row["checksum"] != migration.checksum:
                    raise MigrationError(
                        f"migration {migration.version}_{migration.name} changed after it was "
                        "applied; add a new migration instead of editing an applied one"
                    )
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    INSERT_APPLIED, migration.version, migration.name, migration.checksum
                )
            log.info("applied migration", extra={"migration": migration.version})
            applied_now.append(migration.version)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
    return applied_now


async def migrate_dsn(dsn: str) -> list[int]:
    conn = await asyncpg.connect(dsn)
    try:
        return await migrate(conn)
    finally:
        await conn.close()
