"""The read model folded from the logs equals the one the contract's state gives.

A devnet with projects in every status and dispute phase, both modes, and every way a project
can end (the seeder's scenarios, plus the paths it does not take: allowlist removals, the three
dispute reasons, the multisig's approval with a slash and its rejection, finalizing both dispute
phases, the challenge's cancel, selection phase, signed and unsigned fallback) is indexed from
the logs live (a sync after every step), as one backfill batch, and in one-block batches (every
batch folds onto the rows the previous one stored). Each time every column of every project and
milestone row must equal what ``snapshot.project_rows`` makes of ``getProjectState()`` and
``allowlist()`` at the indexed block, which is how the indexer built the read model before
issue 28.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import asyncpg
from web3.contract import Contract

from marketplace.chain.eip712 import sign_fallback
from marketplace.chain.rpc import JsonRpcClient
from marketplace.indexer.engine import IndexerEngine
from marketplace.storage.read_model_rows import MilestoneRow, ProjectRow
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.client import DevnetClient
from marketplace_devstack.devnet.deploy import DEV_VERIFIER_PRIVATE_KEY, Deployment
from marketplace_devstack.devnet.seed import SCENARIOS, Seeder
from tests.contracts.helpers import DAY, HOUR, USDC, Chain, DisputeReason, h
from tests.integration.indexer.conftest import engine_config
from tests.support.chain import sync

PROJECT_COLUMNS = [f.name for f in dataclasses.fields(ProjectRow)]
MILESTONE_COLUMNS = [f.name for f in dataclasses.fields(MilestoneRow)]
MULTISIG_APPROVE, MULTISIG_REJECT = 1, 2


async def stored_rows(pool: asyncpg.Pool) -> dict[str, Any]:
    """Every indexed project with its milestones, as the columns the indexer writes."""
    projects = await pool.fetch(
        f"SELECT {', '.join(PROJECT_COLUMNS)} FROM projects ORDER BY project_address"
    )
    milestones = await pool.fetch(
        f"SELECT {', '.join(MILESTONE_COLUMNS)} FROM milestones "
        "ORDER BY project_address, milestone_index"
    )
    out: dict[str, Any] = {}
    for row in projects:
        out[row["project_address"]] = {"project": dict(row), "milestones": []}
    for row in milestones:
        out[row["project_address"]]["milestones"].append(dict(row))
    return out


async def contract_rows(engine: IndexerEngine, addresses: list[str], block: int) -> dict[str, Any]:
    """The same, from the contracts' state at ``block`` (the snapshot path's rows)."""
    rows = await engine._read_snapshots(sorted(addresses), hex(block), asyncio.Semaphore(4))
    return {
        project.project_address: {
            "project": dataclasses.asdict(project),
            "milestones": [dataclasses.asdict(m) for m in milestones],
        }
        for project, milestones in rows
    }


async def assert_equals_contract_state(
    engine: IndexerEngine, pool: asyncpg.Pool, *, expected_projects: int | None = None
) -> dict[str, Any]:
    cursor = await pool.fetchrow("SELECT last_synced_block FROM indexer_cursors")
    assert cursor is not None
    stored = await stored_rows(pool)
    if expected_projects is not None:
        assert len(stored) == expected_projects
    expected = await contract_rows(engine, list(stored), cursor["last_synced_block"])
    assert stored.keys() == expected.keys()
    for address, rows in stored.items():
        want = expected[address]
        for column in PROJECT_COLUMNS:
            assert rows["project"][column] == want["project"][column], (address, column)
        assert len(rows["milestones"]) == len(want["milestones"]), address
        for got, wanted in zip(rows["milestones"], want["milestones"], strict=True):
            for column in MILESTONE_COLUMNS:
                assert got[column] == wanted[column], (address, got["milestone_index"], column)
    return stored


def building(chain: Chain, milestones: int = 2, *, invite_only: bool = False) -> Contract:
    durations = [3 * DAY] * milestones
    return chain.building(
        payouts=[(100 + 100 * i) * USDC for i in range(milestones)],
        durations=durations,
        invite_only=invite_only,
    )


def fallback(chain: Chain, project: Contract, ranked: list[str]) -> Any:
    deadline, nonce = chain.now() + HOUR, chain.nonce()
    signature = sign_fallback(
        DEV_VERIFIER_PRIVATE_KEY,
        chain_id=chain.chain_id,
        registry=chain.registry.address,
        project=project.address,
        ranked=ranked,
        ranking_hash=h("ranking"),
        deadline=deadline,
        nonce=nonce,
    )
    return project.functions.settleChallengeFallback(
        ranked, h("ranking"), deadline, nonce, chain.chain_id, signature
    )


async def history(chain: Chain, engine: IndexerEngine) -> list[str]:
    """The hand-made paths, indexed live: a sync after each step."""
    a = chain.a
    made: list[str] = []

    async def step(project: Contract) -> None:
        if project.address not in made:
            made.append(project.address)
        await sync(engine)

    # Invite-only: allowlist edits, a DeadlineMissed dispute that runs out (Challenged, 5 days):
    # the project fails with the milestone left disputed.
    late = chain.open_standard(milestones=2, invite_only=True)
    chain.ok(a.owner, late.functions.addToAllowlist([a.worker, a.bidder2, a.bidder3]))
    await step(late)
    chain.ok(a.owner, late.functions.removeFromAllowlist([a.bidder2]))
    chain.post_bid(late, a.worker, [100 * USDC, 200 * USDC], [DAY, DAY])
    chain.select(late, a.worker)
    await step(late)
    chain.submit(late, 0)
    chain.ok(a.owner, late.functions.approveMilestone(0))
    await step(late)
    deadline = chain.state(late)["milestones"][1]["deadline"]
    chain.mine_at(deadline + 1)
    chain.ok(a.owner, late.functions.raiseDispute(1, int(DisputeReason.DEADLINE_MISSED), h("r")))
    await step(late)
    chain.mine_at(chain.now() + 5 * DAY)
    chain.ok(a.stranger, late.functions.finalizeDispute())
    await step(late)

    # LowQuality, both parties' evidence, a failing verdict finalized: rejected, failed.
    rejected = building(chain)
    chain.dispute(rejected, 0, DisputeReason.LOW_QUALITY)
    chain.ok(a.owner, rejected.functions.submitDisputeEvidence(0, h("owner-evidence")))
    await step(rejected)
    chain.ok(a.worker, rejected.functions.submitDisputeEvidence(0, h("worker-evidence")))
    chain.attest(rejected, 0, passes=False)
    await step(rejected)
    chain.mine_at(chain.now() + 2 * DAY + 10)
    chain.ok(a.stranger, rejected.functions.finalizeDispute())
    await step(rejected)

    # OwnerInaction raised by the worker, approved by the multisig with a slash; then the last
    # milestone completes the project.
    slashed = building(chain)
    chain.submit(slashed, 0)
    chain.mine_at(chain.now() + 2 * DAY + 1)
    chain.ok(a.worker, slashed.functions.raiseDispute(0, int(DisputeReason.OWNER_INACTION), h("r")))
    await step(slashed)
    chain.ok(a.multisig, slashed.functions.resolveDispute(MULTISIG_APPROVE, 10 * USDC))
    await step(slashed)
    chain.submit(slashed, 1)
    chain.ok(a.owner, slashed.functions.approveMilestone(1))
    await step(slashed)

    # A passing verdict overridden by the multisig's rejection.
    overridden = building(chain, milestones=3)
    chain.dispute(overridden, 0)
    chain.attest(overridden, 0, passes=True)
    await step(overridden)
    chain.ok(a.multisig, overridden.functions.resolveDispute(MULTISIG_REJECT, 0))
    await step(overridden)

    # A passing verdict finalized (approved after the override window), project goes on.
    passed = building(chain)
    chain.dispute(passed, 0)
    chain.attest(passed, 0, passes=True)
    chain.mine_at(chain.now() + 2 * DAY + 10)
    chain.ok(a.stranger, passed.functions.finalizeDispute())
    await step(passed)

    # A dispute still in its verifier-verdict phase.
    verdict = building(chain)
    chain.dispute(verdict, 0)
    chain.attest(verdict, 0, passes=True)
    await step(verdict)

    # Challenges: cancelled; selection phase entered; fallback signed; fallback unsigned.
    cancelled = chain.create_challenge()
    chain.ok(a.worker, cancelled.functions.submitChallengeSubmission(h("c1")))
    chain.ok(a.owner, cancelled.functions.cancelBeforeSelection())
    await step(cancelled)
    selecting = chain.create_challenge(submission_window=DAY, response_window=DAY)
    signed = chain.create_challenge(submission_window=DAY, response_window=DAY)
    unsigned = chain.create_challenge(submission_window=DAY, response_window=DAY)
    for project in (selecting, signed, unsigned):
        chain.ok(a.worker, project.functions.submitChallengeSubmission(h("s1")))
        chain.ok(a.bidder2, project.functions.submitChallengeSubmission(h("s2")))
        chain.ok(a.worker, project.functions.submitChallengeSubmission(h("s1-again")))
        await step(project)
    chain.mine_at(chain.now() + DAY + 1)
    chain.ok(a.stranger, selecting.functions.enterChallengeSelectionPhase())
    await step(selecting)
    chain.mine_at(chain.now() + DAY + 1)
    chain.ok(a.stranger, fallback(chain, signed, [a.bidder2, a.worker]))
    await step(signed)
    chain.mine_at(chain.now() + 5 * DAY + 1)
    chain.ok(a.stranger, unsigned.functions.settleChallengeFallback([], h("r"), 0, 0, 0, b""))
    await step(unsigned)
    return made


async def wipe(pool: asyncpg.Pool) -> None:
    await pool.execute("DELETE FROM projects")
    await pool.execute("DELETE FROM indexer_blocks")
    await pool.execute("DELETE FROM indexer_cursors")


async def test_logs_give_the_contract_state_for_every_project_in_every_state(
    devnet: tuple[AnvilProcess, Deployment],
    engine: IndexerEngine,
    chain: Chain,
    pool: asyncpg.Pool,
) -> None:
    made = await history(chain, engine)
    live = await assert_equals_contract_state(engine, pool, expected_projects=len(made))
    statuses = {(r["project"]["project_mode"], r["project"]["status"]) for r in live.values()}
    assert ("standard", "failed") in statuses and ("challenge", "complete") in statuses

    # The seeder's scenarios (every status and dispute phase of both modes) on top, mined with
    # many transactions per block.
    with DevnetClient(devnet[0].rpc_url, devnet[1]) as client:
        seeded = Seeder(client, rng_seed=7, show_progress=False).run(2 * len(SCENARIOS), 3)
    assert not seeded.mismatches
    await sync(engine)
    total = len(made) + 2 * len(SCENARIOS)
    incremental = await assert_equals_contract_state(engine, pool, expected_projects=total)
    seen = {
        (r["project"]["project_mode"], r["project"]["status"], r["project"]["dispute_phase"])
        for r in incremental.values()
    }
    for scenario in SCENARIOS:
        mode, status = scenario.name.split("/")[0], scenario.status.name.lower()
        assert any(s[0] == mode and s[1] == status for s in seen), scenario.name
    assert ("standard", "dispute", "challenged") in seen
    assert ("standard", "dispute", "verifier_verdict") in seen

    # A backfill in one batch, and one in batches of one block, give the same rows.
    await wipe(pool)
    await sync(engine)
    assert await assert_equals_contract_state(engine, pool) == incremental
    await wipe(pool)
    rpc = JsonRpcClient(devnet[0].rpc_url)
    try:
        small = IndexerEngine(engine_config(devnet, page_blocks=1, max_pages=1), pool, rpc)
        await sync(small, max_rounds=10_000)
    finally:
        await rpc.close()
    assert await assert_equals_contract_state(engine, pool) == incremental
