"""Blocks and mutes through HTTP: idempotent create (the first createdAt kept), idempotent
delete, the caller itself, unknown users."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg
import pytest

from tests.api.messaging.conftest import error_code, signed_in

KINDS = (("block", "blockedUserId", "user_blocks"), ("mute", "mutedUserId", "user_mutes"))


@pytest.mark.parametrize(("kind", "field", "table"), KINDS)
async def test_create_is_idempotent_and_keeps_the_first_row(
    client: Any, db: asyncpg.Connection, kind: str, field: str, table: str
) -> None:
    user = await signed_in(client)
    other = await signed_in(client)
    path = f"/v1/messages/{kind}"
    resp = await client.post(path, json={field: str(other.user_id)}, headers=user.headers)
    assert resp.status == 200, await resp.text()
    first = await resp.json()
    assert first == {
        "userId": str(user.user_id),
        field: str(other.user_id),
        "createdAt": first["createdAt"],
    }
    datetime.fromisoformat(first["createdAt"])
    resp = await client.post(path, json={field: str(other.user_id)}, headers=user.headers)
    assert resp.status == 200
    assert await resp.json() == first
    assert await db.fetchval(f"SELECT count(*) FROM {table}") == 1

    # Directed: the other user's relation is a separate row.
    resp = await client.post(path, json={field: str(user.user_id)}, headers=other.headers)
    assert resp.status == 200
    assert await db.fetchval(f"SELECT count(*) FROM {table}") == 2

    resp = await client.delete(f"{path}/{other.user_id}", headers=user.headers)
    assert resp.status == 204
    assert await resp.read() == b""
    resp = await client.delete(f"{path}/{other.user_id}", headers=user.headers)
    assert resp.status == 204
    rows = await db.fetch(f"SELECT user_id FROM {table}")
    assert [r["user_id"] for r in rows] == [other.user_id]

    # A new relation after the delete is a new row with a new createdAt.
    resp = await client.post(path, json={field: str(other.user_id)}, headers=user.headers)
    again = await resp.json()
    assert datetime.fromisoformat(again["createdAt"]) > datetime.fromisoformat(first["createdAt"])


@pytest.mark.parametrize(("kind", "field", "table"), KINDS)
async def test_self_and_unknown_users(
    client: Any, db: asyncpg.Connection, kind: str, field: str, table: str
) -> None:
    user = await signed_in(client)
    path = f"/v1/messages/{kind}"
    resp = await client.post(path, json={field: str(user.user_id)}, headers=user.headers)
    body = await resp.json()
    assert await error_code(resp, 400) == "invalid_request"
    assert body["details"][0]["field"] == field
    resp = await client.delete(f"{path}/{user.user_id}", headers=user.headers)
    assert await error_code(resp, 400) == "invalid_request"
    resp = await client.post(path, json={field: str(uuid.uuid4())}, headers=user.headers)
    assert await error_code(resp, 404) == "user_not_found"
    # Removing a relation that cannot exist is still done.
    resp = await client.delete(f"{path}/{uuid.uuid4()}", headers=user.headers)
    assert resp.status == 204
    for bad in ({}, {field: "nope"}, {field: str(uuid.uuid4()), "extra": 1}):
        resp = await client.post(path, json=bad, headers=user.headers)
        assert await error_code(resp, 400) == "invalid_request"
    resp = await client.delete(f"{path}/nope", headers=user.headers)
    assert await error_code(resp, 400) == "invalid_request"
    assert await db.fetchval(f"SELECT count(*) FROM {table}") == 0


@pytest.mark.parametrize(("kind", "field", "table"), KINDS)
async def test_not_guarded(
    make_client: Any, db: asyncpg.Connection, kind: str, field: str, table: str
) -> None:
    """A user protects itself without a verified e-mail address or legal assent."""
    strict = await make_client(legal_acceptance_mode="strict")
    from tests.conftest import new_user

    user = new_user(email_verified=False)
    other = await signed_in(strict)
    resp = await strict.post(
        f"/v1/messages/{kind}", json={field: str(other.user_id)}, headers=user.headers
    )
    assert resp.status == 200, await resp.text()
    assert await db.fetchval(f"SELECT count(*) FROM {table}") == 1
