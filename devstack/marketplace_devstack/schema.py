"""``make schema``: regenerate (or check) ``marketplace/storage/schema.sql`` from the migrations.

    .venv/bin/python -m marketplace_devstack.schema --write

migrates a throwaway embedded PostgreSQL and writes its dump
(:func:`marketplace.storage.schema.dump_schema`) to the snapshot; without ``--write`` it only
compares (exit 1 when the snapshot is stale). ``--database-url`` dumps a freshly migrated
database of your own instead.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

from marketplace.storage.migrations import migrate_dsn
from marketplace.storage.schema import SNAPSHOT, dump_schema
from marketplace_devstack.embedded.postgres import EmbeddedPostgres


def dump_fresh_embedded() -> str:
    """Migrate a throwaway embedded PostgreSQL and dump it."""
    data_dir = Path(tempfile.mkdtemp(prefix="mkt-schema-", dir="/tmp"))
    data_dir.chmod(0o755)
    server = EmbeddedPostgres(data_dir)
    server.start()
    try:
        asyncio.run(migrate_dsn(server.dsn))
        return dump_schema(server.dsn)
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write or check storage/schema.sql.")
    parser.add_argument(
        "--database-url",
        help="a freshly migrated database to dump (default: migrate a throwaway embedded one)",
    )
    parser.add_argument("--write", action="store_true", help="write the snapshot (else compare)")
    args = parser.parse_args(argv)
    dumped = dump_schema(args.database_url) if args.database_url else dump_fresh_embedded()
    if args.write:
        SNAPSHOT.write_text(dumped, encoding="utf-8")
        print(f"written {SNAPSHOT}")
        return 0
    if SNAPSHOT.exists() and SNAPSHOT.read_text(encoding="utf-8") == dumped:
        print("schema.sql is up to date")
        return 0
    print("schema.sql differs from the migrations; regenerate with --write", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
