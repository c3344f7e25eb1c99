"""The indexer's bulk writes keep every value exactly (repositories/indexer.py and bids.py send
numeric columns as decimal text, timestamps and the rest in binary, allowlists as JSON): what is
read back equals what was written, at the edges of each type."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import asyncpg

from marketplace.storage.read_model_rows import MilestoneRow, ProjectCreation, ProjectRow
from marketplace.storage.repositories import bids as bids_repo
from marketplace.storage.repositories import indexer as repo

MAX_UINT = 2**256 - 1  # the largest amount a contract can log; numeric(78,0) holds it
AT = datetime(2026, 3, 1, 12, 30, 45, 123456, tzinfo=timezone(timedelta(hours=5, minutes=30)))
BLOCK_TIME = datetime(2026, 3, 2, tzinfo=UTC)


def address(n: int) -> str:
    return f"0x{n:040x}"


def project(n: int, **fields: object) -> ProjectRow:
    values: dict[str, object] = {
        "project_address": address(n),
        "owner_address": address(1000 + n),
        "status": "bidding",
        "project_mode": "standard",
        "bidding_access": "open",
        "config_hash": f"0x{n:064x}",
        "selected_builder_address": None,
        "milestone_count": 2,
        "bid_bond_usdc": None,
        "challenge_payout_usdc": None,
        "challenge_submission_count": None,
        "challenge_submission_window_seconds": None,
        "challenge_owner_response_window_seconds": None,
        "challenge_submission_deadline": None,
        "challenge_owner_response_deadline": None,
        "challenge_selection_phase": False,
        "dispute_phase": None,
        "dispute_reason": None,
        "dispute_raised_by": None,
        "dispute_milestone_index": None,
        "dispute_opened_at": None,
        "dispute_verdict_submitted_at": None,
        "dispute_owner_evidence_hash": None,
        "dispute_worker_evidence_hash": None,
        "allowlist": [],
        "created_at": BLOCK_TIME,
    }
    values.update(fields)
    return ProjectRow(**values)  # type: ignore[arg-type]


def creation(row: ProjectRow, block: int) -> ProjectCreation:
    return ProjectCreation(row.project_address, row.owner_address, row.config_hash, block, 7)


async def test_projects_and_milestones_round_trip_exactly(pool: asyncpg.Pool) -> None:
    edge = project(
        1,
        project_mode="challenge",
        bidding_access="invite_only",
        selected_builder_address=address(5),
        bid_bond_usdc=MAX_UINT,
        challenge_payout_usdc=Decimal(10**30),  # a Decimal as read back from a stored row
        challenge_submission_count=2**31 - 1,
        challenge_submission_window_seconds=2**63 - 1,
        challenge_owner_response_window_seconds=0,
        challenge_submission_deadline=1,
        challenge_owner_response_deadline=2**40,
        challenge_selection_phase=True,
        dispute_milestone_index=0,
        # Not valid addresses, but the allowlist column is any text: quotes, commas, braces,
        # backslashes, non-ASCII and an empty string all come back unchanged.
        allowlist=[address(6), 'a "quoted", {braced} \\ value', "grüße ✓", ""],
        created_at=AT,
    )
    plain = project(2, bid_bond_usdc=0)
    milestones = {
        edge.project_address: [
            MilestoneRow(
                edge.project_address,
                0,
                "approved",
                MAX_UINT,
                AT,
                AT,
                AT,
                AT,
                f"0x{1:064x}",
                f"0x{2:064x}",
                True,
            ),
            MilestoneRow(
                edge.project_address, 1, "pending", None, None, None, None, None, None, None, False
            ),
        ],
        plain.project_address: [
            MilestoneRow(
                plain.project_address,
                0,
                "pending",
                0,
                AT,
                None,
                None,
                None,
                None,
                None,
                False,
            ),
        ],
    }
    snapshots = [
        (p, milestones[p.project_address], creation(p, 40 + i)) for i, p in enumerate((edge, plain))
    ]
    async with pool.acquire() as conn, conn.transaction():
        written = await repo.upsert_snapshots(conn, 31337, snapshots, block=99, block_time=AT)
        assert written == {edge.project_address, plain.project_address}
        stored_projects, stored_milestones = await repo.current_state(
            conn, [edge.project_address, plain.project_address]
        )
        extra = await conn.fetch(
            "SELECT project_address, chain_id, created_block, created_log_index, updated_at,"
            " snapshot_block FROM projects ORDER BY project_address"
        )
    for p in (edge, plain):
        stored = stored_projects[p.project_address]
        for name, value in vars(p).items():
            assert stored[name] == value, name
    assert stored_projects[edge.project_address]["created_at"] == AT
    assert [tuple(r) for r in extra] == [
        (edge.project_address, 31337, 40, 7, AT, 99),
        (plain.project_address, 31337, 41, 7, AT, 99),
    ]
    assert len(stored_milestones) == 3
    for rows in milestones.values():
        for m in rows:
            stored = stored_milestones[(m.project_address, m.milestone_index)]
            assert stored == vars(m)
    assert stored_milestones[(edge.project_address, 0)]["payout_usdc"] == Decimal(MAX_UINT)


async def test_bid_events_and_bids_round_trip_exactly(pool: asyncpg.Pool) -> None:
    row = project(3)
    async with pool.acquire() as conn:
        await repo.upsert_snapshots(
            conn, 31337, [(row, [], creation(row, 1))], block=1, block_time=AT
        )
    events = [
        bids_repo.BidEventRow(
            row.project_address,
            2,
            0,
            "posted",
            address(9),
            AT,
            f"0x{3:064x}",
            [MAX_UINT, 0, 1],
            [0, 2**63 - 1, 86400],
            MAX_UINT,
            10**6,
        ),
        bids_repo.BidEventRow(
            row.project_address,
            3,
            1,
            "cancelled",
            address(9),
            BLOCK_TIME,
            None,
            None,
            None,
            None,
            None,
        ),
    ]
    bid = bids_repo.BidRow(
        row.project_address,
        address(9),
        "active",
        f"0x{3:064x}",
        [MAX_UINT, 0],
        [1, 2],
        MAX_UINT,
        0,
        AT,
        BLOCK_TIME,
        2,
        0,
        2**40,
        2**31 - 1,
    )
    async with pool.acquire() as conn:
        await bids_repo.insert_events(conn, events)
        await bids_repo.insert_events(conn, events)  # a replay adds nothing
        await bids_repo.replace_bids(conn, [bid], [])
        assert await bids_repo.events_of(conn, [row.project_address]) == events
        assert await bids_repo.bids_of(conn, [row.project_address]) == {
            (bid.project_address, bid.bidder_address): bid
        }
        stored = await conn.fetchrow("SELECT total_payout_usdc, posted_at FROM bids")
    assert stored is not None
    assert stored["total_payout_usdc"] == Decimal(MAX_UINT)
    assert stored["posted_at"] == AT
