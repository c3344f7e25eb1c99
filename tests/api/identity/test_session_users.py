"""Users of session tokens are recorded off the request path, and everything that needs the row or
the flags still sees them (marketplace/identity/session_recorder.py, docs/identity.md "Users").

Apps here flush only every minute, so whatever a test finds in `users` was written either by a
request that needed it (an unsafe method), by an explicit flush, or by the app's shutdown.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from marketplace.http import keys
from marketplace.identity.permissions import set_flags
from tests.api.identity.conftest import (
    GUARDED_PATH,
    Wallet,
    agent,
    create_key,
    error_of,
)
from tests.conftest import User, bearer, make_token, new_user
from tests.support.apps import AppFactory

SLOW_FLUSH = {"session_record_flush_interval_ms": 60_000}
SELECT_USER = "SELECT email_verified, email, session_iat FROM users WHERE user_id = $1"


def user_with(email: object, *, verified: bool = True, iat: int | None = None) -> User:
    user_id = uuid.uuid4()
    now = iat or int(time.time())
    token = make_token(user_id, email_verified=verified, email=email, iat=now, exp=now + 600)
    return User(user_id, token)


async def test_a_signed_in_read_writes_nothing_until_the_recorder_flushes(
    make_client: AppFactory, db: Any
) -> None:
    client = await make_client(**SLOW_FLUSH)
    verified = user_with("ada@example.org")
    unverified = user_with("eve@example.org", verified=False)
    for user in (verified, unverified):
        assert (await client.get("/v1/auth/permissions", headers=user.headers)).status == 200
        assert await db.fetchrow(SELECT_USER, user.user_id) is None
    recorder = client.app[keys.SESSION_RECORDER]
    assert recorder.pending == 2
    assert await recorder.flush() == 2
    row = await db.fetchrow(SELECT_USER, verified.user_id)
    assert (row["email_verified"], row["email"]) == (True, "ada@example.org")
    # An address the token does not say is verified is never stored.
    row = await db.fetchrow(SELECT_USER, unverified.user_id)
    assert (row["email_verified"], row["email"]) == (False, None)
    text = await (await client.get("/metrics")).text()
    assert "marketplace_sessions_recorded_total" in text
    assert "marketplace_session_record_batch_size_bucket" in text


async def test_the_first_request_of_a_new_user_may_write_rows_that_reference_it(
    make_client: AppFactory, db: Any
) -> None:
    """Each of these writes a row with a foreign key to `users` (or locks the user's row), as
    the very first request of its user, with nothing flushed in the background."""
    client = await make_client(**SLOW_FLUSH)

    problems: list[tuple[str, int, str]] = []

    async def first_request(method: str, path: str, body: dict[str, Any], status: int) -> None:
        user = new_user()
        payload = {
            key: str(user.user_id) if value is None else value for key, value in body.items()
        }
        resp = await client.request(method, path, json=payload, headers=user.headers)
        if resp.status != status:
            problems.append((path, resp.status, await resp.text()))
        elif await db.fetchrow(SELECT_USER, user.user_id) is None:
            problems.append((path, resp.status, "no users row"))

    await first_request("POST", "/v1/api-keys", {"name": "agent", "userId": None}, 201)
    await first_request("PUT", "/v1/username", {"username": "first_of_all", "userId": None}, 200)
    await first_request(
        "POST",
        "/v1/wallet-links/challenge",
        {"walletAddress": Wallet().address, "chainId": 31337},
        200,
    )
    await first_request(
        "POST", "/v1/legal/acceptances", {"documentType": "terms", "version": "2025-03-01"}, 200
    )
    # A guarded mutation records implied legal assent before its handler runs.
    await first_request("POST", GUARDED_PATH, {"value": 1}, 200)
    await first_request("POST", "/v1/projects/create-intents", {}, 201)
    assert problems == []
    assert client.app[keys.SESSION_RECORDER].pending == 0


async def test_an_agent_key_acts_at_once_with_this_frontends_newest_session(
    make_client: AppFactory,
) -> None:
    client = await make_client(**SLOW_FLUSH)
    user_id = uuid.uuid4()
    now = int(time.time())

    def session(iat: int, verified: bool) -> dict[str, str]:
        return bearer(make_token(user_id, email_verified=verified, iat=iat, exp=iat + 600))

    key = await create_key(client, User(user_id, make_token(user_id, iat=now - 20, exp=now + 60)))
    guarded = {"json": {"value": 1}, "headers": agent(key["secret"])}
    assert (await client.post(GUARDED_PATH, **guarded)).status == 200
    # A newer unverified session, seen by this frontend a moment ago and not flushed.
    assert (
        await client.get("/v1/auth/permissions", headers=session(now - 10, False))
    ).status == 200
    assert await error_of(await client.post(GUARDED_PATH, **guarded), 403) == "email_not_verified"
    assert (await client.get("/v1/auth/permissions", headers=session(now, True))).status == 200
    assert (await client.post(GUARDED_PATH, **guarded)).status == 200
    # An older token seen late changes nothing.
    assert (await client.get("/v1/auth/permissions", headers=session(now - 5, False))).status == 200
    assert (await client.post(GUARDED_PATH, **guarded)).status == 200


async def test_the_verified_email_guard_reads_the_token_not_the_row(
    make_client: AppFactory, db: Any
) -> None:
    client = await make_client(**SLOW_FLUSH)
    user_id = uuid.uuid4()
    now = int(time.time())
    verified = bearer(make_token(user_id, email_verified=True, iat=now - 10, exp=now + 600))
    unverified = bearer(make_token(user_id, email_verified=False, iat=now, exp=now + 600))
    assert (await client.post(GUARDED_PATH, json={"value": 1}, headers=verified)).status == 200
    assert (await client.get("/v1/auth/permissions", headers=unverified)).status == 200
    await client.app[keys.SESSION_RECORDER].flush()
    assert (await db.fetchrow(SELECT_USER, user_id))["email_verified"] is False
    # The stored flag is the newest token's, but a session acts with its own token's flag.
    assert (await client.post(GUARDED_PATH, json={"value": 1}, headers=verified)).status == 200
    resp = await client.post(GUARDED_PATH, json={"value": 1}, headers=unverified)
    assert await error_of(resp, 403) == "email_not_verified"
    anonymous = await client.post(GUARDED_PATH, json={"value": 1})
    assert await error_of(anonymous, 401) == "unauthorized"


async def test_permission_flags_do_not_wait_for_the_session_record(
    make_client: AppFactory, db: Any
) -> None:
    client = await make_client(**SLOW_FLUSH)
    admin, stranger = user_with("root@example.org"), new_user()
    # Granted by an operator before the user ever signed in.
    await set_flags(db, admin.user_id, moderation_admin=True, verifier_admin=None)

    async def flags(user: User) -> tuple[bool, bool]:
        body = await (await client.get("/v1/auth/permissions", headers=user.headers)).json()
        return body["permissions"]["moderationAdmin"], body["permissions"]["verifierAdmin"]

    assert await flags(admin) == (True, False)
    assert await flags(stranger) == (False, False)
    await client.app[keys.SESSION_RECORDER].flush()
    assert await flags(admin) == (True, False)  # recording the session kept the grant
    row = await db.fetchrow(SELECT_USER, admin.user_id)
    assert row["email"] == "root@example.org"
    assert await error_of(await client.get("/v1/auth/permissions"), 401) == "unauthorized"


async def test_shutdown_writes_the_sessions_still_pending(make_client: AppFactory, db: Any) -> None:
    client = await make_client(**SLOW_FLUSH)
    users = [user_with(f"u{index}@example.org") for index in range(3)]
    for user in users:
        assert (await client.get("/v1/username", headers=user.headers)).status == 200
    assert client.app[keys.SESSION_RECORDER].pending == 3
    await client.close()
    rows = await db.fetch(
        "SELECT user_id, email FROM users WHERE user_id = any($1)", [u.user_id for u in users]
    )
    assert {(r["user_id"], r["email"]) for r in rows} == {
        (user.user_id, f"u{index}@example.org") for index, user in enumerate(users)
    }


async def test_a_malformed_email_claim_is_ignored_not_refused(
    make_client: AppFactory, db: Any
) -> None:
    client = await make_client(**SLOW_FLUSH)
    malformed: list[object] = [
        42,
        True,
        {"address": "a@b.c"},
        "no-at-sign",
        "@leading.example",
        "trailing@",
        "two words@example.org",
        "tab\t@example.org",
        "x" * 310 + "@example.org",  # 322 characters: beyond what the column accepts
    ]
    users = [user_with(email) for email in malformed]
    accepted = user_with("  padded@example.org ")
    for user in [*users, accepted]:
        assert (await client.get("/v1/auth/permissions", headers=user.headers)).status == 200
    await client.app[keys.SESSION_RECORDER].flush()
    for user, email in zip(users, malformed, strict=True):
        row = await db.fetchrow(SELECT_USER, user.user_id)
        assert (row["email_verified"], row["email"]) == (True, None), email
    row = await db.fetchrow(SELECT_USER, accepted.user_id)
    assert row["email"] == "padded@example.org"
    longest = user_with("x" * 308 + "@example.org")  # exactly 320 characters
    assert (await client.get("/v1/auth/permissions", headers=longest.headers)).status == 200
    await client.app[keys.SESSION_RECORDER].flush()
    assert len((await db.fetchrow(SELECT_USER, longest.user_id))["email"]) == 320
