"""C1 control characters (U+0080-U+009F) are refused like C0 ones in every string a client sends
(issue 27; docs/security.md, "Input validation"): chat and DM bodies, a project's title and
claim metadata, usernames and key names answer 400 `invalid_request`, and nothing is stored.
The characters just outside the range (DEL before it is refused too, NO-BREAK SPACE after it is
text) mark the boundary."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from tests.api.messaging.conftest import (
    chat_path,
    post_chat,
    post_dm,
    project_with_worker,
)
from tests.api.projects import seed
from tests.conftest import new_user
from tests.integration.claims.conftest import accept_all_legal
from tests.support import apps

# A direct connection, opened after the shared ``client`` (tests/support/apps.py).
db = apps.db

C1 = ["\x80", "\x85", "\x9b", "\x9f"]
ids = [f"U+{ord(c):04X}" for c in C1]


async def _invalid(resp: Any, field: str | None = None, *, control: bool = True) -> dict[str, Any]:
    assert resp.status == 400, await resp.text()
    body: dict[str, Any] = await resp.json()
    assert body["error"] == "invalid_request", body
    assert body["message"]
    if control:
        assert "control characters" in json.dumps(body), body
    if field is not None:
        assert any(d["field"] == field for d in body["details"]), body
    return body


@pytest.mark.parametrize("char", C1, ids=ids)
async def test_a_dm_body_with_a_c1_control_is_refused(
    client: Any, db: asyncpg.Connection, char: str
) -> None:
    project = await project_with_worker(client, db)
    resp = await post_dm(client, project.owner, project.worker.user.user_id, f"line{char}two")
    await _invalid(resp, "body")
    assert await db.fetchval("SELECT count(*) FROM messages WHERE kind = 'direct'") == 0
    # The boundary: NO-BREAK SPACE (U+00A0) is text.
    resp = await post_dm(client, project.owner, project.worker.user.user_id, "line\xa0two")
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["body"] == "line\xa0two"


@pytest.mark.parametrize("char", C1, ids=ids)
async def test_a_chat_body_with_a_c1_control_is_refused(
    client: Any, db: asyncpg.Connection, char: str
) -> None:
    project = await project_with_worker(client, db)
    resp = await post_chat(client, project.owner, project.address, f"hello{char}world")
    await _invalid(resp, "body")
    listed = await client.get(chat_path(project.address), headers=project.owner.headers)
    assert listed.status == 200, await listed.text()
    assert (await listed.json())["items"] == []
    resp = await post_chat(client, project.owner, project.address, "hello\xa0world")
    assert resp.status == 201, await resp.text()


@pytest.mark.parametrize("char", C1, ids=ids)
async def test_a_project_title_with_a_c1_control_is_refused(
    client: Any, db: asyncpg.Connection, char: str
) -> None:
    project = await project_with_worker(client, db, status="draft")
    owner = project.owner
    await seed.metadata(db, project.address, project.owner.lower, title="Plain")
    await accept_all_legal(client, owner.headers)
    path = f"/v1/projects/{project.address}/metadata"
    resp = await client.patch(path, json={"title": f"Evil{char}title"}, headers=owner.headers)
    await _invalid(resp, "title")
    resp = await client.patch(
        path, json={"title": "Plain", "description": f"a{char}b"}, headers=owner.headers
    )
    await _invalid(resp, "description")
    stored = await db.fetchval(
        "SELECT title FROM project_metadata WHERE project_address = $1", project.address
    )
    assert stored == "Plain"
    resp = await client.patch(path, json={"title": "Caf\xe9\xa0title"}, headers=owner.headers)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["title"] == "Caf\xe9\xa0title"


async def test_claim_metadata_with_a_c1_control_is_refused(client: Any) -> None:
    user = new_user()
    project = "0x" + "44" * 20
    meta = {"title": "Bridge", "projectMode": "standard", "biddingAccess": "open"}
    await accept_all_legal(client, user.headers)
    for field in ("title", "description", "repoUrl"):
        body = {
            "mode": "intent",
            "hashVersion": "v1_intent",
            "intentId": "00000000-0000-4000-8000-000000000001",
            "intentNonce": "0x" + "66" * 32,
            "txHash": "0x" + "55" * 32,
            "metadata": {**meta, field: "https://x.example/\x85"},
        }
        resp = await client.post(f"/v1/projects/{project}/claim", json=body, headers=user.headers)
        await _invalid(resp, f"intent.metadata.{field}")


@pytest.mark.parametrize("char", ["\x7f", *C1], ids=["U+007F", *ids])
async def test_usernames_and_key_names_with_a_c1_control_are_refused(
    client: Any, char: str
) -> None:
    user = new_user()
    resp = await client.put(
        "/v1/username",
        json={"userId": str(user.user_id), "username": f"ab{char}cd"},
        headers=user.headers,
    )
    # Usernames are [a-z0-9_] anyway: refused, whichever rule says so first.
    await _invalid(resp, "username", control=False)
    resp = await client.get(
        "/v1/username/check", params={"username": f"ab{char}cd"}, headers=user.headers
    )
    await _invalid(resp, control=False)
    resp = await client.get("/v1/username", headers=user.headers)
    assert resp.status == 200, await resp.text()
    assert (await resp.json()).get("username") is None
    resp = await client.post(
        "/v1/api-keys",
        json={"name": f"key{char}name", "userId": str(user.user_id)},
        headers=user.headers,
    )
    await _invalid(resp, "name")
    resp = await client.post(
        "/v1/api-keys",
        json={"name": "key\xa0name", "userId": str(user.user_id)},
        headers=user.headers,
    )
    assert resp.status == 201, await resp.text()
