"""`Idempotency-Key` on create requests (marketplace/http/idempotency.py, docs/api.md): a retry
answers the first response again and creates nothing; the same key with another request is 422;
a key still in flight is 409; keys are per user; what is stored and what is not; expiry and the
sweep; the OpenAPI document lists the header and the errors on exactly the idempotent routes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest
from pydantic import Field

from marketplace.errors import InvalidRequest, NotFound, ServiceUnavailable
from marketplace.http.idempotency import key_digest
from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.types import RequestModel, ResponseModel
from tests.api.messaging.conftest import post_chat, project_with_worker
from tests.conftest import new_user
from tests.support import apps
from tests.support.waiting import eventually

db = apps.db

# --- a probe route whose handler counts its runs and fails on request ---------------------------

idem = RouteTable(tag="probe")
RUNS: list[str] = []
GATE: dict[str, asyncio.Event] = {}


class MakeBody(RequestModel):
    name: str = Field(min_length=1, max_length=40)
    # fail: "503" (ServiceUnavailable), "500" (an exception), "400", "404", "wait" (blocks
    # until GATE["open"] is set), "" (succeeds).
    fail: str = ""


class Made(ResponseModel):
    """What the probe made."""

    name: str
    run: int
    token: str


@idem.post(
    "/v1/_probe/make",
    name="probeMake",
    summary="probe",
    auth=AuthMode.EITHER,
    body=MakeBody,
    response=Made,
    status=201,
    idempotent=True,
)
async def probe_make(call: Call[MakeBody, None, None]) -> Made:
    RUNS.append(call.body.name)
    fail = call.body.fail
    if fail == "wait":
        GATE["entered"].set()
        await GATE["open"].wait()
    if fail == "503" and RUNS.count(call.body.name) == 1:
        raise ServiceUnavailable("the first run fails")
    if fail == "500" and RUNS.count(call.body.name) == 1:
        raise RuntimeError("the first run crashes")
    if fail == "400":
        raise InvalidRequest(f"bad name (run {len(RUNS)})")
    if fail == "404" and RUNS.count(call.body.name) == 1:
        raise NotFound("not there yet")
    return Made(name=call.body.name, run=len(RUNS), token=uuid.uuid4().hex)


@pytest.fixture
def app_routes() -> Sequence[RouteTable]:
    RUNS.clear()
    GATE.clear()
    return (idem,)


def key_header(key: str, headers: dict[str, str]) -> dict[str, str]:
    return {**headers, "Idempotency-Key": key}


async def make(client: Any, headers: dict[str, str], key: str | None, **body: Any) -> Any:
    sent = headers if key is None else key_header(key, headers)
    return await client.post("/v1/_probe/make", json={"name": "n", **body}, headers=sent)


async def _count(db: asyncpg.Connection, table: str) -> int:
    return int(await db.fetchval(f"SELECT count(*) FROM {table}"))


# --- real create routes ----------------------------------------------------------------------


async def test_a_retried_api_key_creation_answers_the_first_key_and_creates_none(
    client: Any, db: asyncpg.Connection
) -> None:
    user = new_user()
    body = {"name": "deploy bot", "userId": str(user.user_id)}
    headers = key_header("create-key-1", user.headers)
    first = await client.post("/v1/api-keys", json=body, headers=headers)
    assert first.status == 201, await first.text()
    assert "Idempotent-Replayed" not in first.headers
    created = await first.json()

    again = await client.post("/v1/api-keys", json=body, headers=headers)
    assert again.status == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.content_type == "application/json"
    assert await again.json() == created  # the same key, its secret included
    assert again.headers["x-request-id"] != first.headers["x-request-id"]
    assert await _count(db, "api_keys") == 1
    assert await _count(db, "idempotency_keys") == 1
    # At rest neither the key nor the secret it answers is readable: the row holds the key's
    # digest and the body encrypted under the key (a database reader cannot replay it).
    row = await db.fetchrow("SELECT key_digest, response_body FROM idempotency_keys")
    assert row is not None
    assert row["key_digest"] == key_digest("create-key-1")
    secret = next(v for v in created.values() if isinstance(v, str) and v.startswith("mkt_"))
    assert secret.encode() not in row["response_body"]
    assert b"create-key-1" not in row["response_body"]
    assert b"deploy bot" not in row["response_body"]

    # Another body with the same key: refused, nothing created.
    other = await client.post("/v1/api-keys", json={**body, "name": "other bot"}, headers=headers)
    assert other.status == 422
    assert (await other.json())["error"] == "idempotency_key_reused"
    # Another idempotent route with the same key is another request too.
    rotate = await client.post(f"/v1/api-keys/{created['id']}/rotate", json={}, headers=headers)
    assert rotate.status == 422
    assert (await rotate.json())["error"] == "idempotency_key_reused"
    assert await _count(db, "api_keys") == 1

    # Without a key, the same request creates another key (no idempotency asked for).
    plain = await client.post("/v1/api-keys", json=body, headers=user.headers)
    assert plain.status == 201 and "Idempotent-Replayed" not in plain.headers
    assert await _count(db, "api_keys") == 2


async def test_keys_are_per_user_and_need_a_principal(client: Any, db: asyncpg.Connection) -> None:
    owner, stranger = new_user(), new_user()
    first = await client.post(
        "/v1/api-keys",
        json={"name": "bot", "userId": str(owner.user_id)},
        headers=key_header("shared-key", owner.headers),
    )
    assert first.status == 201
    # The stranger's same key with the same path is another key: it runs, for the stranger.
    theirs = await client.post(
        "/v1/api-keys",
        json={"name": "bot", "userId": str(stranger.user_id)},
        headers=key_header("shared-key", stranger.headers),
    )
    assert theirs.status == 201
    assert "Idempotent-Replayed" not in theirs.headers
    assert (await theirs.json())["userId"] == str(stranger.user_id)
    # Even with the owner's exact body: the stranger never sees the owner's stored answer.
    copied = await client.post(
        "/v1/api-keys",
        json={"name": "bot", "userId": str(owner.user_id)},
        headers=key_header("shared-key-2", stranger.headers),
    )
    assert copied.status == 403 and "Idempotent-Replayed" not in copied.headers
    replayed_for_stranger = await client.post(
        "/v1/api-keys",
        json={"name": "bot", "userId": str(owner.user_id)},
        headers=key_header("shared-key", stranger.headers),
    )
    assert replayed_for_stranger.status == 422  # their own key, another body
    # Anonymous: 401 before any key is looked at; nothing stored.
    anonymous = await client.post(
        "/v1/api-keys",
        json={"name": "bot", "userId": str(owner.user_id)},
        headers={"Idempotency-Key": "shared-key"},
    )
    assert anonymous.status == 401
    assert await _count(db, "api_keys") == 2
    rows = await db.fetch("SELECT user_id, key_digest FROM idempotency_keys ORDER BY user_id")
    assert sorted((r["user_id"], r["key_digest"]) for r in rows) == sorted(
        [(owner.user_id, key_digest("shared-key")), (stranger.user_id, key_digest("shared-key"))]
    )


async def test_a_retried_chat_message_is_stored_once(client: Any, db: asyncpg.Connection) -> None:
    project = await project_with_worker(client, db)
    owner = project.owner
    keyed = {**owner.headers, "Idempotency-Key": "7d3f1c9e-chat"}
    first = await post_chat(client, owner, project.address, "sent once", headers=keyed)
    assert first.status == 201, await first.text()
    again = await post_chat(client, owner, project.address, "sent once", headers=keyed)
    assert again.status == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert await again.json() == await first.json()
    assert await db.fetchval("SELECT count(*) FROM messages WHERE body = 'sent once'") == 1


async def test_a_chat_send_committed_after_its_503_is_not_stored_again_by_the_retry(
    client: Any, make_client: Any, db: asyncpg.Connection
) -> None:
    """A shard call past the frontend's call timeout is a 503, which releases the key, yet the
    shard goes on and commits. The retry with the same key runs again and must find that message
    rather than store a second one."""
    project = await project_with_worker(client, db)
    owner = project.owner
    keyed = {**owner.headers, "Idempotency-Key": "0b6f4e8a-late-commit"}
    text = "committed after its 503"
    # A frontend whose shard calls always time out (no answer comes within a microsecond).
    impatient = await make_client(actor_call_timeout_seconds=1e-6)
    first = await post_chat(impatient, owner, project.address, text, headers=keyed)
    assert first.status == 503, await first.text()
    count = "SELECT count(*) FROM messages WHERE body = 'committed after its 503'"
    await eventually(
        lambda: db.fetchval(count), within=10, what="the shard to commit the first send"
    )
    stored_id = await db.fetchval("SELECT id FROM messages WHERE body = 'committed after its 503'")

    retry = await post_chat(client, owner, project.address, text, headers=keyed)
    assert retry.status == 201, await retry.text()
    assert "Idempotent-Replayed" not in retry.headers  # it ran again: nothing was stored
    assert (await retry.json())["id"] == str(stored_id)
    assert await db.fetchval(count) == 1
    # Without a key each send is its own message, as before.
    plain = await post_chat(client, owner, project.address, text)
    assert plain.status == 201
    assert await db.fetchval(count) == 2


# --- what is stored and what is not ----------------------------------------------------------


async def test_invalid_keys_are_400(client: Any, db: asyncpg.Connection) -> None:
    user = new_user()
    for key in ("x" * 256, "caf\u00e9", "tab\there"):
        resp = await make(client, user.headers, key)
        assert resp.status == 400, key
        body = await resp.json()
        assert body["error"] == "invalid_request"
        assert body["details"][0]["location"] == "header"
        assert "Idempotency-Key" in body["message"]
    # The longest and the odd but valid ones are keys.
    for key in ("x" * 255, "a b ~!{}"):
        assert (await make(client, user.headers, key, name=key[:40])).status == 201
    assert RUNS == ["x" * 40, "a b ~!{}"]
    assert await _count(db, "idempotency_keys") == 2


async def test_a_server_failure_is_not_stored_and_the_retry_runs(
    client: Any, db: asyncpg.Connection
) -> None:
    user = new_user()
    for fail in ("503", "500"):
        first = await make(client, user.headers, f"k-{fail}", name=fail, fail=fail)
        assert first.status == int(fail)
        stored = "SELECT count(*) FROM idempotency_keys WHERE key_digest = $1"
        assert await db.fetchval(stored, key_digest(f"k-{fail}")) == 0
        retry = await make(client, user.headers, f"k-{fail}", name=fail, fail=fail)
        assert retry.status == 201
        assert "Idempotent-Replayed" not in retry.headers
        assert RUNS.count(fail) == 2
        # Now stored: a third try replays the success.
        third = await make(client, user.headers, f"k-{fail}", name=fail, fail=fail)
        assert third.headers["Idempotent-Replayed"] == "true"
        assert await third.json() == await retry.json()
        assert RUNS.count(fail) == 2


async def test_deterministic_client_errors_are_stored_state_errors_are_not(
    client: Any, db: asyncpg.Connection
) -> None:
    user = new_user()
    first = await make(client, user.headers, "k-400", name="bad", fail="400")
    assert first.status == 400
    again = await make(client, user.headers, "k-400", name="bad", fail="400")
    assert again.status == 400
    assert again.headers["Idempotent-Replayed"] == "true"
    assert await again.json() == await first.json()  # "run 1" both times
    assert RUNS.count("bad") == 1

    # A 404 may turn into a success once the thing exists: not stored, the retry runs.
    missing = await make(client, user.headers, "k-404", name="later", fail="404")
    assert missing.status == 404
    found = await make(client, user.headers, "k-404", name="later", fail="404")
    assert found.status == 201 and "Idempotent-Replayed" not in found.headers
    assert RUNS.count("later") == 2

    # A request refused before the handler (body validation) claims nothing.
    invalid = await make(client, user.headers, "k-invalid", name="")
    assert invalid.status == 400
    assert (await make(client, user.headers, "k-invalid", name="fixed")).status == 201
    assert RUNS.count("") == 0 and RUNS.count("fixed") == 1


async def test_a_key_in_flight_is_409_and_answers_once_done(client: Any) -> None:
    user = new_user()
    GATE["entered"], GATE["open"] = asyncio.Event(), asyncio.Event()
    first = asyncio.create_task(make(client, user.headers, "k-slow", name="slow", fail="wait"))
    await asyncio.wait_for(GATE["entered"].wait(), 30)
    busy = await make(client, user.headers, "k-slow", name="slow", fail="wait")
    assert busy.status == 409
    assert (await busy.json())["error"] == "idempotency_key_in_progress"
    # Another body while it runs is still a reuse of the key.
    other = await make(client, user.headers, "k-slow", name="other")
    assert other.status == 422
    GATE["open"].set()
    done = await first
    assert done.status == 201
    replayed = await make(client, user.headers, "k-slow", name="slow", fail="wait")
    assert replayed.status == 201 and replayed.headers["Idempotent-Replayed"] == "true"
    assert await replayed.json() == await done.json()
    assert RUNS == ["slow"]


async def test_an_abandoned_claim_is_taken_over_after_its_lease(
    client: Any, db: asyncpg.Connection
) -> None:
    user = new_user()
    assert (await make(client, user.headers, "k-dead", name="dead")).status == 201
    # As if the process holding the claim had died mid-request, its lease since passed.
    await db.execute(
        "UPDATE idempotency_keys SET locked_until = now() - interval '1 second', "
        "response_status = NULL, response_headers = NULL, response_body = NULL"
    )
    retry = await make(client, user.headers, "k-dead", name="dead")
    assert retry.status == 201 and "Idempotent-Replayed" not in retry.headers
    assert RUNS == ["dead", "dead"]


async def test_expired_keys_run_again_and_are_swept(client: Any, db: asyncpg.Connection) -> None:
    from marketplace.http.idempotency import sweep_expired
    from marketplace.http.keys import PG_POOL

    user = new_user()
    first = await make(client, user.headers, "k-old", name="old")
    assert (await make(client, user.headers, "k-kept", name="kept")).status == 201
    ttl = await db.fetchval(
        "SELECT round(extract(epoch FROM expires_at - created_at)) FROM idempotency_keys "
        "WHERE key_digest = $1",
        key_digest("k-old"),
    )
    assert ttl == 24 * 3600  # MARKETPLACE_IDEMPOTENCY_KEY_TTL_HOURS' default
    await db.execute(
        "UPDATE idempotency_keys SET expires_at = now() - interval '1 second' "
        "WHERE key_digest = $1",
        key_digest("k-old"),
    )
    # Past its expiry a key is free, even before the sweep removed it.
    again = await make(client, user.headers, "k-old", name="old")
    assert again.status == 201 and "Idempotent-Replayed" not in again.headers
    assert (await again.json())["token"] != (await first.json())["token"]
    assert RUNS.count("old") == 2

    await db.execute("UPDATE idempotency_keys SET expires_at = now() - interval '1 second'")
    await db.execute(
        "UPDATE idempotency_keys SET expires_at = now() + interval '1 hour' WHERE key_digest = $1",
        key_digest("k-kept"),
    )
    assert await sweep_expired(client.app[PG_POOL]) == 1
    left = [r["key_digest"] for r in await db.fetch("SELECT key_digest FROM idempotency_keys")]
    assert left == [key_digest("k-kept")]


async def test_the_ttl_comes_from_the_settings(make_client: Any, servers: Any) -> None:
    client = await make_client(idempotency_key_ttl_hours=2)
    user = new_user()
    assert (await make(client, user.headers, "k-ttl")).status == 201
    conn = await asyncpg.connect(servers.database_url)
    try:
        ttl = await conn.fetchval(
            "SELECT round(extract(epoch FROM expires_at - created_at)) FROM idempotency_keys"
        )
    finally:
        await conn.close()
    assert ttl == 2 * 3600


# --- the document ----------------------------------------------------------------------------

IDEMPOTENT_OPERATIONS = {
    "createApiKey",
    "rotateApiKey",
    "postChatMessage",
    "sendDirectMessage",
    "reportMessage",
    "createVerifierJob",
    "createProjectCreateIntent",
    "submitDisputeEvidence",
}


async def test_the_document_lists_the_header_and_errors_on_exactly_the_idempotent_routes(
    client: Any,
) -> None:
    document = await (await client.get("/v1/openapi.json")).json()
    with_header = set()
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            names = {p["name"] for p in operation.get("parameters", []) if p["in"] == "header"}
            responses = operation["responses"]
            if "Idempotency-Key" not in names:
                assert "idempotency_key_reused" not in responses.get("422", {}).get(
                    "description", ""
                ), operation["operationId"]
                continue
            with_header.add(operation["operationId"])
            assert method == "post", path
            assert "idempotency_key_reused" in responses["422"]["description"]
            assert "idempotency_key_in_progress" in responses["409"]["description"]
            success = next(r for status, r in responses.items() if status.startswith("2"))
            assert "Idempotent-Replayed" in success["headers"]
            assert "Idempotent-Replayed" in operation["description"] or (
                "Idempotency-Key" in operation["description"]
            )
    # The probe route of these tests is declared idempotent too.
    assert with_header == IDEMPOTENT_OPERATIONS | {"probeMake"}
