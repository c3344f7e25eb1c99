"""Session JWT rules beyond the signature (issue 9): lifetime, claim types, the nil subject,
messages that do not echo the JWT library, the scheduler/key mix, and the stored e-mail flag."""

from __future__ import annotations

import time
import uuid
from typing import Any

import jwt

from marketplace.http import keys
from marketplace.http.app import create_app
from tests.api.identity.conftest import agent, create_key
from tests.conftest import JWT_SECRET, SCHEDULER_SECRET, bearer, make_settings

EITHER = "/v1/_probe/auth/either"


def token(**claims: Any) -> str:
    now = int(time.time())
    base: dict[str, Any] = {
        "sub": str(uuid.uuid4()),
        "email_verified": True,
        "iat": now,
        "exp": now + 600,
    }
    base.update(claims)
    return jwt.encode({k: v for k, v in base.items() if v is not None}, JWT_SECRET, "HS256")


async def refused(client: Any, tok: str) -> str:
    resp = await client.get(EITHER, headers=bearer(tok))
    body = await resp.json()
    assert resp.status == 401, body
    assert body["error"] == "unauthorized"
    return str(body["message"])


async def test_lifetime_is_bounded_from_iat(probe_client: Any) -> None:
    now = int(time.time())
    assert (await probe_client.get(EITHER, headers=bearer(token()))).status == 200
    day = 86_400
    assert "lifetime" in await refused(probe_client, token(iat=now, exp=now + day + 1))
    assert (await probe_client.get(EITHER, headers=bearer(token(exp=now + day)))).status == 200
    # Issued long ago with an exp far away: the lifetime rule catches it too.
    assert "lifetime" in await refused(probe_client, token(iat=now - day - 120, exp=now + 60))
    assert "'iat'" in await refused(probe_client, token(iat=None))


async def test_claims_must_be_json_numbers(probe_client: Any) -> None:
    now = int(time.time())
    for claims in ({"exp": str(now + 600)}, {"iat": str(now)}, {"nbf": str(now - 5)}):
        assert "must be a JSON number" in await refused(probe_client, token(**claims)), claims
    # PyJWT reads true as 1: long expired.
    await refused(probe_client, token(exp=True))


async def test_the_nil_uuid_is_not_a_user(probe_client: Any) -> None:
    assert "nil uuid" in await refused(probe_client, token(sub=str(uuid.UUID(int=0))))


async def test_messages_do_not_echo_the_jwt_library(probe_client: Any) -> None:
    library_phrases = (
        "Signature verification failed",
        "Not enough segments",
        "Invalid header",
        "Invalid payload",
        "Invalid crypto padding",
        "Expecting value",
        "Signature has expired",
    )
    forged = jwt.encode(
        {"sub": str(uuid.uuid4()), "iat": int(time.time()), "exp": int(time.time()) + 60},
        "another-secret-of-sufficient-length-xx",
        "HS256",
    )
    for bad in ("abc", "a.b.c", "e30.e30.", forged, token(exp=int(time.time()) - 3600)):
        message = await refused(probe_client, bad)
        assert not any(phrase in message for phrase in library_phrases), message
        assert message.startswith("session token"), message


async def test_scheduler_token_and_agent_key_cannot_be_mixed(client: Any) -> None:
    from tests.conftest import new_user

    user = new_user()
    key = await create_key(client, user)
    resp = await client.get(
        "/v1/internal/indexer/status",
        headers={**bearer(SCHEDULER_SECRET), **agent(key["secret"])},
    )
    body = await resp.json()
    assert resp.status == 401, body
    assert body["error"] == "principal_mismatch"
    # Each on its own is accepted there.
    for headers in (bearer(SCHEDULER_SECRET), agent(key["secret"])):
        assert (await client.get("/v1/internal/indexer/status", headers=headers)).status == 200


async def test_the_newest_token_sets_the_email_flag_across_frontends(
    aiohttp_client: Any, servers: Any, ray_cluster: None, clean_state: None
) -> None:
    """Two frontends see one user's tokens in any order; an agent key of the user acts with the
    flag of the newest token, whichever frontend saw it (it used to stay stale). A token another
    frontend saw counts once that frontend wrote it (its flush interval, here forced)."""
    settings = make_settings(servers)
    a = await aiohttp_client(create_app(settings))
    b = await aiohttp_client(create_app(settings))
    user_id = uuid.uuid4()
    now = int(time.time())

    def session(iat: int, verified: bool) -> dict[str, str]:
        return bearer(token(sub=str(user_id), iat=iat, exp=iat + 3600, email_verified=verified))

    resp = await a.post(
        "/v1/api-keys",
        json={"name": "agent", "userId": str(user_id)},
        headers=session(now - 20, True),
    )
    assert resp.status == 201, await resp.text()
    key = agent((await resp.json())["secret"])

    async def key_is_verified() -> bool:
        # Creating an intent is session-only; the claim route is guarded for keys too.
        resp = await a.post(
            f"/v1/projects/0x{'12' * 20}/bid-drafts",
            json={"bidderWalletAddress": "0x" + "34" * 20, "draftHash": "0x" + "56" * 32},
            headers=key,
        )
        body = await resp.json()
        return body.get("error") != "email_not_verified"

    async def seen_by_b(iat: int, verified: bool) -> None:
        assert (await b.get("/v1/auth/permissions", headers=session(iat, verified))).status == 200
        await b.app[keys.SESSION_RECORDER].flush()

    assert await key_is_verified()
    await seen_by_b(now - 10, False)
    assert not await key_is_verified()
    # Frontend A saw the first token before; a newer verified token must still be recorded (A's
    # own pending record counts at once, with no flush).
    assert (await a.get("/v1/auth/permissions", headers=session(now, True))).status == 200
    assert await key_is_verified()
    # An older token seen late does not roll the flag back.
    await seen_by_b(now - 10, False)
    assert await key_is_verified()
