"""The project read API over a read model indexed from a real devnet (issue: indexer, Done when):
invite-only visibility and pagination stability while new projects are being indexed."""

from __future__ import annotations

from typing import Any

from tests.conftest import new_user
from tests.contracts.helpers import Chain
from tests.integration.claims.conftest import link_dev_wallet


async def _all_pages(client: Any, headers: dict[str, str], limit: int, between: Any) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        query = f"?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        body = await (await client.get(f"/v1/projects{query}", headers=headers)).json()
        seen.extend(item["projectAddress"] for item in body["items"])
        cursor = body.get("nextCursor")
        if not cursor:
            return seen
        await between()


async def test_pagination_never_repeats_or_skips_while_indexing(
    app_client: Any, chain: Chain, indexer: Any
) -> None:
    client = app_client
    original = {chain.create_standard().address for _ in range(9)}
    await indexer()
    added: set[str] = set()

    async def index_more() -> None:
        added.add(chain.create_standard().address)
        await indexer()

    seen = await _all_pages(client, {}, 2, index_more)
    assert len(seen) == len(set(seen)), "a project was repeated"
    assert set(seen) == original, "a project was skipped, or a new one slipped into a later page"
    first = await (await client.get("/v1/projects?limit=100")).json()
    assert {i["projectAddress"] for i in first["items"]} == original | added
    assert first["count"] == len(original | added)


async def test_invite_only_visibility_on_chain(app_client: Any, chain: Chain, indexer: Any) -> None:
    client = app_client
    a = chain.a
    hidden = chain.create_standard(invite_only=True)
    chain.ok(a.owner, hidden.functions.addToAllowlist([a.worker]))
    public = chain.create_standard()
    await indexer()

    owner, agent, stranger = new_user(), new_user(), new_user()
    await link_dev_wallet(client, owner.headers, a.owner)
    await link_dev_wallet(client, agent.headers, a.worker)
    await link_dev_wallet(client, stranger.headers, a.stranger)

    async def view(headers: dict[str, str]) -> tuple[set[str], int, int]:
        listing = await (await client.get("/v1/projects", headers=headers)).json()
        detail = await client.get(f"/v1/projects/{hidden.address}", headers=headers)
        return {i["projectAddress"] for i in listing["items"]}, listing["count"], detail.status

    for who in (owner, agent):
        items, count, status = await view(who.headers)
        assert items == {hidden.address, public.address}
        assert count == 2
        assert status == 200
    for headers in (stranger.headers, {}):
        items, count, status = await view(headers)
        assert items == {public.address}
        assert count == 1
        assert status == 404
        milestones = await client.get(f"/v1/projects/{hidden.address}/milestones", headers=headers)
        assert milestones.status == 404

    # Removing the agent from the on-chain allowlist hides the project from it after indexing.
    chain.ok(a.owner, hidden.functions.removeFromAllowlist([a.worker]))
    await indexer()
    items, count, status = await view(agent.headers)
    assert (items, count, status) == ({public.address}, 1, 404)
