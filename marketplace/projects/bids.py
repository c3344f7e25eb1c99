"""On-chain bids (docs/read-models.md, "Bids (on-chain)"): the API shapes, the status rule
and the row mapping.

The indexer stores every bid log it decodes (``bid_events``) and keeps ``bids`` equal to
:func:`fold_bids` of a project's logs, in chain order. The statuses:

| log | the bidder's row | other rows of the project |
|---|---|---|
| ``BidPosted`` | ``active``, the logged bid, bond and ``postedAt`` (a repost keeps its place) | - |
| ``BidUpdated`` | the logged bid; still ``active`` | - |
| ``BidCancelled`` | ``cancelled`` (bond refunded) | - |
| ``BidSelected`` | ``selected`` | every ``active`` one becomes ``not_selected`` |
| ``BondReclaimed`` | ``bond_reclaimed`` (a ``not_selected`` bidder took its bond back) | - |

Every log moves ``updatedAt`` of the rows it changes to its block's time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Literal, cast

from pydantic import ConfigDict, Field, JsonValue

from marketplace.pagination import BIGINT_MAX, INTEGER_MAX, CursorKind
from marketplace.projects.models import LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX, Cursor
from marketplace.storage.repositories.bids import BidEventRow, BidPageRow, BidRow
from marketplace.types import Address, Bytes32, QueryModel, ResponseModel, Usdc, checksum_address

BidStatus = Literal["active", "cancelled", "selected", "not_selected", "bond_reclaimed"]
USDC_UNIT = 10**6  # base units per whole token
# Keyset position: where the bidder's first BidPosted was logged (block, log index).
BID_LIST_CURSOR = CursorKind("b1", (BIGINT_MAX, INTEGER_MAX))


class BidReadModel(ResponseModel):
    """One bidder's current on-chain bid on a project."""

    bidderAddress: Address
    bidHash: Bytes32
    payoutsUSDC: list[Usdc] = Field(description="payout per milestone, whole-token USDC")
    durationsSeconds: list[int] = Field(description="duration per milestone, in seconds")
    totalPayoutUSDC: Usdc
    bondUSDC: Usdc = Field(
        description="the bond posted with the bid; escrow holds it while the status is active "
        "or not_selected, and the selected worker's until the project ends"
    )
    status: BidStatus
    postedAt: datetime = Field(description="block time of the latest BidPosted")
    updatedAt: datetime = Field(description="block time of the latest change")


