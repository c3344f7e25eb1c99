"""Create intents, claims and metadata edits end to end on a real devnet (spec 1.2, 4, 7)."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from typing import Any

from marketplace.chain.hashes import direct_config_hash, intent_config_hash
from marketplace.http.app import create_app
from tests.conftest import Servers, User, kill_namespace_actors, new_user
from tests.contracts.helpers import USDC, Chain
from tests.integration.claims.conftest import (
    accept_all_legal,
    chain_settings,
    db_row,
    link_dev_wallet,
)

META = {
    "title": "Build a bridge",
    "description": "A sturdy one",
    "repoUrl": "https://example.com/bridge",
    "projectMode": "standard",
    "biddingAccess": "open",
}


def _fields(meta: dict[str, Any]) -> tuple[Any, ...]:
    return (
        meta["title"],
        meta.get("description"),
        meta.get("repoUrl"),
        meta["projectMode"],
        meta["biddingAccess"],
    )


def create_on_chain(
    chain: Chain, owner: str, config_hash: str, *, succeed: bool = True, invite_only: bool = False
) -> tuple[str, str]:
    fn = chain.registry.functions.createProject(
        bytes.fromhex(config_hash[2:]), invite_only, 10 * USDC, 2 if succeed else 0
    )
    receipt = chain.send(owner, fn)
    tx_hash = receipt["transactionHash"].to_0x_hex()
    if not succeed:
        assert receipt["status"] == 0
        return "", tx_hash
    assert receipt["status"] == 1
    return chain.created_project(receipt).address, tx_hash


async def take_intent(client: Any, user: User) -> dict[str, Any]:
    resp = await client.post("/v1/projects/create-intents", json={}, headers=user.headers)
    assert resp.status == 201, await resp.text()
    return await resp.json()


def intent_hash_for(user: User, intent: dict[str, Any], meta: dict[str, Any] = META) -> str:
    return intent_config_hash(
        *_fields(meta),
        user_id=user.user_id,
        intent_id=uuid.UUID(intent["intentId"]),
        intent_nonce=intent["intentNonce"],
    )


def intent_claim(
    intent: dict[str, Any], tx_hash: str, meta: dict[str, Any] = META
) -> dict[str, Any]:
    return {
        "mode": "intent",
        "hashVersion": "v1_intent",
        "intentId": intent["intentId"],
        "intentNonce": intent["intentNonce"],
        "txHash": tx_hash,
        "metadata": meta,
    }


async def claim(
    client: Any, project: str, body: dict[str, Any] | list[Any], headers: dict[str, str]
) -> Any:
    return await client.post(f"/v1/projects/{project}/claim", json=body, headers=headers)


async def conflict_code(resp: Any) -> str:
    body = await resp.json()
    assert resp.status == 409, body
    assert body["message"]
    return str(body["error"])


async def owner_user(client: Any, chain: Chain) -> User:
    user = new_user()
    await link_dev_wallet(client, user.headers, chain.a.owner)
    return user


# --- end to end ----------------------------------------------------------------------------


async def test_intent_mode_end_to_end(app_client: Any, chain: Chain, indexer: Any) -> None:
    client = app_client
    user = new_user()
    await link_dev_wallet(client, user.headers, chain.a.owner)
    await accept_all_legal(client, user.headers)
    intent = await take_intent(client, user)
    assert intent["version"] == "project_create_intent_v1"
    project, tx_hash = create_on_chain(chain, chain.a.owner, intent_hash_for(user, intent))

    resp = await claim(client, project, intent_claim(intent, tx_hash), user.headers)
    body = await resp.json()
    assert resp.status == 200, body
    assert body["status"] == "claimed"
    assert body["metadataStatus"] == "queued"
    assert body["projectAddress"] == project
    assert body["ownerWalletAddress"] == chain.a.owner
    assert "project" not in body

    await indexer()
    read = await (await client.get(f"/v1/projects/{project}", headers=user.headers)).json()
    assert read["title"] == META["title"]
    assert read["description"] == META["description"]
    assert read["projectMode"] == "standard"
    assert read["biddingAccess"] == "open"
    assert read["viewerCanEditMetadata"] is True
    anonymous = await (await client.get(f"/v1/projects/{project}")).json()
    assert anonymous["title"] == META["title"]

    again = await claim(client, project, intent_claim(intent, tx_hash), user.headers)
    body = await again.json()
    assert again.status == 200
    assert body["status"] == "already_claimed"
    assert body["metadataStatus"] == "updated"
    assert body["project"]["title"] == META["title"]


async def test_direct_mode_by_agent_key(app_client: Any, chain: Chain, indexer: Any) -> None:
    client = app_client
    user = new_user()
    await link_dev_wallet(client, user.headers, chain.a.bidder3)
    resp = await client.post(
        "/v1/api-keys", json={"name": "bot", "userId": str(user.user_id)}, headers=user.headers
    )
    agent = {"x-agent-api-key": (await resp.json())["secret"]}
    meta = {**META, "title": "Agent made", "description": None, "repoUrl": None}
    meta = {k: v for k, v in meta.items() if v is not None}
    project, tx_hash = create_on_chain(chain, chain.a.bidder3, direct_config_hash(*_fields(meta)))
    await indexer()
    body = {"mode": "direct", "hashVersion": "v1_direct", "txHash": tx_hash, "metadata": meta}
    resp = await claim(client, project, body, agent)
    result = await resp.json()
    assert resp.status == 200, result
    assert result["status"] == "claimed"
    assert result["metadataStatus"] == "updated"
    assert result["project"]["title"] == "Agent made"
    assert "description" not in result["project"]
    # A session caller must use intent mode, an agent direct mode.
    resp = await claim(client, project, body, user.headers)
    assert resp.status == 400


async def test_fifty_concurrent_claims_give_exactly_one_claimed(
    app_client: Any, chain: Chain
) -> None:
    client = app_client
    user = await owner_user(client, chain)
    intent = await take_intent(client, user)
    project, tx_hash = create_on_chain(chain, chain.a.owner, intent_hash_for(user, intent))
    responses = await asyncio.gather(
        *[claim(client, project, intent_claim(intent, tx_hash), user.headers) for _ in range(50)]
    )
    bodies = [await r.json() for r in responses]
    statuses = [
        (r.status, b.get("status", b.get("error"))) for r, b in zip(responses, bodies, strict=True)
    ]
    assert statuses.count((200, "claimed")) == 1
    assert statuses.count((200, "already_claimed")) == 49


# --- each claim conflict code ------------------------------------------------------------


async def test_tx_codes(
    app_client: Any, chain: Chain, servers: Servers, devnet: Any, aiohttp_client: Any
) -> None:
    client = app_client
    user = await owner_user(client, chain)
    intent = await take_intent(client, user)
    project, tx_hash = create_on_chain(chain, chain.a.owner, intent_hash_for(user, intent))

    missing = "0x" + secrets.token_hex(32)
    assert (
        await conflict_code(
            await claim(client, project, intent_claim(intent, missing), user.headers)
        )
        == "tx_not_found"
    )

    _, failed = create_on_chain(chain, chain.a.owner, intent_hash_for(user, intent), succeed=False)
    assert (
        await conflict_code(
            await claim(client, project, intent_claim(intent, failed), user.headers)
        )
        == "tx_failed"
    )

    namespace = f"claims-strict-{uuid.uuid4().hex[:8]}"
    strict_settings = chain_settings(servers, devnet, namespace, chain_confirmations=5)
    strict = await aiohttp_client(create_app(strict_settings))
    try:
        resp = await claim(strict, project, intent_claim(intent, tx_hash), user.headers)
        assert await conflict_code(resp) == "tx_not_finalized"
    finally:
        kill_namespace_actors(namespace)

    other_tx = chain.ok(chain.a.owner, chain.project(project).functions.openBidding())
    resp = await claim(
        client, project, intent_claim(intent, other_tx["transactionHash"].to_0x_hex()), user.headers
    )
    assert await conflict_code(resp) == "project_created_event_not_found"


async def test_owner_and_hash_codes(app_client: Any, chain: Chain) -> None:
    client = app_client
    user = await owner_user(client, chain)
    intent = await take_intent(client, user)
    project, tx_hash = create_on_chain(chain, chain.a.owner, intent_hash_for(user, intent))

    stranger = new_user()
    await link_dev_wallet(client, stranger.headers, chain.a.stranger)
    stranger_intent = await take_intent(client, stranger)
    resp = await claim(client, project, intent_claim(stranger_intent, tx_hash), stranger.headers)
    assert await conflict_code(resp) == "owner_mismatch"

    changed = {**META, "title": "Something else"}
    resp = await claim(client, project, intent_claim(intent, tx_hash, changed), user.headers)
    assert await conflict_code(resp) == "config_hash_mismatch"


async def test_intent_record_codes(app_client: Any, chain: Chain, servers: Servers) -> None:
    client = app_client
    user = await owner_user(client, chain)
    intent = await take_intent(client, user)
    project, tx_hash = create_on_chain(chain, chain.a.owner, intent_hash_for(user, intent))

    unknown = {**intent, "intentId": str(uuid.uuid4())}
    resp = await claim(client, project, intent_claim(unknown, tx_hash), user.headers)
    assert await conflict_code(resp) == "project_create_intent_not_found"

    other = new_user()
    other_intent = await take_intent(client, other)
    resp = await claim(client, project, intent_claim(other_intent, tx_hash), user.headers)
    assert await conflict_code(resp) == "project_create_intent_owner_mismatch"

    resp = await client.delete(
        f"/v1/projects/create-intents/{intent['intentId']}", headers=user.headers
    )
    assert resp.status == 200
    resp = await claim(client, project, intent_claim(intent, tx_hash), user.headers)
    assert await conflict_code(resp) == "project_create_intent_not_pending"


async def test_intent_reuse_codes(app_client: Any, chain: Chain, indexer: Any) -> None:
    client = app_client
    user = await owner_user(client, chain)

    # An intent record bound to one project by a claim cannot bind another.
    intent = await take_intent(client, user)
    config = intent_hash_for(user, intent)
    first, first_tx = create_on_chain(chain, chain.a.owner, config)
    second, second_tx = create_on_chain(chain, chain.a.owner, config)
    resp = await claim(client, first, intent_claim(intent, first_tx), user.headers)
    assert (await resp.json())["status"] == "claimed"
    resp = await claim(client, second, intent_claim(intent, second_tx), user.headers)
    assert await conflict_code(resp) == "project_create_intent_already_used"

    # An unclaimed intent that created two projects on chain binds neither unambiguously.
    other = await take_intent(client, user)
    config = intent_hash_for(user, other)
    create_on_chain(chain, chain.a.owner, config)
    twin, twin_tx = create_on_chain(chain, chain.a.owner, config)
    await indexer()
    resp = await claim(client, twin, intent_claim(other, twin_tx), user.headers)
    assert await conflict_code(resp) == "intent_already_used"


async def test_intent_timing_codes(app_client: Any, chain: Chain, servers: Servers) -> None:
    client = app_client
    user = await owner_user(client, chain)

    expired = await take_intent(client, user)
    await db_row(
        servers,
        "UPDATE project_create_intents SET expires_at = now() - interval '1 minute' "
        "WHERE intent_id = $1",
        uuid.UUID(expired["intentId"]),
    )
    project, tx_hash = create_on_chain(chain, chain.a.owner, intent_hash_for(user, expired))
    resp = await claim(client, project, intent_claim(expired, tx_hash), user.headers)
    assert await conflict_code(resp) == "intent_expired_pre_create"

    early = await take_intent(client, user)
    project, tx_hash = create_on_chain(chain, chain.a.owner, intent_hash_for(user, early))
    # As if the intent had been issued an hour after the creation transaction was mined.
    await db_row(
        servers,
        "UPDATE project_create_intents SET created_at = now() + interval '1 hour', "
        "expires_at = now() + interval '2 hours' WHERE intent_id = $1",
        uuid.UUID(early["intentId"]),
    )
    resp = await claim(client, project, intent_claim(early, tx_hash), user.headers)
    assert await conflict_code(resp) == "intent_not_claimable"


async def test_conflict_when_metadata_contradicts_the_chain(
    app_client: Any, chain: Chain, indexer: Any
) -> None:
    client = app_client
    user = await owner_user(client, chain)
    intent = await take_intent(client, user)
    wrong_mode = {**META, "projectMode": "challenge"}
    project, tx_hash = create_on_chain(
        chain, chain.a.owner, intent_hash_for(user, intent, wrong_mode)
    )
    await indexer()
    resp = await claim(client, project, intent_claim(intent, tx_hash, wrong_mode), user.headers)
    assert await conflict_code(resp) == "conflict"


# --- create intents and metadata edits ---------------------------------------------------------


async def test_create_intent_rules(app_client: Any) -> None:
    client = app_client
    user = new_user()
    assert (await client.post("/v1/projects/create-intents", json={})).status == 401
    resp = await client.post(
        "/v1/projects/create-intents", json={"title": "x"}, headers=user.headers
    )
    assert resp.status == 400
    resp = await client.post(
        "/v1/projects/create-intents", json={}, headers=new_user(email_verified=False).headers
    )
    assert (await resp.json())["error"] == "email_not_verified"
    first = await take_intent(client, user)
    second = await take_intent(client, user)
    assert first["intentId"] != second["intentId"]
    assert first["intentNonce"] != second["intentNonce"]


async def test_metadata_patch_rules(app_client: Any, chain: Chain, indexer: Any) -> None:
    client = app_client
    user = await owner_user(client, chain)
    intent = await take_intent(client, user)
    project, tx_hash = create_on_chain(chain, chain.a.owner, intent_hash_for(user, intent))
    url = f"/v1/projects/{project}/metadata"
    patch = {"title": "Renamed", "description": "Now longer"}

    resp = await client.patch(url, json=patch, headers=user.headers)
    assert resp.status == 404  # not indexed yet
    await indexer()
    resp = await client.patch(url, json=patch, headers=user.headers)
    assert (await resp.json())["error"] == "project_not_claimed"
    await claim(client, project, intent_claim(intent, tx_hash), user.headers)

    assert (await client.patch(url, json=patch)).status == 401
    stranger = new_user()
    assert (await client.patch(url, json=patch, headers=stranger.headers)).status == 403
    resp = await client.patch(url, json={"title": ""}, headers=user.headers)
    assert resp.status == 400
    resp = await client.patch(url, json=patch, headers=user.headers)
    body = await resp.json()
    assert resp.status == 200, body
    assert body["title"] == "Renamed"
    assert body["description"] == "Now longer"

    chain.ok(chain.a.owner, chain.project(project).functions.openBidding())
    await indexer()
    resp = await client.patch(url, json=patch, headers=user.headers)
    assert resp.status == 409
    assert (await resp.json())["error"] == "metadata_locked"


async def test_metadata_patch_does_not_reveal_hidden_projects(
    app_client: Any, chain: Chain, indexer: Any
) -> None:
    """Issue 9: a stranger's PATCH answered 403 for a hidden invite-only project and 404 for an
    unknown one, revealing which addresses hold hidden projects."""
    client = app_client
    user = await owner_user(client, chain)
    intent = await take_intent(client, user)
    meta = {**META, "biddingAccess": "invite_only"}
    project, tx_hash = create_on_chain(
        chain, chain.a.owner, intent_hash_for(user, intent, meta), invite_only=True
    )
    await indexer()
    await claim(client, project, intent_claim(intent, tx_hash, meta), user.headers)
    patch = {"title": "Renamed"}
    stranger = new_user()
    unknown = "0x" + "5a" * 20
    answers = []
    for address in (project, unknown):
        resp = await client.patch(
            f"/v1/projects/{address}/metadata", json=patch, headers=stranger.headers
        )
        answers.append((resp.status, await resp.json()))
    assert answers[0] == answers[1]
    assert answers[0][0] == 404
    # Someone who may see the project but does not own it is refused as such.
    worker = new_user()
    await link_dev_wallet(client, worker.headers, chain.a.worker)
    chain.ok(chain.a.owner, chain.project(project).functions.addToAllowlist([chain.a.worker]))
    await indexer()
    resp = await client.patch(
        f"/v1/projects/{project}/metadata", json=patch, headers=worker.headers
    )
    assert resp.status == 403
    resp = await client.patch(f"/v1/projects/{project}/metadata", json=patch, headers=user.headers)
    assert resp.status == 200, await resp.text()


async def test_openapi_lists_every_claim_conflict_code(app_client: Any) -> None:
    from marketplace.projects.claims import CLAIM_CONFLICT_CODES

    doc = await (await app_client.get("/v1/openapi.json")).json()
    described = doc["paths"]["/v1/projects/{projectAddress}/claim"]["post"]["responses"]["409"]
    for code in CLAIM_CONFLICT_CODES:
        assert f"`{code}`" in described["description"]
    assert len(CLAIM_CONFLICT_CODES) == 14


# --- spec gaps decided in issue 10: imageUrl, PATCH semantics, withdrawing an intent -------


async def test_image_url_and_patch_semantics(app_client: Any, chain: Chain, indexer: Any) -> None:
    client = app_client
    user = await owner_user(client, chain)
    intent = await take_intent(client, user)
    # imageUrl is not part of the hash preimage: the same hash with or without it.
    project, tx_hash = create_on_chain(chain, chain.a.owner, intent_hash_for(user, intent))
    body = intent_claim(intent, tx_hash)
    bad = {**body, "metadata": {**body["metadata"], "imageUrl": "http://plain.example/x.png"}}
    resp = await claim(client, project, bad, user.headers)
    assert resp.status == 400
    body["metadata"]["imageUrl"] = "ipfs://bafyimage"
    resp = await claim(client, project, body, user.headers)
    assert resp.status == 200, await resp.text()
    await indexer()
    url = f"/v1/projects/{project}"

    async def read() -> dict[str, Any]:
        resp = await client.get(url, headers=user.headers)
        assert resp.status == 200
        return dict(await resp.json())

    assert (await read())["imageUrl"] == "ipfs://bafyimage"
    assert (await read())["description"] == META["description"]
    # Omitted fields keep their value.
    resp = await client.patch(f"{url}/metadata", json={"title": "T2"}, headers=user.headers)
    assert resp.status == 200, await resp.text()
    after = await read()
    assert (after["title"], after["description"], after["imageUrl"]) == (
        "T2",
        META["description"],
        "ipfs://bafyimage",
    )
    # null clears; a value replaces.
    resp = await client.patch(
        f"{url}/metadata",
        json={"title": "T3", "description": None, "imageUrl": "https://img.example/p.png"},
        headers=user.headers,
    )
    assert resp.status == 200, await resp.text()
    after = await read()
    assert "description" not in after
    assert after["imageUrl"] == "https://img.example/p.png"
    resp = await client.patch(
        f"{url}/metadata", json={"title": "T3", "imageUrl": None}, headers=user.headers
    )
    assert "imageUrl" not in await resp.json()
    resp = await client.patch(
        f"{url}/metadata", json={"title": "T3", "imageUrl": "ftp://x"}, headers=user.headers
    )
    assert resp.status == 400


async def test_withdrawing_an_intent(app_client: Any, chain: Chain, indexer: Any) -> None:
    client = app_client
    user = await owner_user(client, chain)
    intent = await take_intent(client, user)
    path = f"/v1/projects/create-intents/{intent['intentId']}"
    assert (await client.delete(path)).status == 401
    stranger = new_user()
    resp = await client.delete(path, headers=stranger.headers)
    assert resp.status == 404
    unknown = await client.delete(
        f"/v1/projects/create-intents/{uuid.uuid4()}", headers=stranger.headers
    )
    assert await unknown.json() == await resp.json()
    assert (await resp.json())["error"] == "project_create_intent_not_found"

    resp = await client.delete(path, headers=user.headers)
    first = await resp.json()
    assert resp.status == 200, first
    assert (first["intentId"], first["status"]) == (intent["intentId"], "cancelled")
    again = await (await client.delete(path, headers=user.headers)).json()
    assert again == first

    project, tx_hash = create_on_chain(chain, chain.a.owner, intent_hash_for(user, intent))
    resp = await claim(client, project, intent_claim(intent, tx_hash), user.headers)
    assert await conflict_code(resp) == "project_create_intent_not_pending"

    # A used intent cannot be withdrawn.
    used = await take_intent(client, user)
    project, tx_hash = create_on_chain(chain, chain.a.owner, intent_hash_for(user, used))
    resp = await claim(client, project, intent_claim(used, tx_hash), user.headers)
    assert resp.status == 200, await resp.text()
    resp = await client.delete(
        f"/v1/projects/create-intents/{used['intentId']}", headers=user.headers
    )
    assert await conflict_code(resp) == "project_create_intent_not_pending"


async def test_a_shapeless_claim_body_names_the_mode_field(app_client: Any, chain: Chain) -> None:
    user = await owner_user(app_client, chain)
    bodies: tuple[dict[str, Any] | list[Any], ...] = ({}, {"mode": "other"}, {"title": "x"}, [])
    for body in bodies:
        resp = await claim(app_client, "0x" + "12" * 20, body, user.headers)
        error = await resp.json()
        assert resp.status == 400, error
        assert "`mode`" in error["message"] or "`mode`" in str(error["details"]), error
        assert '"intent"' in str(error) and '"direct"' in str(error), error
        assert "discriminator" not in str(error).lower()
        assert "tag" not in str(error).lower()
