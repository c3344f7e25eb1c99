"""A shard actor's process killed during a burst of bid-draft writes: nothing acknowledged is lost,
failures are clean 503s, and the service answers again within seconds. Also the chain read of
the submission check failing cleanly."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
import ray
from eth_utils import keccak

from marketplace.actors.keyed_shard import shard_spec
from marketplace.actors.runtime import stable_shard
from marketplace.chain.rpc import JsonRpcClient
from marketplace.errors import ServiceUnavailable
from marketplace.http import keys
from marketplace.records.challenge_submissions import onchain_submission_hash
from marketplace.shards import ShardContext
from tests.api.identity.conftest import Wallet, link_wallet
from tests.conftest import User, new_user
from tests.contracts.helpers import Chain
from tests.integration.records.conftest import SHARDS

VICTIM = 0
PROJECTS = 8
BIDDERS = 20


def project_on_shard(index: int) -> str:
    while True:
        address = "0x" + os.urandom(20).hex()
        if stable_shard(address, SHARDS) == index:
            return address


async def seed_bidding_project(pool: asyncpg.Pool, address: str, position: int) -> None:
    now = datetime.now(UTC)
    await pool.execute(
        """
        INSERT INTO projects (project_address, chain_id, owner_address, status, project_mode,
            bidding_access, config_hash, milestone_count, created_block, created_log_index,
            created_at, updated_at, snapshot_block)
        VALUES ($1, 31337, $2, 'bidding', 'standard', 'open', $3, 1, $4, 0, $5, $5, $4)
        """,
        address,
        "0x" + os.urandom(20).hex(),
        "0x" + os.urandom(32).hex(),
        50_000 + position,
        now,
    )


def draft_hash(bidder: str, project: str) -> str:
    return "0x" + keccak(text=f"{bidder.lower()}:{project}").hex()


async def test_killed_shard_loses_no_acknowledged_write(client: Any, pool: asyncpg.Pool) -> None:
    projects = [project_on_shard(VICTIM) for _ in range(PROJECTS)]
    for position, address in enumerate(projects):
        await seed_bidding_project(pool, address, position)
    bidders: list[tuple[User, Wallet]] = []
    for _ in range(BIDDERS):
        user, wallet = new_user(), Wallet()
        await link_wallet(client, user.headers, wallet)
        bidders.append((user, wallet))
    shards = client.app[keys.PROJECT_SHARDS]
    pid_before = (await shards.ping(projects[0])).pid
    victim = ray.get_actor(
        shard_spec(VICTIM).name, namespace=client.app[keys.SETTINGS].ray_namespace
    )

    async def write(delay: float, user: User, wallet: Wallet, project: str) -> Any:
        await asyncio.sleep(delay)
        resp = await client.post(
            f"/v1/projects/{project}/bid-drafts",
            json={
                "bidderWalletAddress": wallet.address,
                "draftHash": draft_hash(wallet.address, project),
            },
            headers=user.headers,
        )
        body = await resp.json()
        return resp.status, body, resp.headers.get("Retry-After"), wallet.address.lower(), project

    # 160 distinct drafts spread over ~0.8 s; the shard dies a quarter of the way in.
    jobs = [(user, wallet, project) for user, wallet in bidders for project in projects]
    tasks = [asyncio.create_task(write(i * 0.005, *job)) for i, job in enumerate(jobs)]
    await asyncio.sleep(0.2)
    ray.kill(victim, no_restart=False)
    results = await asyncio.gather(*tasks)

    stored = {
        (r["bidder_address"], r["project_address"]): r["draft_hash"]
        for r in await pool.fetch(
            "SELECT bidder_address, project_address, draft_hash FROM bid_drafts"
        )
    }
    acknowledged = [r for r in results if r[0] == 200]
    failed = [r for r in results if r[0] != 200]
    assert acknowledged, "nothing succeeded before the kill"
    for _status, body, _retry, bidder, project in acknowledged:
        assert stored.get((bidder, project)) == draft_hash(bidder, project) == body["draftHash"]
    for status, body, retry_after, _bidder, _project in failed:
        assert status == 503, body
        assert body["error"] == "service_unavailable" and body["message"]
        assert retry_after is not None and int(retry_after) >= 1
    # Only drafts that were written are stored (a 503 may still have committed before the kill).
    assert set(stored) <= {(b, p) for _s, _b, _r, b, p in results}

    # The service answers again within seconds, from a new shard process.
    started = time.monotonic()
    user, wallet = bidders[0]
    while True:
        status, body, *_ = await write(0, user, wallet, projects[0])
        if status == 200:
            break
        assert status == 503, body
        assert time.monotonic() - started < 10, "no answer 10 s after the kill"
        await asyncio.sleep(0.1)
    assert (await shards.ping(projects[0])).pid != pid_before


async def test_submission_check_fails_cleanly_without_a_usable_chain(
    pool: asyncpg.Pool, chain: Chain, chain_settings: Any
) -> None:
    submitter = chain.a.submitter
    ctx = ShardContext(pool, chain_settings, None, 0)
    with pytest.raises(ServiceUnavailable, match="no chain is configured"):
        await onchain_submission_hash(ctx, chain.registry.address, submitter)
    dead = JsonRpcClient("http://127.0.0.1:9")
    try:
        ctx = ShardContext(pool, chain_settings, dead, 0)
        with pytest.raises(ServiceUnavailable, match="did not answer") as refused:
            await onchain_submission_hash(ctx, chain.registry.address, submitter)
        # The node's address is internal: the client-facing message does not name it.
        assert "127.0.0.1" not in refused.value.message and ":9" not in refused.value.message
    finally:
        await dead.close()
    live = JsonRpcClient(chain_settings.chain_rpc_url)
    try:
        ctx = ShardContext(pool, chain_settings, live, 0)
        # An address without code answers "0x": no usable answer, not "no submission".
        with pytest.raises(ServiceUnavailable, match="no usable answer"):
            await onchain_submission_hash(ctx, "0x" + "12" * 20, submitter)
        project = chain.create_challenge()
        assert await onchain_submission_hash(ctx, project.address, submitter) == "0x" + "0" * 64
    finally:
        await live.close()
