"""``marketplace admin``: operators grant and revoke permission flags.

    marketplace admin grant  --user-id <uuid> [--moderation] [--verifier]
    marketplace admin revoke --user-id <uuid> [--moderation] [--verifier]
    marketplace admin show   --user-id <uuid>

The database is ``MARKETPLACE_DATABASE_URL``; when it is unset, the embedded PostgreSQL of the
running ``marketplace up`` (``--data-dir`` or ``$MARKETPLACE_DATA_DIR`` to choose one) is used
(:func:`admin_dsn`, which every ``marketplace admin`` sub-command shares). ``admin`` is a command
group: each capability declares its own sub-commands (``parent="admin"`` in
marketplace.cli_commands), these three are identity's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from pathlib import Path

from marketplace.config import Settings, load_settings
from marketplace.config.data_dir import (
    DATA_DIR_HELP,
    DataDirNotFound,
    embedded_postgres_dsn,
    locate_data_dir,
)
from marketplace.identity.permissions import Flags, flags_of, set_flags
from marketplace.storage.pool import connect


def _database_url(settings: Settings, data_dir: Path | None) -> str | None:
    if settings.database_url:
        return settings.database_url
    return embedded_postgres_dsn(locate_data_dir(data_dir))


def _as_json(user_id: uuid.UUID, flags: Flags) -> str:
    return json.dumps(
        {
            "userId": str(user_id),
            "moderationAdmin": flags.moderation_admin,
            "verifierAdmin": flags.verifier_admin,
        }
    )


async def _apply(dsn: str, args: argparse.Namespace) -> Flags:
    conn = await connect(dsn)
    try:
        if args.admin_command == "show":
            return await flags_of(conn, args.user_id)
        value = args.admin_command == "grant"
        return await set_flags(
            conn,
            args.user_id,
            moderation_admin=value if args.moderation else None,
            verifier_admin=value if args.verifier else None,
        )
    finally:
        await conn.close()


def admin_dsn(data_dir: Path | None) -> str | None:
    """The database of ``marketplace admin``: ``MARKETPLACE_DATABASE_URL``, else the embedded
    PostgreSQL of the running ``marketplace up``; None (after saying why on stderr) when neither
    is there."""
    try:
        dsn = _database_url(load_settings(), data_dir)
    except DataDirNotFound as exc:
        print(f"marketplace admin: {exc}; or set MARKETPLACE_DATABASE_URL", file=sys.stderr)
        return None
    if not dsn:
        print(
            "marketplace admin: the embedded PostgreSQL of that data dir is not running "
            "(start `marketplace up`), or set MARKETPLACE_DATABASE_URL",
            file=sys.stderr,
        )
        return None
    return dsn


def cmd_admin(args: argparse.Namespace) -> int:
    if args.admin_command != "show" and not (args.moderation or args.verifier):
        print("name at least one flag: --moderation and/or --verifier", file=sys.stderr)
        return 2
    dsn = admin_dsn(getattr(args, "data_dir", None))
    if dsn is None:
        return 2
    flags = asyncio.run(_apply(dsn, args))
    print(_as_json(args.user_id, flags))
    return 0


def _configure(action: argparse.ArgumentParser, *, show: bool) -> None:
    action.add_argument(
        "--user-id",
        type=uuid.UUID,
        required=True,
        help="the user (the `sub` of their session token); required",
    )
    action.add_argument("--data-dir", type=Path, help=DATA_DIR_HELP)
    if not show:
        action.add_argument(
            "--moderation", action="store_true", help="moderationAdmin (report workflow)"
        )
        action.add_argument("--verifier", action="store_true", help="verifierAdmin")
    else:
        action.set_defaults(moderation=False, verifier=False)
    action.set_defaults(func=cmd_admin)


def configure_grant(action: argparse.ArgumentParser) -> None:
    """``marketplace admin grant`` (declared in :mod:`marketplace.cli_commands`)."""
    _configure(action, show=False)


def configure_revoke(action: argparse.ArgumentParser) -> None:
    """``marketplace admin revoke``."""
    _configure(action, show=False)


def configure_show(action: argparse.ArgumentParser) -> None:
    """``marketplace admin show``."""
    _configure(action, show=True)
