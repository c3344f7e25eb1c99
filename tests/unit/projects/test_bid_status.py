"""The on-chain bid status rule (marketplace/projects/bids.py, docs/read-models.md "Bids"):
the fold of a project's bid logs, its diff and the change fields of `project.changed`."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from marketplace.projects.bids import bid_changes, diff_bids, fold_bids
from marketplace.storage.repositories.bids import BidEventRow

P1, P2 = "0x" + "11" * 20, "0x" + "22" * 20
A, B, C = "0x" + "aa" * 20, "0x" + "bb" * 20, "0x" + "cc" * 20
T0 = datetime(2026, 1, 1, tzinfo=UTC)
_positions = itertools.count(1)


def log(project: str, kind: str, bidder: str, **values: object) -> BidEventRow:
    n = next(_positions)
    bid = kind in ("posted", "updated", "selected")
    fields: dict[str, object] = {
        "project_address": project,
        "block_number": n,
        "log_index": 0,
        "kind": kind,
        "bidder_address": bidder,
        "block_time": T0 + timedelta(minutes=n),
        "bid_hash": "0x" + f"{n:064x}" if bid else None,
        "payouts": [1_500_000, 2_000_000] if bid else None,
        "durations_seconds": [60, 120] if kind != "selected" and bid else None,
        "total_payout": 3_500_000 if bid else None,
        "amount": 50_000_000 if kind in ("posted", "cancelled", "bond_reclaimed") else None,
    }
    fields.update(values)
    return BidEventRow(**fields)  # type: ignore[arg-type]


def statuses(events: list[BidEventRow]) -> dict[tuple[str, str], str]:
    return {key: row.status for key, row in fold_bids(events).items()}


def test_selection_flips_only_the_active_bids_of_its_project() -> None:
    events = [
        log(P1, "posted", A),
        log(P1, "posted", B),
        log(P1, "posted", C),
        log(P1, "cancelled", C),
        log(P2, "posted", B),
        log(P1, "selected", A),
    ]
    assert statuses(events) == {
        (P1, A): "selected",
        (P1, B): "not_selected",
        (P1, C): "cancelled",
        (P2, B): "active",
    }
    bids = fold_bids(events)
    assert bids[(P1, B)].updated_at == events[-1].block_time
    assert bids[(P1, C)].updated_at == events[3].block_time
    # The selected bid keeps its durations (BidSelected logs deadlines, not durations).
    assert bids[(P1, A)].durations_seconds == [60, 120]
    assert bids[(P1, A)].payouts_usdc == [1, 2]  # whole tokens, rounded down
    assert bids[(P1, A)].total_payout_usdc == 3
    assert bids[(P1, A)].bond_usdc == 50


def test_reclaim_after_not_selected_and_a_repost_keeps_its_place() -> None:
    first = log(P1, "posted", A)
    events = [first, log(P1, "cancelled", A), log(P1, "posted", A, payouts=[9_000_000] * 2)]
    bid = fold_bids(events)[(P1, A)]
    assert bid.status == "active"
    assert (bid.first_block, bid.first_log_index) == (first.block_number, 0)
    assert bid.posted_at == events[-1].block_time
    assert bid.payouts_usdc == [9, 9]
    events += [log(P1, "posted", B), log(P1, "selected", B), log(P1, "bond_reclaimed", A)]
    assert statuses(events) == {(P1, A): "bond_reclaimed", (P1, B): "selected"}


def test_an_update_changes_the_bid_not_the_status_or_posted_at() -> None:
    posted = log(P1, "posted", A)
    updated = log(P1, "updated", A, payouts=[7_000_000, 1_000_000], durations_seconds=[5, 6])
    bid = fold_bids([posted, updated])[(P1, A)]
    assert bid.status == "active"
    assert bid.posted_at == posted.block_time
    assert bid.updated_at == updated.block_time
    assert (bid.payouts_usdc, bid.durations_seconds, bid.bid_hash) == (
        [7, 1],
        [5, 6],
        updated.bid_hash,
    )
    assert (bid.last_block, bid.last_log_index) == (updated.block_number, 0)


def test_logs_of_a_bidder_without_a_bid_change_nothing() -> None:
    assert fold_bids([log(P1, "cancelled", A), log(P1, "bond_reclaimed", B)]) == {}


def test_diff_and_change_fields() -> None:
    events = [log(P1, "posted", A), log(P1, "posted", B), log(P1, "cancelled", B)]
    before, after = fold_bids(events[:2]), fold_bids(events)
    upserts, deletions = diff_bids(before, after)
    assert [row.bidder_address for row in upserts] == [B]
    assert deletions == []
    changes = bid_changes(before[(P1, B)], after[(P1, B)])
    assert changes == {
        "status": "cancelled",
        "updatedAt": after[(P1, B)].updated_at.isoformat(),
    }
    new = bid_changes(None, after[(P1, A)])
    assert new["payoutsUSDC"] == ["1", "2"]
    assert new["durationsSeconds"] == [60, 120]
    assert new["totalPayoutUSDC"] == "3"
    assert new["bondUSDC"] == "50"
    assert new["status"] == "active"
    assert bid_changes(after[(P1, A)], None) == {"status": None}
    _, gone = diff_bids(after, {})
    assert gone == [(P1, A), (P1, B)]
