"""Acceptance policies per milestone (issue 25; docs/verifier.md, "What a verdict means") end to
end on a real devnet: set in the claim's metadata or with PATCH .../metadata while the project is
draft, shown on the project and its milestones, frozen (409 metadata_frozen) once bidding opens,
on chain even before the indexer has seen it; strangers and anonymous callers refused."""

from __future__ import annotations

from typing import Any

from tests.conftest import new_user
from tests.contracts.helpers import Chain
from tests.integration.claims.test_claims import (
    META,
    claim,
    create_on_chain,
    intent_claim,
    intent_hash_for,
    owner_user,
    take_intent,
)

POLICIES: list[dict[str, Any]] = [
    {"milestoneIndex": 1, "checkPolicyId": "npm-test"},
    {"milestoneIndex": 0, "checkPolicyId": "address-smoke"},
]
SORTED = sorted(POLICIES, key=lambda p: int(p["milestoneIndex"]))


async def claimed_project(
    client: Any, chain: Chain, indexer: Any, meta: dict[str, Any] = META
) -> tuple[str, Any, Any]:
    user = await owner_user(client, chain)
    intent = await take_intent(client, user)
    project, tx_hash = create_on_chain(chain, chain.a.owner, intent_hash_for(user, intent))
    await indexer()
    resp = await claim(client, project, intent_claim(intent, tx_hash, meta), user.headers)
    assert resp.status == 200, await resp.text()
    return project, user, await resp.json()


async def test_policies_set_in_the_claim_are_shown_and_frozen_once_bidding_opens(
    app_client: Any, chain: Chain, indexer: Any
) -> None:
    client = app_client
    project, user, claimed = await claimed_project(
        client, chain, indexer, {**META, "milestonePolicies": POLICIES}
    )
    # Not part of the configHash: the claim matched the chain without them.
    assert claimed["status"] == "claimed"
    assert claimed["project"]["milestonePolicies"] == SORTED
    resp = await client.get(f"/v1/projects/{project}")
    assert (await resp.json())["milestonePolicies"] == SORTED

    url = f"/v1/projects/{project}/metadata"
    # Opened on chain, not indexed yet: the chain decides.
    chain.ok(chain.a.owner, chain.project(project).functions.openBidding())
    patch = {
        "title": "Same",
        "milestonePolicies": [{"milestoneIndex": 0, "checkPolicyId": "github-ref"}],
    }
    resp = await client.patch(url, json=patch, headers=user.headers)
    body = await resp.json()
    assert resp.status == 409 and body["error"] == "metadata_frozen", body
    await indexer()
    resp = await client.patch(url, json=patch, headers=user.headers)
    assert resp.status == 409 and (await resp.json())["error"] == "metadata_frozen"
    # A title-only edit keeps its own code.
    resp = await client.patch(url, json={"title": "Same"}, headers=user.headers)
    assert resp.status == 409 and (await resp.json())["error"] == "metadata_locked"
    resp = await client.get(f"/v1/projects/{project}")
    assert (await resp.json())["milestonePolicies"] == SORTED


async def test_patch_sets_replaces_and_clears_policies_while_draft(
    app_client: Any, chain: Chain, indexer: Any
) -> None:
    client = app_client
    project, user, claimed = await claimed_project(client, chain, indexer)
    assert claimed["project"]["milestonePolicies"] == []
    url = f"/v1/projects/{project}/metadata"

    stranger = new_user()
    patch = {"title": "With policies", "milestonePolicies": POLICIES}
    assert (await client.patch(url, json=patch)).status == 401
    assert (await client.patch(url, json=patch, headers=stranger.headers)).status == 403

    resp = await client.patch(url, json=patch, headers=user.headers)
    body = await resp.json()
    assert resp.status == 200, body
    assert body["milestonePolicies"] == SORTED
    # Left out: unchanged.
    resp = await client.patch(url, json={"title": "Renamed"}, headers=user.headers)
    assert (await resp.json())["milestonePolicies"] == SORTED
    # Replaced as a whole.
    one = [{"milestoneIndex": 0, "checkPolicyId": "forge-test"}]
    resp = await client.patch(
        url, json={"title": "R", "milestonePolicies": one}, headers=user.headers
    )
    assert (await resp.json())["milestonePolicies"] == one
    # null clears, [] clears.
    cleared: list[Any] | None
    for cleared in (None, []):
        await client.patch(url, json={"title": "R", "milestonePolicies": one}, headers=user.headers)
        resp = await client.patch(
            url, json={"title": "R", "milestonePolicies": cleared}, headers=user.headers
        )
        assert (await resp.json())["milestonePolicies"] == []


async def test_bad_policy_lists_are_400s_naming_the_field(
    app_client: Any, chain: Chain, indexer: Any
) -> None:
    client = app_client
    project, user, _ = await claimed_project(client, chain, indexer)
    url = f"/v1/projects/{project}/metadata"
    bad_lists: list[Any] = [
        [{"milestoneIndex": 0, "checkPolicyId": "llm-says-yes"}],
        [{"milestoneIndex": -1, "checkPolicyId": "github-ref"}],
        [{"milestoneIndex": 65536, "checkPolicyId": "github-ref"}],
        [{"milestoneIndex": 0, "checkPolicyId": "github-ref"}] * 2,
        [{"milestoneIndex": i, "checkPolicyId": "github-ref"} for i in range(101)],
        [{"milestoneIndex": 0, "checkPolicyId": "github-ref", "extra": 1}],
        {"milestoneIndex": 0, "checkPolicyId": "github-ref"},
    ]
    for bad in bad_lists:
        resp = await client.patch(
            url, json={"title": "T", "milestonePolicies": bad}, headers=user.headers
        )
        body = await resp.json()
        assert resp.status == 400, (bad, body)
        assert body["error"] == "invalid_request"
        assert "milestonePolicies" in body["message"], body
    resp = await client.get(f"/v1/projects/{project}")
    assert (await resp.json())["milestonePolicies"] == []


async def test_a_claim_with_policies_after_bidding_opened_is_frozen(
    app_client: Any, chain: Chain, indexer: Any
) -> None:
    client = app_client
    user = await owner_user(client, chain)
    intent = await take_intent(client, user)
    project, tx_hash = create_on_chain(chain, chain.a.owner, intent_hash_for(user, intent))
    chain.ok(chain.a.owner, chain.project(project).functions.openBidding())
    meta = {**META, "milestonePolicies": POLICIES}
    resp = await claim(client, project, intent_claim(intent, tx_hash, meta), user.headers)
    body = await resp.json()
    assert resp.status == 409 and body["error"] == "metadata_frozen", body
    # Without policies the same claim goes through (nothing was half-written).
    resp = await claim(client, project, intent_claim(intent, tx_hash), user.headers)
    assert resp.status == 200, await resp.text()
