"""The users, projects and requests of the multi-node tests, over HTTP to real frontends.

Wallets are linked through the API with real signatures; projects are rows of the read model
(as in tests/api/records), one per project shard so every shard gets writes. Verifier jobs judge
real disputes instead: projects disputed on the devnet and indexed by the cluster's indexer.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import asyncpg

from marketplace.actors.runtime import stable_shard
from marketplace.chain.hashes import intent_config_hash
from tests.api.identity.conftest import Wallet, link_wallet
from tests.api.projects import seed
from tests.api.records.conftest import Party, random_address, seed_project
from tests.conftest import User, make_token, new_user
from tests.contracts.helpers import USDC, Chain
from tests.integration.claims.conftest import accept_all_legal, link_dev_wallet
from tests.support.disputes import disputed_project, set_policies
from tests.support.waiting import eventually

_serial = itertools.count(1)
JOBS = "/v1/verifier/jobs"


def unique_body(what: str) -> str:
    # Distinct bodies: the moderation screen treats repeats of one text as flooding.
    return f"{what} {next(_serial)} {uuid.uuid4().hex[:12]}"


# The shipped term list's test entry (marketplace/wordfilter/terms.py): a body with it is
# refused with 422 and records an offense on the sender's user shard.
OFFENSIVE = "check badword-canary please"


async def linked(session: aiohttp.ClientSession, user: User | None = None) -> Party:
    user, wallet = user or new_user(), Wallet()
    await link_wallet(session, user.headers, wallet)
    return Party(user, wallet)


def user_on_shard(index: int, count: int) -> User:
    """A user whose id hashes to user shard ``index`` of ``count``."""
    while True:
        user_id = uuid.uuid4()
        if stable_shard(str(user_id), count) == index:
            return User(user_id, make_token(user_id))


def addresses_per_shard(count: int) -> list[str]:
    """One fresh project address owned by each of ``count`` shards (index i -> shard i)."""
    found: dict[int, str] = {}
    while len(found) < count:
        address = random_address()
        found.setdefault(stable_shard(address, count), address)
    return [found[i] for i in range(count)]


@dataclass
class World:
    owner: Party
    worker: Party
    bidders: list[Party]
    # Shard index -> a project in `building` (owner, worker selected) and one in `bidding`.
    building: list[str]
    bidding: list[str]
    # User shard index -> a user on it, owner of its own `building` project (offenses are
    # recorded on the sender's user shard).
    offenders: list[Party]
    offender_projects: list[str]


async def make_world(
    session: aiohttp.ClientSession,
    db: asyncpg.Connection,
    shards: int,
    user_shards: int,
    bidders: int,
) -> World:
    owner, worker = await linked(session), await linked(session)
    bidding_parties = [await linked(session) for _ in range(bidders)]
    building = [
        await seed_project(
            db,
            project_address=address,
            owner_address=owner.lower,
            selected_builder_address=worker.lower,
            status="building",
        )
        for address in addresses_per_shard(shards)
    ]
    bidding = [
        await seed_project(db, project_address=address, owner_address=owner.lower)
        for address in addresses_per_shard(shards)
    ]
    offenders = [await linked(session, user_on_shard(i, user_shards)) for i in range(user_shards)]
    offender_projects = [
        await seed_project(
            db,
            owner_address=o.lower,
            selected_builder_address=worker.lower,
            status="building",
        )
        for o in offenders
    ]
    return World(owner, worker, bidding_parties, building, bidding, offenders, offender_projects)


async def post_chat(
    session: aiohttp.ClientSession,
    party: Party,
    project: str,
    body: str,
    *,
    idempotency_key: str | None = None,
) -> aiohttp.ClientResponse:
    """A chat send; a caller that retries it (:func:`answered`) passes one ``idempotency_key``
    for all its tries, as a client should: a 503 may follow a shard call that committed after
    the call timeout, and only the key makes the retry answer that message rather than store a
    second one."""
    headers = {**party.headers, "x-user-wallet-address": party.address}
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    return await session.post(
        f"/v1/projects/{project}/chat/messages",
        json={"senderWalletAddress": party.address, "body": body},
        headers=headers,
    )


async def post_dm(
    session: aiohttp.ClientSession, sender: Party, recipient: Party, body: str
) -> aiohttp.ClientResponse:
    return await session.post(
        "/v1/messages/dm",
        json={"recipientUserId": str(recipient.user.user_id), "body": body},
        headers=sender.headers,
    )


async def post_draft(
    session: aiohttp.ClientSession, bidder: Party, project: str, draft_hash: str
) -> aiohttp.ClientResponse:
    return await session.post(
        f"/v1/projects/{project}/bid-drafts",
        json={"bidderWalletAddress": bidder.address, "draftHash": draft_hash},
        headers=bidder.headers,
    )


async def post_job(
    session: aiohttp.ClientSession, party: Party | User, project: str, ref: str, chain_id: int
) -> aiohttp.ClientResponse:
    return await session.post(
        JOBS,
        json={
            "projectAddress": project,
            "milestoneIndex": 0,
            "checkPolicyId": "address-smoke",
            "deliveryRef": ref,
            "chainId": chain_id,
        },
        headers=party.headers,
    )


async def json_of(resp: aiohttp.ClientResponse, status: int) -> dict[str, Any]:
    async with resp:
        text = await resp.text()
        assert resp.status == status, f"{resp.method} {resp.url}: {resp.status} {text}"
        body: dict[str, Any] = await resp.json()
        return body


async def answered(
    request: Callable[[], Awaitable[aiohttp.ClientResponse]], status: int, limit_s: float = 30.0
) -> dict[str, Any]:
    """:func:`json_of` for a request sent again after each 503 (which must carry Retry-After):
    a shard started on first use may take longer than a call's timeout to come up."""
    deadline = time.monotonic() + limit_s
    while True:
        resp = await request()
        if resp.status != 503 or time.monotonic() > deadline:
            return await json_of(resp, status)
        async with resp:
            assert resp.headers.get("Retry-After"), await resp.text()
        await asyncio.sleep(0.5)


