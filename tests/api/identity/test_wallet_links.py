"""Wallet links through HTTP with real EIP-191 signatures made by eth-account."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from eth_utils import to_checksum_address

from marketplace.storage.repositories import wallet_links as repo
from tests.api.identity.conftest import (
    Wallet,
    agent,
    challenge,
    create_key,
    error_of,
    link_wallet,
    other_id,
)
from tests.conftest import new_user


async def _verify(client: Any, headers: dict[str, str], **body: Any) -> Any:
    return await client.post("/v1/wallet-links/verify", json=body, headers=headers)


async def test_challenge_is_a_sign_in_with_ethereum_message(make_client: Any) -> None:
    client = await make_client(wallet_link_chain_ids=[8453, 31337], port=8080)
    user, wallet = new_user(), Wallet()
    before = datetime.now(UTC)
    issued = await challenge(client, user.headers, wallet.address.lower(), chain_id=8453)
    assert set(issued) == {
        "challengeId",
        "userId",
        "walletAddress",
        "chainId",
        "nonce",
        "message",
        "expiresAt",
    }
    assert issued["userId"] == str(user.user_id)
    assert issued["walletAddress"] == wallet.address  # checksummed although sent lower-case
    assert issued["chainId"] == 8453
    expires = datetime.fromisoformat(issued["expiresAt"])
    assert timedelta(seconds=595) < expires - before < timedelta(seconds=605)
    lines = issued["message"].split("\n")
    # No public URL or domain configured: the configured listen address (not the Host header).
    assert lines[0] == "127.0.0.1:8080 wants you to sign in with your Ethereum account:"
    assert lines[1] == wallet.address
    assert str(user.user_id) in lines[3]
    assert "Project Marketplace" in lines[3]
    assert "Chain ID: 8453" in lines
    assert f"Nonce: {issued['nonce']}" in lines
    assert any(line.startswith("Issued At: ") and line.endswith("Z") for line in lines)
    assert f"Expiration Time: {expires.strftime('%Y-%m-%dT%H:%M:%S')}" in issued["message"]
    assert len(issued["nonce"]) >= 16 and issued["nonce"].isalnum()
    again = await challenge(client, user.headers, wallet.address)
    assert again["nonce"] != issued["nonce"]
    assert again["challengeId"] != issued["challengeId"]


async def test_the_request_host_never_names_the_site(make_client: Any) -> None:
    """A client must not choose which site the user is told they sign in to (issue 9)."""
    user, wallet = new_user(), Wallet()
    for overrides, domain, uri in (
        (
            {"public_base_url": "https://api.market.example"},
            "api.market.example",
            "https://api.market.example",
        ),
        ({"host": "127.0.0.1", "port": 9000}, "127.0.0.1:9000", "http://127.0.0.1:9000"),
    ):
        client = await make_client(**overrides)
        resp = await client.post(
            "/v1/wallet-links/challenge",
            json={"walletAddress": wallet.address, "chainId": 31337},
            headers={**user.headers, "Host": "evil.example"},
        )
        assert resp.status == 200, await resp.text()
        message = (await resp.json())["message"]
        assert "evil.example" not in message
        assert message.startswith(f"{domain} wants you to sign in")
        assert f"URI: {uri}" in message


async def test_only_configured_chains_are_accepted(make_client: Any) -> None:
    user, wallet = new_user(), Wallet()
    client = await make_client()  # chain 31337
    resp = await client.post(
        "/v1/wallet-links/challenge",
        json={"walletAddress": wallet.address, "chainId": 1},
        headers=user.headers,
    )
    assert await error_of(resp, 400) == "chain_not_accepted"
    client = await make_client(wallet_link_chain_ids=[1, 8453])
    assert (await challenge(client, user.headers, wallet.address, chain_id=1))["chainId"] == 1
    resp = await client.post(
        "/v1/wallet-links/challenge",
        json={"walletAddress": wallet.address, "chainId": 31337},
        headers=user.headers,
    )
    assert await error_of(resp, 400) == "chain_not_accepted"


async def test_challenge_ttl_and_domain_are_configurable(make_client: Any) -> None:
    client = await make_client(wallet_challenge_ttl_seconds=60, wallet_link_domain="app.example")
    user, wallet = new_user(), Wallet()
    issued = await challenge(client, user.headers, wallet.address)
    expires = datetime.fromisoformat(issued["expiresAt"])
    assert expires - datetime.now(UTC) < timedelta(seconds=61)
    assert issued["message"].startswith("app.example wants you to sign in")
    assert "URI: https://app.example" in issued["message"]


async def test_verify_links_the_wallet_and_lists_it_checksummed(make_client: Any, db: Any) -> None:
    client = await make_client(wallet_link_chain_ids=[10])
    user, wallet = new_user(), Wallet()
    issued = await challenge(client, user.headers, wallet.address, chain_id=10)
    resp = await _verify(
        client,
        user.headers,
        challengeId=issued["challengeId"],
        walletAddress=wallet.address.lower(),
        signature=wallet.sign(issued["message"]),
    )
    body = await resp.json()
    assert resp.status == 200, body
    assert set(body) == {"walletAddress", "verifiedAt", "verificationMethod"}
    assert body["walletAddress"] == wallet.address
    assert body["verificationMethod"] == "eip191_sign_message"

    resp = await client.get("/v1/wallet-links", headers=user.headers)
    listing = await resp.json()
    assert resp.status == 200
    assert listing["userId"] == str(user.user_id)
    assert listing["count"] == 1
    assert listing["items"][0]["walletAddress"] == wallet.address
    assert listing["items"][0]["chainId"] == 10
    assert await repo.is_active_link(db, user.user_id, wallet.address)
    assert await repo.active_owner_of_wallet(db, wallet.address.upper().replace("0X", "0x")) == (
        user.user_id
    )


async def test_a_challenge_cannot_be_used_twice(client: Any) -> None:
    user, wallet = new_user(), Wallet()
    issued = await challenge(client, user.headers, wallet.address)
    body = {
        "challengeId": issued["challengeId"],
        "walletAddress": wallet.address,
        "signature": wallet.sign(issued["message"]),
    }
    first = await _verify(client, user.headers, **body)
    assert first.status == 200
    replay = await _verify(client, user.headers, **body)
    assert await error_of(replay, 409) == "challenge_already_used"


async def test_concurrent_verifies_of_one_challenge_have_one_winner(client: Any) -> None:
    user, wallet = new_user(), Wallet()
    issued = await challenge(client, user.headers, wallet.address)
    body = {
        "challengeId": issued["challengeId"],
        "walletAddress": wallet.address,
        "signature": wallet.sign(issued["message"]),
    }
    responses = await asyncio.gather(*(_verify(client, user.headers, **body) for _ in range(6)))
    statuses = sorted(r.status for r in responses)
    assert statuses == [200, 409, 409, 409, 409, 409]
    for resp in responses:
        if resp.status == 409:
            assert (await resp.json())["error"] == "challenge_already_used"


async def test_verify_rejections(client: Any, db: Any) -> None:
    alice, bob, wallet, other = new_user(), new_user(), Wallet(), Wallet()
    issued = await challenge(client, alice.headers, wallet.address)
    good = wallet.sign(issued["message"])
    base = {"challengeId": issued["challengeId"], "walletAddress": wallet.address}

    resp = await _verify(
        client, alice.headers, **{**base, "challengeId": other_id()}, signature=good
    )
    assert await error_of(resp, 404) == "challenge_not_found"

    resp = await _verify(client, bob.headers, **base, signature=good)
    assert await error_of(resp, 403) == "challenge_user_mismatch"

    resp = await _verify(
        client, alice.headers, **{**base, "walletAddress": other.address}, signature=good
    )
    assert await error_of(resp, 400) == "wallet_mismatch"

    # Signed by another wallet, or by the right wallet over another text.
    resp = await _verify(client, alice.headers, **base, signature=other.sign(issued["message"]))
    assert await error_of(resp, 400) == "signature_mismatch"
    resp = await _verify(
        client, alice.headers, **base, signature=wallet.sign(issued["message"] + " ")
    )
    assert await error_of(resp, 400) == "signature_mismatch"

    for malformed in (good[:-2], good + "00", "0x" + "11" * 65, "0x" + "00" * 65, "0xabc"):
        resp = await _verify(client, alice.headers, **base, signature=malformed)
        assert await error_of(resp, 400) == "signature_malformed", malformed
    for not_hex in ("zz", "0x", "0xnothex"):
        resp = await _verify(client, alice.headers, **base, signature=not_hex)
        assert await error_of(resp, 400) == "invalid_request"

    # None of the failures consumed the challenge: the right signature still works.
    resp = await _verify(client, alice.headers, **base, signature=good)
    assert resp.status == 200

    expiring = await challenge(client, alice.headers, wallet.address)
    await db.execute(
        "UPDATE wallet_link_challenges SET expires_at = now() - interval '1 second' "
        "WHERE challenge_id = $1",
        uuid.UUID(expiring["challengeId"]),
    )
    resp = await _verify(
        client,
        alice.headers,
        challengeId=expiring["challengeId"],
        walletAddress=wallet.address,
        signature=wallet.sign(expiring["message"]),
    )
    assert await error_of(resp, 410) == "challenge_expired"


async def test_request_validation(client: Any) -> None:
    user, wallet = new_user(), Wallet()
    for body in (
        {"walletAddress": wallet.address, "chainId": 0},
        {"walletAddress": wallet.address},
        {"walletAddress": "0x1234", "chainId": 1},
        {"walletAddress": wallet.address, "chainId": 1, "extra": True},
    ):
        resp = await client.post("/v1/wallet-links/challenge", json=body, headers=user.headers)
        assert await error_of(resp, 400) == "invalid_request", body


async def test_second_user_proving_a_wallet_supersedes_the_first_link(client: Any) -> None:
    alice, bob, wallet = new_user(), new_user(), Wallet()
    await link_wallet(client, alice.headers, wallet)
    await link_wallet(client, bob.headers, wallet)

    alice_links = await (await client.get("/v1/wallet-links", headers=alice.headers)).json()
    bob_links = await (await client.get("/v1/wallet-links", headers=bob.headers)).json()
    assert alice_links["count"] == 0
    assert [i["walletAddress"] for i in bob_links["items"]] == [wallet.address]
    resp = await client.delete(f"/v1/wallet-links/{wallet.address}", headers=alice.headers)
    assert await error_of(resp, 404) == "wallet_link_not_found"


async def test_re_proving_your_own_wallet_keeps_one_link(client: Any) -> None:
    user, wallet = new_user(), Wallet()
    first = await link_wallet(client, user.headers, wallet)
    second = await link_wallet(client, user.headers, wallet)
    assert second["verifiedAt"] > first["verifiedAt"]
    listing = await (await client.get("/v1/wallet-links", headers=user.headers)).json()
    assert listing["count"] == 1


async def test_revoke_is_soft_and_ends_authorization(client: Any, db: Any) -> None:
    user, wallet, kept = new_user(), Wallet(), Wallet()
    await link_wallet(client, user.headers, wallet)
    await link_wallet(client, user.headers, kept)
    resp = await client.delete(f"/v1/wallet-links/{wallet.address.lower()}", headers=user.headers)
    body = await resp.json()
    assert resp.status == 200, body
    assert body["walletAddress"] == wallet.address
    assert datetime.fromisoformat(body["revokedAt"]) <= datetime.now(UTC)

    listing = await (await client.get("/v1/wallet-links", headers=user.headers)).json()
    assert [i["walletAddress"] for i in listing["items"]] == [kept.address]
    assert not await repo.is_active_link(db, user.user_id, wallet.address)
    assert await repo.active_wallets(db, user.user_id) == [kept.address.lower()]
    history = await db.fetchrow(
        "SELECT revoked_at, revoked_reason FROM wallet_links WHERE wallet_address = $1",
        wallet.address.lower(),
    )
    assert history["revoked_at"] is not None and history["revoked_reason"] == "user"

    resp = await client.delete(f"/v1/wallet-links/{wallet.address}", headers=user.headers)
    assert await error_of(resp, 404) == "wallet_link_not_found"
    resp = await client.delete("/v1/wallet-links/0xnot-an-address", headers=user.headers)
    assert await error_of(resp, 400) == "invalid_request"


async def test_strangers_are_refused(client: Any) -> None:
    owner, stranger, wallet = new_user(), new_user(), Wallet()
    await link_wallet(client, owner.headers, wallet)
    mine = f"?userId={owner.user_id}"

    resp = await client.get(f"/v1/wallet-links{mine}", headers=stranger.headers)
    assert await error_of(resp, 403) == "forbidden"
    resp = await client.delete(f"/v1/wallet-links/{wallet.address}{mine}", headers=stranger.headers)
    assert await error_of(resp, 403) == "forbidden"
    # Without naming the owner, the stranger can only touch their own links.
    resp = await client.delete(f"/v1/wallet-links/{wallet.address}", headers=stranger.headers)
    assert await error_of(resp, 404) == "wallet_link_not_found"
    resp = await client.post(
        "/v1/wallet-links/challenge",
        json={"userId": str(owner.user_id), "walletAddress": wallet.address, "chainId": 1},
        headers=stranger.headers,
    )
    assert await error_of(resp, 403) == "forbidden"
    # The owner naming themselves is fine.
    resp = await client.get(f"/v1/wallet-links{mine}", headers=owner.headers)
    assert (await resp.json())["count"] == 1


async def test_anonymous_callers_are_refused(client: Any) -> None:
    wallet = Wallet()
    for method, path, body in (
        ("GET", "/v1/wallet-links", None),
        ("POST", "/v1/wallet-links/challenge", {"walletAddress": wallet.address, "chainId": 1}),
        ("POST", "/v1/wallet-links/verify", {"challengeId": other_id()}),
        ("DELETE", f"/v1/wallet-links/{wallet.address}", None),
    ):
        resp = await client.request(method, path, json=body)
        assert await error_of(resp, 401) == "unauthorized", path


async def test_an_agent_key_can_link_a_wallet_for_its_user(client: Any) -> None:
    user, wallet = new_user(), Wallet()
    key = await create_key(client, user)
    await link_wallet(client, agent(key["secret"]), wallet)
    listing = await (await client.get("/v1/wallet-links", headers=user.headers)).json()
    assert listing["items"][0]["walletAddress"] == to_checksum_address(wallet.address)
