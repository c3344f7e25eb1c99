"""The indexing loop: chain logs -> touched projects -> read models folded from the logs.

One batch = up to ``max_pages`` pages of ``page_blocks`` blocks. The logs of the registry's
projects are folded, in chain order, into their read-model rows (``marketplace.indexer.logstate``:
a project created in the batch starts from its ``ProjectCreated`` log, one indexed before from its
stored rows); the rows are upserted, that block's hash recorded and the cursor advanced, all in
one transaction: a crash at any point leaves either the whole batch or none of it. The contract's
state is not read on this path: every read-model field comes from a log (docs/read-models.md,
"Where each field comes from").

Reorgs: before each batch the engine compares the hashes of the recent blocks it recorded with
the chain's. On a mismatch it rolls back to the newest recorded block that still matches (at most
``rollback_blocks`` behind the cursor, never at or below the node's ``finalized`` block), deletes
projects created after it, resets every project the dropped blocks touched to its state at the
fork block (``getProjectState()`` there, the one place the indexer reads contract state: the
logs that built the stored rows are not kept), and rescans from there, so the read model
converges to the canonical chain. Stored rows are thus never ahead of the cursor, which is what
lets a batch fold its logs onto them.

On-chain bids are folded from the same logs: a batch decodes the bid logs (BidPosted,
BidUpdated, BidCancelled, BidSelected, BondReclaimed) of the projects it indexes, appends them to
``bid_events`` and sets those projects' ``bids`` rows to the fold of their logs
(``marketplace.projects.bids.fold_bids``), in the batch's transaction. A rollback deletes the bid
logs above the fork block and folds the affected projects' remaining logs again, so ``bids`` is
always the fold of the canonical logs up to the cursor.

Each of these transactions writes its change events (``marketplace.indexer.changes``) as its
last statement: ``project.created`` / ``project.changed`` for what a batch wrote (bid changes
under ``project.changed``'s ``bids``), ``chain.reorg``, ``project.removed`` and the reset
projects' ``project.changed`` for a rollback. An event exists exactly when its change committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import asyncpg
import redis.asyncio as aioredis

from marketplace.chain.abi import ContractAbi
from marketplace.chain.enums import BiddingAccess
from marketplace.chain.loghex import HexEvent
from marketplace.chain.project_state import ProjectState
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
from marketplace.indexer.logstate import ProjectFold, project_folder
from marketplace.indexer.snapshot import project_rows
from marketplace.projects.bids import diff_bids, fold_bids
from marketplace.storage.pool import Connection
from marketplace.storage.read_model_rows import MilestoneRow, ProjectCreation, ProjectRow
from marketplace.storage.repositories import bids as bids_repo
from marketplace.storage.repositories import events as events_repo
from marketplace.storage.repositories import indexer as repo
from marketplace.storage.repositories.bids import BidRow

log = logging.getLogger(__name__)

METRICS_KEY = "marketplace:indexer:metrics"
# Recorded batch-end blocks kept beyond the rollback window, so a reorg is always detectable.
KEEP_RECORDED_BLOCKS = 32
# Logs pages requested at once: the node works on the next page while this process decodes and
# folds the last one.
PAGES_IN_FLIGHT = 2
# State reads (a rollback's reset of the projects it touched): projects per JSON-RPC batch
# request (two eth_calls each at most), and batch requests in flight at once.
SNAPSHOT_PROJECTS = 100
SNAPSHOT_CONCURRENCY = 4
# Projects upserted per statement at most: large enough for few round trips, small enough that
# one statement stays well inside the pool's command timeout on a busy server.
WRITE_PROJECTS = 1_000
# Rows built between two chances for the statement in flight to send its successor.
YIELD_EVERY = 250
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
    """What one batch found and wrote, filled in by its stages."""

    creations: dict[str, ProjectCreation] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)
    events: int = 0  # logs of the registry's projects
    # The rows of the touched projects as the batch's logs make them.
    folds: dict[str, ProjectFold] = field(default_factory=dict)
    # Logs of projects indexed before the batch, until their stored rows are read.
    later: dict[str, list[RpcLog]] = field(default_factory=dict)
    snapshots: list[Snapshot] = field(default_factory=list)
    written: set[str] = field(default_factory=set)
    before_projects: dict[str, repo.StoredRow] = field(default_factory=dict)
    before_milestones: dict[tuple[str, int], repo.StoredRow] = field(default_factory=dict)
    known: set[str] = field(default_factory=set)  # projects indexed before this batch
    bid_logs: list[RpcLog] = field(default_factory=list)  # of the registry's projects
    block_hash: str = ""
    block_time: datetime | None = None


@dataclass(frozen=True)
class _StoredBids:
    """What the read model holds of the bids of the projects a batch has bid logs of."""

    projects: list[str]
    events: list[bids_repo.BidEventRow]
    before: dict[tuple[str, str], BidRow]


async def _finish(*tasks: asyncio.Future[Any] | None) -> None:
    """Wait for ``tasks`` to end, retrieving (and dropping) their failures."""
    running = [task for task in tasks if task is not None]
    if running:
        await asyncio.wait(running)
        for task in running:
            if not task.cancelled():
                task.exception()


@contextlib.asynccontextmanager
async def _collector_paused() -> AsyncIterator[None]:
    """Pause the cyclic garbage collector while a batch runs.

    A batch holds every log of its pages and every row it builds (a backfill of 10,000 projects:
    120,000 logs, 45,000 rows, their dicts and lists) until it commits, and allocating them made
    the collector walk all of them again and again: about a quarter of the indexer's CPU in
    ``bench/indexer_backfill.py`` (issue 28). Reference counting frees them when the batch ends;
    the collector runs again then (cycles, which the batch does not make, wait until then).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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
        self.folder = project_folder()
        self.bid_events = {
            self.project_abi.events[name].topic0: (kind, HexEvent(self.project_abi.events[name]))
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
        async with (
            _collector_paused(),
            self.pool.acquire() as conn,
            conn.transaction(),
        ):
            batch = await self._index_batch(conn, start, end)
            events = await self._write_batch(conn, batch, end)
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
    # The pages of a batch are fetched one after the other with the next one already requested
    # (so the node works on page N+1 while this process decodes and folds page N), and each
    # page's logs are folded into the rows of the projects they belong to as it arrives: a
    # project created in the batch from its ProjectCreated log, one indexed before from its
    # stored rows (read once all pages are in, with one query). The rows are then upserted in
    # groups of WRITE_PROJECTS, the next group prepared while the previous statement runs, and
    # the change events worked out from all of them, in the batch's one transaction.

    async def _index_batch(self, conn: Connection, start: int, end: int) -> _Batch:
        batch = _Batch()
        known = batch.known = await self.known_projects()
        header = asyncio.ensure_future(self.rpc.call("eth_getBlockByNumber", [_hex(end), False]))
        try:
            ranges = [
                (page_start, min(end, page_start + self.config.page_blocks - 1))
                for page_start in range(start, end + 1, self.config.page_blocks)
            ]
            pending: list[asyncio.Future[list[RpcLog]]] = []
            for page_start, page_end in ranges:
                pending.append(asyncio.ensure_future(self._fetch_logs(page_start, page_end)))
                if len(pending) >= PAGES_IN_FLIGHT:
                    self._classify_page(await pending.pop(0), known, batch)
            for page in pending:
                self._classify_page(await page, known, batch)
            pending = []
            block = await header
        finally:
            for task in (*pending, header):
                task.cancel()
            await _finish(*pending, header)
        if block is None:
            raise RpcError(f"block {end} not found")
        batch.block_hash = block["hash"]
        batch.block_time = datetime.fromtimestamp(int(block["timestamp"], 16), UTC)
        await self._fold_stored(conn, batch)
        await self._resolve_times(batch)
        return batch

    async def _fetch_logs(self, start: int, end: int) -> list[RpcLog]:
        logs = await self.rpc.call(
            "eth_getLogs",
            [{"fromBlock": _hex(start), "toBlock": _hex(end), "topics": [self.topics]}],
        )
        assert isinstance(logs, list)
        return logs

    def _classify_page(self, logs: list[RpcLog], known: set[str], batch: _Batch) -> None:
        """Record the page's creations, fold the logs of the projects created in this batch,
        keep those of projects indexed before (folded onto their stored rows at the end)."""
        touched = batch.touched
        creations = batch.creations
        folds = batch.folds
        later = batch.later
        registry, created_topic = self.registry, self.created_event.topic0
        apply = self.folder.apply
        # Creations first, then everything else: a project's ProjectCreated is logged before
        # its other logs (same transaction, earlier log index), so its fold exists in time.
        others = []
        bid_topics = self.bid_events
        for entry in logs:
            if entry.get("removed"):
                continue
            topics = entry["topics"]
            if topics and topics[0] == created_topic and entry["address"].lower() == registry:
                creation = self._creation(entry)
                address = creation.project_address
                creations[address] = creation
                folds[address] = ProjectFold.created(creation, int(entry["data"][66:130], 16))
                later.pop(address, None)  # an earlier incarnation's logs (a replaced history)
                batch.events += 1
                touched.add(address)
            else:
                others.append(entry)
        for entry in others:
            address = entry["address"].lower()
            fold = folds.get(address)
            if fold is not None:
                apply(fold, entry)
            elif address in known:
                later.setdefault(address, []).append(entry)
            else:
                continue
            batch.events += 1
            touched.add(address)
            topics = entry["topics"]
            if topics and topics[0] in bid_topics:
                batch.bid_logs.append(entry)

    def _creation(self, entry: RpcLog) -> ProjectCreation:
        """A ``ProjectCreated`` log, read in place: ``project`` and ``owner`` are topics 1 and
        2, ``configHash`` the first data word (``tests/unit/indexer`` checks this against the
        ABI decoder)."""
        topics = entry["topics"]
        return ProjectCreation(
            project_address="0x" + topics[1][-40:].lower(),
            owner_address="0x" + topics[2][-40:].lower(),
            config_hash="0x" + entry["data"][2:66].lower(),
            block_number=int(entry["blockNumber"], 16),
            log_index=int(entry["logIndex"], 16),
        )

    async def _fold_stored(self, conn: Connection, batch: _Batch) -> None:
        """Fold the logs of projects indexed before this batch onto their stored rows (the
        rows the change events compare with, read here for every project that may have any)."""
        stored = sorted(
            address
            for address in batch.touched
            if address in batch.known or address not in batch.creations
        )
        before_projects, before_milestones = await repo.current_state(conn, stored)
        batch.before_projects = before_projects
        batch.before_milestones = before_milestones
        if not batch.later:
            return
        milestones: dict[str, list[repo.StoredRow]] = {}
        for (address, _), milestone in before_milestones.items():
            milestones.setdefault(address, []).append(milestone)
        existing = await repo.existing_creations(conn, sorted(batch.later))
        apply = self.folder.apply
        for address, logs in batch.later.items():
            row = before_projects.get(address)
            creation = existing.get(address)
            if row is None or creation is None:
                log.warning("event from a project never created", extra={"project": address})
                continue
            fold = ProjectFold.from_rows(row, milestones.get(address, []))
            for entry in logs:
                apply(fold, entry)
            batch.folds[address] = fold
            batch.creations.setdefault(address, creation)
        batch.later = {}

    async def _resolve_times(self, batch: _Batch) -> None:
        """The fallback for a dispute resolution whose transaction logged no time: its block's."""
        unresolved: list[tuple[ProjectFold, int, RpcLog]] = []
        for fold in batch.folds.values():
            fold.close_pending()
            unresolved.extend((fold, index, entry) for index, entry in fold.unresolved)
        if not unresolved:
            return
        times = await self._block_times([entry for _, _, entry in unresolved])
        for fold, index, entry in unresolved:
            fold.resolve(index, int(times[int(entry["blockNumber"], 16)].timestamp()))
            fold.unresolved = []

    # --- the batch's writes ---------------------------------------------------------------
    #
    # One connection runs one statement at a time, so the writes overlap this process's work
    # by order: each statement is sent, and the rows, bids or events the next ones need are
    # worked out while the database runs it.

    async def _write_batch(self, conn: Connection, batch: _Batch, end: int) -> list[NewEvent]:
        """Upsert the folded rows and the bids; return the change events (the caller writes
        them last)."""
        assert batch.block_time is not None
        block_time = batch.block_time
        bids = await self._read_bids(conn, batch)
        write: asyncio.Task[set[str]] | None = None
        insert: asyncio.Task[None] | None = None
        try:
            for group in _chunks(sorted(batch.folds), WRITE_PROJECTS):
                snapshots: list[Snapshot] = []
                for i, address in enumerate(group):
                    project, milestones = batch.folds[address].rows()
                    snapshots.append((project, milestones, batch.creations[address]))
                    if i % YIELD_EVERY == YIELD_EVERY - 1:
                        # The write in flight may send its next statement (milestones).
                        await asyncio.sleep(0)
                if write is not None:
                    batch.written |= await write
                write = asyncio.create_task(
                    repo.upsert_snapshots(
                        conn, self.config.chain_id, snapshots, block=end, block_time=block_time
                    )
                )
                await asyncio.sleep(0)  # the statement goes out; the next group is built meanwhile
                batch.snapshots.extend(snapshots)
            # While the last group is written: the bid logs decoded and folded.
            decoded, bid_rows = await self._fold_bids(batch, bids)
            if write is not None:
                batch.written |= await write
                write = None
            if decoded:
                insert = asyncio.create_task(bids_repo.insert_events(conn, decoded))
                await asyncio.sleep(0)
            events = snapshot_events(
                batch.before_projects,
                batch.before_milestones,
                batch.snapshots,
                batch.written,
                block=end,
            )
            upserts, deletions = diff_bids(bids.before, bid_rows)
            bid_changes = bid_events(bids.before, bid_rows)
            if insert is not None:
                await insert
            await bids_repo.replace_bids(conn, upserts, deletions)
        finally:
            # A failure on the way (an RPC error while a statement runs) leaves the connection
            # busy: the rollback must wait for the statement, whose own outcome no longer matters.
            await _finish(write, insert)
        return with_bid_events(events, bid_changes, block=end)

    async def _read_bids(self, conn: Connection, batch: _Batch) -> _StoredBids:
        """The stored bid logs and bids of the projects this batch has bid logs of and that
        may have some already (indexed before the batch)."""
        projects = {entry["address"].lower() for entry in batch.bid_logs}
        stored = sorted(p for p in projects if p in batch.folds and p in batch.known)
        if not stored:
            return _StoredBids([], [], {})
        return _StoredBids(
            stored,
            await bids_repo.events_of(conn, stored),
            await bids_repo.bids_of(conn, stored),
        )

    async def _fold_bids(
        self, batch: _Batch, bids: _StoredBids
    ) -> tuple[list[bids_repo.BidEventRow], dict[tuple[str, str], BidRow]]:
        """The batch's bid logs decoded (only those of projects it writes: the registry created
        them) and every affected project's bids folded from its logs."""
        logs = [e for e in batch.bid_logs if e["address"].lower() in batch.folds]
        if not logs:
            return [], {}
        times = await self._block_times(logs)
        decoded = [self._bid_event(entry, times) for entry in logs]
        # A project indexed before is folded from all its logs, one created in this batch from
        # the batch's (it has no others); a replayed log is in both only once.
        seen = {(e.project_address, e.block_number, e.log_index) for e in bids.events}
        events = list(bids.events) + [
            e for e in decoded if (e.project_address, e.block_number, e.log_index) not in seen
        ]
        events.sort(key=lambda e: (e.project_address, e.block_number, e.log_index))
        return decoded, fold_bids(events)

    # --- bids ---------------------------------------------------------------------------------

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
        args = event.decode(entry)
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

    # --- state reads: the fallback where the logs do not reach ----------------------------
    #
    # A rollback resets the projects the dropped blocks touched to their state at the fork
    # block: the logs that built their stored rows are not kept, so the rows are read back from
    # the contract (getProjectState(), and allowlist() for invite-only projects), in JSON-RPC
    # batches, for those projects only. Nothing else reads contract state.

    async def _snapshot(self, conn: Connection, addresses: list[str], block: int) -> list[Snapshot]:
        """Snapshots of ``addresses`` (projects already in the read model) at ``block``."""
        tag = _hex(block)
        order = sorted(addresses)
        calls_in_flight = asyncio.Semaphore(SNAPSHOT_CONCURRENCY)
        chunks = await asyncio.gather(
            *(
                self._read_snapshots(chunk, tag, calls_in_flight)
                for chunk in _chunks(order, SNAPSHOT_PROJECTS)
            )
        )
        existing = await repo.existing_creations(conn, order) if order else {}
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
        return snapshots

    async def _read_snapshots(
        self, addresses: list[str], tag: str, calls_in_flight: asyncio.Semaphore
    ) -> list[tuple[ProjectRow, list[MilestoneRow]]]:
        """``getProjectState()`` of each project, then ``allowlist()`` of the invite-only ones
        (an open project's allowlist is always empty: its bidding access is set once, at
        initialisation, and the contract edits the allowlist of invite-only projects only)."""
        state_data = self.get_state.encode_call()
        async with calls_in_flight:
            raw_states = await self.rpc.batch(
                [("eth_call", [{"to": a, "data": state_data}, tag]) for a in addresses],
                chunk=SNAPSHOT_PROJECTS,
            )
        decode = self.get_state.decode_result
        states: list[ProjectState] = [decode(raw, checksum_addresses=False) for raw in raw_states]
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
            # The projects the dropped blocks touched go back to their state at the fork block,
            # read from the contract (their rows are folded logs, and the dropped logs cannot be
            # taken out again); the rescan from the fork then folds the canonical logs on top.
            survivors = sorted(touched - deleted)
            changed: list[NewEvent] = []
            if survivors:
                await conn.execute(
                    "UPDATE projects SET snapshot_block = $2 WHERE project_address = any($1)",
                    survivors,
                    fork,
                )
                changed = await self._reset_to(conn, survivors, fork)
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
                + with_bid_events(changed, rebid_changes, block=fork),
            )
        if self._known is not None:
            self._known -= deleted
        return True

    async def _reset_to(self, conn: Connection, addresses: list[str], block: int) -> list[NewEvent]:
        """Upsert ``addresses``' state at ``block`` (read from the contract); its events."""
        header: RpcBlockHeader | None = await self.rpc.call(
            "eth_getBlockByNumber", [_hex(block), False]
        )
        if header is None:
            raise RpcError(f"block {block} not found")
        snapshots = await self._snapshot(conn, addresses, block)
        before_projects, before_milestones = await repo.current_state(conn, addresses)
        written = await repo.upsert_snapshots(
            conn,
            self.config.chain_id,
            snapshots,
            block=block,
            block_time=datetime.fromtimestamp(int(header["timestamp"], 16), UTC),
        )
        return snapshot_events(before_projects, before_milestones, snapshots, written, block=block)

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
