"""Permission flags, set by operators through ``marketplace admin``."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from typing import Any

import pytest

from marketplace.cli import main
from tests.api.identity.conftest import agent, create_key, error_of
from tests.conftest import Servers, new_user


def _run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(argv))
    return code, out.getvalue()


async def _permissions(client: Any, headers: dict[str, str]) -> dict[str, Any]:
    resp = await client.get("/v1/auth/permissions", headers=headers)
    assert resp.status == 200
    return dict(await resp.json())


async def test_defaults_in_both_shapes(client: Any) -> None:
    user = new_user()
    assert await _permissions(client, user.headers) == {
        "userId": str(user.user_id),
        "permissions": {"moderationAdmin": False, "verifierAdmin": False},
        "moderationAdmin": False,
        "verifierAdmin": False,
    }


async def test_cli_grant_and_revoke(
    client: Any, servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin, stranger = new_user(), new_user()
    await _permissions(client, admin.headers)
    monkeypatch.setenv("MARKETPLACE_DATABASE_URL", servers.database_url)
    uid = str(admin.user_id)

    code, out = await asyncio.to_thread(
        _run_cli, "admin", "grant", "--user-id", uid, "--moderation"
    )
    assert code == 0, out
    assert json.loads(out) == {"userId": uid, "moderationAdmin": True, "verifierAdmin": False}
    flags = await _permissions(client, admin.headers)
    assert flags["permissions"] == {"moderationAdmin": True, "verifierAdmin": False}
    assert flags["moderationAdmin"] is True and flags["verifierAdmin"] is False

    code, _ = await asyncio.to_thread(_run_cli, "admin", "grant", "--user-id", uid, "--verifier")
    assert code == 0
    code, _ = await asyncio.to_thread(_run_cli, "admin", "revoke", "--user-id", uid, "--moderation")
    assert code == 0
    flags = await _permissions(client, admin.headers)
    assert flags["permissions"] == {"moderationAdmin": False, "verifierAdmin": True}
    assert (flags["moderationAdmin"], flags["verifierAdmin"]) == (False, True)

    # Another user's flags are their own; an agent key reads its user's flags.
    assert (await _permissions(client, stranger.headers))["verifierAdmin"] is False
    key = await create_key(client, admin)
    assert (await _permissions(client, agent(key["secret"])))["verifierAdmin"] is True

    code, out = await asyncio.to_thread(_run_cli, "admin", "show", "--user-id", uid)
    assert json.loads(out)["verifierAdmin"] is True
    code, out = await asyncio.to_thread(_run_cli, "admin", "grant", "--user-id", uid)
    assert code == 2
    assert "--moderation" in out


async def test_anonymous_callers_are_refused(client: Any) -> None:
    resp = await client.get("/v1/auth/permissions")
    assert await error_of(resp, 401) == "unauthorized"
