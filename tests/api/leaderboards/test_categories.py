"""Leaderboard categories: the shipped list through the API, and the operators' CLI
(`marketplace admin categories list|add|update|deactivate`) against the suite's PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import uuid
from datetime import datetime
from typing import Any

import asyncpg
import pytest

from marketplace.cli import main
from marketplace.storage.migrations import migrate_dsn
from tests.api.leaderboards.conftest import SHIPPED
from tests.conftest import Servers

CATEGORY_FIELDS = {"slug", "displayName", "sortOrder", "isActive", "createdAt", "updatedAt"}


def _run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse refusing a usage error
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


async def cli(*argv: str) -> tuple[int, str, str]:
    return await asyncio.to_thread(_run_cli, "admin", "categories", *argv)


async def listed(client: Any, **kw: Any) -> list[dict[str, Any]]:
    resp = await client.get("/v1/leaderboard/categories", **kw)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["count"] == len(body["items"])
    return list(body["items"])


async def test_shipped_categories_in_order_with_their_shape(client: Any) -> None:
    items = await listed(client)
    assert [item["slug"] for item in items] == SHIPPED
    assert [item["sortOrder"] for item in items] == list(range(1, 10))
    for item in items:
        assert set(item) == CATEGORY_FIELDS | {"description"}
        assert item["isActive"] is True
        assert item["displayName"] and item["description"]


async def test_cli_add_update_deactivate_list(
    client: Any, servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARKETPLACE_DATABASE_URL", servers.database_url)

    code, out, err = await cli(
        "add", "--slug", "zk-proofs", "--display-name", "ZK proofs", "--sort-order", "2"
    )
    assert code == 0, err
    added = json.loads(out)
    assert set(added) == CATEGORY_FIELDS  # no description: the field is absent
    assert (added["slug"], added["sortOrder"], added["isActive"]) == ("zk-proofs", 2, True)

    # Same sortOrder as `frontend`: the slug breaks the tie, for the API and the CLI alike.
    slugs = [item["slug"] for item in await listed(client)]
    assert slugs[:4] == ["smart-contracts", "frontend", "zk-proofs", "backend"]
    code, out, _ = await cli("list")
    assert code == 0
    listing = json.loads(out)
    assert listing["count"] == 10
    assert [item["slug"] for item in listing["items"]] == slugs

    code, out, err = await cli(
        "update", "--slug", "zk-proofs", "--sort-order", "20", "--description", "Circuits"
    )
    assert code == 0, err
    updated = json.loads(out)
    assert (updated["sortOrder"], updated["description"]) == (20, "Circuits")
    assert updated["createdAt"] == added["createdAt"]
    assert datetime.fromisoformat(updated["updatedAt"]) >= datetime.fromisoformat(
        added["updatedAt"]
    )
    assert [item["slug"] for item in await listed(client)][-1] == "zk-proofs"

    code, out, err = await cli("deactivate", "--slug", "docs")
    assert code == 0, err
    assert json.loads(out)["isActive"] is False
    docs = next(item for item in await listed(client) if item["slug"] == "docs")
    assert docs["isActive"] is False  # still listed

    code, out, _ = await cli("update", "--slug", "docs", "--active", "--clear-description")
    assert code == 0
    assert json.loads(out)["isActive"] is True and "description" not in json.loads(out)


async def test_cli_refusals(client: Any, servers: Servers, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARKETPLACE_DATABASE_URL", servers.database_url)
    for bad in ("Zk", "zk--proofs", "-zk", "zk_proofs", "zk-"):
        code, out, err = await cli(
            "add", f"--slug={bad}", "--display-name", "x", "--sort-order", "3"
        )
        assert code == 1 and out == "", bad
        assert json.loads(err)["error"] == "invalid_request", bad
    code, _, err = await cli("add", "--slug", "ok", "--display-name", "x", "--sort-order", "0")
    assert code == 1 and json.loads(err)["error"] == "invalid_request"
    code, _, err = await cli(
        "add", "--slug", "backend", "--display-name", "Again", "--sort-order", "3"
    )
    assert code == 1 and json.loads(err)["error"] == "category_exists"
    code, _, err = await cli("deactivate", "--slug", "no-such")
    assert code == 1 and json.loads(err)["error"] == "category_not_found"
    code, _, _ = await cli("update", "--slug", "backend", "--active", "--inactive")
    assert code == 2  # argparse: mutually exclusive
    # Nothing of that was written.
    assert [item["slug"] for item in await listed(client)] == SHIPPED
    assert all(item["isActive"] for item in await listed(client))


async def test_a_fresh_database_ships_the_categories(servers: Servers) -> None:
    """Migrating an empty database yields the nine categories (the other tests re-apply the
    migration's seed block after the suite's TRUNCATE; this checks the migration itself)."""
    name = f"scratch_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(servers.database_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        dsn = servers.database_url.rsplit("/", 1)[0] + f"/{name}"
        await migrate_dsn(dsn)
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch(
                "SELECT slug, sort_order, is_active FROM leaderboard_categories ORDER BY sort_order"
            )
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    assert [row["slug"] for row in rows] == SHIPPED
    assert [row["sort_order"] for row in rows] == list(range(1, 10))
    assert all(row["is_active"] for row in rows)
