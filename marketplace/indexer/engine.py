"""The indexing loop: chain logs -> touched projects -> state snapshots -> read models.

One batch = up to ``max_pages`` pages of ``page_blocks`` blocks. For every project touched in
the batch the engine reads ``getProjectState()`` (and the allowlist) at the batch's last block
and upserts the read models, records that block's hash and advances the cursor, all in one
transaction: a crash at any point leaves either the whole batch or none of it, and a retried
batch rewrites the same snapshots (upserts never move a project to an older block).

Reorgs: before each batch the engine compares the hashes of the recent blocks it recorded with
the chain's. On a mismatch it rolls back to the newest recorded block that still matches (at most
``rollback_blocks`` behind the cursor, never at or below the node's ``finalized`` block), deletes
projects created after it, re-snapshots every project the dropped blocks touched at the current
head, and rescans from there, so the read model converges to the canonical chain.

On-chain bids are the one read model kept from logs rather than snapshots: a batch decodes the
bid logs (BidPosted, BidUpdated, BidCancelled, BidSelected, BondReclaimed) of the projects it
indexes, appends them to ``bid_events`` and sets those projects' ``bids`` rows to the fold of their
logs (``marketplace.projects.bids.fold_bids``), in the batch's transaction. A rollback deletes the
bid logs above the fork block and folds the affected projects' remaining logs again, so ``bids``
is always the fold of the canonical logs up to the cursor.

Each of these transactions writes its change events (``marketplace.indexer.changes``) as its
last statement: ``project.created`` / ``project.changed`` for what a batch wrote (bid changes
under ``project.changed``'s ``bids``), ``chain.reorg`` and ``project.removed`` for a rollback. An
event exists exactly when its change committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import asyncpg
import redis.asyncio as aioredis

from marketplace.chain.abi import ContractAbi
from marketplace.chain.enums import BiddingAccess
from marketplace.chain.project_state import ProjectCreated, ProjectState
from marketplace.chain.rpc import JsonRpcClient, RpcBlockHeader, RpcError, RpcLog
from marketplace.events.types import BidChanges, NewEvent
from marketplace.indexer.changes import (
    Snapshot,
    bid_events,
    registry_reset_events,
    reorg_events,
    snapshot_events,
    with_bid_events,
)
from marketplace.indexer.health import lag_seconds_of
from marketplace.indexer.snapshot import project_rows
from marketplace.projects.bids import diff_bids, fold_bids
from marketplace.storage.pool import Connection
from marketplace.storage.read_model_rows import MilestoneRow, ProjectCreation, ProjectRow
from marketplace.storage.repositories import bids as bids_repo
from marketplace.storage.repositories import events as events_repo
from marketplace.storage.repositories import indexer as repo

log = logging.getLogger(__name__)

METRICS_KEY = "marketplace:indexer:metrics"
# Recorded batch-end blocks kept beyond the rollback window, so a reorg is always detectable.
KEEP_RECORDED_BLOCKS = 32
# Snapshot reads: projects per JSON-RPC batch request (two eth_calls each), and batch requests
# in flight at once.
SNAPSHOT_PROJECTS = 100
SNAPSHOT_CONCURRENCY = 4
# Snapshots upserted per statement at most: large enough for few round trips, small enough that
# one statement stays well inside the pool's command timeout on a busy server.
WRITE_PROJECTS = 1_000
# The bid logs the bids read model is kept from, by event name: the kind stored in bid_events.
BID_EVENT_KINDS = {
    "BidPosted": "posted",
    "BidUpdated": "updated",
    "BidCancelled": "cancelled",
    "BidSelected": "selected",
    "BondReclaimed": "bond_reclaimed",
}
# The head query opens every poll: a node that does not answer it this fast counts as
# unreachable (the client's own timeout is for the big log and snapshot reads).
HEAD_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class IndexerConfig:
    chain_id: int
    rpc_url: str
    registry_address: str
    start_block: int
    ws_url: str = ""
    poll_interval_ms: int = 10_000
    rollback_blocks: int = 10
    max_pages: int = 50
    page_blocks: int = 2_000
    lag_alert_seconds: int = 300


@dataclass
class BatchResult:
    from_block: int
    to_block: int
    head: int
    events: int
    projects: int
    reorg: bool = False

    @property
    def behind(self) -> bool:
        return self.to_block < self.head


@dataclass
class _Batch:
    """What one batch found and wrote, filled in by its pipeline's stages."""

    creations: dict[str, ProjectCreation] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)
    events: int = 0  # logs of the registry's projects
    snapshots: list[Snapshot] = field(default_factory=list)
    written: set[str] = field(default_factory=set)
    before_projects: dict[str, repo.StoredRow] = field(default_factory=dict)
    before_milestones: dict[tuple[str, int], repo.StoredRow] = field(default_factory=dict)
    known: set[str] = field(default_factory=set)  # projects indexed before this batch
    bid_logs: list[RpcLog] = field(default_factory=list)  # of the registry's projects
    block_hash: str = ""
    block_time: datetime | None = None


