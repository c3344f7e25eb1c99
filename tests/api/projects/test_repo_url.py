"""`repoUrl` of the claimed metadata in the project read API (issue 27): a real direct claim on
an anvil devnet, then the detail and list reads (through the frontend's read cache, which the
claim's `project.claimed` event must invalidate) return it; a claim without one leaves it out."""

from __future__ import annotations

from typing import Any

from marketplace.chain.hashes import direct_config_hash
from marketplace.projects.models import ProjectListResponse, ProjectReadModel
from tests.conftest import new_user
from tests.contracts.helpers import Chain
from tests.integration.claims import conftest as claims
from tests.integration.claims.conftest import link_dev_wallet
from tests.integration.claims.test_claims import create_on_chain
from tests.support.waiting import eventually_value

# The devnet, an app wired to it and the indexer driver of the claims suite (fixtures).
devnet = claims.devnet
chain = claims.chain
app_client = claims.app_client
indexer = claims.indexer

REPO_URL = "https://git.example/bridge/" + "r" * 900  # long, within the 1024 limit
META = {
    "title": "Build a bridge",
    "description": "A sturdy one",
    "repoUrl": REPO_URL,
    "projectMode": "standard",
    "biddingAccess": "open",
}


async def _agent(client: Any, wallet: str) -> dict[str, str]:
    user = new_user()
    await link_dev_wallet(client, user.headers, wallet)
    resp = await client.post(
        "/v1/api-keys", json={"name": "bot", "userId": str(user.user_id)}, headers=user.headers
    )
    assert resp.status == 201, await resp.text()
    return {"x-agent-api-key": (await resp.json())["secret"]}


async def _claim(
    client: Any, chain: Chain, indexer: Any, wallet: str, meta: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    agent = await _agent(client, wallet)
    fields = (
        meta["title"],
        meta.get("description"),
        meta.get("repoUrl"),
        meta["projectMode"],
        meta["biddingAccess"],
    )
    project, tx_hash = create_on_chain(chain, wallet, direct_config_hash(*fields))
    await indexer()
    # Read (and cache) the project before its metadata exists.
    before = await client.get(f"/v1/projects/{project}")
    assert before.status == 200, await before.text()
    assert "repoUrl" not in await before.json()
    body = {"mode": "direct", "hashVersion": "v1_direct", "txHash": tx_hash, "metadata": meta}
    resp = await client.post(f"/v1/projects/{project}/claim", json=body, headers=agent)
    result = await resp.json()
    assert resp.status == 200, result
    assert result["status"] == "claimed"
    return project, result


async def _detail(client: Any, project: str) -> dict[str, Any]:
    resp = await client.get(f"/v1/projects/{project}")
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    ProjectReadModel.model_validate(body)
    return body


async def test_a_claimed_repo_url_is_returned_by_detail_and_list(
    app_client: Any, chain: Chain, indexer: Any
) -> None:
    client = app_client
    project, result = await _claim(client, chain, indexer, chain.a.bidder3, META)
    assert result["project"]["repoUrl"] == REPO_URL

    # The detail read cached before the claim is dropped by the claim's event.
    detail = await eventually_value(
        lambda: _detail(client, project),
        until=lambda body: "title" in body,
        within=10,
        what="the claimed metadata in the detail read",
    )
    assert detail["repoUrl"] == REPO_URL
    assert detail["description"] == META["description"]
    assert detail["title"] == META["title"]

    resp = await client.get("/v1/projects", params={"ownerAddress": chain.a.bidder3})
    assert resp.status == 200, await resp.text()
    listing = await resp.json()
    ProjectListResponse.model_validate(listing)
    [item] = [i for i in listing["items"] if i["projectAddress"] == project]
    assert item["repoUrl"] == REPO_URL
    assert item["description"] == META["description"]

    # A signed-in reader (no cache) sees the same.
    reader = new_user()
    resp = await client.get(f"/v1/projects/{project}", headers=reader.headers)
    assert (await resp.json())["repoUrl"] == REPO_URL


async def test_a_claim_without_repo_url_leaves_it_out(
    app_client: Any, chain: Chain, indexer: Any
) -> None:
    client = app_client
    meta = {k: v for k, v in META.items() if k not in ("repoUrl", "description")}
    project, result = await _claim(client, chain, indexer, chain.a.bidder3, meta)
    assert "repoUrl" not in result["project"]
    detail = await eventually_value(
        lambda: _detail(client, project),
        until=lambda body: "title" in body,
        within=10,
        what="the claimed metadata in the detail read",
    )
    assert "repoUrl" not in detail and "description" not in detail


async def test_a_repo_url_longer_than_1024_is_refused(app_client: Any, chain: Chain) -> None:
    client = app_client
    agent = await _agent(client, chain.a.bidder3)
    project = "0x" + "44" * 20
    body = {
        "mode": "direct",
        "hashVersion": "v1_direct",
        "txHash": "0x" + "55" * 32,
        "metadata": {**META, "repoUrl": "https://git.example/" + "r" * 1010},
    }
    resp = await client.post(f"/v1/projects/{project}/claim", json=body, headers=agent)
    assert resp.status == 400, await resp.text()
    error = await resp.json()
    assert error["error"] == "invalid_request"
    assert any("repoUrl" in d["field"] for d in error["details"]), error
