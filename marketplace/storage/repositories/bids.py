"""SQL of the on-chain bids read model (migration 0021; docs/read-models.md, "Bids (on-chain)").

The indexer appends the bid logs it decodes to ``bid_events`` and replaces a project's rows of
``bids`` with the fold of that project's logs (``marketplace.projects.bids``); a reorg deletes
the logs above its fork block first. The read API lists a project's bids with the project read
visibility rule of ``repositories/projects.py``, in one statement.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import NamedTuple

from marketplace.storage import rows
from marketplace.storage.pool import Conn
from marketplace.storage.repositories.projects import (
    VIEWER_CTE,
    VISIBLE_TO_ANONYMOUS,
    VISIBLE_TO_VIEWER,
)


class BidEventRow(NamedTuple):
    """One decoded bid log (USDC amounts in base units, exact)."""

    project_address: str
    block_number: int
    log_index: int
    kind: str  # posted, updated, cancelled, selected, bond_reclaimed
    bidder_address: str
    block_time: datetime
    bid_hash: str | None
    payouts: list[int] | None
    durations_seconds: list[int] | None
    total_payout: int | None
    amount: int | None


class BidRow(NamedTuple):
    """One row of ``bids``: a bidder's current bid on a project (USDC in display units)."""

    project_address: str
    bidder_address: str
    status: str
    bid_hash: str
    payouts_usdc: list[int]
    durations_seconds: list[int]
    total_payout_usdc: int
    bond_usdc: int
    posted_at: datetime
    updated_at: datetime
    first_block: int
    first_log_index: int
    last_block: int
    last_log_index: int


class BidPageRow(NamedTuple):
    """One bid of a page of the bids read (USDC in display units)."""

    bidder_address: str
    status: str
    bid_hash: str
    payouts_usdc: list[Decimal]
    durations_seconds: list[int]
    total_payout_usdc: Decimal
    bond_usdc: Decimal
    posted_at: datetime
    updated_at: datetime
    first_block: int
    first_log_index: int


@dataclass(frozen=True)
class BidPage:
    total: int  # the project's bids, across all pages
    rows: list[BidPageRow]  # at most the requested limit, in first-bid order


_EVENT_COLUMNS = ", ".join(BidEventRow._fields)
_BID_COLUMNS = ", ".join(BidRow._fields)

# Many rows per statement (unnest); each row's arrays travel as array literals in text, since
# unnest flattens nested arrays, and numeric values as their decimal text (cheaper to encode than
# asyncpg's binary numeric: repositories/indexer.py, before UPSERT_PROJECTS). A replayed batch
# logs the same (block, log index): nothing to add.
INSERT_EVENTS = f"""
INSERT INTO bid_events ({_EVENT_COLUMNS})
SELECT u.project_address, u.block_number, u.log_index, u.kind, u.bidder_address, u.block_time,
       u.bid_hash, u.payouts::numeric[], u.durations_seconds::bigint[], u.total_payout::numeric,
       u.amount::numeric
FROM unnest($1::text[], $2::bigint[], $3::int[], $4::text[], $5::text[], $6::timestamptz[],
            $7::text[], $8::text[], $9::text[], $10::text[], $11::text[])
     AS u({_EVENT_COLUMNS})
ON CONFLICT (project_address, block_number, log_index) DO NOTHING
"""
SELECT_EVENTS = f"""
SELECT {_EVENT_COLUMNS} FROM bid_events
WHERE project_address = any($1::text[])
ORDER BY project_address, block_number, log_index
"""
SELECT_BIDS = f"SELECT {_BID_COLUMNS} FROM bids WHERE project_address = any($1::text[])"
UPSERT_BIDS = f"""
INSERT INTO bids ({_BID_COLUMNS})
SELECT u.project_address, u.bidder_address, u.status, u.bid_hash, u.payouts_usdc::numeric[],
       u.durations_seconds::bigint[], u.total_payout_usdc::numeric, u.bond_usdc::numeric,
       u.posted_at, u.updated_at, u.first_block, u.first_log_index, u.last_block, u.last_log_index
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
            $7::text[], $8::text[], $9::timestamptz[], $10::timestamptz[], $11::bigint[],
            $12::int[], $13::bigint[], $14::int[])
     AS u({_BID_COLUMNS})
ON CONFLICT (project_address, bidder_address) DO UPDATE SET
    {", ".join(f"{c} = EXCLUDED.{c}" for c in BidRow._fields[2:])}
"""
DELETE_BIDS = """
DELETE FROM bids b
USING unnest($1::text[], $2::text[]) AS gone(project_address, bidder_address)
WHERE b.project_address = gone.project_address AND b.bidder_address = gone.bidder_address
"""
# The logs a reorg dropped (above the fork block), of this chain's projects.
DELETE_EVENTS_AFTER = """
DELETE FROM bid_events e
USING projects p
WHERE p.project_address = e.project_address AND p.chain_id = $1 AND e.block_number > $2
RETURNING e.project_address
"""

# --- the read ------------------------------------------------------------------------------------
# One statement: the project if the caller may see it (the project read rule, VISIBLE_TO_VIEWER),
# the number of its bids, and one page of them in first-bid order. No row: hidden or unknown.
_PAGE_COLUMNS = """b.bidder_address, b.status, b.bid_hash, b.payouts_usdc, b.durations_seconds,
           b.total_payout_usdc, b.bond_usdc, b.posted_at, b.updated_at, b.first_block,
           b.first_log_index"""