@dataclass(frozen=True)
class WrittenSnapshots:
    projects: set[str]  # what the upsert wrote (not the projects already at a newer block)
    events: list[NewEvent]


def _hex(n: int) -> str:
    return hex(n)


class IndexerEngine:
    def __init__(
        self,
        config: IndexerConfig,
        pool: asyncpg.Pool,
        rpc: JsonRpcClient,
        redis: aioredis.Redis | None = None,
    ) -> None:
        self.config = config
        self.pool = pool
        self.rpc = rpc
        self.redis = redis
        self.registry = config.registry_address.lower()
        registry_abi = ContractAbi.load("MarketplaceRegistry")
        self.project_abi = ContractAbi.load("MarketplaceProject")
        self.created_event = registry_abi.events["ProjectCreated"]
        self.topics = sorted(
            {self.created_event.topic0} | {e.topic0 for e in self.project_abi.events.values()}
        )
        self.get_state = self.project_abi.functions["getProjectState"]
        self.get_allowlist = self.project_abi.functions["allowlist"]
        self.bid_events = {
            self.project_abi.events[name].topic0: (kind, self.project_abi.events[name])
            for name, kind in BID_EVENT_KINDS.items()
        }
        self._known: set[str] | None = None
        self._lag_alerting = False

    # --- the loop -------------------------------------------------------------------------

    async def ensure_cursor(self) -> repo.CursorRow:
        cursor = await repo.get_cursor(self.pool, self.config.chain_id)
        if cursor is not None and cursor.registry_address != self.registry:
            log.warning(
                "registry changed; re-indexing this chain from the new registry's start block",
                extra={"old": cursor.registry_address, "new": self.registry},
            )
            async with self.pool.acquire() as conn, conn.transaction():
                removed = await repo.reset_chain(conn, self.config.chain_id)
                await events_repo.append(conn, registry_reset_events(removed))
            self._known = None
            cursor = None
        if cursor is None:
            await repo.init_cursor(
                self.pool, self.config.chain_id, self.registry, self.config.start_block
            )
            cursor = await repo.get_cursor(self.pool, self.config.chain_id)
        assert cursor is not None
        return cursor

    async def known_projects(self) -> set[str]:
        if self._known is None:
            self._known = await repo.known_projects(self.pool, self.config.chain_id)
        return self._known

    async def sync_once(self) -> BatchResult:
        started = time.perf_counter()
        cursor = await self.ensure_cursor()
        head = int(
            await asyncio.wait_for(self.rpc.call("eth_blockNumber", []), HEAD_TIMEOUT_SECONDS), 16
        )
        synced = cursor.last_synced_block
        if await self._rollback_if_reorged(synced, head):
            await self._metric_incr("reorgs_handled", 1)
            cursor = await self.ensure_cursor()
            synced = cursor.last_synced_block
            result = BatchResult(synced, synced, head, 0, 0, reorg=True)
            return result
        start = synced + 1
        if start > head:
            await repo.advance_cursor(self.pool, self.config.chain_id, synced, head, _now())
            await self._report_lag(synced, head, cursor.last_synced_block_time)
            return BatchResult(start, synced, head, 0, 0)
        end = min(head, start + self.config.page_blocks * self.config.max_pages - 1)
        async with self.pool.acquire() as conn, conn.transaction():
            batch = await self._index_batch(conn, start, end)
            bid_changes = await self._write_bids(conn, batch)
            events = snapshot_events(
                batch.before_projects,
                batch.before_milestones,
                batch.snapshots,
                batch.written,
                block=end,
            )
            events = with_bid_events(events, bid_changes, block=end)
            await repo.record_block(
                conn, self.config.chain_id, end, batch.block_hash, batch.touched
            )
            await repo.advance_cursor(
                conn, self.config.chain_id, end, head, _now(), batch.block_time
            )
            await repo.prune_blocks(
                conn,
                self.config.chain_id,
                end - self.config.rollback_blocks,
                KEEP_RECORDED_BLOCKS,
            )
            # Last: from here to the commit this batch holds the events' order lock.
            await events_repo.append(conn, events)
        known = await self.known_projects()
        known.update(batch.creations)
        seconds = time.perf_counter() - started
        await self._metrics_after_batch(end - start + 1, batch.events, seconds)
        await self._report_lag(end, head, batch.block_time)
        return BatchResult(start, end, head, batch.events, len(batch.written))

    # --- one batch, pipelined -------------------------------------------------------------
    #
    # The stages of a batch run concurrently: while page N+1's logs are fetched, the projects
    # page N touched are snapshotted (eth_call batches, a few in flight) and decoded, and the
    # snapshots decoded so far are written into the batch's open transaction. Every project is
    # snapshotted once per batch, at the batch's last block, whichever page touched it first,
    # so the rows equal those of a sequential batch; the change events are worked out from all
    # of them at the end and written last, with the cursor, in the same transaction.

    async def _index_batch(self, conn: Connection, start: int, end: int) -> _Batch:
        batch = _Batch()
        tag = _hex(end)
        pages: asyncio.Queue[list[RpcLog] | None] = asyncio.Queue()
        decoded: asyncio.Queue[list[tuple[ProjectRow, list[MilestoneRow]]] | None] = asyncio.Queue()
        calls_in_flight = asyncio.Semaphore(SNAPSHOT_CONCURRENCY)
        known = batch.known = await self.known_projects()
        try:
            async with asyncio.TaskGroup() as group:
                header = group.create_task(self.rpc.call("eth_getBlockByNumber", [tag, False]))
                group.create_task(self._fetch_pages(start, end, pages))
                writer = group.create_task(self._write_decoded(conn, batch, header, decoded, end))
                snapshots: list[asyncio.Task[None]] = []
                pending: list[str] = []
                while (page := await pages.get()) is not None:
                    pending.extend(self._classify_page(page, known, batch))
                    while len(pending) >= SNAPSHOT_PROJECTS:
                        chunk, pending = pending[:SNAPSHOT_PROJECTS], pending[SNAPSHOT_PROJECTS:]
                        snapshots.append(
                            group.create_task(
                                self._snapshot_chunk(chunk, tag, calls_in_flight, decoded)
                            )
                        )
                for chunk in _chunks(pending, SNAPSHOT_PROJECTS):
                    snapshots.append(
                        group.create_task(
                            self._snapshot_chunk(chunk, tag, calls_in_flight, decoded)
                        )
                    )
                for task in snapshots:
                    await task
                decoded.put_nowait(None)
                await writer
        except BaseExceptionGroup as failures:
            # Callers classify failures by type (an RPC error, a database error), as before.
            raise _first_leaf(failures) from None
        return batch

    async def _fetch_pages(
        self, start: int, end: int, pages: asyncio.Queue[list[RpcLog] | None]
    ) -> None:
        """One ``eth_getLogs`` per page, in block order, each handed on as soon as it arrives."""
        for page_start in range(start, end + 1, self.config.page_blocks):
            page_end = min(end, page_start + self.config.page_blocks - 1)
            pages.put_nowait(await self._fetch_logs(page_start, page_end))
        pages.put_nowait(None)

    async def _fetch_logs(self, start: int, end: int) -> list[RpcLog]:
        logs = await self.rpc.call(
            "eth_getLogs",
            [{"fromBlock": _hex(start), "toBlock": _hex(end), "topics": [self.topics]}],
        )
        assert isinstance(logs, list)
        return logs

    def _classify_page(self, logs: list[RpcLog], known: set[str], batch: _Batch) -> list[str]:
        """Record the page's creations and events in ``batch``; return the projects it touched
        first in this batch (the ones still to snapshot)."""
        fresh: list[str] = []
        touched = batch.touched
        creations = batch.creations
        registry, created_topic = self.registry, self.created_event.topic0
        # Creations first, then everything else: no sort by (block, log index) needed, since a
        # project's events count whether they come before or after its creation in the page.
        others = []
        bid_topics = self.bid_events
        for entry in logs:
            if entry.get("removed"):
                continue
            topics = entry["topics"]
            if topics and topics[0] == created_topic and entry["address"].lower() == registry:
                args = cast(
                    ProjectCreated, self.created_event.decode_log(entry, checksum_addresses=False)
                )
                address = args["project"].lower()
                creations[address] = ProjectCreation(
                    project_address=address,
                    owner_address=args["owner"].lower(),
                    config_hash=args["configHash"].lower(),
                    block_number=int(entry["blockNumber"], 16),
                    log_index=int(entry["logIndex"], 16),
                )
                batch.events += 1
                if address not in touched:
                    touched.add(address)
                    fresh.append(address)
            else:
                others.append(entry)
        for entry in others:
            address = entry["address"].lower()
            if address in touched:
                batch.events += 1
            elif address in known or address in creations:
                batch.events += 1
                touched.add(address)
                fresh.append(address)
            else:
                continue
            topics = entry["topics"]
            if topics and topics[0] in bid_topics:
                batch.bid_logs.append(entry)
        return fresh

    async def _snapshot_chunk(
        self,
        addresses: list[str],
        tag: str,
        calls_in_flight: asyncio.Semaphore,
        decoded: asyncio.Queue[list[tuple[ProjectRow, list[MilestoneRow]]] | None],
    ) -> None:
        decoded.put_nowait(await self._read_snapshots(addresses, tag, calls_in_flight))

    async def _read_snapshots(
        self, addresses: list[str], tag: str, calls_in_flight: asyncio.Semaphore
    ) -> list[tuple[ProjectRow, list[MilestoneRow]]]:
        """``getProjectState()`` of each project, then ``allowlist()`` of the invite-only ones.

        An open project's allowlist is always empty (its bidding access is set once, at
        initialisation, and the contract edits the allowlist of invite-only projects only), so
        reading it would only double the calls: most projects are open.
        """
        state_data = self.get_state.encode_call()
        async with calls_in_flight:
            raw_states = await self.rpc.batch(
                [("eth_call", [{"to": a, "data": state_data}, tag]) for a in addresses],
                chunk=SNAPSHOT_PROJECTS,
            )
        states = self._decode_states(raw_states)
        invite_only = [
            i for i, state in enumerate(states) if state["biddingAccess"] != BiddingAccess.OPEN
        ]
        allowlists: dict[int, list[str]] = {}
        if invite_only:
            allow_data = self.get_allowlist.encode_call()
            async with calls_in_flight:
                raw_lists = await self.rpc.batch(
                    [
                        ("eth_call", [{"to": addresses[i], "data": allow_data}, tag])
                        for i in invite_only
                    ],
                    chunk=SNAPSHOT_PROJECTS,
                )
            for i, raw in zip(invite_only, raw_lists, strict=True):
                allowlists[i] = self.get_allowlist.decode_result(raw, checksum_addresses=False)
        return [
            project_rows(address, state, allowlists.get(i, []))
            for i, (address, state) in enumerate(zip(addresses, states, strict=True))
        ]

    def _decode_states(self, results: list[Any]) -> list[ProjectState]:
        decode = self.get_state.decode_result
        return [decode(raw, checksum_addresses=False) for raw in results]

    async def _write_decoded(
        self,
        conn: Connection,
        batch: _Batch,
        header: asyncio.Task[RpcBlockHeader | None],
        decoded: asyncio.Queue[list[tuple[ProjectRow, list[MilestoneRow]]] | None],
        end: int,
    ) -> None:
        """Upsert decoded snapshots into the batch's transaction as they come: whatever queued
        up while the previous write ran (up to ``WRITE_PROJECTS``) goes in the next one."""
        block = await header
        if block is None:
            raise RpcError(f"block {end} not found")
        batch.block_hash = block["hash"]
        batch.block_time = datetime.fromtimestamp(int(block["timestamp"], 16), UTC)
        done = False
        while not done:
            first = await decoded.get()
            if first is None:
                break
            rows = list(first)
            while len(rows) < WRITE_PROJECTS and not decoded.empty():
                more = decoded.get_nowait()
                if more is None:
                    done = True
                    break
                rows.extend(more)
            await self._write_rows(conn, batch, rows, end)

    async def _write_rows(
        self,
        conn: Connection,
        batch: _Batch,
        rows: list[tuple[ProjectRow, list[MilestoneRow]]],
        end: int,
    ) -> None:
        missing = [p.project_address for p, _ in rows if p.project_address not in batch.creations]
        existing = await repo.existing_creations(conn, missing) if missing else {}
        snapshots: list[Snapshot] = []
        for project, milestones in rows:
            address = project.project_address
            creation = batch.creations.get(address) or existing.get(address)
            if creation is None:
                log.warning("event from a project never created", extra={"project": address})
                continue
            snapshots.append((project, milestones, creation))
        # Only projects the read model may hold already: reading the others back would find
        # nothing, and while a backfill fills freshly emptied tables the planner has no
        # statistics and scans them, which made these reads quadratic in the batch.
        stored = [
            project.project_address
            for project, _, _ in snapshots
            if project.project_address in batch.known
            or project.project_address not in batch.creations
        ]
        before_projects, before_milestones = await repo.current_state(conn, stored)
        assert batch.block_time is not None  # the writer reads the header first
        written = await repo.upsert_snapshots(
            conn, self.config.chain_id, snapshots, block=end, block_time=batch.block_time
        )
        batch.snapshots.extend(snapshots)
        batch.before_projects.update(before_projects)
        batch.before_milestones.update(before_milestones)
        batch.written |= written

    # --- bids ---------------------------------------------------------------------------------

    async def _write_bids(self, conn: Connection, batch: _Batch) -> dict[str, list[BidChanges]]:
        """Append the batch's bid logs and fold its projects' bids again; return the changes.

        Only logs of projects the read model holds count (the batch's snapshots: a project the
        registry never created has none). A project indexed before this batch is folded from all
        its stored logs; one created in this batch has no others, so its new logs suffice.
        """
        if not batch.bid_logs:
            return {}
        indexed = {project.project_address for project, _, _ in batch.snapshots}
        logs = [e for e in batch.bid_logs if e["address"].lower() in indexed]
        if not logs:
            return {}
        times = await self._block_times(logs)
        decoded = [self._bid_event(entry, times) for entry in logs]
        await bids_repo.insert_events(conn, decoded)
        projects = {event.project_address for event in decoded}
        # As in _write_rows: only projects the read model may hold already are read back.
        stored = sorted(p for p in projects if p in batch.known or p not in batch.creations)
        events = await bids_repo.events_of(conn, stored) if stored else []
        old = set(stored)
        events += sorted(
            (e for e in decoded if e.project_address not in old),
            key=lambda e: (e.project_address, e.block_number, e.log_index),
        )
        return await self._replace_bids(conn, stored, events)

    async def _replace_bids(
        self, conn: Connection, stored: list[str], events: list[bids_repo.BidEventRow]
    ) -> dict[str, list[BidChanges]]:
        """Set the bids of the projects of ``events`` (and of ``stored``, the ones that may
        have rows already) to the fold of ``events``; return what changed."""
        before = await bids_repo.bids_of(conn, stored) if stored else {}
        after = fold_bids(events)
        upserts, deletions = diff_bids(before, after)
        await bids_repo.replace_bids(conn, upserts, deletions)
        return bid_events(before, after)

    async def _block_times(self, logs: list[RpcLog]) -> dict[int, datetime]:
        """Block time of every block of ``logs``: from the log's ``blockTimestamp`` where the
        node gives it (anvil, recent geth and reth do), else one batched header read."""
        times: dict[int, datetime] = {}
        missing: set[int] = set()
        for entry in logs:
            number = int(entry["blockNumber"], 16)
            stamp = cast(dict[str, Any], entry).get("blockTimestamp")
            if stamp is not None:
                times[number] = datetime.fromtimestamp(int(stamp, 16), UTC)
            elif number not in times:
                missing.add(number)
        missing -= times.keys()
        if missing:
            order = sorted(missing)
            headers = await self.rpc.batch(
                [("eth_getBlockByNumber", [_hex(n), False]) for n in order]
            )
            for number, header in zip(order, headers, strict=True):
                if header is None:
                    raise RpcError(f"block {number} not found")
                times[number] = datetime.fromtimestamp(int(header["timestamp"], 16), UTC)
        return times

    def _bid_event(self, entry: RpcLog, times: dict[int, datetime]) -> bids_repo.BidEventRow:
        kind, event = self.bid_events[entry["topics"][0]]
        args = event.decode_log(entry, checksum_addresses=False)
        number = int(entry["blockNumber"], 16)
        bidder = cast(str, args.get("bidder") or args.get("builder")).lower()
        bid_hash = args.get("bidHash")
        amount = args.get("bond", args.get("bondRefunded", args.get("amount")))
        return bids_repo.BidEventRow(
            project_address=entry["address"].lower(),
            block_number=number,
            log_index=int(entry["logIndex"], 16),
            kind=kind,
            bidder_address=bidder,
            block_time=times[number],
            bid_hash=cast(str, bid_hash).lower() if bid_hash is not None else None,
            payouts=cast("list[int] | None", args.get("payouts")),
            # BidSelected logs the milestone deadlines, not the durations: the fold keeps the
            # bid's durations for it.
            durations_seconds=cast("list[int] | None", args.get("durations")),
            total_payout=cast("int | None", args.get("totalPayout")),
            amount=cast("int | None", amount),
        )

    async def _write_snapshots(
        self,
        conn: Connection,
        snapshots: list[Snapshot],
        *,
        block: int,
        block_time: datetime,
    ) -> WrittenSnapshots:
        """Upsert ``snapshots`` and work out their change events (the caller writes them)."""
        addresses = [project.project_address for project, _, _ in snapshots]
        before_projects, before_milestones = await repo.current_state(conn, addresses)
        written = await repo.upsert_snapshots(
            conn, self.config.chain_id, snapshots, block=block, block_time=block_time
        )
        events = snapshot_events(
            before_projects, before_milestones, snapshots, written, block=block
        )
        return WrittenSnapshots(written, events)

    async def _snapshot(
        self, addresses: list[str], block: int
    ) -> tuple[list[Snapshot], RpcBlockHeader]:
        """Snapshots of ``addresses`` (projects already in the read model) at ``block``."""
        tag = _hex(block)
        order = sorted(addresses)
        block_info: RpcBlockHeader | None = await self.rpc.call(
            "eth_getBlockByNumber", [tag, False]
        )
        if block_info is None:
            raise RpcError(f"block {block} not found")
        calls_in_flight = asyncio.Semaphore(SNAPSHOT_CONCURRENCY)
        chunks = await asyncio.gather(
            *(
                self._read_snapshots(chunk, tag, calls_in_flight)
                for chunk in _chunks(order, SNAPSHOT_PROJECTS)
            )
        )
        existing = await repo.existing_creations(self.pool, order) if order else {}
        snapshots = []
        for project, milestones in (row for chunk in chunks for row in chunk):
            creation = existing.get(project.project_address)
            if creation is None:
                log.warning(
                    "event from a project never created",
                    extra={"project": project.project_address},
                )
                continue
            snapshots.append((project, milestones, creation))
        return snapshots, block_info

    # --- reorgs ---------------------------------------------------------------------------

    async def _finalized_block(self) -> int | None:
        try:
            block = await self.rpc.call("eth_getBlockByNumber", ["finalized", False])
        except RpcError:
            return None
        return int(block["number"], 16) if block else None

    async def _rollback_if_reorged(self, synced: int, head: int) -> bool:
        recorded = await repo.recent_blocks(
            self.pool, self.config.chain_id, self.config.rollback_blocks + KEEP_RECORDED_BLOCKS
        )
        if not recorded:
            return False
        numbers = [row["block_number"] for row in recorded]
        chain_blocks = await self.rpc.batch(
            [("eth_getBlockByNumber", [_hex(n), False]) for n in numbers]
        )
        matches = [
            bool(blk) and blk["hash"].lower() == row["block_hash"].lower()
            for row, blk in zip(recorded, chain_blocks, strict=True)
        ]
        if matches[0]:
            return False
        finalized = await self._finalized_block()
        floor = max(synced - self.config.rollback_blocks, self.config.start_block - 1)
        fork = next((n for n, ok in zip(numbers, matches, strict=True) if ok and n >= floor), floor)
        if finalized is not None and fork < finalized <= synced:
            fork = finalized
        log.warning(
            "chain reorganisation detected; rolling back",
            extra={"synced": synced, "fork_block": fork, "head": head},
        )
        async with self.pool.acquire() as conn, conn.transaction():
            touched = await repo.drop_blocks_after(conn, self.config.chain_id, fork)
            deleted = await repo.delete_projects_created_after(conn, self.config.chain_id, fork)
            # Bid logs of the dropped blocks go; the projects that had any are folded again
            # from the logs that remain (the rescan adds the canonical ones back).
            rebid = sorted(await bids_repo.delete_events_after(conn, self.config.chain_id, fork))
            rebid_changes = (
                await self._replace_bids(conn, rebid, await bids_repo.events_of(conn, rebid))
                if rebid
                else {}
            )
            survivors = sorted(touched - deleted)
            if survivors:
                await conn.execute(
                    "UPDATE projects SET snapshot_block = $2 WHERE project_address = any($1)",
                    survivors,
                    fork,
                )
            await repo.advance_cursor(conn, self.config.chain_id, fork, head, _now())
            await events_repo.append(
                conn,
                reorg_events(
                    chain_id=self.config.chain_id,
                    fork_block=fork,
                    synced_block=synced,
                    head_block=head,
                    removed=deleted,
                    resnapshot=survivors,
                )
                + with_bid_events([], rebid_changes, block=fork),
            )
        if self._known is not None:
            self._known -= deleted
        # Projects the dropped blocks touched are re-read as of now; the rescan from the fork
        # then replays the canonical history on top.
        if survivors:
            await self._resnapshot(survivors, head)
        return True

    async def _resnapshot(self, addresses: list[str], head: int) -> None:
        snapshots, block = await self._snapshot(addresses, head)
        block_time = datetime.fromtimestamp(int(block["timestamp"], 16), UTC)
        async with self.pool.acquire() as conn, conn.transaction():
            written = await self._write_snapshots(
                conn, snapshots, block=head, block_time=block_time
            )
            await events_repo.append(conn, written.events)

    # --- side channels --------------------------------------------------------------------

    async def _metric_incr(self, name: str, amount: float) -> None:
        if self.redis is None:
            return
        try:
            await self.redis.hincrbyfloat(METRICS_KEY, name, amount)
        except Exception:
            log.debug("metrics write failed", exc_info=True)

    async def _metrics_after_batch(self, blocks: int, events: int, seconds: float) -> None:
        if self.redis is None:
            return
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hincrbyfloat(METRICS_KEY, "blocks_processed", blocks)
                pipe.hincrbyfloat(METRICS_KEY, "events_processed", events)
                pipe.hincrbyfloat(METRICS_KEY, "batches", 1)
                pipe.hincrbyfloat(METRICS_KEY, "batch_seconds_sum", seconds)
                await pipe.execute()
        except Exception:
            log.debug("metrics write failed", exc_info=True)

    async def record_rpc_error(self) -> None:
        await self._metric_incr("rpc_errors", 1)

    async def _report_lag(self, synced: int, head: int, synced_time: datetime | None) -> None:
        lag_blocks = max(0, head - synced)
        lag_seconds = lag_seconds_of(lag_blocks, synced_time)
        if self.redis is not None:
            try:
                await self.redis.hset(
                    METRICS_KEY,
                    mapping={
                        "lag_blocks": lag_blocks,
                        "lag_seconds": lag_seconds,
                        "head_block": head,
                        "last_synced_block": synced,
                    },
                )
            except Exception:
                log.debug("metrics write failed", exc_info=True)
        alerting = lag_seconds > self.config.lag_alert_seconds
        if alerting and not self._lag_alerting:
            log.warning(
                "indexer lag above alert threshold",
                extra={"lag_seconds": lag_seconds, "lag_blocks": lag_blocks},
            )
        self._lag_alerting = alerting


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


def _now() -> datetime:
    return datetime.now(UTC)
