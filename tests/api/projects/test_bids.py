"""`GET /v1/projects/{projectAddress}/bids` against a real anvil (issue 27): bids posted,
updated, cancelled, selected and reclaimed on chain, indexed by the IndexerEngine (driven by the
tests), answered by the app; the project read visibility (invite-only: insiders only, 404 for a
stranger and the anonymous caller); pagination; the OpenAPI entry; and a direct message between
the owner and an on-chain bidder once its bid is indexed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from eth_utils import to_checksum_address
from web3.contract import Contract

from marketplace.chain.rpc import JsonRpcClient
from marketplace.config import Settings
from marketplace.indexer.engine import IndexerEngine
from marketplace.projects.bids import BidListResponse
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import Deployment
from tests.conftest import Servers
from tests.contracts.helpers import DAY, USDC, Chain, h
from tests.integration.records.conftest import ChainParty, link_dev_account
from tests.support.apps import app_client
from tests.support.chain import chain_settings, indexer_config, reverting_chain, start_devnet
from tests.support.chain import sync as sync_engine
from tests.support.db import open_pool

Devnet = tuple[AnvilProcess, Deployment]


@pytest.fixture(scope="module")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Devnet]:
    with start_devnet(tmp_path_factory.mktemp("bids-anvil"), silent=True) as started:
        yield started


@pytest.fixture
def chain(devnet: Devnet) -> Iterator[Chain]:
    with reverting_chain(devnet[0].rpc_url, devnet[1]) as driver:
        yield driver


@pytest.fixture
def settings(servers: Servers, devnet: Devnet, module_namespace: str) -> Settings:
    # Actors of a namespace of this module's own: named actors keep the settings (this
    # module's anvil) they were created with.
    return chain_settings(servers, devnet[0], devnet[1], module_namespace)


@pytest.fixture
async def client(aiohttp_client: Any, settings: Settings, clean_state: None, chain: Chain) -> Any:
    # Built after the chain's snapshot, so the app stops before the chain reverts.
    return await app_client(aiohttp_client, settings)


@pytest.fixture
async def pool(servers: Servers, client: Any) -> AsyncIterator[asyncpg.Pool]:
    async with open_pool(servers, max_size=4, reset=False) as pool:
        yield pool


@pytest.fixture
async def engine(devnet: Devnet, pool: asyncpg.Pool) -> AsyncIterator[IndexerEngine]:
    rpc = JsonRpcClient(devnet[0].rpc_url)
    yield IndexerEngine(indexer_config(devnet[0], devnet[1]), pool, rpc)
    await rpc.close()


def bids_path(project: Contract | str, query: str = "") -> str:
    address = project if isinstance(project, str) else project.address
    return f"/v1/projects/{address}/bids{query}"


async def read_bids(
    client: Any, project: Contract | str, party: ChainParty | None = None, query: str = ""
) -> dict[str, Any]:
    resp = await client.get(bids_path(project, query), headers=party.headers if party else {})
    body: dict[str, Any] = await resp.json()
    assert resp.status == 200, body
    # Exactly what the model accepts and re-emits (no optional fields: nothing is omitted).
    assert json.loads(BidListResponse.model_validate(body).model_dump_json()) == body
    return body


async def assert_hidden(client: Any, project: str, party: ChainParty | None) -> None:
    resp = await client.get(bids_path(project), headers=party.headers if party else {})
    body = await resp.json()
    assert resp.status == 404, body
    assert body["error"] == "not_found"
    unknown = await client.get(bids_path("0x" + "ab" * 20), headers=party.headers if party else {})
    assert await unknown.json() == body  # hidden answers exactly like unknown


def block_time(chain: Chain, receipt: Any) -> str:
    block = chain.w3.eth.get_block(receipt["blockNumber"])
    return datetime.fromtimestamp(int(block["timestamp"]), UTC).isoformat().replace("+00:00", "Z")


def iso(value: str) -> str:
    return datetime.fromisoformat(value).astimezone(UTC).isoformat().replace("+00:00", "Z")


async def test_the_bid_lifecycle_through_the_api(
    client: Any, chain: Chain, engine: IndexerEngine
) -> None:
    a = chain.a
    project = chain.open_standard(milestones=2, bid_bond=50 * USDC)
    await assert_hidden(client, project.address, None)  # not indexed yet
    await sync_engine(engine)
    body = await read_bids(client, project)
    assert body == {
        "projectAddress": project.address,
        "items": [],
        "count": 0,
        "nextCursor": None,
    }
    posted = chain.post_bid(
        project, a.worker, [300 * USDC, 700 * USDC], [3 * DAY, 5 * DAY], h("w1")
    )
    chain.post_bid(project, a.bidder2, [100 * USDC, 150 * USDC], [DAY, DAY], h("b2"))
    await sync_engine(engine)
    body = await read_bids(client, project)
    assert body["projectAddress"] == project.address
    assert body["count"] == 2
    assert body["nextCursor"] is None
    first, second = body["items"]
    assert first == {
        "bidderAddress": a.worker,
        "bidHash": "0x" + h("w1").hex(),
        "payoutsUSDC": ["300", "700"],
        "durationsSeconds": [3 * DAY, 5 * DAY],
        "totalPayoutUSDC": "1000",
        "bondUSDC": "50",
        "status": "active",
        "postedAt": first["postedAt"],
        "updatedAt": first["postedAt"],
    }
    assert iso(first["postedAt"]) == block_time(chain, posted)
    assert second["bidderAddress"] == a.bidder2
    assert second["bidderAddress"] == to_checksum_address(a.bidder2.lower())

    updated = chain.ok(
        a.bidder2,
        project.functions.updateBid([120 * USDC, 130 * USDC], [2 * DAY, DAY], h("b2v2")),
        at=chain.now() + 600,
    )
    chain.post_bid(project, a.bidder3, [10 * USDC, 10 * USDC], [DAY, DAY])
    chain.ok(a.bidder3, project.functions.cancelBid())
    await sync_engine(engine)
    items = {i["bidderAddress"]: i for i in (await read_bids(client, project))["items"]}
    assert items[a.bidder2]["payoutsUSDC"] == ["120", "130"]
    assert items[a.bidder2]["totalPayoutUSDC"] == "250"
    assert items[a.bidder2]["bidHash"] == "0x" + h("b2v2").hex()
    assert iso(items[a.bidder2]["updatedAt"]) == block_time(chain, updated)
    assert items[a.bidder2]["postedAt"] < items[a.bidder2]["updatedAt"]
    assert items[a.bidder3]["status"] == "cancelled"

    chain.select(project, a.worker)
    await sync_engine(engine)
    body = await read_bids(client, project)
    assert [(i["bidderAddress"], i["status"]) for i in body["items"]] == [
        (a.worker, "selected"),
        (a.bidder2, "not_selected"),
        (a.bidder3, "cancelled"),
    ]
    chain.ok(a.bidder2, project.functions.reclaimBond())
    await sync_engine(engine)
    statuses = {
        i["bidderAddress"]: i["status"] for i in (await read_bids(client, project))["items"]
    }
    assert statuses == {a.worker: "selected", a.bidder2: "bond_reclaimed", a.bidder3: "cancelled"}


async def test_pages_in_first_bid_order(client: Any, chain: Chain, engine: IndexerEngine) -> None:
    a = chain.a
    project = chain.open_standard(milestones=1)
    for bidder in (a.worker, a.bidder2, a.bidder3):
        chain.post_bid(project, bidder, [100 * USDC], [DAY])
    await sync_engine(engine)
    page = await read_bids(client, project, query="?limit=2")
    assert [i["bidderAddress"] for i in page["items"]] == [a.worker, a.bidder2]
    assert page["count"] == 3
    assert page["nextCursor"]
    # A bidder who cancels and bids again keeps its place; a new bidder joins the end.
    chain.ok(a.worker, project.functions.cancelBid())
    chain.post_bid(project, a.worker, [90 * USDC], [DAY])
    chain.post_bid(project, a.submitter, [80 * USDC], [DAY])
    await sync_engine(engine)
    rest = await read_bids(client, project, query=f"?limit=2&cursor={page['nextCursor']}")
    assert [i["bidderAddress"] for i in rest["items"]] == [a.bidder3, a.submitter]
    assert rest["count"] == 4
    assert rest["nextCursor"] is None
    everything = await read_bids(client, project, query="?limit=100")
    assert [i["bidderAddress"] for i in everything["items"]] == [
        a.worker,
        a.bidder2,
        a.bidder3,
        a.submitter,
    ]
    for query, field in (
        ("?cursor=bm9wZQ", "cursor"),
        ("?limit=0", "limit"),
        ("?limit=101", "limit"),
    ):
        resp = await client.get(bids_path(project, query))
        body = await resp.json()
        assert resp.status == 400, body
        assert body["error"] == "invalid_request"
        assert body["details"][0]["field"] == field
    resp = await client.get("/v1/projects/not-an-address/bids")
    assert resp.status == 400
    assert (await resp.json())["error"] == "invalid_request"


async def test_invite_only_bids_are_for_insiders(
    client: Any, chain: Chain, engine: IndexerEngine
) -> None:
    a = chain.a
    project = chain.create_standard(milestones=1, invite_only=True)
    chain.ok(a.owner, project.functions.addToAllowlist([a.worker, a.bidder2]))
    chain.ok(a.owner, project.functions.openBidding())
    chain.post_bid(project, a.worker, [100 * USDC], [DAY])
    chain.post_bid(project, a.bidder2, [100 * USDC], [DAY])
    await sync_engine(engine)
    owner = await link_dev_account(client, a.owner)
    worker = await link_dev_account(client, a.worker)
    bidder2 = await link_dev_account(client, a.bidder2)
    stranger = await link_dev_account(client, a.stranger)
    for insider in (owner, worker, bidder2):
        assert (await read_bids(client, project, insider))["count"] == 2
    await assert_hidden(client, project.address, stranger)
    await assert_hidden(client, project.address, None)
    # Off the allowlist: hidden again, unless selected (the selected worker stays an insider).
    chain.select(project, a.worker)
    chain.ok(a.owner, project.functions.removeFromAllowlist([a.worker, a.bidder2]))
    await sync_engine(engine)
    body = await read_bids(client, project, worker)
    assert [i["status"] for i in body["items"]] == ["selected", "not_selected"]
    assert (await read_bids(client, project, owner))["count"] == 2
    await assert_hidden(client, project.address, bidder2)
    await assert_hidden(client, project.address, stranger)
    await assert_hidden(client, project.address, None)
    # An open project's bids are for everyone.
    open_project = chain.open_standard(milestones=1)
    chain.post_bid(open_project, a.bidder3, [100 * USDC], [DAY])
    await sync_engine(engine)
    for caller in (None, stranger, owner):
        assert (await read_bids(client, open_project, caller))["count"] == 1


async def test_dm_between_owner_and_an_onchain_bidder(
    client: Any, chain: Chain, engine: IndexerEngine
) -> None:
    a = chain.a
    project = chain.open_standard(milestones=1)
    owner = await link_dev_account(client, a.owner)
    bidder = await link_dev_account(client, a.bidder2)
    stranger = await link_dev_account(client, a.stranger)
    await sync_engine(engine)

    async def send(sender: ChainParty, recipient: ChainParty) -> Any:
        return await client.post(
            "/v1/messages/dm",
            json={"recipientUserId": str(recipient.user.user_id), "body": "about your bid"},
            headers=sender.headers,
        )

    resp = await send(owner, bidder)
    assert resp.status == 403
    assert (await resp.json())["error"] == "no_shared_project"
    # On chain only, no bid draft: a shared project once the indexer has the bid.
    chain.post_bid(project, a.bidder2, [100 * USDC], [DAY])
    await sync_engine(engine)
    resp = await send(owner, bidder)
    assert resp.status == 201, await resp.text()
    resp = await send(bidder, owner)
    assert resp.status == 201, await resp.text()
    for sender, recipient in ((stranger, owner), (owner, stranger), (stranger, bidder)):
        resp = await send(sender, recipient)
        assert resp.status == 403
        assert (await resp.json())["error"] == "no_shared_project"


async def test_the_route_in_the_openapi_document(client: Any) -> None:
    doc = await (await client.get("/v1/openapi.json")).json()
    operation = doc["paths"]["/v1/projects/{projectAddress}/bids"]["get"]
    assert operation["operationId"] == "listProjectBids"
    params = {p["name"]: p["in"] for p in operation["parameters"]}
    assert params == {"projectAddress": "path", "limit": "query", "cursor": "query"}
    assert {"200", "400", "404"} <= set(operation["responses"])
    assert {"", "sessionBearer", "agentApiKey"} == {
        next(iter(s), "") for s in operation["security"]
    }
    schemas = doc["components"]["schemas"]
    assert set(schemas["BidListResponse"]["required"]) == {
        "projectAddress",
        "items",
        "count",
        "nextCursor",
    }
    bid = schemas["BidReadModel"]
    assert set(bid["required"]) == {
        "bidderAddress",
        "bidHash",
        "payoutsUSDC",
        "durationsSeconds",
        "totalPayoutUSDC",
        "bondUSDC",
        "status",
        "postedAt",
        "updatedAt",
    }
    assert bid["properties"]["status"]["enum"] == [
        "active",
        "cancelled",
        "selected",
        "not_selected",
        "bond_reclaimed",
    ]