class BidListResponse(ResponseModel):
    """A page of a project's bids, in first-bid order."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    projectAddress: Address
    items: list[BidReadModel]
    count: int = Field(ge=0, description="the project's bids across all pages")
    nextCursor: str | None = Field(
        default=None,
        description="pass as `cursor` to fetch the next page; null when this is the last page",
    )


class BidListQuery(QueryModel):
    limit: int = Field(default=LIST_LIMIT_DEFAULT, ge=1, le=LIST_LIMIT_MAX)
    cursor: Cursor | None = None


# --- the status rule -------------------------------------------------------------------------


def usdc_display(base_units: int) -> int:
    """Whole-token display units, as every USDC amount of the read model (rounded down)."""
    return base_units // USDC_UNIT


def _bid_fields(event: BidEventRow) -> tuple[str, list[int], list[int], int]:
    assert event.bid_hash is not None
    assert event.payouts is not None
    assert event.durations_seconds is not None
    assert event.total_payout is not None
    return (
        event.bid_hash,
        [usdc_display(p) for p in event.payouts],
        list(event.durations_seconds),
        usdc_display(event.total_payout),
    )


def fold_bids(events: Iterable[BidEventRow]) -> dict[tuple[str, str], BidRow]:
    """The bids ``events`` (one or more projects' logs, each project's in chain order) leave,
    by (project, bidder). A log about a bidder without a posted bid changes nothing (the
    contract never emits one)."""
    bids: dict[tuple[str, str], BidRow] = {}
    bidders: dict[str, list[tuple[str, str]]] = {}  # each project's keys, for a selection
    for event in events:
        key = (event.project_address, event.bidder_address)
        row = bids.get(key)
        if event.kind == "posted":
            if row is None:
                bidders.setdefault(event.project_address, []).append(key)
            bid_hash, payouts, durations, total = _bid_fields(event)
            bids[key] = BidRow(
                project_address=event.project_address,
                bidder_address=event.bidder_address,
                status="active",
                bid_hash=bid_hash,
                payouts_usdc=payouts,
                durations_seconds=durations,
                total_payout_usdc=total,
                bond_usdc=usdc_display(event.amount or 0),
                posted_at=event.block_time,
                updated_at=event.block_time,
                first_block=row.first_block if row else event.block_number,
                first_log_index=row.first_log_index if row else event.log_index,
                last_block=event.block_number,
                last_log_index=event.log_index,
            )
        elif row is None:
            continue
        elif event.kind == "updated":
            bid_hash, payouts, durations, total = _bid_fields(event)
            bids[key] = _touched(row, event)._replace(
                bid_hash=bid_hash,
                payouts_usdc=payouts,
                durations_seconds=durations,
                total_payout_usdc=total,
            )
        elif event.kind == "cancelled":
            bids[key] = _touched(row, event, "cancelled")
        elif event.kind == "bond_reclaimed":
            bids[key] = _touched(row, event, "bond_reclaimed")
        elif event.kind == "selected":
            bids[key] = _touched(row, event, "selected")
            for other_key in bidders[event.project_address]:
                other = bids[other_key]
                if other.status == "active":
                    bids[other_key] = _touched(other, event, "not_selected")
    return bids


def _touched(row: BidRow, event: BidEventRow, status: str | None = None) -> BidRow:
    """``row`` as changed by ``event`` (to ``status`` if given)."""
    return row._replace(
        status=status or row.status,
        updated_at=event.block_time,
        last_block=event.block_number,
        last_log_index=event.log_index,
    )


# Compared and reported fields of a bid (docs/events.md, project.changed `bids`).
REPORTED_FIELDS = {
    "status": "status",
    "bid_hash": "bidHash",
    "payouts_usdc": "payoutsUSDC",
    "durations_seconds": "durationsSeconds",
    "total_payout_usdc": "totalPayoutUSDC",
    "bond_usdc": "bondUSDC",
    "posted_at": "postedAt",
    "updated_at": "updatedAt",
}


def bid_changes(before: BidRow | None, after: BidRow | None) -> dict[str, JsonValue]:
    """The API fields of a bid that differ between two rows, with their new values in the read
    API's format (all of them for a new bid; ``{"status": None}`` for a bid that is gone)."""
    if after is None:
        return {"status": None}
    if before is None:
        # A new bid (every bid of a backfill): all fields, without comparing.
        return {name: _API_VALUE[column](getattr(after, column)) for column, name in _REPORTED}
    changed: dict[str, JsonValue] = {}
    for column, name in _REPORTED:
        new = getattr(after, column)
        if getattr(before, column) != new:
            changed[name] = _API_VALUE[column](new)
    return changed


def _text(value: object) -> JsonValue:
    return str(value)  # status, hash, USDC amounts (int or Decimal)


def _time(value: object) -> JsonValue:
    return cast(datetime, value).isoformat()


# The read API's format of each reported column.
_API_VALUE: dict[str, Callable[[object], JsonValue]] = {
    "status": _text,
    "bid_hash": _text,
    "payouts_usdc": lambda v: [str(int(p)) for p in cast(list[int], v)],
    "durations_seconds": lambda v: [int(d) for d in cast(list[int], v)],
    "total_payout_usdc": _text,
    "bond_usdc": _text,
    "posted_at": _time,
    "updated_at": _time,
}
_REPORTED = tuple(REPORTED_FIELDS.items())


def diff_bids(
    before: Mapping[tuple[str, str], BidRow], after: Mapping[tuple[str, str], BidRow]
) -> tuple[list[BidRow], list[tuple[str, str]]]:
    """The rows to write (new or changed) and the (project, bidder) rows to delete."""
    upserts = [row for key, row in sorted(after.items()) if before.get(key) != row]
    deletions = sorted(key for key in before if key not in after)
    return upserts, deletions


# --- the read -------------------------------------------------------------------------------


def bid_model(row: BidPageRow) -> BidReadModel:
    """The API shape of a stored bid (rows come from a constrained table: not validated)."""
    return BidReadModel.model_construct(
        bidderAddress=checksum_address(row.bidder_address),
        bidHash=row.bid_hash,
        payoutsUSDC=[str(int(p)) for p in row.payouts_usdc],
        durationsSeconds=list(row.durations_seconds),
        totalPayoutUSDC=str(int(row.total_payout_usdc)),
        bondUSDC=str(int(row.bond_usdc)),
        status=cast(BidStatus, row.status),
        postedAt=row.posted_at,
        updatedAt=row.updated_at,
    )


def bid_position(row: BidPageRow) -> tuple[int, int]:
    return row.first_block, row.first_log_index
