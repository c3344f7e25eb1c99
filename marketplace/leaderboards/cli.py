"""``marketplace admin categories``: operators manage the leaderboard categories.

    marketplace admin categories list
    marketplace admin categories add --slug <slug> --display-name <name> --sort-order <n>
                                     [--description <text>] [--inactive]
    marketplace admin categories update --slug <slug> [--display-name <name>]
                                     [--description <text> | --clear-description]
                                     [--sort-order <n>] [--active | --inactive]
    marketplace admin categories deactivate --slug <slug>

    marketplace admin leaderboards rebuild

Each prints JSON (``list``: ``{items, count}`` as ``GET /v1/leaderboard/categories`` answers;
the others: the category after the change) and exits 0; a refused change prints
``{"error", "message"}`` on stderr and exits 1 (2 for a usage error or no database). The database
is found as for every ``marketplace admin`` command (marketplace.identity.cli.admin_dsn).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from marketplace.config.data_dir import DATA_DIR_HELP
from marketplace.errors import MarketplaceError
from marketplace.identity.cli import admin_dsn
from marketplace.leaderboards import boards, categories
from marketplace.leaderboards.models import CategoryListResponse
from marketplace.storage.pool import connect


async def _run(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    conn = await connect(dsn)
    try:
        match args.categories_command:
            case "list":
                items = await categories.list_categories(conn)
                listing = CategoryListResponse(items=items, count=len(items))
                return listing.model_dump(mode="json")
            case "add":
                category = await categories.add_category(
                    conn,
                    slug=args.slug,
                    display_name=args.display_name,
                    description=args.description,
                    sort_order=args.sort_order,
                    is_active=not args.inactive,
                )
            case "update":
                category = await categories.update_category(
                    conn,
                    args.slug,
                    display_name=args.display_name,
                    description=args.description,
                    clear_description=args.clear_description,
                    sort_order=args.sort_order,
                    is_active=args.active,
                )
            case _:
                category = await categories.update_category(conn, args.slug, is_active=False)
        return category.model_dump(mode="json")
    finally:
        await conn.close()


def cmd_categories(args: argparse.Namespace) -> int:
    dsn = admin_dsn(args.data_dir)
    if dsn is None:
        return 2
    try:
        result = asyncio.run(_run(dsn, args))
    except (MarketplaceError, categories.CategoryChangeRefused) as exc:
        print(json.dumps({"error": exc.code, "message": exc.message}), file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


def configure(group: argparse.ArgumentParser) -> None:
    """``marketplace admin categories``'s sub-commands (declared in marketplace.cli_commands)."""
    actions = group.add_subparsers(dest="categories_command", required=True)
    listing = actions.add_parser("list", help="print every category as JSON, by sortOrder")
    add = actions.add_parser("add", help="add a category")
    update = actions.add_parser("update", help="change fields of a category")
    deactivate = actions.add_parser(
        "deactivate", help="refuse a category in new tags (it stays listed, isActive false)"
    )
    for parser in (listing, add, update, deactivate):
        parser.add_argument("--data-dir", type=Path, help=DATA_DIR_HELP)
        parser.set_defaults(func=cmd_categories)
    for parser in (add, update, deactivate):
        parser.add_argument("--slug", required=True, help="^[a-z0-9]+(?:-[a-z0-9]+)*$")
    add.add_argument("--display-name", required=True, help="the name shown to people")
    add.add_argument("--description", help="a sentence shown with it (default: none)")
    add.add_argument("--sort-order", type=int, required=True, help=">= 1")
    add.add_argument("--inactive", action="store_true", help="add it deactivated")
    update.add_argument("--display-name", help="a new display name (default: unchanged)")
    text = update.add_mutually_exclusive_group()
    text.add_argument("--description", help="a new description (default: unchanged)")
    text.add_argument("--clear-description", action="store_true", help="remove the description")
    update.add_argument("--sort-order", type=int, help=">= 1")
    state = update.add_mutually_exclusive_group()
    state.add_argument(
        "--active",
        dest="active",
        action="store_const",
        const=True,
        help="accept it in new tags again (default: unchanged)",
    )
    state.add_argument(
        "--inactive",
        dest="active",
        action="store_const",
        const=False,
        help="refuse it in new tags (default: unchanged)",
    )


async def _rebuild(dsn: str) -> dict[str, Any]:
    conn = await connect(dsn)
    try:
        entries, standings = await boards.rebuild(conn)
        return {"entries": entries, "standings": standings}
    finally:
        await conn.close()


def cmd_rebuild(args: argparse.Namespace) -> int:
    dsn = admin_dsn(args.data_dir)
    if dsn is None:
        return 2
    print(json.dumps(asyncio.run(_rebuild(dsn))))
    return 0


def configure_boards(group: argparse.ArgumentParser) -> None:
    """``marketplace admin leaderboards rebuild``: every board entry and standing from the read
    model and the tags, in one transaction; prints ``{"entries", "standings"}``."""
    actions = group.add_subparsers(dest="leaderboards_command", required=True)
    rebuild = actions.add_parser(
        "rebuild", help="rebuild every board entry and standing from scratch (one transaction)"
    )
    rebuild.add_argument("--data-dir", type=Path, help=DATA_DIR_HELP)
    rebuild.set_defaults(func=cmd_rebuild)