def _list_statement(*, viewer: bool, after: bool) -> str:
    n = 2 if viewer else 1  # the project address's parameter
    if viewer:
        head = f"WITH {VIEWER_CTE.strip()}, project AS (\n    SELECT p.project_address"
        head += f" FROM projects p CROSS JOIN viewer v\n    WHERE p.project_address = ${n}::text"
        head += f" AND {VISIBLE_TO_VIEWER}\n)"
    else:
        head = "WITH project AS (\n    SELECT p.project_address FROM projects p\n"
        head += f"    WHERE p.project_address = ${n}::text AND {VISIBLE_TO_ANONYMOUS}\n)"
    position = ""
    if after:
        bound = f"(${n + 2}::bigint, ${n + 3}::int)"
        position = f"\n      AND (b.first_block, b.first_log_index) > {bound}"
    return f"""{head}
SELECT pr.project_address,
       (SELECT count(*) FROM bids c WHERE c.project_address = pr.project_address) AS total,
       page.*
FROM project pr
LEFT JOIN LATERAL (
    SELECT {_PAGE_COLUMNS}
    FROM bids b
    WHERE b.project_address = pr.project_address{position}
    ORDER BY b.first_block, b.first_log_index
    LIMIT ${n + 1}
) page ON true
ORDER BY page.first_block, page.first_log_index
"""


LIST_STATEMENTS = {
    (viewer, after): _list_statement(viewer=viewer, after=after)
    for viewer in (False, True)
    for after in (False, True)
}


_LIST_COLUMNS = ("project_address", "total", *BidPageRow._fields)


async def list_bids(
    conn: Conn,
    *,
    viewer: uuid.UUID | None,
    project_address: str,
    after: tuple[int, int] | None,
    limit: int,
) -> BidPage | None:
    """Up to ``limit`` bids of the project after ``after`` (first-bid order) and the count of
    all; None when the project is unknown or hidden from ``viewer`` (the two are deliberately
    indistinguishable)."""
    args: list[object] = [] if viewer is None else [viewer]
    args += [project_address.lower(), limit]
    if after is not None:
        args += list(after)
    records = await conn.fetch(LIST_STATEMENTS[(viewer is not None, after is not None)], *args)
    if not records:
        return None
    rows.check_names(_LIST_COLUMNS, records[0], "bids page")
    make = BidPageRow._make
    return BidPage(
        total=records[0][1],
        rows=[make(record[2:]) for record in records if record[2] is not None],
    )


# --- the indexer's writes -------------------------------------------------------------------------


def _ints(values: Sequence[Decimal | int] | None) -> list[int]:
    return [int(v) for v in values or ()]


def _array(values: Sequence[int] | None) -> str | None:
    """A Postgres array literal of integers (``{1,2}``), None for none."""
    return None if values is None else "{" + ",".join(map(str, values)) + "}"


def _columns(
    rows_: Sequence[tuple[object, ...]], arrays: frozenset[int], numerics: frozenset[int]
) -> list[list[object]]:
    """Column lists for unnest, with the array columns (by position) as literals and the
    numeric ones as text."""
    columns: list[list[object]] = [list(column) for column in zip(*rows_, strict=True)]
    for index in arrays:
        columns[index] = [_array(v) for v in columns[index]]  # type: ignore[arg-type]
    for index in numerics:
        columns[index] = [None if v is None else str(v) for v in columns[index]]
    return columns


async def insert_events(conn: Conn, events: Sequence[BidEventRow]) -> None:
    if events:
        await conn.execute(INSERT_EVENTS, *_columns(events, frozenset({7, 8}), frozenset({9, 10})))


async def events_of(conn: Conn, projects: Iterable[str]) -> list[BidEventRow]:
    """Every stored bid log of ``projects``, by project and then in chain order."""
    records = await conn.fetch(SELECT_EVENTS, sorted(projects))
    if not records:
        return []
    rows.check_columns(BidEventRow, records[0])
    return [
        BidEventRow(
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            r[6],
            None if r[7] is None else _ints(r[7]),
            None if r[8] is None else list(r[8]),
            None if r[9] is None else int(r[9]),
            None if r[10] is None else int(r[10]),
        )
        for r in records
    ]


async def bids_of(conn: Conn, projects: Iterable[str]) -> dict[tuple[str, str], BidRow]:
    """The stored bids of ``projects`` by (project, bidder)."""
    records = await conn.fetch(SELECT_BIDS, sorted(projects))
    if not records:
        return {}
    rows.check_columns(BidRow, records[0])
    found = {}
    for r in records:
        row = BidRow(
            r[0],
            r[1],
            r[2],
            r[3],
            _ints(r[4]),
            list(r[5]),
            int(r[6]),
            int(r[7]),
            r[8],
            r[9],
            r[10],
            r[11],
            r[12],
            r[13],
        )
        found[(row.project_address, row.bidder_address)] = row
    return found


async def replace_bids(
    conn: Conn, upserts: Sequence[BidRow], deletions: Sequence[tuple[str, str]]
) -> None:
    """Write changed or new rows and delete the (project, bidder) rows no log derives any
    more (after a reorg)."""
    if deletions:
        await conn.execute(DELETE_BIDS, [p for p, _ in deletions], [b for _, b in deletions])
    if upserts:
        await conn.execute(UPSERT_BIDS, *_columns(upserts, frozenset({4, 5}), frozenset({6, 7})))


async def delete_events_after(conn: Conn, chain_id: int, block: int) -> set[str]:
    """Delete this chain's bid logs above ``block``; return the projects that had any."""
    return {r["project_address"] for r in await conn.fetch(DELETE_EVENTS_AFTER, chain_id, block)}