@dataclass
class Outcome:
    """One request of the workload: what it was, where it went, what it answered."""

    what: str
    frontend: str
    status: int
    at: float
    expected: int
    retry_after: str | None = None
    body: dict[str, Any] | None = None
    error: str = ""


@dataclass
class Recorder:
    outcomes: list[Outcome] = field(default_factory=list)

    async def send(
        self,
        what: str,
        frontend: str,
        request: Awaitable[aiohttp.ClientResponse],
        expected: int = 200,
    ) -> Outcome:
        try:
            resp = await request
        except (aiohttp.ClientError, TimeoutError) as exc:
            outcome = Outcome(what, frontend, 0, time.monotonic(), expected, error=repr(exc))
        else:
            async with resp:
                body: dict[str, Any] | None = None
                if resp.content_type == "application/json":
                    body = await resp.json()
                outcome = Outcome(
                    what,
                    frontend,
                    resp.status,
                    time.monotonic(),
                    expected,
                    resp.headers.get("Retry-After"),
                    body,
                )
        self.outcomes.append(outcome)
        return outcome

    def failures(self) -> list[Outcome]:
        """Answers no client may get from a deployment that loses a node: anything but the
        expected answer and 503-with-Retry-After (a 500, a 503 without Retry-After, a dropped
        connection)."""
        return [
            o
            for o in self.outcomes
            if not (o.status == o.expected or (o.status == 503 and o.retry_after))
        ]

    def acknowledged(self, what: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.what == what and o.status == o.expected]


async def disputed_for_jobs(
    chain: Chain, db: asyncpg.Connection, count: int, delivery_ref: str, limit_s: float = 60.0
) -> list[str]:
    """``count`` projects (lower-case addresses) whose milestone 0 ``chain.a.worker`` submitted
    with ``delivery_ref`` and the owner disputed, each for one verifier job (one verdict per
    dispute). Once the cluster's indexer has them in dispute, their claimed metadata (seeded,
    owned by the indexed owner: the devnet owner account, which :func:`claimant` links) fixes
    `address-smoke` as milestone 0's acceptance policy."""

    def create() -> list[str]:
        return [str(disputed_project(chain, delivery_ref).address).lower() for _ in range(count)]

    # web3 blocks: off the loop, so a workload running meanwhile is not held up.
    projects = await asyncio.to_thread(create)

    async def indexed() -> bool:
        found = await db.fetchval(
            "SELECT count(*) FROM projects WHERE project_address = ANY($1) AND status = 'dispute'",
            projects,
        )
        return int(found) == count

    await eventually(
        indexed,
        within=limit_s,
        interval=0.2,
        what=f"the indexer to have the {count} disputed projects",
    )
    for project in projects:
        await seed.metadata(db, project, chain.a.owner.lower())
        await set_policies(db, project, [(0, "address-smoke")])
    return projects


# Project claims (docs/claims.md): an intent taken through a frontend, the project created on
# the devnet with the intent's configHash, then the claim through a frontend (its shard decides).
CLAIM_META = {
    "title": "Multi-node bridge",
    "description": "claimed while a node comes and goes",
    "repoUrl": "https://example.com/bridge",
    "projectMode": "standard",
    "biddingAccess": "open",
}


@dataclass(frozen=True)
class PreparedClaim:
    project: str
    body: dict[str, Any]


async def claimant(session: aiohttp.ClientSession, chain: Chain) -> User:
    """A user with the devnet owner account linked and the legal documents accepted."""
    user = new_user()
    await link_dev_wallet(session, user.headers, chain.a.owner)
    await accept_all_legal(session, user.headers)
    return user


async def prepare_claim(session: aiohttp.ClientSession, chain: Chain, user: User) -> PreparedClaim:
    intent = await json_of(
        await session.post("/v1/projects/create-intents", json={}, headers=user.headers), 201
    )
    config_hash = intent_config_hash(
        CLAIM_META["title"],
        CLAIM_META["description"],
        CLAIM_META["repoUrl"],
        CLAIM_META["projectMode"],
        CLAIM_META["biddingAccess"],
        user_id=user.user_id,
        intent_id=uuid.UUID(intent["intentId"]),
        intent_nonce=intent["intentNonce"],
    )

    def create() -> tuple[str, str]:
        fn = chain.registry.functions.createProject(
            bytes.fromhex(config_hash[2:]), False, 10 * USDC, 2
        )
        receipt = chain.send(chain.a.owner, fn)
        assert receipt["status"] == 1
        return str(chain.created_project(receipt).address), receipt["transactionHash"].to_0x_hex()

    # web3 blocks: off the loop, so a workload running meanwhile is not held up.
    project, tx_hash = await asyncio.to_thread(create)
    body = {
        "mode": "intent",
        "hashVersion": "v1_intent",
        "intentId": intent["intentId"],
        "intentNonce": intent["intentNonce"],
        "txHash": tx_hash,
        "metadata": CLAIM_META,
    }
    return PreparedClaim(project, body)


async def post_claim(
    session: aiohttp.ClientSession, user: User, claim: PreparedClaim
) -> aiohttp.ClientResponse:
    return await session.post(
        f"/v1/projects/{claim.project}/claim", json=claim.body, headers=user.headers
    )
